"""SGRLD with a constant, user-given dense metric (the HAMCMC paper's baseline, §3.1, §4.1).

Stochastic gradient Riemannian Langevin dynamics (Patterson & Teh 2013) with a metric
G(θ) = G that does not depend on θ, so the correction term Γ (HAMCMC paper eq. 9) is zero:

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
from typing import NamedTuple

import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

from pplsamplers.kernels.hamcmc import Schedule, scheduled_step
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
    rng_key: PRNGKey, position: Array, potential: SubsampledPotential, params: SGRLDParams
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
) -> Callable[
    [PRNGKey, SGRLDState, SubsampledPotential, SGRLDParams], tuple[SGRLDState, SGRLDInfo]
]:
    """Build an SGRLD step with the constant metric G of ``params``.

    Parameters
    ----------
    schedule
        ``"constant"`` or ``"polynomial"``, as in :func:`pplsamplers.kernels.hamcmc.step_size_at`
        (with M = 1).
    factorize_each_step
        Recompute the Cholesky factor of G at every step (the paper's timing protocol).

    Returns
    -------
    kernel(rng_key, state, potential, params) -> (state, info)
        One step costs one minibatch gradient (n data).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> G = jnp.array([[2.0, 0.5], [0.5, 1.0]])
    >>> terms = lambda x, idx: (0.5 * x @ G @ x, jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> params = make_params(0.5, G)
    >>> state = init(jax.random.key(0), jnp.ones(2), pot, params)
    >>> state, info = build_kernel()(jax.random.key(1), state, pot, params)
    >>> state.position.shape, int(state.iteration), int(info.data_evals)
    ((2,), 1, 1)
    """

    def kernel(
        rng_key: PRNGKey, state: SGRLDState, potential: SubsampledPotential, params: SGRLDParams
    ) -> tuple[SGRLDState, SGRLDInfo]:
        t, epsilon, idx, xi = scheduled_step(rng_key, state, potential, params, 1, schedule)
        grad = potential.grad(state.position, idx)
        direction, noise = precondition(params, grad, xi, factorize_each_step)
        position = state.position - epsilon * direction + jnp.sqrt(2 * epsilon) * noise
        info = SGRLDInfo(data_evals=jnp.asarray(idx.shape[0]), step_size=epsilon)
        return SGRLDState(position, t), info

    return kernel


__all__ = [
    "SGRLDInfo",
    "SGRLDParams",
    "SGRLDState",
    "build_kernel",
    "init",
    "make_params",
    "precondition",
]
