"""Stochastic Bouncy Particle Sampler (SBPS) and preconditioned SBPS (pSBPS).

Pakman, Gilboa, Carlson & Paninski (2017), §4–5, Alg. 2 (Supp. C), Supp. E; DESIGN §5 errata.

The particle moves along x(t) = x + A v t with |v| = 1 (A = I for SBPS, the frozen RMSprop
diagonal for pSBPS, eq. 16).  Bounce times are proposed from the piecewise-linear upper
band of a Bayesian local linear regression of the observed directional derivatives
(eq. 9–13, :mod:`pplsamplers.pdmp.regression`), sampled exactly by
:func:`pplsamplers.pdmp.thinning.piecewise_linear_arrival` with knots spaced by
``relative_dt`` times the running mean proposal time t̄.  At a proposal, one fresh minibatch
gives G̃ = (A v)·∇Ũ and its noise variance c² (eq. 10) from ONE jvp; the proposal is
accepted with probability min(1, [G̃]_+/λ).  A ratio above 1 is a *bound violation*, the bias
diagnostic of §4.1.  Only an accepted bounce computes the minibatch gradient vector, to
reflect v (eq. 4/16) and restart the observations with (−G̃, c²).  A rejected proposal adds
(t, G̃, c²) to the buffer; if the fitted slope is then negative, one auxiliary observation is
made ``auxiliary_horizon``·t̄ ahead with the same minibatch (Supp. E), and a negative slope is
clamped to max(μ, 0) (Alg. 2, optional step).  When no proposal comes for
``max_observation_gap``·t̄, G̃ is observed anyway (a "gap" observation).  Velocities are
refreshed uniformly on the sphere at rate λ_r.  The iteration itself is
:mod:`pplsamplers.kernels.sbps_events`.

Two levels (issue 13): :func:`init` and :func:`build_kernel` (structural options) give
``kernel(rng_key, state, potential, params) -> (state, PDMPInfo)``; the tunables are
:class:`SBPSParams` (Δ, λ_r, A), which the sampler's warmup moves and then freezes.  One
kernel step is one MCMC sample: the position at the next grid time Δ later, run by
:func:`pplsamplers.pdmp.driver.advance`, with the exact time-averages of x and x² over the
interval (eq. 19).  Exact reference mode: with a full batch (c² = 0) and a very large ``k``
the sampler is an exact BPS as long as ``bound_violations`` stays 0.

Cost: n per-datum terms per observation (one jvp); +n for the gradient of an accepted bounce.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers.kernels.sbps_events import (
    SBPSCounts,
    SBPSOptions,
    make_next_event,
    stored_indices,
    zero_counts,
)
from pplsamplers.pdmp import regression
from pplsamplers.pdmp.driver import Skeleton, advance, run_skeleton
from pplsamplers.pdmp.events import EventCounts, PDMPInfo, interval_diagnostics
from pplsamplers.pdmp.flow import linear_flow, refresh_sphere
from pplsamplers.pdmp.interpolation import ThinningStats
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class SBPSParams(NamedTuple):
    """Tunables (traced): what warmup may change without recompiling."""

    sample_interval: Array
    """Δ > 0, time between samples."""
    refresh_rate: Array
    """λ_r ≥ 0, velocity refreshments per unit time."""
    direction_scale: Array
    """A = diag(direction_scale) (eq. 16), mean 1; ones for SBPS."""


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
    """The last observation's minibatch, reused for auxiliary observations (Supp. E)."""
    time: Array
    """Time since the last bounce or refreshment (the regression's clock)."""
    time_since_proposal: Array
    time_since_observation: Array
    mean_proposal_time: Array
    """t̄, running mean time between proposals (knot spacing, t_aux, adaptive Δ)."""
    mean_acceptance: Array
    """Running mean of min(1, [G̃]_+/λ) per proposal (adaptive λ_r)."""
    num_averaged: Array
    """Proposals in the running means (capped at the averaging window)."""
    slope_prior_mean: Array
    slope_prior_var: Array
    num_bounces: Array
    """Bounces so far (the step-size schedule of the slope-prior step)."""
    square_avg: Array
    """pSBPS: RMSprop average a of squared bounce gradients (read by the warmup)."""
    pending: Array
    """An observation due at the next iteration with dt = 0: 1 auxiliary (Supp. E),
    2 re-observation after A changed, 0 none."""
    misfit: Array
    """Running mean of the band line's relative lack of fit
    (:func:`~pplsamplers.pdmp.regression.excess_error`), added to its predictive variance."""


