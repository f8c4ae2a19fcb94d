"""Exact first-arrival times of Poisson processes with (piecewise-)linear rates.

For the rate ``λ(s) = [h0 + a s]_+`` and ``E ~ Exp(1)`` the first arrival solves
``Λ(s) = ∫₀ˢ λ(u) du = E``, replacing the garbled eq. (11) of Goan et al. (the correction is
listed in ``docs/design.md``).  Every case is covered: growing and decaying rates, a rate
that starts negative and crosses zero, and a decaying rate whose total mass never reaches E
(no arrival: ``inf``).
"""

from __future__ import annotations

import jax.numpy as jnp

from pplsamplers.types import Array


def integrated_linear_rate(rate0: Array, slope: Array, s: Array) -> Array:
    """Λ(s) = ∫₀ˢ [rate0 + slope·u]_+ du, exactly (zero crossings included)."""
    rate0, slope, s = jnp.asarray(rate0), jnp.asarray(slope), jnp.asarray(s)
    end = rate0 + slope * s
    safe_slope = jnp.where(slope == 0, 1.0, slope)
    crossing = jnp.clip(-rate0 / safe_slope, 0.0, s)  # where the line crosses zero, within [0, s]
    # positive part: integrate the line over the sub-interval where it is positive
    both_pos = (rate0 >= 0) & (end >= 0)
    full = s * (rate0 + end) / 2
    starts_pos = rate0 * crossing / 2  # positive on [0, crossing]
    ends_pos = end * (s - crossing) / 2  # positive on [crossing, s]
    return jnp.where(
        both_pos, full, jnp.where(rate0 > 0, starts_pos, jnp.where(end > 0, ends_pos, 0.0))
    )


def linear_rate_arrival(rate0: Array, slope: Array, exp_draw: Array) -> Array:
    """First arrival of a Poisson process with rate ``[rate0 + slope·s]_+``.

    Parameters
    ----------
    rate0
        h0, the rate at s = 0 (may be negative).
    slope
        a, the rate's slope (may be negative).
    exp_draw
        E ~ Exp(1).

    Returns
    -------
    s with Λ(s) = E, or ``inf`` when Λ(∞) < E.

    Notes
    -----
    * a = 0: s = E / h0 (h0 > 0), else ∞.
    * h0 ≥ 0: s = 2E / (h0 + √(h0² + 2aE)) (the root of h0 s + a s²/2 = E, written without
      cancellation), provided h0² + 2aE ≥ 0; otherwise a decreasing rate never reaches E.
    * h0 < 0 < a: the rate is zero until s0 = −h0/a, then s = s0 + √(2E/a).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> s = linear_rate_arrival(1.0, 2.0, 2.0)          # s + s² = 2  ->  s = 1
    >>> float(s)
    1.0
    >>> float(linear_rate_arrival(1.0, -1.0, 1.0))      # mass 1/2 < 1: no arrival
    inf
    """
    h0, a, E = jnp.asarray(rate0), jnp.asarray(slope), jnp.asarray(exp_draw)
    disc = h0**2 + 2 * a * E
    root = jnp.sqrt(jnp.maximum(disc, 0.0))
    denom = h0 + root
    from_positive = jnp.where(
        (disc >= 0) & (denom > 0), 2 * E / jnp.where(denom > 0, denom, 1.0), jnp.inf
    )
    safe_a = jnp.where(a > 0, a, 1.0)
    from_negative = jnp.where(a > 0, -h0 / safe_a + jnp.sqrt(2 * E / safe_a), jnp.inf)
    return jnp.where(h0 >= 0, from_positive, from_negative)


__all__ = ["integrated_linear_rate", "linear_rate_arrival"]
