"""The Boomerang reference measure N(x*, Σ*): validation, algebra, automatic construction.

Goan et al. §2.3 (and Bierkens et al. 2020): x* is the MAP and Σ* an inverse curvature at
x*.  Two curvature estimates are offered, both diagonal:

* ``"hessian"``: the exact diagonal of ∇²U(x*), from D Hessian-vector products on the full
  data (``jax.jvp`` of the chunked full gradient, in batches);
* ``"fisher"``: Σ_i (∇ℓ_i(x*))² (summed squared per-example gradients, the paper's eq. (5)
  idea of a curvature built from first-order gradients) plus the exact diagonal of the
  prior/Jacobian Hessian.  It is positive whenever the prior is proper.

Σ* = γ · diag(curvature)⁻¹ with the paper's scale γ (eq. 5; γ = 1 by default).  The
original Boomerang (Bierkens et al. 2020) uses the full inverse Hessian; ``"full_hessian"``
builds it from the same D Hessian-vector products (D² memory, a D³ Cholesky: fine for D up
to a few thousand) and gives a dense Σ* = γ H⁻¹.

A user reference may be diagonal (a vector of variances) or full (a covariance matrix,
used through its Cholesky factor).  A Σ* that is not positive definite raises ``ValueError``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from pplsamplers.estimator import Estimator, fisher_diagonal, full_hessian, hessian_diagonal
from pplsamplers.kernels.pdmp.flow import reflect
from pplsamplers.types import Array, PRNGKey


class GaussianReference(NamedTuple):
    """N(``mean``, Σ*) with Σ* = diag(``variance``) or, when ``cholesky`` is set, L Lᵀ."""

    mean: Array
    variance: Array
    """diagonal of Σ*"""
    cholesky: Array | None = None
    """lower Cholesky factor of a full Σ*, ``None`` for a diagonal one"""

    @property
    def is_diagonal(self) -> bool:
        return self.cholesky is None

    def precision_times(self, delta: Array) -> Array:
        """Σ*⁻¹ δ."""
        if self.cholesky is None:
            return delta / self.variance
        return cho_solve((self.cholesky, True), delta)

    def covariance_times(self, g: Array) -> Array:
        """Σ* g."""
        if self.cholesky is None:
            return self.variance * g
        return self.cholesky @ (self.cholesky.T @ g)

    def draw(self, rng_key: PRNGKey) -> Array:
        """A draw of N(0, Σ*) (the velocity law Φ)."""
        z = jax.random.normal(rng_key, self.mean.shape, self.mean.dtype)
        return jnp.sqrt(self.variance) * z if self.cholesky is None else self.cholesky @ z

    def reflect(self, velocity: Array, gradient: Array) -> Array:
        """v' = v − 2 (g·v / gᵀΣ*g) Σ* g: flips g·v and keeps vᵀΣ*⁻¹v (``docs/design.md``)."""
        if self.cholesky is None:
            return reflect(velocity, gradient, self.variance)
        scaled = self.covariance_times(gradient)
        norm = gradient @ scaled
        safe = jnp.where(norm > 0, norm, 1.0)
        return jnp.where(norm > 0, velocity - 2 * (gradient @ velocity) / safe * scaled, velocity)

    def energy(self, position: Array, velocity: Array) -> Array:
        """(x−x*)ᵀΣ*⁻¹(x−x*) + vᵀΣ*⁻¹v, conserved by the elliptical flow."""
        delta = position - self.mean
        return delta @ self.precision_times(delta) + velocity @ self.precision_times(velocity)


def gaussian_reference(
    mean: Array, covariance: Array, *, dim: int | None = None
) -> GaussianReference:
    """Validate a user-given reference N(``mean``, ``covariance``).

    ``covariance`` is a vector of variances (diagonal Σ*) or a (D, D) symmetric matrix.

    Raises
    ------
    ValueError
        Wrong shapes, non-finite values, or a covariance that is not positive definite.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> ref = gaussian_reference(jnp.zeros(2), jnp.array([1.0, 4.0]))
    >>> ref.precision_times(jnp.ones(2))
    Array([1.  , 0.25], dtype=float32)
    >>> gaussian_reference(jnp.zeros(2), jnp.array([[1.0, 2.0], [2.0, 1.0]]))
    Traceback (most recent call last):
    ...
    ValueError: reference covariance is not positive definite ...
    """
    mean_np = np.asarray(mean, dtype=float)
    cov_np = np.asarray(covariance, dtype=float)
    if mean_np.ndim != 1:
        raise ValueError(f"reference mean must be a vector; got shape {mean_np.shape}.")
    D = mean_np.shape[0]
    if dim is not None and D != dim:
        raise ValueError(
            f"reference mean must have shape ({dim},) (the model's unconstrained "
            f"dimension); got ({D},)."
        )
    if not np.all(np.isfinite(mean_np)) or not np.all(np.isfinite(cov_np)):
        raise ValueError("reference mean and covariance must be finite.")
    dtype = jnp.result_type(float)
    mean = jnp.asarray(mean_np, dtype)
    if cov_np.shape == (D,):
        if not np.all(cov_np > 0):
            raise ValueError(
                "reference covariance is not positive definite: "
                f"{int(np.sum(cov_np <= 0))} of its {D} variances are <= 0. Pass positive "
                "variances (or a positive-definite matrix)."
            )
        return GaussianReference(mean, jnp.asarray(cov_np, dtype))
    if cov_np.shape != (D, D):
        raise ValueError(
            f"reference covariance must have shape ({D},) (variances) or "
            f"({D}, {D}); got {cov_np.shape}."
        )
    if not np.allclose(cov_np, cov_np.T, rtol=1e-8, atol=1e-12 * np.abs(cov_np).max()):
        raise ValueError("reference covariance is not positive definite: it is not symmetric.")
    try:
        chol = np.linalg.cholesky(cov_np)
    except np.linalg.LinAlgError:
        chol = None
    if chol is None or not np.all(np.isfinite(chol)) or not np.all(np.diag(chol) > 0):
        raise ValueError(
            "reference covariance is not positive definite (its Cholesky "
            "factorisation fails). Pass a positive-definite matrix."
        )
    return GaussianReference(mean, jnp.asarray(np.diag(cov_np), dtype), jnp.asarray(chol, dtype))