def init(
    rng_key: PRNGKey,
    position: Array,
    potential: SubsampledPotential,
    params: SBPSParams,
    *,
    k: float = 3.0,
    buffer_size: int = 64,
    velocity: Array | None = None,
    slope_prior: tuple[float, float] | None = None,
) -> SBPSState:
    """Initial state: a velocity uniform on the sphere and one observation at ``position``.

    The observation also gives the minibatch curvature h = uᵀ∇²Ũ u along u = A v (the same
    forward pass, differentiated once more), which sets the scales without any user input:
    the slope prior defaults to N(|h|, (2|h|)²) (the hyperparameter step then learns it) and
    the first mean proposal time to t̄₀ = 1/(|G̃₀| + k c₀ + √|h|).  Costs n data evaluations.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_potential
    >>> pot = tiny_potential(2)
    >>> params = SBPSParams(jnp.asarray(1.0), jnp.asarray(1.0), jnp.ones(2))
    >>> state = init(jax.random.key(0), jnp.ones(2), pot, params)
    >>> round(float(jnp.linalg.norm(state.velocity)), 5), int(state.observations.count)
    (1.0, 1)
    """
    velocity_key, batch_key = jax.random.split(rng_key)
    position = jnp.asarray(position)
    dtype = position.dtype
    if velocity is None:
        velocity = refresh_sphere(velocity_key, position.shape[0], dtype)
    value, noise, curvature, idx = probe(batch_key, position, velocity, potential, params)
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
        batch_indices=stored_indices(potential, idx),
        time=zero,
        time_since_proposal=zero,
        time_since_observation=zero,
        mean_proposal_time=1.0 / jnp.maximum(scale, tiny),
        mean_acceptance=jnp.asarray(0.5, dtype),
        num_averaged=izero,
        slope_prior_mean=jnp.asarray(prior_mean, dtype),
        slope_prior_var=jnp.asarray(prior_var, dtype),
        num_bounces=izero,
        square_avg=jnp.zeros_like(position),
        pending=izero,
        misfit=zero,
    )


def probe(
    rng_key: PRNGKey,
    position: Array,
    velocity: Array,
    potential: SubsampledPotential,
    params: SBPSParams,
) -> tuple[Array, Array, Array, Array]:
    """G̃, c² and |h| = |uᵀ∇²Ũ u| along u = A v at ``position`` from one forward pass on a
    minibatch; returns ``(value, noise, curvature, idx)``."""
    idx = potential.sample_indices(rng_key)
    direction = params.direction_scale * velocity
    (value, per_example), (curvature, _) = jax.jvp(
        lambda y: potential.directional(y, direction, idx), (position,), (direction,)
    )
    return value, potential.noise_variance(per_example), jnp.abs(curvature), idx


