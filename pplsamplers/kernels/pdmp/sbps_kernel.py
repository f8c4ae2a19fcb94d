"""The SBPS kernel: its options, state, tunables, ``init``, ``build_kernel`` and ``skeleton``
(its warmup and declaration: :mod:`~pplsamplers.kernels.pdmp.sbps`; one event iteration:
:mod:`~pplsamplers.kernels.pdmp.sbps_events`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.estimator import Estimator
from pplsamplers.kernels.pdmp import regression
from pplsamplers.kernels.pdmp.driver import Skeleton, advance, run_skeleton
from pplsamplers.kernels.pdmp.events import EventCounts, PDMPInfo, interval_diagnostics
from pplsamplers.kernels.pdmp.flow import linear_flow, refresh_sphere
from pplsamplers.kernels.pdmp.interpolation import ThinningStats
from pplsamplers.kernels.pdmp.sbps_events import (
    SBPSCounts,
    make_next_event,
    stored_indices,
    zero_counts,
)
from pplsamplers.types import Array, PRNGKey


@dataclass(frozen=True)
class SBPSOptions:
    """SBPS's options, validated once: the kernel's structure and its warmup's targets.

    Parameters
    ----------
    k : float, default 3.0
        Band width in predictive sds (eq. 13): the bias/cost knob.  Larger k means fewer bound
        violations and more proposals; the paper recommends 3–5.
    sample_interval : float or None, default None
        Δ > 0; ``None`` (default): adapted in warmup to about ``target_proposals`` per draw.
    refresh_rate : float or None, default None
        λ_r ≥ 0 per unit time; ``None`` (default): in warmup, ``relative_refresh_rate`` times
        the bounce rate.
    target_proposals : float or "auto", default "auto"
        Proposals per draw; ``"auto"`` (default): ten up to 30 latents, then D / 3, at most 100
        (the radial direction of a bouncy particle relaxes in O(D) events).
    relative_refresh_rate : float or None, default None
        λ_r / bounce rate; ``None``: :func:`~pplsamplers.kernels.pdmp.sbps.relative_refresh`.
    relative_dt : float, default 0.1
        Knot spacing as a fraction of t̄ (the paper's fixed Δt = 0.01 depends on the scale).
    buffer_size : int, default 64
        Regression observations kept since the last bounce (the most recent ones).
    preconditioned : bool, default False
        pSBPS (§5): a diagonal RMSprop preconditioner, set once in warmup from the mean of
        the RMSprop average over ``preconditioner_window`` (fractions of the warmup), each
        A_ii kept within ``max_scale_ratio`` of the mean (:func:`preconditioner`).
    rmsprop_decay, rmsprop_eps : float, defaults 0.99 and 1e-4
        β and ε of that average (eq. 17 with the RMSprop convention).
    start_at_anchor : bool, default False
        Start every chain at the control variate's anchor (the mode), not a Gaussian draw; in
        high dimension the mode is about √D sds from the typical set, and SBPS leaves it slowly.
    clamp_negative_slopes, auxiliary_observations, auxiliary_horizon : bool; bool; float
        Negative-slope handling: clamp (Alg. 2) and an auxiliary observation
        ``auxiliary_horizon``·t̄ ahead with the last minibatch (Supp. E).
    max_observation_gap : float, default 5.0
        When no proposal came for this many t̄, observe G̃ anyway; ``inf`` disables it.
    learn_slope_prior, slope_prior_step_size : bool; float, defaults True and 0.05
        After each bounce, one EM step of the slope prior (§4).
    relative_noise_floor : float, default 1e-2
        Floor on c relative to the RMS of the observed G̃ (a full batch is well posed).
    averaging_window : int, default 1000
        Window of the running means of proposal time and acceptance.
    max_events_per_sample : int, default 1000
        Cap on next-event iterations per draw (``interval_capped`` flags it).
    knot_block_size, max_knot_blocks : int, defaults 16 and 64
        Vectorised knot evaluation and its cap per proposal search.
    """

    k: float = 3.0
    sample_interval: float | None = None
    refresh_rate: float | None = None
    target_proposals: float | str = "auto"
    relative_refresh_rate: float | None = None
    relative_dt: float = 0.1
    buffer_size: int = 64
    preconditioned: bool = False
    rmsprop_decay: float = 0.99
    rmsprop_eps: float = 1e-4
    preconditioner_window: tuple[float, float] = (0.6, 0.9)
    max_scale_ratio: float = 3.0
    start_at_anchor: bool = False
    clamp_negative_slopes: bool = True
    auxiliary_observations: bool = True
    auxiliary_horizon: float = 10.0
    max_observation_gap: float = 5.0
    learn_slope_prior: bool = True
    slope_prior_step_size: float = 0.05
    relative_noise_floor: float = 1e-2
    averaging_window: int = 1000
    max_events_per_sample: int = 1000
    knot_block_size: int = 16
    max_knot_blocks: int = 64

    def __post_init__(self) -> None:
        validation.switches(self)
        for name in ("k", "relative_dt", "auxiliary_horizon", "rmsprop_eps"):
            validation.positive(name, getattr(self, name))
        validation.positive_or_auto("target_proposals", self.target_proposals)
        lo, hi = self.preconditioner_window
        if not 0 <= lo < hi <= 1:
            raise ValueError(
                f"preconditioner_window must be (start, end) with 0 <= start < end <= 1 "
                f"(fractions of the warmup); got {self.preconditioner_window!r}."
            )
        if not self.max_scale_ratio >= 1.0:
            raise ValueError(
                "max_scale_ratio must be >= 1 (1 turns pSBPS's preconditioner off); "
                f"got {self.max_scale_ratio!r}."
            )
        validation.optional_positive("sample_interval", self.sample_interval)
        for name in ("refresh_rate", "relative_refresh_rate"):
            if getattr(self, name) is not None:
                validation.positive(name, getattr(self, name), allow_zero=True)
        validation.positive("relative_noise_floor", self.relative_noise_floor, allow_zero=True)
        if self.max_observation_gap != float("inf"):
            validation.positive("max_observation_gap", self.max_observation_gap)
        for name in (
            "buffer_size", "averaging_window", "max_events_per_sample", "knot_block_size",
            "max_knot_blocks",
        ):  # fmt: skip
            validation.positive_int(name, getattr(self, name))
        validation.in_interval(
            "slope_prior_step_size", self.slope_prior_step_size, 0.0, 1.0, closed=True
        )
        validation.positive("slope_prior_step_size", self.slope_prior_step_size)
        validation.in_interval("rmsprop_decay", self.rmsprop_decay, 0.0, 1.0)


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
    """Due next with dt = 0: 1 an auxiliary observation (Supp. E), 2 after A changed, 0 none."""
    misfit: Array
    """Running relative lack of fit of the band (``regression.excess_error``), added to its variance."""


def init(
    rng_key: PRNGKey,
    position: Array,
    estimator: Estimator,
    params: SBPSParams,
    options: SBPSOptions = SBPSOptions(),
    *,
    velocity: Array | None = None,
    slope_prior: tuple[float, float] | None = None,
) -> SBPSState:
    """Initial state: a velocity uniform on the sphere and one observation at ``position``.

    The same forward pass, differentiated once more, gives the minibatch curvature h = uᵀ∇²Ũ u
    along u = A v, which sets the scales without user input: the slope prior defaults to
    N(|h|, (2|h|)²) and t̄₀ to 1/(|G̃₀| + k c₀ + √|h|).  Costs n data evaluations.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(2)
    >>> params = SBPSParams(jnp.asarray(1.0), jnp.asarray(1.0), jnp.ones(2))
    >>> state = init(jax.random.key(0), jnp.ones(2), est, params)
    >>> round(float(jnp.linalg.norm(state.velocity)), 5), int(state.observations.count)
    (1.0, 1)
    """
    k, buffer_size = options.k, options.buffer_size
    velocity_key, batch_key = jax.random.split(rng_key)
    position = jnp.asarray(position)
    dtype = position.dtype
    if velocity is None:
        velocity = refresh_sphere(velocity_key, position.shape[0], dtype)
    value, noise, curvature, idx = probe(batch_key, position, velocity, estimator, params)
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
        batch_indices=stored_indices(estimator, idx),
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
    estimator: Estimator,
    params: SBPSParams,
) -> tuple[Array, Array, Array, Array]:
    """G̃, c² and |h| = |uᵀ∇²Ũ u| along u = A v at ``position`` from one forward pass on a
    minibatch; returns ``(value, noise, curvature, idx)``."""
    idx = estimator.sample_indices(rng_key)
    direction = params.direction_scale * velocity
    (value, per_example), (curvature, _) = jax.jvp(
        lambda y: estimator.directional(y, direction, idx), (position,), (direction,)
    )
    return value, estimator.noise_variance(per_example), jnp.abs(curvature), idx


def preconditioner(square_avg: Array, eps: float, max_ratio: float = jnp.inf) -> Array:
    """A_ii = (1/(√a_i + ε)) / mean_j (1/(√a_j + ε)) (eq. 17–18, RMSprop convention),
    each A_ii then kept within a factor ``max_ratio`` of that mean and renormalised to mean 1.

    The cap exists because pSBPS runs in the shared warmup's whitened coordinates, where every
    posterior sd is about 1 already: RMSprop's gradient moments estimate the inverse scale only
    for a Gaussian, and far from one (a hierarchical funnel) they spread and undo the whitening.

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
    """SBPS's :class:`~pplsamplers.kernels.pdmp.events.PDMPInfo` for one interval.

    ``rate_evals`` counts every observation of G̃ (one jvp on n data each: proposals,
    refreshments, auxiliary and gap observations), so ``data_evals = (rate_evals +
    num_bounces)·n``.  ``max_rate_ratio`` is the largest [G̃]_+/λ at a proposal (> 1 is a bound
    violation), ``proposal_cap_hits`` counts proposal searches stopped by ``max_knot_blocks``,
    ``horizon_cap_hits`` is 0 (gap observations count in ``num_auxiliary``, with Supp. E's).
    """
    proposals = (counts.proposals, counts.observations, counts.violations, counts.max_ratio)
    stats = ThinningStats(*proposals, counts.knot_caps, jnp.zeros((), jnp.int32))
    events = EventCounts(stats, counts.bounces, counts.refreshes)
    return interval_diagnostics(out, events, n, interval)._replace(num_auxiliary=counts.auxiliary)


def build_kernel(
    options: SBPSOptions = SBPSOptions(),
) -> Callable[[PRNGKey, SBPSState, Estimator, SBPSParams], tuple[SBPSState, PDMPInfo]]:
    """The SBPS (or pSBPS) step ``kernel(rng_key, state, estimator, params)`` for ``options``.

    Examples
    --------
    A standard normal in 2-d with a full batch:

    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(2)
    >>> params = SBPSParams(jnp.asarray(1.0), jnp.asarray(1.0), jnp.ones(2))
    >>> state = init(jax.random.key(0), jnp.ones(2), est, params)
    >>> state, info = build_kernel()(jax.random.key(1), state, est, params)
    >>> info.time_average.shape, bool(info.num_proposals >= 0)
    ((2,), True)
    """
    max_events_per_sample = options.max_events_per_sample

    def step(
        estimator: Estimator, rng_key: PRNGKey, state: SBPSState, params: SBPSParams
    ) -> tuple[SBPSState, PDMPInfo]:
        dtype = state.position.dtype
        interval = jnp.asarray(params.sample_interval, dtype)
        out = advance(
            rng_key,
            state.position,
            state.velocity,
            (state, zero_counts(dtype)),
            interval=interval,
            next_event=make_next_event(estimator, params, options),
            flow=linear_flow(params.direction_scale),
            max_iterations=max_events_per_sample,
        )
        new, counts = out.kernel_state
        new = new._replace(position=out.position, velocity=out.velocity)
        return new, interval_info(out, counts, estimator.n, interval)

    def kernel(
        rng_key: PRNGKey, state: SBPSState, estimator: Estimator, params: SBPSParams
    ) -> tuple[SBPSState, PDMPInfo]:
        # Under jax.vmap (NumPyro's "vectorized" chains) each chain runs this unbatched step in
        # turn.  A batched step would evaluate both branches of every lax.cond (the bounce
        # gradient at every iteration), run every chain's loops as long as the slowest one's,
        # and reorder float reductions, which the chaotic PDMP amplifies until vectorized and
        # sequential chains disagree.
        return jax.custom_batching.sequential_vmap(partial(step, estimator))(rng_key, state, params)

    return kernel


def skeleton(
    rng_key: PRNGKey,
    state: SBPSState,
    estimator: Estimator,
    params: SBPSParams,
    num_iterations: int,
    options: SBPSOptions = SBPSOptions(),
) -> tuple[Skeleton, SBPSState]:
    """The continuous SBPS path of ``num_iterations`` next-event iterations (proposals,
    refreshments, auxiliary observations) as a :class:`~pplsamplers.kernels.pdmp.driver.Skeleton`,
    and the state after them; :func:`~pplsamplers.kernels.pdmp.driver.integrate` with
    ``linear_flow(params.direction_scale)`` gives continuous-time averages of any f (§7.2).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(2, N=20, n=5)
    >>> params = SBPSParams(jnp.asarray(1.0), jnp.asarray(0.5), jnp.ones(2))
    >>> state = init(jax.random.key(1), jnp.ones(2), est, params)
    >>> path, _ = skeleton(jax.random.key(0), state, est, params, 50)
    >>> path.positions.shape
    (51, 2)
    """
    path, (final, _) = run_skeleton(
        rng_key,
        state.position,
        state.velocity,
        (state, zero_counts(state.position.dtype)),
        next_event=make_next_event(estimator, params, options),
        flow=linear_flow(params.direction_scale),
        num_iterations=num_iterations,
    )
    final = final._replace(position=path.positions[-1], velocity=path.velocities[-1])
    return path, final


__all__ = [
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
