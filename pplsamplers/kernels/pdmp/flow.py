"""Deterministic PDMP flows, reflections and velocity refreshment.

A :class:`Flow` moves a particle between events and integrates x and x² exactly along a
segment, which gives the continuous-time averages of Pakman et al. (2017), eq. (19), for free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers.types import Array, PRNGKey


class Flow(NamedTuple):
    """A deterministic flow.

    Attributes
    ----------
    move : (x, v, t) -> (x(t), v(t))
    moments : (x, v, t) -> (∫₀ᵗ x(s) ds, ∫₀ᵗ x(s)² ds), elementwise
    """

    move: Callable[[Array, Array, Array], tuple[Array, Array]]
    moments: Callable[[Array, Array, Array], tuple[Array, Array]]


def linear_flow(direction_scale: Array | None = None) -> Flow:
    """The BPS flow x(t) = x + A v t, v(t) = v, with A = diag(``direction_scale``) or I.

    pSBPS and σBPS move along A v (a preconditioned direction); plain BPS/SBPS use A = I.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> flow = linear_flow()
    >>> flow.move(jnp.zeros(2), jnp.ones(2), 2.0)[0]
    Array([2., 2.], dtype=float32)
    >>> flow.moments(jnp.zeros(1), jnp.ones(1), 3.0)  # ∫ s ds = 4.5, ∫ s² ds = 9
    (Array([4.5], dtype=float32), Array([9.], dtype=float32))
    """

    def direction(v: Array) -> Array:
        return v if direction_scale is None else direction_scale * v

    def move(x: Array, v: Array, t: Array) -> tuple[Array, Array]:
        return x + direction(v) * t, v

    def moments(x: Array, v: Array, t: Array) -> tuple[Array, Array]:
        u = direction(v)
        first = x * t + u * t**2 / 2
        second = x**2 * t + x * u * t**2 + u**2 * t**3 / 3
        return first, second

    return Flow(move, moments)


def elliptical_flow(center: Array) -> Flow:
    """The Boomerang flow around ``center`` = x* (Bierkens et al. 2020, with
    the sign fix of ``docs/design.md``).

    x(t) = x* + (x − x*) cos t + v sin t,    v(t) = −(x − x*) sin t + v cos t,
    so x(0) = x.  It preserves (x−x*)ᵀΣ*⁻¹(x−x*) + vᵀΣ*⁻¹v for any Σ*.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> flow = elliptical_flow(jnp.zeros(1))
    >>> x, v = flow.move(jnp.ones(1), jnp.zeros(1), jnp.pi / 2)
    >>> bool(jnp.allclose(x, 0.0, atol=1e-6)), bool(jnp.allclose(v, -1.0))
    (True, True)
    """

    def move(x: Array, v: Array, t: Array) -> tuple[Array, Array]:
        offset = x - center
        cos, sin = jnp.cos(t), jnp.sin(t)
        return center + offset * cos + v * sin, -offset * sin + v * cos

    def moments(x: Array, v: Array, t: Array) -> tuple[Array, Array]:
        a, b, c = x - center, v, center
        sin, cos = jnp.sin(t), jnp.cos(t)
        int_cos, int_sin = sin, 1.0 - cos
        int_cos2 = t / 2 + jnp.sin(2 * t) / 4
        int_sin2 = t / 2 - jnp.sin(2 * t) / 4
        int_sincos = sin**2 / 2
        first = c * t + a * int_cos + b * int_sin
        second = (
            c**2 * t
            + a**2 * int_cos2
            + b**2 * int_sin2
            + 2 * c * a * int_cos
            + 2 * c * b * int_sin
            + 2 * a * b * int_sincos
        )
        return first, second

    return Flow(move, moments)


def reflect(velocity: Array, gradient: Array, metric: Array | None = None) -> Array:
    """Reflect ``velocity`` off the hyperplane orthogonal to ``gradient`` (BPS eq. 3/4).

    v' = v − 2 (v·g / gᵀMg) M g with M = diag(``metric``) (M = I by default).  It keeps
    vᵀM⁻¹v and flips the sign of v·g.  A zero gradient leaves v unchanged.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> reflect(jnp.array([1.0, 1.0]), jnp.array([1.0, 0.0]))
    Array([-1.,  1.], dtype=float32)
    """
    scaled = gradient if metric is None else metric * gradient
    norm = jnp.dot(gradient, scaled)
    safe = jnp.where(norm > 0, norm, 1.0)
    return jnp.where(norm > 0, velocity - 2 * jnp.dot(velocity, gradient) / safe * scaled, velocity)


def refresh_sphere(rng_key: PRNGKey, dim: int, dtype: jnp.dtype = float) -> Array:
    """A velocity uniform on the unit sphere S^{D−1} (SBPS)."""
    z = jax.random.normal(rng_key, (dim,), dtype)
    return z / jnp.linalg.norm(z)


def refresh_gaussian(rng_key: PRNGKey, scale: Array) -> Array:
    """A velocity N(0, diag(scale²)) (BPS with Gaussian velocity; Boomerang with Σ* = diag)."""
    return scale * jax.random.normal(rng_key, jnp.shape(scale), jnp.asarray(scale).dtype)


__all__ = [
    "Flow",
    "elliptical_flow",
    "linear_flow",
    "reflect",
    "refresh_gaussian",
    "refresh_sphere",
]
