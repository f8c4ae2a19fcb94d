"""The minibatch estimator every kernel sees: a small protocol over one *terms* function.

A model's potential is U(x) = g(x) + Σ_{i=1}^N ℓ_i(x): g is minus the log prior and the log
Jacobian, ℓ_i minus the log likelihood of datum i.  Everything a kernel needs derives from

    model_terms(x, idx) -> (g(x), (ℓ_i(x))_{i ∈ idx})

and the sizes N, n and D.  On a minibatch ``idx`` of n indices the estimator is
Ũ(x) = g(x) + (N/n) Σ_{i∈idx} ℓ_i(x) (:meth:`Estimator.value`), unbiased for U when the
indices are uniform.  :class:`Estimator` is the protocol, in the spirit of Optax's
``GradientTransformation``: a small immutable value whose methods are pure functions.  The
transformations of :mod:`pplsamplers.estimator.transforms` map it to new estimators by
setting two of its fields, a :class:`Whitening` (the estimator's argument is z, with
x = c + L z) and a :class:`ControlVariate`; :meth:`Estimator.terms` applies both in one
function, so a kernel's call reaches the model through one frame whatever the
transformations.  It knows nothing of NumPyro: the model layer builds the model's terms
(:func:`pplsamplers.model.make_potential`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular

from pplsamplers.estimator.blocks import gradient_moments
from pplsamplers.types import Array, PRNGKey, same_object

Terms = Callable[[Array, Array], tuple[Array, Array]]
"""``(x, idx) -> (global_term, per_datum)`` with ``per_datum.shape == idx.shape``."""

PartitionedPass = Callable[[Terms, int, int, Array], "tuple[Array, Array] | None"]
"""``(terms, N, chunk_size, x) -> (Σ_i ℓ_i, ∇ Σ_i ℓ_i)`` computed where the data live (data
split over devices), or ``None`` where it does not apply; the model layer provides it."""

DEFAULT_CHUNK = 4096
"""Data per chunk of a full-data pass (memory stays bounded whatever N)."""


class Whitening(NamedTuple):
    """The affine map x = ``center`` + L z, L = ``factor``: a ``(D,)`` diagonal or a ``(D, D)``
    lower-triangular matrix.  With L Lᵀ the posterior covariance estimate, z has about unit
    scale (a Gaussian approximation N(center, L Lᵀ) in x is N(0, I) in z).  Compared and
    hashed by identity, so that an estimator holding one is a static value for ``jax.jit``."""

    center: Array
    factor: Array

    __hash__ = object.__hash__
    __eq__ = same_object

    @property
    def dense(self) -> bool:
        return self.factor.ndim == 2

    def to_x(self, z: Array) -> Array:
        """x = c + L z for z of shape ``(..., D)``."""
        if not self.dense:
            return self.center + self.factor * z
        # a product with L as stored: ``z @ L.T`` made XLA:CPU copy a transposed L at every
        # evaluation inside the kernels' loops
        return self.center + jnp.einsum("ij,...j->...i", self.factor, z)

    def matrix(self) -> Array:
        """L as a (D, D) matrix."""
        return self.factor if self.dense else jnp.diag(self.factor)

    def to_z(self, x: Array) -> Array:
        """z = L⁻¹(x − c) for x of shape ``(..., D)``."""
        d = x - self.center
        if not self.dense:
            return d / self.factor
        flat = d.reshape(-1, d.shape[-1]).T
        return solve_triangular(self.factor, flat, lower=True).T.reshape(d.shape)

    def then(self, inner: Whitening) -> Whitening:
        """The map z -> self.to_x(inner.to_x(z)) as one whitening."""
        center = self.to_x(inner.center)
        if not (self.dense or inner.dense):
            return Whitening(center, self.factor * inner.factor)
        outer = self.factor if self.dense else jnp.diag(self.factor)
        factor = outer @ (inner.factor if inner.dense else jnp.diag(inner.factor))
        return Whitening(center, factor)


class ControlVariate(NamedTuple):
    """The anchor x* of a control variate (model coordinates) and the full-data likelihood
    there: L(x*) = Σ_i ℓ_i(x*), its gradient and, for a second-order control variate, its
    Hessian (any object whose ``quadratic(v)`` is ½ vᵀ ∇²L(x*) v, such as an arrowhead).
    Compared and hashed by identity."""

    anchor: Array
    value: Array
    gradient: Array
    hessian: Any = None

    __hash__ = object.__hash__
    __eq__ = same_object


class Estimator(NamedTuple):
    """The minibatch estimator of U(x) = g(x) + Σ_i ℓ_i(x) (module docstring).

    Kernels call its methods: :meth:`value`, :meth:`grad`, :meth:`value_and_grad`,
    :meth:`directional` (with the per-example terms that give the noise variance),
    :meth:`per_example_grads`, :meth:`sample_indices`, and read ``dim``, ``N`` and ``n``.
    The fields are plain values, so an estimator is hashable and JAX caches every program
    compiled for it (:func:`full_value_and_grad` is ``jit``-ted with the estimator static).

    Parameters
    ----------
    model_terms : callable
        ``(x, idx) -> (g(x), ℓ_idx(x))`` in the model's coordinates x.
    dim, N, n : int
        Dimension of x, number of data, minibatch size (``n == N``: exact, full batch).
    chunk_size : int, default 4096
        Data per chunk of the full-data passes.
    contiguous : bool, default False
        Minibatches are contiguous blocks after a uniform start (wrapping around), valid for
        rows in a random order: every row is in the block with probability n/N.  Otherwise
        n rows are drawn uniformly with replacement.
    whitening : Whitening or None, default None
        The estimator's argument is z with x = c + L z (``None``: x itself).
    cv : ControlVariate or None, default None
        A control variate (:func:`~pplsamplers.estimator.with_control_variate`): the per-datum
        terms are differences to an anchor, each index evaluates its datum twice, and the
        noise vanishes at the anchor (``None``: the plain estimator).
    max_grad_norm : float, default inf
        Minibatch gradients longer than this are scaled down to it (``inf``: never).
    partitioned_pass : PartitionedPass or None, default None
        Full-data pass for data split over devices, or ``None``.
    blocks : Blocks or None, default None
        The globals and group blocks that each datum's term reads, with each datum's group
        (:class:`~pplsamplers.estimator.blocks.Blocks`), or ``None``: with them
        :meth:`per_example_moments` costs O((p + k) n), not O(n D).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(2, N=9)  # U(x) = ½‖x‖² + Σ_i ½(y_i − x₀)², y_i on [−1, 1]
    >>> est.N, est.n, est.dim, est.full_batch
    (9, 9, 2, True)
    >>> round(float(est.value(jnp.zeros(2), jnp.arange(9))), 4)
    1.875
    """

    model_terms: Terms
    dim: int
    N: int
    n: int
    chunk_size: int = DEFAULT_CHUNK
    contiguous: bool = False
    whitening: Whitening | None = None
    cv: ControlVariate | None = None
    max_grad_norm: float = float("inf")
    partitioned_pass: PartitionedPass | None = None
    blocks: Any = None

    # ------------------------------------------------------------------ the protocol
    @property
    def full_batch(self) -> bool:
        """True when every evaluation sees all N data (exact gradients)."""
        return self.n == self.N

    @property
    def control_variate(self) -> bool:
        """Whether the estimator has a control variate."""
        return self.cv is not None

    @property
    def cost_per_datum(self) -> int:
        """Per-datum terms evaluated per minibatch index (2 with a control variate)."""
        return 2 if self.cv is not None else 1

    def terms(self, z: Array, idx: Array) -> tuple[Array, Array]:
        """(global term, per-datum terms) at the estimator's argument z: the model's terms at
        x = c + L z, minus, with a control variate, each datum's first-order expansion at the
        anchor x* (whose full-data sum is added back to the global term)."""
        x = z if self.whitening is None else self.whitening.to_x(z)
        global_term, per_datum = self.model_terms(x, idx)
        if self.cv is None:
            return global_term, per_datum
        anchor, like_value, like_grad, hessian = self.cv
        delta = x - anchor
        at = lambda y: jax.jvp(lambda w: self.model_terms(w, idx)[1], (y,), (delta,))
        global_term = global_term + like_value + like_grad @ delta
        if hessian is None:
            at_anchor, slope = at(anchor)
            return global_term, per_datum - at_anchor - slope
        # second order: each datum's δᵀ∇²ℓ_i δ from a jvp of the jvp, and ½ δᵀ∇²L δ back
        (at_anchor, slope), (_, curvature) = jax.jvp(at, (anchor,), (delta,))
        residual = per_datum - at_anchor - slope - 0.5 * curvature
        return global_term + hessian.quadratic(delta), residual

    def value(self, x: Array, idx: Array) -> Array:
        """Ũ(x) = g(x) + (N/|idx|) Σ_{i∈idx} ℓ_i(x)."""
        return self.value_and_terms(x, idx)[0]

    def value_and_terms(self, x: Array, idx: Array) -> tuple[Array, Array]:
        """(Ũ(x), the per-datum terms ℓ_idx(x) it sums), whose spread gives Ũ's noise
        (:meth:`noise_variance`)."""
        global_term, per_datum = self.terms(x, idx)
        return global_term + (self.N / idx.shape[0]) * jnp.sum(per_datum), per_datum

    def value_and_grad(self, x: Array, idx: Array) -> tuple[Array, Array]:
        """(Ũ(x), ∇Ũ(x)), the gradient clipped at ``max_grad_norm``."""
        (value, _), gradient = jax.value_and_grad(self.value_and_terms, has_aux=True)(x, idx)
        return value, self._clip(gradient)

    def grad(self, x: Array, idx: Array) -> Array:
        """∇Ũ(x), clipped at ``max_grad_norm``."""
        return self._clip(jax.grad(self.value_and_terms, has_aux=True)(x, idx)[0])

    def directional(self, x: Array, v: Array, idx: Array) -> tuple[Array, Array]:
        """(v·∇Ũ(x), per_example) from one ``jax.jvp``: ``per_example[i] = v·∇ℓ_{idx_i}(x)``
        (unscaled), from which :meth:`noise_variance` gives the estimator's variance."""
        # a partial, not a lambda: one Python frame fewer between a PDMP's rate and the model
        _, (d_global, d_per_datum) = jax.jvp(partial(self.terms, idx=idx), (x,), (v,))
        return d_global + (self.N / idx.shape[0]) * jnp.sum(d_per_datum), d_per_datum

    def per_example_grads(self, x: Array, idx: Array) -> Array:
        """(n, D) gradients of the per-datum terms ℓ_i (unscaled, no prior): one single-datum
        gradient per index, vmapped (O(n D); reverse mode over the batch would be O(n² D))."""
        single = lambda i: jax.grad(lambda y: self.terms(y, i[None])[1][0])(x)
        return jax.vmap(single)(idx)

    def per_example_moments(self, x: Array, idx: Array) -> tuple[Array, Array]:
        """(mean, variance) over the minibatch ``idx`` of the per-example gradients ∇ℓ_i(x)
        (variance with ddof 1): from the group structure where the estimator has it and its
        whitening keeps each datum on the globals and its own group
        (:func:`~pplsamplers.estimator.blocks.gradient_moments`), else from
        :meth:`per_example_grads`."""
        blocks, whitening = self.blocks, self.whitening
        structured = blocks is not None and blocks.datum_group is not None
        if structured and (whitening is None or not whitening.dense):
            per_datum = lambda y: self.terms(y, idx)[1]
            return gradient_moments(per_datum, x, blocks, blocks.datum_group[idx])
        # :meth:`per_example_grads` inlined: a kernel's step stays a few frames from the model
        grads = jax.vmap(lambda i: jax.grad(lambda y: self.terms(y, i[None])[1][0])(x))(idx)
        return jnp.mean(grads, 0), jnp.var(grads, 0, ddof=1 if idx.shape[0] > 1 else 0)

    def global_grad(self, x: Array) -> Array:
        """∇g(x): the gradient of the prior and Jacobian terms alone (no data)."""
        return jax.grad(lambda y: self.terms(y, jnp.arange(1))[0])(x)

    def sample_indices(self, rng_key: PRNGKey) -> Array:
        """n minibatch indices (see ``contiguous``); ``arange(N)`` for a full batch."""
        if self.full_batch:
            return jnp.arange(self.N)
        if self.contiguous:
            return (jax.random.randint(rng_key, (), 0, self.N) + jnp.arange(self.n)) % self.N
        return jax.random.randint(rng_key, (self.n,), 0, self.N)

    def noise_variance(self, per_example: Array) -> Array:
        """Variance c² of (N/n) Σ_i per_example_i (SBPS eq. 10): (N²/n) Var_i for indices
        drawn with replacement (an over-estimate by about n/N for contiguous blocks), 0 for a
        full batch."""
        if self.full_batch:
            return jnp.zeros(per_example.shape[:-1], per_example.dtype)
        n = per_example.shape[-1]
        return (self.N**2 / n) * jnp.var(per_example, axis=-1, ddof=1 if n > 1 else 0)

    def full_value_and_grad(self, x: Array) -> tuple[Array, Array]:
        """(U(x), ∇U(x)) over all N data, chunked (one compiled program per estimator)."""
        return full_value_and_grad(self, x)

    def full_value_difference(self, x: Array, y: Array) -> Array:
        """U(x) − U(y) summed datum by datum, Σ_i [ℓ_i(x) − ℓ_i(y)] + g(x) − g(y): its rounding
        error is relative to the difference, not to U (in float32 at N = 10⁷, U itself is off
        by more than its rise over one posterior sd).  Every comparison of U between nearby
        points (importance weights, barriers between modes) uses it."""
        return full_value_difference(self, x, y)

    def _clip(self, gradient: Array) -> Array:
        if self.max_grad_norm == float("inf"):
            return gradient
        norm = jnp.linalg.norm(gradient)
        tiny = jnp.finfo(norm.dtype).tiny
        return gradient * jnp.minimum(1.0, self.max_grad_norm / jnp.maximum(norm, tiny))


