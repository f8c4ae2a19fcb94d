"""SBPS and pSBPS declared on the generic adapter (:mod:`pplsamplers.kernels.sbps`).

The sampler's own warmup (:func:`sbps_spec`) moves the tunables :class:`SBPSParams` after each
warmup step and is frozen afterwards:

* Δ = ``target_proposals`` · t̄ (t̄ the kernel's running mean time between proposals), so that
  one sample costs about ``target_proposals`` proposals (by default ten, D / 3 above 30
  latents: :data:`PROPOSALS_PER_SAMPLE`), unless ``sample_interval`` is given;
* λ_r = ``relative_refresh_rate`` · (mean acceptance) / t̄, a fraction of the bounce rate,
  unless ``refresh_rate`` is given; the fraction defaults to 1 with exact (full-batch)
  gradients, 0.1 with control variates and 0.01 with plain minibatches
  (:func:`relative_refresh`);
* pSBPS: A = :func:`~pplsamplers.kernels.sbps.preconditioner` of the mean RMSprop average of
  the bounce gradients (§5, eq. 17–18) over the warmup window ``preconditioner_window``
  (fractions of the warmup, default 0.6–0.9, after the transient from the start: a window
  from 0.1 or 0.3 on cut pSBPS's ESS per epoch on the paper's logistic regression by 35–55 %),
  set once at the window's end (A = I before it) and kept for the rest of warmup, which
  re-tunes Δ and λ_r under it; each A_ii within a factor ``max_scale_ratio`` (3) of the mean
  (the shared warmup has whitened the posterior already).  A frozen A must estimate the
  posterior mean of g², not a recent one (:func:`window_average`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers import validation
from pplsamplers.infer.adapter import SubsampledKernel
from pplsamplers.infer.pdmp import events_per_draw
from pplsamplers.infer.spec import KernelSpec, WarmupWindow
from pplsamplers.kernels import sbps
from pplsamplers.kernels.sbps_events import REOBSERVE_PENDING, SBPSOptions
from pplsamplers.pdmp.events import PDMP_INFO_FIELDS, PDMPInfo
from pplsamplers.pdmp.flow import refresh_sphere
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


@dataclass(frozen=True)
class SBPSConfig:
    """SBPS's options, validated once: the kernel's structural ``kernel`` options
    (:class:`~pplsamplers.kernels.sbps_events.SBPSOptions`) and the warmup's own (see
    :class:`SBPS`).  :meth:`create` takes them all as flat keyword arguments."""

    kernel: SBPSOptions = SBPSOptions()
    sample_interval: float | None = None
    refresh_rate: float | None = None
    target_proposals: float | str = "auto"
    relative_refresh_rate: float | None = None
    buffer_size: int = 64
    rmsprop_eps: float = 1e-4
    preconditioner_window: tuple[float, float] = (0.6, 0.9)
    max_scale_ratio: float = 3.0
    start_at_anchor: bool = False

    @classmethod
    def create(cls, **options: Any) -> SBPSConfig:
        """A config from flat keyword arguments (unknown names raise ``TypeError``)."""
        kernel = {name: options.pop(name) for name in SBPSOptions._fields if name in options}
        return cls(SBPSOptions(**kernel), **options)

    def __post_init__(self) -> None:
        kernel = self.kernel
        validation.switches(self)
        validation.switches(kernel)
        for name in ("k", "relative_dt", "auxiliary_horizon"):
            validation.positive(name, getattr(kernel, name))
        validation.positive_or_auto("target_proposals", self.target_proposals)
        validation.positive("rmsprop_eps", self.rmsprop_eps)
        lo, hi = self.preconditioner_window
        if not 0 <= lo < hi <= 1:
            raise ValueError(
                f"preconditioner_window must be (start, end) with 0 <= start < end <= 1 "
                f"(fractions of the warmup); got {self.preconditioner_window!r}."
            )
        if not self.max_scale_ratio >= 1.0:
            raise ValueError(
                f"max_scale_ratio must be >= 1 (1 turns pSBPS's preconditioner off); "
                f"got {self.max_scale_ratio!r}."
            )
        validation.optional_positive("sample_interval", self.sample_interval)
        if self.refresh_rate is not None:
            validation.positive("refresh_rate", self.refresh_rate, allow_zero=True)
        if self.relative_refresh_rate is not None:
            validation.positive(
                "relative_refresh_rate", self.relative_refresh_rate, allow_zero=True
            )
        validation.positive("relative_noise_floor", kernel.relative_noise_floor, allow_zero=True)
        if kernel.max_observation_gap != float("inf"):
            validation.positive("max_observation_gap", kernel.max_observation_gap)
        validation.positive_int("buffer_size", self.buffer_size)
        for name in ("averaging_window", "max_events_per_sample", "knot_block_size"):
            validation.positive_int(name, getattr(kernel, name))
        validation.positive_int("max_knot_blocks", kernel.max_knot_blocks)
        step = kernel.slope_prior_step_size
        validation.positive("slope_prior_step_size", step)
        validation.in_interval("slope_prior_step_size", step, 0.0, 1.0, closed=True)
        validation.in_interval("rmsprop_decay", kernel.rmsprop_decay, 0.0, 1.0)


EXACT_RELATIVE_REFRESH_RATE = 1.0
"""Default λ_r / bounce rate with exact (full-batch) gradients; see :func:`relative_refresh`."""
CONTROL_VARIATE_RELATIVE_REFRESH_RATE = 0.1
"""Default λ_r / bounce rate with control-variate minibatches; see :func:`relative_refresh`."""
MINIBATCH_RELATIVE_REFRESH_RATE = 0.01
"""Default λ_r / bounce rate with plain minibatch gradients; see :func:`relative_refresh`."""


def relative_refresh(config: SBPSConfig, potential: SubsampledPotential) -> float:
    """λ_r as a fraction of the bounce rate: the user's ``relative_refresh_rate``, else 1 with
    exact (full-batch) gradients, 0.1 with control-variate minibatches and 0.01 with plain
    minibatches.

    With exact gradients nothing but refreshment changes the distance of the particle's line
    from the centre of a Gaussian (|x|² − (x·v)² is constant along the flow and at every
    bounce), so radial functionals (|x|², a hierarchical scale) move only by refreshment.  At
    1 % of the bounce rate a 300-d standard normal gave ESS 3 for |x|² in 40 000 draws, and the
    hierarchical robustness model's τ an sd 20 % too small with a misleading ESS of 2 000;
    at the bounce rate the radial ESS per gradient was the best measured for D = 10 … 1000.
    There (D = 304, 100 proposals per draw, three seeds) the worst error was 0.14-0.21 sd at 1.
    Minibatch noise randomises every reflection instead (Pakman et al. §6.1, Supp. F): on
    their logistic regression (n = 100) refreshing at the bounce rate cut the minimum ESS
    from 549 to 11, so plain minibatch runs keep the paper's low rate.  Control-variate
    gradients lie in between: the automatic batch size holds their noise near 0.3 posterior
    sd, too little to randomise the reflections.  On logistic regressions at N = 10⁵ with
    the defaults (2 × (500 + 2000) draws), 0.1 against 0.01 raised the minimum coordinate
    ESS from 1659 to 2175 and that of the radial r = |z|²/D from 134 to 187 at d = 20
    (n = 276), and from 880 to 1068 and 23 to 56 at d = 100 (n = 5855); 1 gave radial ESS 83
    but coordinate ESS 199 at d = 100.
    """
    if config.relative_refresh_rate is not None:
        return config.relative_refresh_rate
    if potential.full_batch:
        return EXACT_RELATIVE_REFRESH_RATE
    if potential.anchor is not None:
        return CONTROL_VARIATE_RELATIVE_REFRESH_RATE
    return MINIBATCH_RELATIVE_REFRESH_RATE


PROPOSALS_PER_SAMPLE = 10.0
"""SBPS's proposals per draw up to 30 latents; above, D / 3, at most 100
(``target_proposals="auto"``, :func:`~pplsamplers.infer.pdmp.radial_events`: with exact
gradients the radial direction of a bouncy particle relaxes in O(D) events).

