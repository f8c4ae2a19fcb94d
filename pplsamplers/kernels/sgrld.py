"""SGRLD with a constant, user-given dense metric (the HAMCMC paper's baseline, §3.1, §4.1).

Stochastic gradient Riemannian Langevin dynamics (Patterson & Teh 2013) with a metric
G(θ) = G that does not depend on θ, so the correction term Γ (HAMCMC paper eq. 9) is zero:

    θ_t = θ_{t−1} − ε_t G⁻¹ ∇Ũ(θ_{t−1}) + √(2ε_t) L⁻ᵀ ξ,      G = L Lᵀ,  ξ ~ N(0, I),

so the noise has covariance 2ε_t G⁻¹.  For the linear Gaussian model (eq. 14) the expected
Fisher information is constant, G = I + Σ_n a_n a_nᵀ / σ_x², the posterior precision.
The paper times SGRLD with a Cholesky factorisation at every step, as a θ-dependent metric
would need (§4.1 footnote 3): ``factorize_each_step=True`` reproduces that protocol; the
default factorises once.  This kernel stores a D×D factor: it is the dense baseline that
HAMCMC's O(MD) memory is compared with.  ``metric=None`` is the identity (plain SGLD).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

from pplsamplers.kernels.hamcmc import Schedule, step_size_at
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class SGRLDState(NamedTuple):
    """Position and the number of steps taken (for the step-size schedule)."""

    position: Array
    iteration: Array


class SGRLDInfo(NamedTuple):
    """Per-step diagnostics: ``data_evals`` (n per step) and the step size ε_t."""

    data_evals: Array
    step_size: Array


def init(position: Array) -> SGRLDState:
    """Initial state at ``position``."""
    return SGRLDState(jnp.asarray(position), jnp.asarray(0, jnp.int32))


def validate_metric(metric: Array | None, dim: int) -> Array | None:
    """Check that ``metric`` is a symmetric positive definite ``(dim, dim)`` matrix.

    Raises ``ValueError`` naming ``metric`` otherwise; ``None`` (identity) passes.
    """
    if metric is None:
        return None
    metric = jnp.asarray(metric)
    if metric.shape != (dim, dim):
        raise ValueError(f"metric must have shape ({dim}, {dim}); got {metric.shape}.")
    if isinstance(metric, jax.core.Tracer):
        return metric
    if not bool(jnp.allclose(metric, metric.T, rtol=1e-6, atol=1e-8 * jnp.abs(metric).max())):
        raise ValueError("metric must be symmetric (it is the Fisher information G).")
    if not bool(jnp.all(jnp.isfinite(jnp.linalg.cholesky(metric)))):
        raise ValueError("metric must be positive definite (its Cholesky factor failed).")
    return metric


def build_kernel(
    potential: SubsampledPotential,
    step_size: float | Array,
    metric: Array | None = None,
    *,
    schedule: Schedule = "constant",
    decay_exponent: float = 0.51,
    factorize_each_step: bool = False,
) -> Callable[[PRNGKey, SGRLDState], tuple[SGRLDState, SGRLDInfo]]:
    """Build an SGRLD step with the constant metric ``metric`` = G.

    Parameters
    ----------
    potential
        The minibatch potential; a step costs one minibatch gradient (n data).
    step_size
        ε > 0, or ``a`` of ε_t = (a/t)^0.51 when ``schedule="polynomial"``.
    metric
        G, symmetric positive definite ``(D, D)``; ``None`` is the identity (SGLD).
    schedule, decay_exponent
        As in :func:`pplsamplers.kernels.hamcmc.step_size_at` (with M = 1).
    factorize_each_step
        Recompute the Cholesky factor of G at every step (the paper's timing protocol).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> G = jnp.array([[2.0, 0.5], [0.5, 1.0]])
    >>> terms = lambda x, idx: (0.5 * x @ G @ x, jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> step = build_kernel(pot, step_size=0.5, metric=G)
    >>> state, info = step(jax.random.key(0), init(jnp.ones(2)))
    >>> state.position.shape, int(info.data_evals)
    ((2,), 1)
    """
    if not isinstance(step_size, jax.core.Tracer):
        value = float(step_size) if jnp.ndim(step_size) == 0 else float("nan")
        if not 0 < value < float("inf"):
            raise ValueError(f"step_size must be a finite number > 0; got {step_size!r}.")
    if schedule not in ("constant", "polynomial"):
        raise ValueError(f"schedule must be 'constant' or 'polynomial'; got {schedule!r}.")
    metric = validate_metric(metric, potential.dim)
    if metric is not None and not factorize_each_step:
        # factorise once: G⁻¹ and L⁻ᵀ as dense matrices, so a step is two O(D²) products
        lower = jnp.linalg.cholesky(metric)
        identity = jnp.eye(potential.dim, dtype=metric.dtype)
        inverse_metric = cho_solve((lower, True), identity)
        noise_factor = solve_triangular(lower, identity, lower=True, trans="T")

    def precondition(grad: Array, noise: Array) -> tuple[Array, Array]:
        if metric is None:
            return grad, noise
        if not factorize_each_step:
            return inverse_metric @ grad, noise_factor @ noise
        lower = jnp.linalg.cholesky(metric)
        direction = cho_solve((lower, True), grad)
        return direction, solve_triangular(lower, noise, lower=True, trans="T")

    def step(rng_key: PRNGKey, state: SGRLDState) -> tuple[SGRLDState, SGRLDInfo]:
        batch_key, noise_key = jax.random.split(rng_key)
        t = state.iteration + 1
        dtype = state.position.dtype
        epsilon = step_size_at(t, step_size, 1, schedule, decay_exponent).astype(dtype)
        idx = potential.sample_indices(batch_key)
        grad = potential.grad(state.position, idx)
        xi = jax.random.normal(noise_key, state.position.shape, dtype)
        direction, noise = precondition(grad, xi)
        position = state.position - epsilon * direction + jnp.sqrt(2 * epsilon) * noise
        info = SGRLDInfo(data_evals=jnp.asarray(idx.shape[0]), step_size=epsilon)
        return SGRLDState(position, t), info

    return step


__all__ = ["SGRLDInfo", "SGRLDState", "build_kernel", "init", "validate_metric"]
