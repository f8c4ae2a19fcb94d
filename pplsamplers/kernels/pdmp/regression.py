"""Bayesian local linear regression of the directional derivative, and the SBPS proposal band.

SBPS (Pakman et al. 2017, §4) observes at times tᵢ since the last bounce the noisy
directional derivatives G̃ᵢ = v·∇Ũ(x(tᵢ)) with noise variances cᵢ² (eq. 10), and fits

    G̃ᵢ = β₁ tᵢ + β₀ + εᵢ,   εᵢ ~ N(0, cᵢ²),   β₁ ~ N(μ, σ²),  β₀ flat          (eq. 9)

whose posterior mean β̂ and covariance Σ give the predictive law of G̃(t) (eq. 11–12)

    Ĝ(t) ~ N(β̂₁ t + β̂₀, ρ²(t)),   ρ²(t) = x Σ xᵀ + c_m²,   x = (1, t),

and the proposal bound β̂₁ t + β̂₀ + k ρ(t) (eq. 13).  The fit is computed in times centred
at the weighted mean time t_c, where Σ is diagonal: with weights wᵢ = 1/cᵢ²,

    W = Σ wᵢ,   Ḡ = Σ wᵢ G̃ᵢ / W,   S = Σ wᵢ (tᵢ − t_c)²,   B = Σ wᵢ (tᵢ − t_c)(G̃ᵢ − Ḡ),
    β̂₁ = (B + μ/σ²) / (S + 1/σ²),   mean(t) = Ḡ + β̂₁ (t − t_c),
    ρ²(t) = 1/W + (t − t_c)² / (S + 1/σ²) + c_m²,

identical to the uncentred formula and numerically stable.  Observations live in a fixed
size ring buffer (the ``size`` most recent since the last bounce; older ones are dropped).

A full-batch estimator has c² = 0; every cᵢ² is then floored at
``(relative_noise_floor)² · mean_i G̃ᵢ²`` so that the fit stays defined and the band keeps a
margin of order k·relative_noise_floor·|G̃| (the exact-BPS reference mode uses a large k).

Lack of fit.  Eq. 9 assumes G(t) linear over the segment.  Where it is not (any non-Gaussian
posterior: for U = Σ x⁴/4, G(t) is cubic in t), the band's extrapolation falls below the true
rate however small the noise, and the thinning misses bounces (with exact gradients, k then
widens the band only through the noise floor).  ``relative_misfit`` m puts the observed lack
of fit into the predictive variance, ρ²(t) = x Σ xᵀ + max(c_m², m · mean_i G̃ᵢ²): m is a
running mean of the squared prediction errors of the band's line at the observations that
follow it, less the variance the model already predicts, relative to the segment's mean G̃²
(:func:`excess_error`; kept by the SBPS state).  The maximum, not a sum: a minibatch's noise
margin k c_m already covers a lack of fit of its own size, so on a minibatch estimator the
band (and SBPS's cost) is unchanged unless the misfit exceeds the noise, where a sum would
widen every band and cost ESS, while with exact gradients the misfit alone sets the margin.
On U = Σ x⁴/4 with exact gradients it keeps the bound violations rare (well under 1 % of
proposals at k = 3, where the band without it missed many bounces), but not absent: the
violations that remain still bias E[x²] upward by several percent, and the self-check's
Stein test is the guard (``tests/statistical/test_sbps.py``; ``docs/samplers/sbps_notes.md``).
Where G is linear, m ≤ 0 and nothing changes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from pplsamplers.types import Array


class ObservationBuffer(NamedTuple):
    """Fixed-size ring buffer of regression observations (no Python lists).

    ``count`` is the number added since the last reset; slots ``< min(count, size)`` hold
    data, slot ``count % size`` is overwritten next (the oldest once full).
    """

    times: Array
    values: Array
    noise: Array
    """c² of each observation."""
    count: Array


class RegressionFit(NamedTuple):
    """Posterior of the local linear regression, in times centred at ``center``."""

    center: Array
    """t_c, the weighted mean observation time."""
    mean_at_center: Array
    """Ḡ, the posterior mean of G̃(t_c)."""
    slope: Array
    """β̂₁ (after the optional clamp)."""
    raw_slope: Array
    """β̂₁ before the clamp (a negative value triggers Supp. E auxiliary observations)."""
    var_mean: Array
    """1/W, posterior variance of the line at t_c."""
    var_slope: Array
    """1/(S + 1/σ²), posterior variance of β₁."""
    noise_var: Array
    """c_m², the noise variance of the last minibatch (extrapolated, eq. 12)."""
    scale_sq: Array
    """mean_i G̃ᵢ² of the buffer the line was fitted to (the scale of the relative terms)."""
    count: Array


def buffer_init(size: int, dtype: jnp.dtype = float) -> ObservationBuffer:
    """An empty buffer holding up to ``size`` observations."""
    if size < 1:
        raise ValueError(f"buffer_size must be a positive integer; got {size}.")
    zeros = jnp.zeros((size,), dtype)
    return ObservationBuffer(zeros, zeros, zeros, jnp.zeros((), jnp.int32))


def buffer_reset(buffer: ObservationBuffer, time: Array, value: Array, noise: Array):
    """Drop every observation and keep (time, value, noise) only (after a bounce)."""
    zeros = jnp.zeros_like(buffer.times)
    put = lambda x: zeros.at[0].set(jnp.asarray(x, zeros.dtype))
    return ObservationBuffer(put(time), put(value), put(noise), jnp.ones((), jnp.int32))


def buffer_add(buffer: ObservationBuffer, time: Array, value: Array, noise: Array):
    """Add an observation, overwriting the oldest when the buffer is full."""
    slot = buffer.count % buffer.times.shape[0]
    dtype = buffer.times.dtype
    return ObservationBuffer(
        buffer.times.at[slot].set(jnp.asarray(time, dtype)),
        buffer.values.at[slot].set(jnp.asarray(value, dtype)),
        buffer.noise.at[slot].set(jnp.asarray(noise, dtype)),
        buffer.count + 1,
    )


def buffer_update(
    buffer: ObservationBuffer, reset: Array, add: Array, time: Array, value: Array, noise: Array
) -> ObservationBuffer:
    """Branch-free :func:`buffer_reset` (``reset``) or :func:`buffer_add` (``add``) or
    nothing, selected by traced booleans (for use inside ``lax`` loops)."""
    size = buffer.times.shape[0]
    slot = jnp.where(reset, 0, buffer.count % size)
    write = reset | add

    def column(old: Array, new: Array) -> Array:
        base = jnp.where(reset, jnp.zeros_like(old), old)
        return jnp.where(write, base.at[slot].set(jnp.asarray(new, old.dtype)), old)

    count = jnp.where(reset, 1, jnp.where(add, buffer.count + 1, buffer.count))
    return ObservationBuffer(
        column(buffer.times, time),
        column(buffer.values, value),
        column(buffer.noise, noise),
        count.astype(buffer.count.dtype),
    )


def fit(
    buffer: ObservationBuffer,
    prior_mean: Array,
    prior_var: Array,
    last_noise: Array,
    *,
    relative_noise_floor: float = 1e-2,
    clamp_negative_slope: bool = True,
    relative_misfit: Array = 0.0,
) -> RegressionFit:
    """Posterior of (β₀, β₁) given the buffered observations (Pakman et al. 2017, eq. 9–12).

    Parameters
    ----------
    buffer
        At least one observation.
    prior_mean, prior_var
        μ and σ² of the Gaussian prior on the slope β₁ (β₀ has a flat prior).
    last_noise
        c_m², the noise variance used for prediction (eq. 12).
    relative_noise_floor
        Floor on every c as a fraction of the root mean square of the observed G̃
        (needed for a full batch, where c = 0).
    clamp_negative_slope
        Alg. 2's optional step: a negative β̂₁ is replaced by max(μ, 0), with the line kept
        through the weighted centroid (β̂₀ "updated accordingly").
    relative_misfit
        m, the learned lack of fit (module docstring): the predictive noise variance is
        max(c_m² + floor, max(m, 0) · mean_i G̃ᵢ²).

    Examples
    --------
    Two exact observations on G = 1 + 2t and a vague slope prior:

    >>> import jax.numpy as jnp
    >>> buf = buffer_add(buffer_reset(buffer_init(4), 0.0, 1.0, 0.01), 1.0, 3.0, 0.01)
    >>> f = fit(buf, 0.0, 1e6, 0.01)
    >>> round(float(predictive_mean(f, 2.0)), 4)
    5.0
    """
    size = buffer.times.shape[0]
    valid = jnp.arange(size) < jnp.minimum(buffer.count, size)
    dtype = buffer.times.dtype
    tiny = jnp.sqrt(jnp.finfo(dtype).tiny)
    scale_sq = mean_square(buffer)
    floor = relative_noise_floor**2 * scale_sq + tiny
    weights = jnp.where(valid, 1.0 / (buffer.noise + floor), 0.0)
    total = jnp.sum(weights)
    center = jnp.sum(weights * buffer.times) / total
    mean_at_center = jnp.sum(weights * buffer.values) / total
    dt = jnp.where(valid, buffer.times - center, 0.0)
    spread = jnp.sum(weights * dt**2)
    cross = jnp.sum(weights * dt * (buffer.values - mean_at_center))
    prior_precision = 1.0 / prior_var
    precision = spread + prior_precision
    raw_slope = (cross + prior_mean * prior_precision) / precision
    slope = raw_slope
    if clamp_negative_slope:
        slope = jnp.where(raw_slope < 0, jnp.maximum(prior_mean, 0.0), raw_slope)
    return RegressionFit(
        center=center,
        mean_at_center=mean_at_center,
        slope=slope,
        raw_slope=raw_slope,
        var_mean=1.0 / total,
        var_slope=1.0 / precision,
        noise_var=jnp.maximum(last_noise + floor, jnp.maximum(relative_misfit, 0.0) * scale_sq),
        scale_sq=scale_sq,
        count=buffer.count,
    )


def mean_square(buffer: ObservationBuffer) -> Array:
    """mean_i G̃ᵢ² over the buffered observations (the scale of the relative terms)."""
    size = buffer.times.shape[0]
    valid = jnp.arange(size) < jnp.minimum(buffer.count, size)
    return jnp.sum(jnp.where(valid, buffer.values**2, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


def excess_error(fit: RegressionFit, t: Array, value: Array, noise: Array) -> Array:
    """One sample of the lack of fit: (G̃ − mean(t))² less the variance the model predicts
    for it (the line's x Σ xᵀ and the new observation's c²), relative to mean_i G̃ᵢ² of the
    buffer the line was fitted to (``fit.scale_sq``).  Its running mean is ``relative_misfit``; it is ≈ 0 on
    average where G(t) is linear (then only noise separates G̃ from the line).

    Examples
    --------
    A line fitted to G = t² at t = 0 and 1 (through 0 and 1) misses t = 3 by 9 − 3 = 6:

    >>> buf = buffer_add(buffer_reset(buffer_init(4), 0.0, 0.0, 0.0), 1.0, 1.0, 0.0)
    >>> f = fit(buf, 0.0, 1e9, 0.0, relative_noise_floor=1e-4)
    >>> round(float(excess_error(f, 3.0, 9.0, 0.0)), 2)  # 6² / mean(0², 1²) = 72
    72.0
    """
    residual = value - predictive_mean(fit, t)
    tiny = jnp.sqrt(jnp.finfo(jnp.result_type(value, float)).tiny)
    return (residual**2 - line_var(fit, t) - noise) / (fit.scale_sq + tiny)


def predictive_mean(fit: RegressionFit, t: Array) -> Array:
    """β̂₁ t + β̂₀ (eq. 11)."""
    return fit.mean_at_center + fit.slope * (t - fit.center)


def line_var(fit: RegressionFit, t: Array) -> Array:
    """x Σ xᵀ, the posterior variance of the line at t (eq. 12 without the noise)."""
    return fit.var_mean + fit.var_slope * (t - fit.center) ** 2


def predictive_var(fit: RegressionFit, t: Array) -> Array:
    """ρ²(t) = x Σ xᵀ + c_m² (eq. 12)."""
    return line_var(fit, t) + fit.noise_var


def upper_band(fit: RegressionFit, t: Array, k: float) -> Array:
    """The SBPS bound β̂₁ t + β̂₀ + k ρ(t) (eq. 13), convex in t."""
    return predictive_mean(fit, t) + k * jnp.sqrt(predictive_var(fit, t))


def slope_prior_step(
    fit: RegressionFit,
    prior_mean: Array,
    prior_var: Array,
    step_size: float,
    min_relative_sd: float = 0.5,
) -> tuple[Array, Array]:
    """One stochastic-EM step on the marginal likelihood p({G̃ᵢ} | μ, σ²) (SBPS §4).

    Treating each inter-bounce segment's slope as a draw β₁ ~ N(μ, σ²), the EM update
    moves (μ, σ²) toward the segment's posterior moments with weight ``step_size``:

        μ ← μ + η (β̂₁ − μ),    σ² ← (1 − η) σ² + η [(β̂₁ − μ)² + Var(β₁ | data)],

    which is the natural-gradient ascent step on the marginal likelihood.  A segment
    with no information on the slope leaves (μ, σ²) unchanged.  σ is kept
    ≥ ``min_relative_sd``·|μ| so the prior never pins the slope.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> buf = buffer_add(buffer_reset(buffer_init(4), 0.0, 0.0, 1e-6), 1.0, 2.0, 1e-6)
    >>> mu, var = slope_prior_step(fit(buf, 0.0, 1.0, 1e-6), 0.0, 1.0, 0.5)
    >>> round(float(mu), 3)   # posterior slope ≈ 2, halfway from 0
    1.0
    """
    slope = fit.raw_slope
    new_mean = prior_mean + step_size * (slope - prior_mean)
    new_var = (1.0 - step_size) * prior_var + step_size * (
        (slope - prior_mean) ** 2 + fit.var_slope
    )
    new_var = jnp.maximum(new_var, (min_relative_sd * new_mean) ** 2)
    return new_mean, new_var


__all__ = [
    "excess_error",
    "line_var",
    "mean_square",
    "ObservationBuffer",
    "RegressionFit",
    "buffer_add",
    "buffer_init",
    "buffer_reset",
    "buffer_update",
    "fit",
    "predictive_mean",
    "predictive_var",
    "slope_prior_step",
    "upper_band",
]