On the 304-dimensional hierarchical robustness model, in 2 × 20 000 draws of ten proposals,
τ's integrated autocorrelation was about 170 draws (bulk ESS 231), and in the suite's
2 × (300 + 500) draws SBPS ended 0.45 sd from NUTS.  With 30, 60 and 100 proposals per draw
the worst mean error was 0.29-0.35, 0.21-0.28 and 0.14-0.21 sd at seeds 20261122, 1 and 2
(``benchmarks/robustness.py --samplers sbps --models hierarchical --seed S --option
target_proposals=P``).  A ``target_proposals`` given is kept."""


def window_average(
    adapt: tuple[Array, Array], square_avg: Array, iteration: Array, start: int, end: int
) -> tuple[tuple[Array, Array], Array]:
    """pSBPS: the mean of the RMSprop average ``square_avg`` over the warmup iterations
    [start, end) (one snapshot per sample), and whether A is due (at ``end - 1``).

    Averaging the snapshots weighs the window's bounce gradients about equally, so the
    frozen A estimates the posterior mean of g² over the window's whole path rather than
    over its last ~100 bounces.

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


def sbps_spec(config: SBPSConfig) -> KernelSpec:
    """The :class:`KernelSpec` of SBPS / pSBPS (module docstring for its warmup)."""

    def tuned(
        mean_time: Array,
        acceptance: Array,
        params: sbps.SBPSParams,
        relative: float,
        proposals: float,
    ) -> sbps.SBPSParams:
        interval, refresh = params.sample_interval, params.refresh_rate
        if config.sample_interval is None:
            interval = proposals * mean_time
        if config.refresh_rate is None:
            refresh = relative * acceptance / mean_time
        return params._replace(sample_interval=interval, refresh_rate=refresh)

    def default_params(
        rng_key: PRNGKey, potential: SubsampledPotential, mode: Array | None = None
    ) -> sbps.SBPSParams:
        """Δ and λ_r from one probe of t̄₀ (as :func:`~pplsamplers.kernels.sbps.init` does)
        at the anchor or the potential's initial point; A = I."""

        @jax.jit
        def probe(key: PRNGKey) -> sbps.SBPSParams:
            position = potential.init_position if potential.anchor is None else potential.anchor
            dtype = position.dtype
            velocity_key, batch_key = jax.random.split(key)
            ones = jnp.ones_like(position)
            start = sbps.SBPSParams(jnp.ones((), dtype), jnp.zeros((), dtype), ones)
            velocity = refresh_sphere(velocity_key, position.shape[0], dtype)
            value, noise, curvature, _ = sbps.probe(batch_key, position, velocity, potential, start)
            scale = jnp.abs(value) + config.kernel.k * jnp.sqrt(noise) + jnp.sqrt(curvature)
            mean_time = 1.0 / jnp.maximum(scale, jnp.sqrt(jnp.finfo(dtype).tiny))
            fixed = sbps.SBPSParams(
                jnp.asarray(config.sample_interval or 1.0, dtype),
                jnp.asarray(config.refresh_rate or 0.0, dtype),
                ones,
            )
            return tuned(
                mean_time,
                jnp.asarray(0.5, dtype),
                fixed,
                relative_refresh(config, potential),
                events_per_draw(config.target_proposals, potential.dim, PROPOSALS_PER_SAMPLE),
            )

        return probe(rng_key)

    def adapt(
        state: sbps.SBPSState,
        params: sbps.SBPSParams,
        averages: Any,
        iteration: Array,
        relative: float,
        proposals: float,
        num_warmup: int,
    ) -> tuple:
        params = tuned(state.mean_proposal_time, state.mean_acceptance, params, relative, proposals)
        if config.kernel.preconditioned:
            lo, hi = config.preconditioner_window
            start, end = int(np.floor(lo * num_warmup)), int(np.floor(hi * num_warmup))
            averages, due = window_average(averages, state.square_avg, iteration, start, end)
            mean = averages[0] / jnp.maximum(averages[1], 1)
            proposed = sbps.preconditioner(mean, config.rmsprop_eps, config.max_scale_ratio)
            params = params._replace(
                direction_scale=jnp.where(due, proposed, params.direction_scale)
            )
            # A changes only between intervals (the flow is fixed within one): the buffered
            # G̃ are stale, so the next iteration re-observes at dt = 0; the running means
            # (t̄, acceptance, misfit) start again under the new A for the rest of warmup
            state = state._replace(
                pending=jnp.where(due, REOBSERVE_PENDING, state.pending).astype(
                    state.pending.dtype
                ),
                num_averaged=jnp.where(due, 0, state.num_averaged).astype(state.num_averaged.dtype),
            )
        return state, params, averages

    def warmup_init(state: sbps.SBPSState, params: sbps.SBPSParams) -> Any:
        # pSBPS: the sum and count of the RMSprop snapshots in the window (per chain)
        if not config.kernel.preconditioned:
            return None
        return (jnp.zeros_like(state.square_avg), jnp.zeros((), state.square_avg.dtype))

    def warmup(
        rng_key: PRNGKey,
        state: sbps.SBPSState,
        params: sbps.SBPSParams,
        adapt_state: Any,
        info: PDMPInfo,
        potential: SubsampledPotential,
        window: WarmupWindow,
    ) -> tuple[sbps.SBPSState, sbps.SBPSParams, Any]:
        # per chain, unbatched, like the kernel itself (bit-identical chain methods)
        relative = relative_refresh(config, potential)
        proposals = events_per_draw(config.target_proposals, potential.dim, PROPOSALS_PER_SAMPLE)
        if not config.kernel.preconditioned:  # Δ and λ_r only: no window
            per_chain = jax.custom_batching.sequential_vmap(
                lambda s, p: adapt(s, p, None, None, relative, proposals, 0)[:2]
            )
            return (*per_chain(state, params), adapt_state)
        per_chain = jax.custom_batching.sequential_vmap(
            lambda s, p, a, i: adapt(s, p, a, i, relative, proposals, window.num_warmup)
        )
        return per_chain(state, params, adapt_state, window.iteration)

    def start(rng_key: PRNGKey, potential: SubsampledPotential, params: Any) -> Array | None:
        # the control-variate noise grows with |x − x*|: start at the anchor x* when there is one
        return potential.anchor if config.start_at_anchor else None

    def describe(info: PDMPInfo) -> str:
        elapsed, proposals = float(jnp.sum(info.sample_interval)), int(jnp.sum(info.num_proposals))
        bounce_rate = float(jnp.sum(info.num_bounces)) / elapsed if elapsed > 0 else 0.0
        violations = float(jnp.sum(info.bound_violations)) / proposals if proposals else 0.0
        return f"{bounce_rate:.3g} bounces/time, {violations:.2%} violations"

    return KernelSpec(
        init=partial(sbps.init, k=config.kernel.k, buffer_size=config.buffer_size),
        build_kernel=partial(sbps.build_kernel, **config.kernel._asdict()),
        default_params=default_params,
        warmup=warmup,
        warmup_init=warmup_init,
        diagnostic_fields=PDMP_INFO_FIELDS,
        describe=describe,
        start=start,
        chains_in_turn=True,
    )


