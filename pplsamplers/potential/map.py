"""MAP estimation with optax: Adam on minibatches, then a full-batch L-BFGS polish."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from pplsamplers.potential.subsampled import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


class MapResult(NamedTuple):
    """Result of :func:`find_map`: position, full-data potential and gradient norm there."""

    position: Array
    potential: Array
    grad_norm: Array


def find_map(
    rng_key: PRNGKey,
    potential: SubsampledPotential,
    init_position: Array | None = None,
    *,
    num_steps: int = 500,
    learning_rate: float = 0.05,
    polish_steps: int = 50,
) -> MapResult:
    """Maximum a posteriori point of a :class:`SubsampledPotential`.

    Minibatch Adam (``num_steps`` steps with cosine-decayed ``learning_rate``) finds the
    basin cheaply; ``polish_steps`` of optax L-BFGS on the full-data potential then make the
    gradient small.  Both loops are ``lax`` loops.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.5 * x @ x, 0.5 * (x[0] - 3.0) ** 2 * jnp.ones(idx.shape[0]))
    >>> pot = build_potential(terms, dim=1, N=10, n=10, init_position=jnp.zeros(1))
    >>> round(float(find_map(jax.random.key(0), pot).position[0]), 3)  # (10*3)/(10+1)
    2.727
    """
    if num_steps < 0 or polish_steps < 0:
        raise ValueError("num_steps and polish_steps must be non-negative.")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be positive; got {learning_rate}.")
    x0 = potential.init_position if init_position is None else jnp.asarray(init_position)
    schedule = optax.cosine_decay_schedule(learning_rate, max(num_steps, 1), alpha=0.01)
    adam = optax.adam(schedule)

    def adam_step(carry: tuple, key: PRNGKey) -> tuple[tuple, None]:
        x, opt_state = carry
        g = potential.grad(x, potential.sample_indices(key))
        g = jnp.where(jnp.isfinite(g), g, 0.0)
        updates, opt_state = adam.update(g, opt_state, x)
        return (optax.apply_updates(x, updates), opt_state), None

    @jax.jit
    def run(key: PRNGKey, x: Array) -> Array:
        (x, _), _ = lax.scan(adam_step, (x, adam.init(x)), jax.random.split(key, num_steps))
        full = lambda y: potential.full_value_and_grad(y)[0]
        lbfgs = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(full)

        def polish(carry: tuple, _: None) -> tuple[tuple, None]:
            y, state = carry
            value, g = value_and_grad(y, state=state)
            updates, state = lbfgs.update(g, state, y, value=value, grad=g, value_fn=full)
            y_new = optax.apply_updates(y, updates)
            y_new = jnp.where(jnp.all(jnp.isfinite(y_new)), y_new, y)
            return (y_new, state), None

        (x, _), _ = lax.scan(polish, (x, lbfgs.init(x)), None, length=polish_steps)
        value, g = potential.full_value_and_grad(x)
        return x, value, jnp.linalg.norm(g)

    position, value, grad_norm = run(rng_key, x0)
    return MapResult(position, value, grad_norm)


__all__ = ["MapResult", "find_map"]
