"""Windowed refinement of the preconditioner from the chain's own draws (DESIGN §8).

The shared warmup whitens the potential with the Laplace approximation at the mode,
x = c + L z.  Where the posterior is far from Gaussian (a hierarchical scale, whose joint
mode sits far from the posterior mass), that first metric is wrong in place and in scale.
As NUTS does with its mass matrix, each chain then refines (c, L) from its own warmup
draws, in NumPyro's windows (:func:`numpyro.infer.hmc_util.build_adaptation_schedule`:
an initial buffer, doubling slow windows, a terminal buffer for the kernel's own knob).
At the end of each slow window, with m and C the mean and covariance of the window's
draws of z (Welford),

    C̃ = W^½ C_λ W^½ + (I − W),   W = diag(nⱼ / (nⱼ + 5)),                            (1)
    C_λ = (1 − λ) C + λ diag(C),   λ = min(1, D / n̄),
    c ← c + L W m,    L ← L chol(C̃)    (a diagonal L: L ← L √diag(C̃)),

Stan's regularisation toward the current metric (I in z, with the weight of five draws)
plus a shrinkage of the correlations when the window has few draws for D.  nⱼ is
coordinate j's *effective* number of draws in the window, n (1 − ρⱼ)/(1 + ρⱼ) with ρⱼ its
lag-1 autocorrelation, and n̄ their mean: a slowly mixing minibatch chain's 100 draws may be
worth 3, and must not overwrite a good Laplace metric.  The weight is per coordinate because
one slow direction hides among fast ones: a mean autocorrelation over D coordinates stays
small when one of them is stuck, so a shared weight let a window's tiny spread along a
stuck hierarchical scale replace the metric there, and the scale then moved slower still
(the Boomerang on the robustness suite's hierarchical model read 0.66 sd on τ at seed 4 in
2 × 500 draws with a shared weight; 0.11 with per-coordinate weights, and 0.11–0.16 at
five seeds; ``test_metric.py`` replays it on a four-coordinate window).  C̃ is positive
definite: W^½ C_λ W^½ is positive semi-definite and I − W positive definite (every weight
is below 1).  The chain's position is mapped to the new coordinates (x is unchanged) and
the kernel is re-initialised there.  A non-finite update (a diverged window) keeps the old
metric.  Where the shared warmup's Laplace check finds the first metric accurate already
(``REFINE_ABOVE_MISFIT``), the chains keep it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.hmc_util import build_adaptation_schedule

from pplsamplers.types import Array

REGULARIZATION = 5.0
"""Stan's prior weight of the current metric, in draws (eq. 1)."""

REFINE_ABOVE_MISFIT = 0.1
"""The chains refine the library's preconditioner only where the shared warmup's Laplace
check (:func:`~pplsamplers.potential.variational.laplace_misfit`, the sd of 16 importance
log-weights) exceeds this.  Below it the Gaussian approximation already matches the
posterior more closely than a window can estimate it: 25–100 warmup draws of a minibatch
chain are worth 5–30 independent ones, which fix a variance to ±25–60 %.  Refining there
only added noise: on the location model of ``benchmarks/model_sweep.py`` (log-weight sd
0.012) one HAMCMC chain's refined scale of μ came out 0.29 for a posterior sd of 0.39, and
its bulk ESS fell to 19 in 2 × 500 draws (150–257 at four other seeds).  Every model of the
sweep and of the robustness suite without groups reads 0.008–0.02 (0.23 for ``ordered``);
the hierarchical ones read above 1."""


class Metric(NamedTuple):
    """x = ``center`` + ``factor`` z; ``factor`` is a (D,) diagonal or (D, D) lower
    triangular matrix."""

    center: Array
    factor: Array


class MetricStats(NamedTuple):
    """Welford accumulators of the current window's draws of z, and the lag-1 products
    that give their autocorrelation (each coordinate's effective number of draws)."""

    count: Array
    mean: Array
    scatter: Array
    previous: Array
    lag_product: Array


def refinement(misfit: float | None) -> tuple[bool, str]:
    """Whether the chains refine the preconditioner (``REFINE_ABOVE_MISFIT``) given the
    Laplace check's ``misfit`` (``None``: not checked, refine), and the note that says so.

    Examples
    --------
    >>> refinement(0.01)[0], refinement(2.0)[0], refinement(None)[0]
    (False, True, True)
    """
    if misfit is not None and misfit <= REFINE_ABOVE_MISFIT:
        return False, (
            f"not refined from the chains' draws (Laplace log-weight sd {misfit:.2g} <= "
            f"{REFINE_ABOVE_MISFIT:g}: already accurate)"
        )
    return True, "refined from each chain's draws in NumPyro's warmup windows"


def window_ends(num_warmup: int) -> tuple[int, ...]:
    """The 0-based iterations after which the metric is refined: the ends of NumPyro's slow
    windows (none when the warmup is too short for one)."""
    windows = build_adaptation_schedule(int(num_warmup)) if num_warmup > 0 else []
    return tuple(int(w.end) for w in windows[1:-1])


