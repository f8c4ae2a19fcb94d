"""Transformations of an :class:`~pplsamplers.estimator.Estimator`: each takes an estimator and
returns a new one, as Optax's transformations chain (here plain function composition).

* :func:`with_batch_size` and :func:`with_contiguous_blocks`: how minibatches are drawn;
* :func:`with_control_variate`: the per-datum terms become differences to an anchor x*,
  whose noise vanishes as x → x* (Baker et al. 2019; Bierkens et al. 2019);
* :func:`whiten`: the kernel samples z with x = c + L z (:class:`Whitening`), where the
  posterior has about unit scale, as NUTS's mass matrix gives it;
* :func:`with_clipped_gradient`: bounded minibatch gradients for the step-size kernels.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.estimator.core import ControlVariate, Estimator, Whitening, full_pass
from pplsamplers.types import Array


def with_batch_size(estimator: Estimator, subsample_size: int) -> Estimator:
    """The same estimator with minibatches of ``subsample_size`` (``N``: full batch).

    Parameters
    ----------
    estimator : Estimator
        The estimator to change; everything but its batch size is kept.
    subsample_size : int
        Minibatch size n, with ``0 < n <= N`` (else ``ValueError``).

    Returns
    -------
    Estimator
        ``estimator`` with ``n = subsample_size``.

    Examples
    --------
    >>> from pplsamplers.datasets import tiny_estimator
    >>> with_batch_size(tiny_estimator(2, N=100), 10).n
    10
    """
    if not 0 < subsample_size <= estimator.N:
        raise ValueError(
            f"subsample_size must satisfy 0 < subsample_size <= N = {estimator.N}; "
            f"got {subsample_size}."
        )
    return estimator._replace(n=int(subsample_size))


def with_contiguous_blocks(estimator: Estimator) -> Estimator:
    """The same estimator drawing contiguous blocks: only for rows in a random order."""
    return estimator._replace(contiguous=True)


def with_clipped_gradient(estimator: Estimator, max_norm: float) -> Estimator:
    """Minibatch gradients longer than ``max_norm`` scaled down to it (values unchanged).

    An explicit step −ε∇Ũ is unstable where the gradient grows faster than linearly (a log
    scale under an exponential prior: ∇U ∝ eᵘ): one long step lands where every later step
    is longer still.  In whitened coordinates ‖∇U‖ ≈ √D in the bulk, so a limit well above
    that changes no step there and bounds the runaway ones (tamed Langevin schemes, Brosse et
    al. 2019).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> clipped = with_clipped_gradient(tiny_estimator(2), 5.0)  # U = |x|² / 2
    >>> clipped.grad(jnp.array([30.0, 40.0]), jnp.arange(1))
    Array([3., 4.], dtype=float32)
    """
    return estimator._replace(max_grad_norm=float(max_norm))


def with_control_variate(estimator: Estimator, anchor: Array, hessian: Any = None) -> Estimator:
    """The control-variate estimator anchored at ``anchor`` (in the estimator's coordinates).

    With L(x) = Σ_i ℓ_i(x) and x* the anchor, its gradient is ∇g(x) + ∇L(x*) + (N/n) Σ_{i∈idx}
    [∇ℓ_i(x) − ∇ℓ_i(x*)], and its value, whose gradient that is,

        g(x) + L(x*) + ∇L(x*)·(x − x*) + (N/n) Σ [ℓ_i(x) − ℓ_i(x*) − ∇ℓ_i(x*)·(x − x*)].

    Both are unbiased for U and ∇U, with noise that vanishes as x → x* (Baker et al. 2019).
    The full-data terms at the anchor cost one pass, here.

    ``hessian``: ∇²L(x*) (an object whose ``quadratic(δ)`` is ½ δᵀ∇²L(x*) δ, in model
    coordinates), for the second-order control variate: each datum's quadratic expansion
    ½ δᵀ∇²ℓ_i δ (a jvp of a jvp) is subtracted too, and the full-data one added back,

        … + ½ δᵀ∇²L(x*) δ + (N/n) Σ [ℓ_i(x) − (ℓ_i(x*) + ∇ℓ_i(x*)·δ + ½ δᵀ∇²ℓ_i(x*) δ)],

    whose noise is of third order in δ = x − x* (Quiroz et al. 2019's difference estimator):
    where each datum's likelihood is close to quadratic over the posterior, a minibatch that
    misses most groups of a hierarchical model still estimates their gradients well.

    Parameters
    ----------
    estimator : Estimator
        An estimator without a control variate (else ``ValueError``).
    anchor : jax.Array
        x*, shape ``(D,)``, in the estimator's coordinates (mapped to the model's x where the
        estimator is whitened).
    hessian : BlockHessian or None, default None
        ∇²L(x*) as above, or ``None`` for the first-order control variate.

    Returns
    -------
    Estimator
        ``estimator`` with its :class:`~pplsamplers.estimator.ControlVariate`: the anchor in
        model coordinates and the full-data L(x*) and ∇L(x*).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> estimator = tiny_estimator(1, N=20, n=4)
    >>> cv = with_control_variate(estimator, jnp.array([1.0]))
    >>> x = jnp.array([0.3])
    >>> bool(jnp.allclose(cv.value(x, jnp.arange(4)), estimator.full_value_and_grad(x)[0]))
    True
    """
    if estimator.cv is not None:
        raise ValueError("the estimator already has a control variate.")
    anchor = jnp.asarray(anchor)
    if estimator.whitening is not None:
        anchor = estimator.whitening.to_x(anchor)
    model = estimator.model_terms
    likelihood = lambda y, idx: (jnp.zeros((), y.dtype), model(y, idx)[1])
    value, gradient = jax.jit(lambda y: full_pass(estimator, likelihood, y))(anchor)
    return estimator._replace(cv=ControlVariate(anchor, value, gradient, hessian))


def identity_whitening(dim: int, dtype: jnp.dtype) -> Whitening:
    """x = z."""
    return Whitening(jnp.zeros(dim, dtype), jnp.ones(dim, dtype))


def check_whitening(whitening: Whitening, dim: int) -> Whitening:
    """``whitening`` with a lower-triangular factor (a dense non-triangular L is replaced by the
    Cholesky factor of L Lᵀ, the same metric), validated: shapes, finite, invertible."""
    center, factor = (np.asarray(a, dtype=np.float64) for a in whitening)
    if center.shape != (dim,):
        raise ValueError(f"center must have shape ({dim},); got {center.shape}.")
    if factor.shape not in ((dim,), (dim, dim)):
        raise ValueError(
            f"factor must be a ({dim},) diagonal or a ({dim}, {dim}) matrix L with "
            f"x = center + L z; got shape {factor.shape}."
        )
    if not (np.all(np.isfinite(center)) and np.all(np.isfinite(factor))):
        raise ValueError("center and factor must be finite.")
    if factor.ndim == 2 and not np.array_equal(factor, np.tril(factor)):
        try:
            factor = np.linalg.cholesky(factor @ factor.T)
        except np.linalg.LinAlgError:
            raise ValueError("factor is singular: L must be invertible.") from None
    diagonal = factor if factor.ndim == 1 else np.diag(factor)
    if np.any(diagonal == 0):
        raise ValueError(
            "factor is singular: L must be invertible so that z = L⁻¹(x − center) exists."
        )
    dtype = jnp.asarray(whitening.center).dtype  # converted on the host: no program compiled
    return Whitening(jnp.asarray(center.astype(dtype)), jnp.asarray(factor.astype(dtype)))


def whiten(estimator: Estimator, whitening: Whitening) -> Estimator:
    """The estimator in whitened coordinates z, with x = c + L z:

        Ũ_z(z) = Ũ(c + L z),      ∇_z Ũ_z = Lᵀ ∇_x Ũ.                                      (1)

    The constant log |det L| of the change of variables is dropped.  Sizes, batch size and
    control variate are kept; it composes with every other transformation.  ``whitening``
    may hold traced arrays (the chains' own refined metric): its factor must then be
    diagonal or lower triangular (:func:`check_whitening` makes a concrete one so).  Whitening
    a whitened estimator composes the two maps.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.estimator import build_estimator
    >>> terms = lambda x, idx: (0.5 * jnp.sum((x / jnp.array([10.0, 0.1])) ** 2), jnp.zeros(idx.shape))
    >>> estimator = build_estimator(terms, dim=2, N=4)
    >>> white = whiten(estimator, Whitening(jnp.zeros(2), jnp.array([10.0, 0.1])))
    >>> white.grad(jnp.ones(2), jnp.arange(4))  # unit scale in z
    Array([1., 1.], dtype=float32)
    """
    inner = estimator.whitening
    return estimator._replace(whitening=whitening if inner is None else inner.then(whitening))


__all__ = [
    "Whitening",
    "check_whitening",
    "identity_whitening",
    "whiten",
    "with_batch_size",
    "with_clipped_gradient",
    "with_contiguous_blocks",
    "with_control_variate",
]
