"""NumPyro adapter for SGLD / pSGLD (:mod:`pplsamplers.kernels.sgld`)."""

from __future__ import annotations

from typing import Any, Callable

import jax.numpy as jnp
from jax import lax

from pplsamplers.infer.base import InitFn, StepFn, SubsampledKernel
from pplsamplers.kernels import sgld
from pplsamplers.potential import SubsampledPotential
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
        ε > 0.  SGLD is biased at any ε > 0; the bias shrinks with ε.
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
        step_size: float = 1e-3,
        *,
        preconditioned: bool = False,
        rmsprop_decay: float = 0.99,
        rmsprop_eps: float = 1e-5,
        **kwargs: Any,
    ) -> None:
        sgld.validate_step_size(step_size)
        super().__init__(model, **kwargs)
        self.step_size = float(step_size)
        self.preconditioned = preconditioned
        self._rmsprop = dict(rmsprop_decay=rmsprop_decay, rmsprop_eps=rmsprop_eps)

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        config = dict(step_size=self.step_size, preconditioned=self.preconditioned, **self._rmsprop)
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
        text = f"step {self.step_size:.2e}, |grad| {float(jnp.mean(state.info.grad_norm)):.3g}"
        extra = super().get_diagnostics_str(state)
        return f"{text}, {extra}" if extra else text


class PSGLD(SGLD):
    """pSGLD: :class:`SGLD` with ``preconditioned=True`` (RMSprop metric, frozen after warmup)."""

    def __init__(self, model: Callable | None = None, step_size: float = 1e-3, **kwargs: Any):
        super().__init__(model, step_size, preconditioned=True, **kwargs)


__all__ = ["PSGLD", "SGLD"]
