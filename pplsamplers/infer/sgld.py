"""NumPyro adapter for SGLD / pSGLD (:mod:`pplsamplers.kernels.sgld`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.infer.base import InitFn, StepFn, SubsampledKernel
from pplsamplers.kernels import sgld
from pplsamplers.potential import (
    SubsampledPotential,
    find_map,
    gradient_noise_variance,
    suggest_sgld_step_size,
)
from pplsamplers.types import Array, PRNGKey


class SGLD(SubsampledKernel):
    """Stochastic gradient Langevin dynamics as a NumPyro ``MCMCKernel``.

    x ← x − ε ∇Ũ(x) + √(2ε) ξ with a fresh minibatch each step.  With
    ``preconditioned=True`` this is pSGLD (Li et al. 2016): the RMSprop diagonal metric
    G = 1/(λ + √a) is adapted during warmup and frozen afterwards.

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        ε > 0, or ``"auto"``: at ``init`` the MAP is found and ε is set to a tenth of
        min(1/λ_max(∇²U), 4/λ_max(V)) (curvature and gradient-noise limits, Welling & Teh
        2011 §4; see :func:`~pplsamplers.potential.suggest_sgld_step_size`).  SGLD is biased
        at any ε > 0; the bias shrinks with ε.
    preconditioned
        Use pSGLD's RMSprop metric.
    rmsprop_decay, rmsprop_eps
        β and λ of pSGLD.
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
    >>> mcmc = MCMC(SGLD(model, step_size=1e-3, subsample_size=10), num_warmup=100,
    ...             num_samples=100, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> mcmc.get_samples()["mu"].shape
    (100,)
    """

    diagnostic_fields = ("data_evals", "step_size", "grad_norm")

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float | str = "auto",
        *,
        preconditioned: bool = False,
        rmsprop_decay: float = 0.99,
        rmsprop_eps: float = 1e-5,
        **kwargs: Any,
    ) -> None:
        if step_size != "auto":
            step_size = sgld.validate_step_size(step_size)
        super().__init__(model, **kwargs)
        self.step_size = step_size
        self.preconditioned = preconditioned
        self._rmsprop = dict(rmsprop_decay=rmsprop_decay, rmsprop_eps=rmsprop_eps)

    def resolved_step_size(self, potential: SubsampledPotential) -> float:
        """The numeric step size (resolving ``"auto"`` once per potential)."""
        if self.step_size != "auto":
            return self.step_size
        if getattr(self, "_auto_for", None) is not potential:
            map_key, probe_key = jax.random.split(jax.random.PRNGKey(0))
            anchor = find_map(map_key, potential).position
            step = suggest_sgld_step_size(probe_key, potential, anchor)
            if self.preconditioned:
                # pSGLD moves coordinate j by ε·G_j with G_j ≈ 1/(λ + √V_j) at the MAP (the mean
                # gradient vanishes there): keep every ε·G_j within the plain-SGLD step.
                noise = gradient_noise_variance(probe_key, potential, anchor)
                step *= float(jnp.min(self._rmsprop["rmsprop_eps"] + jnp.sqrt(noise)))
            self._auto_step = step
            self._auto_for = potential
        return self._auto_step

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        step_size = self.resolved_step_size(potential)
        config = dict(step_size=step_size, preconditioned=self.preconditioned, **self._rmsprop)
        warmup_step = sgld.build_kernel(potential, adapt_preconditioner=True, **config)
        frozen_step = sgld.build_kernel(potential, adapt_preconditioner=False, **config)

        def init(rng_key: PRNGKey, position: Array) -> tuple[sgld.SGLDState, None]:
            return sgld.init(position), None

        def step(rng_key: PRNGKey, state: sgld.SGLDState, adapt: None, iteration: Array):
            if self.preconditioned:
                new, info = lax.cond(
                    iteration < num_warmup, warmup_step, frozen_step, rng_key, state
                )
            else:
                new, info = frozen_step(rng_key, state)
            return new, adapt, info

        return init, step

    def get_diagnostics_str(self, state: Any) -> str:
        step = float(jnp.mean(state.info.step_size))
        text = f"step {step:.2e}, |grad| {float(jnp.mean(state.info.grad_norm)):.3g}"
        extra = super().get_diagnostics_str(state)
        return f"{text}, {extra}" if extra else text


class PSGLD(SGLD):
    """pSGLD: :class:`SGLD` with ``preconditioned=True`` (RMSprop metric, frozen after warmup)."""

    def __init__(
        self, model: Callable | None = None, step_size: float | str = "auto", **kwargs: Any
    ):
        super().__init__(model, step_size, preconditioned=True, **kwargs)


__all__ = ["PSGLD", "SGLD"]