def window_start(num_warmup: int) -> int:
    """The first iteration whose draw enters a window (the end of the initial buffer)."""
    windows = build_adaptation_schedule(int(num_warmup)) if num_warmup > 0 else []
    return int(windows[1].start) if len(windows) > 2 else int(num_warmup)


def init_stats(metric: Metric) -> MetricStats:
    """Empty accumulators shaped like ``metric`` (dense scatter for a dense factor)."""
    dim = metric.center.shape[0]
    zero = jnp.zeros((), metric.center.dtype)
    shape = (dim, dim) if metric.factor.ndim == 2 else (dim,)
    empty = jnp.zeros_like(metric.center)
    return MetricStats(zero, empty, jnp.zeros(shape, zero.dtype), empty, empty)


def accumulate(stats: MetricStats, z: Array) -> MetricStats:
    """Add one draw z to the window's mean and scatter (Welford)."""
    count = stats.count + 1
    delta = z - stats.mean
    mean = stats.mean + delta / count
    if stats.scatter.ndim == 2:
        scatter = stats.scatter + jnp.outer(delta, z - mean)
    else:
        scatter = stats.scatter + delta * (z - mean)
    lag_product = stats.lag_product + jnp.where(stats.count > 0, z * stats.previous, 0.0)
    return MetricStats(count, mean, scatter, z, lag_product)


def effective_count(stats: MetricStats) -> Array:
    """Per coordinate, n (1 − ρ) / (1 + ρ), with ρ its lag-1 autocorrelation (an AR(1)
    effective sample size): the weight the window's estimate of that coordinate deserves."""
    count = jnp.maximum(stats.count, 2.0)
    variance = jnp.diag(stats.scatter) if stats.scatter.ndim == 2 else stats.scatter
    variance = variance / (count - 1)
    lagged = stats.lag_product / (count - 1) - stats.mean**2
    rho = jnp.clip(lagged / jnp.maximum(variance, 1e-30), 0.0, 0.99)
    return jnp.maximum(1.0, stats.count * (1.0 - rho) / (1.0 + rho))


def refine(metric: Metric, stats: MetricStats) -> tuple[Metric, Array, Array, Array]:
    """The refined metric (eq. 1) and the map of positions to it.

    Returns ``(metric, shift, root, ok)``: z_new = root⁻¹ (z − shift) for a dense root
    (lower triangular), (z − shift) / root for a diagonal one; ``ok`` is False (and the
    metric unchanged, root = 1, shift = 0) when the window's statistics are not finite.
    """
    count = jnp.maximum(stats.count, 2.0)
    dim = metric.center.shape[0]
    effective = effective_count(stats)
    weight = effective / (effective + REGULARIZATION)  # per coordinate
    if stats.scatter.ndim == 2:
        covariance = stats.scatter / (count - 1)
        covariance = 0.5 * (covariance + covariance.T)
        shrink = jnp.minimum(1.0, dim / jnp.mean(effective))
        diagonal = jnp.diag(jnp.diag(covariance))
        shrunk = (1.0 - shrink) * covariance + shrink * diagonal
        root_weight = jnp.sqrt(weight)
        regularized = root_weight[:, None] * shrunk * root_weight + jnp.diag(1.0 - weight)
        root = jnp.linalg.cholesky(regularized)
    else:
        variance = stats.scatter / (count - 1)
        root = jnp.sqrt(weight * variance + (1.0 - weight))
    shift = weight * stats.mean
    if metric.factor.ndim == 2:
        dense_root = root if root.ndim == 2 else jnp.diag(root)
        factor = metric.factor @ dense_root
        center = metric.center + metric.factor @ shift
    else:
        factor = metric.factor * root
        center = metric.center + metric.factor * shift
    ok = jnp.all(jnp.isfinite(factor)) & jnp.all(jnp.isfinite(center)) & (stats.count >= 2)
    keep = lambda new, old: jnp.where(ok, new, old)
    refined = Metric(keep(center, metric.center), keep(factor, metric.factor))
    identity = jnp.eye(dim, dtype=root.dtype) if root.ndim == 2 else jnp.ones_like(root)
    return refined, keep(shift, jnp.zeros_like(shift)), keep(root, identity), ok


def map_position(z: Array, shift: Array, root: Array) -> Array:
    """z in the old coordinates -> the same x in the refined ones (see :func:`refine`)."""
    if root.ndim == 2:
        return jax.scipy.linalg.solve_triangular(root, z - shift, lower=True)
    return (z - shift) / root


__all__ = [
    "Metric",
    "MetricStats",
    "accumulate",
    "effective_count",
    "init_stats",
    "map_position",
    "refine",
    "refinement",
    "window_ends",
    "window_start",
]
