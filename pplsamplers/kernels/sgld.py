"""Stochastic gradient Langevin dynamics (SGLD) and its RMSprop-preconditioned form (pSGLD).

SGLD (Welling & Teh 2011):   x ← x − ε ∇Ũ(x) + √(2ε) ξ,            ξ ~ N(0, I).
pSGLD (Li et al. 2016):      a ← β a + (1−β) (∇Ũ)²,  G = 1 / (λ + √a),
                             x ← x − ε G ∇Ũ(x) + √(2ε G) ξ.
(The Γ correction term of pSGLD is dropped, as in the paper's practical algorithm; once the
preconditioner is frozen after warmup the update is exact Langevin with a constant metric.)

The kernel is BlackJAX-style: ``init`` builds a :class:`SGLDState`, ``build_kernel``
returns ``step(rng_key, state) -> (state, info)`` with the configuration in its closure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class SGLDState(NamedTuple):
    """Position and the RMSprop average of squared gradients (ones for plain SGLD)."""

    position: Array
    square_avg: Array


class SGLDInfo(NamedTuple):
    """Per-step diagnostics."""

    data_evals: Array
    step_size: Array
    grad_norm: Array


def init(position: Array) -> SGLDState:
    """Initial state at ``position``."""
    position = jnp.asarray(position)
    return SGLDState(position, jnp.zeros_like(position))


def validate_step_size(step_size: float, name: str = "step_size") -> float:
    """Raise ``ValueError`` unless ``step_size`` is a finite positive number."""
    if not (isinstance(step_size, int | float) and jnp.isfinite(step_size) and step_size > 0):
        raise ValueError(f"{name} must be a finite positive number; got {step_size!r}.")
    return float(step_size)


def build_kernel(
    potential: SubsampledPotential,
    step_size: float,
    *,
    preconditioned: bool = False,
    adapt_preconditioner: bool = True,
    rmsprop_decay: float = 0.99,
    rmsprop_eps: float = 1e-5,
) -> Callable[[PRNGKey, SGLDState], tuple[SGLDState, SGLDInfo]]:
    """Build an SGLD (or pSGLD) step.

    Parameters
    ----------
    potential
        The minibatch potential; each step costs one minibatch gradient (n data).
    step_size
        ε > 0.
    preconditioned
        Use the RMSprop diagonal preconditioner (pSGLD).
    adapt_preconditioner
        Update the running average ``a``; set ``False`` to freeze it (after warmup).
    rmsprop_decay, rmsprop_eps
        β and λ of pSGLD.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.5 * x @ x, jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2))
    >>> step = build_kernel(pot, step_size=0.1)
    >>> state, info = step(jax.random.key(0), init(jnp.zeros(2)))
    >>> state.position.shape, int(info.data_evals)
    ((2,), 1)
    """
    validate_step_size(step_size)
    if not 0.0 <= rmsprop_decay < 1.0:
        raise ValueError(f"rmsprop_decay must lie in [0, 1); got {rmsprop_decay}.")
    validate_step_size(rmsprop_eps, "rmsprop_eps")

    def step(rng_key: PRNGKey, state: SGLDState) -> tuple[SGLDState, SGLDInfo]:
        batch_key, noise_key = jax.random.split(rng_key)
        idx = potential.sample_indices(batch_key)
        grad = potential.grad(state.position, idx)
        if preconditioned:
            square_avg = state.square_avg
            if adapt_preconditioner:
                fresh = jnp.all(square_avg == 0.0)
                square_avg = jnp.where(
                    fresh, grad**2, rmsprop_decay * square_avg + (1 - rmsprop_decay) * grad**2
                )
            metric = 1.0 / (rmsprop_eps + jnp.sqrt(square_avg))
        else:
            square_avg = state.square_avg
            metric = jnp.ones_like(grad)
        noise = jax.random.normal(noise_key, grad.shape, grad.dtype)
        position = (
            state.position - step_size * metric * grad + jnp.sqrt(2 * step_size * metric) * noise
        )
        info = SGLDInfo(
            data_evals=jnp.asarray(idx.shape[0]),
            step_size=jnp.asarray(step_size, grad.dtype),
            grad_norm=jnp.linalg.norm(grad),
        )
        return SGLDState(position, square_avg), info

    return step


__all__ = ["SGLDInfo", "SGLDState", "build_kernel", "init", "validate_step_size"]
