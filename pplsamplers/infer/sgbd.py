"""NumPyro adapters for SGBD (:mod:`pplsamplers.kernels.sgbd`) and c-SGLD (:mod:`~.kernels.csgld`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import lax

from pplsamplers.infer.base import InitFn, StepFn, SubsampledKernel
from pplsamplers.kernels import csgld, sgbd
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class SGBD(SubsampledKernel):
    """Stochastic gradient Barker dynamics as a NumPyro ``MCMCKernel``.

    Each step moves every unconstrained coordinate by ±z_j, z_j ~ N(σ_j, (0.1σ_j)²), the
    sign drawn from a minibatch estimate of the Barker probability sigmoid(z_j ∂_j log π)
    (paper Alg. 2–4).  The increment size never depends on the gradient, which makes SGBD
    robust to the step size, to skewed targets and to exploding gradients.

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        σ > 0: a scalar or one value per unconstrained coordinate (scale heterogeneity,
        §5.1.1).  With ``adapt_step_size`` it is only the starting value.
    variant
        ``"corrected"`` (default, Alg. 3: de-biases the flip probability for the gradient
        noise, extreme rule past the breaking point τ̂|z| ≥ 1.702), ``"vanilla"`` (Alg. 2) or
        ``"extreme"`` (Alg. 4: always step along the sign of the minibatch gradient).
    noise_decay
        β in [0, 1): weight of the old value in the moving average τ̂ of the gradient
        estimator's per-coordinate sd.
    adapt_step_size
        During warmup set σ_j = 1.702/(1.233 τ̂_j) (§4.2) for every coordinate, then freeze it.
        τ̂_j ∝ N/√n times the spread of the per-example gradients, so this σ_j follows the
        posterior scale of coordinate j for the plain minibatch estimator.  Needs minibatches
        (τ̂ = 0 keeps σ for a full batch).  The rule is the largest σ for which the correction
        stays valid: with ``control_variate`` the noise, hence τ̂, is much smaller and σ grows
        past the posterior scale, so prefer a fixed σ there.
    **kwargs
        ``subsample_size``, ``data_plate``, ``control_variate``, ``init_strategy``,
        ``potential`` (see :class:`~pplsamplers.infer.base.SubsampledKernel`).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> mcmc = MCMC(SGBD(model, step_size=0.05, subsample_size=10), num_warmup=100,
    ...             num_samples=100, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> mcmc.get_samples()["mu"].shape
    (100,)
    """

    diagnostic_fields = (
        "data_evals",
        "flip_prob_mean",
        "uphill_prob_mean",
        "frac_past_breaking_point",
        "tau_mean",
        "step_size_mean",
    )

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float | Array = 1e-2,
        *,
        variant: str = "corrected",
        noise_decay: float = 0.9,
        adapt_step_size: bool = False,
        **kwargs: Any,
    ) -> None:
        self.step_size = sgbd.validate_step_size(step_size)
        self.variant = sgbd.validate_variant(variant)
        self.noise_decay = sgbd.validate_noise_decay(noise_decay)
        self.adapt_step_size = bool(adapt_step_size)
        super().__init__(model, **kwargs)

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        sgbd.validate_step_size(self.step_size, potential.dim)
        config = dict(variant=self.variant, noise_decay=self.noise_decay)
        frozen_step = sgbd.build_kernel(potential, adapt_step_size=False, **config)
        warmup_step = sgbd.build_kernel(potential, adapt_step_size=True, **config)

        def init(rng_key: PRNGKey, position: Array) -> tuple[sgbd.SGBDState, None]:
            return sgbd.init(position, self.step_size), None

        def step(rng_key: PRNGKey, state: sgbd.SGBDState, adapt: None, iteration: Array):
            if self.adapt_step_size:
                new, info = lax.cond(
                    iteration < num_warmup, warmup_step, frozen_step, rng_key, state
                )
            else:
                new, info = frozen_step(rng_key, state)
            return new, adapt, info

        return init, step

    def get_diagnostics_str(self, state: Any) -> str:
        info = state.info
        text = (
            f"σ {float(jnp.mean(info.step_size_mean)):.2e}, "
            f"P(uphill) {float(jnp.mean(info.uphill_prob_mean)):.2f}, "
            f"past breaking point {float(jnp.mean(info.frac_past_breaking_point)):.0%}, "
            f"τ̂ {float(jnp.mean(info.tau_mean)):.3g}"
        )
        extra = super().get_diagnostics_str(state)
        return f"{text}, {extra}" if extra else text


class CSGLD(SubsampledKernel):
    """Corrected SGLD (the SGBD paper's Alg. 7) as a NumPyro ``MCMCKernel``.

    x ← x + ε ĝ + √(max(2ε − ε²τ̂², 0)) ξ: SGLD that injects only the noise the minibatch
    gradient does not already bring (τ̂ per coordinate, as in SGBD).

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        ε > 0 (same convention as :class:`~pplsamplers.infer.sgld.SGLD`).
    noise_decay
        β in [0, 1) of the moving average τ̂.
    **kwargs
        See :class:`~pplsamplers.infer.base.SubsampledKernel`.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> mcmc = MCMC(CSGLD(model, step_size=1e-3, subsample_size=10), num_warmup=100,
    ...             num_samples=100, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> mcmc.get_samples()["mu"].shape
    (100,)
    """

    diagnostic_fields = (
        "data_evals",
        "step_size",
        "grad_norm",
        "tau_mean",
        "frac_past_breaking_point",
    )

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float = 1e-3,
        *,
        noise_decay: float = 0.9,
        **kwargs: Any,
    ) -> None:
        self.step_size = csgld.validate_step_size(step_size)
        self.noise_decay = sgbd.validate_noise_decay(noise_decay)
        super().__init__(model, **kwargs)

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        kernel = csgld.build_kernel(potential, self.step_size, noise_decay=self.noise_decay)

        def init(rng_key: PRNGKey, position: Array) -> tuple[csgld.CSGLDState, None]:
            return csgld.init(position), None

        def step(rng_key: PRNGKey, state: csgld.CSGLDState, adapt: None, iteration: Array):
            new, info = kernel(rng_key, state)
            return new, adapt, info

        return init, step

    def get_diagnostics_str(self, state: Any) -> str:
        info = state.info
        text = (
            f"step {self.step_size:.2e}, τ̂ {float(jnp.mean(info.tau_mean)):.3g}, "
            f"noise clipped {float(jnp.mean(info.frac_past_breaking_point)):.0%}"
        )
        extra = super().get_diagnostics_str(state)
        return f"{text}, {extra}" if extra else text


__all__ = ["CSGLD", "SGBD"]
