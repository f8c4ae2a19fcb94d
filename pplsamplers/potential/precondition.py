"""Affine preconditioning of a potential: the kernel samples z, the model sees x = c + L z.

The minibatch kernels are not affine-invariant (DESIGN §8): on a raw, correlated posterior
their defaults, tuned on unit-scale problems, are silently wrong.  Running them on the
whitened potential

    Ũ_z(z) = Ũ(c + L z),      ∇_z Ũ_z = Lᵀ ∇_x Ũ,                                      (1)

with c the mode and L Lᵀ the Laplace covariance, brings the posterior to unit scale, as
NUTS's mass matrix does.  The constant log|det L| of the change of variables is dropped.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import lu_factor, lu_solve, solve_triangular

from pplsamplers.potential.subsampled import SubsampledPotential, build_potential
from pplsamplers.types import Array


def _affine_maps(center: Array, factor: Array, triangular: bool | None = None):
    """(z -> c + L z, x -> L⁻¹(x - c)) on arrays of shape ``(..., D)``; ``triangular=None``
    looks at (a concrete) L, ``True`` takes it as lower triangular (traceable)."""
    if factor.ndim == 1:
        return (lambda z: center + factor * z), (lambda x: (x - center) / factor)
    dim = factor.shape[0]
    # L z as a product with L itself: ``z @ factor.T`` made XLA:CPU copy a transposed L at
    # every evaluation inside the kernels' loops (2 of the 3 costliest operations of an SBPS
    # step on a 304-d model, more than its pass over 10⁴ data)
    to_x = lambda z: center + jnp.einsum("ij,...j->...i", factor, z)
    if triangular is None:
        host = np.asarray(factor)
        triangular = bool(np.array_equal(host, np.tril(host)))
    if triangular:  # a Cholesky factor: a triangular solve
        solve = lambda b: solve_triangular(factor, b, lower=True)
    else:
        lu = lu_factor(factor)
        solve = lambda b: lu_solve(lu, b)

    def to_z(x: Array) -> Array:
        d = x - center
        return solve(d.reshape(-1, dim).T).T.reshape(d.shape)

    return to_x, to_z


def _check(center: Array, factor: Array, dim: int) -> None:
    if center.shape != (dim,):
        raise ValueError(
            f"center must have shape ({dim},) (the potential's dim); got {center.shape}."
        )
    if factor.shape not in ((dim,), (dim, dim)):
        raise ValueError(
            f"factor must be a ({dim},) diagonal or a ({dim}, {dim}) matrix L with x = center + L z;"
            f" got shape {factor.shape}."
        )
    if not (np.all(np.isfinite(np.asarray(center))) and np.all(np.isfinite(np.asarray(factor)))):
        raise ValueError("center and factor must be finite; did find_map or posterior_scale fail?")
    host = np.asarray(factor, dtype=np.float64)
    if host.ndim == 2 and not np.array_equal(host, np.tril(host)):
        host = np.diag(np.asarray(lu_factor(jnp.asarray(host))[0]))  # the pivots of U
    elif host.ndim == 2:
        host = np.diag(host)
    if np.any(host == 0):
        raise ValueError(
            "factor is singular: L must be invertible so that z = L⁻¹(x - center) exists. "
            "Use posterior_scale (which floors the curvature) or add a small ridge to L Lᵀ."
        )


def with_preconditioner(
    potential: SubsampledPotential,
    center: Array,
    factor: Array,
    *,
    init: Literal["laplace", "model"] = "laplace",
) -> SubsampledPotential:
    """The potential in whitened coordinates z, with x = ``center`` + L z (eq. 1).

    Every function of the result takes z: ``value``/``grad``/``value_and_grad``/
    ``full_value_and_grad``/``terms`` are those of x = c + L z, with ∇_z = Lᵀ∇_x;
    ``directional(z, v)`` differentiates along L v; ``per_example_grads`` are Lᵀ∇ℓ_i.
    ``unravel``/``constrain`` give the model's sites at x, ``unconstrain`` returns z,
    ``to_model``/``from_model`` map z <-> x, and ``anchor`` is moved to z.  N, n, chunk
    size and cost per datum are kept, so it composes with
    :func:`~pplsamplers.potential.with_control_variate` (before or after) and
    :func:`~pplsamplers.potential.with_batch_size`, and it nests.

    Parameters
    ----------
    potential
        Any :class:`SubsampledPotential` (its own coordinates are "x" here).
    center
        c, shape ``(D,)``: usually the mode from :func:`~pplsamplers.potential.find_map`.
    factor
        L: a ``(D,)`` diagonal or a ``(D, D)`` invertible matrix, usually from
        :func:`~pplsamplers.potential.posterior_scale` (L Lᵀ = inverse curvature).
    init
        ``"laplace"``: chains start at z = 0 (the center) and ``draw_init`` draws
        z ~ N(0, I), the Laplace approximation when L is its factor.  ``"model"``: the
        potential's own initial point and ``draw_init``, mapped to z.

    Returns
    -------
    SubsampledPotential
        In z; ``to_model(z)`` gives the model's flat unconstrained position.

    Raises
    ------
    ValueError
        Wrong shapes, non-finite values or a singular ``factor``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.5 * jnp.sum((x / jnp.array([10.0, 0.1])) ** 2), jnp.zeros(idx.shape))
    >>> pot = build_potential(terms, dim=2, N=4, n=4, init_position=jnp.zeros(2))
    >>> white = with_preconditioner(pot, jnp.zeros(2), jnp.array([10.0, 0.1]))
    >>> white.grad(jnp.ones(2), jnp.arange(4))  # unit scale in z
    Array([1., 1.], dtype=float32)
    >>> white.to_model(jnp.ones(2))
    Array([10. ,  0.1], dtype=float32)
    """
    dtype = jnp.asarray(potential.init_position).dtype
    center = jnp.asarray(center, dtype)
    factor = jnp.asarray(factor, dtype)
    _check(center, factor, potential.dim)
    if init not in ("laplace", "model"):
        raise ValueError(f"init must be 'laplace' or 'model'; got {init!r}.")
    return whiten(potential, center, factor, init=init, triangular=None)


def whiten(
    potential: SubsampledPotential,
    center: Array,
    factor: Array,
    *,
    init: Literal["laplace", "model"] = "laplace",
    triangular: bool | None = True,
) -> SubsampledPotential:
    """:func:`with_preconditioner` without its checks, for a traced ``center`` and a
    diagonal or lower-triangular traced ``factor`` (``triangular=True``): the adapter
    rebuilds the whitened potential each step from the chain's own metric, which warmup
    refines (:mod:`pplsamplers.infer.metric`).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.5 * jnp.sum(x**2), jnp.zeros(idx.shape))
    >>> pot = build_potential(terms, dim=2, N=4, n=4, init_position=jnp.zeros(2))
    >>> whiten(pot, jnp.ones(2), jnp.array([[2.0, 0.0], [1.0, 1.0]])).to_model(jnp.ones(2))
    Array([3., 3.], dtype=float32)
    """
    dtype = jnp.asarray(potential.init_position).dtype
    to_x, to_z = _affine_maps(center, factor, triangular)
    base = potential

    def terms(z: Array, idx: Array) -> tuple[Array, Array]:
        return base.terms(to_x(z), idx)

    if init == "laplace":
        init_position = jnp.zeros(base.dim, dtype)
        draw_init = lambda key: jax.random.normal(key, (base.dim,), dtype)
    else:
        init_position = to_z(jnp.asarray(base.init_position, dtype))
        draw_init = None if base.draw_init is None else (lambda key: to_z(base.draw_init(key)))

    new = build_potential(
        terms,
        dim=base.dim,
        N=base.N,
        n=base.n,
        init_position=init_position,
        constrain=lambda z: base.constrain(to_x(z)),
        unravel=lambda z: base.unravel(to_x(z)),
        chunk_size=base.chunk_size,
        anchor=None if base.anchor is None else to_z(jnp.asarray(base.anchor, dtype)),
        draw_init=draw_init,
        contiguous=base.contiguous,
    )
    unconstrain = None if base.unconstrain is None else (lambda d: to_z(base.unconstrain(d)))
    return new._replace(
        cost_per_datum=base.cost_per_datum,
        unconstrain=unconstrain,
        to_model=lambda z: base.to_model(to_x(z)),
        from_model=lambda x: to_z(base.from_model(x)),
    )


__all__ = ["whiten", "with_preconditioner"]
