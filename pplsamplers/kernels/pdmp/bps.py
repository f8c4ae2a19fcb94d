"""The Bouncy Particle Sampler (BPS) and σBPS, declared on the PDMP builder.

Goan et al. §2.1–2.2, with event times from adaptive interpolation thinning (Alg. 2,
:mod:`~pplsamplers.kernels.pdmp.interpolation`), as a
:class:`~pplsamplers.kernels.pdmp.builder.Dynamics`:

* flow (§2.2): x(t) = x + A v t, v constant; A = I for BPS, A = diag(σ̂) for σBPS;
* rate (eq. 2 / §2.2): λ(t) = [(A v)·∇Ũ(x + A v t)]_+, one ``estimator.directional`` (jvp)
  per evaluation;
* reflection (eq. 3 / eq. 4): v' = v − 2 (A∇Ũ·v / ‖A∇Ũ‖²) A∇Ũ, with the gradient of the
  minibatch that accepted the event;
* refreshment (§2.4): at rate λ_ref, v ~ N(0, s² I).

Gradients are exact with a full batch, approximate with minibatches (the paper's scheme), and
much less noisy with a control variate.  σBPS's A = diag(σ̂) comes from Welford variances of
warmup draws, then is frozen.  One kernel step is one draw: the PDMP runs to the next grid time
and :class:`~pplsamplers.kernels.pdmp.events.PDMPInfo` carries the exact time-averages of x and
x² over the interval (Pakman et al. 2017, eq. 19)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers import validation
from pplsamplers.estimator import Estimator
from pplsamplers.kernels.pdmp.builder import (
    PDMP,
    Dynamics,
    PDMPState,
    ThinningOptions,
    build,
    make_pdmp_params,
)
from pplsamplers.kernels.pdmp.events import PDMPInfo
from pplsamplers.kernels.pdmp.flow import linear_flow, reflect, refresh_gaussian
from pplsamplers.kernels.pdmp.interpolation import fresh_envelope
from pplsamplers.kernels.pdmp.tuning import (
    PDMPAdaptState,
    adapt_tuning,
    check_pdmp_options,
    events_per_draw,
    init_adapt,
    pdmp_spec,
    radial_refresh_rate,
    time_scale_probe,
)
from pplsamplers.kernels.spec import KernelSpec, WarmupContext, WarmupWindow
from pplsamplers.kernels.welford import accumulate
from pplsamplers.types import Array, PRNGKey

BPSState = PDMPState
BPSInfo = PDMPInfo


class BPSParams(NamedTuple):
    """Tunables: the :class:`~pplsamplers.kernels.pdmp.builder.PDMPParams` fields and σBPS's A."""

    sample_interval: Array
    t_init: Array
    max_extrapolation: Array
    refresh_rate: Array
    direction_scale: Array
    """A = diag(``direction_scale``) (ones for plain BPS)."""


def make_params(
    dim: int,
    *,
    sample_interval: float,
    t_init: float,
    max_extrapolation: float,
    refresh_rate: float,
    direction_scale: Array | None = None,
    dtype: jnp.dtype | None = None,
) -> BPSParams:
    """:class:`BPSParams` from Python values, validated (``ValueError`` names the argument);
    ``direction_scale`` A defaults to ones (plain BPS).

    Examples
    --------
    >>> make_params(2, sample_interval=0.5, t_init=0.1, max_extrapolation=1.0,
    ...             refresh_rate=1.0).direction_scale
    Array([1., 1.], dtype=float32)
    """
    common = make_pdmp_params(sample_interval, t_init, max_extrapolation, refresh_rate, dtype)
    dtype = common.sample_interval.dtype
    scale = (
        jnp.ones(dim, dtype)
        if direction_scale is None
        else jnp.asarray(validation.positive_array("direction_scale", direction_scale), dtype)
    )
    if scale.shape != (dim,):
        raise ValueError(f"direction_scale must have shape ({dim},); got {scale.shape}.")
    return BPSParams(*common, scale)


