"""NumPyro adapters for BPS and σBPS (:mod:`pplsamplers.kernels.bps`), and the warmup shared
by the PDMP samplers with interpolation thinning (BPS, σBPS, Boomerang).

Warmup (DESIGN §3.3–3.4), then everything is frozen:

* the sample interval Δ is adapted so that one sample costs about
  ``target_evals_per_sample`` rate evaluations: Δ ← target · T̄ / Ē, with T̄ and Ē
  exponential moving averages of the simulated time and rate evaluations per sample
  (each update changes Δ by at most a factor 2);
* for BPS/σBPS, whose time unit depends on the posterior's scale, the envelope's t_init and
  horizon cap follow a curvature time scale τ_c = 1/√(|uᵀH̃u| + (u·∇Ũ)²) (u = A v, one
  minibatch Hessian-vector product per warmup sample, counted in ``data_evals``; for a
  Gaussian target it is the time over which the rate changes by one standard deviation):
  t_init = ``t_init_fraction`` · τ̄_c and max_extrapolation = ``extrapolation_fraction`` · τ̄_c
  with τ̄_c a moving average.  It does not depend on how often the chain bounces, so it does
  not feed back on envelope misses.  (The Boomerang's time is in radians of its flow, so
  there they are fixed.);
* σBPS (§2.2): the positions of warmup samples in the window ``welford_window`` (fractions
  of the warmup) feed a Welford variance estimate; at the end of the window the
  preconditioner A = diag(σ̂) is set, the time scales are rescaled accordingly, and the
  adaptation of Δ continues with A for the rest of warmup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.infer.base import InitFn, StepFn, SubsampledKernel
from pplsamplers.kernels import bps as bps_kernel
from pplsamplers.pdmp.events import PDMP_INFO_FIELDS
from pplsamplers.pdmp.interpolation import PDMPTuning, fresh_envelope, validate_thinning
from pplsamplers.potential import SubsampledPotential, check_position, find_map
from pplsamplers.types import Array, PRNGKey

EMA_DECAY = 0.9
NOISY_DEFAULTS = {"min_gap": 1.0, "noise_margin": 2.0}
"""Envelope noise handling used by default with minibatch / control-variate rates."""


class PDMPAdaptState(NamedTuple):
    """Warmup statistics: moving averages per sample, and σBPS's Welford accumulators."""

    evals: Array
    time: Array
    time_scale: Array
    count: Array
    mean: Array
    m2: Array