def curvature_diagonal(estimator: Estimator, position: Array, method: str = "hessian") -> Array:
    """The curvature of U at ``position`` behind an automatic reference: ``"hessian"``, the
    exact diag ∇²U; ``"fisher"``, Σ_i (∇ℓ_i)² + diag ∇²g; ``"full_hessian"``, the dense ∇²U
    (D Hessian-vector products over the full data each, the Fisher diagonal one pass).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.estimator import build_estimator
    >>> terms = lambda x, idx: (0.5 * x @ x, 2.0 * x[0] ** 2 * jnp.ones(idx.shape[0]))
    >>> curvature_diagonal(build_estimator(terms, dim=2, N=10), jnp.zeros(2))  # 1 + 10 * 4, 1
    Array([41.,  1.], dtype=float32)
    """
    x = jnp.asarray(position)
    if method == "hessian":
        return hessian_diagonal(estimator, x)
    if method == "fisher":
        return fisher_diagonal(estimator, x)
    if method == "full_hessian":
        return full_hessian(estimator, x)
    raise ValueError(f"curvature must be 'hessian', 'fisher' or 'full_hessian'; got {method!r}.")


def build_reference(
    estimator: Estimator,
    mean: Array,
    *,
    curvature: str = "hessian",
    gamma: float = 1.0,
    known: Array | None = None,
) -> GaussianReference:
    """The automatic Boomerang reference at x* = ``mean`` (the mode):
    Σ* = γ diag(curvature at x*)⁻¹, or the dense γ H⁻¹.

    Parameters
    ----------
    estimator
        The estimator.
    mean
        x*, usually the mode (the shared warmup's) or the control-variate anchor.
    curvature
        ``"hessian"``, ``"fisher"`` (diagonal Σ*) or ``"full_hessian"`` (dense Σ* = γ H⁻¹),
        see :func:`curvature_diagonal`.
    gamma
        γ > 0, the paper's scale of Σ* (eq. 5).
    known
        diag ∇²U at ``mean`` where the caller has it already (a structured set-up): used for
        ``"hessian"`` instead of D Hessian-vector products.

    Raises
    ------
    ValueError
        ``gamma`` not positive, or a curvature diagonal with non-positive or non-finite
        entries (Σ* would not be positive definite).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(2, N=4, n=4, center=1.0)  # Hessian diag(5, 1)
    >>> ref = build_reference(est, jnp.array([0.8, 0.0]))
    >>> [round(float(m), 3) for m in ref.mean], [round(float(s), 3) for s in ref.variance]
    ([0.8, 0.0], [0.2, 1.0])
    """
    if not (np.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a finite positive number; got {gamma!r}.")
    mean = jnp.asarray(mean)
    if known is not None and curvature == "hessian":
        curv = np.asarray(known)
    else:
        curv = np.asarray(curvature_diagonal(estimator, mean, curvature))
    if curvature == "full_hessian":
        hessian = (curv + curv.T) / 2
        try:
            chol = np.linalg.cholesky(hessian)
        except np.linalg.LinAlgError:
            chol = None
        if chol is None or not np.all(np.isfinite(chol)):
            raise ValueError(
                "reference covariance is not positive definite: the Hessian at x* is not "
                "(x* may not be a minimum). Use curvature='fisher', or pass "
                "reference=(mean, covariance)."
            )
        inverse_chol = np.linalg.inv(chol)
        covariance = inverse_chol.T @ inverse_chol
        # symmetric up to rounding, which an ill-conditioned Hessian amplifies: symmetrise
        return gaussian_reference(mean, gamma * (covariance + covariance.T) / 2)
    bad = ~(np.isfinite(curv) & (curv > 0))
    if np.any(bad):
        raise ValueError(
            "reference covariance is not positive definite: the "
            f"{curvature!r} curvature at x* has {int(bad.sum())} non-positive or non-finite "
            "diagonal entries (x* may not be a minimum). Use curvature='fisher', or pass "
            "reference=(mean, covariance)."
        )
    return GaussianReference(mean, jnp.asarray(gamma / curv, mean.dtype))


__all__ = ["GaussianReference", "build_reference", "curvature_diagonal", "gaussian_reference"]
