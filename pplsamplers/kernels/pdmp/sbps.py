"""Stochastic Bouncy Particle Sampler (SBPS) and preconditioned SBPS (pSBPS).

Pakman, Gilboa, Carlson & Paninski (2017), §4–5, Alg. 2, Supp. E.  The particle moves along
x(t) = x + A v t with |v| = 1 (A = I for SBPS, the frozen RMSprop diagonal for pSBPS, eq. 16).
Bounce times are proposed from the piecewise-linear upper band of a Bayesian local linear
regression of the observed directional derivatives (eq. 9–13,
:mod:`~pplsamplers.kernels.pdmp.regression`), sampled exactly with knots spaced by
``relative_dt`` times the running mean proposal time t̄.  At a proposal, one fresh minibatch
gives G̃ = (A v)·∇Ũ and its noise variance c² (eq. 10) from one jvp; the proposal is accepted
with probability min(1, [G̃]_+/λ) (Alg. 2 prints the inequality the wrong way round,
``docs/design.md``), and a ratio above 1 is a *bound violation*, the bias diagnostic of §4.1.
Only an accepted bounce computes a minibatch gradient, to reflect v (eq. 4/16).  A negative
fitted slope is clamped and triggers an auxiliary look-ahead observation (Supp. E); when no
proposal comes for ``max_observation_gap``·t̄, G̃ is observed anyway.  Velocities are refreshed
uniformly on the sphere at rate λ_r.  The iteration itself is
:mod:`~pplsamplers.kernels.pdmp.sbps_events`.

The tunables are :class:`SBPSParams` (Δ, λ_r, A), which the warmup moves and then freezes:
Δ so that a draw costs ``target_proposals`` proposals, λ_r a fraction of the bounce rate
(:func:`relative_refresh`), and for pSBPS A from the RMSprop average over a window
(:func:`preconditioner`).  With a full batch and a large ``k`` the sampler is an exact BPS as
long as ``bound_violations`` stays 0.  Cost: n per-datum terms per observation; +n for the
gradient of an accepted bounce.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.estimator import Estimator
from pplsamplers.kernels.pdmp.events import PDMP_INFO_FIELDS, PDMPInfo
from pplsamplers.kernels.pdmp.flow import refresh_sphere
from pplsamplers.kernels.pdmp.sbps_events import REOBSERVE_PENDING
from pplsamplers.kernels.pdmp.sbps_kernel import (
    SBPSOptions,
    SBPSParams,
    SBPSState,
    build_kernel,
    init,
    preconditioner,
    probe,
)
from pplsamplers.kernels.pdmp.tuning import events_per_draw
from pplsamplers.kernels.spec import KernelSpec, WarmupContext, WarmupWindow
from pplsamplers.types import Array, PRNGKey

EXACT_RELATIVE_REFRESH_RATE = 1.0
CONTROL_VARIATE_RELATIVE_REFRESH_RATE = 0.1
MINIBATCH_RELATIVE_REFRESH_RATE = 0.01
PROPOSALS_PER_SAMPLE = 10.0
"""SBPS's proposals per draw up to 30 latents (``target_proposals="auto"``); above, D / 3, at
most 100 (:func:`~pplsamplers.kernels.pdmp.tuning.radial_events`)."""


def relative_refresh(options: SBPSOptions, estimator: Estimator) -> float:
    """λ_r as a fraction of the bounce rate: the user's ``relative_refresh_rate``, else 1 with
    exact gradients, 0.1 with control-variate minibatches and 0.01 with plain minibatches.

    With exact gradients nothing but refreshment changes the distance of the particle's line
    from the centre of a Gaussian (|x|² − (x·v)² is constant along the flow and at every
    bounce), so radial functionals (|x|², a hierarchical scale) move only by refreshment, and
    refreshing at the bounce rate mixes them best.  Plain minibatch noise randomises every
    reflection instead (Pakman et al. §6.1, Supp. F), so those runs keep the paper's low rate;
    control-variate gradients, whose noise the automatic batch size holds near 0.3 posterior
    sds, lie in between.
    """
    if options.relative_refresh_rate is not None:
        return options.relative_refresh_rate
    if estimator.full_batch:
        return EXACT_RELATIVE_REFRESH_RATE
    if estimator.control_variate:
        return CONTROL_VARIATE_RELATIVE_REFRESH_RATE
    return MINIBATCH_RELATIVE_REFRESH_RATE


def window_average(
    adapt: tuple[Array, Array], square_avg: Array, iteration: Array, start: int, end: int
) -> tuple[tuple[Array, Array], Array]:
    """pSBPS: the mean of the RMSprop average ``square_avg`` over the warmup iterations
    [start, end) (one snapshot per draw), and whether A is due (at ``end - 1``); the snapshots
    weigh the window's bounce gradients about equally.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> adapt = (jnp.zeros(2), jnp.zeros(()))
    >>> for i, a in enumerate([jnp.array([9.0, 9.0]), jnp.array([1.0, 3.0])]):
    ...     adapt, due = window_average(adapt, a, jnp.asarray(i), 0, 2)
    >>> adapt[0] / adapt[1], bool(due)
    (Array([5., 6.], dtype=float32), True)
    """
    total, count = adapt
    inside = (iteration >= start) & (iteration < end)
    adapt = (jnp.where(inside, total + square_avg, total), count + inside)
    return adapt, (iteration == end - 1) & (adapt[1] > 0)


def _tuned(
    options: SBPSOptions, mean_time: Array, acceptance: Array, params: SBPSParams,
    relative: float, proposals: float,
) -> SBPSParams:  # fmt: skip
    interval, refresh = params.sample_interval, params.refresh_rate
    if options.sample_interval is None:
        interval = proposals * mean_time
    if options.refresh_rate is None:
        refresh = relative * acceptance / mean_time
    return params._replace(sample_interval=interval, refresh_rate=refresh)


@partial(jax.jit, static_argnums=(1, 2))
def _initial_params(key: PRNGKey, estimator: Estimator, options: SBPSOptions, at: Array) -> Any:
    """Δ and λ_r from one probe of t̄₀ at ``at`` (as :func:`init` does); A = I."""
    dtype = at.dtype
    velocity_key, batch_key = jax.random.split(key)
    ones = jnp.ones_like(at)
    start = SBPSParams(jnp.ones((), dtype), jnp.zeros((), dtype), ones)
    velocity = refresh_sphere(velocity_key, at.shape[0], dtype)
    value, noise, curvature, _ = probe(batch_key, at, velocity, estimator, start)
    scale = jnp.abs(value) + options.k * jnp.sqrt(noise) + jnp.sqrt(curvature)
    mean_time = 1.0 / jnp.maximum(scale, jnp.sqrt(jnp.finfo(dtype).tiny))
    fixed = SBPSParams(
        jnp.asarray(options.sample_interval or 1.0, dtype),
        jnp.asarray(options.refresh_rate or 0.0, dtype),
        ones,
    )
    proposals = events_per_draw(options.target_proposals, estimator.dim, PROPOSALS_PER_SAMPLE)
    relative = relative_refresh(options, estimator)
    return _tuned(options, mean_time, jnp.asarray(0.5, dtype), fixed, relative, proposals)


def declare(options: SBPSOptions) -> KernelSpec:
    """The declaration of SBPS / pSBPS to the adapter."""

    def default_params(
        rng_key: PRNGKey, estimator: Estimator, context: WarmupContext
    ) -> SBPSParams:
        at = context.init_position if context.anchor is None else context.anchor
        return _initial_params(rng_key, estimator, options, at)

    def adapt(state, params, averages, iteration, relative, proposals, num_warmup) -> tuple:
        params = _tuned(
            options, state.mean_proposal_time, state.mean_acceptance, params, relative, proposals
        )
        if options.preconditioned:
            lo, hi = options.preconditioner_window
            start, end = int(np.floor(lo * num_warmup)), int(np.floor(hi * num_warmup))
            averages, due = window_average(averages, state.square_avg, iteration, start, end)
            mean = averages[0] / jnp.maximum(averages[1], 1)
            proposed = preconditioner(mean, options.rmsprop_eps, options.max_scale_ratio)
            params = params._replace(
                direction_scale=jnp.where(due, proposed, params.direction_scale)
            )
            # A changes only between intervals: the buffered G̃ are stale, so the next
            # iteration re-observes at dt = 0 and the running means start again
            pending = jnp.where(due, REOBSERVE_PENDING, state.pending)
            averaged = jnp.where(due, 0, state.num_averaged)
            state = state._replace(
                pending=pending.astype(state.pending.dtype),
                num_averaged=averaged.astype(state.num_averaged.dtype),
            )
        return state, params, averages

    def warmup_init(state: SBPSState, params: SBPSParams) -> Any:
        # pSBPS: the sum and count of the RMSprop snapshots in the window (per chain)
        if not options.preconditioned:
            return None
        return (jnp.zeros_like(state.square_avg), jnp.zeros((), state.square_avg.dtype))

    def warmup(
        rng_key: PRNGKey,
        state: SBPSState,
        params: SBPSParams,
        adapt_state: Any,
        info: PDMPInfo,
        estimator: Estimator,
        window: WarmupWindow,
    ) -> tuple[SBPSState, SBPSParams, Any]:
        # per chain, unbatched, like the kernel itself (bit-identical chain methods)
        relative = relative_refresh(options, estimator)
        proposals = events_per_draw(options.target_proposals, estimator.dim, PROPOSALS_PER_SAMPLE)
        if not options.preconditioned:  # Δ and λ_r only: no window
            per_chain = jax.custom_batching.sequential_vmap(
                lambda s, p: adapt(s, p, None, None, relative, proposals, 0)[:2]
            )
            return (*per_chain(state, params), adapt_state)
        per_chain = jax.custom_batching.sequential_vmap(
            lambda s, p, a, i: adapt(s, p, a, i, relative, proposals, window.num_warmup)
        )
        return per_chain(state, params, adapt_state, window.iteration)

    def start(
        rng_key: PRNGKey, estimator: Estimator, params: Any, context: WarmupContext
    ) -> Array | None:
        return context.anchor if options.start_at_anchor else None

    def describe(info: PDMPInfo) -> str:
        elapsed, proposals = float(jnp.sum(info.sample_interval)), int(jnp.sum(info.num_proposals))
        bounce_rate = float(jnp.sum(info.num_bounces)) / elapsed if elapsed > 0 else 0.0
        violations = float(jnp.sum(info.bound_violations)) / proposals if proposals else 0.0
        return f"{bounce_rate:.3g} bounces/time, {violations:.2%} violations"

    return KernelSpec(
        init=partial(init, options=options),
        build_kernel=partial(build_kernel, options),
        default_params=default_params,
        warmup=warmup,
        warmup_init=warmup_init,
        diagnostic_fields=PDMP_INFO_FIELDS,
        describe=describe,
        start=start,
        chains_in_turn=True,
    )


Options = SBPSOptions
"""The options dataclass of this sampler (what the NumPyro class takes)."""
Info = PDMPInfo
"""The per-step diagnostics of this sampler's kernel."""

__all__ = [
    "Info",
    "Options",
    "PROPOSALS_PER_SAMPLE",
    "SBPSOptions",
    "declare",
    "relative_refresh",
    "window_average",
]