def _positive(name: str, value: Any, *, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float | np.floating | np.integer)
        or not (np.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{name} must be a finite positive number; got {value!r}.")


def validate_pdmp_options(
    *,
    refresh_rate: float,
    alpha: float,
    sample_interval: float | None,
    target_evals_per_sample: float,
    t_init: float | None,
    max_extrapolation: float | None,
    max_evaluations: int,
    max_events_per_sample: int,
    min_gap: float | None,
    noise_margin: float | None = None,
) -> None:
    """Raise ``ValueError`` naming the argument for any invalid PDMP option."""
    if (
        isinstance(refresh_rate, bool)
        or not isinstance(refresh_rate, int | float)
        or not (np.isfinite(refresh_rate) and refresh_rate >= 0)
    ):
        raise ValueError(f"refresh_rate must be a finite number >= 0; got {refresh_rate!r}.")
    validate_thinning(
        alpha,
        max_evaluations,
        0.0 if min_gap is None else min_gap,
        noise_margin=0.0 if noise_margin is None else noise_margin,
    )
    _positive("sample_interval", sample_interval)
    _positive("target_evals_per_sample", target_evals_per_sample, allow_none=False)
    _positive("t_init", t_init)
    _positive("max_extrapolation", max_extrapolation)
    if (
        isinstance(max_events_per_sample, bool)
        or not isinstance(max_events_per_sample, int)
        or max_events_per_sample < 1
    ):
        raise ValueError(
            f"max_events_per_sample must be a positive integer; got {max_events_per_sample!r}."
        )


def init_adapt(position: Array, time_scale: Array | float = 1.0) -> PDMPAdaptState:
    """Empty warmup statistics (``time_scale``: the first guess of τ_c)."""
    zero = jnp.zeros((), position.dtype)
    return PDMPAdaptState(
        zero,
        zero,
        jnp.asarray(time_scale, position.dtype),
        zero,
        jnp.zeros_like(position),
        jnp.zeros_like(position),
    )


def adapt_tuning(
    tuning: PDMPTuning,
    adapt: PDMPAdaptState,
    info: Any,
    *,
    target_evals: float,
    adapt_interval: bool,
    time_scale: Array | None = None,
    t_init_fraction: float | None = None,
    extrapolation_fraction: float | None = None,
) -> tuple[PDMPTuning, PDMPAdaptState]:
    """One warmup update of Δ, and of t_init / the horizon cap from a time-scale observation.

    Each quantity moves towards its target by at most a factor 2 per update.
    """
    dtype = tuning.sample_interval.dtype
    evals = EMA_DECAY * adapt.evals + info.rate_evals.astype(dtype)
    time = EMA_DECAY * adapt.time + tuning.sample_interval
    scale = adapt.time_scale
    if time_scale is not None:
        observed = jnp.where(jnp.isfinite(time_scale) & (time_scale > 0), time_scale, scale)
        scale = jnp.exp(EMA_DECAY * jnp.log(scale) + (1 - EMA_DECAY) * jnp.log(observed))
    adapt = adapt._replace(evals=evals, time=time, time_scale=scale)

    def towards(current: Array, proposal: Array) -> Array:
        proposal = jnp.where(jnp.isfinite(proposal) & (proposal > 0), proposal, current)
        return jnp.clip(proposal, current / 2, current * 2)

    interval = tuning.sample_interval
    if adapt_interval:
        interval = towards(interval, target_evals * time / jnp.maximum(evals, 1e-3))
    t_init, horizon = tuning.t_init, tuning.max_extrapolation
    if t_init_fraction is not None:
        t_init = towards(t_init, t_init_fraction * scale)
    if extrapolation_fraction is not None:
        horizon = towards(horizon, extrapolation_fraction * scale)
    return PDMPTuning(interval, t_init, horizon), adapt


def time_scale_probe(potential: SubsampledPotential) -> Callable[[PRNGKey, Array, Array], Array]:
    """``(key, x, u) -> τ_c = 1/√(|uᵀH̃u| + (u·∇Ũ)²)``, a BPS time scale along direction u,
    from one Hessian-vector product on a minibatch (cost n)."""

    def probe(rng_key: PRNGKey, x: Array, u: Array) -> Array:
        idx = potential.sample_indices(rng_key)
        g, hu = jax.jvp(lambda y: potential.grad(y, idx), (x,), (u,))
        scale2 = jnp.abs(u @ hu) + (u @ g) ** 2
        return jnp.where(jnp.isfinite(scale2) & (scale2 > 0), 1.0 / jnp.sqrt(scale2), 1.0)

    return probe


class _PDMPAdapter(SubsampledKernel):
    """Shared NumPyro plumbing of the interpolation-thinning PDMP adapters."""

    diagnostic_fields = PDMP_INFO_FIELDS

    def _store_pdmp_options(self, **options: Any) -> None:
        validate_pdmp_options(**options)
        self.refresh_rate = float(options["refresh_rate"])
        self.alpha = float(options["alpha"])
        self.sample_interval = options["sample_interval"]
        self.target_evals_per_sample = float(options["target_evals_per_sample"])
        self.t_init = options["t_init"]
        self.max_extrapolation = options["max_extrapolation"]
        self.max_evaluations = int(options["max_evaluations"])
        self.max_events_per_sample = int(options["max_events_per_sample"])
        self.min_gap = options["min_gap"]
        self.noise_margin = options.get("noise_margin")
        self._start_position: Array | None = None

    def _noise_handling(self, potential: SubsampledPotential) -> dict[str, float]:
        """``min_gap`` and ``noise_margin``: as given, else 0 for a full batch (Alg. 2 as
        printed) and ``NOISY_DEFAULTS`` for minibatch and control-variate rates."""
        noisy = not potential.full_batch
        defaults = NOISY_DEFAULTS if noisy else {"min_gap": 0.0, "noise_margin": 0.0}
        return {
            name: float(defaults[name] if getattr(self, name) is None else getattr(self, name))
            for name in ("min_gap", "noise_margin")
        }

    def _starting_point(self, key: PRNGKey, init_params: Any) -> Array:
        start = self._start_position
        if init_params is None and start is not None:
            position = start(key) if callable(start) else start
            if not isinstance(position, jax.core.Tracer):
                check_position(self._potential, position)
            return position
        return super()._starting_point(key, init_params)

    def get_diagnostics_str(self, state: Any) -> str:
        info = state.info
        text = (
            f"{int(jnp.sum(info.num_bounces))} bounces, "
            f"{int(jnp.sum(info.bound_violations))} violations, "
            f"Δ {float(jnp.mean(info.sample_interval)):.3g}"
        )
        extra = super().get_diagnostics_str(state)
        return f"{text}, {extra}" if extra else text


class BPS(_PDMPAdapter):
    """The Bouncy Particle Sampler with adaptive interpolation thinning, as a NumPyro kernel.

    Goan et al. §2.1 with Alg. 2: linear flow, rate [v·∇Ũ]_+ (eq. 2), reflection (eq. 3),
    Gaussian velocities N(0, s² I) refreshed at rate λ_ref.  Full-batch gradients when the
    model has no ``subsample_size`` (exact up to bound violations), minibatch gradients with
    ``subsample_size=n`` (the paper's approximate scheme), and control-variate gradients with
    ``control_variate=True`` as well.  Each MCMC sample is the position at the next grid
    time; ``sample_stats`` holds the counters and the exact interval time-averages.

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    refresh_rate
        λ_ref ≥ 0 in the sampler's time units (for BPS: posterior scale / velocity scale).
    alpha
        α ≥ 1 of eq. (12): the envelope is α × the interpolated rate.
    velocity_scale
        s > 0 of the velocity law N(0, s² I).
    sample_interval
        Δ > 0; ``None`` adapts it during warmup to ``target_evals_per_sample``.
    target_evals_per_sample
        Rate evaluations one sample should cost (warmup target for Δ).
    t_init, max_extrapolation
        Envelope start offset and horizon cap; ``None`` adapts them during warmup to
        ``t_init_fraction`` and ``extrapolation_fraction`` of the curvature time scale τ_c
        (module docstring).
    max_evaluations
        Cap on rate evaluations per event (``proposal_cap_hits``).
    max_events_per_sample
        Cap on next-event iterations per sample (``interval_capped``).
    min_gap, noise_margin
        Noise handling of the envelope (an extension of Alg. 2, see
        :func:`~pplsamplers.pdmp.interpolation.interpolation_thinning`): the slope is only
        re-estimated across gaps ≥ ``min_gap`` · t_init, and the line is raised to an upper
        confidence line with ``noise_margin`` = k standard deviations of the minibatch noise
        (free from the jvp's per-example terms).  ``None`` (default): 0 and 0 (the paper's
        scheme) with full-batch gradients, 1 and 2 with minibatch or control-variate ones,
        whose noisy two-point slopes otherwise make the envelope miss events.
    init_at_map
        Start every chain at the MAP (:func:`~pplsamplers.potential.find_map`), as the paper
        does; otherwise NumPyro's ``init_strategy``.
    **kwargs
        ``subsample_size``, ``control_variate``, ``data_plate``, ``potential``,
        ``init_strategy`` (see :class:`~pplsamplers.infer.base.SubsampledKernel`).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> mcmc = MCMC(BPS(model), num_warmup=50, num_samples=100, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> mcmc.get_samples()["mu"].shape
    (100,)
    """

    preconditioned = False

    def __init__(
        self,
        model: Callable | None = None,
        *,
        refresh_rate: float = 1.0,
        alpha: float = 1.5,
        velocity_scale: float = 1.0,
        sample_interval: float | None = None,
        target_evals_per_sample: float = 20.0,
        t_init: float | None = None,
        max_extrapolation: float | None = None,
        t_init_fraction: float = 0.5,
        extrapolation_fraction: float = 2.0,
        max_evaluations: int = 1000,
        max_events_per_sample: int = 10_000,
        min_gap: float | None = None,
        noise_margin: float | None = None,
        init_at_map: bool = False,
        welford_window: tuple[float, float] = (0.3, 0.7),
        **kwargs: Any,
    ) -> None:
        self._store_pdmp_options(
            refresh_rate=refresh_rate,
            alpha=alpha,
            sample_interval=sample_interval,
            target_evals_per_sample=target_evals_per_sample,
            t_init=t_init,
            max_extrapolation=max_extrapolation,
            max_evaluations=max_evaluations,
            max_events_per_sample=max_events_per_sample,
            min_gap=min_gap,
            noise_margin=noise_margin,
        )
        _positive("velocity_scale", velocity_scale, allow_none=False)
        _positive("t_init_fraction", t_init_fraction, allow_none=False)
        _positive("extrapolation_fraction", extrapolation_fraction, allow_none=False)
        lo, hi = welford_window
        if not 0 <= lo < hi <= 1:
            raise ValueError(
                f"welford_window must be (start, end) with 0 <= start < end <= 1 "
                f"(fractions of the warmup); got {welford_window!r}."
            )
        super().__init__(model, **kwargs)
        self.velocity_scale = float(velocity_scale)
        self.t_init_fraction = float(t_init_fraction)
        self.extrapolation_fraction = float(extrapolation_fraction)
        self.init_at_map = bool(init_at_map)
        self.welford_window = (float(lo), float(hi))

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        if self.init_at_map:
            anchor = potential.anchor
            self._start_position = (
                anchor
                if anchor is not None
                else find_map(jax.random.PRNGKey(0), potential).position
            )
        kernel = bps_kernel.build_kernel(
            potential,
            refresh_rate=self.refresh_rate,
            alpha=self.alpha,
            velocity_scale=self.velocity_scale,
            max_evaluations=self.max_evaluations,
            max_events_per_sample=self.max_events_per_sample,
            **self._noise_handling(potential),
        )
        probe = jax.jit(time_scale_probe(potential))
        target = self.target_evals_per_sample
        fixed = dict(
            sample_interval=self.sample_interval,
            t_init=self.t_init,
            max_extrapolation=self.max_extrapolation,
        )
        adapt_kwargs = dict(
            target_evals=target,
            adapt_interval=self.sample_interval is None,
            t_init_fraction=self.t_init_fraction if self.t_init is None else None,
            extrapolation_fraction=(
                self.extrapolation_fraction if self.max_extrapolation is None else None
            ),
        )
        adapt_scale = self.t_init is None or self.max_extrapolation is None
        preconditioned = self.preconditioned
        start_window = int(np.floor(self.welford_window[0] * num_warmup))
        end_window = int(np.floor(self.welford_window[1] * num_warmup))
        t_init_fraction, extrapolation_fraction = self.t_init_fraction, self.extrapolation_fraction
        velocity_scale = self.velocity_scale
        n = potential.n

        def init(rng_key: PRNGKey, position: Array) -> tuple[bps_kernel.BPSState, PDMPAdaptState]:
            velocity_key, probe_key = jax.random.split(rng_key)
            state = bps_kernel.init(velocity_key, position, velocity_scale=velocity_scale)
            tau = probe(probe_key, state.position, state.direction_scale * state.velocity)
            tuning = PDMPTuning(
                jnp.asarray(fixed["sample_interval"] or target * tau / 3, tau.dtype),
                jnp.asarray(fixed["t_init"] or t_init_fraction * tau, tau.dtype),
                jnp.asarray(fixed["max_extrapolation"] or extrapolation_fraction * tau, tau.dtype),
            )
            return state._replace(tuning=tuning), init_adapt(state.position, tau)

        def step(
            rng_key: PRNGKey, state: bps_kernel.BPSState, adapt: PDMPAdaptState, iteration: Array
        ):
            kernel_key, probe_key = jax.random.split(rng_key)
            new_state, info = kernel(kernel_key, state)
            warm = iteration < num_warmup
            tau = None
            if adapt_scale:
                tau = probe(
                    probe_key, new_state.position, new_state.direction_scale * new_state.velocity
                )
                info = info._replace(data_evals=info.data_evals + jnp.where(warm, n, 0))
            tuning, new_adapt = adapt_tuning(
                new_state.tuning, adapt, info, time_scale=tau, **adapt_kwargs
            )
            scale = new_state.direction_scale
            envelope = new_state.envelope
            if preconditioned:
                new_adapt, tuning, scale, envelope = _welford_update(
                    new_adapt, tuning, new_state, iteration, start_window, end_window
                )
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(warm, a, b), new, old)
            new_state = new_state._replace(
                tuning=keep(tuning, new_state.tuning),
                direction_scale=keep(scale, new_state.direction_scale),
                envelope=keep(envelope, new_state.envelope),
            )
            return new_state, keep(new_adapt, adapt), info

        return init, step


