"""The structure of a hierarchical posterior, and a Gaussian approximation that uses it.

In a model with group effects, each datum's likelihood reads the global latents (coefficients,
scales) and the effects of its own group only.  Ordering the global coordinates first and the
groups' after, the Hessian of U is then an *arrowhead*:

    H = [[C, Bᵀ],          C: p × p (globals),  B = (B_g): the groups' couplings to them,
         [B, A ]],         A = diag(A_1, …, A_G): one k × k block per group.

:class:`Blocks` names the coordinates of each part, :func:`block_hessian` computes C, B and A
from k + p Hessian-vector products (data passes), whatever G, and :class:`BlockWhitening` is
the Gaussian approximation N(c, H⁻¹) as an affine map x = c + L z whose factor L has the same
sparsity (globals first, then each group given the globals),

    L = [[L_C, 0  ],       L_C L_Cᵀ = S⁻¹, S = C − Σ_g B_gᵀ A_g⁻¹ B_g (the Schur complement),
         [L_B, L_A]],      L_B,g = −A_g⁻¹ B_g L_C,  L_A,g L_A,gᵀ = A_g⁻¹,

so that L Lᵀ = H⁻¹.  Applying L or L⁻¹ costs O(D (p + k)) and storing it O(D (p + k)): no D × D
matrix is ever formed, and D = 10⁵ group effects are as cheap as a regression.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.types import Array, same_object


class Blocks(NamedTuple):
    """Which coordinates are global and which belong to each group.

    Attributes
    ----------
    globals_
        (p,) indices of the global coordinates.
    groups
        (G, k) indices of each group's coordinates.
    rows
        (G,) data rows per group.
    datum_group
        (N,) each datum's group, where it is known for every datum (else ``None``): with it,
        :func:`gradient_moments` gives the per-example gradients' moments without forming them.
    """

    globals_: Array
    groups: Array
    rows: Array
    datum_group: Array | None = None

    __hash__ = object.__hash__  # a static value for jax.jit, like an estimator
    __eq__ = same_object

    @property
    def dim(self) -> int:
        return int(self.globals_.shape[0] + self.groups.size)

    @property
    def num_groups(self) -> int:
        return int(self.groups.shape[0])

    @property
    def block_size(self) -> int:
        return int(self.groups.shape[1])

    def split(self, x: Array) -> tuple[Array, Array]:
        """(x_globals (..., p), x_groups (..., G, k)) of x (..., D)."""
        return x[..., self.globals_], x[..., self.groups]

    def join(self, globals_: Array, groups: Array) -> Array:
        """The inverse of :meth:`split`."""
        shape = globals_.shape[:-1] + (self.dim,)
        x = jnp.zeros(shape, jnp.result_type(globals_, groups))
        x = x.at[..., self.globals_].set(globals_)
        return x.at[..., self.groups].set(groups)


class BlockHessian(NamedTuple):
    """An arrowhead Hessian: ``C`` (p, p), ``B`` (G, k, p) and ``A`` (G, k, k), over the
    coordinates of ``blocks``.  Compared and hashed by identity."""

    blocks: Blocks
    C: Array
    B: Array
    A: Array

    __hash__ = object.__hash__
    __eq__ = same_object

    def __sub__(self, other: BlockHessian) -> BlockHessian:
        return BlockHessian(self.blocks, self.C - other.C, self.B - other.B, self.A - other.A)

    def matvec(self, v: Array) -> Array:
        """H v, in O(D (p + k))."""
        vg, vl = self.blocks.split(v)
        top = self.C @ vg + jnp.einsum("gkp,gk->p", self.B, vl)
        rest = jnp.einsum("gkp,p->gk", self.B, vg) + jnp.einsum("gkl,gl->gk", self.A, vl)
        return self.blocks.join(top, rest)

    def quadratic(self, v: Array) -> Array:
        """½ vᵀ H v, in O(D (p + k))."""
        vg, vl = self.blocks.split(v)
        cross = jnp.einsum("gk,gkp,p->", vl, self.B, vg)
        return 0.5 * (vg @ self.C @ vg + jnp.einsum("gk,gkl,gl->", vl, self.A, vl)) + cross


def _hvp(gradient: Callable[[Array], Array], x: Array) -> Callable[[Array], Array]:
    return lambda v: jax.jvp(gradient, (x,), (v,))[1]


def group_hessian(gradient: Callable[[Array], Array], x: Array, blocks: Blocks) -> Array:
    """(G, k, k): the groups' diagonal blocks A_g of the Jacobian of ``gradient`` (∇U) at
    ``x``, from k Hessian-vector products, one per colour (the j-th coordinate of every group
    at once: groups do not couple)."""
    dim, k = x.shape[0], blocks.groups.shape[1]
    colours = jnp.zeros((k, dim), x.dtype).at[jnp.arange(k)[:, None], blocks.groups.T].set(1.0)
    by_colour = lax.map(_hvp(gradient, x), colours)  # (k, D): column c of every A_g
    A = jnp.moveaxis(by_colour[:, blocks.groups], 0, -1)
    return 0.5 * (A + jnp.swapaxes(A, -1, -2))


def block_hessian(gradient: Callable[[Array], Array], x: Array, blocks: Blocks) -> BlockHessian:
    """The arrowhead Jacobian of ``gradient`` (∇U) at ``x`` from k + p Hessian-vector
    products: :func:`group_hessian` and one product per global coordinate.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> blocks = Blocks(jnp.array([0]), jnp.array([[1], [2]]), jnp.array([1, 1]))
    >>> U = lambda x: 0.5 * x[0] ** 2 + 0.5 * jnp.sum((x[1:] - x[0]) ** 2)
    >>> H = block_hessian(jax.grad(U), jnp.zeros(3), blocks)
    >>> H.C.tolist(), H.B[:, 0, 0].tolist(), H.A[:, 0, 0].tolist()
    ([[3.0]], [-1.0, -1.0], [1.0, 1.0])
    """
    p = blocks.globals_.shape[0]
    basis = jnp.zeros((p, x.shape[0]), x.dtype).at[jnp.arange(p), blocks.globals_].set(1.0)
    by_global = lax.map(_hvp(gradient, x), basis)  # (p, D)
    C = by_global[:, blocks.globals_]
    B = jnp.moveaxis(by_global[:, blocks.groups], 0, -1)  # (G, k, p)
    return BlockHessian(blocks, 0.5 * (C + C.T), B, group_hessian(gradient, x, blocks))


def gradient_moments(
    per_datum: Callable[[Array], Array], x: Array, blocks: Blocks, datum_group: Array
) -> tuple[Array, Array]:
    """(mean, variance) over a minibatch of the per-example gradients ∇ℓ_i(x), for per-datum
    terms ``per_datum(x) -> (ℓ_i(x))_i`` of which each reads the globals and its own group's
    block only (``datum_group[i]``: its group).  The variance has ddof 1 (0 for one datum).

    Each datum's gradient has p + k non-zero entries, and k + p forward-mode products give
    them all: one per global coordinate, and one per *colour* (the c-th coordinate of every
    group at once, which datum i sees only through its own group).  That is O((p + k) n)
    work instead of the n reverse passes of D numbers each that the dense (n, D) per-example
    gradients cost; the group moments are per-group sums (``segment_sum``), two-pass so
    that float32 does not cancel.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> blocks = Blocks(jnp.array([0]), jnp.array([[1], [2]]), jnp.array([2, 1]))
    >>> group = jnp.array([0, 0, 1])
    >>> per_datum = lambda x: 0.5 * (x[0] + x[1:][group] - jnp.array([1.0, 2.0, 3.0])) ** 2
    >>> mean, variance = gradient_moments(per_datum, jnp.zeros(3), blocks, group)
    >>> mean.tolist(), variance.tolist()
    ([-2.0, -1.0, -1.0], [1.0, 1.0, 3.0])
    """
    dim, (num_groups, k) = x.shape[0], blocks.groups.shape
    p = blocks.globals_.shape[0]
    basis = jnp.zeros((p, dim), x.dtype).at[jnp.arange(p), blocks.globals_].set(1.0)
    colours = jnp.zeros((k, dim), x.dtype).at[jnp.arange(k)[:, None], blocks.groups.T].set(1.0)
    _, linear = jax.linearize(per_datum, x)
    derivatives = jax.vmap(linear)(jnp.concatenate([basis, colours]))  # (p + k, n)
    n = derivatives.shape[1]
    ddof = 1 if n > 1 else 0
    on_globals, on_groups = derivatives[:p], derivatives[p:].T  # (p, n), (n, k)
    segment = lambda values: jax.ops.segment_sum(values, datum_group, num_groups)
    group_mean = segment(on_groups) / n  # (G, k): the other groups' data contribute zeros
    within = segment((on_groups - group_mean[datum_group]) ** 2)
    outside = (n - segment(jnp.ones(n, x.dtype)))[:, None] * group_mean**2
    mean = blocks.join(jnp.mean(on_globals, 1), group_mean)
    variance = blocks.join(jnp.var(on_globals, 1, ddof=ddof), (within + outside) / (n - ddof))
    return mean, variance


def inverse_root(matrix: Array, rel_floor: float) -> Array:
    """R with R Rᵀ = M⁻¹ for symmetric M (..., k, k), its eigenvalues made positive and
    floored at ``rel_floor`` times the largest (a flat or indefinite direction still gets a
    finite, wide scale)."""
    values, vectors = jnp.linalg.eigh(matrix)
    return floored_root(values, vectors, rel_floor)


def floored_root(values: Array, vectors: Array, rel_floor: float, xp: Any = jnp) -> Array:
    """:func:`inverse_root` from the eigendecomposition (``values``, ``vectors``) of M, with
    the array module ``xp`` (``numpy`` for a float64 root on the host)."""
    top = xp.max(xp.abs(values), axis=-1, keepdims=True)
    floor = rel_floor * xp.maximum(top, xp.finfo(values.dtype).tiny)
    return vectors / xp.sqrt(xp.maximum(xp.abs(values), floor))[..., None, :]


def num_floored(matrix: Array, rel_floor: float) -> Array:
    """How many eigenvalues of the symmetric (..., k, k) ``matrix`` :func:`inverse_root`
    floors."""
    values = jnp.linalg.eigvalsh(matrix)
    top = jnp.max(jnp.abs(values), axis=-1, keepdims=True)
    return jnp.sum(values < rel_floor * jnp.maximum(top, jnp.finfo(values.dtype).tiny))


class BlockWhitening(NamedTuple):
    """x = ``center`` + L z with the block-triangular L of the module docstring: the Gaussian
    approximation N(center, H⁻¹) of an arrowhead H.  Compared and hashed by identity (a static
    value for ``jax.jit`` inside an estimator)."""

    center: Array
    blocks: Blocks
    global_factor: Array
    """L_C, (p, p): L_C L_Cᵀ = S⁻¹."""
    coupling: Array
    """L_B, (G, k, p)."""
    group_factor: Array
    """L_A, (G, k, k): L_A,g L_A,gᵀ = A_g⁻¹."""

    __hash__ = object.__hash__
    __eq__ = same_object

    dense = False

    def to_x(self, z: Array) -> Array:
        """x = c + L z for z of shape ``(..., D)``."""
        zg, zl = self.blocks.split(z)
        xg = jnp.einsum("ij,...j->...i", self.global_factor, zg)
        xl = jnp.einsum("gkp,...p->...gk", self.coupling, zg)
        xl = xl + jnp.einsum("gkl,...gl->...gk", self.group_factor, zl)
        return self.center + self.blocks.join(xg, xl)

    def matrix(self) -> Array:
        """L as a dense (D, D) matrix: for options given over x only (D² memory)."""
        dim = self.center.shape[0]
        return self.to_x(jnp.eye(dim, dtype=self.center.dtype)).T - self.center[:, None]

    def to_z(self, x: Array) -> Array:
        """z = L⁻¹(x − c) for x of shape ``(..., D)``."""
        dg, dl = self.blocks.split(x - self.center)
        zg = jnp.linalg.solve(self.global_factor, dg[..., None])[..., 0]
        rest = dl - jnp.einsum("gkp,...p->...gk", self.coupling, zg)
        zl = jnp.linalg.solve(self.group_factor, rest[..., None])[..., 0]
        return self.blocks.join(zg, zl)


def block_whitening(
    center: Array,
    hessian: BlockHessian,
    global_precision: Array | None = None,
    rel_floor: float = 1e-8,
) -> BlockWhitening:
    """N(``center``, H⁻¹) of the arrowhead ``hessian`` as a :class:`BlockWhitening`.

    ``global_precision``: the globals' marginal precision, where it is known better than by
    the Schur complement S of H (the curvature of a Laplace marginal); the groups given the
    globals keep H's conditional, N(c_u − A⁻¹B(θ − c_θ), A⁻¹)."""
    _, C, B, A = hessian
    group_root = inverse_root(A, rel_floor)  # R_g R_gᵀ = A_g⁻¹
    inverse_a_b = jnp.einsum("gkl,gml,gmp->gkp", group_root, group_root, B)  # A_g⁻¹ B_g
    if global_precision is None:
        global_precision = C - jnp.einsum("gkp,gkq->pq", B, inverse_a_b)
    global_root = inverse_root(0.5 * (global_precision + global_precision.T), rel_floor)
    # a triangular factor of the globals' covariance: chol(R Rᵀ); its solves are triangular
    global_factor = jnp.linalg.cholesky(global_root @ global_root.T)
    coupling = -jnp.einsum("gkp,pq->gkq", inverse_a_b, global_factor)
    return BlockWhitening(center, hessian.blocks, global_factor, coupling, group_root)


