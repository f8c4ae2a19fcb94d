"""Welford accumulators of a window of draws: their mean, scatter (diagonal or dense) and
lag-1 products, from which each coordinate's effective number of draws follows.  σBPS's
warmup estimates its scales with them, and the chains' metric refinement
(:mod:`pplsamplers.warmup.metric`) its whitening."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from pplsamplers.types import Array


class WindowStats(NamedTuple):
    """Welford accumulators of a window's draws, and the lag-1 products that give their
    autocorrelation."""

    count: Array
    mean: Array
    scatter: Array
    previous: Array
    lag_product: Array


def init_stats(like: Array, dense: bool = False) -> WindowStats:
    """Empty accumulators for draws shaped like ``like`` (``(D,)``); a ``(D, D)`` scatter
    where ``dense``."""
    dim = like.shape[0]
    zero = jnp.zeros((), like.dtype)
    empty = jnp.zeros_like(like)
    scatter = jnp.zeros((dim, dim) if dense else (dim,), like.dtype)
    return WindowStats(zero, empty, scatter, empty, empty)


def accumulate(stats: WindowStats, z: Array) -> WindowStats:
    """Add one draw z to the window's mean and scatter (Welford).

    >>> import jax.numpy as jnp
    >>> stats = init_stats(jnp.zeros(1))
    >>> for z in (1.0, 2.0, 3.0):
    ...     stats = accumulate(stats, jnp.array([z]))
    >>> stats.mean, stats.scatter / (stats.count - 1)
    (Array([2.], dtype=float32), Array([1.], dtype=float32))
    """
    count = stats.count + 1
    delta = z - stats.mean
    mean = stats.mean + delta / count
    if stats.scatter.ndim == 2:
        scatter = stats.scatter + jnp.outer(delta, z - mean)
    else:
        scatter = stats.scatter + delta * (z - mean)
    lag_product = stats.lag_product + jnp.where(stats.count > 0, z * stats.previous, 0.0)
    return WindowStats(count, mean, scatter, z, lag_product)


def effective_count(stats: WindowStats) -> Array:
    """Per coordinate, n (1 − ρ) / (1 + ρ), with ρ its lag-1 autocorrelation (an AR(1)
    effective sample size): the weight the window's estimate of that coordinate deserves."""
    count = jnp.maximum(stats.count, 2.0)
    variance = jnp.diag(stats.scatter) if stats.scatter.ndim == 2 else stats.scatter
    variance = variance / (count - 1)
    lagged = stats.lag_product / (count - 1) - stats.mean**2
    rho = jnp.clip(lagged / jnp.maximum(variance, 1e-30), 0.0, 0.99)
    return jnp.maximum(1.0, stats.count * (1.0 - rho) / (1.0 + rho))


__all__ = ["WindowStats", "accumulate", "effective_count", "init_stats"]