def _welford_update(
    adapt: PDMPAdaptState,
    tuning: PDMPTuning,
    state: bps_kernel.BPSState,
    iteration: Array,
    start: int,
    end: int,
):
    """σBPS: Welford variance over the window [start, end), applied at ``end``."""
    x = state.position
    in_window = (iteration >= start) & (iteration < end)
    count = adapt.count + in_window
    delta = x - adapt.mean
    mean = jnp.where(in_window, adapt.mean + delta / jnp.maximum(count, 1), adapt.mean)
    m2 = jnp.where(in_window, adapt.m2 + delta * (x - mean), adapt.m2)
    adapt = adapt._replace(count=count, mean=mean, m2=m2)
    apply = (iteration == end - 1) & (count >= 2)
    sd = jnp.sqrt(m2 / jnp.maximum(count - 1, 1))
    sd = jnp.where(jnp.isfinite(sd) & (sd > 0), sd, state.direction_scale)
    # moving along A v: time scales with 1 / (geometric mean of A)
    ratio = jnp.exp(jnp.mean(jnp.log(state.direction_scale)) - jnp.mean(jnp.log(sd)))
    rescaled = PDMPTuning(*(t * ratio for t in tuning))
    zero = jnp.zeros((), x.dtype)
    reset = adapt._replace(evals=zero, time=zero, time_scale=adapt.time_scale * ratio)
    pick = lambda a, b: jax.tree.map(lambda u, w: jnp.where(apply, u, w), a, b)
    return (
        pick(reset, adapt),
        pick(rescaled, tuning),
        jnp.where(apply, sd, state.direction_scale),
        pick(fresh_envelope(x.dtype), state.envelope),
    )


class SigmaBPS(BPS):
    """σBPS (Goan et al. §2.2): BPS moving along A v with A = diag(σ̂), where σ̂ are Welford
    standard deviations of warmup samples (window ``welford_window``), then frozen.

    Takes the arguments of :class:`BPS`.  With ``num_warmup`` too short for two samples in
    the window, A stays the identity (plain BPS).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> mcmc = MCMC(SigmaBPS(model), num_warmup=100, num_samples=100, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> round(float(mcmc.last_state.kernel_state.direction_scale[0]), 1)  # ≈ posterior sd 0.1
    0.1
    """

    preconditioned = True


__all__ = [
    "BPS",
    "PDMPAdaptState",
    "SigmaBPS",
    "adapt_tuning",
    "init_adapt",
    "time_scale_probe",
    "validate_pdmp_options",
]
