"""Curvature and gradient-noise probes of a potential at a point.

Used to pick SGLD step sizes (Welling & Teh 2011, §4: the step must keep the injected noise
dominant over the minibatch gradient noise) and as selector features.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.potential.subsampled import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


def max_curvature(
    rng_key: PRNGKey, potential: SubsampledPotential, position: Array, num_iterations: int = 30
) -> Array:
    """Largest eigenvalue of the full-data Hessian ∇²U at ``position`` (power iteration).

    Each iteration is one full-data Hessian-vector product (a jvp of the chunked gradient).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.5 * jnp.sum(jnp.array([1.0, 9.0]) * x**2), jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=4, n=4, init_position=jnp.zeros(2))
    >>> round(float(max_curvature(jax.random.key(0), pot, jnp.zeros(2))), 4)
    9.0
    """
    grad = lambda x: potential.full_value_and_grad(x)[1]
    hvp = lambda v: jax.jvp(grad, (position,), (v,))[1]

    def body(_: int, v: Array) -> Array:
        w = hvp(v)
        return w / jnp.maximum(jnp.linalg.norm(w), 1e-300)

    v0 = jax.random.normal(rng_key, (potential.dim,), position.dtype)
    v = lax.fori_loop(0, num_iterations, body, v0 / jnp.linalg.norm(v0))
    return jnp.abs(v @ hvp(v))


def gradient_noise_variance(
    rng_key: PRNGKey, potential: SubsampledPotential, position: Array
) -> Array:
    """Per-coordinate variance of the minibatch gradient estimator at ``position``.

    (N²/n) Var_i(∂ℓ_i) from one minibatch of per-example gradients; zero for full batch.
    """
    if potential.full_batch:
        return jnp.zeros(potential.dim, position.dtype)
    grads = potential.per_example_grads(position, potential.sample_indices(rng_key))
    return potential.N**2 / potential.n * jnp.var(grads, axis=0, ddof=1)


def suggest_sgld_step_size(
    rng_key: PRNGKey, potential: SubsampledPotential, position: Array, fraction: float = 0.1
) -> float:
    """A conservative SGLD step: ``fraction`` of the largest stable/accurate step.

    ε = fraction · min(1/λ_max(∇²U), 4/λ_max(V)), where V is the diagonal of the gradient
    noise covariance: the first keeps the discretisation bias O(ελ) small, the second is
    Welling & Teh's condition ε N² V_s / (4n) ≪ 1 that the injected noise dominates.
    """
    curvature_key, noise_key = jax.random.split(rng_key)
    curvature = float(max_curvature(curvature_key, potential, position))
    noise = float(jnp.max(gradient_noise_variance(noise_key, potential, position)))
    limit = 1.0 / max(curvature, 1e-12)
    if noise > 0:
        limit = min(limit, 4.0 / noise)
    return fraction * limit


__all__ = ["gradient_noise_variance", "max_curvature", "suggest_sgld_step_size"]
