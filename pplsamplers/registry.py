"""The one sampler registry: a sampler's name is written here, once (DESIGN §3.3).

The CLI, the selector (:mod:`pplsamplers.select`) and the contract tests read
:data:`SAMPLERS`.  Adding a sampler is one kernel file, one declaration on the generic adapter
and one line here (see CONTRIBUTING).  ``AutoSampler`` is not a sampler of its own: it lives in
:mod:`pplsamplers.select` and delegates to one of these.

Examples
--------
>>> from pplsamplers.registry import SAMPLERS, make_kernel
>>> SAMPLERS["sbps"].supports_control_variate
True
>>> from models.logistic_regression import model
>>> type(make_kernel("sgld", model, step_size=1e-3)).__name__
'SGLD'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from numpyro.infer import NUTS, DiscreteHMCGibbs
from numpyro.infer.mcmc import MCMCKernel

from pplsamplers.infer import (
    BPS,
    CSGLD,
    HAMCMC,
    PSBPS,
    PSGLD,
    SBPS,
    SGBD,
    SGLD,
    SGRLD,
    Boomerang,
    SigmaBPS,
)
from pplsamplers.potential import all_data_model, with_support_checks


def full_data_nuts(model: Callable, **options: Any) -> MCMCKernel:
    """NumPyro's NUTS on ``model`` with its plates un-subsampled (NUTS needs all the data).

    Minibatch options are refused with the reason; ``discrete=True`` wraps it in
    ``DiscreteHMCGibbs``; ``check_support=("y",)`` makes the density zero where an observed
    value of those sites leaves its support (for supports that depend on the latents, which
    NumPyro checks only with ``validate_args=True``).
    """
    options = {k: v for k, v in options.items() if v is not None}
    for name in ("subsample_size", "data_plate", "precondition"):
        options.pop(name, None)
    if "step_size" in options:
        raise ValueError("NUTS adapts its own step size; drop step_size (--step-size).")
    if options.pop("control_variate", None) not in (None, False, "auto"):
        raise ValueError("control_variate applies to minibatch kernels, not NUTS.")
    discrete = options.pop("discrete", False)
    checked = with_support_checks(model, tuple(options.pop("check_support", ())))
    kernel = NUTS(all_data_model(checked), **options)
    return DiscreteHMCGibbs(kernel) if discrete else kernel


class SamplerSpec(NamedTuple):
    """One registered sampler.

    Attributes
    ----------
    name
        The registry name (CLI ``--sampler``, AutoSampler candidates).
    build
        ``(model, **options) -> MCMCKernel``: the sampler's class, or a factory.
    supports_control_variate
        Whether control variates are valid and useful for it.
    tuned_params
        The tunables its warmup adapts (documentation and the selector's explanations).
    exact
        Whether it targets the exact posterior (up to a controllable bias such as SBPS's k),
        as opposed to a fixed-step discretisation bias (SGLD, SGBD, HAMCMC).
    minibatch
        Whether it runs on minibatches (NUTS does not).
    selectable
        Whether ``AutoSampler`` considers it.
    """

    name: str
    build: Callable[..., MCMCKernel]
    supports_control_variate: bool
    tuned_params: tuple[str, ...]
    exact: bool
    minibatch: bool = True
    selectable: bool = True


_SPECS = (
    SamplerSpec("nuts", full_data_nuts, False, ("step_size", "mass_matrix"), True, False),
    SamplerSpec("boomerang", Boomerang, True, ("sample_interval",), True),
    SamplerSpec("hamcmc", HAMCMC, True, ("step_size",), False),
    SamplerSpec("psbps", PSBPS, True, ("sample_interval", "refresh_rate", "preconditioner"), True),
    SamplerSpec("sbps", SBPS, True, ("sample_interval", "refresh_rate"), True),
    SamplerSpec("sgbd", SGBD, True, ("step_size",), False),
    SamplerSpec(
        "sigmabps",
        SigmaBPS,
        True,
        ("sample_interval", "t_init", "horizon", "direction_scale"),
        True,
    ),
    SamplerSpec("bps", BPS, True, ("sample_interval", "t_init", "horizon"), True),
    SamplerSpec("psgld", PSGLD, True, ("inverse_metric",), False),
    SamplerSpec("sgld", SGLD, True, ("step_size",), False),
    SamplerSpec("csgld", CSGLD, True, (), False, selectable=False),
    SamplerSpec("sgrld", SGRLD, True, (), False, selectable=False),
)

SAMPLERS: dict[str, SamplerSpec] = {spec.name: spec for spec in _SPECS}
"""``name -> SamplerSpec``, in the selector's tie-break order (most specialised first)."""


def make_kernel(name: str, model: Callable, **options: Any) -> MCMCKernel:
    """Build the sampler registered as ``name`` for ``model``.

    ``None`` options are dropped (the sampler's default applies); options the sampler does not
    take are an error.
    """
    spec = SAMPLERS.get(name.lower())
    if spec is None:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(sorted(SAMPLERS))}.")
    return spec.build(model, **{k: v for k, v in options.items() if v is not None})


__all__ = ["SAMPLERS", "SamplerSpec", "full_data_nuts", "make_kernel"]
