"""The one sampler registry: a sampler's name is written here, once.

The CLI, the selector (:mod:`pplsamplers.select`) and the contract tests read
:data:`SAMPLERS`.  A variant (pSGLD, pSBPS, σBPS) is an entry with options on its family's
class, not a class of its own.  Adding a sampler is one kernel file, one class in
:mod:`pplsamplers.infer.samplers` and one entry here (see CONTRIBUTING).  ``AutoSampler`` is
not a sampler of its own: it lives in :mod:`pplsamplers.select` and delegates to one of these.

Examples
--------
>>> from pplsamplers.registry import SAMPLERS, make_kernel
>>> SAMPLERS["psbps"].options
mappingproxy({'preconditioned': True})
>>> from pplsamplers.datasets.tiny import normal_mean
>>> kernel = make_kernel("psgld", normal_mean, step_size=1e-3)
>>> type(kernel).__name__, kernel.options.preconditioned
('SGLD', True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from numpyro.infer import NUTS, DiscreteHMCGibbs
from numpyro.infer.mcmc import MCMCKernel

from pplsamplers.infer import BPS, CSGLD, HAMCMC, SBPS, SGBD, SGLD, SGRLD, Boomerang, CheckedNUTS
from pplsamplers.model import all_data_model, with_support_checks


def full_data_nuts(model: Callable, **options: Any) -> MCMCKernel:
    """NumPyro's NUTS on ``model`` with its plates un-subsampled (NUTS needs all the data).

    Minibatch options are refused with the reason; ``discrete=True`` wraps it in
    ``DiscreteHMCGibbs``; ``check_support=("y",)`` makes the density zero where an observed
    value of those sites leaves its support (for supports that depend on the latents, which
    NumPyro checks only with ``validate_args=True``).  The run checks itself as it ends
    (:class:`~pplsamplers.infer.checked_nuts.CheckedNUTS`), except inside ``DiscreteHMCGibbs``.
    """
    options = {k: v for k, v in options.items() if v is not None}
    for name in ("subsample_size", "data_plate", "precondition", "setup"):
        options.pop(name, None)
    if "step_size" in options:
        raise ValueError("NUTS adapts its own step size; drop step_size (--step-size).")
    if options.pop("control_variate", None) not in (None, False, "auto"):
        raise ValueError("control_variate applies to minibatch kernels, not NUTS.")
    discrete = options.pop("discrete", False)
    edges = tuple(options.pop("check_support", ()))
    checked = all_data_model(with_support_checks(model, edges))
    if discrete:  # NumPyro's Gibbs steps hold NUTS's state inside their own
        return DiscreteHMCGibbs(NUTS(checked, **options))
    return CheckedNUTS(checked, exact_scores=not edges, **options)


class SamplerSpec(NamedTuple):
    """One registered sampler.

    Parameters
    ----------
    name
        The registry name (CLI ``--sampler``, AutoSampler candidates).
    build
        ``(model, **options) -> MCMCKernel``: the sampler's class, or a factory.
    tuned_params
        The tunables its warmup adapts (documentation and the selector's explanations).
    bias_option
        An exact sampler's option that sets a small bias it accepts for speed, which shrinks
        as the option grows (SBPS's ``k``, Pakman et al. 2017 §4.1); empty where there is none.
    options
        The options that make this entry a variant of ``build`` (pSGLD: SGLD with
        ``preconditioned=True``).
    supports_control_variate
        Whether control variates are valid and useful for it.
    minibatch
        Whether it runs on minibatches (NUTS does not).
    selectable
        Whether ``AutoSampler`` considers it.

    Examples
    --------
    >>> spec = SAMPLERS["psgld"]
    >>> spec.build.__name__, dict(spec.options), spec.minibatch, spec.exact
    ('SGLD', {'preconditioned': True}, True, False)
    """

    name: str
    build: Callable[..., MCMCKernel]
    tuned_params: tuple[str, ...]
    bias_option: str = ""
    options: Mapping[str, Any] = MappingProxyType({})
    supports_control_variate: bool = True
    minibatch: bool = True
    selectable: bool = True

    @property
    def exact(self) -> bool:
        """Whether it targets the exact posterior, as opposed to a fixed-step discretisation
        bias (SGLD, SGBD, HAMCMC): the kernel's own declaration, ``KernelSpec.exact`` at
        this entry's options, which the self-check reads too.  Full-data NUTS is exact."""
        declare = getattr(self.build, "declare", None)
        if declare is None:
            return True
        return bool(declare(self.build.Options(**self.options)).exact)


PRECONDITIONED = MappingProxyType({"preconditioned": True})
"""The options of the preconditioned variants (pSGLD, pSBPS, σBPS)."""

_PDMP = ("sample_interval", "refresh_rate")
_SPECS = (
    SamplerSpec("nuts", full_data_nuts, ("step_size", "mass_matrix"),
                supports_control_variate=False, minibatch=False),
    SamplerSpec("boomerang", Boomerang, ("sample_interval",)),
    SamplerSpec("hamcmc", HAMCMC, ("step_size",)),
    SamplerSpec("psbps", SBPS, (*_PDMP, "preconditioner"), bias_option="k",
                options=PRECONDITIONED),
    SamplerSpec("sbps", SBPS, _PDMP, bias_option="k"),
    SamplerSpec("sgbd", SGBD, ("step_size",)),
    SamplerSpec("sigmabps", BPS, ("sample_interval", "t_init", "horizon", "direction_scale"),
                options=PRECONDITIONED),
    SamplerSpec("bps", BPS, ("sample_interval", "t_init", "horizon")),
    SamplerSpec("psgld", SGLD, ("inverse_metric",), options=PRECONDITIONED),
    SamplerSpec("sgld", SGLD, ("step_size",)),
    SamplerSpec("csgld", CSGLD, (), selectable=False),
    SamplerSpec("sgrld", SGRLD, (), selectable=False),
)  # fmt: skip

SAMPLERS: Mapping[str, SamplerSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
"""``name -> SamplerSpec``, in the selector's tie-break order (most specialised first)."""


def make_kernel(name: str, model: Callable, **options: Any) -> MCMCKernel:
    """Build the sampler registered as ``name`` for ``model`` (the variant's options first,
    then ``options``; ``None`` options are dropped, so the sampler's default applies).  A
    ``setup=`` computed before for the same data (:func:`pplsamplers.warmup.setup`) is used
    instead of computing it again.

    Parameters
    ----------
    name
        A key of :data:`SAMPLERS`, in any case (else ``ValueError``).
    model
        The NumPyro model.
    **options
        Options of the sampler's class (or of :func:`full_data_nuts` for ``"nuts"``).

    Returns
    -------
    MCMCKernel
        The sampler, ready for ``numpyro.infer.MCMC``.

    Examples
    --------
    >>> import numpyro, numpyro.distributions as dist
    >>> def model(y=None):
    ...     mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    ...     with numpyro.plate("data", 100):
    ...         numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)
    >>> kernel = make_kernel("pSGLD", model, step_size=None)  # None: SGLD's default step
    >>> type(kernel).__name__, kernel.options.preconditioned, kernel.options.step_size
    ('SGLD', True, 'auto')
    """
    spec = SAMPLERS.get(name.lower())
    if spec is None:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(sorted(SAMPLERS))}.")
    given = {k: v for k, v in options.items() if v is not None}
    return spec.build(model, **{**spec.options, **given})


def _variant_class(name: str, label: str, summary: str) -> Callable[..., MCMCKernel]:
    """A function that builds the registry's variant ``name``, under its customary ``label``."""

    def build(model: Callable | None = None, **options: Any) -> MCMCKernel:
        # every option as given (precondition=None means no whitening, not the default)
        variant = SAMPLERS[name]
        return variant.build(model, **{**variant.options, **options})

    build.__name__ = build.__qualname__ = label

    spec = SAMPLERS[name]
    family = spec.build.__name__
    build.__doc__ = (
        f"{summary}: :class:`~pplsamplers.{family}` with "
        + ", ".join(f"``{k}={v!r}``" for k, v in spec.options.items())
        + f".  Takes every option of :class:`~pplsamplers.{family}`."
        + "\n\nParameters\n----------\nmodel\n    The NumPyro model (``None`` with ``potential=``)."
        + f"\n**options\n    Options of :class:`~pplsamplers.{family}`, passed as given: one named "
        + "here overrides the variant's own, and ``None`` is kept (``precondition=None``: no "
        + "whitening)."
        + f"\n\nReturns\n-------\n{family}\n    The sampler, ready for ``numpyro.infer.MCMC``."
        + "\n\nExamples\n--------\n>>> import numpyro, numpyro.distributions as dist"
        + "\n>>> def model(y=None):"
        + '\n...     mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))'
        + '\n...     with numpyro.plate("data", 100):'
        + '\n...         numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)'
        + f"\n>>> kernel = {label}(model)  # then MCMC(kernel, ...).run(key, y)"
        + f"\n>>> type(kernel).__name__\n'{family}'"
    )
    return build


PSGLD = _variant_class("psgld", "PSGLD", "pSGLD, RMSprop-preconditioned SGLD")
PSBPS = _variant_class("psbps", "PSBPS", "pSBPS, SBPS with a diagonal RMSprop preconditioner")
SigmaBPS = _variant_class("sigmabps", "SigmaBPS", "σBPS, BPS moving along diag(σ̂) v")


__all__ = [
    "PSBPS",
    "PSGLD",
    "SAMPLERS",
    "SamplerSpec",
    "SigmaBPS",
    "full_data_nuts",
    "make_kernel",
]
