"""Run a PDMP between grid times, and record its skeleton.

Every PDMP kernel supplies a *next-event* function

    next_event(rng_key, position, velocity, kernel_state, horizon)
        -> (dt, velocity_after, kernel_state, is_event)

that simulates forward from ``(position, velocity)`` for ``dt ≤ horizon`` time units: to
the next proposal (accepted or not) or to ``horizon`` when nothing is proposed before it.
``velocity_after`` is the velocity at time ``dt`` after any reflection/refreshment;
``is_event`` tells whether the velocity jumped.  The flow carries the particle in between.

:func:`advance` turns this into MCMC output: it runs until the clock reaches the next
grid time (``sample_interval`` later) and returns the position there together with the
exact time-averages of x and x² over the interval (Pakman et al. 2017, eq. 19).
:func:`run_skeleton` and :func:`integrate` expose the continuous path itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pplsamplers.kernels.pdmp.flow import Flow
from pplsamplers.types import Array, PRNGKey

NextEventFn = Callable[[PRNGKey, Array, Array, Any, Array], tuple[Array, Array, Any, Array]]


class IntervalResult(NamedTuple):
    """Outcome of :func:`advance` over one sample interval."""

    position: Array
    velocity: Array
    kernel_state: Any
    mean: Array
    """(1/Δ) ∫ x(t) dt over the interval (exact along the flow)."""
    mean_sq: Array
    """(1/Δ) ∫ x(t)² dt over the interval."""
    time_covered: Array
    """Δ, or less when the iteration cap stopped the interval early."""
    num_iterations: Array
    capped: Array
    """True when ``max_iterations`` ended the interval before the grid time."""


def advance(
    rng_key: PRNGKey,
    position: Array,
    velocity: Array,
    kernel_state: Any,
    *,
    interval: Array,
    next_event: NextEventFn,
    flow: Flow,
    max_iterations: int = 10_000,
) -> IntervalResult:
    """Simulate the PDMP for ``interval`` time units with a ``lax.while_loop``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.kernels.pdmp.flow import linear_flow
    >>> no_events = lambda key, x, v, s, horizon: (horizon, v, s, jnp.asarray(False))
    >>> out = advance(jax.random.key(0), jnp.zeros(1), jnp.ones(1), (), interval=2.0,
    ...               next_event=no_events, flow=linear_flow())
    >>> out.position, out.mean  # x(t) = t, mean over [0, 2] is 1
    (Array([2.], dtype=float32), Array([1.], dtype=float32))
    """
    interval = jnp.asarray(interval, position.dtype)
    zeros = jnp.zeros_like(position)

    def cond(carry: tuple) -> Array:
        _, _, _, _, elapsed, _, _, iterations = carry
        return (elapsed < interval) & (iterations < max_iterations)

    def body(carry: tuple) -> tuple:
        key, x, v, state, elapsed, first, second, iterations = carry
        key, event_key = jax.random.split(key)
        horizon = interval - elapsed
        dt, v_after, state, _ = next_event(event_key, x, v, state, horizon)
        dt = jnp.clip(dt, 0.0, horizon)
        seg_first, seg_second = flow.moments(x, v, dt)
        x_new, _ = flow.move(x, v, dt)
        elapsed = jnp.where(dt >= horizon, interval, elapsed + dt)
        return (
            key,
            x_new,
            v_after,
            state,
            elapsed,
            first + seg_first,
            second + seg_second,
            iterations + 1,
        )

    init = (
        rng_key,
        position,
        velocity,
        kernel_state,
        jnp.zeros((), position.dtype),
        zeros,
        zeros,
        jnp.asarray(0),
    )
    _, x, v, state, elapsed, first, second, iterations = lax.while_loop(cond, body, init)
    safe = jnp.where(elapsed > 0, elapsed, 1.0)
    return IntervalResult(
        position=x,
        velocity=v,
        kernel_state=state,
        mean=jnp.where(elapsed > 0, first / safe, x),
        mean_sq=jnp.where(elapsed > 0, second / safe, x**2),
        time_covered=elapsed,
        num_iterations=iterations,
        capped=elapsed < interval,
    )


class Skeleton(NamedTuple):
    """The continuous PDMP path: after iteration k the particle is at ``positions[k]`` with
    ``velocities[k]`` at time ``times[k]``; row 0 is the start.  ``is_event[k]`` marks a
    velocity jump (bounce or refreshment) at that time."""

    times: Array
    positions: Array
    velocities: Array
    is_event: Array


def run_skeleton(
    rng_key: PRNGKey,
    position: Array,
    velocity: Array,
    kernel_state: Any,
    *,
    next_event: NextEventFn,
    flow: Flow,
    num_iterations: int,
    horizon: float = np.inf,
) -> tuple[Skeleton, Any]:
    """Record ``num_iterations`` next-event iterations as a :class:`Skeleton` (``lax.scan``).

    Parameters
    ----------
    rng_key : jax.Array
        Key, split into one per iteration.
    position, velocity, kernel_state : jax.Array; jax.Array; Any
        The start (row 0 of the skeleton) and the kernel's state there.
    next_event : callable
        The kernel's next-event function (module docstring).
    flow : Flow
        The :class:`~pplsamplers.kernels.pdmp.flow.Flow` that carries the particle between
        events.
    num_iterations : int
        Next-event iterations to record.
    horizon : float, default inf
        The ``horizon`` passed to ``next_event``: the longest time one iteration may cover.

    Returns
    -------
    tuple
        The :class:`Skeleton` (``num_iterations + 1`` rows) and the kernel's state at its end.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.kernels.pdmp.flow import linear_flow
    >>> bounce_every_1 = lambda key, x, v, s, h: (jnp.asarray(1.0), -v, s, jnp.asarray(True))
    >>> sk, _ = run_skeleton(jax.random.key(0), jnp.zeros(1), jnp.ones(1), (),
    ...                      next_event=bounce_every_1, flow=linear_flow(), num_iterations=3)
    >>> sk.positions[:, 0]
    Array([0., 1., 0., 1.], dtype=float32)
    """

    def body(carry: tuple, key: PRNGKey) -> tuple[tuple, tuple]:
        x, v, state, clock = carry
        dt, v_after, state, is_event = next_event(key, x, v, state, jnp.asarray(horizon, x.dtype))
        x_new, _ = flow.move(x, v, dt)
        clock = clock + dt
        return (x_new, v_after, state, clock), (clock, x_new, v_after, is_event)

    init = (position, velocity, kernel_state, jnp.zeros((), position.dtype))
    (_, _, state, _), (times, xs, vs, events) = lax.scan(
        body, init, jax.random.split(rng_key, num_iterations)
    )
    skeleton = Skeleton(
        times=jnp.concatenate([jnp.zeros((1,), times.dtype), times]),
        positions=jnp.concatenate([position[None], xs]),
        velocities=jnp.concatenate([velocity[None], vs]),
        is_event=jnp.concatenate([jnp.zeros((1,), bool), events]),
    )
    return skeleton, state


def integrate(
    skeleton: Skeleton, f: Callable[[Array], Array], flow: Flow, num_nodes: int = 8
) -> Array:
    """Time-average (1/T) ∫₀ᵀ f(x(t)) dt along a skeleton (Pakman et al. 2017, eq. 19, for any f).

    Each segment is integrated with ``num_nodes``-point Gauss–Legendre quadrature, exact for
    polynomial f of degree < 2·num_nodes along the linear flow.

    Parameters
    ----------
    skeleton : Skeleton
        A :class:`Skeleton` that starts at time 0 and ends at a time T > 0.
    f : callable
        ``x -> f(x)``, an array of any shape, evaluated at single positions.
    flow : Flow
        The flow that produced the skeleton, which moves the particle along each segment.
    num_nodes : int, default 8
        Gauss–Legendre nodes per segment.

    Returns
    -------
    Array
        (1/T) ∫₀ᵀ f(x(t)) dt, of ``f``'s shape.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.kernels.pdmp.flow import linear_flow
    >>> sk = Skeleton(jnp.array([0.0, 2.0]), jnp.array([[0.0], [2.0]]), jnp.ones((2, 1)),
    ...               jnp.array([False, False]))
    >>> float(integrate(sk, lambda x: x[0] ** 2, linear_flow()))  # (1/2)∫₀² t² dt
    1.333...
    """
    nodes, weights = np.polynomial.legendre.leggauss(num_nodes)
    nodes = jnp.asarray((nodes + 1) / 2, skeleton.times.dtype)
    weights = jnp.asarray(weights / 2, skeleton.times.dtype)
    durations = jnp.diff(skeleton.times)

    def segment(x: Array, v: Array, duration: Array) -> Array:
        points = jax.vmap(lambda s: flow.move(x, v, s * duration)[0])(nodes)
        values = jax.vmap(f)(points)
        return duration * jnp.tensordot(weights, values, axes=1)

    totals = jax.vmap(segment)(skeleton.positions[:-1], skeleton.velocities[:-1], durations)
    return jnp.sum(totals, axis=0) / skeleton.times[-1]


__all__ = ["IntervalResult", "NextEventFn", "Skeleton", "advance", "integrate", "run_skeleton"]
