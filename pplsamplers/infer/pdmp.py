"""What BPS, σBPS and the Boomerang share on the generic adapter: options and warmup.

Warmup (DESIGN §3.3–3.4), run by the adapter after each warmup sample and frozen afterwards:

* the sample interval Δ is adapted so that one sample costs about
  ``target_evals_per_sample`` rate evaluations: Δ ← target · T̄ / Ē, with T̄ and Ē
  exponential moving averages of the simulated time and rate evaluations per sample
  (each update changes Δ by at most a factor 2);
* for BPS/σBPS, whose time unit depends on the posterior's scale, the envelope's t_init and
  horizon cap follow a curvature time scale τ_c = 1/√(|uᵀH̃u| + (u·∇Ũ)²) (u = A v, one
  minibatch Hessian-vector product per warmup sample, :func:`time_scale_probe`; for a
  Gaussian target it is the time over which the rate changes by one standard deviation):
  t_init = ``t_init_fraction`` · τ̄_c and max_extrapolation = ``extrapolation_fraction`` · τ̄_c
  with τ̄_c a moving average.  (The Boomerang's time is in radians of its flow, so there
  they are fixed.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.infer.spec import KernelSpec, WarmupWindow
from pplsamplers.pdmp.builder import FIT_MARGIN, PDMP, PDMPState, ThinningOptions
from pplsamplers.pdmp.events import PDMP_INFO_FIELDS, PDMPInfo
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey

EMA_DECAY = 0.9


@dataclass(frozen=True)
class PDMPConfig:
    """The options of every thinning PDMP sampler, validated once (errors name the argument).

    ``sample_interval``, ``t_init`` and ``max_extrapolation`` may be ``None``: adapted in
    warmup.  The others are documented on :class:`~pplsamplers.BPS`.
    """

    refresh_rate: float = 1.0
    alpha: float = 1.5
    sample_interval: float | None = None
    target_evals_per_sample: float = 20.0
    t_init: float | None = None
    max_extrapolation: float | None = None
    max_evaluations: int = 1000
    max_events_per_sample: int = 10_000
    min_gap: float | None = None
    noise_margin: float | None = None
    fit_margin: float = FIT_MARGIN

    def __post_init__(self) -> None:
        validation.switches(self)
        validation.positive("refresh_rate", self.refresh_rate, allow_zero=True)
        validation.positive("target_evals_per_sample", self.target_evals_per_sample)
        for name in ("sample_interval", "t_init", "max_extrapolation"):
            validation.optional_positive(name, getattr(self, name))
        self.thinning  # noqa: B018  (validates the thinning options now)

    @property
    def thinning(self) -> ThinningOptions:
        """The structural thinning options."""
        return ThinningOptions(
            self.alpha,
            self.max_evaluations,
            self.max_events_per_sample,
            self.min_gap,
            self.noise_margin,
            self.fit_margin,
        )


def config_from(cls: type, arguments: dict[str, Any]) -> Any:
    """``cls(**arguments)`` for the config dataclass ``cls``, ignoring other entries (the
    constructor's ``self`` and ``**options``)."""
    return cls(**{f.name: arguments[f.name] for f in fields(cls) if f.name in arguments})


class PDMPAdaptState(NamedTuple):
    """Warmup statistics: moving averages per sample, and σBPS's Welford accumulators."""

    evals: Array
    time: Array
    time_scale: Array
    count: Array
    mean: Array
    m2: Array


def init_adapt(position: Array, time_scale: Array | float = 1.0) -> PDMPAdaptState:
    """Empty warmup statistics (``time_scale``: the first guess of τ_c)."""
    zero = jnp.zeros((), position.dtype)
    scale = jnp.asarray(time_scale, position.dtype)
    return PDMPAdaptState(
        zero, zero, scale, zero, jnp.zeros_like(position), jnp.zeros_like(position)
    )


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


def interval_warmup(target_evals: float) -> Callable:
    """A :class:`~pplsamplers.infer.spec.KernelSpec` ``warmup`` that adapts Δ only, towards
    ``target_evals`` rate evaluations per sample (the Boomerang's)."""

    def warmup(
        rng_key: PRNGKey,
        state: PDMPState,
        params: Any,
        adapt: PDMPAdaptState,
        info: PDMPInfo,
        potential: SubsampledPotential,
        window: WarmupWindow,
    ) -> tuple[PDMPState, Any, PDMPAdaptState]:
        params, adapt = adapt_tuning(
            params, adapt, info, target_evals=target_evals, adapt_interval=True
        )
        return state, params, adapt

    return warmup


def time_scale_probe(rng_key: PRNGKey, potential: SubsampledPotential, x: Array, u: Array) -> Array:
    """τ_c = 1/√(|uᵀH̃u| + (u·∇Ũ)²), a BPS time scale along direction u, from one
    Hessian-vector product on a minibatch (cost n)."""
    idx = potential.sample_indices(rng_key)
    g, hu = jax.jvp(lambda y: potential.grad(y, idx), (x,), (u,))
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
    """The :class:`KernelSpec` of a PDMP built by :func:`~pplsamplers.pdmp.builder.build`;
    ``declared`` gives ``default_params``, ``warmup``, ``warmup_init`` and ``start``."""
    return KernelSpec(
        init=pdmp.init,
        build_kernel=lambda: pdmp.kernel,
        diagnostic_fields=PDMP_INFO_FIELDS,
        describe=describe,
        **declared,
    )


__all__ = [
    "PDMPAdaptState",
    "PDMPConfig",
    "adapt_tuning",
    "config_from",
    "describe",
    "init_adapt",
    "interval_warmup",
    "pdmp_spec",
    "time_scale_probe",
]
