"""The interpolation envelope's lack of fit: a curvature margin learned from its own misses.

Alg. 2 of Goan et al. (eqs. 12–13) extrapolates the raw rate
G(t) = v(t)·∇E(x(t)) along the flow by the secant through its two newest evaluations.  Where
G curves up (any non-Gaussian target: for U = Σ x⁴/4, G is cubic along a BPS line) the line
falls below the rate whatever α, most of all where it predicts no event at all, and the
thinning misses events.

**Bound.**  Let the line be G_n + a s, s = t − t_n ∈ [0, H] (H the horizon cap
``max_extrapolation``: the line is never used further out), through G_n and a second value
at t_n + δ (δ = t_init > 0 when an envelope starts, δ = t_{n−1} − t_n < 0 after a
rejection).  If |G''| ≤ κ on the interval they span, the error of linear interpolation is

    G(t_n + s) − (G_n + a s) = G''(ξ) s (s − δ) / 2 ≤ κ |s (s − δ)| / 2 ≤ κ (H + |δ|) s / 2,

the last step because s (s + |δ|)/2 is convex and lies below its chord on [0, H] (and
s (|δ| − s)/2 ≤ s |δ|/2 where s < δ).  Adding the linear term b s, b = κ (H + |δ|)/2, keeps
the envelope linear (its exact inversion is unchanged) and makes it an upper bound wherever
the curvature is at most κ (with α = 1; α > 1 scales the line as in eq. 12).  A slope kept
from an older secant (``min_gap``) whose farthest point is D from t_n has
|G'(t_n) − a| ≤ κ D, which is the case δ = −2D.

**Estimate.**  κ is not known.  Each evaluation of G at s > 0 past a valid line (a proposal,
or the evaluation at the horizon cap) observes the residual r = G − (G_n + a s): its
curvature part is at most κ w, w = |s (s − δ)| / 2, and its noise part has the variance
v = c² + c_n² (1 − 2 s/δ) + σ_a² s² (the new value's c², and that of the line through two
noisy values, σ_a² = (c_n² + c_δ²)/δ²; zero with exact gradients).  The least-squares
estimate of κ² in r² ≈ κ² w² + v is

    κ̂² = [mean(r² − v)]_+ / mean(w²),

with running means over the last ``window`` observations (:func:`observe`), kept across
events.  The envelope adds ``fit_margin`` · κ̂ (H + |δ|)/2 to its slope (:func:`margin_slope`):
κ̂ is a root-mean-square curvature and ``fit_margin`` plays the part of SBPS's k.  Where G is
linear (a Gaussian target under BPS) r = 0 up to noise and rounding, so κ̂ ≈ 0 and nothing
changes; where the noise dominates the residuals (control-variate minibatches) κ̂ stays
small next to the noise margin.  This is the interpolation envelope's counterpart of SBPS's
lack-of-fit term (:func:`pplsamplers.kernels.pdmp.regression.excess_error`).

Exactness: the margin at any time depends only on evaluations already made, so the
envelope is a predictable bound and thinning with it simulates the PDMP exactly wherever it
bounds the rate (the estimate may keep adapting; it only decides how often a violation
happens, not the law of an accepted event).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from pplsamplers.types import Array

FIT_WINDOW = 1000
"""Observations the running means of :func:`observe` average over (then exponential)."""


class LackOfFit(NamedTuple):
    """Running means of the envelope line's residuals (module docstring)."""

    count: Array
    """observations so far, capped at the window"""
    excess: Array
    """mean of r² − v: the squared residual less its predicted noise variance"""
    weight: Array
    """mean of w², w = |s (s − δ)| / 2"""


def no_fit(dtype: Any = float) -> LackOfFit:
    """No observations yet (κ̂ = 0)."""
    zero = jnp.zeros((), dtype)
    return LackOfFit(zero, zero, zero)


def observe(
    fit: LackOfFit,
    residual: Array,
    elapsed: Array,
    offset: Array,
    noise_var: Array,
    observed: Array,
    window: int = FIT_WINDOW,
) -> LackOfFit:
    """Add one residual r of the line at ``elapsed`` = s past its anchor (secant offset δ,
    predicted noise variance v) when ``observed`` (module docstring).

    Examples
    --------
    The secant of G = t² through t = 0 and −1 (anchor 0, δ = −1, slope −1) misses t = 1 by
    2 = κ w with κ = 2 and w = |1·(1 + 1)|/2:

    >>> import jax.numpy as jnp
    >>> fit = observe(no_fit(), jnp.asarray(2.0), 1.0, -1.0, 0.0, jnp.asarray(True))
    >>> float(curvature(fit))
    2.0
    """
    w = jnp.abs(elapsed * (elapsed - offset)) / 2
    excess = residual**2 - noise_var
    keep = observed & jnp.isfinite(excess) & jnp.isfinite(w)
    count = jnp.where(keep, jnp.minimum(fit.count + 1, window), fit.count)
    step = jnp.where(keep, 1.0 / jnp.maximum(count, 1), 0.0)
    return LackOfFit(
        count,
        fit.excess + step * (jnp.where(keep, excess, 0.0) - fit.excess),
        fit.weight + step * (jnp.where(keep, w**2, 0.0) - fit.weight),
    )


def curvature(fit: LackOfFit) -> Array:
    """κ̂ = √([mean(r² − v)]_+ / mean(w²)), the root-mean-square curvature (0 before any
    observation)."""
    tiny = jnp.finfo(fit.weight.dtype).tiny
    return jnp.sqrt(jnp.maximum(fit.excess, 0.0) / jnp.maximum(fit.weight, tiny))


def margin_slope(fit: LackOfFit, fit_margin: float, horizon: Array, offset: Array) -> Array:
    """b = ``fit_margin`` · κ̂ · (H + |δ|) / 2, the slope the envelope adds from its anchor
    on (module docstring); 0 when ``fit_margin`` is 0."""
    if fit_margin == 0:
        return jnp.zeros((), fit.weight.dtype)
    return fit_margin * curvature(fit) * (horizon + jnp.abs(offset)) / 2


__all__ = ["FIT_WINDOW", "LackOfFit", "curvature", "margin_slope", "no_fit", "observe"]
