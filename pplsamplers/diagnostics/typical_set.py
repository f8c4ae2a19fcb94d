"""Draws far outside the posterior's typical set, read from the potential U at the draws.

A run can visit, now and then, places where the posterior has almost no mass: a Langevin
step that overshoots into a log-volatility of −60, a chain that wanders out along a funnel's
ridge.  There the scores are huge, so the Stein terms of those few draws swamp their own
Monte Carlo error, and a check that scales its tolerance with that error cannot tell the
run from a right one.  The potential at the draws can: exact draws keep U within a bounded
distance of its typical values, whatever the posterior.

**The bound.**  Of the usual posteriors, the multivariate Cauchy has the heaviest upper tail
of U in D dimensions: U = (D + 1)/2 · log(1 + r²), so P(U − median > t) ≈ C √D e^{−t/(D+1)}
(a Gaussian's χ²_D/2 tail is far lighter; a funnel's or a scale mixture's lies in between).
:func:`outlying_bound` keeps the chance that one of m exact draws passes it below
:data:`~pplsamplers.diagnostics.multiplicity.FAMILY_ERROR` for that tail:
t = (D + 1) · log((D + 1) m / FAMILY_ERROR).  The centre is the lowest chain median of U,
so that a chain that sits wholly in a bad region is measured from the good ones.  Where U is
a minibatch estimate, each draw's excess is first lowered by a normal quantile of its own
estimated noise.

Far draws fail the run where they matter: where they alone move some coordinate's mean or
sd by more than the Stein check's tolerances (measured against the draws without them), or
where they are more than ``MAX_REJECTED_FRACTION`` (0.1 %) of the draws, a mass the
posterior has nowhere, as for rejected steps.  One stray draw among thousands (a PDMP event
whose bound fell short) is a blemish, not a wrong run.

Examples
--------
>>> import numpy as np
>>> x = np.random.default_rng(0).normal(size=(2, 1000, 10))     # N(0, I), D = 10
>>> u = 0.5 * np.sum(x**2, -1)
>>> names = tuple(f"x[{j}]" for j in range(10))
>>> outlying_failure(u, None, x, names) is None
True
>>> x[1, :20, 0] = 60.0                                          # 1 % of the draws 60 sds out
>>> u = 0.5 * np.sum(x**2, -1)
>>> print(outlying_failure(u, None, x, names)[1])  # doctest: +NORMALIZE_WHITESPACE
20 of 2000 draws lie 1.81e+03 nats above the typical potential (bound 161: places of
almost no posterior mass), which alone move x[0]'s mean 0.59 sd and its sd ×5.96
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from pplsamplers.diagnostics.fixes import MAX_REJECTED_FRACTION
from pplsamplers.diagnostics.multiplicity import FAMILY_ERROR


def outlying_bound(dim: int, draws: int) -> float:
    """Nats above the typical potential that no exact draw of ``draws`` should pass (module
    docstring).

    >>> round(outlying_bound(1, 400)), round(outlying_bound(200, 400))
    (23, 3196)
    """
    return (dim + 1) * math.log((dim + 1) * max(draws, 1) / FAMILY_ERROR)


def outlying_failure(
    values: np.ndarray,
    noise: np.ndarray | None,
    draws: np.ndarray,
    names: tuple[str, ...],
    tolerance: tuple[float, float] = (0.2, 0.2),
) -> tuple[str, str, str] | None:
    """``(check, message, fix key)`` of ``self_check`` when some draws' potential ``values``
    (chains, n; NaN where not known) lie beyond :func:`outlying_bound` above the lowest chain
    median, after subtracting a normal quantile of their estimated sd ``noise`` (same shape;
    ``None``: exact), and those draws alone move a coordinate of ``draws`` (chains, n, D) by
    more than ``tolerance`` = (mean in sds, relative sd), as judged without them, or are more
    than ``MAX_REJECTED_FRACTION`` of the draws; else ``None``.  Non-finite values are left to
    the non-finite check."""
    values = np.asarray(values, float)
    known = np.isfinite(values)
    if values.shape != draws.shape[:2] or np.sum(known) < 4:
        return None
    count = int(np.sum(known))
    centre = np.nanmin(np.nanmedian(np.where(known, values, np.nan), axis=1))
    slack = 0.0
    if noise is not None:
        slack = stats.norm.isf(FAMILY_ERROR / count) * np.asarray(noise, float)
    excess = np.where(known, values - centre - slack, -np.inf)
    bound = outlying_bound(draws.shape[-1], count)
    far = excess > bound
    if not np.any(far):
        return None
    every, typical = draws[known], draws[known & ~far]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        sd = typical.std(0) if len(typical) > 1 else np.zeros(draws.shape[-1])
        shift = np.abs(every.mean(0) - typical.mean(0)) / sd
        widen = every.std(0) / sd - 1.0
    moved = np.fmax(shift / tolerance[0], widen / tolerance[1])
    moved = np.where(np.isnan(moved), np.inf, moved)  # sd 0 without them: nothing typical
    j = int(np.argmax(moved))
    if moved[j] <= 1.0 and np.sum(far) <= MAX_REJECTED_FRACTION * count:
        return None
    effect = (
        f"which alone move {names[j]}'s mean {shift[j]:.3g} sd and its sd ×{1.0 + widen[j]:.3g}"
        if moved[j] > 1.0
        else f"more than {MAX_REJECTED_FRACTION:.1%} of the draws"
    )
    return (
        "outlying",
        f"{int(np.sum(far))} of {count} draws lie {float(np.max(excess)):.3g} nats above the "
        f"typical potential (bound {bound:.0f}: places of almost no posterior mass), {effect}",
        "outlying",
    )


__all__ = ["outlying_bound", "outlying_failure"]