def dynamics(velocity_scale: float = 1.0) -> Dynamics:
    """The BPS / σBPS declaration (module docstring)."""

    def rate(
        estimator: Estimator, params: BPSParams, x: Array, v: Array, idx: Array
    ) -> tuple[Array, Array]:
        return estimator.directional(x, params.direction_scale * v, idx)  # eq. (2)

    def bounce(estimator: Estimator, params: BPSParams, x: Array, v: Array, idx: Array) -> Array:
        return reflect(v, params.direction_scale * estimator.grad(x, idx))  # eq. (3) / (4)

    def draw_velocity(rng_key: PRNGKey, params: BPSParams, position: Array) -> Array:
        return refresh_gaussian(rng_key, velocity_scale * jnp.ones_like(position))

    return Dynamics(
        flow=lambda params: linear_flow(params.direction_scale),
        rate=rate,
        reflect=bounce,
        draw_velocity=draw_velocity,
    )


def build_pdmp(velocity_scale: float = 1.0, thinning: ThinningOptions | None = None) -> PDMP:
    """BPS's ``(init, kernel, skeleton)`` from the structural options: the velocity law's
    scale s > 0 (N(0, s² I)) and the ``thinning`` options.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(2)
    >>> pdmp = build_pdmp(thinning=ThinningOptions(alpha=1.0))
    >>> params = make_params(2, sample_interval=1.0, t_init=0.1, max_extrapolation=1.0,
    ...                      refresh_rate=1.0)
    >>> state = pdmp.init(jax.random.key(0), jnp.zeros(2), est, params)
    >>> state, info = pdmp.kernel(jax.random.key(1), state, est, params)
    >>> state.position.shape, info.time_average.shape, int(info.bound_violations)
    ((2,), (2,), 0)
    """
    validation.positive("velocity_scale", velocity_scale)
    return build(dynamics(float(velocity_scale)), thinning)


