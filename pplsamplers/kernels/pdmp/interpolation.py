"""Adaptive piecewise-linear interpolation thinning (Goan et al., §3.2, Alg. 2).

The event rate of a PDMP along its flow is λ(t) = [G(t)]_+ with G(t) = v(t)·∇E(x(t)) (the
*raw* rate).  Alg. 2 proposes event times from an envelope built by linear interpolation of
α-scaled rate evaluations (eq. 12, α ≥ 1):

* an envelope starts from two evaluations, at t₀ (now) and t₀ + ``t_init``; the line through
  them is used from t₀ on and the t_init point is then discarded;
* a proposal s is drawn from the rate h(s) = α [G_n + a (s − t_n)]_+ by exact inversion of
  its integrated rate (:func:`~pplsamplers.kernels.pdmp.poisson.linear_rate_arrival`, not
  the garbled eq. 11: ``docs/design.md``);
* the proposal is accepted with probability [G(s)]_+ / h(s) (eq. 8); a rejected proposal
  becomes the newest interpolation point and the line through the last two points gives the
  next segment (eq. 13).

The line interpolates the raw G (it may be negative), so a rate that is zero now but rising
is extrapolated to its zero crossing, which the linear inversion handles exactly.  The
envelope is only an *approximate* bound: ``violations`` counts proposals with [G]_+ / h > 1
(the paper's bias diagnostic; α > 1 makes them rarer), and undercounts, since an envelope
far too low makes few proposals.

Extensions, off by default (Alg. 2 as printed; see :func:`interpolation_thinning`):
``min_gap`` and ``noise_margin`` for noisy (minibatch) rates, whose two-point slopes swing
wildly so that the line often predicts no event where there is one, and ``fit_margin`` for
curved rates, whose secant falls below G wherever G curves up, whatever α.  Safeguards,
counted: the envelope reaches at most ``max_extrapolation`` past its newest evaluation, where
the particle stops and the envelope restarts (``horizon_cap_hits``; this rescues an envelope
that predicts no event at all), and ``max_evaluations`` bounds the cost of one event: the call
then returns without one and keeps the envelope (``proposal_cap_hits``).

The caller keeps the :class:`Envelope` in its kernel state: it survives grid times (a sample
ends mid-segment, the next continues the same envelope), is reset after velocity jumps, and
keeps its lack-of-fit statistics across events.  Every loop iteration makes one rate
evaluation (initialisation, proposal, or restart after a horizon cap; a call's last iteration
at its horizon discards it), so it vectorises over chains without ``lax.cond`` doubling work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.kernels.pdmp.lack_of_fit import LackOfFit, margin_slope, no_fit, observe
from pplsamplers.kernels.pdmp.poisson import linear_rate_arrival
from pplsamplers.types import Array, PRNGKey

RateFn = Callable[[PRNGKey, Array], tuple[Array, Array, Any]]
"""``rate_fn(key, t) -> (G(t), c(t), aux)``: the raw rate at time t after the start of the
call (may be negative), the standard deviation c of that estimate (0 for a full batch; read
with ``noise_margin > 0``), and what the caller needs back at an accepted event (e.g. the
minibatch indices, to reflect with the same minibatch)."""


class Envelope(NamedTuple):
    """The current linear envelope of the raw rate, G(t) ≈ ``rate + slope·(t − time)``.

    Times are relative to the start of the current call (``time ≤ 0`` after a carry-over).
    ``valid=False``: the envelope must be (re-)initialised, and with ``start_known=True`` only
    at t_init, ``rate`` holding G at ``time`` already (after a reflection G(0⁺) = −G(τ)).
    """

    time: Array
    rate: Array
    slope: Array
    valid: Array
    start_known: Array
    noise: Array
    """c, the noise standard deviation of ``rate`` (for ``noise_margin``)"""
    slope_noise: Array
    """the noise standard deviation of ``slope``, √(c_n² + c_{n−1}²) / gap"""
    gap: Array
    """δ: the secant that gives ``slope`` runs from ``time`` to ``time + δ`` (δ = t_init > 0
    when an envelope starts; δ < 0 after a rejection)"""
    fit: LackOfFit
    """the line's lack of fit so far (kept across events; reset when the dynamics change)"""


class ThinningStats(NamedTuple):
    """Counters of :func:`interpolation_thinning` (summable)."""

    proposals: Array
    """proposals drawn from the envelope (each one rate evaluation)"""
    rate_evals: Array
    """all rate evaluations: proposals plus envelope (re-)initialisations"""
    violations: Array
    """proposals with [G]_+ / h > 1 + tol: the envelope was not an upper bound"""
    max_ratio: Array
    """the largest [G]_+ / h seen"""
    proposal_cap_hits: Array
    horizon_cap_hits: Array


