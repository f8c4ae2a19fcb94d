"""The drift check: chains that left the Gaussian the set-up found the posterior in.

The Stein identities of :mod:`~pplsamplers.diagnostics.stein_identities` are local: they hold
for draws from any distribution that is stationary where the draws are, so chains that sit
in a region of the posterior that holds little of its mass (the wide, shrunk region of a
scale parameter's posterior at small N, which a step-size kernel's discretisation bias can
push a chain into) pass them.  The set-up has a global view that the draws lack: its
Gaussian x = c + L z (the Laplace approximation or the variational fit the chains start
in) passed an importance check, so the posterior's mass is near it.  Under that Gaussian
|z|² is χ²_D; under a posterior whose importance log-weights against it have sd s ≤ 1, the
median of |z|² moves by about s·√(2D) at most.  A run whose draws have a median |z|² beyond
the χ²_D quantile at 1 − :data:`DRIFT_TAIL` is far from where the set-up measured the mass,
and fails.

The check costs one triangular solve per kept draw.  It applies only where the set-up's
Gaussian describes the posterior (:func:`reference_gaussian`): a checked fit (log-weight
sd ≤ 1) and one mode found by the mode probe, so a run that rightly visits a second mode
is never judged by the Gaussian of the first.

Examples
--------
>>> import numpy as np
>>> from pplsamplers.estimator import Whitening
>>> gaussian = Whitening(np.zeros(3), np.ones(3))
>>> draws = np.random.default_rng(0).normal(size=(2, 500, 3))
>>> drift_failure(draws, gaussian) is None
True
>>> drift_failure(draws + 8.0, gaussian)[0]
'drift'
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from pplsamplers.estimator import Whitening

DRIFT_TAIL = 1e-6
"""Tail probability of χ²_D beyond which the draws' median |z|² fails the check."""


def reference_gaussian(setup: Any) -> Any:
    """The Gaussian (a :class:`~pplsamplers.estimator.Whitening`) by which the drift check may
    judge a run of a kernel with this set-up (a :class:`~pplsamplers.warmup.Setup`, or
    ``None``): its ``checked_gaussian``, a posterior-scale estimate whose importance check
    passed around the only mode the mode probe found; else ``None``."""
    return getattr(setup, "checked_gaussian", None)


def setup_metric(setup: Any) -> Any:
    """The set-up's Gaussian x = c + L z whatever its importance check said (the kernels'
    whitening), for the Stein check's mean term; ``None`` where the set-up did not whiten."""
    return setup.whitening if getattr(setup, "whitened", False) else None


def kernel_check_arguments(kernel: Any) -> dict[str, Any]:
    """What :func:`~pplsamplers.diagnostics.checks.self_check` reads of a pplsamplers kernel
    (its set-up and :class:`~pplsamplers.kernels.spec.KernelSpec`; ``None``, or NUTS, gives
    the defaults): the drift check's ``reference``, the Stein mean term's ``metric`` and
    whether the kernel is ``exact``."""
    setup = getattr(kernel, "setup", None)
    return {
        "reference": reference_gaussian(setup),
        "metric": setup_metric(setup),
        "exact": getattr(getattr(kernel, "spec", None), "exact", True),
    }


def drift_failure(
    draws: np.ndarray, reference: Any, names: tuple[str, ...] | None = None
) -> tuple[str, str, str] | None:
    """``("drift", message, fix key)`` when the median |z|² of ``draws`` (chains, draws, D),
    in the coordinates z of ``reference`` (x = c + L z), is beyond the χ²_D quantile at
    1 − :data:`DRIFT_TAIL`; ``None`` otherwise, or when no draw is finite.  The message names
    the coordinate of x whose median is farthest from c in the Gaussian's sds (``names``)."""
    center, factor = (np.asarray(a, float) for a in reference)
    x = np.asarray(draws, float).reshape(-1, center.shape[0])
    x = x[np.all(np.isfinite(x), axis=1)]
    if x.shape[0] == 0:
        return None
    radius2 = np.sum(np.asarray(Whitening(center, factor).to_z(x)) ** 2, axis=1)
    dim = center.shape[0]
    median, bound = float(np.median(radius2)), float(stats.chi2.isf(DRIFT_TAIL, dim))
    if median <= bound:
        return None
    sds = factor if factor.ndim == 1 else np.sqrt(np.sum(factor**2, axis=1))
    shifts = (np.median(x, axis=0) - center) / sds
    worst = int(np.argmax(np.abs(shifts)))
    name = names[worst] if names is not None else f"coordinate {worst}"
    message = (
        f"the draws sit {math.sqrt(median):.1f} sd from the set-up's Gaussian, where its "
        f"importance check placed the posterior (about {math.sqrt(stats.chi2.median(dim)):.1f} "
        f"sd); {name}'s median is {shifts[worst]:+.1f} sd from its centre"
    )
    return "drift", message, "drift"


__all__ = ["DRIFT_TAIL", "drift_failure", "kernel_check_arguments", "reference_gaussian"]
