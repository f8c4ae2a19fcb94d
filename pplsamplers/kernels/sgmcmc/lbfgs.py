"""Matrix-free L-BFGS products for HAMCMC: H·g (two-loop recursion) and S·z (eq. 11).

Both act on a memory of K curvature pairs ``(s_k, y_k)`` stored *oldest first* in arrays of
shape ``(K, D)`` with a boolean mask ``valid`` of shape ``(K,)``.  An invalid pair (skipped
because ``s·y ≤ 0``, or not yet filled) is an identity factor: it changes nothing.  The
initial approximation is ``H⁰ = γ I`` (Şimşekli et al. 2016, eq. 6).

* :func:`inverse_hessian_product` is the two-loop recursion (Nocedal & Wright 2006, Alg. 7.4):
  O(KD) time, and it equals the dense ``H`` of the BFGS recursion eq. (6) times ``g``.
* :func:`secant_trusted` decides whether a new pair may enter the memory where a gradient
  was clipped (``MIN_PAIR_COSINE``).
* :func:`sqrt_factors` and :func:`sqrt_product` implement the product-form square root of
  eq. (11) (Brodie et al. 1973; Zhang & Sutton 2011): ``H = S Sᵀ`` with
  ``S = (I − p_K q_Kᵀ) ··· (I − p_1 q_1ᵀ) √γ``.  Building the factors costs O(K²D) because
  each needs ``B^{k−1} s_k = C C^T s_k`` from the inverse-factor recursion ``B = C Cᵀ``.

Erratum of eq. (11) as printed (checked numerically by ``tests/unit/test_hamcmc.py``):
the printed ``q = √(sᵀy / sᵀB y) B s − y`` gives ``S Sᵀ ≠ H``.  The square root of the
BFGS update needs ``q = y − √(sᵀy / sᵀB s) B s`` (so ``(I − p qᵀ) H (I − q pᵀ)`` reproduces the
``−ρ s yᵀH − ρ H y sᵀ`` cross terms, and ``sᵀBs`` makes the ``s sᵀ`` coefficient ``ρ``).  The
``C``/``u``/``v`` recursion for ``B = H⁻¹`` is correct as printed.

The loops run over the memory index only: K = M − 1 is a static Python int, so they are
unrolled at trace time (cheaper to compile than nested ``lax.scan``s).  Nothing here forms a
D×D matrix, so memory is O(KD).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from pplsamplers.types import Array


class SqrtFactors(NamedTuple):
    """Rank-one factors of ``S`` (``p``, ``q``) and of ``C`` (``u``, ``v``), each ``(K, D)``."""

    p: Array
    q: Array
    u: Array
    v: Array


def curvature(s: Array, y: Array) -> Array:
    """``s_k·y_k`` for each pair, shape ``(K,)``."""
    return jnp.sum(s * y, axis=-1)


def _safe_reciprocal(x: Array, valid: Array) -> Array:
    return jnp.where(valid, 1.0 / jnp.where(valid, x, 1.0), 0.0)


def inverse_hessian_product(
    s: Array, y: Array, valid: Array, initial_scale: Array | float, g: Array
) -> Array:
    """``H g`` for the L-BFGS inverse Hessian built from the pairs (two-loop recursion).

    Parameters
    ----------
    s, y
        Pairs, shape ``(K, D)``, oldest first (K is static).
    valid
        ``(K,)`` mask; invalid pairs are skipped.  A valid pair must have ``s·y > 0``.
    initial_scale
        γ > 0 of ``H⁰ = γ I``.
    g
        Vector of shape ``(D,)``.

    Returns
    -------
    Array
        ``H g`` with ``H`` the matrix of eq. (6), in O(KD) time and memory.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> s = jnp.array([[1.0, 0.0]]); y = jnp.array([[4.0, 0.0]])  # curvature 4 along e1
    >>> inverse_hessian_product(s, y, jnp.array([True]), 1.0, jnp.array([4.0, 1.0]))
    Array([1., 1.], dtype=float32)
    """
    rho = _safe_reciprocal(curvature(s, y), valid)
    num_pairs = s.shape[0]
    alphas = [None] * num_pairs
    q = g
    for k in reversed(range(num_pairs)):  # newest to oldest
        alphas[k] = rho[k] * jnp.dot(s[k], q)
        q = q - alphas[k] * y[k]
    r = initial_scale * q
    for k in range(num_pairs):  # oldest to newest
        beta = rho[k] * jnp.dot(y[k], r)
        r = r + (alphas[k] - beta) * s[k]
    return r


def sqrt_factors(s: Array, y: Array, valid: Array, initial_scale: Array | float) -> SqrtFactors:
    """Factors of eq. (11) such that ``S Sᵀ = H`` and ``C Cᵀ = H⁻¹`` (O(K²D)).

    For pair ``k`` (oldest first), with ``B = C Cᵀ`` built from the pairs before it:
    ``p = s/(sᵀy)``, ``q = y − √(sᵀy / sᵀBs) B s`` (see the erratum in the module docstring),
    ``v = s/(sᵀBs)``, ``u = √(sᵀBs / sᵀy) y + B s``.  ``B s = C (Cᵀ s)`` costs O(kD) with
    ``C = (I − u_{k−1}v_{k−1}ᵀ)···(I − u_0 v_0ᵀ) γ^{−1/2}``.  Invalid pairs get zero factors
    (identity).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> s = jnp.array([[1.0, 0.0]]); y = jnp.array([[4.0, 0.0]])
    >>> f = sqrt_factors(s, y, jnp.array([True]), 1.0)
    >>> sqrt_product(f, 1.0, jnp.array([1.0, 1.0]))  # S = diag(1/2, 1)
    Array([0.5, 1. ], dtype=float32)
    """
    inverse_scale = 1.0 / jnp.asarray(initial_scale, s.dtype)  # B⁰ = C⁰C⁰ᵀ = I/γ
    p, q, u, v = [], [], [], []
    for k in range(s.shape[0]):
        b_s = s[k]
        for j in reversed(range(k)):  # Cᵀ s, without the scalar c0
            b_s = b_s - v[j] * jnp.dot(u[j], b_s)
        b_s = inverse_scale * b_s
        for j in range(k):  # C (Cᵀ s)
            b_s = b_s - u[j] * jnp.dot(v[j], b_s)
        s_b_s = jnp.dot(s[k], b_s)
        s_y = jnp.dot(s[k], y[k])
        ok = valid[k] & (s_b_s > 0) & (s_y > 0)
        weight = ok.astype(s.dtype)
        s_b_s = jnp.where(ok, s_b_s, 1.0)
        s_y = jnp.where(ok, s_y, 1.0)
        p.append(weight * s[k] / s_y)
        q.append(weight * (y[k] - jnp.sqrt(s_y / s_b_s) * b_s))
        v.append(weight * s[k] / s_b_s)
        u.append(weight * (jnp.sqrt(s_b_s / s_y) * y[k] + b_s))
    stack = lambda vectors: jnp.stack(vectors) if vectors else jnp.zeros_like(s)
    return SqrtFactors(p=stack(p), q=stack(q), u=stack(u), v=stack(v))


def sqrt_product(factors: SqrtFactors, initial_scale: Array | float, z: Array) -> Array:
    """``S z`` with ``S = (I − p_K q_Kᵀ)···(I − p_1 q_1ᵀ) √γ`` (eq. 11), O(KD).

    ``z ~ N(0, I)`` gives ``S z ~ N(0, H)``.  See :func:`sqrt_factors` for an example.
    """
    x = jnp.sqrt(initial_scale) * z
    for k in range(factors.p.shape[0]):
        x = x - factors.p[k] * jnp.dot(factors.q[k], x)
    return x


MIN_PAIR_COSINE = 0.5
"""A pair made from a clipped gradient is kept only if cos∠(s, y) ≥ 0.5.

