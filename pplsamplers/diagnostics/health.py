"""Convergence and chain health of a run's draws: split R-hat and bulk ESS (ArviZ), and
which chains froze or diverged."""

from __future__ import annotations

import warnings
from typing import Any

import arviz as az
import numpy as np


def convergence(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank-normalised split R-hat and bulk ESS per coordinate (ArviZ); one chain is halved."""
    if draws.shape[0] == 1:
        half = draws.shape[1] // 2
        draws = np.stack([draws[0, :half], draws[0, half : 2 * half]])
    if draws.shape[1] < 4:
        nan = np.full(draws.shape[-1], np.nan)
        return nan, nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(az.rhat(draws)), np.asarray(az.ess(draws, method="bulk"))


def chain_health(draws: np.ndarray, th: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chain: non-finite draw counts, frozen flags, diverged flags, with the thresholds
    ``th`` (:class:`~pplsamplers.diagnostics.checks.Thresholds`)."""
    finite_rows = np.all(np.isfinite(draws), axis=-1)  # (chains, draws)
    nonfinite = np.sum(~finite_rows, axis=1)
    safe = np.where(np.isfinite(draws), draws, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):  # a chain at 1e200 squares to inf
        var = np.var(safe, axis=1)  # (chains, D)
        # zero variance relative to the chain's own location (a frozen chain at 0 included)
        zero_var = np.all(var <= th.frozen_rel_var * np.mean(safe, axis=1) ** 2, axis=1)
    moved = (
        np.mean(np.any(np.diff(draws, axis=1) != 0, axis=-1), axis=1) if draws.shape[1] > 1 else 1.0
    )
    frozen = zero_var | (np.asarray(moved) < th.min_moved)
    # diverged: relative to the centre and robust sd of the tightest healthy chain
    q25, med, q75 = np.percentile(safe, [25, 50, 75], axis=1)  # each (chains, D)
    robust_sd = (q75 - q25) / 1.349
    healthy = (nonfinite == 0) & ~frozen
    diverged = nonfinite > 0
    if np.any(healthy):
        ref = np.flatnonzero(healthy)[np.argmin(np.sum(np.log(robust_sd[healthy] + 1e-300), -1))]
        scale = np.maximum(robust_sd[ref], 1e-12 * (1.0 + np.abs(med[ref])))
        far = np.max(np.abs(safe - med[ref]) / scale, axis=(1, 2))
        diverged = diverged | (far > th.diverged_sds)
    return nonfinite, frozen, diverged


def stuck_coordinates(draws: np.ndarray) -> np.ndarray:
    """(chains, D): the coordinates that never changed over a chain's draws.  No unconstrained
    coordinate of a continuous posterior is constant, so one that is has not been sampled (a
    chain adapted to a funnel's neck, a step below the coordinate's float resolution), while
    R-hat and ESS are undefined on it and pass it over."""
    if draws.shape[1] < 2:
        return np.zeros((draws.shape[0], draws.shape[-1]), bool)
    return np.all(draws[:, 1:] == draws[:, :1], axis=1) & np.all(np.isfinite(draws), axis=1)


def chain_list(label: str, chains: np.ndarray) -> str:
    ids = ", ".join(map(str, np.flatnonzero(chains)))
    return f"chain{'s' if np.sum(chains) > 1 else ''} {ids} {label}"


__all__ = ["chain_health", "chain_list", "convergence", "stuck_coordinates"]
