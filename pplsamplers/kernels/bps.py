"""The Bouncy Particle Sampler (BPS) and σBPS with adaptive interpolation thinning.

Goan et al. (pdmp-bnn-boomerang-goan.txt) §2.1–2.2, with event times from Alg. 2
(:mod:`pplsamplers.pdmp.interpolation`):

* flow (§2.2): x(t) = x + A v t, v constant; A = I for BPS, A = diag(σ̂) for σBPS;
* rate (eq. 2 / §2.2): λ(t) = [(A v)·∇Ũ(x + A v t)]_+, one ``potential.directional`` (jvp)
  per evaluation;
* reflection (eq. 3 / eq. 4): v' = v − 2 (A∇Ũ·v / ‖A∇Ũ‖²) A∇Ũ, with the gradient of the
  minibatch that accepted the event;
* refreshment (§2.4): at rate λ_ref, v ~ N(0, s² I) (s = ``velocity_scale``).

Gradients are exact with a full-batch potential (``n == N``), approximate with a minibatch
potential (the paper's scheme), and much less noisy with a control-variate potential
(:func:`pplsamplers.potential.with_control_variate`): the kernel only sees the potential.

One kernel step is one MCMC sample: the PDMP runs to the next grid time (Δ later, DESIGN
§3.4) and ``Info`` carries the exact time-averages of x and x² over the interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp

from pplsamplers.pdmp.driver import Skeleton, advance, run_skeleton
from pplsamplers.pdmp.events import interval_diagnostics, make_next_event, zero_counts
from pplsamplers.pdmp.flow import linear_flow, reflect, refresh_gaussian
from pplsamplers.pdmp.interpolation import (
    Envelope,
    PDMPTuning,
    fresh_envelope,
    validate_thinning,
    validate_tuning,
)
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class BPSState(NamedTuple):
    """Position, velocity, the carried envelope, σBPS's A (ones for BPS) and the tuning."""

    position: Array
    velocity: Array
    envelope: Envelope
    direction_scale: Array
    tuning: PDMPTuning


class BPSInfo(NamedTuple):
    """Diagnostics of one sample interval (see :func:`interval_diagnostics`)."""

    data_evals: Array
    num_proposals: Array
    num_bounces: Array
    num_refreshes: Array
    rate_evals: Array
    bound_violations: Array
    max_rate_ratio: Array
    proposal_cap_hits: Array
    horizon_cap_hits: Array
    interval_capped: Array
    time_average: Array
    time_average_sq: Array
    sample_interval: Array


def validate_common(refresh_rate: float, velocity_scale: float = 1.0) -> None:
    """Raise ``ValueError`` naming the argument for a negative rate or bad velocity scale."""
    if refresh_rate is None or not (jnp.isfinite(refresh_rate) and refresh_rate >= 0):
        raise ValueError(f"refresh_rate must be a finite number >= 0; got {refresh_rate!r}.")
    if not (jnp.isfinite(velocity_scale) and velocity_scale > 0):
        raise ValueError(
            f"velocity_scale must be a finite positive number; got {velocity_scale!r}."
        )


def init(
    rng_key: PRNGKey,
    position: Array,
    *,
    sample_interval: float = 1.0,
    t_init: float = 0.1,
    max_extrapolation: float = 1.0,
    velocity_scale: float = 1.0,
    direction_scale: Array | None = None,
) -> BPSState:
    """Initial state: v ~ N(0, s² I), a fresh envelope, A = ``direction_scale`` (or I).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> state = init(jax.random.key(0), jnp.zeros(3))
    >>> state.velocity.shape, bool(state.envelope.valid)
    ((3,), False)
    """
    validate_tuning(sample_interval, t_init, max_extrapolation)
    validate_common(0.0, velocity_scale)
    position = jnp.asarray(position)
    dtype = position.dtype
    scale = (
        jnp.ones_like(position) if direction_scale is None else jnp.asarray(direction_scale, dtype)
    )
    if scale.shape != position.shape:
        raise ValueError(f"direction_scale must have shape {position.shape}; got {scale.shape}.")
    velocity = refresh_gaussian(rng_key, velocity_scale * jnp.ones_like(position))
    tuning = PDMPTuning(
        *(jnp.asarray(t, dtype) for t in (sample_interval, t_init, max_extrapolation))
    )
    return BPSState(position, velocity, fresh_envelope(dtype), scale, tuning)