Without a clip, y = Δ∇Ũ + λs is a secant of the minibatch potential and the inverse-BFGS
update H = (I − ρ s yᵀ) H⁰ (I − ρ y sᵀ) + ρ s sᵀ (ρ = 1/sᵀy) learns the curvature
however far y points from s: on an ill-conditioned Gaussian that angle is large, and these
are the pairs HAMCMC exists for.  Where the estimator's gradient clip (``max_grad_norm``)
shortened either gradient, far in a steep tail, y is no secant of U; the first term then
stretches H⁰ by up to (1 + 1/cos∠(s, y))², every later step of that sub-chain is too long,
and the sub-chain freezes.  With cos ≥ 0.5 the stretch is at most 9-fold."""


def secant_trusted(
    s: Array, y: Array, s_y: Array, grad_back: Array, grad_new: Array, max_grad_norm: float
) -> Array:
    """Whether the pair (s, y), with ``s_y = sᵀy`` as the caller computed it, may enter the
    memory beyond ``sᵀy > 0``: always if neither gradient was clipped (y is then a secant),
    else only if cos∠(s, y) ≥ ``MIN_PAIR_COSINE``."""
    if max_grad_norm == float("inf"):  # static: no clip, every gradient is exact
        return jnp.asarray(True)
    longest = jnp.maximum(jnp.linalg.norm(grad_back), jnp.linalg.norm(grad_new))
    clipped = longest >= max_grad_norm * (1 - 1e-3)
    aligned = s_y >= MIN_PAIR_COSINE * jnp.linalg.norm(s) * jnp.linalg.norm(y)
    return ~clipped | aligned


__all__ = [
    "MIN_PAIR_COSINE",
    "SqrtFactors",
    "curvature",
    "inverse_hessian_product",
    "secant_trusted",
    "sqrt_factors",
    "sqrt_product",
]