def full_pass(estimator: Estimator, terms: Terms, x: Array) -> tuple[Array, Array]:
    """Σ over all data of ``terms``' global and per-datum parts at ``x``, and its gradient:
    a ``lax.scan`` over chunks of ``estimator.chunk_size`` rows (the last one masked), or the
    estimator's partitioned pass where the data are split over devices."""
    N, chunk_size = estimator.N, estimator.chunk_size
    global_value, global_grad = jax.value_and_grad(lambda y: terms(y, jnp.arange(1))[0])(x)
    if estimator.partitioned_pass is not None:
        split = estimator.partitioned_pass(terms, N, chunk_size, x)
        if split is not None:
            return global_value + split[0], global_grad + split[1]
    chunk = min(chunk_size, N)

    def chunk_sum(y: Array, idx: Array, weight: Array) -> Array:
        return jnp.sum(weight * terms(y, idx)[1])

    # the data's dtype may differ from x's (float32 data under jax_enable_x64): the running
    # total takes the per-datum terms' dtype, promoted with the global term's
    probe = jax.eval_shape(chunk_sum, x, jnp.arange(chunk), jnp.ones(chunk, x.dtype))
    global_value = jnp.asarray(global_value, jnp.result_type(global_value, probe.dtype))

    def body(carry: tuple[Array, Array], c: Array) -> tuple[tuple[Array, Array], None]:
        raw = c * chunk + jnp.arange(chunk)
        weight = (raw < N).astype(x.dtype)
        value, gradient = jax.value_and_grad(chunk_sum)(x, jnp.minimum(raw, N - 1), weight)
        return (carry[0] + value, carry[1] + gradient), None

    (total, total_grad), _ = lax.scan(body, (global_value, global_grad), jnp.arange(-(-N // chunk)))
    return total, total_grad


@partial(jax.jit, static_argnums=0)
def full_value_and_grad(estimator: Estimator, x: Array) -> tuple[Array, Array]:
    """:meth:`Estimator.full_value_and_grad`, compiled once per estimator."""
    return full_pass(estimator, estimator.terms, x)


@partial(jax.jit, static_argnums=0)
def full_value_difference(estimator: Estimator, x: Array, y: Array) -> Array:
    """:meth:`Estimator.full_value_difference`, compiled once per estimator."""

    def difference(pair: Array, idx: Array) -> tuple[Array, Array]:
        (global_x, per_x), (global_y, per_y) = (
            estimator.terms(pair[0], idx),
            estimator.terms(pair[1], idx),
        )
        return global_x - global_y, per_x - per_y

    # the pair's gradient is dead code that XLA drops
    return full_pass(estimator, difference, jnp.stack([x, y]))[0]


def build_estimator(
    terms: Terms,
    *,
    dim: int,
    N: int,
    n: int | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    contiguous: bool = False,
) -> Estimator:
    """An :class:`Estimator` from a terms function, validated.

    Parameters
    ----------
    terms : callable
        ``(x, idx) -> (global_term, per_datum)`` with ``per_datum.shape == idx.shape``.
    dim, N : int
        Dimension of x and number of data.
    n : int or None, default None
        Minibatch size (default N: full batch).
    chunk_size : int, default 4096
        Data per chunk of the full-data passes.
    contiguous : bool, default False
        Contiguous minibatch blocks (only for rows in a random order).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> X = jnp.ones((10, 2)); y = jnp.ones(10)
    >>> def terms(x, idx):
    ...     return 0.5 * x @ x, jnp.logaddexp(0.0, -(X[idx] @ x) * (2 * y[idx] - 1))
    >>> estimator = build_estimator(terms, dim=2, N=10, n=5)
    >>> float(estimator.value(jnp.zeros(2), jnp.arange(5)))  # 10 log 2
    6.931...
    """
    n = N if n is None else n
    if not 0 < n <= N:
        raise ValueError(f"subsample_size must satisfy 0 < subsample_size <= N = {N}; got {n}.")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size}.")
    return Estimator(terms, int(dim), int(N), int(n), int(chunk_size), bool(contiguous))


__all__ = [
    "DEFAULT_CHUNK",
    "ControlVariate",
    "Estimator",
    "PartitionedPass",
    "Terms",
    "Whitening",
    "build_estimator",
    "full_pass",
    "full_value_and_grad",
    "full_value_difference",
]
