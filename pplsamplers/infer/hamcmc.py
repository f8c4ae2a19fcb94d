"""HAMCMC (:mod:`pplsamplers.kernels.hamcmc`) and its SGRLD baseline (:mod:`~.kernels.sgrld`)
declared on the generic adapter."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers import validation
from pplsamplers.infer.adapter import SubsampledKernel
from pplsamplers.infer.spec import (
    STEP_SIZE_STEPS_PER_SAMPLE,
    KernelSpec,
    auto_langevin_steps,
    halve_step_size,
    langevin_step_size,
)
from pplsamplers.kernels import hamcmc, sgrld
from pplsamplers.kernels.hamcmc import Schedule
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey

SCHEDULES = ("constant", "polynomial")


def spd_matrix(name: str, value: Any) -> np.ndarray:
    """``value`` as a float array if it is a finite symmetric positive definite matrix."""
    matrix = np.asarray(value, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or not np.all(np.isfinite(matrix)):
        raise ValueError(f"{name} must be a finite square (D, D) matrix; got shape {matrix.shape}.")
    if not np.allclose(matrix, matrix.T, rtol=1e-6, atol=1e-8 * np.abs(matrix).max()):
        raise ValueError(f"{name} must be symmetric (it is the Fisher information G).")
    try:
        np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        raise ValueError(
            f"{name} must be positive definite (its Cholesky factor failed)."
        ) from None
    return matrix


@dataclass(frozen=True)
class HAMCMCConfig:
    """HAMCMC's options, validated once."""

    step_size: float | str = "auto"
    memory_size: int = 2
    damping: float = 1.0
    initial_scale: float = 1.0
    schedule: Schedule = "constant"
    sgld_step_size: float | None = None

    def __post_init__(self) -> None:
        validation.switches(self)
        validation.positive_or_auto("step_size", self.step_size)
        # M ≥ 2: the pairs then exclude θ_(t−M)
        validation.at_least(
            "memory_size", validation.positive_int("memory_size", self.memory_size), 2
        )
        validation.positive("damping", self.damping, allow_zero=True)
        validation.positive("initial_scale", self.initial_scale)
        validation.one_of("schedule", self.schedule, SCHEDULES)
        validation.optional_positive("sgld_step_size", self.sgld_step_size)


@dataclass(frozen=True, eq=False)
class SGRLDConfig:
    """SGRLD's options, validated once (G's size is checked against the model at ``init``)."""

    step_size: float | str = "auto"
    metric: Array | None = None
    schedule: Schedule = "constant"
    factorize_each_step: bool = False

    def __post_init__(self) -> None:
        validation.switches(self)
        validation.positive_or_auto("step_size", self.step_size)
        if self.metric is not None:
            spd_matrix("metric", self.metric)
        validation.one_of("schedule", self.schedule, SCHEDULES)


def hamcmc_spec(config: HAMCMCConfig) -> KernelSpec:
    """The :class:`KernelSpec` of HAMCMC: the paper tunes ε by grid search, so no warmup of its
    own (the first 2M steps are SGLD, Alg. 1)."""

    def default_params(
        rng_key: PRNGKey, potential: SubsampledPotential, mode: Array | None = None
    ) -> hamcmc.HAMCMCParams:
        as_array = functools.partial(jnp.asarray, dtype=potential.init_position.dtype)
        start = config.sgld_step_size
        return hamcmc.HAMCMCParams(
            step_size=as_array(langevin_step_size(config.step_size, potential.dim)),
            initial_scale=as_array(config.initial_scale),
            damping=as_array(config.damping),
            decay_exponent=as_array(0.51),
            sgld_step_size=None if start is None else as_array(start),
        )

    def describe(info: hamcmc.HAMCMCInfo) -> str:
        return (
            f"ε {float(jnp.mean(info.step_size)):.2e}, "
            f"skipped pairs {int(jnp.max(info.num_skipped_pairs))}, M {config.memory_size}"
        )

    return KernelSpec(
        init=functools.partial(hamcmc.init, memory_size=config.memory_size),
        build_kernel=lambda: hamcmc.build_kernel(config.memory_size, config.schedule),
        default_params=default_params,
        diagnostic_fields=("data_evals", "skipped_pairs", "step_size", "curvature", "sgld_start"),
        describe=describe,
        stabilize=halve_step_size,
        # each step moves one of the M interleaved sub-chains: M times the steps per draw
        # advance each of them as far as the other kernels' chain
        steps_per_sample=STEP_SIZE_STEPS_PER_SAMPLE * config.memory_size,
        steps_per_sample_at=(
            (lambda dim: auto_langevin_steps(dim) * config.memory_size)
            if config.step_size == "auto"
            else None
        ),
        moved_point=hamcmc.moved_point,
    )


def sgrld_spec(config: SGRLDConfig) -> KernelSpec:
    """The :class:`KernelSpec` of SGRLD with a constant metric (no warmup of its own)."""

    def default_params(
        rng_key: PRNGKey, potential: SubsampledPotential, mode: Array | None = None
    ) -> sgrld.SGRLDParams:
        dtype, dim = potential.init_position.dtype, potential.dim
        metric = config.metric
        if metric is not None:
            metric = jnp.asarray(metric, dtype)
            if metric.shape != (dim, dim):
                raise ValueError(f"metric must have shape ({dim}, {dim}); got {metric.shape}.")
            # G is over the model's x; the kernel runs in z with x = c + L z (L = I when not
            # whitened), where the same metric is Lᵀ G L: the update in x is unchanged.
            factor = jax.jacfwd(potential.to_model)(jnp.zeros(dim, dtype))
            metric = factor.T @ metric @ factor
        step = jnp.asarray(langevin_step_size(config.step_size, dim), dtype)
        exponent = jnp.asarray(0.51, dtype)
        return sgrld.make_params(step, metric, exponent)

    def describe(info: sgrld.SGRLDInfo) -> str:
        return f"ε {float(jnp.mean(info.step_size)):.2e}"

    return KernelSpec(
        init=sgrld.init,
        build_kernel=lambda: sgrld.build_kernel(config.schedule, config.factorize_each_step),
        default_params=default_params,
        diagnostic_fields=sgrld.SGRLDInfo._fields,
        describe=describe,
        stabilize=halve_step_size,
        steps_per_sample=STEP_SIZE_STEPS_PER_SAMPLE,
        steps_per_sample_at=auto_langevin_steps if config.step_size == "auto" else None,
    )


