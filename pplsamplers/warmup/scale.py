"""The Laplace approximation's scale at the mode (:func:`posterior_scale`, the whitening's
factor) and the automatic batch size (:func:`suggest_batch_size`)."""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pplsamplers.estimator import (
    Estimator,
    fisher_diagonal,
    full_hessian,
    whiten,
)
from pplsamplers.types import Array, PRNGKey
from pplsamplers.warmup.mode import MAX_DENSE_DIM

MAX_NARROWED = 8
"""Floored directions :func:`posterior_scale` reports (the flattest first)."""


def _unit_columns(dim: int, indices: np.ndarray) -> np.ndarray:
    """The coordinate unit vectors ``indices`` as the columns of a (dim, k) array."""
    columns = np.zeros((dim, len(indices)))
    columns[indices, np.arange(len(indices))] = 1.0
    return columns


def posterior_scale(
    potential: Estimator,
    mode: Array,
    kind: Literal["auto", "dense", "diag"] = "auto",
    *,
    method: Literal["auto", "hessian", "fisher"] = "auto",
    max_dense_dim: int = MAX_DENSE_DIM,
    rel_floor: float = 1e-8,
    batch_size: int = 64,
) -> tuple[Array, dict]:
    """The Laplace scale at the mode: L with L Lᵀ = H⁻¹ (floored), for whitening.

    H is the full-data curvature ∇²U at ``mode``.  Its eigenvalues λ (or diagonal entries)
    are made positive before inversion: a negative λ (a saddle: an unconverged mode, or a
    posterior that is not log-concave there) is replaced by |λ|, and every value is floored
    at ``rel_floor · max|λ|``, so that a flat or indefinite direction still gives a
    positive-definite covariance whose sd there is at most ``rel_floor^{-1/2}`` (10⁴ by
    default) times the smallest posterior sd.  ``info`` counts the values changed.

    Parameters
    ----------
    potential
        The potential in the coordinates of ``mode``.
    mode
        Where, usually ``find_map(...).position``.
    kind
        ``"dense"``: L = chol(H⁻¹), ``(D, D)``, lower-triangular.  ``"diag"``:
        L = 1/√diag H, ``(D,)``.  ``"auto"``: dense for D ≤ ``max_dense_dim``, else diag.
    method
        ``"hessian"``: exact, D Hessian-vector products (:func:`full_hessian`, ⌈D/batch⌉ data
        passes).  ``"fisher"``: diag only, one pass (:func:`fisher_diagonal`).  ``"auto"``:
        the Hessian for D ≤ ``max_dense_dim`` or ``kind="dense"``, the Fisher diagonal
        beyond.
    rel_floor
        Floor on the curvature, relative to its largest eigenvalue.
    batch_size
        Hessian-vector products per data pass.

    Returns
    -------
    factor : Array
        ``(D, D)`` or ``(D,)``, in the potential's dtype.
    info : dict
        ``kind``, ``method``, ``num_clipped`` (values below the floor, negatives included),
        ``num_negative``, ``narrowed`` (D × k: the directions of the k ≤ ``MAX_NARROWED``
        smallest floored values, as unit vectors), ``floor``,
        ``curvature_min``/``curvature_max`` (before flooring),
        ``condition_number`` (after) and ``num_evals`` (per-datum evaluations).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.estimator import build_estimator
    >>> terms = lambda x, idx: (0.0, 0.5 * (x[0] + x[1] - 1.0) ** 2 + 0.5 * x[1] ** 2 + 0 * idx)
    >>> L, info = posterior_scale(build_estimator(terms, dim=2, N=4), jnp.zeros(2))
    >>> (L @ L.T).round(4)  # inverse of 4 [[1, 1], [1, 2]]
    Array([[ 0.5 , -0.25],
           [-0.25,  0.25]], dtype=float32)
    >>> info["kind"], info["num_clipped"]
    ('dense', 0)
    """
    if kind not in ("auto", "dense", "diag"):
        raise ValueError(f"kind must be 'auto', 'dense' or 'diag'; got {kind!r}.")
    if method not in ("auto", "hessian", "fisher"):
        raise ValueError(f"method must be 'auto', 'hessian' or 'fisher'; got {method!r}.")
    if not 0 < rel_floor < 1:
        raise ValueError(f"rel_floor must lie in (0, 1); got {rel_floor}.")
    x = jnp.asarray(mode)
    dim = potential.dim
    small = dim <= max_dense_dim
    kind = ("dense" if small else "diag") if kind == "auto" else kind
    if method == "auto":  # the Fisher diagonal only where a diagonal is all that is wanted
        method = "hessian" if small or kind == "dense" else "fisher"
    if kind == "dense" and method == "fisher":
        raise ValueError("method='fisher' gives a diagonal only; use kind='diag' or 'hessian'.")
    per_pass = potential.N * potential.cost_per_datum
    if method == "hessian":
        hess = np.asarray(full_hessian(potential, x, batch_size), np.float64)
        hess = 0.5 * (hess + hess.T)
        num_evals = dim * per_pass
    else:
        if potential.control_variate:
            raise ValueError(
                "method='fisher' needs the per-example gradients of the plain potential, but "
                "this one has a control_variate anchor (its per-example terms vanish there). "
                "Pass the potential from before with_control_variate, or method='hessian'."
            )
        hess = np.asarray(fisher_diagonal(potential, x), np.float64)
        num_evals = per_pass
    if not np.all(np.isfinite(hess)):
        raise ValueError(
            "the curvature at `mode` is not finite: is it the mode (check find_map's "
            "`converged`), inside the support, and does the model give finite gradients there?"
        )
    if kind == "dense":
        values, vectors = np.linalg.eigh(hess)
    else:
        values = np.diag(hess) if hess.ndim == 2 else hess
    top = float(np.max(np.abs(values)))
    if not top > 0:
        raise ValueError(
            "the curvature at `mode` is zero in every direction: the posterior is flat there "
            "(an improper posterior?). Give proper priors or a preconditioner matrix yourself."
        )
    floor = rel_floor * top
    floored = np.maximum(np.abs(values), floor)
    if kind == "dense":
        cov = (vectors / floored) @ vectors.T
        try:
            factor = np.linalg.cholesky(0.5 * (cov + cov.T))
        except np.linalg.LinAlgError:  # round-off at a huge condition number
            factor = vectors / np.sqrt(floored)
    else:
        factor = 1.0 / np.sqrt(floored)
    num_clipped = int(np.sum(values < floor))
    narrowed = np.argsort(values)[: min(num_clipped, MAX_NARROWED)]
    info = dict(
        kind=kind,
        method=method,
        num_clipped=num_clipped,
        narrowed=vectors[:, narrowed] if kind == "dense" else _unit_columns(dim, narrowed),
        num_negative=int(np.sum(values < -floor)),  # a rounded zero is flat, not negative
        floor=floor,
        curvature_min=float(np.min(values)),
        curvature_max=float(np.max(values)),
        condition_number=float(np.max(floored) / np.min(floored)),
        num_evals=int(num_evals),
    )
    return jnp.asarray(factor, x.dtype), info


