"""Sampler names used by the CLI and the selector, mapped to their NumPyro kernels."""

from __future__ import annotations

from collections.abc import Callable

from numpyro.infer import NUTS, DiscreteHMCGibbs

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
    AutoSampler,
    Boomerang,
    SigmaBPS,
)
from pplsamplers.potential import all_data_model

SAMPLERS: dict[str, Callable] = {
    "sgld": SGLD,
    "psgld": PSGLD,
    "csgld": CSGLD,
    "sbps": SBPS,
    "psbps": PSBPS,
    "bps": BPS,
    "sigmabps": SigmaBPS,
    "boomerang": Boomerang,
    "sgbd": SGBD,
    "hamcmc": HAMCMC,
    "sgrld": SGRLD,
    "nuts": NUTS,
    "auto": AutoSampler,
}
"""``name -> kernel class``; every class takes the model as first argument."""

DEFAULT_SAMPLER = "auto"


def make_kernel(name: str, model: Callable, **options: object):
    """Build the kernel called ``name`` for ``model`` (options the kernel does not take are an error).

    NUTS runs on the model with its plates un-subsampled (it needs the full data set).
    """
    key = name.lower()
    if key not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(sorted(SAMPLERS))}.")
    if key == "nuts":
        options = {k: v for k, v in options.items() if k not in ("subsample_size", "data_plate")}
        if options.pop("step_size", None) is not None:
            raise ValueError("NUTS adapts its own step size; drop --step-size.")
        if options.pop("control_variate", None):
            raise ValueError("control_variate applies to minibatch kernels, not NUTS.")
        discrete = options.pop("discrete", False)
        kernel = NUTS(all_data_model(model), **{k: v for k, v in options.items() if v is not None})
        return DiscreteHMCGibbs(kernel) if discrete else kernel
    options = {k: v for k, v in options.items() if v is not None}
    return SAMPLERS[key](model, **options)


__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "make_kernel"]
