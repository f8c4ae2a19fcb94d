"""NumPyro adapters for SBPS and pSBPS (:mod:`pplsamplers.kernels.sbps`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.infer.base import InitFn, StepFn, SubsampledKernel
from pplsamplers.kernels import sbps
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class SBPSAdaptState(NamedTuple):
    """What warmup adapts and then freezes: Δ and λ_r (the preconditioner lives in the
    kernel state, recomputed only during warmup)."""

    sample_interval: Array
    refresh_rate: Array


class SBPS(SubsampledKernel):
    """Stochastic Bouncy Particle Sampler as a NumPyro ``MCMCKernel`` (Pakman et al. 2017).

    A piecewise-linear continuous-time sampler: each MCMC sample is the particle's position
    at the next grid time Δ, 2Δ, …, and ``sample_stats`` carry the exact time-averages of
    the unconstrained x and x² over each interval (``time_average``, ``time_average_sq``,
    eq. 19) together with ``num_proposals``, ``num_bounces``, ``bound_violations`` (the
    bias diagnostic: proposals with [G̃]_+/λ > 1), ``num_refreshes``, ``num_auxiliary`` and
    ``data_evals``.

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
    target_proposals, relative_refresh_rate
        See above.
    relative_dt
        Knot spacing of the proposal band as a fraction of the mean proposal time.
    buffer_size
        Regression observations kept since the last bounce (the most recent ones).
    preconditioned
        pSBPS: diagonal RMSprop preconditioner, adapted in warmup then frozen (§5).
    rmsprop_decay, rmsprop_eps
        β and ε of the preconditioner.
    start_at_anchor
        With ``control_variate``, start every chain at the anchor x* (the MAP) unless
        ``init_params`` are given: the control-variate noise grows with |x − x*|, so a far
        start makes the transient very slow.
    **kwargs
        Further kernel settings (``clamp_negative_slopes``, ``auxiliary_observations``,
        ``learn_slope_prior``, ``max_events_per_sample``, …; see
        :func:`pplsamplers.kernels.sbps.build_kernel`) and the base-class arguments
        ``subsample_size``, ``data_plate``, ``control_variate``, ``init_strategy``,
        ``potential``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> mcmc = MCMC(SBPS(model, subsample_size=10), num_warmup=50, num_samples=50,
    ...             progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> mcmc.get_samples()["mu"].shape
    (50,)
    """

    diagnostic_fields = (
        "data_evals",
        "num_proposals",
        "num_bounces",
        "num_refreshes",
        "bound_violations",
        "num_auxiliary",
        "time_average",
        "time_average_sq",
        "sample_interval",
        "interval_capped",
    )
    _KERNEL_OPTIONS = (
        "clamp_negative_slopes",
        "auxiliary_observations",
        "auxiliary_horizon",
        "max_observation_gap",
        "learn_slope_prior",
        "slope_prior_step_size",
        "relative_noise_floor",
        "averaging_window",
        "max_events_per_sample",
        "knot_block_size",
        "max_knot_blocks",
    )

    def __init__(
        self,
        model: Callable | None = None,
        k: float = 3.0,
        *,
        sample_interval: float | None = None,
        refresh_rate: float | None = None,
        target_proposals: float = 10.0,
        relative_refresh_rate: float = 0.01,
        relative_dt: float = 0.1,
        buffer_size: int = 64,
        preconditioned: bool = False,
        rmsprop_decay: float = 0.99,
        rmsprop_eps: float = 1e-4,
        start_at_anchor: bool = True,
        **kwargs: Any,
    ) -> None:
        options = {name: kwargs.pop(name) for name in self._KERNEL_OPTIONS if name in kwargs}
        sbps.validate_config(
            k=k,
            relative_dt=relative_dt,
            buffer_size=buffer_size,
            rmsprop_decay=rmsprop_decay,
            rmsprop_eps=rmsprop_eps,
            **options,
        )
        if sample_interval is not None:
            sbps.validate_positive(sample_interval, "sample_interval")
        if refresh_rate is not None:
            sbps.validate_positive(refresh_rate, "refresh_rate", allow_zero=True)
        sbps.validate_positive(target_proposals, "target_proposals")
        sbps.validate_positive(relative_refresh_rate, "relative_refresh_rate", allow_zero=True)
        super().__init__(model, **kwargs)
        self.k = float(k)
        self.sample_interval = sample_interval
        self.refresh_rate = refresh_rate
        self.target_proposals = float(target_proposals)
        self.relative_refresh_rate = float(relative_refresh_rate)
        self.buffer_size = int(buffer_size)
        self.preconditioned = bool(preconditioned)
        self.start_at_anchor = bool(start_at_anchor)
        self._kernel_options = dict(
            k=self.k,
            relative_dt=relative_dt,
            preconditioned=self.preconditioned,
            rmsprop_decay=rmsprop_decay,
            rmsprop_eps=rmsprop_eps,
            **options,
        )

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        # NumPyro calls init once per sequential chain: reuse the pair (and the compiled init)
        cached = getattr(self, "_built", None)
        if cached is not None and cached[0] is potential and cached[1] == num_warmup:
            return cached[2]
        pair = self._build(potential, num_warmup)
        self._built = (potential, num_warmup, pair)
        return pair

    def _build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        kernel = sbps.build_kernel(potential, **self._kernel_options)
        fixed_interval, fixed_refresh = self.sample_interval, self.refresh_rate
        target, relative_refresh = self.target_proposals, self.relative_refresh_rate
        k, buffer_size = self.k, self.buffer_size

        def current(state: sbps.SBPSState) -> SBPSAdaptState:
            dtype = state.position.dtype
            interval = (
                target * state.mean_proposal_time
                if fixed_interval is None
                else jnp.asarray(fixed_interval, dtype)
            )
            refresh = (
                relative_refresh * state.mean_acceptance / state.mean_proposal_time
                if fixed_refresh is None
                else jnp.asarray(fixed_refresh, dtype)
            )
            return SBPSAdaptState(interval, refresh)

        @jax.jit  # one compilation instead of op-by-op dispatch through the model
        def init(rng_key: PRNGKey, position: Array) -> tuple[sbps.SBPSState, SBPSAdaptState]:
            state = sbps.init(rng_key, position, potential, k=k, buffer_size=buffer_size)
            return state, current(state)

        def step(rng_key: PRNGKey, state: sbps.SBPSState, adapt: SBPSAdaptState, iteration: Array):
            warmup = iteration < num_warmup
            live = current(state)
            adapt = SBPSAdaptState(
                *(jnp.where(warmup, a, b) for a, b in zip(live, adapt, strict=True))
            )
            state, info = kernel(
                rng_key,
                state,
                adapt.sample_interval,
                adapt.refresh_rate,
                adapt_preconditioner=warmup,
            )
            return state, adapt, info

        return init, step

    def _starting_point(self, key: PRNGKey, init_params: Any) -> Array:
        # With a control variate the posterior sits near the anchor x* (the MAP) and the
        # noise grows with |x − x*|: start there unless the user gave init_params.
        anchor = self._potential.anchor
        if init_params is None and anchor is not None and self.start_at_anchor:
            return anchor
        return super()._starting_point(key, init_params)

    def get_diagnostics_str(self, state: Any) -> str:
        kernel = state.kernel_state
        total = lambda x: float(np.sum(np.asarray(x)))
        elapsed, proposals = total(kernel.total_time), total(kernel.total_proposals)
        bounce_rate = total(kernel.total_bounces) / elapsed if elapsed > 0 else 0.0
        violation = total(kernel.total_violations) / proposals if proposals > 0 else 0.0
        text = f"{bounce_rate:.3g} bounces/time, {violation:.2%} violations"
        extra = super().get_diagnostics_str(state)
        return f"{text}, {extra}" if extra else text


class PSBPS(SBPS):
    """pSBPS: :class:`SBPS` with ``preconditioned=True`` (RMSprop diagonal preconditioner
    normalised to mean 1, adapted during warmup and then frozen; §5, DESIGN §5)."""

    def __init__(self, model: Callable | None = None, k: float = 3.0, **kwargs: Any) -> None:
        super().__init__(model, k, preconditioned=True, **kwargs)


__all__ = ["PSBPS", "SBPS", "SBPSAdaptState"]