NOISE_TARGET = 0.3
"""The automatic batch size's gradient noise, in posterior sds on the noisiest coordinate
(:func:`~pplsamplers.warmup.scale.suggest_batch_size`)."""
USER_NOISE_LIMIT = 3.0
"""A user's batch size whose gradient noise exceeds this many posterior sds on some
coordinate is warned of (the automatic choice stays below :data:`NOISE_TARGET`, or below a
structured model's own target)."""
PROBE_ENTRIES = 20_000_000
"""The gradient-noise probe holds at most this many per-example gradient entries at once."""


def noise_probe(
    rng_key: PRNGKey,
    potential: Estimator,
    whitening: Any,
    probe_size: int = 4096,
    num_points: int = 4,
) -> float:
    """max_j s_j², s_j² = Var_i ∂_j ℓ_i in whitened coordinates, averaged over ``num_points``
    draws of the Gaussian approximation, on ``probe_size`` random data (see
    :func:`suggest_batch_size`): the estimator's gradient noise sd at batch size n is then
    N √(s²/n) posterior sds."""
    N = potential.N
    white = whiten(potential, whitening)
    dtype = whitening.center.dtype
    # the (m, D) per-example gradients of one point stay below PROBE_ENTRIES numbers
    m = min(int(probe_size), N, max(256, PROBE_ENTRIES // potential.dim))
    if m < 2:
        return 0.0
    point_key, index_key = jax.random.split(rng_key)

    @jax.jit
    def probe(point_key: PRNGKey, index_key: PRNGKey) -> Array:
        points = jax.random.normal(point_key, (num_points, potential.dim), dtype)
        idx = jnp.arange(N) if m == N else jax.random.randint(index_key, (m,), 0, N)
        variance = lambda z: white.per_example_moments(z, idx)[1]
        return jnp.mean(lax.map(variance, points), axis=0)

    return float(jnp.max(probe(point_key, index_key)))


def suggest_batch_size(
    rng_key: PRNGKey,
    potential: Estimator,
    whitening: Any,
    *,
    target: float = NOISE_TARGET,
    min_size: int = 32,
    full_batch_fraction: float = 0.25,
    probe_size: int = 4096,
    num_points: int = 4,
) -> tuple[int, str]:
    """The minibatch size n at which the gradient noise is ``target`` posterior sds.

    In whitened coordinates z (x = c + L z of ``whitening``, :func:`~pplsamplers.estimator.whiten`) the posterior
    has unit scale, so a gradient component at a typical point is O(1).  At ``num_points``
    draws z ~ N(0, I) of the Laplace approximation, per-example gradients of ``probe_size``
    random data give s_j² = Var_i ∂_j ℓ_i, and the estimator (N/n) Σ_{i∈idx} ∂_j ℓ_i (indices
    with replacement) has noise sd N s_j / √n.  The estimator is the potential's own: with
    control variates (``potential.control_variate``) ℓ_i is the anchored difference, whose noise
    shrinks near the mode and does not grow with N; without, the noise grows as √(N/n).

    Cost model: a step costs c₀ + n·``cost_per_datum`` (c₀ a fixed per-step overhead), and
    the noise variance falls as 1/n, so the cheapest n meeting the target is the smallest:
    n* = ⌈N² max_j s_j² / target²⌉, at least min(N, ``min_size``) (below it c₀ dominates).
    A minibatch larger than ``full_batch_fraction · N`` saves little over the exact full
    batch (which also needs no row gather), so then n = N.

    Parameters
    ----------
    rng_key
        Key of the probe.
    potential, whitening
        The potential (model coordinates) and the Gaussian approximation x = c + L z (a
        :class:`~pplsamplers.estimator.Whitening` or any map with ``to_x``).
    target
        Per-coordinate gradient noise sd, in posterior sds (whitened units).
    min_size, full_batch_fraction
        The clamps above.
    probe_size, num_points
        Data per probe and Laplace draws (per-example gradients: their product).

    Returns
    -------
    n : int
    reason : str
        One line for the diagnostics: the chosen n, the noise there and why.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.estimator import build_estimator
    >>> a = jnp.linspace(-1.0, 1.0, 20)
    >>> estimator = build_estimator(lambda x, idx: (0.0, 0.5 * (x[0] - a[idx]) ** 2), dim=1, N=20)
    >>> from pplsamplers.estimator import Whitening
    >>> laplace = Whitening(jnp.zeros(1), jnp.ones(1) / 20**0.5)
    >>> suggest_batch_size(jax.random.key(0), estimator, laplace)[0]
    20
    """
    if not target > 0:
        raise ValueError(f"target must be positive; got {target}.")
    if not 0 < full_batch_fraction <= 1:
        raise ValueError(f"full_batch_fraction must lie in (0, 1]; got {full_batch_fraction}.")
    N = potential.N
    s2 = noise_probe(rng_key, potential, whitening, probe_size, num_points)
    estimator = "control-variate" if potential.control_variate else "plain"
    lowest = min(N, int(min_size))
    needed = math.ceil(N**2 * s2 / target**2) if s2 > 0 else 1
    if needed >= full_batch_fraction * N:
        n = N
        why = f"full batch: the target needs n >= {needed} > {full_batch_fraction:g} N"
    elif needed <= lowest:
        n, why = lowest, f"the floor min(N, {min_size}): n* = {needed} already meets the target"
    else:
        n, why = needed, "the smallest n meeting the target"
    noise = 0.0 if n == N else N * math.sqrt(s2 / n)
    reason = (
        f"n = {n} of N = {N}: {estimator} gradient noise sd {noise:.2g} posterior sd at "
        f"Laplace draws (target {target:g}; {why})"
    )
    return int(n), reason


def check_batch_size(
    rng_key: PRNGKey, potential: Estimator, whitening: Any, n: int, target: float = NOISE_TARGET
) -> str:
    """The gradient noise at a batch size the user chose, as a note; a warning where it is
    above ``USER_NOISE_LIMIT`` posterior sds (step-size kernels are then biased and PDMPs
    slow), with the batch size that meets ``target``."""
    s2 = noise_probe(rng_key, potential, whitening)
    N = potential.N
    noise = N * math.sqrt(s2 / n)
    if noise > USER_NOISE_LIMIT:
        needed = min(N, math.ceil(N**2 * s2 / target**2))
        warnings.warn(
            f"pplsamplers: subsample_size={n} gives gradient noise of {noise:.2g} posterior sd "
            f"on its noisiest coordinate (more than {USER_NOISE_LIMIT:g}): step-size kernels "
            "will be biased and PDMPs slow. Use subsample_size >= "
            f"{needed}, or leave it out for the automatic choice.",
            stacklevel=6,
        )
    return f": gradient noise sd {noise:.2g} posterior sd at Laplace draws"


__all__ = [
    "NOISE_TARGET",
    "USER_NOISE_LIMIT",
    "check_batch_size",
    "noise_probe",
    "posterior_scale",
    "suggest_batch_size",
]
