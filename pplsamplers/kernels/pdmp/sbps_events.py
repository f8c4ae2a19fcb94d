"""One SBPS next-event iteration (Pakman et al. 2017, Alg. 2; Supp. E), in named pieces; its
``options`` are the sampler's :class:`~pplsamplers.kernels.pdmp.sbps_kernel.SBPSOptions`.

:func:`make_next_event` returns the ``next_event(rng_key, x, v, carry, horizon)`` that
:func:`~pplsamplers.kernels.pdmp.driver.advance` and
:func:`~pplsamplers.kernels.pdmp.driver.run_skeleton` call.
Each iteration makes at most ONE observation of G̃ = (A v)·∇Ũ, so the traced program holds one
``directional`` and one ``grad`` (under ``lax.cond``) and the bookkeeping is branch-free:

1. :func:`plan_event` decides what this iteration is (a proposal from the regression band, a
   refreshment, a Supp. E auxiliary look-ahead, a re-observation after A changed, a "gap"
   observation, or nothing before the horizon) and how far the particle moves;
2. :func:`observe` makes that observation (one jvp on a minibatch, eq. 10);
3. :func:`accept_proposal` thins a proposal with probability min(1, [G̃]_+/λ) (Alg. 2 prints the
   inequality the wrong way round, ``docs/design.md``) and reflects v on acceptance (eq. 4/16);
4. :func:`update_state` updates the buffer, running means, counters and the slope prior.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.estimator import Estimator
from pplsamplers.kernels.pdmp import regression
from pplsamplers.kernels.pdmp.driver import NextEventFn
from pplsamplers.kernels.pdmp.flow import reflect, refresh_sphere
from pplsamplers.kernels.pdmp.thinning import piecewise_linear_arrival
from pplsamplers.types import Array, PRNGKey

NONE, PROPOSAL, REFRESH, AUXILIARY, REOBSERVE, OBSERVE = 0, 1, 2, 3, 4, 5
"""The kinds of one iteration (an observation is made for every kind but ``NONE``)."""
AUXILIARY_PENDING, REOBSERVE_PENDING = 1, 2
"""``state.pending``: an observation due at the next iteration with dt = 0."""


class SBPSCounts(NamedTuple):
    """What happened since the start of the current interval (or skeleton)."""

    proposals: Array
    bounces: Array
    refreshes: Array
    observations: Array
    """Every G̃ observation (one jvp each): proposals, refreshments, auxiliary and gap ones."""
    auxiliary: Array
    violations: Array
    knot_caps: Array
    """Proposal searches stopped by ``max_knot_blocks`` before reaching their horizon."""
    max_ratio: Array
    """Largest [G̃]_+/λ at a proposal."""


def zero_counts(dtype: Any) -> SBPSCounts:
    """All counters zero."""
    count = jnp.zeros((), jnp.int32)
    return SBPSCounts(count, count, count, count, count, count, count, jnp.zeros((), dtype))


class Draws(NamedTuple):
    """The randomness of one iteration, split once from its key."""

    exp_draw: Array
    refresh_draw: Array
    accept_draw: Array
    batch_key: PRNGKey
    velocity_key: PRNGKey


class Plan(NamedTuple):
    """What one iteration does: its ``kind``, the move ``dt`` and the band's rate there."""

    kind: Array
    dt: Array
    rate: Array
    knot_capped: Array
    line: regression.RegressionFit


class Observation(NamedTuple):
    """One observation G̃ (``value``) and c² (``noise``) along ``velocity`` (the new one for a
    refreshment), ``ahead`` of the particle (Supp. E), on the minibatch ``idx``."""

    value: Array
    noise: Array
    idx: Array
    velocity: Array
    ahead: Array


def draw(rng_key: PRNGKey, dtype: Any) -> Draws:
    """Exp(1) draws for the proposal and the refreshment clock, a uniform for thinning."""
    uniform_key, batch_key, velocity_key = jax.random.split(rng_key, 3)
    uniforms = jax.random.uniform(uniform_key, (3,), dtype, minval=jnp.finfo(dtype).tiny)
    return Draws(-jnp.log(uniforms[0]), -jnp.log(uniforms[1]), uniforms[2], batch_key, velocity_key)


