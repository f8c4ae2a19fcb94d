"""How far each coordinate's check statistic may stray by chance when D coordinates are
checked at once: the self-check's bounds that widen with the number of coordinates and
narrow with the number of draws.

A run with 10⁴ group effects, checked on a few hundred kept draws, shows a few coordinates
whose R-hat, bulk ESS or mean lies in the far tail of its sampling distribution even when
every draw is exact.  Each per-coordinate check is therefore a test at level
α_j = ``FAMILY_ERROR`` / (2 m_j), with m_j = S · D_s (S sites, D_s coordinates in coordinate
j's site): the levels sum to ``FAMILY_ERROR`` over the run (a weighted Bonferroni bound), and
every *site* gets an equal share of it.  A scalar such as a hierarchical scale τ is checked
almost as strictly as in a small model, while each of 10⁴ group effects gets the slack that
10⁴ chances need.

* **R-hat.**  For independent draws in M split chains of n draws, the split R-hat satisfies
  R² = (n − 1)/n + F/n with F ~ F(M − 1, M(n − 1)) (between- over within-chain variance);
  :func:`rhat_bound` is its quantile at α_j/2 (ArviZ reports the larger of the bulk and the
  folded R-hat).
* **Bulk ESS.**  ArviZ's estimate has a heavy lower tail at a few hundred draws (Geyer's
  truncation sums noisy autocorrelations).  On independent normal draws (2 × 50 to
  4 × 500 draws, 2·10⁴ coordinates) its quantile at level p stays above
  N·exp(−:data:`ESS_TAIL` · ln(1/p) / √N); :func:`ess_floor` is that bound at α_j.
* **Mean and sd.**  The Stein check reads the mean error of the draws' own mean, whose Monte
  Carlo error 1/√ESS (in posterior sds) the per-draw Stein terms do not contain, and the sd
  ratio, whose error is √((κ − 1)/(4·ESS)) (κ the kurtosis); :func:`chance_error` combines
  them with the Stein MCSE.

Examples
--------
>>> import numpy as np
>>> m = coordinate_multiplicity(("tau", "z[0]", "z[1]", "z[2]"))
>>> m.tolist()
[2, 6, 6, 6]
>>> bound = rhat_bound(2, 100, np.array([1, 40_000]))  # τ, and one of 10⁴ group effects
>>> np.round(bound, 3).tolist()
[1.05, 1.116]
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
from scipy import stats

FAMILY_ERROR = 0.01
"""Chance that an exact run fails a per-coordinate check on some coordinate."""

ESS_TAIL = 3.5
"""The constant of :func:`ess_floor`'s bound, from independent normal draws (module
docstring); ``tests/unit/test_multiplicity.py`` re-checks it."""


def coordinate_multiplicity(names: tuple[str, ...] | list[str]) -> np.ndarray:
    """m_j = S · D_s per coordinate: S sites (the name before ``[``), D_s coordinates in
    coordinate j's site."""
    sites = [name.split("[", 1)[0] for name in names]
    sizes = Counter(sites)
    return np.array([len(sizes) * sizes[site] for site in sites], dtype=np.int64)


def level(multiplicity: np.ndarray) -> np.ndarray:
    """The two-sided test level α_j = ``FAMILY_ERROR`` / (2 m_j) of each coordinate."""
    return FAMILY_ERROR / (2.0 * np.maximum(np.asarray(multiplicity, float), 1.0))


def slack_z(multiplicity: np.ndarray, z: float) -> np.ndarray:
    """The MCSEs of slack of each coordinate's Stein check: ``z``, or the two-sided normal
    quantile at α_j where that is larger.

    >>> np.round(slack_z(np.array([5, 1000]), 3.0), 2).tolist()
    [3.09, 4.42]
    """
    return np.maximum(z, stats.norm.isf(level(multiplicity)))


def rhat_bound(chains: int, draws: int, multiplicity: np.ndarray, base: float = 1.05) -> np.ndarray:
    """The largest split R-hat each coordinate may show by chance: ``base``, or the
    F-distribution bound at α_j/2 for independent draws in ``chains`` chains of ``draws``
    (one chain is halved first, as :func:`~pplsamplers.diagnostics.health.convergence` does).
    """
    if chains == 1:
        chains, draws = 2, draws // 2
    split, n = 2 * chains, max(draws // 2, 2)
    f = stats.f.isf(level(multiplicity) / 2.0, split - 1, split * (n - 1))
    return np.maximum(base, np.sqrt((n - 1) / n + f / n))


def ess_floor(total: int, multiplicity: np.ndarray, base: float = 100.0) -> np.ndarray:
    """The bulk ESS below which each coordinate fails: ``base``, or less where ``total``
    independent draws could show less at level α_j (module docstring).

    >>> np.round(ess_floor(2000, np.array([10, 40_000])), 1).tolist()
    [100.0, 100.0]
    >>> np.round(ess_floor(200, np.array([10, 40_000])), 1).tolist()
    [30.5, 3.9]
    """
    log_odds = np.log(1.0 / level(multiplicity))
    return np.minimum(base, total * np.exp(-ESS_TAIL * log_odds / math.sqrt(max(total, 1))))


def chance_error(
    stein_mcse: np.ndarray,
    ess: np.ndarray,
    kurtosis: np.ndarray | None = None,
    averaged: bool = False,
) -> np.ndarray:
    """The Monte Carlo error of a Stein mean error (``kurtosis`` ``None``) or sd ratio: the
    Stein terms' MCSE and the realised error of the draws' own mean, 1/√ESS, or own sd,
    √((κ − 1)/(4·ESS)), in quadrature (NaN ESS: the Stein MCSE alone).  ``averaged``: of the
    scale error c² − 1 averaged over the D coordinates, Σ_j (κ_j − 1)/ESS_j / D² for
    coordinates taken as independent (a scalar)."""
    ess = np.where(np.isfinite(ess) & (ess > 0), ess, np.inf)
    if kurtosis is None:
        return np.sqrt(np.asarray(stein_mcse, float) ** 2 + 1.0 / ess)
    own = np.maximum(kurtosis - 1.0, 0.0) / ess
    own = np.nanmean(own) / own.size if averaged else own / 4.0
    return np.sqrt(np.asarray(stein_mcse, float) ** 2 + own)


def kurtosis_of(draws: np.ndarray) -> np.ndarray:
    """Per coordinate, the kurtosis E(x − x̄)⁴ / var² of ``draws`` (chains, n, D): 3 if
    normal."""
    centred = draws.reshape(-1, draws.shape[-1])
    centred = centred - centred.mean(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mean(centred**4, 0) / np.mean(centred**2, 0) ** 2


def coherent_tolerance(dim: int, shift: float = 0.2) -> float:
    """``shift · √(2 / dim)``: the largest |scale error averaged over ``dim`` coordinates| e
    that passes before its MCSE term.  The step-size kernels (SGLD, SGBD, HAMCMC) inflate
    every variance a little at once, each coordinate within its own tolerance, and a scale
    parameter coupled to many coordinates moves to compensate: over G coordinates its
    relative posterior sd is about 1/√(2G), so e ≈ 2(c − 1) moves it by about e·√(G/2) sds.
    The tolerance lets one coupled to all ``dim`` coordinates move by ``shift`` sds
    (``Thresholds.tol_coherent_shift``), whatever the model.

    >>> round(coherent_tolerance(304), 4), round(coherent_tolerance(50), 3)
    (0.0162, 0.04)
    """
    return shift * math.sqrt(2.0 / dim)


COHERENT_MIN_DIM = 10
"""From this many coordinates on the averaged scale error may reach
:func:`coherent_tolerance`; from 2 to 9 it may reach ``Thresholds.tol_coherent_small``."""


def coherent_failure(
    error: float, mcse: float, ess: np.ndarray, kurtosis: np.ndarray, th: Any
) -> tuple[str, str, str] | None:
    """``(check, message, fix key)`` of ``self_check`` when the scale error averaged over the
    D = ``ess.size`` coordinates, ``error`` ± ``mcse``, exceeds its tolerance by more than
    ``th.z`` times its MCSE and its chance error (:func:`chance_error`); else ``None``.

    The tolerance is :func:`coherent_tolerance` from :data:`COHERENT_MIN_DIM` coordinates on.
    Below that no scale parameter couples to many coordinates, and the average is a sharper
    reading of what every coordinate's sd check sees: it fails when every sd is more than
    about 10 % off at once (``th.tol_coherent_small``, (1.1)² − 1), the per-coordinate check's
    inner edge, which that check, with its wider Monte Carlo error, lets through.  One
    coordinate is left to its own sd check.

    >>> from pplsamplers.diagnostics.checks import Thresholds
    >>> ess, kurtosis = np.full(9, 4000.0), np.full(9, 3.0)
    >>> coherent_failure(0.56, 0.09, ess, kurtosis, Thresholds())[1]
    'Stein scale error averages +0.56 over 9 coordinates (every sd ×1.249 at once)'
    >>> coherent_failure(0.19, 0.05, ess, kurtosis, Thresholds()) is None
    True
    """
    dim = int(np.size(ess))
    small = dim < COHERENT_MIN_DIM
    tolerance = th.tol_coherent_small if small else coherent_tolerance(dim, th.tol_coherent_shift)
    chance = chance_error(mcse, ess, kurtosis, averaged=True)
    excess = abs(error) - max(tolerance + th.z * mcse, th.z * float(chance))
    if dim < 2 or not excess > 0:  # NaN: no failure
        return None
    message = (
        f"Stein scale error averages {error:+.2f} over {dim} coordinates (every sd "
        f"×{math.sqrt(max(1.0 + error, 0.0)):.3f} at once"
    )
    if not small:
        shift = abs(error) * math.sqrt(dim / 2)
        message += f", which moves a scale parameter coupled to them by about {shift:.1f} sd"
    return "stein_coherent_scale", message + ")", "stein"


__all__ = [
    "COHERENT_MIN_DIM",
    "ESS_TAIL",
    "FAMILY_ERROR",
    "chance_error",
    "coherent_failure",
    "coherent_tolerance",
    "coordinate_multiplicity",
    "ess_floor",
    "kurtosis_of",
    "level",
    "rhat_bound",
    "slack_z",
]
