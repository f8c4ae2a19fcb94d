"""The minibatch potential every kernel consumes (DESIGN §3.1).

A :class:`SubsampledPotential` is a bundle of pure functions over a flat unconstrained
position ``x`` (shape ``(D,)``).  All of them derive from one *terms* function

    terms(x, idx) -> (global_term, per_datum)            per_datum.shape == (n,)

with the minibatch potential ``Ũ(x) = global_term + (N/n) Σ_i per_datum_i``, where
``global_term = -log prior - log|J|`` and ``per_datum_i = -log p(y_i | x)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.potential.sharding import sharded_full_pass
from pplsamplers.types import Array, PRNGKey

TermsFn = Callable[[Array, Array], tuple[Array, Array]]


def _identity(x: Array) -> Array:
    return x


class SubsampledPotential(NamedTuple):
    """Pure functions of the minibatch potential Ũ(x) = g(x) + (N/n) Σ_{i∈idx} ℓ_i(x).

    Attributes
    ----------
    value, grad, value_and_grad : (x, idx) -> Ũ, ∇Ũ, (Ũ, ∇Ũ)
    directional : (x, v, idx) -> (v·∇Ũ, per_example)
        ``per_example[i] = v·∇ℓ_{idx_i}(x)`` (unscaled); both from a single ``jax.jvp``.
        Then ``c² = (N²/n)(1 - n/N) Var_i(per_example)`` is the noise variance of v·∇Ũ.
    per_example_grads : (x, idx) -> (n, D)
        Gradients of the per-datum terms ℓ_i (unscaled, no prior).
    full_value_and_grad : x -> (U, ∇U)
        Whole data set, chunked so memory stays bounded.  When the data are split over
        devices (``NamedSharding``), each device sums its own rows
        (:func:`~pplsamplers.potential.sharding.sharded_full_pass`).
    full_value_difference : (x, y) -> U(x) − U(y)
        Whole data set, summed as Σ_i [ℓ_i(x) − ℓ_i(y)] (plus the global terms' difference),
        so that its rounding error is relative to the difference and not to U.  In float32
        at N = 10⁷ U itself is wrong by about ±10 (its float32 spacing is 0.5 and the chunk
        sums add rounding), more than the whole rise of U over one posterior sd (1/2):
        every comparison of U values between nearby points (Laplace weights, quadratic-fit
        probes, barriers between modes) must use this difference.
    sample_indices : key -> (n,) int
        Minibatch indices: drawn with replacement, or, for ``contiguous`` potentials, the n
        rows after a uniform start with wrap-around.
    constrain : x -> dict of constrained latent sites.
    unravel : x -> dict of unconstrained latent sites.
    unconstrain : dict of constrained latent sites -> x (models only).
    terms : the underlying ``(x, idx) -> (global_term, per_datum)``.
    dim, N, n : sizes; ``n == N`` means full batch.
    init_position : a valid starting point (shape ``(D,)``).
    anchor : the control-variate anchor x*, or ``None``.
    cost_per_datum : per-datum terms evaluated per minibatch index (2 with control variates).
    chunk_size : data chunk of :attr:`full_value_and_grad` (kept by the ``with_*`` transforms).
    to_model, from_model : kernel position z <-> the model's flat unconstrained x.
        The identity unless the potential is preconditioned
        (:func:`~pplsamplers.potential.with_preconditioner`: x = center + L z);
        ``unravel``/``constrain``/``unconstrain`` already compose them.
    """

    value: Callable[[Array, Array], Array]
    grad: Callable[[Array, Array], Array]
    value_and_grad: Callable[[Array, Array], tuple[Array, Array]]
    directional: Callable[[Array, Array, Array], tuple[Array, Array]]
    per_example_grads: Callable[[Array, Array], Array]
    full_value_and_grad: Callable[[Array], tuple[Array, Array]]
    full_value_difference: Callable[[Array, Array], Array]
    sample_indices: Callable[[PRNGKey], Array]
    constrain: Callable[[Array], dict]
    unravel: Callable[[Array], dict]
    terms: TermsFn
    dim: int
    N: int
    n: int
    init_position: Array
    anchor: Array | None = None
    draw_init: Callable[[PRNGKey], Array] | None = None
    unconstrain: Callable[[dict], Array] | None = None
    """Constrained latent dict -> flat unconstrained x (``None`` for hand-built potentials)."""
    cost_per_datum: int = 1
    """Per-datum terms evaluated per index in a minibatch evaluation (2 with control variates,
    which evaluate each datum at x and at the anchor)."""
    chunk_size: int = 4096
    to_model: Callable[[Array], Array] = _identity
    """Kernel position z (shape ``(..., D)``) -> the model's flat unconstrained x."""
    from_model: Callable[[Array], Array] = _identity
    """The model's flat unconstrained x (shape ``(..., D)``) -> kernel position z."""
    contiguous: bool = False
    """Minibatches are contiguous blocks: the data rows were shuffled once
    (:func:`~pplsamplers.potential.shuffle.shuffled_view`), so a block at a uniform start,
    wrapping around, holds every row with probability n/N (an unbiased estimate) and reads
    the data forwards instead of jumping across it."""

    @property
    def full_batch(self) -> bool:
        """True when every evaluation sees all N data."""
        return self.n == self.N

    @property
    def whitened(self) -> bool:
        """True when the potential runs in coordinates other than the model's (x = c + L z,
        :func:`~pplsamplers.potential.with_preconditioner`), where the posterior has about
        unit scale."""
        return self.to_model is not _identity

    def all_indices(self) -> Array:
        """Every datum index, for a deterministic full-batch evaluation."""
        return jnp.arange(self.N)

    def noise_variance(self, per_example: Array) -> Array:
        """Variance c² of the estimator (N/n) Σ_i per_example_i (SBPS eq. 10).

        Indices are drawn with replacement, so c² = (N²/n) Var_i(per_example); a full
        batch (``n == N``, every index once) is exact and gives 0.  A contiguous block of
        shuffled rows samples without replacement, whose variance is smaller by the factor
        (N − n)/(N − 1): the with-replacement value is kept, an over-estimate by about n/N.
        """
        if self.full_batch:
            return jnp.zeros(per_example.shape[:-1], per_example.dtype)
        n = per_example.shape[-1]
        return (self.N**2 / n) * jnp.var(per_example, axis=-1, ddof=1 if n > 1 else 0)


def build_potential(
    terms: TermsFn,
    *,
    dim: int,
    N: int,
    n: int,
    init_position: Array,
    constrain: Callable[[Array], dict] | None = None,
    unravel: Callable[[Array], dict] | None = None,
    chunk_size: int = 4096,
    anchor: Array | None = None,
    draw_init: Callable[[PRNGKey], Array] | None = None,
    contiguous: bool = False,
) -> SubsampledPotential:
    """Assemble a :class:`SubsampledPotential` from a terms function.

    Parameters
    ----------
    terms
        ``(x, idx) -> (global_term, per_datum)`` with ``per_datum.shape == idx.shape``.
    dim, N, n
        Dimension of ``x``, number of data, minibatch size.
    init_position
        Starting point.
    draw_init
        Optional ``key -> x`` drawing random starting points (one per chain).
    chunk_size
        Data chunk used by :attr:`SubsampledPotential.full_value_and_grad`.
    contiguous
        Minibatches are the n rows after a uniform start (wrapping around) instead of n
        rows drawn with replacement: only for data in a random order (see
        :attr:`SubsampledPotential.contiguous`).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> X = jnp.ones((10, 2)); y = jnp.ones(10)
    >>> def terms(x, idx):
    ...     return 0.5 * x @ x, jnp.logaddexp(0.0, -(X[idx] @ x) * (2 * y[idx] - 1))
    >>> pot = build_potential(terms, dim=2, N=10, n=5, init_position=jnp.zeros(2))
    >>> float(pot.value(jnp.zeros(2), jnp.arange(5)))  # 10 * log 2
    6.931...
    """
    if not 0 < n <= N:
        raise ValueError(f"subsample_size must satisfy 0 < subsample_size <= N={N}; got {n}.")
    scale_of = lambda idx: N / idx.shape[0]

    def value(x: Array, idx: Array) -> Array:
        global_term, per_datum = terms(x, idx)
        return global_term + scale_of(idx) * jnp.sum(per_datum)

    value_and_grad = jax.value_and_grad(value)
    grad = jax.grad(value)

    def directional(x: Array, v: Array, idx: Array) -> tuple[Array, Array]:
        _, (d_global, d_per_datum) = jax.jvp(lambda y: terms(y, idx), (x,), (v,))
        return d_global + scale_of(idx) * jnp.sum(d_per_datum), d_per_datum

    def per_example_grads(x: Array, idx: Array) -> Array:
        # one single-datum gradient per index, vmapped: O(n D), where jax.jacrev of the
        # minibatch terms would pull back n cotangents through all n data (O(n² D))
        single = lambda i: jax.grad(lambda y: terms(y, i[None])[1][0])(x)
        return jax.vmap(single)(idx)

    num_chunks = -(-N // chunk_size)
    chunk = min(chunk_size, N)

    def full_pass(fn: TermsFn, x: Array) -> tuple[Array, Array]:
        """Σ over all data of ``fn``'s terms at ``x``, and its gradient, in chunks."""
        global_value, global_grad = jax.value_and_grad(lambda y: fn(y, jnp.arange(1))[0])(x)
        sharded = sharded_full_pass(fn, N, chunk_size, x)  # data split over devices: SPMD
        if sharded is not None:
            return global_value + sharded[0], global_grad + sharded[1]

        def chunk_sum(y: Array, idx: Array, weight: Array) -> Array:
            return jnp.sum(weight * fn(y, idx)[1])

        # the data's dtype may differ from x's (float32 data with jax_enable_x64, say): the
        # running total takes the per-datum terms' dtype, promoted with the global term's
        probe = jax.eval_shape(chunk_sum, x, jnp.arange(chunk), jnp.ones(chunk, x.dtype))
        global_value = jnp.asarray(global_value, jnp.result_type(global_value, probe.dtype))

        def body(carry: tuple[Array, Array], c: Array) -> tuple[tuple[Array, Array], None]:
            total, total_grad = carry
            raw = c * chunk + jnp.arange(chunk)
            weight = (raw < N).astype(x.dtype)
            val, g = jax.value_and_grad(chunk_sum)(x, jnp.minimum(raw, N - 1), weight)
            return (total + val, total_grad + g), None

        init = (global_value, global_grad)
        (total, total_grad), _ = lax.scan(body, init, jnp.arange(num_chunks))
        return total, total_grad

    def full_value_and_grad(x: Array) -> tuple[Array, Array]:
        return full_pass(terms, x)

    def difference_terms(pair: Array, idx: Array) -> tuple[Array, Array]:
        (global_x, per_x), (global_y, per_y) = terms(pair[0], idx), terms(pair[1], idx)
        return global_x - global_y, per_x - per_y

    def full_value_difference(x: Array, y: Array) -> Array:
        # the unused gradient of the pair is dead code that XLA drops
        return full_pass(difference_terms, jnp.stack([x, y]))[0]

    if N == n:
        sample_indices = lambda key: jnp.arange(N)
    elif contiguous:  # every row in the block with probability n / N, whatever the order
        sample_indices = lambda key: (jax.random.randint(key, (), 0, N) + jnp.arange(n)) % N
    else:
        sample_indices = lambda key: jax.random.randint(key, (n,), 0, N)

    identity = lambda x: {"x": x}
    return SubsampledPotential(
        value=value,
        grad=grad,
        value_and_grad=value_and_grad,
        directional=directional,
        per_example_grads=per_example_grads,
        # compiled once per potential: called eagerly, its global term would otherwise run
        # the model op by op (one small XLA program per operation)
        full_value_and_grad=jax.jit(full_value_and_grad),
        full_value_difference=jax.jit(full_value_difference),
        sample_indices=sample_indices,
        constrain=constrain or identity,
        unravel=unravel or identity,
        terms=terms,
        dim=int(dim),
        N=int(N),
        n=int(n),
        init_position=jnp.asarray(init_position),
        anchor=anchor,
        draw_init=draw_init,
        chunk_size=int(chunk_size),
        contiguous=bool(contiguous),
    )


_REBUILT = "dim N n init_position constrain unravel chunk_size anchor draw_init contiguous".split()
"""The arguments of :func:`build_potential` that :func:`_rebuild` takes from the old potential."""


def _rebuild(
    old: SubsampledPotential, terms: TermsFn, cost: int, **changes: Any
) -> SubsampledPotential:
    """:func:`build_potential` on ``terms`` with ``old``'s arguments but ``changes``, and the
    fields a rebuild from ``terms`` does not set carried over (``cost`` per datum)."""
    kept = {name: getattr(old, name) for name in _REBUILT}
    new = build_potential(terms, **(kept | changes))
    return new._replace(
        cost_per_datum=cost,
        unconstrain=old.unconstrain,
        to_model=old.to_model,
        from_model=old.from_model,
    )


def with_clipped_gradient(potential: SubsampledPotential, max_norm: float) -> SubsampledPotential:
    """``potential`` whose minibatch gradient is scaled down to norm ``max_norm`` where it is
    longer (values unchanged).

    A step-size kernel's explicit step −ε∇Ũ is unstable where the gradient grows faster than
    linearly (a log-scale parameter under an exponential prior: ∇U ∝ eᵘ); one long step then
    lands where every later step is longer still.  In whitened coordinates ‖∇U‖ ≈ √D in the
    posterior's bulk, so a limit of ten times that leaves the bulk untouched and turns a
    runaway step into a bounded move back towards the mass (gradient clipping, as in tamed
    Langevin schemes, Brosse et al. 2019).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> terms = lambda x, idx: (0.5 * jnp.sum(x**2), jnp.zeros(idx.shape))
    >>> pot = build_potential(terms, dim=2, N=4, n=4, init_position=jnp.zeros(2))
    >>> clipped = with_clipped_gradient(pot, 5.0)
    >>> clipped.grad(jnp.array([30.0, 40.0]), jnp.arange(4)), clipped.grad(jnp.ones(2), jnp.arange(4))
    (Array([3., 4.], dtype=float32), Array([1., 1.], dtype=float32))
    """

    def clip(gradient: Array) -> Array:
        norm = jnp.linalg.norm(gradient)
        return gradient * jnp.minimum(1.0, max_norm / jnp.maximum(norm, jnp.finfo(norm.dtype).tiny))

    def value_and_grad(x: Array, idx: Array) -> tuple[Array, Array]:
        value, gradient = potential.value_and_grad(x, idx)
        return value, clip(gradient)

    return potential._replace(
        grad=lambda x, idx: clip(potential.grad(x, idx)), value_and_grad=value_and_grad
    )


def with_batch_size(potential: SubsampledPotential, subsample_size: int) -> SubsampledPotential:
    """The same potential with minibatch size ``subsample_size`` (``N`` for full batch).

    Everything else (chunk size, anchor, preconditioning, cost per datum) is kept.
    """
    return _rebuild(potential, potential.terms, potential.cost_per_datum, n=subsample_size)


def with_contiguous_blocks(potential: SubsampledPotential) -> SubsampledPotential:
    """The same potential drawing contiguous blocks (:attr:`SubsampledPotential.contiguous`):
    only for data whose rows were shuffled (:func:`~pplsamplers.potential.shuffle.shuffled_view`).
    """
    return _rebuild(potential, potential.terms, potential.cost_per_datum, contiguous=True)


def with_control_variate(
    potential: SubsampledPotential, anchor: Array, chunk_size: int | None = None
) -> SubsampledPotential:
    """Control-variate potential anchored at ``anchor`` = x* (DESIGN §3.1).

    Its gradient is ∇g(x) + ∇L(x*) + (N/n) Σ_{i∈idx} [∇ℓ_i(x) − ∇ℓ_i(x*)], where L is the
    full negative log-likelihood; its value, whose gradient that is, is

        g(x) + L(x*) + ∇L(x*)·(x−x*) + (N/n) Σ [ℓ_i(x) − ℓ_i(x*) − ∇ℓ_i(x*)·(x−x*)].

    Both are unbiased for U and ∇U, with noise that vanishes as x → x*.  The full-data
    anchor terms are computed once, here (one pass over the data).  ``anchor`` is in the
    potential's own coordinates; ``chunk_size`` defaults to the potential's.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> X = jnp.linspace(-1, 1, 20)[:, None]; y = (X[:, 0] > 0).astype(float)
    >>> terms = lambda x, idx: (0.5 * x @ x, jnp.logaddexp(0.0, -(X[idx] @ x) * (2 * y[idx] - 1)))
    >>> pot = build_potential(terms, dim=1, N=20, n=4, init_position=jnp.zeros(1))
    >>> cv = with_control_variate(pot, jnp.array([1.0]))
    >>> bool(jnp.allclose(cv.value(jnp.ones(1), jnp.arange(4)), pot.full_value_and_grad(jnp.ones(1))[0]))
    True
    """
    anchor = jnp.asarray(anchor)
    base_terms = potential.terms

    @jax.jit  # one compiled full-data pass, not one small program per operation of the model
    def likelihood_at(x: Array) -> tuple[Array, Array]:
        total, total_grad = potential.full_value_and_grad(x)
        global_at, global_grad_at = jax.value_and_grad(lambda y: base_terms(y, jnp.arange(1))[0])(x)
        return total - global_at, total_grad - global_grad_at

    like_value, like_grad = likelihood_at(anchor)

    def terms(x: Array, idx: Array) -> tuple[Array, Array]:
        global_term, per_datum = base_terms(x, idx)
        delta = x - anchor
        per_anchor, per_anchor_slope = jax.jvp(lambda y: base_terms(y, idx)[1], (anchor,), (delta,))
        return (
            global_term + like_value + like_grad @ delta,
            per_datum - per_anchor - per_anchor_slope,
        )

    chunk_size = potential.chunk_size if chunk_size is None else chunk_size
    return _rebuild(
        potential, terms, 2 * potential.cost_per_datum, anchor=anchor, chunk_size=chunk_size
    )


__all__ = [
    "SubsampledPotential",
    "TermsFn",
    "build_potential",
    "with_batch_size",
    "with_clipped_gradient",
    "with_contiguous_blocks",
    "with_control_variate",
]