def observe_along(estimator: Estimator, x: Array, direction: Array, idx: Array):
    """G̃ = direction·∇Ũ and c² (eq. 10) from one jvp."""
    value, per_example = estimator.directional(x, direction, idx)
    return value, estimator.noise_variance(per_example)


def stored_indices(estimator: Estimator, idx: Array) -> Array:
    """The minibatch kept for a later auxiliary observation (nothing for a full batch)."""
    return jnp.zeros((1,), idx.dtype) if estimator.full_batch else idx


def fitted(state: Any, options: Any) -> regression.RegressionFit:
    """The local regression of the buffered G̃ on t (eq. 9–12)."""
    return regression.fit(
        state.observations,
        state.slope_prior_mean,
        state.slope_prior_var,
        state.last_noise,
        relative_noise_floor=options.relative_noise_floor,
        clamp_negative_slope=options.clamp_negative_slopes,
        relative_misfit=state.misfit,
    )


def plan_event(state: Any, refresh_rate: Array, draws: Draws, horizon: Array, options: Any) -> Plan:
    """Race the band's proposal (exact inversion of its piecewise-linear integral) against the
    refreshment clock, the observation gap and the horizon; a pending observation goes first."""
    line = fitted(state, options)
    since, mean_time = state.time_since_proposal, state.mean_proposal_time
    # Supp. E: after a rejection, a negative fitted slope calls for an auxiliary observation
    # ahead; after A changed, G̃ must be re-observed.  Both happen now (dt = 0).
    auxiliary_now = (state.pending == AUXILIARY_PENDING) & (line.raw_slope < 0)
    reobserve_now = state.pending == REOBSERVE_PENDING
    pending = auxiliary_now | reobserve_now
    rate = jnp.asarray(refresh_rate, draws.exp_draw.dtype)
    refresh_time = jnp.where(rate > 0, draws.refresh_draw / jnp.where(rate > 0, rate, 1.0), jnp.inf)
    # never extrapolate the regression more than max_observation_gap·t̄ unobserved
    gap_left = jnp.maximum(
        options.max_observation_gap * mean_time - state.time_since_observation, 0.0
    )
    stop = jnp.minimum(horizon, jnp.minimum(refresh_time, gap_left))
    arrival = piecewise_linear_arrival(
        lambda s: regression.upper_band(line, state.time + s, options.k),
        draws.exp_draw,
        jnp.where(pending, 0.0, stop),
        lambda s: options.relative_dt * jnp.maximum(mean_time, since + s),
        block_size=options.knot_block_size,
        max_blocks=options.max_knot_blocks,
    )
    reached = ~arrival.arrived & ~arrival.capped
    is_refresh = reached & (refresh_time <= jnp.minimum(horizon, gap_left))
    is_gap = reached & ~is_refresh & (gap_left < horizon)
    otherwise = jnp.where(is_refresh, REFRESH, jnp.where(is_gap, OBSERVE, NONE))
    kind = jnp.where(
        pending,
        jnp.where(reobserve_now, REOBSERVE, AUXILIARY),
        jnp.where(arrival.arrived, PROPOSAL, otherwise),
    )
    capped = ~pending & arrival.capped
    return Plan(kind, arrival.time, arrival.rate, capped, line)


def observe(
    estimator: Estimator,
    state: Any,
    x: Array,
    v: Array,
    scale: Array,
    plan: Plan,
    draws: Draws,
    options: Any,
) -> Observation:
    """ONE observation at the planned point: a proposal, a refreshment (along the new v), an
    auxiliary point (Supp. E: ``auxiliary_horizon``·t̄ ahead, the last minibatch) or a
    re-observation; nothing (zeros, no data touched) when the horizon came first."""
    kind = plan.kind
    new_v = refresh_sphere(draws.velocity_key, v.shape[0], v.dtype)
    velocity = jnp.where(kind == REFRESH, new_v, v)
    direction = scale * velocity
    ahead = jnp.where(kind == AUXILIARY, options.auxiliary_horizon * state.mean_proposal_time, 0.0)
    fresh = estimator.sample_indices(draws.batch_key)
    if estimator.full_batch:
        idx = fresh
    else:
        idx = jnp.where(kind == AUXILIARY, state.batch_indices, fresh)
    zero = jnp.zeros((), x.dtype)
    value, noise = lax.cond(
        kind != NONE,
        lambda: observe_along(estimator, x + direction * ahead, direction, idx),
        lambda: (zero, zero),
    )
    return Observation(value, noise, idx, velocity, ahead)


