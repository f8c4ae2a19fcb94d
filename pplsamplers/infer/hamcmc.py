"""NumPyro adapters for HAMCMC (:mod:`pplsamplers.kernels.hamcmc`) and its SGRLD baseline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from pplsamplers.infer.base import InitFn, StepFn, SubsampledKernel
from pplsamplers.kernels import hamcmc, sgrld
from pplsamplers.kernels.hamcmc import Schedule
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class HAMCMC(SubsampledKernel):
    """Hessian-approximated MCMC (Şimşekli et al. 2016) as a NumPyro ``MCMCKernel``.

    Stochastic quasi-Newton Langevin: θ_t = θ_{t−M} − ε_t H_t ∇Ũ(θ_{t−M}) + √(2ε_t) S_t z
    (eq. 10), with ``H_t`` the L-BFGS inverse Hessian of the M−1 most recent pairs, none of
    which involves θ_{t−M} (so no correction term is needed), applied by the two-loop
    recursion, and ``S_t z`` from the square-root recursion of eq. (11).  Memory and time are
    O(MD) and O(M²D) per step; a step costs two minibatch gradients.  Each draw is the most
    recent θ_t; consecutive draws come from M interleaved sub-chains.

    The step size is kept as given: the paper tunes it by grid search and does not adapt it,
    so warmup only runs the chain (the first 2M steps are SGLD, Alg. 1).

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        ε > 0 (``schedule="constant"``), or ``a`` of ε_t = (a/t)^0.51 (``"polynomial"``).
    memory_size
        M ≥ 2.
    damping
        λ ≥ 0, trust-region shift y ← y + λ s.
    initial_scale
        γ > 0, H⁰ = γI.  ``step_size * initial_scale`` is the SGLD-like step in directions
        that the pairs do not cover; keep it below 2 / (largest curvature).
    schedule
        ``"constant"`` or ``"polynomial"`` (held constant within blocks of M steps).
    sgld_step_size
        Step of the first 2M SGLD steps (default γ ε_t).
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
    >>> kernel = HAMCMC(model, step_size=0.1, initial_scale=0.01, subsample_size=10)
    >>> mcmc = MCMC(kernel, num_warmup=100, num_samples=100, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> mcmc.get_samples()["mu"].shape
    (100,)
    """

    diagnostic_fields = ("data_evals", "skipped_pairs", "step_size", "curvature", "sgld_start")

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float = 1e-2,
        *,
        memory_size: int = 2,
        damping: float = 1.0,
        initial_scale: float = 1.0,
        schedule: Schedule = "constant",
        sgld_step_size: float | None = None,
        **kwargs: Any,
    ) -> None:
        hamcmc.validate_config(
            step_size, memory_size, damping, initial_scale, schedule, sgld_step_size
        )
        super().__init__(model, **kwargs)
        self.step_size = float(step_size)
        self.memory_size = int(memory_size)
        self._config = dict(
            step_size=float(step_size),
            memory_size=int(memory_size),
            damping=float(damping),
            initial_scale=float(initial_scale),
            schedule=schedule,
            sgld_step_size=None if sgld_step_size is None else float(sgld_step_size),
        )

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        kernel = hamcmc.build_kernel(potential, **self._config)
        memory_size = self.memory_size

        def init(rng_key: PRNGKey, position: Array) -> tuple[hamcmc.HAMCMCState, None]:
            return hamcmc.init(position, memory_size), None

        def step(rng_key: PRNGKey, state: hamcmc.HAMCMCState, adapt: None, iteration: Array):
            new, info = kernel(rng_key, state)
            return new, adapt, info

        return init, step

    def get_diagnostics_str(self, state: Any) -> str:
        skipped = int(jnp.max(state.kernel_state.num_skipped_pairs))
        text = (
            f"ε {float(jnp.mean(state.info.step_size)):.2e}, "
            f"skipped pairs {skipped}, M {self.memory_size}"
        )
        extra = super().get_diagnostics_str(state)
        return f"{text}, {extra}" if extra else text


class SGRLD(SubsampledKernel):
    """SGRLD with a constant dense metric G (the HAMCMC paper's baseline) for NumPyro.

    θ ← θ − ε G⁻¹∇Ũ(θ) + √(2ε) L⁻ᵀ ξ with G = L Lᵀ given by the user (for example the
    Fisher information of a model where it is constant, such as the linear Gaussian model
    of :mod:`models.linear_gaussian`).  ``G`` is over the flat unconstrained position.

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        ε > 0, or ``a`` of ε_t = (a/t)^0.51.
    metric
        G, ``(D, D)`` symmetric positive definite; ``None`` is the identity (SGLD).
    schedule
        ``"constant"`` or ``"polynomial"``.
    factorize_each_step
        Recompute the Cholesky factor every step (the paper's timing protocol).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> kernel = SGRLD(model, step_size=0.1, metric=jnp.array([[100.0]]), subsample_size=10)
    >>> mcmc = MCMC(kernel, num_warmup=50, num_samples=50, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), jnp.ones(100))
    >>> mcmc.get_samples()["mu"].shape
    (50,)
    """

    diagnostic_fields = ("data_evals", "step_size")

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float = 1e-2,
        *,
        metric: Array | None = None,
        schedule: Schedule = "constant",
        factorize_each_step: bool = False,
        **kwargs: Any,
    ) -> None:
        if not (isinstance(step_size, int | float) and 0 < step_size < float("inf")):
            raise ValueError(f"step_size must be a finite number > 0; got {step_size!r}.")
        super().__init__(model, **kwargs)
        self.step_size = float(step_size)
        self._metric = None if metric is None else jnp.asarray(metric)
        self._config = dict(schedule=schedule, factorize_each_step=factorize_each_step)

    def build(self, potential: SubsampledPotential, num_warmup: int) -> tuple[InitFn, StepFn]:
        kernel = sgrld.build_kernel(potential, self.step_size, self._metric, **self._config)

        def init(rng_key: PRNGKey, position: Array) -> tuple[sgrld.SGRLDState, None]:
            return sgrld.init(position), None

        def step(rng_key: PRNGKey, state: sgrld.SGRLDState, adapt: None, iteration: Array):
            new, info = kernel(rng_key, state)
            return new, adapt, info

        return init, step

    def get_diagnostics_str(self, state: Any) -> str:
        text = f"ε {float(jnp.mean(state.info.step_size)):.2e}"
        extra = super().get_diagnostics_str(state)
        return f"{text}, {extra}" if extra else text


__all__ = ["HAMCMC", "SGRLD"]
