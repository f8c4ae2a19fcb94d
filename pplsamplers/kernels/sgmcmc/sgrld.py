"""SGRLD with a constant, user-given dense metric (baseline of Şimşekli et al. 2016, §3.1, §4.1).

Stochastic gradient Riemannian Langevin dynamics (Patterson & Teh 2013) with a metric
G(θ) = G that does not depend on θ, so the correction term Γ (Şimşekli et al., eq. 9) is zero:

    θ_t = θ_{t−1} − ε_t G⁻¹ ∇Ũ(θ_{t−1}) + √(2ε_t) L⁻ᵀ ξ,      G = L Lᵀ,  ξ ~ N(0, I),

so the noise has covariance 2ε_t G⁻¹.  For the linear Gaussian model (eq. 14) the expected
Fisher information is constant, G = I + Σ_n a_n a_nᵀ / σ_x², the posterior precision.
The paper times SGRLD with a Cholesky factorisation at every step, as a θ-dependent metric
would need (§4.1 footnote 3): ``factorize_each_step=True`` reproduces that protocol; the
default factorises once (:func:`make_params`).  The metric and its factors are
:class:`SGRLDParams` (tunables), the schedule's form and the factorisation protocol are
structural (:func:`build_kernel`).  This kernel stores a D×D factor: it is the dense baseline
that HAMCMC's O(MD) memory is compared with.  ``metric=None`` is the identity (plain SGLD).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular

from pplsamplers import validation
from pplsamplers.estimator import Estimator
from pplsamplers.kernels.sgmcmc.step_size import (
    SCHEDULES,
    Schedule,
    langevin_step_size,
    scheduled_step,
    step_size_spec,
)
from pplsamplers.kernels.spec import KernelSpec, WarmupContext
from pplsamplers.types import Array, PRNGKey


class SGRLDState(NamedTuple):
    """Position and the number of steps taken (for the step-size schedule)."""

    position: Array
    iteration: Array


class SGRLDInfo(NamedTuple):
    """Per-step diagnostics: ``data_evals`` (n per step) and the step size ε_t."""

    data_evals: Array
    step_size: Array


class SGRLDParams(NamedTuple):
    """Tunables (traced); build them with :func:`make_params`, which factorises G once.

    Attributes
    ----------
    step_size
        ε > 0, or ``a`` of ε_t = (a/t)^κ when ``schedule="polynomial"``.
    metric
        G, symmetric positive definite ``(D, D)``; ``None`` is the identity (SGLD).
    inverse_metric, noise_factor
        G⁻¹ and L⁻ᵀ (G = L Lᵀ), or ``None`` with ``metric``.
    decay_exponent
        κ of the polynomial schedule (the paper's 0.51).
    """

    step_size: Array | float
    metric: Array | None = None
    inverse_metric: Array | None = None
    noise_factor: Array | None = None
    decay_exponent: Array | float = 0.51


def make_params(
    step_size: Array | float, metric: Array | None = None, decay_exponent: Array | float = 0.51
) -> SGRLDParams:
    """:class:`SGRLDParams` with G⁻¹ and L⁻ᵀ from one Cholesky factorisation of ``metric``."""
    if metric is None:
        return SGRLDParams(step_size, decay_exponent=decay_exponent)
    metric = jnp.asarray(metric)
    lower = jnp.linalg.cholesky(metric)
    identity = jnp.eye(metric.shape[0], dtype=metric.dtype)
    inverse_metric = cho_solve((lower, True), identity)
    noise_factor = solve_triangular(lower, identity, lower=True, trans="T")
    return SGRLDParams(step_size, metric, inverse_metric, noise_factor, decay_exponent)


def init(
    rng_key: PRNGKey, position: Array, estimator: Estimator, params: SGRLDParams
) -> SGRLDState:
    """Initial state at ``position``."""
    return SGRLDState(jnp.asarray(position), jnp.asarray(0, jnp.int32))


def precondition(
    params: SGRLDParams, grad: Array, noise: Array, factorize_each_step: bool
) -> tuple[Array, Array]:
    """(G⁻¹ ∇Ũ, L⁻ᵀ ξ): from the stored factors, or from a fresh Cholesky factor of G."""
    if params.metric is None:
        return grad, noise
    if not factorize_each_step:
        return params.inverse_metric @ grad, params.noise_factor @ noise
    lower = jnp.linalg.cholesky(params.metric)
    direction = cho_solve((lower, True), grad)
    return direction, solve_triangular(lower, noise, lower=True, trans="T")


def build_kernel(
    schedule: Schedule = "constant", factorize_each_step: bool = False
) -> Callable[[PRNGKey, SGRLDState, Estimator, SGRLDParams], tuple[SGRLDState, SGRLDInfo]]:
    """Build an SGRLD step with the constant metric G of ``params``.

    Parameters
    ----------
    schedule
        ``"constant"`` or ``"polynomial"``, as in
        :func:`~pplsamplers.kernels.sgmcmc.step_size.step_size_at` (with M = 1).
    factorize_each_step
        Recompute the Cholesky factor of G at every step (the paper's timing protocol).

    Returns
    -------
    kernel(rng_key, state, estimator, params) -> (state, info)
        One step costs one minibatch gradient (n data).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.estimator import build_estimator
    >>> G = jnp.array([[2.0, 0.5], [0.5, 1.0]])
    >>> est = build_estimator(lambda x, idx: (0.5 * x @ G @ x, jnp.zeros(idx.shape[0])), dim=2, N=1)
    >>> params = make_params(0.5, G)
    >>> state = init(jax.random.key(0), jnp.ones(2), est, params)
    >>> state, info = build_kernel()(jax.random.key(1), state, est, params)
    >>> state.position.shape, int(state.iteration), int(info.data_evals)
    ((2,), 1, 1)
    """

    def kernel(
        rng_key: PRNGKey, state: SGRLDState, estimator: Estimator, params: SGRLDParams
    ) -> tuple[SGRLDState, SGRLDInfo]:
        t, epsilon, idx, xi = scheduled_step(rng_key, state, estimator, params, 1, schedule)
        grad = estimator.grad(state.position, idx)
        direction, noise = precondition(params, grad, xi, factorize_each_step)
        position = state.position - epsilon * direction + jnp.sqrt(2 * epsilon) * noise
        info = SGRLDInfo(data_evals=jnp.asarray(idx.shape[0]), step_size=epsilon)
        return SGRLDState(position, t), info

    return kernel


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


@dataclass(frozen=True, eq=False)
class SGRLDOptions:
    """SGRLD's options, validated once (G's size is checked against the model at ``init``).

    Parameters
    ----------
    step_size : float or "auto", default "auto"
        ε > 0, or ``a`` of ε_t = (a/t)^0.51; ``"auto"`` (default): 0.1 in the whitened
        coordinates of the shared warmup, less in high D
        (:func:`~pplsamplers.kernels.sgmcmc.step_size.auto_langevin_step`), with the default
        ``steps_per_sample`` growing in proportion.
    metric : array_like or None, default None
        G, ``(D, D)`` symmetric positive definite, over the model's flat unconstrained x;
        ``None`` is the identity (SGLD in the kernel's coordinates).  Where the shared warmup
        whitens (x = c + L z) the kernel uses Lᵀ G L, the same metric in z, so the update in x
        does not depend on ``precondition``.
    schedule : {"constant", "polynomial"}, default "constant"
        ``"constant"`` or ``"polynomial"``.
    factorize_each_step : bool, default False
        Recompute the Cholesky factor every step (the paper's timing protocol).
    """

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


def declare(options: SGRLDOptions) -> KernelSpec:
    """The declaration of SGRLD with a constant metric to the adapter (no warmup of its own)."""

    def default_params(
        rng_key: PRNGKey, estimator: Estimator, context: WarmupContext
    ) -> SGRLDParams:
        dtype, dim = context.dtype, estimator.dim
        metric = options.metric
        if metric is not None:
            metric = jnp.asarray(metric, dtype)
            if metric.shape != (dim, dim):
                raise ValueError(f"metric must have shape ({dim}, {dim}); got {metric.shape}.")
            factor = context.whitening.matrix()
            metric = factor.T @ metric @ factor  # G over x is Lᵀ G L over z
        step = jnp.asarray(langevin_step_size(options.step_size, dim), dtype)
        return make_params(step, metric, jnp.asarray(0.51, dtype))

    def describe(info: SGRLDInfo) -> str:
        return f"ε {float(jnp.mean(info.step_size)):.2e}"

    return step_size_spec(
        options.step_size == "auto",
        init=init,
        build_kernel=lambda: build_kernel(options.schedule, options.factorize_each_step),
        default_params=default_params,
        diagnostic_fields=SGRLDInfo._fields,
        describe=describe,
    )


Options = SGRLDOptions
"""The options dataclass of this sampler (what the NumPyro class takes)."""
Info = SGRLDInfo
"""The per-step diagnostics of this sampler's kernel."""

__all__ = [
    "Info",
    "Options",
    "SGRLDInfo",
    "SGRLDOptions",
    "SGRLDParams",
    "SGRLDState",
    "build_kernel",
    "declare",
    "init",
    "make_params",
    "precondition",
    "spd_matrix",
]
