"""The Boomerang sampler with adaptive interpolation thinning.

Goan et al. (pdmp-bnn-boomerang-goan.txt) §2.3 and Bierkens et al. (2020), with the two
errata of DESIGN §5 and event times from Alg. 2 (:mod:`pplsamplers.pdmp.interpolation`):

* reference N(x*, Σ*) ⊗ N(0, Σ*) (:class:`~pplsamplers.kernels.boomerang_reference.GaussianReference`);
* flow: x(t) = x* + (x − x*) cos t + v sin t, v(t) = −(x − x*) sin t + v cos t (x(0) = x;
  the paper prints the sign of the first term wrong);
* rate: λ(t) = [v(t)·∇E(x(t))]_+ with ∇E(x) = ∇Ũ(x) − Σ*⁻¹(x − x*) — *not* ∇U as the paper
  prints: the Gaussian part is carried by the flow;
* reflection (eq. 6 with ∇E): v' = v − 2 (∇E·v / ∇E·Σ*∇E) Σ*∇E;
* refreshment at rate λ_ref: v ~ N(0, Σ*).

Rate evaluations use one ``potential.directional`` (jvp) each; the reflection uses the
gradient of the minibatch that accepted the event.  Full-batch, minibatch and
control-variate gradients come from the potential.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp

from pplsamplers.kernels.boomerang_reference import GaussianReference
from pplsamplers.kernels.bps import validate_common
from pplsamplers.pdmp.driver import Skeleton, advance, run_skeleton
from pplsamplers.pdmp.events import interval_diagnostics, make_next_event, zero_counts
from pplsamplers.pdmp.flow import elliptical_flow
from pplsamplers.pdmp.interpolation import (
    Envelope,
    PDMPTuning,
    fresh_envelope,
    validate_thinning,
    validate_tuning,
)
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class BoomerangState(NamedTuple):
    """Position, velocity, the carried envelope and the tuning."""

    position: Array
    velocity: Array
    envelope: Envelope
    tuning: PDMPTuning


class BoomerangInfo(NamedTuple):
    """Diagnostics of one sample interval (see ``interval_diagnostics``)."""

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


def init(
    rng_key: PRNGKey,
    position: Array,
    reference: GaussianReference,
    *,
    sample_interval: float = 1.0,
    t_init: float = 0.1,
    max_extrapolation: float = 1.0,
) -> BoomerangState:
    """Initial state: v ~ N(0, Σ*) and a fresh envelope.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.kernels.boomerang_reference import gaussian_reference
    >>> ref = gaussian_reference(jnp.zeros(2), jnp.ones(2))
    >>> init(jax.random.key(0), jnp.ones(2), ref).velocity.shape
    (2,)
    """
    validate_tuning(sample_interval, t_init, max_extrapolation)
    position = jnp.asarray(position)
    dtype = position.dtype
    tuning = PDMPTuning(
        *(jnp.asarray(t, dtype) for t in (sample_interval, t_init, max_extrapolation))
    )
    return BoomerangState(
        position, reference.draw(rng_key).astype(dtype), fresh_envelope(dtype), tuning
    )


def energy_gradient(
    potential: SubsampledPotential, reference: GaussianReference, x: Array, idx: Array
) -> Array:
    """∇E(x) = ∇Ũ(x) − Σ*⁻¹(x − x*) on minibatch ``idx`` (DESIGN §5)."""
    return potential.grad(x, idx) - reference.precision_times(x - reference.mean)


def _next_event(
    potential: SubsampledPotential,
    reference: GaussianReference,
    tuning: PDMPTuning,
    *,
    refresh_rate: float,
    alpha: float,
    max_evaluations: int,
    min_gap: float,
    noise_margin: float,
):
    flow = elliptical_flow(reference.mean)

    def noise_sd(per_example: Array) -> Array:
        if noise_margin == 0:
            return jnp.zeros((), per_example.dtype)
        return jnp.sqrt(potential.noise_variance(per_example))

    def rate_along(x: Array, v: Array):
        def rate_fn(key: PRNGKey, t: Array) -> tuple[Array, Array]:
            x_t, v_t = flow.move(x, v, t)
            idx = potential.sample_indices(key)
            value, per_example = potential.directional(x_t, v_t, idx)
            # v·∇E = v·∇Ũ − v·Σ*⁻¹(x − x*)
            rate = value - v_t @ reference.precision_times(x_t - reference.mean)
            return rate, noise_sd(per_example), idx

        return rate_fn

    def reflect_at(x: Array, v: Array, idx: Array) -> Array:
        return reference.reflect(v, energy_gradient(potential, reference, x, idx))

    next_event = make_next_event(
        rate_along=rate_along,
        reflect_at=reflect_at,
        draw_velocity=reference.draw,
        flow=flow,
        refresh_rate=refresh_rate,
        alpha=alpha,
        tuning=tuning,
        max_evaluations=max_evaluations,
        min_gap=min_gap,
        noise_margin=noise_margin,
    )
    return next_event, flow


def build_kernel(
    potential: SubsampledPotential,
    reference: GaussianReference,
    *,
    refresh_rate: float = 1.0,
    alpha: float = 1.0,
    max_evaluations: int = 1000,
    max_events_per_sample: int = 10_000,
    min_gap: float = 0.0,
    noise_margin: float = 0.0,
) -> Callable[[PRNGKey, BoomerangState], tuple[BoomerangState, BoomerangInfo]]:
    """Build a Boomerang step: run the PDMP for one sample interval Δ.

    Parameters
    ----------
    potential
        The (full-batch, minibatch or control-variate) potential.
    reference
        N(x*, Σ*) (:func:`~pplsamplers.kernels.boomerang_reference.build_reference` or
        :func:`~pplsamplers.kernels.boomerang_reference.gaussian_reference`).
    refresh_rate
        λ_ref ≥ 0 (time is measured in radians of the elliptical flow).
    alpha
        α ≥ 1 of eq. (12).
    max_evaluations, max_events_per_sample, min_gap, noise_margin
        As in :func:`pplsamplers.kernels.bps.build_kernel`.

    Examples
    --------
    With the target equal to the reference, ∇E = 0 and nothing bounces:

    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> from pplsamplers.kernels.boomerang_reference import gaussian_reference
    >>> terms = lambda x, idx: (0.5 * x @ x, jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> ref = gaussian_reference(jnp.zeros(2), jnp.ones(2))
    >>> state, info = build_kernel(pot, ref)(jax.random.key(1), init(jax.random.key(0),
    ...                                                               jnp.ones(2), ref))
    >>> int(info.num_bounces)
    0
    """
    validate_common(refresh_rate)
    validate_thinning(alpha, max_evaluations, min_gap, noise_margin=noise_margin)
    if reference.mean.shape != (potential.dim,):
        raise ValueError(
            f"reference mean must have shape ({potential.dim},); got {reference.mean.shape}."
        )
    config = dict(
        refresh_rate=float(refresh_rate),
        alpha=float(alpha),
        max_evaluations=int(max_evaluations),
        min_gap=float(min_gap),
        noise_margin=float(noise_margin),
    )

    def step(rng_key: PRNGKey, state: BoomerangState) -> tuple[BoomerangState, BoomerangInfo]:
        next_event, flow = _next_event(potential, reference, state.tuning, **config)
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
        info = BoomerangInfo(
            **interval_diagnostics(out, counts, potential.n, state.tuning.sample_interval)
        )
        return state._replace(position=out.position, velocity=out.velocity, envelope=envelope), info

    return step


def skeleton(
    rng_key: PRNGKey,
    potential: SubsampledPotential,
    reference: GaussianReference,
    state: BoomerangState,
    num_iterations: int,
    *,
    refresh_rate: float = 1.0,
    alpha: float = 1.0,
    max_evaluations: int = 1000,
    min_gap: float = 0.0,
    noise_margin: float = 0.0,
) -> Skeleton:
    """The Boomerang's event skeleton (``num_iterations`` next-event iterations).

    Between rows the path is the elliptical flow: draw it with
    ``elliptical_flow(reference.mean).move(positions[k], velocities[k], s)``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> from pplsamplers.kernels.boomerang_reference import gaussian_reference
    >>> terms = lambda x, idx: (x @ x, jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> ref = gaussian_reference(jnp.zeros(2), jnp.ones(2))
    >>> sk = skeleton(jax.random.key(1), pot, ref, init(jax.random.key(0), jnp.ones(2), ref), 4)
    >>> sk.times.shape
    (5,)
    """
    validate_common(refresh_rate)
    validate_thinning(alpha, max_evaluations, min_gap, noise_margin=noise_margin)
    next_event, flow = _next_event(
        potential,
        reference,
        state.tuning,
        refresh_rate=refresh_rate,
        alpha=alpha,
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


__all__ = ["BoomerangInfo", "BoomerangState", "build_kernel", "energy_gradient", "init", "skeleton"]
