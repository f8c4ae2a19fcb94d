"""What the thinning PDMPs (BPS, σBPS, Boomerang) and SBPS share in warmup.

Run by the adapter after each warmup draw, frozen afterwards:

* the sample interval Δ is adapted so that one draw costs about ``target_evals_per_sample``
  rate evaluations: Δ ← target · T̄ / Ē, with T̄ and Ē exponential moving averages of the
  simulated time and rate evaluations per draw (each update changes Δ by at most a factor 2);
* for BPS/σBPS, whose time unit depends on the posterior's scale, the envelope's t_init and
  horizon cap follow a curvature time scale τ_c = 1/√(|uᵀH̃u| + (u·∇Ũ)²) (u = A v, one
  minibatch Hessian-vector product per warmup draw, :func:`time_scale_probe`: for a Gaussian
  target, the time over which the rate changes by one standard deviation).  The Boomerang's
  time is in radians of its flow, so there they are fixed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.estimator import Estimator
from pplsamplers.kernels.pdmp.builder import PDMP, PDMPState, ThinningOptions
from pplsamplers.kernels.pdmp.events import PDMP_INFO_FIELDS, PDMPInfo
from pplsamplers.kernels.spec import KernelSpec, WarmupWindow
from pplsamplers.kernels.welford import WindowStats, init_stats
from pplsamplers.types import Array, PRNGKey

EMA_DECAY = 0.9


def check_pdmp_options(options: Any) -> None:
    """Validate the options every thinning PDMP has (errors name the argument), and turn a
    ``thinning`` dict into :class:`~pplsamplers.kernels.pdmp.builder.ThinningOptions`."""
    validation.switches(options)
    validation.positive_or_auto("refresh_rate", options.refresh_rate, allow_zero=True)
    validation.positive_or_auto("target_evals_per_sample", options.target_evals_per_sample)
    for name in ("sample_interval", "t_init", "max_extrapolation"):
        validation.optional_positive(name, getattr(options, name))
    thinning = options.thinning
    if isinstance(thinning, dict):
        object.__setattr__(options, "thinning", ThinningOptions(**thinning))
    elif not isinstance(thinning, ThinningOptions):
        raise ValueError(
            f"thinning must be a ThinningOptions or a dict of its fields; got {thinning!r}."
        )


RADIAL_DIMENSION = 30
"""Above this dimension a bouncy particle's default events per draw grow with D
(:func:`radial_events`)."""

MAX_RADIAL_DILATION = 10.0
""":func:`radial_events` spends at most ten times the events per draw of small D."""

BPS_EVALS_PER_SAMPLE = 20.0
"""Rate evaluations per draw of BPS and σBPS up to :data:`RADIAL_DIMENSION` latents, and of the
Boomerang at every D (``target_evals_per_sample="auto"``)."""


def radial_events(base: float, dim: int) -> int:
    """Events per draw of a bouncy particle (BPS, σBPS, SBPS, pSBPS) in ``dim`` dimensions:
    ``base`` up to :data:`RADIAL_DIMENSION` latents, then ``base`` · D / 30, at most
    :data:`MAX_RADIAL_DILATION` times ``base``.

    With exact gradients the radial direction (|x|², a hierarchical scale) relaxes in O(D)
    events: on a Gaussian |x|² − (x·v)² is constant along a straight flow and at every
    reflection, so only a refreshment moves it, by O(1) against a stationary sd of √(2D), a
    random walk of about D refreshments per independent value.  A cost per draw that does not
    grow with D leaves the draws ever more correlated, and on a high-dimensional hierarchical
    model SBPS and BPS then end far from NUTS; with this rule (and, for BPS, the higher
    refresh rate of :func:`radial_refresh_rate`) they are within tolerance (measured in
    ``docs/benchmarks/robustness.md``).  The Boomerang's elliptical flow moves |x|² every
    period and does not need it.

    >>> radial_events(10, 20), radial_events(10, 53), radial_events(20, 304)
    (10, 18, 200)
    """
    return math.ceil(round(base * radial_dilation(dim), 6))


def radial_dilation(dim: int) -> float:
    """D / :data:`RADIAL_DIMENSION`, between 1 and :data:`MAX_RADIAL_DILATION`."""
    return min(max(float(dim) / RADIAL_DIMENSION, 1.0), MAX_RADIAL_DILATION)


def radial_refresh_rate(rate: float | str, dim: int, radial: bool = True) -> float:
    """A PDMP's refresh rate λ_ref per unit time (whitened coordinates, unit velocities): a
    given one as it is; ``"auto"``: √(:func:`radial_dilation`) where ``radial`` (BPS and
    σBPS: 1 up to 30 latents, √10 ≈ 3.2 from 300), else 1 (the Boomerang, whose ellipses
    move the radial direction every period), as :func:`events_per_draw` resolves its target.

    The radial direction moves only at refreshments (:func:`radial_events`), so in high
    dimension more of a draw's events should be refreshments.  Too many cost the coordinates
    their mixing instead: past a few refreshments per unit time the flow turns diffusive.
    The square-root rule sits between the two: ``benchmarks/radial_mixing.py --samplers bps
    --option refresh_rate=R`` measures both effects, and ``docs/benchmarks/robustness.md``
    the rule on a high-dimensional hierarchical model.

    >>> radial_refresh_rate("auto", 10), round(radial_refresh_rate("auto", 304), 2)
    (1.0, 3.16)
    """
    if rate != "auto":
        return float(rate)
    return math.sqrt(radial_dilation(dim)) if radial else 1.0


def events_per_draw(
    target: float | str, dim: int, base: float = BPS_EVALS_PER_SAMPLE, radial: bool = True
) -> float:
    """A target of events per draw (``target_evals_per_sample``, SBPS's ``target_proposals``)
    as a number: a given one as it is; ``"auto"``: ``base``, through :func:`radial_events`
    where ``radial`` (straight flows; not the Boomerang's ellipses)."""
    if target != "auto":
        return float(target)
    return float(radial_events(base, dim) if radial else base)


class PDMPAdaptState(NamedTuple):
    """Warmup statistics: moving averages per draw, and σBPS's Welford accumulators of the
    positions (diagonal)."""

    evals: Array
    time: Array
    time_scale: Array
    window: WindowStats


def init_adapt(position: Array, time_scale: Array | float = 1.0) -> PDMPAdaptState:
    """Empty warmup statistics (``time_scale``: the first guess of τ_c)."""
    zero = jnp.zeros((), position.dtype)
    scale = jnp.asarray(time_scale, position.dtype)
    window = init_stats(position)
    return PDMPAdaptState(zero, zero, scale, window)


def adapt_tuning(
    params: Any,
    adapt: PDMPAdaptState,
    info: PDMPInfo,
    *,
    target_evals: float,
    adapt_interval: bool,
    time_scale: Array | None = None,
    t_init_fraction: float | None = None,
    extrapolation_fraction: float | None = None,
) -> tuple[Any, PDMPAdaptState]:
    """One warmup update of Δ, and of t_init / the horizon cap from a time-scale observation.

    Each quantity moves towards its target by at most a factor 2 per update.
    """
    dtype = params.sample_interval.dtype
    evals = EMA_DECAY * adapt.evals + info.rate_evals.astype(dtype)
    time = EMA_DECAY * adapt.time + params.sample_interval
    scale = adapt.time_scale
    if time_scale is not None:
        observed = jnp.where(jnp.isfinite(time_scale) & (time_scale > 0), time_scale, scale)
        scale = jnp.exp(EMA_DECAY * jnp.log(scale) + (1 - EMA_DECAY) * jnp.log(observed))
    adapt = adapt._replace(evals=evals, time=time, time_scale=scale)

    def towards(current: Array, proposal: Array) -> Array:
        proposal = jnp.where(jnp.isfinite(proposal) & (proposal > 0), proposal, current)
        return jnp.clip(proposal, current / 2, current * 2)

    if adapt_interval:
        proposal = target_evals * time / jnp.maximum(evals, 1e-3)
        params = params._replace(sample_interval=towards(params.sample_interval, proposal))
    if t_init_fraction is not None:
        params = params._replace(t_init=towards(params.t_init, t_init_fraction * scale))
    if extrapolation_fraction is not None:
        horizon = towards(params.max_extrapolation, extrapolation_fraction * scale)
        params = params._replace(max_extrapolation=horizon)
    return params, adapt


def interval_warmup(target_evals: float | str) -> Callable:
    """A :class:`~pplsamplers.kernels.spec.KernelSpec` ``warmup`` that adapts Δ only, towards
    ``target_evals`` rate evaluations per sample (the Boomerang's; ``"auto"``: 20)."""
    target_evals = events_per_draw(target_evals, 0, radial=False)

    def warmup(
        rng_key: PRNGKey,
        state: PDMPState,
        params: Any,
        adapt: PDMPAdaptState,
        info: PDMPInfo,
        estimator: Estimator,
        window: WarmupWindow,
    ) -> tuple[PDMPState, Any, PDMPAdaptState]:
        params, adapt = adapt_tuning(
            params, adapt, info, target_evals=target_evals, adapt_interval=True
        )
        return state, params, adapt

    return warmup


def time_scale_probe(rng_key: PRNGKey, estimator: Estimator, x: Array, u: Array) -> Array:
    """τ_c = 1/√(|uᵀH̃u| + (u·∇Ũ)²), a BPS time scale along direction u, from one
    Hessian-vector product on a minibatch (cost n)."""
    idx = estimator.sample_indices(rng_key)
    g, hu = jax.jvp(lambda y: estimator.grad(y, idx), (x,), (u,))
    scale2 = jnp.abs(u @ hu) + (u @ g) ** 2
    return jnp.where(jnp.isfinite(scale2) & (scale2 > 0), 1.0 / jnp.sqrt(scale2), 1.0)


def describe(info: PDMPInfo) -> str:
    """Progress-bar text (``info`` may have a chain axis)."""
    return (
        f"{int(jnp.sum(info.num_bounces))} bounces, "
        f"{int(jnp.sum(info.bound_violations))} violations, "
        f"Δ {float(jnp.mean(info.sample_interval)):.3g}"
    )


def pdmp_spec(pdmp: PDMP, **declared: Any) -> KernelSpec:
    """The :class:`KernelSpec` of a PDMP built by :func:`~pplsamplers.kernels.pdmp.builder.build`;
    ``declared`` gives ``default_params``, ``warmup``, ``warmup_init`` and ``start``."""
    return KernelSpec(
        init=pdmp.init,
        build_kernel=lambda: pdmp.kernel,
        diagnostic_fields=PDMP_INFO_FIELDS,
        describe=describe,
        **declared,
    )


__all__ = [
    "BPS_EVALS_PER_SAMPLE",
    "MAX_RADIAL_DILATION",
    "RADIAL_DIMENSION",
    "PDMPAdaptState",
    "adapt_tuning",
    "check_pdmp_options",
    "describe",
    "events_per_draw",
    "init_adapt",
    "interval_warmup",
    "pdmp_spec",
    "radial_dilation",
    "radial_events",
    "radial_refresh_rate",
    "time_scale_probe",
]