def accept_proposal(
    estimator: Estimator,
    x: Array,
    scale: Array,
    plan: Plan,
    obs: Observation,
    accept_draw: Array,
) -> tuple[Array, Array, Array, Array]:
    """Thin a proposal: accept when u < [G̃]_+/λ; on acceptance compute the minibatch gradient
    (the only gradient vector SBPS needs) and reflect v off A∇Ũ (eq. 4/16).

    Returns ``(accept, ratio, grad, reflected)``; ``grad`` is zeros unless accepted."""
    positive = jnp.maximum(obs.value, 0.0)
    rate = plan.rate
    ratio = jnp.where(
        rate > 0,
        positive / jnp.where(rate > 0, rate, 1.0),
        jnp.where(positive > 0, jnp.inf, 0.0),
    )
    accept = (plan.kind == PROPOSAL) & (accept_draw < ratio)
    grad = lax.cond(accept, lambda: estimator.grad(x, obs.idx), lambda: jnp.zeros_like(x))
    return accept, ratio, grad, reflect(obs.velocity, scale * grad)


def update_counts(
    counts: SBPSCounts, plan: Plan, accept: Array, ratio: Array, observes: Array
) -> SBPSCounts:
    """Add one iteration to the interval's counters."""
    is_proposal = plan.kind == PROPOSAL
    as_int = lambda flag: flag.astype(jnp.int32)
    return SBPSCounts(
        proposals=counts.proposals + as_int(is_proposal),
        bounces=counts.bounces + as_int(accept),
        refreshes=counts.refreshes + as_int(plan.kind == REFRESH),
        observations=counts.observations + as_int(observes),
        auxiliary=counts.auxiliary + as_int((plan.kind == OBSERVE) | (plan.kind == AUXILIARY)),
        violations=counts.violations + as_int(is_proposal & (ratio > 1)),
        knot_caps=counts.knot_caps + as_int(plan.knot_capped),
        max_ratio=jnp.maximum(counts.max_ratio, jnp.where(is_proposal, ratio, 0.0)),
    )


