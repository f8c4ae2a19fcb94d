"""Stochastic gradient Langevin dynamics (SGLD) and its RMSprop-preconditioned form (pSGLD).

SGLD (Welling & Teh 2011, eq. 4):  x ← x − ε ∇Ũ(x) + √(2ε) ξ,          ξ ~ N(0, I).
pSGLD (Li et al. 2016, Alg. 1):    a ← β a + (1−β) (∇Ũ)²,  G = 1 / (λ + √a),
                                   x ← x − ε G ∇Ũ(x) + √(2ε G) ξ.

The Γ correction term of pSGLD is dropped, as in the paper's practical algorithm; the metric
G is a tunable (``SGLDParams.inverse_metric``) that warmup adapts from the RMSprop average and
then freezes, after which the update is exact Langevin with a constant metric.

BlackJAX-style two levels: :func:`init` builds an :class:`SGLDState` and
:func:`build_kernel` returns ``kernel(rng_key, state, potential, params)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class SGLDState(NamedTuple):
    """The position."""

    position: Array


class SGLDInfo(NamedTuple):
    """Per-step diagnostics; ``gradient`` feeds pSGLD's warmup (not exported)."""

    data_evals: Array
    step_size: Array
    grad_norm: Array
    gradient: Array


class SGLDParams(NamedTuple):
    """Tunables: ε and the diagonal metric G (ones for plain SGLD)."""

    step_size: Array
    inverse_metric: Array


def init(
    rng_key: PRNGKey, position: Array, potential: SubsampledPotential, params: SGLDParams
) -> SGLDState:
    """Initial state at ``position`` (SGLD keeps nothing else)."""
    return SGLDState(jnp.asarray(position))


def build_kernel() -> Callable[
    [PRNGKey, SGLDState, SubsampledPotential, SGLDParams], tuple[SGLDState, SGLDInfo]
]:
    """Build an SGLD (or pSGLD) step; each step costs one minibatch gradient (n data).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_potential
    >>> pot = tiny_potential(2)
    >>> params = SGLDParams(jnp.asarray(0.1), jnp.ones(2))
    >>> kernel = build_kernel()
    >>> state = init(jax.random.key(0), jnp.zeros(2), pot, params)
    >>> state, info = kernel(jax.random.key(1), state, pot, params)
    >>> state.position.shape, int(info.data_evals)
    ((2,), 1)
    """

    def kernel(
        rng_key: PRNGKey, state: SGLDState, potential: SubsampledPotential, params: SGLDParams
    ) -> tuple[SGLDState, SGLDInfo]:
        batch_key, noise_key = jax.random.split(rng_key)
        idx = potential.sample_indices(batch_key)
        grad = potential.grad(state.position, idx)
        step = params.step_size * params.inverse_metric
        noise = jax.random.normal(noise_key, grad.shape, grad.dtype)
        position = state.position - step * grad + jnp.sqrt(2 * step) * noise
        info = SGLDInfo(
            data_evals=jnp.asarray(idx.shape[0]),
            step_size=jnp.asarray(params.step_size, grad.dtype),
            grad_norm=jnp.linalg.norm(grad),
            gradient=grad,
        )
        return SGLDState(position), info

    return kernel


def rmsprop_metric(square_avg: Array, eps: float) -> Array:
    """pSGLD's G = 1 / (λ + √a)."""
    return 1.0 / (eps + jnp.sqrt(square_avg))


__all__ = ["SGLDInfo", "SGLDParams", "SGLDState", "build_kernel", "init", "rmsprop_metric"]