def preconditioner(square_avg: Array, eps: float, max_ratio: float = jnp.inf) -> Array:
    """A_ii = (1/(√a_i + ε)) / mean_j (1/(√a_j + ε)) (eq. 17–18, RMSprop convention),
    each A_ii then kept within a factor ``max_ratio`` of that mean and renormalised to mean 1.

    The cap exists because pplsamplers runs pSBPS in the shared warmup's whitened
    coordinates, where every posterior sd is about 1 already: RMSprop's gradient moments
    estimate the inverse scale only for a Gaussian, and where the posterior is far from one
    (a hierarchical funnel) they spread over a factor 30 and undo the whitening.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> preconditioner(jnp.array([4.0, 1.0]), 0.0)  # 1/2 and 1, normalised to mean 1
    Array([0.6666667, 1.3333334], dtype=float32)
    >>> preconditioner(jnp.array([1e4, 1.0, 1.0]), 0.0, max_ratio=3.0)  # 0.03 of the mean -> 1/3
    Array([0.3013493, 1.3493252, 1.3493252], dtype=float32)
    """
    inverse = 1.0 / (jnp.sqrt(square_avg) + eps)
    scale = jnp.clip(inverse / jnp.mean(inverse), 1.0 / max_ratio, max_ratio)
    scale = scale / jnp.mean(scale)
    return jnp.where(jnp.all(square_avg == 0), jnp.ones_like(square_avg), scale)


def interval_info(out: Any, counts: SBPSCounts, n: int, interval: Array) -> PDMPInfo:
    """SBPS's :class:`~pplsamplers.pdmp.events.PDMPInfo` for one interval.

    ``rate_evals`` counts every observation of G̃ (one jvp on n data each: proposals,
    refreshments, auxiliary and gap observations), so ``data_evals = (rate_evals +
    num_bounces)·n``.  ``max_rate_ratio`` is the largest [G̃]_+/λ at a proposal (> 1 is a bound
    violation), ``proposal_cap_hits`` counts proposal searches stopped by ``max_knot_blocks``,
    ``horizon_cap_hits`` is 0 (SBPS has no horizon cap; its gap observations are counted in
    ``num_auxiliary`` with the Supp. E look-aheads).
    """
    # the thinning PDMPs' counters, with every observation of G̃ as a rate evaluation
    proposals = (counts.proposals, counts.observations, counts.violations, counts.max_ratio)
    stats = ThinningStats(*proposals, counts.knot_caps, jnp.zeros((), jnp.int32))
    events = EventCounts(stats, counts.bounces, counts.refreshes)
    return interval_diagnostics(out, events, n, interval)._replace(num_auxiliary=counts.auxiliary)