def update_state(
    estimator: Estimator,
    state: Any,
    plan: Plan,
    obs: Observation,
    accept: Array,
    ratio: Array,
    grad: Array,
    scaled_grad: Array,
    reflected: Array,
    options: Any,
) -> Any:
    """The branch-free bookkeeping of one iteration: each field is selected by its kind."""
    kind, dt = plan.kind, plan.dt
    observes = kind != NONE
    gap = kind == OBSERVE
    is_proposal = kind == PROPOSAL
    rejected = is_proposal & ~accept
    restart = accept | (kind == REFRESH) | (kind == REOBSERVE)
    grow = rejected | gap | (kind == AUXILIARY)
    # after a bounce the same minibatch sees v'·A∇Ũ = −G̃ (exactly, for a fixed A)
    first_value = jnp.where(accept, jnp.dot(reflected, scaled_grad), obs.value)
    observations = regression.buffer_update(
        state.observations,
        restart,
        grow,
        jnp.where(restart, 0.0, state.time + dt + obs.ahead),
        first_value,
        obs.noise,
    )
    mean_time = state.mean_proposal_time
    count = jnp.minimum(state.num_averaged + 1, options.averaging_window)
    # the lack of fit of the line that planned this step, at the observations along it (a
    # refreshment or re-observation starts a new line and says nothing about the old one)
    judged = is_proposal | gap | (kind == AUXILIARY)
    excess = regression.excess_error(plan.line, state.time + dt + obs.ahead, obs.value, obs.noise)
    gap_time = state.time_since_proposal + dt
    fresh_minibatch = observes & (kind != AUXILIARY)
    pending = jnp.where(
        rejected | gap,
        AUXILIARY_PENDING if options.auxiliary_observations else 0,
        jnp.where(observes, 0, state.pending),
    )
    new = state._replace(
        observations=observations,
        last_noise=jnp.where(fresh_minibatch, obs.noise, state.last_noise),
        batch_indices=jnp.where(
            fresh_minibatch, stored_indices(estimator, obs.idx), state.batch_indices
        ),
        time=jnp.where(restart, 0.0, state.time + dt),
        time_since_proposal=jnp.where(is_proposal, 0.0, gap_time),
        time_since_observation=jnp.where(observes, 0.0, state.time_since_observation + dt),
        mean_proposal_time=jnp.where(
            is_proposal, mean_time + (gap_time - mean_time) / count, mean_time
        ),
        mean_acceptance=jnp.where(
            is_proposal,
            state.mean_acceptance + (jnp.minimum(ratio, 1.0) - state.mean_acceptance) / count,
            state.mean_acceptance,
        ),
        num_averaged=jnp.where(is_proposal, count, state.num_averaged),
        pending=pending.astype(state.pending.dtype),
        num_bounces=state.num_bounces + accept.astype(state.num_bounces.dtype),
        misfit=jnp.where(judged, state.misfit + (excess - state.misfit) / count, state.misfit),
    )
    if options.preconditioned:  # RMSprop average of the bounce gradients, read by warmup
        beta = options.rmsprop_decay
        first = jnp.all(state.square_avg == 0)
        average = jnp.where(first, grad**2, beta * state.square_avg + (1 - beta) * grad**2)
        new = new._replace(square_avg=jnp.where(accept, average, state.square_avg))
    if options.learn_slope_prior:
        # after a bounce, the segment's fit (observations since the previous bounce) takes
        # one stochastic-EM step on the slope prior (μ, σ²) (§4, optional step)
        eta = jnp.maximum(options.slope_prior_step_size, 1.0 / (state.num_bounces + 1.0))
        prior_mean, prior_var = regression.slope_prior_step(
            plan.line, state.slope_prior_mean, state.slope_prior_var, eta.astype(dt.dtype)
        )
        new = new._replace(
            slope_prior_mean=jnp.where(accept, prior_mean, state.slope_prior_mean),
            slope_prior_var=jnp.where(accept, prior_var, state.slope_prior_var),
        )
    return new


def make_next_event(estimator: Estimator, params: Any, options: Any) -> NextEventFn:
    """The SBPS ``next_event`` for :mod:`pplsamplers.kernels.pdmp.driver`; its carry is
    ``(SBPSState, SBPSCounts)`` and ``params`` are the kernel's
    :class:`~pplsamplers.kernels.pdmp.sbps_kernel.SBPSParams`."""
    scale = params.direction_scale

    def next_event(
        rng_key: PRNGKey, x: Array, v: Array, carry: tuple, horizon: Array
    ) -> tuple[Array, Array, tuple, Array]:
        state, counts = carry
        draws = draw(rng_key, x.dtype)
        plan = plan_event(state, params.refresh_rate, draws, horizon, options)
        x_new = x + scale * v * plan.dt
        obs = observe(estimator, state, x_new, v, scale, plan, draws, options)
        accept, ratio, grad, reflected = accept_proposal(
            estimator, x_new, scale, plan, obs, draws.accept_draw
        )
        state = update_state(
            estimator, state, plan, obs, accept, ratio, grad, scale * grad, reflected, options
        )
        counts = update_counts(counts, plan, accept, ratio, plan.kind != NONE)
        new_v = jnp.where(accept, reflected, obs.velocity)
        return plan.dt, new_v, (state, counts), accept | (plan.kind == REFRESH)

    return next_event


__all__ = [
    "AUXILIARY_PENDING",
    "REOBSERVE_PENDING",
    "Draws",
    "Observation",
    "Plan",
    "SBPSCounts",
    "accept_proposal",
    "draw",
    "fitted",
    "make_next_event",
    "observe",
    "observe_along",
    "plan_event",
    "stored_indices",
    "update_counts",
    "update_state",
    "zero_counts",
]
