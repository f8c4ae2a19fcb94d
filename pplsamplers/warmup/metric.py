"""Windowed refinement of the whitening from the chain's own draws.

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
lag-1 autocorrelation, and n̄ their mean: a slowly mixing minibatch chain's draws may be
worth only a few independent ones, and must not overwrite a good Laplace metric.  The weight
is per coordinate because one slow direction hides among fast ones: a mean autocorrelation
over D coordinates stays small when one of them is stuck, so a shared weight would let a
window's tiny spread along a stuck hierarchical scale replace the metric there, and the
scale would then move slower still (measured in ``docs/benchmarks/robustness.md``;
``tests/unit/test_metric.py`` replays it on a four-coordinate window).  C̃ is positive
definite: W^½ C_λ W^½ is positive semi-definite and I − W positive definite (every weight
is below 1).  The chain's position is mapped to the new coordinates (x is unchanged) and
the kernel is re-initialised there.  A non-finite update (a diverged window) keeps the old
metric.  Where the shared warmup's Laplace check finds the first metric accurate already
(``REFINE_ABOVE_MISFIT``), the chains keep it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from numpyro.infer.hmc_util import build_adaptation_schedule

from pplsamplers.estimator import Whitening
from pplsamplers.kernels import welford
from pplsamplers.kernels.welford import WindowStats, accumulate
from pplsamplers.types import Array

REGULARIZATION = 5.0
"""Stan's prior weight of the current metric, in draws (eq. 1)."""

REFINE_ABOVE_MISFIT = 0.1
"""The chains refine the library's preconditioner only where the shared warmup's Laplace
check (:func:`~pplsamplers.warmup.variational.laplace_misfit`, the sd of the importance
log-weights of Laplace draws) exceeds this.  Below it the Gaussian approximation already
matches the posterior more closely than a window can estimate it: a window's few dozen
warmup draws of a minibatch chain are worth fewer independent ones, which fix a variance only
roughly, so refining there only adds noise.  Models without groups read well below the
threshold and hierarchical ones far above it (measured in ``docs/benchmarks/robustness.md``)."""


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


def init_stats(metric: Whitening) -> WindowStats:
    """Empty window statistics shaped like ``metric`` (a dense scatter for a dense factor)."""
    return welford.init_stats(metric.center, dense=metric.factor.ndim == 2)


def refine(metric: Whitening, stats: WindowStats) -> tuple[Whitening, Array, Array, Array]:
    """The refined metric (eq. 1) and the map of positions to it.

    Returns ``(metric, shift, root, ok)``: z_new = root⁻¹ (z − shift) for a dense root
    (lower triangular), (z − shift) / root for a diagonal one; ``ok`` is False (and the
    metric unchanged, root = 1, shift = 0) when the window's statistics are not finite.
    """
    count = jnp.maximum(stats.count, 2.0)
    dim = metric.center.shape[0]
    effective = welford.effective_count(stats)
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
    refined = Whitening(keep(center, metric.center), keep(factor, metric.factor))
    identity = jnp.eye(dim, dtype=root.dtype) if root.ndim == 2 else jnp.ones_like(root)
    return refined, keep(shift, jnp.zeros_like(shift)), keep(root, identity), ok


def map_position(z: Array, shift: Array, root: Array) -> Array:
    """z in the old coordinates -> the same x in the refined ones (see :func:`refine`)."""
    if root.ndim == 2:
        return jax.scipy.linalg.solve_triangular(root, z - shift, lower=True)
    return (z - shift) / root


__all__ = [
    "accumulate",
    "init_stats",
    "map_position",
    "refine",
    "refinement",
    "window_ends",
    "window_start",
]
