"""Stochastic Bouncy Particle Sampler (SBPS) and preconditioned SBPS (pSBPS).

Pakman, Gilboa, Carlson & Paninski (2017), §4–5, Alg. 2 (Supp. C), Supp. E; DESIGN §5 errata.

The particle moves along x(t) = x + A v t with |v| = 1 (A = I for SBPS, the frozen RMSprop
diagonal for pSBPS, eq. 16).  Bounce times are proposed from the piecewise-linear upper
band of a Bayesian local linear regression of the observed directional derivatives
(eq. 9–13, :mod:`pplsamplers.pdmp.regression`), sampled exactly by
:func:`pplsamplers.pdmp.thinning.piecewise_linear_arrival` with knots spaced by
``relative_dt`` times the running mean proposal time.  At a proposal, one fresh minibatch
gives G̃ = (A v)·∇Ũ and its noise variance c² (eq. 10) from ONE jvp; the proposal is
accepted with probability min(1, [G̃]_+/λ) (accept when u < [G̃]_+/λ — Alg. 2 prints the
inequality the wrong way round).  A ratio above 1 is a *bound violation*, the bias
diagnostic of §4.1.  Only an accepted bounce computes the minibatch gradient vector, to
reflect v (eq. 4/16) and restart the observations with (−G̃, c²).  A rejected proposal adds
(t, G̃, c²) to the buffer; if the fitted slope is then negative, one auxiliary observation is
made 10·t̄ ahead along the current line with the same minibatch (Supp. E; it is the next
iteration, with dt = 0), and a negative slope is clamped to max(μ, 0) (Alg. 2, optional
step).  When no proposal comes for ``max_observation_gap``·t̄, G̃ is observed anyway (a
"gap" observation), so the band is never extrapolated far.  Velocities are refreshed
uniformly on the sphere at rate λ_r (the new direction is observed once, fresh minibatch).
Every iteration makes at most one observation, so the traced program holds one
``directional`` and one ``grad`` (under ``lax.cond``) and the bookkeeping is branch-free.

One MCMC sample is the position at the next grid time (``sample_interval`` later), run by
:func:`pplsamplers.pdmp.driver.advance`, with the exact time-averages of x and x² over the
interval (eq. 19).  Exact reference mode: with a full batch (c² = 0) the sampler is an
exact BPS as long as the band dominates [G]_+ along the path; ``bound_violations``
(checked at every proposal) is the diagnostic, and a very large ``k`` drives it to 0 (for
a Gaussian target G is linear in t between events and the band is exact).

Cost: n per-datum terms per observation (one jvp: proposal, refreshment, auxiliary or gap
observation); +n for the gradient of an accepted bounce.  ``data_evals`` counts exactly that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.pdmp import regression
from pplsamplers.pdmp.driver import Skeleton, advance, run_skeleton
from pplsamplers.pdmp.flow import linear_flow, reflect, refresh_sphere
from pplsamplers.pdmp.thinning import piecewise_linear_arrival
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class SBPSState(NamedTuple):
    """Everything the next step needs (no rng_key)."""

    position: Array
    velocity: Array
    """v on the unit sphere; the particle moves along ``direction_scale * v``."""
    observations: regression.ObservationBuffer
    """(tᵢ, G̃ᵢ, cᵢ²) since the last bounce; fixed-size ring buffer (``buffer_size``)."""
    last_noise: Array
    """c² of the last minibatch (eq. 12's c_m²)."""
    batch_indices: Array
    """The last proposal's minibatch, reused for auxiliary observations (Supp. E)."""
    time: Array
    """Time since the last bounce or refreshment (the regression's clock)."""
    time_since_proposal: Array
    time_since_observation: Array
    mean_proposal_time: Array
    """t̄, running mean time between proposals (for Δt and t_aux)."""
    mean_acceptance: Array
    """Running mean of min(1, [G̃]_+/λ) per proposal."""
    num_averaged: Array
    """Proposals in the running means (capped at the averaging window)."""
    slope_prior_mean: Array
    slope_prior_var: Array
    square_avg: Array
    """pSBPS: RMSprop average a of squared bounce gradients."""
    direction_scale: Array
    """A = diag(direction_scale), mean 1 (ones for SBPS)."""
    pending: Array
    """An observation due at the next iteration with dt = 0: 1 auxiliary (Supp. E),
    2 re-observation after A changed, 0 none."""
    total_time: Array
    total_proposals: Array
    total_bounces: Array
    total_refreshes: Array
    total_violations: Array
    total_auxiliary: Array
    total_data_evals: Array


class SBPSInfo(NamedTuple):
    """Diagnostics of one sample interval."""

    data_evals: Array
    num_proposals: Array
    num_bounces: Array
    num_refreshes: Array
    bound_violations: Array
    num_auxiliary: Array
    """Observations outside proposals: Supp. E look-aheads and gap fillers."""
    time_average: Array
    """(1/Δ) ∫ x(t) dt over the interval (eq. 19)."""
    time_average_sq: Array
    """(1/Δ) ∫ x(t)² dt over the interval."""
    sample_interval: Array
    interval_capped: Array
    """True when ``max_events_per_sample`` ended the interval before its grid time."""


_NONE, _PROPOSAL, _REFRESH, _AUXILIARY, _REOBSERVE, _OBSERVE = 0, 1, 2, 3, 4, 5
_AUXILIARY_PENDING, _REOBSERVE_PENDING = 1, 2


def validate_positive(value: float, name: str, allow_zero: bool = False) -> float:
    """Raise ``ValueError`` unless ``value`` is a finite number > 0 (≥ 0 if ``allow_zero``)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and jnp.isfinite(value)
    ok = ok and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = "≥ 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}; got {value!r}.")
    return float(value)


_POSITIVE = (
    "k",
    "sample_interval",
    "relative_dt",
    "auxiliary_horizon",
    "rmsprop_eps",
    "preconditioner_tolerance",
)
_NON_NEGATIVE = ("refresh_rate", "relative_noise_floor")
_COUNTS = (
    "averaging_window",
    "max_events_per_sample",
    "knot_block_size",
    "max_knot_blocks",
    "buffer_size",
)


def validate_config(**config: float) -> None:
    """Raise ``ValueError`` naming the first bad SBPS setting (DESIGN §7)."""
    for name, value in config.items():
        if name in _POSITIVE:
            validate_positive(value, name)
        elif name == "max_observation_gap":
            if value != float("inf"):
                validate_positive(value, name)
        elif name in _NON_NEGATIVE:
            validate_positive(value, name, allow_zero=True)
        elif name in _COUNTS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}.")
        elif name == "slope_prior_step_size":
            if not (isinstance(value, int | float) and 0.0 < value <= 1.0):
                raise ValueError(f"slope_prior_step_size must lie in (0, 1]; got {value!r}.")
        elif name == "rmsprop_decay":
            if not (isinstance(value, int | float) and 0.0 <= value < 1.0):
                raise ValueError(f"rmsprop_decay must lie in [0, 1); got {value!r}.")
        else:
            raise ValueError(f"unknown SBPS setting {name!r}.")


def _observe(potential: SubsampledPotential, x: Array, direction: Array, idx: Array):
    """G̃ = direction·∇Ũ and c² (eq. 10) from one jvp."""
    value, per_example = potential.directional(x, direction, idx)
    return value, potential.noise_variance(per_example)


def _stored_indices(potential: SubsampledPotential, idx: Array) -> Array:
    # a full batch needs no storage: every evaluation uses all N data
    return jnp.zeros((1,), idx.dtype) if potential.full_batch else idx


def init(
    rng_key: PRNGKey,
    position: Array,
    potential: SubsampledPotential,
    *,
    k: float = 3.0,
    buffer_size: int = 64,
    velocity: Array | None = None,
    slope_prior: tuple[float, float] | None = None,
) -> SBPSState:
    """Initial state: a velocity uniform on the sphere and one observation at ``position``.

    The observation also gives the minibatch curvature h = vᵀ∇²Ũ v along v (the same
    forward pass, differentiated once more), which sets the scales without any user
    input: the slope prior defaults to N(|h|, (2|h|)²) (the hyperparameter step then learns
    it) and the first mean proposal time to t̄₀ = 1/(|G̃₀| + k c₀ + √|h|).  The init costs
    ``n`` data evaluations (counted in ``total_data_evals``).  Wrap it in ``jax.jit`` for a
    NumPyro-model potential (one compilation instead of op-by-op dispatch).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.0, 0.5 * jnp.sum(x**2) * jnp.ones(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> state = init(jax.random.key(0), jnp.ones(2), pot)
    >>> round(float(jnp.linalg.norm(state.velocity)), 5), int(state.observations.count)
    (1.0, 1)
    """
    velocity_key, batch_key = jax.random.split(rng_key)
    position = jnp.asarray(position)
    dtype = position.dtype
    if velocity is None:
        velocity = refresh_sphere(velocity_key, position.shape[0], dtype)
    idx = potential.sample_indices(batch_key)
    (value, per_example), (curvature, _) = jax.jvp(
        lambda y: potential.directional(y, velocity, idx), (position,), (velocity,)
    )
    noise = potential.noise_variance(per_example)
    curvature = jnp.abs(curvature)
    tiny = jnp.sqrt(jnp.finfo(dtype).tiny)
    scale = jnp.abs(value) + k * jnp.sqrt(noise) + jnp.sqrt(curvature)
    if slope_prior is None:
        prior_mean, prior_var = curvature, (2.0 * curvature) ** 2 + tiny
    else:
        prior_mean, prior_var = slope_prior
    buffer = regression.buffer_reset(regression.buffer_init(buffer_size, dtype), 0.0, value, noise)
    zero, izero = jnp.zeros((), dtype), jnp.zeros((), jnp.int32)
    return SBPSState(
        position=position,
        velocity=velocity,
        observations=buffer,
        last_noise=jnp.asarray(noise, dtype),
        batch_indices=_stored_indices(potential, idx),
        time=zero,
        time_since_proposal=zero,
        time_since_observation=zero,
        mean_proposal_time=1.0 / jnp.maximum(scale, tiny),
        mean_acceptance=jnp.asarray(0.5, dtype),
        num_averaged=izero,
        slope_prior_mean=jnp.asarray(prior_mean, dtype),
        slope_prior_var=jnp.asarray(prior_var, dtype),
        square_avg=jnp.zeros_like(position),
        direction_scale=jnp.ones_like(position),
        pending=izero,
        total_time=zero,
        total_proposals=izero,
        total_bounces=izero,
        total_refreshes=izero,
        total_violations=izero,
        total_auxiliary=izero,
        total_data_evals=jnp.asarray(idx.shape[0], jnp.int32),
    )


def preconditioner(square_avg: Array, eps: float) -> Array:
    """A_ii = (1/(√a_i + ε)) / mean_j (1/(√a_j + ε)) (eq. 17–18, RMSprop convention)."""
    inverse = 1.0 / (jnp.sqrt(square_avg) + eps)
    scale = inverse / jnp.mean(inverse)
    return jnp.where(jnp.all(square_avg == 0), jnp.ones_like(square_avg), scale)


def build_kernel(
    potential: SubsampledPotential,
    *,
    k: float = 3.0,
    refresh_rate: float = 0.0,
    sample_interval: float = 1.0,
    relative_dt: float = 0.1,
    clamp_negative_slopes: bool = True,
    auxiliary_observations: bool = True,
    auxiliary_horizon: float = 10.0,
    max_observation_gap: float = 5.0,
    learn_slope_prior: bool = True,
    slope_prior_step_size: float = 0.05,
    relative_noise_floor: float = 1e-2,
    averaging_window: int = 1000,
    preconditioned: bool = False,
    rmsprop_decay: float = 0.99,
    rmsprop_eps: float = 1e-4,
    preconditioner_tolerance: float = 0.05,
    max_events_per_sample: int = 1000,
    knot_block_size: int = 16,
    max_knot_blocks: int = 64,
) -> Callable[..., tuple[SBPSState, SBPSInfo]]:
    """Build the SBPS (or pSBPS) step ``step(rng_key, state, sample_interval=None,
    refresh_rate=None, adapt_preconditioner=False) -> (state, info)``.

    Parameters
    ----------
    potential
        The minibatch potential.  ``potential.full_batch`` with a large ``k`` is exact BPS.
    k
        Width of the upper band in predictive standard deviations (eq. 13).  Larger k:
        fewer bound violations (less bias), more proposals.  The paper uses 3.
    refresh_rate
        λ_r ≥ 0, velocity refreshments per unit time.
    sample_interval
        Δ > 0, time between samples (default of the ``sample_interval`` argument).
    relative_dt
        Knot spacing of the piecewise-linear band as a fraction of the mean proposal time
        (DESIGN §5; the paper's fixed Δt = 0.01 is scale dependent).
    clamp_negative_slopes, auxiliary_observations, auxiliary_horizon
        Negative-slope handling: clamp (Alg. 2) and an auxiliary observation at
        ``auxiliary_horizon``·t̄ ahead with the last minibatch (Supp. E).
    max_observation_gap
        When no proposal came for this many t̄, observe G̃ anyway (fresh minibatch, no
        proposal) so that the band is never extrapolated far; ``inf`` disables it.
    learn_slope_prior, slope_prior_step_size
        After each bounce, one EM step of the slope prior (μ, σ²) on the marginal likelihood
        (the optional hyperparameter step of §4).
    relative_noise_floor
        Floor on c relative to the RMS of the observed G̃ (makes full batch well posed).
    averaging_window
        Window of the running means of proposal time and acceptance.
    preconditioned, rmsprop_decay, rmsprop_eps
        pSBPS (§5): a ← β a + (1−β) g² on each bounce gradient; A from
        :func:`preconditioner`, recomputed only when ``adapt_preconditioner`` is true.
    preconditioner_tolerance
        While adapting, A is replaced (and G̃ re-observed) only when some A_ii changed by
        more than this fraction.
    max_events_per_sample
        Cap on next-event iterations per sample (``info.interval_capped`` flags it).
    knot_block_size, max_knot_blocks
        Vectorised knot evaluation and its cap per proposal search.

    Examples
    --------
    A standard normal in 2-d with a full batch:

    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.0, 0.5 * jnp.sum(x**2) * jnp.ones(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> step = build_kernel(pot, k=3.0, refresh_rate=1.0, sample_interval=1.0)
    >>> state = init(jax.random.key(0), jnp.ones(2), pot)
    >>> state, info = step(jax.random.key(1), state)
    >>> info.time_average.shape, bool(info.num_proposals >= 0)
    ((2,), True)
    """
    validate_config(
        k=k,
        refresh_rate=refresh_rate,
        sample_interval=sample_interval,
        relative_dt=relative_dt,
        auxiliary_horizon=auxiliary_horizon,
        max_observation_gap=max_observation_gap,
        relative_noise_floor=relative_noise_floor,
        rmsprop_eps=rmsprop_eps,
        preconditioner_tolerance=preconditioner_tolerance,
        slope_prior_step_size=slope_prior_step_size,
        rmsprop_decay=rmsprop_decay,
        averaging_window=averaging_window,
        max_events_per_sample=max_events_per_sample,
        knot_block_size=knot_block_size,
        max_knot_blocks=max_knot_blocks,
    )
    n = potential.n
    fit_options = dict(
        relative_noise_floor=relative_noise_floor, clamp_negative_slope=clamp_negative_slopes
    )

    def fitted(state: SBPSState) -> regression.RegressionFit:
        return regression.fit(
            state.observations,
            state.slope_prior_mean,
            state.slope_prior_var,
            state.last_noise,
            **fit_options,
        )

    def make_next_event(refresh: Array) -> Callable:
        def next_event(key: PRNGKey, x: Array, v: Array, state: SBPSState, horizon: Array):
            uniform_key, batch_key, velocity_key = jax.random.split(key, 3)
            dtype = x.dtype
            uniforms = jax.random.uniform(uniform_key, (3,), dtype, minval=jnp.finfo(dtype).tiny)
            exp_draw, refresh_draw, accept_draw = (
                -jnp.log(uniforms[0]),
                -jnp.log(uniforms[1]),
                uniforms[2],
            )
            scale = state.direction_scale
            line = fitted(state)
            since, mean_time = state.time_since_proposal, state.mean_proposal_time
            # Supp. E: after a rejection, a negative fitted slope calls for an auxiliary
            # observation 10·t̄ ahead; after A changed, G̃ must be re-observed.  Both happen
            # now (dt = 0) and a zero limit skips the proposal search.
            auxiliary_now = (state.pending == _AUXILIARY_PENDING) & (line.raw_slope < 0)
            reobserve_now = state.pending == _REOBSERVE_PENDING
            pending = auxiliary_now | reobserve_now
            refresh_time = jnp.where(refresh > 0, refresh_draw / refresh, jnp.inf)
            # never extrapolate the regression more than max_observation_gap·t̄ unobserved
            gap_left = jnp.maximum(
                max_observation_gap * mean_time - state.time_since_observation, 0.0
            )
            stop = jnp.minimum(horizon, jnp.minimum(refresh_time, gap_left))
            arrival = piecewise_linear_arrival(
                lambda s: regression.upper_band(line, state.time + s, k),
                exp_draw,
                jnp.where(pending, 0.0, stop),
                lambda s: relative_dt * jnp.maximum(mean_time, since + s),
                block_size=knot_block_size,
                max_blocks=max_knot_blocks,
            )
            reached = ~arrival.arrived & ~arrival.capped
            is_refresh = reached & (refresh_time <= jnp.minimum(horizon, gap_left))
            is_gap = reached & ~is_refresh & (gap_left < horizon)
            kind = jnp.where(
                pending,
                jnp.where(reobserve_now, _REOBSERVE, _AUXILIARY),
                jnp.where(
                    arrival.arrived,
                    _PROPOSAL,
                    jnp.where(is_refresh, _REFRESH, jnp.where(is_gap, _OBSERVE, _NONE)),
                ),
            )
            dt, rate = arrival.time, arrival.rate
            x_new = x + scale * v * dt
            # ONE observation per iteration: a proposal, a refreshment, an auxiliary point
            # (Supp. E: 10·t̄ ahead, the last minibatch) or a re-observation after A changed
            obs_v = jnp.where(kind == _REFRESH, refresh_sphere(velocity_key, v.shape[0], dtype), v)
            direction = scale * obs_v
            ahead = jnp.where(kind == _AUXILIARY, auxiliary_horizon * mean_time, 0.0)
            fresh = potential.sample_indices(batch_key)
            if potential.full_batch:
                idx = fresh
            else:
                idx = jnp.where(kind == _AUXILIARY, state.batch_indices, fresh)
            zero = jnp.zeros((), dtype)
            value, noise = lax.cond(
                kind != _NONE,
                lambda: _observe(potential, x_new + direction * ahead, direction, idx),
                lambda: (zero, zero),
            )
            positive = jnp.maximum(value, 0.0)
            ratio = jnp.where(
                rate > 0,
                positive / jnp.where(rate > 0, rate, 1.0),
                jnp.where(positive > 0, jnp.inf, 0.0),
            )
            is_proposal = kind == _PROPOSAL
            accept = is_proposal & (accept_draw < ratio)
            # the full gradient vector: only on an accepted bounce, with the same minibatch
            grad = lax.cond(accept, lambda: potential.grad(x_new, idx), lambda: jnp.zeros_like(x))
            scaled_grad = scale * grad
            reflected = reflect(v, scaled_grad)
            stored = _stored_indices(potential, idx)
            # bookkeeping, branch-free: each field is selected by the kind of this iteration
            observes = kind != _NONE
            gap = kind == _OBSERVE
            rejected = is_proposal & ~accept
            restart = accept | (kind == _REFRESH) | (kind == _REOBSERVE)
            grow = rejected | gap | (kind == _AUXILIARY)
            # after a bounce the same minibatch sees v'·A∇Ũ = −G̃ (exactly, for frozen A)
            first_value = jnp.where(accept, jnp.dot(reflected, scaled_grad), value)
            observations = regression.buffer_update(
                state.observations,
                restart,
                grow,
                jnp.where(restart, 0.0, state.time + dt + ahead),
                first_value,
                noise,
            )
            count = jnp.minimum(state.num_averaged + 1, averaging_window)
            gap_time = since + dt
            fresh_minibatch = observes & (kind != _AUXILIARY)
            new_state = state._replace(
                position=x_new,
                observations=observations,
                last_noise=jnp.where(fresh_minibatch, noise, state.last_noise),
                batch_indices=jnp.where(fresh_minibatch, stored, state.batch_indices),
                time=jnp.where(restart, 0.0, state.time + dt),
                time_since_proposal=jnp.where(is_proposal, 0.0, gap_time),
                time_since_observation=jnp.where(observes, 0.0, state.time_since_observation + dt),
                mean_proposal_time=jnp.where(
                    is_proposal, mean_time + (gap_time - mean_time) / count, mean_time
                ),
                mean_acceptance=jnp.where(
                    is_proposal,
                    state.mean_acceptance
                    + (jnp.minimum(ratio, 1.0) - state.mean_acceptance) / count,
                    state.mean_acceptance,
                ),
                num_averaged=jnp.where(is_proposal, count, state.num_averaged),
                pending=jnp.where(
                    rejected | gap,
                    _AUXILIARY_PENDING if auxiliary_observations else 0,
                    jnp.where(observes, 0, state.pending),
                ).astype(state.pending.dtype),
                total_time=state.total_time + dt,
                total_proposals=state.total_proposals + is_proposal,
                total_bounces=state.total_bounces + accept,
                total_refreshes=state.total_refreshes + (kind == _REFRESH),
                total_violations=state.total_violations + (is_proposal & (ratio > 1)),
                total_auxiliary=state.total_auxiliary + (gap | (kind == _AUXILIARY)),
                total_data_evals=state.total_data_evals
                + n * (observes.astype(jnp.int32) + accept.astype(jnp.int32)),
            )
            if preconditioned:  # RMSprop on the bounce gradients (A itself changes in step)
                fresh = jnp.all(state.square_avg == 0)
                average = jnp.where(
                    fresh, grad**2, rmsprop_decay * state.square_avg + (1 - rmsprop_decay) * grad**2
                )
                new_state = new_state._replace(
                    square_avg=jnp.where(accept, average, state.square_avg)
                )
            if learn_slope_prior:
                # after a bounce, the segment's fit (observations since the previous bounce)
                # takes one step on the slope prior (μ, σ²)
                eta = jnp.maximum(slope_prior_step_size, 1.0 / (state.total_bounces + 1.0))
                prior_mean, prior_var = regression.slope_prior_step(
                    line, state.slope_prior_mean, state.slope_prior_var, eta.astype(dtype)
                )
                new_state = new_state._replace(
                    slope_prior_mean=jnp.where(accept, prior_mean, state.slope_prior_mean),
                    slope_prior_var=jnp.where(accept, prior_var, state.slope_prior_var),
                )
            new_v = jnp.where(accept, reflected, obs_v)
            is_event = accept | (kind == _REFRESH)
            return dt, new_v, new_state._replace(velocity=new_v), is_event

        return next_event

    def step(
        rng_key: PRNGKey,
        state: SBPSState,
        sample_interval: Array | None = sample_interval,
        refresh_rate: Array | None = refresh_rate,
        adapt_preconditioner: Array | bool = False,
    ) -> tuple[SBPSState, SBPSInfo]:
        start = state
        if preconditioned:
            # A may change only between intervals (the flow is fixed within one); when it
            # does, the buffered G̃ are stale and the next iteration re-observes at dt = 0
            proposed = preconditioner(state.square_avg, rmsprop_eps)
            change = jnp.max(jnp.abs(proposed / state.direction_scale - 1.0))
            update = jnp.asarray(adapt_preconditioner) & (change > preconditioner_tolerance)
            state = state._replace(
                direction_scale=jnp.where(update, proposed, state.direction_scale),
                pending=jnp.where(update, _REOBSERVE_PENDING, state.pending).astype(jnp.int32),
            )
        dtype = state.position.dtype
        interval = jnp.asarray(sample_interval, dtype)
        out = advance(
            rng_key,
            state.position,
            state.velocity,
            state,
            interval=interval,
            next_event=make_next_event(jnp.asarray(refresh_rate, dtype)),
            flow=linear_flow(state.direction_scale if preconditioned else None),
            max_iterations=max_events_per_sample,
        )
        new = out.kernel_state._replace(position=out.position, velocity=out.velocity)
        diff = lambda name: getattr(new, name) - getattr(start, name)
        info = SBPSInfo(
            data_evals=diff("total_data_evals"),
            num_proposals=diff("total_proposals"),
            num_bounces=diff("total_bounces"),
            num_refreshes=diff("total_refreshes"),
            bound_violations=diff("total_violations"),
            num_auxiliary=diff("total_auxiliary"),
            time_average=out.mean,
            time_average_sq=out.mean_sq,
            sample_interval=interval,
            interval_capped=out.capped,
        )
        return new, info

    step.make_next_event = make_next_event  # used by :func:`skeleton`
    step.default_refresh_rate = refresh_rate
    return step


def skeleton(
    rng_key: PRNGKey,
    state: SBPSState,
    step: Callable,
    num_iterations: int,
    refresh_rate: float | None = None,
) -> tuple[Skeleton, SBPSState]:
    """Record the continuous SBPS path: ``num_iterations`` next-event iterations (each one a
    proposal, accepted or not, or a refreshment) as a :class:`~pplsamplers.pdmp.Skeleton`.

    Use :func:`pplsamplers.pdmp.driver.integrate` with ``linear_flow(state.direction_scale)``
    for continuous-time averages of any f (SBPS §7.2).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.0, 0.5 * jnp.sum(x**2) * jnp.ones(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> step = build_kernel(pot, refresh_rate=0.5)
    >>> path, _ = skeleton(jax.random.key(0), init(jax.random.key(1), jnp.ones(2), pot), step, 50)
    >>> path.positions.shape
    (51, 2)
    """
    rate = step.default_refresh_rate if refresh_rate is None else refresh_rate
    dtype = state.position.dtype
    return run_skeleton(
        rng_key,
        state.position,
        state.velocity,
        state,
        next_event=step.make_next_event(jnp.asarray(rate, dtype)),
        flow=linear_flow(state.direction_scale),
        num_iterations=num_iterations,
    )


__all__ = [
    "SBPSInfo",
    "SBPSState",
    "build_kernel",
    "init",
    "preconditioner",
    "skeleton",
    "validate_config",
    "validate_positive",
]