def _next_event(
    potential: SubsampledPotential,
    state: BPSState,
    *,
    refresh_rate: float,
    alpha: float,
    velocity_scale: float,
    max_evaluations: int,
    min_gap: float,
    noise_margin: float,
):
    scale = state.direction_scale
    flow = linear_flow(scale)

    def noise_sd(per_example: Array) -> Array:
        if noise_margin == 0:
            return jnp.zeros((), per_example.dtype)
        return jnp.sqrt(potential.noise_variance(per_example))

    def rate_along(x: Array, v: Array):
        direction = scale * v

        def rate_fn(key: PRNGKey, t: Array) -> tuple[Array, Array]:
            idx = potential.sample_indices(key)
            value, per_example = potential.directional(x + direction * t, direction, idx)  # eq. 2
            return value, noise_sd(per_example), idx

        return rate_fn

    def reflect_at(x: Array, v: Array, idx: Array) -> Array:
        return reflect(v, scale * potential.grad(x, idx))  # eq. (3) / eq. (4)

    def draw_velocity(key: PRNGKey) -> Array:
        return refresh_gaussian(key, velocity_scale * jnp.ones_like(scale))

    next_event = make_next_event(
        rate_along=rate_along,
        reflect_at=reflect_at,
        draw_velocity=draw_velocity,
        flow=flow,
        refresh_rate=refresh_rate,
        alpha=alpha,
        tuning=state.tuning,
        max_evaluations=max_evaluations,
        min_gap=min_gap,
        noise_margin=noise_margin,
    )
    return next_event, flow


def build_kernel(
    potential: SubsampledPotential,
    *,
    refresh_rate: float = 1.0,
    alpha: float = 1.0,
    velocity_scale: float = 1.0,
    max_evaluations: int = 1000,
    max_events_per_sample: int = 10_000,
    min_gap: float = 0.0,
    noise_margin: float = 0.0,
) -> Callable[[PRNGKey, BPSState], tuple[BPSState, BPSInfo]]:
    """Build a BPS / σBPS step: run the PDMP for one sample interval Δ.

    Parameters
    ----------
    potential
        The (full-batch, minibatch or control-variate) potential.
    refresh_rate
        λ_ref ≥ 0, in the sampler's time units (§2.4).
    alpha
        α ≥ 1 of eq. (12).
    velocity_scale
        s of the refreshment law N(0, s² I).
    max_evaluations
        Cap on rate evaluations per event (:func:`interpolation_thinning`).
    max_events_per_sample
        Cap on next-event iterations per sample interval (``interval_capped`` flags it).
    min_gap, noise_margin
        See :func:`~pplsamplers.pdmp.interpolation.interpolation_thinning` (``noise_margin``
        > 0 is an extension of Alg. 2 for noisy minibatch rates; 0 is the paper).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.5 * x @ x, jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> step = build_kernel(pot)
    >>> state, info = step(jax.random.key(1), init(jax.random.key(0), jnp.zeros(2)))
    >>> state.position.shape, info.time_average.shape, int(info.bound_violations)
    ((2,), (2,), 0)
    """
    validate_common(refresh_rate, velocity_scale)
    validate_thinning(alpha, max_evaluations, min_gap, noise_margin=noise_margin)
    config = dict(
        refresh_rate=float(refresh_rate),
        alpha=float(alpha),
        velocity_scale=float(velocity_scale),
        max_evaluations=int(max_evaluations),
        min_gap=float(min_gap),
        noise_margin=float(noise_margin),
    )

    def step(rng_key: PRNGKey, state: BPSState) -> tuple[BPSState, BPSInfo]:
        next_event, flow = _next_event(potential, state, **config)
        out = advance(
            rng_key,
            state.position,
            state.velocity,
            (state.envelope, zero_counts(state.position.dtype)),
            interval=state.tuning.sample_interval,
            next_event=next_event,
            flow=flow,
            max_iterations=max_events_per_sample,
        )
        envelope, counts = out.kernel_state
        info = BPSInfo(
            **interval_diagnostics(out, counts, potential.n, state.tuning.sample_interval)
        )
        new_state = state._replace(position=out.position, velocity=out.velocity, envelope=envelope)
        return new_state, info

    return step


def skeleton(
    rng_key: PRNGKey,
    potential: SubsampledPotential,
    state: BPSState,
    num_iterations: int,
    *,
    refresh_rate: float = 1.0,
    alpha: float = 1.0,
    velocity_scale: float = 1.0,
    max_evaluations: int = 1000,
    min_gap: float = 0.0,
    noise_margin: float = 0.0,
) -> Skeleton:
    """The continuous BPS path: ``num_iterations`` next-event iterations (DESIGN §3.4).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.5 * x @ x, jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> sk = skeleton(jax.random.key(1), pot, init(jax.random.key(0), jnp.ones(2)), 5)
    >>> sk.positions.shape
    (6, 2)
    """
    validate_common(refresh_rate, velocity_scale)
    validate_thinning(alpha, max_evaluations, min_gap, noise_margin=noise_margin)
    next_event, flow = _next_event(
        potential,
        state,
        refresh_rate=refresh_rate,
        alpha=alpha,
        velocity_scale=velocity_scale,
        max_evaluations=max_evaluations,
        min_gap=min_gap,
        noise_margin=noise_margin,
    )
    path, _ = run_skeleton(
        rng_key,
        state.position,
        state.velocity,
        (state.envelope, zero_counts(state.position.dtype)),
        next_event=next_event,
        flow=flow,
        num_iterations=num_iterations,
        horizon=jnp.inf,
    )
    return path


__all__ = ["BPSInfo", "BPSState", "build_kernel", "init", "skeleton", "validate_common"]