@dataclass(frozen=True)
class BPSOptions:
    """BPS's and σBPS's options, validated once.

    Parameters
    ----------
    refresh_rate : float or "auto", default "auto"
        λ_ref ≥ 0 in the sampler's time units (posterior scale / velocity scale); ``"auto"``
        (default): 1 up to 30 latents, then √(D / 30), at most √10 (refreshments are what
        move the radial direction of a straight flow,
        :func:`~pplsamplers.kernels.pdmp.tuning.radial_refresh_rate`).
    velocity_scale : float, default 1.0
        s > 0 of the velocity law N(0, s² I).
    sample_interval : float or None, default None
        Δ > 0; ``None`` (default) adapts it during warmup to ``target_evals_per_sample``.
    target_evals_per_sample : float or "auto", default "auto"
        Rate evaluations one draw should cost; ``"auto"`` (default): 20 up to 30 latents,
        then 20 D / 30, at most 200 (:func:`~pplsamplers.kernels.pdmp.tuning.radial_events`:
        with exact gradients the radial direction relaxes in O(D) events).
    t_init, max_extrapolation : float or None, default None
        Envelope start offset and horizon cap; ``None`` (default) adapts them during warmup
        to ``t_init_fraction`` and ``extrapolation_fraction`` of the curvature time scale.
    t_init_fraction, extrapolation_fraction : float, defaults 0.5 and 2.0
        Those fractions.
    thinning : ThinningOptions or dict, default ThinningOptions()
        :class:`~pplsamplers.kernels.pdmp.builder.ThinningOptions` (or a dict of its fields):
        α, the caps on evaluations and events, and the envelope's noise and fit margins.
    init_at_map : bool, default False
        Start every chain at the mode (the control-variate anchor if there is one), as the
        paper does; otherwise the shared warmup's start.
    preconditioned : bool, default False
        σBPS (§2.2): move along A v with A = diag(σ̂), σ̂ the Welford standard deviations of
        the warmup draws in ``welford_window``, then frozen.
    welford_window : tuple of float, default (0.3, 0.7)
        σBPS's window, as fractions of the warmup (the draws after the chains' last metric
        refinement where that comes later: :func:`welford_bounds`).
    """

    refresh_rate: float | str = "auto"
    velocity_scale: float = 1.0
    sample_interval: float | None = None
    target_evals_per_sample: float | str = "auto"
    t_init: float | None = None
    max_extrapolation: float | None = None
    t_init_fraction: float = 0.5
    extrapolation_fraction: float = 2.0
    thinning: ThinningOptions | dict = field(default_factory=ThinningOptions)
    init_at_map: bool = False
    preconditioned: bool = False
    welford_window: tuple[float, float] = (0.3, 0.7)

    def __post_init__(self) -> None:
        check_pdmp_options(self)
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
    a correction on top of the final coordinates).

    >>> welford_bounds((0.3, 0.7), WarmupWindow(0, 300)), welford_bounds(
    ...     (0.3, 0.7), WarmupWindow(0, 300, settled=251))
    ((90, 210), (251, 300))
    """
    start, end = (int(np.floor(f * window.num_warmup)) for f in fractions)
    if window.settled > start:
        return window.settled, window.num_warmup
    return start, end


def welford_update(
    adapt: PDMPAdaptState, params: BPSParams, x: Array, iteration: Array, start: int, end: int
) -> tuple[PDMPAdaptState, BPSParams, Array]:
    """σBPS: Welford variance over the window [start, end), applied at ``end``; also returns
    whether A changed (then the envelope must be reset)."""
    in_window = (iteration >= start) & (iteration < end)
    stats = jax.tree.map(
        lambda new, held: jnp.where(in_window, new, held), accumulate(adapt.window, x), adapt.window
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


@partial(jax.jit, static_argnums=(2, 3))
def _time_scale_at(key: PRNGKey, x: Array, estimator: Estimator, velocity_scale: float) -> Array:
    """The time scale along one velocity draw at x (one program)."""
    velocity_key, probe_key = jax.random.split(key)
    v = velocity_scale * jax.random.normal(velocity_key, x.shape, x.dtype)
    return time_scale_probe(probe_key, estimator, x, v)


def declare(options: BPSOptions) -> KernelSpec:
    """The declaration of BPS / σBPS to the adapter."""
    pdmp = build_pdmp(options.velocity_scale, options.thinning)
    adapt_scale = options.t_init is None or options.max_extrapolation is None
    adapt_kwargs = dict(
        adapt_interval=options.sample_interval is None,
        t_init_fraction=options.t_init_fraction if options.t_init is None else None,
        extrapolation_fraction=(
            options.extrapolation_fraction if options.max_extrapolation is None else None
        ),
    )

    def default_params(rng_key: PRNGKey, estimator: Estimator, context: WarmupContext) -> BPSParams:
        # the time scale along a velocity draw at the starting point, in one program
        x = context.init_position
        tau = float(_time_scale_at(rng_key, x, estimator, options.velocity_scale))
        target = events_per_draw(options.target_evals_per_sample, estimator.dim)
        return make_params(
            estimator.dim,
            sample_interval=options.sample_interval or target * tau / 3,
            t_init=options.t_init or options.t_init_fraction * tau,
            max_extrapolation=options.max_extrapolation or options.extrapolation_fraction * tau,
            refresh_rate=radial_refresh_rate(options.refresh_rate, estimator.dim),
            dtype=x.dtype,
        )

    def warmup_init(state: PDMPState, params: BPSParams) -> PDMPAdaptState:
        if options.t_init is None:
            tau = params.t_init / options.t_init_fraction
        elif options.max_extrapolation is None:
            tau = params.max_extrapolation / options.extrapolation_fraction
        else:
            tau = 1.0
        return init_adapt(state.position, tau)

    def warmup(
        rng_key: PRNGKey,
        state: PDMPState,
        params: BPSParams,
        adapt: PDMPAdaptState,
        info: PDMPInfo,
        estimator: Estimator,
        window: WarmupWindow,
    ) -> tuple[PDMPState, BPSParams, PDMPAdaptState]:
        tau = None
        if adapt_scale:
            u = params.direction_scale * state.velocity
            tau = time_scale_probe(rng_key, estimator, state.position, u)
        target = events_per_draw(options.target_evals_per_sample, estimator.dim)
        params, adapt = adapt_tuning(
            params, adapt, info, time_scale=tau, target_evals=target, **adapt_kwargs
        )
        if options.preconditioned:
            start, end = welford_bounds(options.welford_window, window)
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

    def start(rng_key: PRNGKey, estimator: Estimator, params: Any, context: WarmupContext) -> Array:
        return context.anchor if context.anchor is not None else context.mode

    return pdmp_spec(
        pdmp,
        default_params=default_params,
        warmup=warmup,
        warmup_init=warmup_init,
        start=start if options.init_at_map else None,
        needs_mode=options.init_at_map,
    )


Options = BPSOptions
"""The options dataclass of this sampler (what the NumPyro class takes)."""
Info = PDMPInfo
"""The per-step diagnostics of this sampler's kernel."""

__all__ = [
    "Info",
    "Options",
    "BPSInfo",
    "BPSOptions",
    "BPSParams",
    "BPSState",
    "build_pdmp",
    "declare",
    "dynamics",
    "make_params",
    "welford_bounds",
    "welford_update",
]