class ThinningResult(NamedTuple):
    """Outcome of one :func:`interpolation_thinning` call."""

    time: Array
    """how far the particle moves (≤ ``horizon``)"""
    accepted: Array
    """an event was accepted at ``time``"""
    reached_horizon: Array
    """``time == horizon``: no event before it"""
    rate: Array
    """G at the accepted proposal"""
    noise: Array
    """c at the accepted proposal"""
    aux: Any
    """``rate_fn``'s aux at the accepted proposal"""
    envelope: Envelope
    """the envelope to continue with, relative to ``time`` (invalid after an event)"""
    stats: ThinningStats


def fresh_envelope(
    dtype: Any = float, start_rate: Array | None = None, fit: LackOfFit | None = None
) -> Envelope:
    """An envelope to be initialised from scratch, or from a known G(0) = ``start_rate``,
    keeping the lack-of-fit statistics ``fit`` (none: start them afresh)."""
    zero = jnp.zeros((), dtype)
    fit = no_fit(dtype) if fit is None else jax.tree.map(lambda f: jnp.asarray(f, dtype), fit)
    known = start_rate is not None
    rate = jnp.asarray(start_rate, dtype) if known else zero
    return Envelope(zero, rate, zero, jnp.asarray(False), jnp.asarray(known), zero, zero, zero, fit)


def zero_stats(dtype: Any = float) -> ThinningStats:
    """All counters zero."""
    count = jnp.zeros((), jnp.int32)
    return ThinningStats(count, count, count, jnp.zeros((), dtype), count, count)


def add_stats(a: ThinningStats, b: ThinningStats) -> ThinningStats:
    """Sum two sets of counters (``max_ratio`` takes the maximum)."""
    return ThinningStats(
        a.proposals + b.proposals,
        a.rate_evals + b.rate_evals,
        a.violations + b.violations,
        jnp.maximum(a.max_ratio, b.max_ratio),
        a.proposal_cap_hits + b.proposal_cap_hits,
        a.horizon_cap_hits + b.horizon_cap_hits,
    )


def envelope_rate(
    envelope: Envelope,
    now: Array,
    alpha: float,
    noise_margin: float = 0.0,
    fit_margin: float = 0.0,
    max_extrapolation: Array | float = 0.0,
) -> tuple[Array, Array]:
    """The envelope from ``now`` on as a linear rate: h(s) = [h0 + a s]_+ (eqs. 12–13).

    h0 = α (G_n + slope (now − t_n)) and a = α · slope, so that the next proposal is
    ``linear_rate_arrival(h0, a, E)`` after ``now``.  A noise margin k > 0 raises the line to
    an upper confidence line: k (c + σ_slope (now − t_n)) is added to h0 and k σ_slope to a.
    A fit margin k_fit > 0 adds the slope b = k_fit κ̂ (H + |δ|)/2 (H = ``max_extrapolation``,
    :func:`~pplsamplers.kernels.pdmp.lack_of_fit.margin_slope`) from t_n on: b (now − t_n) to
    h0 and b to a.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> line = dict(rate=jnp.asarray(1.0), slope=jnp.asarray(2.0), valid=jnp.asarray(True))
    >>> env = fresh_envelope()._replace(**line)
    >>> [float(u) for u in envelope_rate(env, 0.5, alpha=2.0)]  # 2 (1 + 2·0.5), 2·2
    [4.0, 4.0]
    """
    elapsed = now - envelope.time
    h0 = alpha * (envelope.rate + envelope.slope * elapsed)
    a = alpha * envelope.slope
    if noise_margin != 0:
        h0 = h0 + noise_margin * (envelope.noise + envelope.slope_noise * elapsed)
        a = a + noise_margin * envelope.slope_noise
    if fit_margin != 0:
        b = margin_slope(envelope.fit, fit_margin, max_extrapolation, envelope.gap)
        h0, a = h0 + b * elapsed, a + b
    return h0, a