def build_kernel(
    *,
    k: float = 3.0,
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
    max_events_per_sample: int = 1000,
    knot_block_size: int = 16,
    max_knot_blocks: int = 64,
) -> Callable[[PRNGKey, SBPSState, SubsampledPotential, SBPSParams], tuple[SBPSState, PDMPInfo]]:
    """Build the SBPS (or pSBPS) step ``kernel(rng_key, state, potential, params)``.

    The options are structural (Python values, validated by
    :class:`~pplsamplers.infer.sbps.SBPSConfig`); the tunables are ``params``.

    Parameters
    ----------
    k
        Width of the upper band in predictive standard deviations (eq. 13).  Larger k:
        fewer bound violations (less bias), more proposals.  The paper uses 3.
    relative_dt
        Knot spacing of the piecewise-linear band as a fraction of t̄ (DESIGN §5; the paper's
        fixed Δt = 0.01 is scale dependent).
    clamp_negative_slopes, auxiliary_observations, auxiliary_horizon
        Negative-slope handling: clamp (Alg. 2) and an auxiliary observation at
        ``auxiliary_horizon``·t̄ ahead with the last minibatch (Supp. E).
    max_observation_gap
        When no proposal came for this many t̄, observe G̃ anyway; ``inf`` disables it.
    learn_slope_prior, slope_prior_step_size
        After each bounce, one EM step of the slope prior (μ, σ²) (§4, optional step).
    relative_noise_floor
        Floor on c relative to the RMS of the observed G̃ (makes full batch well posed).
    averaging_window
        Window of the running means of proposal time and acceptance.
    preconditioned, rmsprop_decay
        pSBPS (§5): keep a ← β a + (1−β) g² over the bounce gradients in the state, for the
        warmup that sets A (:func:`preconditioner`).
    max_events_per_sample
        Cap on next-event iterations per sample (``info.interval_capped`` flags it).
    knot_block_size, max_knot_blocks
        Vectorised knot evaluation and its cap per proposal search.

    Examples
    --------
    A standard normal in 2-d with a full batch:

    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_potential
    >>> pot = tiny_potential(2)
    >>> params = SBPSParams(jnp.asarray(1.0), jnp.asarray(1.0), jnp.ones(2))
    >>> kernel = build_kernel(k=3.0)
    >>> state = init(jax.random.key(0), jnp.ones(2), pot, params)
    >>> state, info = kernel(jax.random.key(1), state, pot, params)
    >>> info.time_average.shape, bool(info.num_proposals >= 0)
    ((2,), True)
    """
    options = SBPSOptions(**locals())  # the arguments are exactly SBPSOptions' fields

    def step(
        rng_key: PRNGKey, state: SBPSState, potential: SubsampledPotential, params: SBPSParams
    ) -> tuple[SBPSState, PDMPInfo]:
        dtype = state.position.dtype
        interval = jnp.asarray(params.sample_interval, dtype)
        out = advance(
            rng_key,
            state.position,
            state.velocity,
            (state, zero_counts(dtype)),
            interval=interval,
            next_event=make_next_event(potential, params, options),
            flow=linear_flow(params.direction_scale),
            max_iterations=max_events_per_sample,
        )
        new, counts = out.kernel_state
        new = new._replace(position=out.position, velocity=out.velocity)
        return new, interval_info(out, counts, potential.n, interval)

    def kernel(
        rng_key: PRNGKey, state: SBPSState, potential: SubsampledPotential, params: SBPSParams
    ) -> tuple[SBPSState, PDMPInfo]:
        # Chains never share a batched program: under ``jax.vmap`` (NumPyro's "vectorized"
        # chains) each chain runs this same unbatched step in turn.  A batched step would
        # (i) evaluate both branches of every ``lax.cond`` (the bounce gradient at every
        # iteration) and run every chain's while-loops as long as the slowest one's, and
        # (ii) reorder floating-point reductions, which the chaotic PDMP amplifies until
        # vectorized and sequential chains no longer agree (issue 18, item 3).
        per_chain = jax.custom_batching.sequential_vmap(
            lambda key, s, p: step(key, s, potential, p)
        )
        return per_chain(rng_key, state, params)

    return kernel


def skeleton(
    rng_key: PRNGKey,
    state: SBPSState,
    potential: SubsampledPotential,
    params: SBPSParams,
    num_iterations: int,
    **options: Any,
) -> tuple[Skeleton, SBPSState]:
    """Record the continuous SBPS path: ``num_iterations`` next-event iterations (each a
    proposal, accepted or not, a refreshment or an auxiliary observation) as a
    :class:`~pplsamplers.pdmp.Skeleton`, and the state after them.

    ``options`` are :func:`build_kernel`'s.  Use :func:`pplsamplers.pdmp.driver.integrate`
    with ``linear_flow(params.direction_scale)`` for continuous-time averages of any f (§7.2).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_potential
    >>> pot = tiny_potential(2, N=20, n=5)
    >>> params = SBPSParams(jnp.asarray(1.0), jnp.asarray(0.5), jnp.ones(2))
    >>> state = init(jax.random.key(1), jnp.ones(2), pot, params)
    >>> path, _ = skeleton(jax.random.key(0), state, pot, params, 50)
    >>> path.positions.shape
    (51, 2)
    """
    path, (final, _) = run_skeleton(
        rng_key,
        state.position,
        state.velocity,
        (state, zero_counts(state.position.dtype)),
        next_event=make_next_event(potential, params, SBPSOptions(**options)),
        flow=linear_flow(params.direction_scale),
        num_iterations=num_iterations,
    )
    final = final._replace(position=path.positions[-1], velocity=path.velocities[-1])
    return path, final


__all__ = [
    "PDMPInfo",
    "SBPSCounts",
    "SBPSOptions",
    "SBPSParams",
    "SBPSState",
    "build_kernel",
    "init",
    "interval_info",
    "preconditioner",
    "probe",
    "skeleton",
]
