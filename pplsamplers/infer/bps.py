"""BPS and σBPS declared on the generic adapter (:mod:`pplsamplers.kernels.bps`).

Warmup: Δ, t_init and the horizon cap as in :mod:`pplsamplers.infer.pdmp`; for σBPS (§2.2)
the positions of warmup samples in the window ``welford_window`` (fractions of the warmup)
feed a Welford variance estimate; at the end of the window A = diag(σ̂) is set, the time
scales are rescaled accordingly, the envelope is reset, and the adaptation of Δ continues with
A for the rest of warmup.  Where the chains refine the shared warmup's metric
(:mod:`pplsamplers.infer.metric`) after the window starts, the window is the draws after the
last refinement instead (:func:`welford_bounds`), so that A corrects the final coordinates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers import validation
from pplsamplers.infer import metric
from pplsamplers.infer.adapter import SubsampledKernel
from pplsamplers.infer.pdmp import (
    PDMPAdaptState,
    PDMPConfig,
    adapt_tuning,
    config_from,
    events_per_draw,
    init_adapt,
    pdmp_spec,
    radial_refresh_rate,
    time_scale_probe,
)
from pplsamplers.infer.spec import KernelSpec, WarmupWindow
from pplsamplers.kernels import bps
from pplsamplers.pdmp.builder import FIT_MARGIN, PDMPState
from pplsamplers.pdmp.events import PDMPInfo
from pplsamplers.pdmp.interpolation import fresh_envelope
from pplsamplers.potential import SubsampledPotential, find_map
from pplsamplers.types import Array, PRNGKey


@dataclass(frozen=True)
class BPSConfig(PDMPConfig):
    """BPS's and σBPS's options, validated once."""

    target_evals_per_sample: float | str = "auto"
    refresh_rate: float | str = "auto"
    velocity_scale: float = 1.0
    t_init_fraction: float = 0.5
    extrapolation_fraction: float = 2.0
    init_at_map: bool = False
    welford_window: tuple[float, float] = (0.3, 0.7)
    preconditioned: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("velocity_scale", "t_init_fraction", "extrapolation_fraction"):
            validation.positive(name, getattr(self, name))
        lo, hi = self.welford_window
        if not 0 <= lo < hi <= 1:
            raise ValueError(
                f"welford_window must be (start, end) with 0 <= start < end <= 1 "
                f"(fractions of the warmup); got {self.welford_window!r}."
            )


def welford_bounds(fractions: tuple[float, float], window: WarmupWindow) -> tuple[int, int]:
    """σBPS's Welford window [start, end) in iterations: ``fractions`` of the warmup, or, when
    the chains' metric is refined after its start, the draws after the last refinement (A is
    a correction on top of the final coordinates; estimated before a refinement that rescales
    the same variance it would count it twice).

    >>> welford_bounds((0.3, 0.7), WarmupWindow(0, 300)), welford_bounds(
    ...     (0.3, 0.7), WarmupWindow(0, 300, settled=251))
    ((90, 210), (251, 300))
    """
    start, end = (int(np.floor(f * window.num_warmup)) for f in fractions)
    if window.settled > start:
        return window.settled, window.num_warmup
    return start, end


def welford_update(
    adapt: PDMPAdaptState, params: bps.BPSParams, x: Array, iteration: Array, start: int, end: int
) -> tuple[PDMPAdaptState, bps.BPSParams, Array]:
    """σBPS: Welford variance over the window [start, end), applied at ``end``; also returns
    whether A changed (then the envelope must be reset)."""
    in_window = (iteration >= start) & (iteration < end)
    stats = jax.tree.map(
        lambda new, held: jnp.where(in_window, new, held),
        metric.accumulate(adapt.window, x),
        adapt.window,
    )
    adapt = adapt._replace(window=stats)
    apply = (iteration == end - 1) & (stats.count >= 2)
    old = params.direction_scale
    sd = jnp.sqrt(stats.scatter / jnp.maximum(stats.count - 1, 1))
    sd = jnp.where(jnp.isfinite(sd) & (sd > 0), sd, old)
    # moving along A v: time scales with 1 / (geometric mean of A)
    ratio = jnp.exp(jnp.mean(jnp.log(old)) - jnp.mean(jnp.log(sd)))
    rescaled = params._replace(
        sample_interval=params.sample_interval * ratio,
        t_init=params.t_init * ratio,
        max_extrapolation=params.max_extrapolation * ratio,
        direction_scale=sd,
    )
    zero = jnp.zeros((), x.dtype)
    reset = adapt._replace(evals=zero, time=zero, time_scale=adapt.time_scale * ratio)
    pick = lambda a, b: jax.tree.map(lambda u, w: jnp.where(apply, u, w), a, b)
    return pick(reset, adapt), pick(rescaled, params), apply


def bps_spec(config: BPSConfig) -> KernelSpec:
    """The :class:`KernelSpec` of BPS (σBPS with ``config.preconditioned``)."""
    pdmp = bps.build_pdmp(velocity_scale=config.velocity_scale, **asdict(config.thinning))
    adapt_scale = config.t_init is None or config.max_extrapolation is None
    adapt_kwargs = dict(
        adapt_interval=config.sample_interval is None,
        t_init_fraction=config.t_init_fraction if config.t_init is None else None,
        extrapolation_fraction=(
            config.extrapolation_fraction if config.max_extrapolation is None else None
        ),
    )

    def default_params(
        rng_key: PRNGKey, potential: SubsampledPotential, mode: Array | None = None
    ) -> bps.BPSParams:
        # the time scale along a velocity draw at the potential's initial point, in one
        # program (eagerly, each operation of the model would be compiled on its own)
        x = jnp.asarray(potential.init_position)

        @jax.jit
        def probe(key: PRNGKey, x: Array) -> Array:
            velocity_key, probe_key = jax.random.split(key)
            v = config.velocity_scale * jax.random.normal(velocity_key, x.shape, x.dtype)
            return time_scale_probe(probe_key, potential, x, v)

        tau = float(probe(rng_key, x))
        target = events_per_draw(config.target_evals_per_sample, potential.dim)
        return bps.make_params(
            potential.dim,
            sample_interval=config.sample_interval or target * tau / 3,
            t_init=config.t_init or config.t_init_fraction * tau,
            max_extrapolation=config.max_extrapolation or config.extrapolation_fraction * tau,
            refresh_rate=radial_refresh_rate(config.refresh_rate, potential.dim),
            dtype=x.dtype,
        )

    def warmup_init(state: PDMPState, params: bps.BPSParams) -> PDMPAdaptState:
        if config.t_init is None:
            tau = params.t_init / config.t_init_fraction
        elif config.max_extrapolation is None:
            tau = params.max_extrapolation / config.extrapolation_fraction
        else:
            tau = 1.0
        return init_adapt(state.position, tau)

    def warmup(
        rng_key: PRNGKey,
        state: PDMPState,
        params: bps.BPSParams,
        adapt: PDMPAdaptState,
        info: PDMPInfo,
        potential: SubsampledPotential,
        window: WarmupWindow,
    ) -> tuple[PDMPState, bps.BPSParams, PDMPAdaptState]:
        tau = None
        if adapt_scale:
            u = params.direction_scale * state.velocity
            tau = time_scale_probe(rng_key, potential, state.position, u)
        target = events_per_draw(config.target_evals_per_sample, potential.dim)
        params, adapt = adapt_tuning(
            params, adapt, info, time_scale=tau, target_evals=target, **adapt_kwargs
        )
        if config.preconditioned:
            start, end = welford_bounds(config.welford_window, window)
            adapt, params, changed = welford_update(
                adapt, params, state.position, window.iteration, start, end
            )
            envelope = jax.tree.map(
                lambda f, c: jnp.where(changed, f, c),
                fresh_envelope(state.position.dtype),
                state.envelope,
            )
            state = state._replace(envelope=envelope)
        return state, params, adapt

    def start(rng_key: PRNGKey, potential: SubsampledPotential, params: Any) -> Array:
        if potential.anchor is not None:
            return potential.anchor
        return find_map(jax.random.PRNGKey(0), potential).position

    return pdmp_spec(
        pdmp,
        default_params=default_params,
        warmup=warmup,
        warmup_init=warmup_init,
        start=start if config.init_at_map else None,
    )


class BPS(SubsampledKernel):
    """The Bouncy Particle Sampler with adaptive interpolation thinning, as a NumPyro kernel.

    Goan et al. §2.1 with Alg. 2: linear flow, rate [v·∇Ũ]_+ (eq. 2), reflection (eq. 3),
    Gaussian velocities N(0, s² I) refreshed at rate λ_ref.  Full-batch gradients when the
    model has no ``subsample_size`` (exact up to bound violations), minibatch gradients with
    ``subsample_size=n`` (the paper's approximate scheme), and control-variate gradients with
    ``control_variate=True`` as well.  Each MCMC sample is the position at the next grid
    time; ``sample_stats`` holds the counters and the exact interval time-averages.  The
    tunables are ``mcmc.last_state.params`` (:class:`~pplsamplers.kernels.bps.BPSParams`).

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    refresh_rate
        λ_ref ≥ 0 in the sampler's time units (for BPS: posterior scale / velocity scale);
        ``"auto"``: 1 up to 30 latents, then √(D / 30), at most √10
        (:func:`~pplsamplers.infer.pdmp.radial_refresh_rate`: refreshments move the radial
        direction).
    alpha
        α ≥ 1 of eq. (12): the envelope is α × the interpolated rate.
    velocity_scale
        s > 0 of the velocity law N(0, s² I).
    sample_interval
        Δ > 0; ``None`` adapts it during warmup to ``target_evals_per_sample``.
    target_evals_per_sample
        Rate evaluations one sample should cost (warmup target for Δ); ``"auto"``: 20 up to
        30 latents, then 20 D / 30, at most 200 (:func:`~pplsamplers.infer.pdmp.radial_events`:
        with exact gradients the radial direction of a straight flow relaxes in O(D) events).
    t_init, max_extrapolation
        Envelope start offset and horizon cap; ``None`` adapts them during warmup to
        ``t_init_fraction`` and ``extrapolation_fraction`` of the curvature time scale τ_c
        (:mod:`pplsamplers.infer.pdmp`).
    max_evaluations
        Cap on rate evaluations per event (``proposal_cap_hits``).
    max_events_per_sample
        Cap on next-event iterations per sample (``interval_capped``).
    min_gap, noise_margin
        Noise handling of the envelope (an extension of Alg. 2, see
        :func:`~pplsamplers.pdmp.interpolation.interpolation_thinning`): the slope is only
        re-estimated across gaps ≥ ``min_gap`` · t_init, and the line is raised to an upper
        confidence line with ``noise_margin`` = k standard deviations of the minibatch noise.
        ``None`` (default): 0 and 0 (the paper's scheme) with full-batch gradients, 1 and 2
        with minibatch or control-variate ones.
    fit_margin
        k_fit ≥ 0 of the envelope's lack-of-fit margin (an extension of Alg. 2, see
        :mod:`pplsamplers.pdmp.lack_of_fit`): the slope is raised by k_fit times the
        root-mean-square curvature of the rate learned from the line's residuals, so that
        the envelope bounds a rate that curves up along the flow.  0 is the paper's scheme.
    init_at_map
        Start every chain at the MAP (the control-variate anchor if there is one), as the
        paper does; otherwise NumPyro's ``init_strategy``.
    welford_window
        σBPS's Welford window, as fractions of the warmup (the draws after the chains' last
        metric refinement where that comes later: :func:`welford_bounds`).
    **options
        What every sampler takes (:class:`~pplsamplers.infer.adapter.SubsampledKernel`).

    Examples
    --------
    Each draw comes with the exact time-average of the path over its interval:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> mcmc = run(BPS(model, subsample_size=20), num_warmup=50)
    >>> mcmc.get_samples()["mu"].shape, mcmc.get_extra_fields()["time_average"].shape
    ((100,), (100, 1))
    """

    preconditioned = False

    def __init__(
        self,
        model: Callable | None = None,
        *,
        refresh_rate: float | Literal["auto"] = "auto",
        alpha: float = 1.5,
        velocity_scale: float = 1.0,
        sample_interval: float | None = None,
        target_evals_per_sample: float | Literal["auto"] = "auto",
        t_init: float | None = None,
        max_extrapolation: float | None = None,
        t_init_fraction: float = 0.5,
        extrapolation_fraction: float = 2.0,
        max_evaluations: int = 1000,
        max_events_per_sample: int = 10_000,
        min_gap: float | None = None,
        noise_margin: float | None = None,
        fit_margin: float = FIT_MARGIN,
        init_at_map: bool = False,
        welford_window: tuple[float, float] = (0.3, 0.7),
        **options: Any,
    ) -> None:
        self.config = config_from(BPSConfig, {**locals(), "preconditioned": self.preconditioned})
        super().__init__(model, bps_spec(self.config), **options)


class SigmaBPS(BPS):
    """σBPS (Goan et al. §2.2): BPS moving along A v with A = diag(σ̂), where σ̂ are Welford
    standard deviations of warmup samples (window ``welford_window``, or the draws after the
    chains' last metric refinement: :func:`welford_bounds`), then frozen.

    Takes the arguments of :class:`BPS`.  With ``num_warmup`` too short for two samples in
    the window, A stays the identity (plain BPS).

    Examples
    --------
    In the model's coordinates, A settles at the posterior sd (about 0.1):

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> mcmc = run(SigmaBPS(model, subsample_size=100, precondition=None))
    >>> round(float(mcmc.last_state.params.direction_scale[0]), 1)
    0.1
    """

    preconditioned = True


__all__ = ["BPS", "BPSConfig", "SigmaBPS", "bps_spec", "welford_bounds", "welford_update"]
