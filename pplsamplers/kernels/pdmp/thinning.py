"""First arrivals of a Poisson process whose rate is the piecewise-linear interpolation of a
bound evaluated at knots, with a cap on the work and a time horizon (Pakman et al.
2017, Alg. 2, ``Sample_Proposal_Time``).

Given a *bound* ``rate_at(s)`` (any function of the time ``s ≥ 0`` since the start), the
proposal rate is ``λ(s) = [γ(s)]_+`` where γ linearly interpolates ``rate_at`` between knots
``0 = s_0 < s_1 < …`` spaced by ``spacing(s)``.  On each segment λ is ``[h0 + a u]_+``, so the
first arrival is found exactly by :func:`~pplsamplers.kernels.pdmp.poisson.linear_rate_arrival`
(negative segments and zero crossings included).  When the bound is convex in ``s`` — the
SBPS band ``β̂₁ t + β̂₀ + k ρ(t)`` is, since ρ is the norm of an affine function of t — the
interpolation lies above it, so a coarse spacing only makes the proposal more conservative.

Knots are evaluated in vectorised blocks of ``block_size`` inside a ``lax.while_loop``; the
loop stops at the arrival, at ``limit`` (the horizon), or after ``max_blocks`` blocks (the
cap; the caller then moves to the last knot without an event and restarts, which is exact
for a Poisson process because disjoint intervals are independent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from pplsamplers.kernels.pdmp.poisson import integrated_linear_rate, linear_rate_arrival
from pplsamplers.types import Array


class Arrival(NamedTuple):
    """Result of :func:`piecewise_linear_arrival`."""

    time: Array
    """Arrival time s (``arrived``), else where the scan stopped (``limit`` or the cap)."""
    rate: Array
    """λ(s) = [γ(s)]_+ at ``time`` (the thinning denominator)."""
    arrived: Array
    """True when an arrival happened before ``limit``."""
    capped: Array
    """True when ``max_blocks`` stopped the scan before ``limit`` without an arrival."""
    num_knots: Array
    """Knots evaluated (work done)."""


def piecewise_linear_arrival(
    rate_at: Callable[[Array], Array],
    exp_draw: Array,
    limit: Array,
    spacing: Callable[[Array], Array],
    *,
    block_size: int = 16,
    max_blocks: int = 64,
) -> Arrival:
    """First arrival of the rate ``[interp(rate_at at the knots)]_+`` before ``limit``.

    Parameters
    ----------
    rate_at
        ``s -> γ(s)`` evaluated elementwise on an array of times (may be negative).
    exp_draw
        E ~ Exp(1): the arrival solves Λ(s) = ∫₀ˢ λ = E.
    limit
        Horizon; no arrival is returned beyond it (``inf`` allowed when ``max_blocks``
        bounds the scan).
    spacing
        ``s -> Δt > 0``: the knot spacing of the block that starts at ``s`` (SBPS: a
        fraction of the mean proposal time, ``docs/design.md``).
    block_size, max_blocks
        Knots per vectorised block, and the cap on blocks.

    Returns
    -------
    Arrival

    Examples
    --------
    A rate ``1 + s`` and ``E = 1.5`` give s + s²/2 = 1.5, i.e. s = 1:

    >>> import jax.numpy as jnp
    >>> out = piecewise_linear_arrival(lambda s: 1.0 + s, jnp.asarray(1.5), jnp.inf,
    ...                                lambda s: jnp.asarray(0.3))
    >>> round(float(out.time), 6), round(float(out.rate), 6), bool(out.arrived)
    (1.0, 2.0, True)
    """
    exp_draw = jnp.asarray(exp_draw)
    dtype = jnp.result_type(exp_draw.dtype, float)
    limit = jnp.asarray(limit, dtype)
    steps = jnp.arange(1, block_size + 1, dtype=dtype)
    zero = jnp.zeros((), dtype)
    rate0 = jnp.asarray(rate_at(zero), dtype)

    def cond(carry: tuple) -> Array:
        start, _, _, done, _, _, blocks = carry
        return ~done & (blocks < max_blocks) & (start < limit)

    def body(carry: tuple) -> tuple:
        start, start_rate, remaining, _, _, _, blocks = carry
        h = jnp.asarray(spacing(start), dtype)
        knots = jnp.minimum(start + h * steps, limit)
        rates = jnp.asarray(rate_at(knots), dtype)
        left = jnp.concatenate([start[None], knots[:-1]])
        left_rates = jnp.concatenate([start_rate[None], rates[:-1]])
        lengths = knots - left
        safe = jnp.where(lengths > 0, lengths, 1.0)
        slopes = jnp.where(lengths > 0, (rates - left_rates) / safe, 0.0)
        masses = integrated_linear_rate(left_rates, slopes, lengths)
        cumulative = jnp.cumsum(masses)
        hit = cumulative >= remaining
        found = jnp.any(hit)
        j = jnp.argmax(hit)
        before = jnp.where(j > 0, cumulative[jnp.maximum(j - 1, 0)], 0.0)
        offset = linear_rate_arrival(left_rates[j], slopes[j], remaining - before)
        offset = jnp.clip(jnp.where(jnp.isfinite(offset), offset, lengths[j]), 0.0, lengths[j])
        arrival = left[j] + offset
        arrival_rate = jnp.maximum(left_rates[j] + slopes[j] * offset, 0.0)
        return (
            knots[-1],
            rates[-1],
            remaining - cumulative[-1],
            found,
            arrival,
            arrival_rate,
            blocks + 1,
        )

    init = (zero, rate0, exp_draw.astype(dtype), jnp.asarray(False), zero, zero, jnp.asarray(0))
    end, _, _, found, arrival, arrival_rate, blocks = lax.while_loop(cond, body, init)
    capped = ~found & (end < limit)
    return Arrival(
        time=jnp.where(found, arrival, end),
        rate=jnp.where(found, arrival_rate, 0.0),
        arrived=found,
        capped=capped,
        num_knots=blocks * block_size,
    )


__all__ = ["Arrival", "piecewise_linear_arrival"]