def whitened_curvature_diagonal(whitening: BlockWhitening, hessian: BlockHessian) -> Array:
    """diag(Lᵀ H L): the curvature of U in the whitened coordinates z (1 where H is the
    Hessian the whitening was built from, less along floored directions)."""
    _, C, B, A = hessian
    Lc, Lb, La = whitening.global_factor, whitening.coupling, whitening.group_factor
    # columns of L: global column j is (L_C[:, j], L_B[:, :, j]); group column is (0, L_A)
    hc = C @ Lc + jnp.einsum("gkp,gkq->pq", B, Lb)  # (H L)_globals for the global columns
    hl = jnp.einsum("gkp,pq->gkq", B, Lc) + jnp.einsum("gkl,glq->gkq", A, Lb)
    global_part = jnp.einsum("pq,pq->q", Lc, hc) + jnp.einsum("gkq,gkq->q", Lb, hl)
    group_part = jnp.einsum("gkm,gkl,glm->gm", La, A, La)
    return whitening.blocks.join(global_part, group_part)


__all__ = [
    "BlockHessian",
    "BlockWhitening",
    "Blocks",
    "block_hessian",
    "block_whitening",
    "floored_root",
    "gradient_moments",
    "group_hessian",
    "inverse_root",
    "num_floored",
    "whitened_curvature_diagonal",
]