_CONFIG_FIELDS = frozenset(field.name for field in fields(SBPSConfig)) | set(SBPSOptions._fields)


class SBPS(SubsampledKernel):
    """Stochastic Bouncy Particle Sampler as a NumPyro ``MCMCKernel`` (Pakman et al. 2017).

    A piecewise-linear continuous-time sampler: each MCMC sample is the particle's position
    at the next grid time Δ, 2Δ, …, and ``sample_stats`` carry the exact time-averages of
    the unconstrained x and x² over each interval (``time_average``, ``time_average_sq``,
    eq. 19) with the :class:`~pplsamplers.pdmp.events.PDMPInfo` counters: ``num_proposals``,
    ``num_bounces``, ``bound_violations`` (the bias diagnostic: proposals with
    [G̃]_+/λ > 1), ``max_rate_ratio``, ``num_refreshes``, ``num_auxiliary``, ``rate_evals``
    (observations of G̃) and ``data_evals`` (see :func:`pplsamplers.kernels.sbps.interval_info`).
    Vectorized and sequential chains give the same draws for the same key.

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    k
        Band width in predictive sds (eq. 13): the bias/cost knob.  Larger k means fewer
        bound violations and more proposals.  The paper recommends 3–5.
    sample_interval
        Δ > 0; ``None`` adapts it in warmup so that one sample costs about
        ``target_proposals`` proposals, then freezes it.
    refresh_rate
        λ_r ≥ 0 per unit time; ``None`` sets it in warmup to ``relative_refresh_rate`` times
        the measured bounce rate, then freezes it.
    target_proposals
        Proposals one sample should cost (see ``sample_interval``); ``"auto"``: ten up to 30
        latents, then D / 3, at most 100 (:data:`PROPOSALS_PER_SAMPLE`: the radial
        direction of a bouncy particle relaxes in O(D) events).
    relative_refresh_rate
        λ_r as a fraction of the bounce rate; ``None``: 1 with exact (full-batch) gradients,
        whose reflections never randomise the velocity, 0.1 with control variates (little
        noise) and 0.01 with plain minibatches, whose noise does (:func:`relative_refresh`).
    relative_dt
        Knot spacing of the proposal band as a fraction of the mean proposal time.
    buffer_size
        Regression observations kept since the last bounce (the most recent ones).
    preconditioned
        pSBPS: diagonal RMSprop preconditioner, adapted in warmup then frozen (§5).
    rmsprop_decay, rmsprop_eps
        β and ε of the preconditioner.  A is set once, from the mean of the RMSprop average
        over the warmup window ``preconditioner_window`` (an option, default (0.6, 0.9) of
        the warmup); ``max_scale_ratio`` (an option, default 3) bounds each A_ii to within
        that factor of the mean (:func:`~pplsamplers.kernels.sbps.preconditioner`).
    start_at_anchor
        Start every chain at the control-variate anchor x* (the mode) instead of the shared
        warmup's Laplace draw.  Off by default: in high dimension the mode is far (≈ √D sds)
        from the typical set and SBPS spreads out from it slowly (simulation-based calibration
        at D = 400 found draws half as wide as the posterior after 300 iterations).
    **options
        Further fields of :class:`SBPSConfig` (``clamp_negative_slopes``,
        ``auxiliary_observations``, ``learn_slope_prior``, ``max_events_per_sample``,
        ``preconditioner_window``, …) and the options of every sampler
        (``subsample_size``, ``data_plate``, ``potential``, ``control_variate``,
        ``precondition``, ``init_strategy``; see
        :class:`~pplsamplers.infer.adapter.SubsampledKernel`).

    Examples
    --------
    Δ and λ_r are adapted during warmup, then frozen:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> mcmc = run(SBPS(model, subsample_size=10), num_warmup=50, num_samples=50)
    >>> mcmc.get_samples()["mu"].shape
    (50,)
    """

    def __init__(
        self,
        model: Callable | None = None,
        k: float = 3.0,
        *,
        sample_interval: float | None = None,
        refresh_rate: float | None = None,
        target_proposals: float | Literal["auto"] = "auto",
        relative_refresh_rate: float | None = None,
        relative_dt: float = 0.1,
        buffer_size: int = 64,
        preconditioned: bool = False,
        rmsprop_decay: float = 0.99,
        rmsprop_eps: float = 1e-4,
        start_at_anchor: bool = False,
        **options: Any,
    ) -> None:
        extra = {name: options.pop(name) for name in list(options) if name in _CONFIG_FIELDS}
        self.config = SBPSConfig.create(
            k=k,
            sample_interval=sample_interval,
            refresh_rate=refresh_rate,
            target_proposals=target_proposals,
            relative_refresh_rate=relative_refresh_rate,
            relative_dt=relative_dt,
            buffer_size=buffer_size,
            preconditioned=preconditioned,
            rmsprop_decay=rmsprop_decay,
            rmsprop_eps=rmsprop_eps,
            start_at_anchor=start_at_anchor,
            **extra,
        )
        super().__init__(model, sbps_spec(self.config), **options)


class PSBPS(SBPS):
    """pSBPS: :class:`SBPS` with ``preconditioned=True`` (RMSprop diagonal preconditioner
    normalised to mean 1, adapted during warmup and then frozen; §5, DESIGN §5)."""

    def __init__(self, model: Callable | None = None, k: float = 3.0, **options: Any) -> None:
        super().__init__(model, k, preconditioned=True, **options)


__all__ = [
    "PROPOSALS_PER_SAMPLE",
    "PSBPS",
    "SBPS",
    "SBPSConfig",
    "relative_refresh",
    "sbps_spec",
    "window_average",
]
