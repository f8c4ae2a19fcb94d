"""Curvature and gradient-noise probes of an :class:`~pplsamplers.estimator.Estimator` at a
point: the full-data Hessian and its diagonal (Hessian-vector products, forward over reverse
mode through the chunked full-data gradient), the empirical Fisher diagonal, the top
eigenvalue, and the minibatch gradient-noise variance.

Each probe is one program, compiled once per estimator (``jax.jit`` with the estimator static):
the set-up calls them eagerly, and eagerly every operation of the model would be its own
small program.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.estimator.core import Estimator
from pplsamplers.types import Array, PRNGKey, same_object

HVP_BATCH = 64
"""Hessian-vector products computed at once (each pass over the data carries this many)."""


def _hvp(estimator: Estimator, x: Array):
    gradient = lambda y: estimator.full_value_and_grad(y)[1]
    return lambda e: jax.jvp(gradient, (x,), (e,))[1]


@partial(jax.jit, static_argnums=(0, 2))
def full_hessian(estimator: Estimator, x: Array, batch_size: int = HVP_BATCH) -> Array:
    """The dense full-data Hessian ∇²U at ``x`` from D Hessian-vector products, computed
    ``batch_size`` at a time: ⌈D / batch_size⌉ data passes.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> full_hessian(tiny_estimator(2, N=4), jnp.zeros(2))  # diag(1 + N, 1)
    Array([[5., 0.],
           [0., 1.]], dtype=float32)
    """
    basis = jnp.eye(estimator.dim, dtype=x.dtype)
    return lax.map(_hvp(estimator, x), basis, batch_size=min(batch_size, estimator.dim))


class DenseHessian(NamedTuple):
    """A dense Hessian ∇²L(x*) for the second-order control variate
    (:func:`~pplsamplers.estimator.with_control_variate`).  Compared and hashed by identity."""

    matrix: Array

    __hash__ = object.__hash__
    __eq__ = same_object

    def quadratic(self, v: Array) -> Array:
        """½ vᵀ H v."""
        return 0.5 * v @ (self.matrix @ v)


def likelihood_hessian(estimator: Estimator, x: Array) -> DenseHessian:
    """∇²L(x) of the likelihood L = Σ_i ℓ_i alone (no prior), dense, at ``x`` in model
    coordinates whatever the estimator's whitening (``with_control_variate`` takes the
    estimator's own coordinates): the second-order control variate's Hessian where the
    latents have no group structure (``D ≤ 1000``; D Hessian-vector products, ⌈D / 64⌉ data
    passes).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> likelihood_hessian(tiny_estimator(2, N=4), jnp.zeros(2)).matrix  # the prior's 1s left out
    Array([[4., 0.],
           [0., 0.]], dtype=float32)
    """
    model = estimator.model_terms
    terms = lambda y, idx: (jnp.zeros((), y.dtype), model(y, idx)[1])
    likelihood = estimator._replace(model_terms=terms, whitening=None, cv=None)
    matrix = full_hessian(likelihood, x)
    return DenseHessian(0.5 * (matrix + matrix.T))


@partial(jax.jit, static_argnums=(0, 2))
def hessian_diagonal(estimator: Estimator, x: Array, batch_size: int = HVP_BATCH) -> Array:
    """diag ∇²U at ``x`` (the same D products as :func:`full_hessian`, D numbers kept)."""
    hvp = _hvp(estimator, x)
    basis = jnp.eye(estimator.dim, dtype=x.dtype)
    return lax.map(lambda e: e @ hvp(e), basis, batch_size=min(batch_size, estimator.dim))


@partial(jax.jit, static_argnums=0)
def fisher_diagonal(estimator: Estimator, x: Array) -> Array:
    """diag ∇²g + Σ_i (∇ℓ_i)²: the empirical Fisher diagonal plus the exact prior part, from
    one chunked pass of per-example gradients; for a well-specified model it estimates
    diag ∇²U at the mode, at a cost independent of D."""
    N, dim = estimator.N, estimator.dim
    chunk = min(estimator.chunk_size, N)
    global_grad = estimator.global_grad
    prior = lax.map(
        lambda e: e @ jax.jvp(global_grad, (x,), (e,))[1],
        jnp.eye(dim, dtype=x.dtype),
        batch_size=min(dim, HVP_BATCH),
    )

    def body(total: Array, c: Array) -> tuple[Array, None]:
        raw = c * chunk + jnp.arange(chunk)
        weight = (raw < N).astype(x.dtype)
        per = estimator.per_example_grads(x, jnp.minimum(raw, N - 1))
        return total + weight @ per**2, None

    return prior + lax.scan(body, jnp.zeros(dim, x.dtype), jnp.arange(-(-N // chunk)))[0]


def max_curvature(
    rng_key: PRNGKey, estimator: Estimator, x: Array, num_iterations: int = 30
) -> Array:
    """Largest eigenvalue of ∇²U at ``x`` by power iteration, one full-data Hessian-vector
    product per iteration (traceable).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.estimator import build_estimator
    >>> terms = lambda x, idx: (0.5 * jnp.sum(jnp.array([1.0, 9.0]) * x**2), jnp.zeros(idx.shape[0]))
    >>> round(float(max_curvature(jax.random.key(0), build_estimator(terms, dim=2, N=4), jnp.zeros(2))), 4)
    9.0
    """
    hvp = _hvp(estimator, x)

    def body(_: int, v: Array) -> Array:
        w = hvp(v)
        return w / jnp.maximum(jnp.linalg.norm(w), 1e-300)

    v0 = jax.random.normal(rng_key, (estimator.dim,), x.dtype)
    v = lax.fori_loop(0, num_iterations, body, v0 / jnp.linalg.norm(v0))
    return jnp.abs(v @ hvp(v))


def gradient_noise_variance(rng_key: PRNGKey, estimator: Estimator, x: Array) -> Array:
    """Per-coordinate variance of the minibatch gradient at ``x``, (N²/n) Var_i ∂ℓ_i, from one
    minibatch of per-example gradients (zero for a full batch; traceable)."""
    if estimator.full_batch:
        return jnp.zeros(estimator.dim, x.dtype)
    variance = estimator.per_example_moments(x, estimator.sample_indices(rng_key))[1]
    return estimator.N**2 / estimator.n * variance


@partial(jax.jit, static_argnums=0)
def datum_directional(estimator: Estimator, x: Array, directions: Array) -> Array:
    """(N, m): v·∇ℓ_i(x) for every datum i and each of the m rows v of ``directions``, over
    the full data in chunks (one forward pass per chunk and direction)."""
    N = estimator.N
    chunk = min(estimator.chunk_size, N)

    def one_chunk(c: Array) -> Array:
        idx = jnp.minimum(c * chunk + jnp.arange(chunk), N - 1)
        per_datum = lambda y: estimator.terms(y, idx)[1]
        return jax.vmap(lambda v: jax.jvp(per_datum, (x,), (v,))[1])(directions).T

    out = lax.map(one_chunk, jnp.arange(-(-N // chunk)))
    return out.reshape(-1, directions.shape[0])[:N]


__all__ = [
    "HVP_BATCH",
    "DenseHessian",
    "datum_directional",
    "fisher_diagonal",
    "full_hessian",
    "gradient_noise_variance",
    "hessian_diagonal",
    "likelihood_hessian",
    "max_curvature",
]
