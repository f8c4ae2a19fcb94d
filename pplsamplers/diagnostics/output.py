"""Output a user keeps: ArviZ's DataTree with pplsamplers' own attributes."""

from __future__ import annotations

from typing import Any

import arviz as az


def to_arviz(mcmc: Any, **kwargs: Any) -> Any:
    """``az.from_numpyro(mcmc)`` plus pplsamplers attributes (kernel, AutoSampler decision).

    ``kwargs`` go to :func:`arviz.from_numpyro` (e.g. ``log_likelihood=True`` for the
    pointwise full-data log-likelihood, which is N values per draw).

    Examples
    --------
    >>> idata = to_arviz(mcmc)                      # doctest: +SKIP
    >>> print(idata.attrs["pplsamplers_auto_explanation"])   # doctest: +SKIP
    """
    idata = az.from_numpyro(mcmc, **kwargs)
    sampler = mcmc.sampler
    idata.attrs["pplsamplers_kernel"] = type(sampler).__name__
    decision = getattr(sampler, "decision", None)
    if decision is not None:
        idata.attrs.update(decision.to_attrs())
    return idata


__all__ = ["to_arviz"]