def interpolation_thinning(
    rng_key: PRNGKey,
    rate_fn: RateFn,
    envelope: Envelope,
    *,
    horizon: Array,
    alpha: float,
    t_init: Array,
    max_extrapolation: Array,
    max_evaluations: int = 1000,
    min_gap: float = 0.0,
    noise_margin: float = 0.0,
    fit_margin: float = 0.0,
    violation_tol: float = 1e-8,
) -> ThinningResult:
    """Simulate to the next event of rate [G(t)]_+ by adaptive interpolation thinning (Alg. 2).

    Parameters
    ----------
    rng_key
        PRNG key.
    rate_fn
        ``(key, t) -> (G(t), c(t), aux)`` (:data:`RateFn`); ``t`` is relative to the start
        of this call.
    envelope
        The carried :class:`Envelope` (:func:`fresh_envelope` after a velocity jump).
    horizon
        Stop without an event at this time (the next grid time, or a refreshment).
    alpha
        α ≥ 1 of eq. (12): the envelope is α × the interpolated rate.
    t_init
        Offset of the second evaluation that starts an envelope.
    max_extrapolation
        Horizon cap (see module docstring).
    max_evaluations
        Cap on rate evaluations in this call (see module docstring).
    min_gap
        A rejected proposal closer than ``min_gap · t_init`` to the previous evaluation
        re-anchors the line but keeps its slope, which minibatch noise would swing.
    noise_margin
        k ≥ 0: raise the line to an upper confidence line, h = [α·line + k (c + σ_slope·(t −
        t_n))]_+, with c the noise sd of the newest evaluation (free from the jvp's per-example
        terms) and σ_slope that of the slope; in the spirit of SBPS's k ρ.
    fit_margin
        k_fit ≥ 0: add k_fit κ̂ (``max_extrapolation`` + |δ|)/2 to the slope, κ̂ the curvature
        learned from the line's residuals, which bounds the rate wherever |G''| ≤ k_fit κ̂
        (:mod:`~pplsamplers.kernels.pdmp.lack_of_fit`; the statistics are updated whatever k_fit).
    violation_tol
        [G]_+/h above 1 + ``violation_tol`` (at least 100 machine epsilons) is a violation.

    Examples
    --------
    A linear rate G(t) = 1 + 2t is its own interpolation, so with α = 1 every proposal is
    accepted and nothing is violated:

    >>> import jax, jax.numpy as jnp
    >>> rate = lambda key, t: (1.0 + 2.0 * t, 0.0, ())
    >>> out = interpolation_thinning(jax.random.key(0), rate, fresh_envelope(), horizon=10.0,
    ...                              alpha=1.0, t_init=0.5, max_extrapolation=5.0)
    >>> bool(out.accepted), int(out.stats.rate_evals), int(out.stats.violations)
    (True, 3, 0)
    """
    dtype = jnp.result_type(float)
    tolerance = max(violation_tol, 100 * float(jnp.finfo(dtype).eps))  # rounding is no violation
    horizon = jnp.asarray(horizon, dtype)
    t_init = jnp.asarray(t_init, dtype)
    max_extrapolation = jnp.asarray(max_extrapolation, dtype)
    envelope = jax.tree.map(lambda a, b: jnp.asarray(a, b.dtype), envelope, fresh_envelope(dtype))
    _, _, aux_shape = jax.eval_shape(rate_fn, rng_key, horizon)
    aux0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), aux_shape)

    # carry: key, now, envelope, stats, evaluations, done, accepted, reached, newest (G, c, aux)
    def cond(carry: tuple) -> Array:
        return ~carry[5]

    def body(carry: tuple) -> tuple:
        key, now, env, stats, evals, _, _, _, _, _, _ = carry
        key, draw_key, eval_key = jax.random.split(key, 3)
        # one uniform pair per iteration: E = -log(1 - u0) ~ Exp(1) and the thinning u1
        uniforms = jax.random.uniform(draw_key, (2,), dtype=dtype)
        # the envelope's proposal (only meaningful when env.valid)
        h_now, a = envelope_rate(env, now, alpha, noise_margin, fit_margin, max_extrapolation)
        wait = linear_rate_arrival(h_now, a, -jnp.log1p(-uniforms[0]))
        t_prop = now + wait
        cap_time = env.time + max_extrapolation
        hits_horizon = env.valid & (t_prop >= horizon) & (horizon <= cap_time)
        hits_cap = env.valid & (t_prop >= cap_time) & (cap_time < horizon)
        proposing = env.valid & ~hits_horizon & ~hits_cap
        init_start = ~env.valid & ~env.start_known
        init_slope = ~env.valid & env.start_known
        t_eval = jnp.where(
            proposing,
            t_prop,
            jnp.where(hits_cap, cap_time, jnp.where(init_slope, now + t_init, now)),
        )
        rate, noise, aux = rate_fn(eval_key, t_eval)
        noise = jnp.asarray(noise, dtype)
        evaluated = ~hits_horizon

        # proposal: thinning test (eq. 8)
        h_prop = jnp.maximum(h_now + a * wait, jnp.finfo(dtype).tiny)
        ratio = jnp.maximum(rate, 0.0) / h_prop
        accept = proposing & (uniforms[1] < ratio)
        reject = proposing & ~accept
        violated = proposing & (ratio > 1.0 + tolerance)
        gap = t_prop - env.time
        update_slope = gap >= jnp.maximum(min_gap * t_init, jnp.finfo(dtype).tiny)
        safe_gap = jnp.where(gap > 0, gap, 1.0)
        new_slope = jnp.where(update_slope, (rate - env.rate) / safe_gap, env.slope)
        new_slope_noise = jnp.where(
            update_slope, jnp.hypot(noise, env.noise) / safe_gap, env.slope_noise
        )
        # a kept slope is a secant whose farthest point is D from the new anchor; with
        # |G'(t) - a| <= kappa D it counts as a secant offset by -2D (lack_of_fit docstring)
        farthest = jnp.maximum(gap, jnp.abs(gap - env.gap))
        new_gap = jnp.where(update_slope, -gap, -2 * farthest)
        # lack of fit: the line's residual where it was evaluated past its newest point; its
        # noise variance is c^2 + c_n^2 (1 - 2 s / delta) + (sigma_slope s)^2
        elapsed = t_eval - env.time
        safe_offset = jnp.where(env.gap != 0, env.gap, 1.0)
        noise_var = (
            noise**2
            + env.noise**2 * (1 - 2 * elapsed / safe_offset)
            + (env.slope_noise * elapsed) ** 2
        )
        residual = rate - (env.rate + env.slope * elapsed)
        fit = observe(env.fit, residual, elapsed, env.gap, noise_var, proposing | hits_cap)
        true_, false_ = jnp.asarray(True), jnp.asarray(False)
        after_reject = env._replace(
            time=t_prop,
            rate=rate,
            slope=new_slope,
            valid=true_,
            start_known=false_,
            noise=noise,
            slope_noise=new_slope_noise,
            gap=new_gap,
        )
        # horizon cap: move there; its evaluation starts the new envelope
        after_cap = env._replace(
            time=cap_time, rate=rate, valid=false_, start_known=true_, noise=noise
        )
        # initialisation: first the point at t0 = now, then the one at now + t_init
        after_start = env._replace(
            time=now, rate=rate, valid=false_, start_known=true_, noise=noise
        )
        after_slope = env._replace(
            slope=(rate - env.rate) / t_init,
            valid=true_,
            start_known=false_,
            slope_noise=jnp.hypot(noise, env.noise) / t_init,
            gap=t_init,
        )

        def pick(*pairs: tuple[Array, Envelope]) -> Envelope:
            out = env
            for flag, candidate in pairs:
                out = jax.tree.map(lambda c, o, f=flag: jnp.where(f, c, o), candidate, out)
            return out

        env = pick(
            (reject, after_reject),
            (hits_cap, after_cap),
            (init_start, after_start),
            (init_slope, after_slope),
        )._replace(fit=fit)
        now = jnp.where(
            proposing, t_prop, jnp.where(hits_cap, cap_time, jnp.where(hits_horizon, horizon, now))
        )
        evals = evals + evaluated.astype(jnp.int32)
        capped = ~accept & ~hits_horizon & (evals >= max_evaluations)
        stats = add_stats(
            stats,
            ThinningStats(
                proposals=proposing.astype(jnp.int32),
                rate_evals=evaluated.astype(jnp.int32),
                violations=violated.astype(jnp.int32),
                max_ratio=jnp.where(proposing, ratio, 0.0),
                proposal_cap_hits=capped.astype(jnp.int32),
                horizon_cap_hits=hits_cap.astype(jnp.int32),
            ),
        )
        done = accept | hits_horizon | capped | ~jnp.isfinite(now)
        return key, now, env, stats, evals, done, accept, hits_horizon, rate, noise, aux

    zero = jnp.zeros((), dtype)
    init = (
        rng_key,
        zero,
        envelope,
        zero_stats(dtype),
        jnp.zeros((), jnp.int32),
        jnp.asarray(False),
        jnp.asarray(False),
        jnp.asarray(False),
        zero,
        zero,
        aux0,
    )
    _, now, env, stats, _, _, accepted, reached, rate, noise, aux = lax.while_loop(cond, body, init)
    carried = env._replace(time=env.time - now)
    fresh = fresh_envelope(dtype, fit=carried.fit)
    env = jax.tree.map(lambda f, c: jnp.where(accepted, f, c), fresh, carried)
    return ThinningResult(now, accepted, reached, rate, noise, aux, env, stats)


__all__ = [
    "Envelope",
    "RateFn",
    "ThinningResult",
    "ThinningStats",
    "add_stats",
    "envelope_rate",
    "fresh_envelope",
    "interpolation_thinning",
    "zero_stats",
]