class HAMCMC(SubsampledKernel):
    """Hessian-approximated MCMC (Şimşekli et al. 2016) as a NumPyro ``MCMCKernel``.

    Stochastic quasi-Newton Langevin: θ_t = θ_{t−M} − ε_t H_t ∇Ũ(θ_{t−M}) + √(2ε_t) S_t z
    (eq. 10), with ``H_t`` the L-BFGS inverse Hessian of the M−1 most recent pairs, none of
    which involves θ_{t−M} (so no correction term is needed), applied by the two-loop
    recursion, and ``S_t z`` from the square-root recursion of eq. (11).  Memory and time are
    O(MD) and O(M²D) per step; a step costs two minibatch gradients.  Each draw is the most
    recent θ_t; consecutive draws come from M interleaved sub-chains.

    The step size is kept as given (or set from the dimension, ``"auto"``): the paper tunes it
    by grid search and does not adapt it, so warmup only runs the chain (the first 2M steps
    are SGLD, Alg. 1).

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        ε > 0 (``schedule="constant"``), or ``a`` of ε_t = (a/t)^0.51 (``"polynomial"``);
        ``"auto"`` (default): :func:`~pplsamplers.infer.spec.auto_langevin_step`, 0.1 in the
        whitened coordinates of the shared warmup, less in high D (about 0.28/√D beyond
        D = 8), where the fixed step's bias adds up over the coordinates; then the default
        ``steps_per_sample`` grows in proportion (M × 26 at D = 53, M × 62 at D = 300).
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
    **options
        The options of every sampler: ``subsample_size``, ``data_plate``, ``potential``,
        ``control_variate``, ``precondition``, ``init_strategy``,
        ``steps_per_sample`` (default 10 M here, so that each of the M interleaved
        sub-chains takes ten steps per draw, as SGLD's chain does; more in high D with
        ``step_size="auto"``) (see :class:`~pplsamplers.infer.adapter.SubsampledKernel`).

    Examples
    --------
    A step costs two minibatch gradients, each of 2 × 10 per-datum terms with the control
    variate, and a draw is twenty steps, ten for each of the two sub-chains (a small γ keeps
    the first SGLD steps stable):

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> mcmc = run(HAMCMC(model, step_size=0.1, initial_scale=0.01, subsample_size=10))
    >>> mcmc.get_samples()["mu"].shape, int(mcmc.get_extra_fields()["data_evals"][-1])
    ((100,), 800)
    """

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float | str = "auto",
        *,
        memory_size: int = 2,
        damping: float = 1.0,
        initial_scale: float = 1.0,
        schedule: Schedule = "constant",
        sgld_step_size: float | None = None,
        **options: Any,
    ) -> None:
        self.config = HAMCMCConfig(
            step_size, memory_size, damping, initial_scale, schedule, sgld_step_size
        )
        super().__init__(model, hamcmc_spec(self.config), **options)


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
        ε > 0, or ``a`` of ε_t = (a/t)^0.51; ``"auto"`` (default):
        :func:`~pplsamplers.infer.spec.auto_langevin_step`, 0.1 in the whitened coordinates
        of the shared warmup, less in high D (about 0.28/√D beyond D = 8), where the fixed
        step's bias adds up over the coordinates; then the default ``steps_per_sample``
        grows in proportion (26 at D = 53, 62 at D = 300).
    metric
        G, ``(D, D)`` symmetric positive definite, over the model's flat unconstrained
        position x; ``None`` is the identity (SGLD in the kernel's coordinates).  When the
        adapter whitens (x = x* + L z) the kernel uses Lᵀ G L, the same metric in z, so the
        update in x does not depend on ``precondition``.
    schedule
        ``"constant"`` or ``"polynomial"``.
    factorize_each_step
        Recompute the Cholesky factor every step (the paper's timing protocol).
    control_variate
        ``"auto"`` (default) as for every sampler; ``False`` gives the paper's
        plain-minibatch baseline.
    **options
        See :class:`~pplsamplers.infer.adapter.SubsampledKernel`.

    Examples
    --------
    With G = 100, a (D, D) matrix for D = 1:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> run(SGRLD(model, metric=[[100.0]], subsample_size=10)).get_samples()["mu"].shape
    (100,)
    """

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float | str = "auto",
        *,
        metric: Array | None = None,
        schedule: Schedule = "constant",
        factorize_each_step: bool = False,
        control_variate: bool | str | Array = "auto",
        **options: Any,
    ) -> None:
        self.config = SGRLDConfig(step_size, metric, schedule, factorize_each_step)
        spec = sgrld_spec(self.config)
        super().__init__(model, spec, control_variate=control_variate, **options)


__all__ = [
    "HAMCMC",
    "SGRLD",
    "HAMCMCConfig",
    "SGRLDConfig",
    "hamcmc_spec",
    "sgrld_spec",
    "spd_matrix",
]
