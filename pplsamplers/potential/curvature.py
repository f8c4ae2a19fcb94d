"""Curvature and gradient-noise probes of a potential at a point.

Used to pick SGLD step sizes (Welling & Teh 2011, §4: the step must keep the injected noise
dominant over the minibatch gradient noise), as selector features, and for the shared
warmup of DESIGN §8: the posterior scale at the mode (:func:`posterior_scale`, the factor
of :func:`~pplsamplers.potential.with_preconditioner`) and the automatic batch size
(:func:`suggest_batch_size`).
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pplsamplers.potential.map import MAX_DENSE_DIM, cached_jit
from pplsamplers.potential.precondition import with_preconditioner
from pplsamplers.potential.subsampled import SubsampledPotential
from pplsamplers.types import Array, PRNGKey


def max_curvature(
    rng_key: PRNGKey, potential: SubsampledPotential, position: Array, num_iterations: int = 30
) -> Array:
    """Largest eigenvalue of the full-data Hessian ∇²U at ``position`` (power iteration).

    Each iteration is one full-data Hessian-vector product (a jvp of the chunked gradient).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.5 * jnp.sum(jnp.array([1.0, 9.0]) * x**2), jnp.zeros(idx.shape[0]))
    >>> pot = build_potential(terms, dim=2, N=4, n=4, init_position=jnp.zeros(2))
    >>> round(float(max_curvature(jax.random.key(0), pot, jnp.zeros(2))), 4)
    9.0
    """
    grad = lambda x: potential.full_value_and_grad(x)[1]
    hvp = lambda v: jax.jvp(grad, (position,), (v,))[1]

    def body(_: int, v: Array) -> Array:
        w = hvp(v)
        return w / jnp.maximum(jnp.linalg.norm(w), 1e-300)

    v0 = jax.random.normal(rng_key, (potential.dim,), position.dtype)
    v = lax.fori_loop(0, num_iterations, body, v0 / jnp.linalg.norm(v0))
    return jnp.abs(v @ hvp(v))


def gradient_noise_variance(
    rng_key: PRNGKey, potential: SubsampledPotential, position: Array
) -> Array:
    """Per-coordinate variance of the minibatch gradient estimator at ``position``.

    (N²/n) Var_i(∂ℓ_i) from one minibatch of per-example gradients; zero for full batch.
    """
    if potential.full_batch:
        return jnp.zeros(potential.dim, position.dtype)
    grads = potential.per_example_grads(position, potential.sample_indices(rng_key))
    return potential.N**2 / potential.n * jnp.var(grads, axis=0, ddof=1)


def suggest_sgld_step_size(
    rng_key: PRNGKey, potential: SubsampledPotential, position: Array, fraction: float = 0.1
) -> float:
    """A conservative SGLD step: ``fraction`` of the largest stable/accurate step.

    ε = fraction · min(1/λ_max(∇²U), 4/λ_max(V)), where V is the diagonal of the gradient
    noise covariance: the first keeps the discretisation bias O(ελ) small, the second is
    Welling & Teh's condition ε N² V_s / (4n) ≪ 1 that the injected noise dominates.
    """

    @jax.jit  # one program: run eagerly, the per-example gradients go op by op
    def probe(key: PRNGKey, x: Array) -> tuple[Array, Array]:
        curvature_key, noise_key = jax.random.split(key)
        top = max_curvature(curvature_key, potential, x)
        return top, jnp.max(gradient_noise_variance(noise_key, potential, x))

    curvature, noise = (float(value) for value in probe(rng_key, position))
    limit = 1.0 / max(curvature, 1e-12)
    if noise > 0:
        limit = min(limit, 4.0 / noise)
    return fraction * limit


def full_hessian(potential: SubsampledPotential, position: Array, *, batch_size: int = 64) -> Array:
    """The dense full-data Hessian ∇²U at ``position``, from D Hessian-vector products.

    Each product is a forward-mode derivative of the chunked full-data gradient; they are
    computed ``batch_size`` at a time (``lax.map``), so ⌈D / batch_size⌉ data passes, each
    carrying ``batch_size`` tangents.  Compiled once per potential.
    """
    x = jnp.asarray(position)
    dim, batch = potential.dim, max(1, min(int(batch_size), potential.dim))

    def build():
        grad = lambda y: potential.full_value_and_grad(y)[1]

        def run(y: Array) -> Array:
            hvp = lambda e: jax.jvp(grad, (y,), (e,))[1]
            return lax.map(hvp, jnp.eye(dim, dtype=y.dtype), batch_size=batch)

        return run

    return cached_jit(potential, ("full_hessian", batch), build)(x)


def fisher_diagonal(potential: SubsampledPotential, position: Array) -> Array:
    """diag ∇²g + Σ_i (∇ℓ_i)²: the empirical Fisher diagonal plus the exact prior part.

    One chunked data pass of per-example gradients (plus D products of the data-free
    global term), so it scales to D far beyond a dense Hessian.  For a well-specified
    model it estimates diag ∇²U at the mode.
    """
    x = jnp.asarray(position)
    N, dim = potential.N, potential.dim
    chunk = min(potential.chunk_size, N)
    num_chunks = -(-N // chunk)

    def build():
        global_term = lambda y: potential.terms(y, jnp.arange(1))[0]

        def run(y: Array) -> Array:
            ggrad = jax.grad(global_term)
            diag_prior = lax.map(
                lambda e: e @ jax.jvp(ggrad, (y,), (e,))[1],
                jnp.eye(dim, dtype=y.dtype),
                batch_size=min(dim, 64),
            )

            def body(total: Array, c: Array) -> tuple[Array, None]:
                raw = c * chunk + jnp.arange(chunk)
                weight = (raw < N).astype(y.dtype)
                per = potential.per_example_grads(y, jnp.minimum(raw, N - 1))
                return total + weight @ per**2, None

            return diag_prior + lax.scan(body, jnp.zeros(dim, y.dtype), jnp.arange(num_chunks))[0]

        return run

    return cached_jit(potential, ("fisher_diagonal",), build)(x)


def posterior_scale(
    potential: SubsampledPotential,
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
        ``num_negative``, ``floor``, ``curvature_min``/``curvature_max`` (before flooring),
        ``condition_number`` (after) and ``num_evals`` (per-datum evaluations).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.potential import build_potential
    >>> terms = lambda x, idx: (0.0, 0.5 * (x[0] + x[1] - 1.0) ** 2 + 0.5 * x[1] ** 2 + 0 * idx)
    >>> pot = build_potential(terms, dim=2, N=4, n=4, init_position=jnp.zeros(2))
    >>> L, info = posterior_scale(pot, jnp.zeros(2))
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
    x = jnp.asarray(mode, jnp.asarray(potential.init_position).dtype)
    dim = potential.dim
    small = dim <= max_dense_dim
    kind = ("dense" if small else "diag") if kind == "auto" else kind
    if method == "auto":  # the Fisher diagonal only where a diagonal is all that is wanted
        method = "hessian" if small or kind == "dense" else "fisher"
    if kind == "dense" and method == "fisher":
        raise ValueError("method='fisher' gives a diagonal only; use kind='diag' or 'hessian'.")
    per_pass = potential.N * potential.cost_per_datum
    if method == "hessian":
        hess = np.asarray(full_hessian(potential, x, batch_size=batch_size), np.float64)
        hess = 0.5 * (hess + hess.T)
        num_evals = dim * per_pass
    else:
        if potential.anchor is not None:
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
    info = dict(
        kind=kind,
        method=method,
        num_clipped=int(np.sum(values < floor)),
        num_negative=int(np.sum(values < 0)),
        floor=floor,
        curvature_min=float(np.min(values)),
        curvature_max=float(np.max(values)),
        condition_number=float(np.max(floored) / np.min(floored)),
        num_evals=int(num_evals),
    )
    return jnp.asarray(factor, x.dtype), info


def suggest_batch_size(
    rng_key: PRNGKey,
    potential: SubsampledPotential,
    mode: Array,
    factor: Array,
    *,
    target: float = 0.3,
    min_size: int = 32,
    full_batch_fraction: float = 0.25,
    probe_size: int = 4096,
    num_points: int = 4,
) -> tuple[int, str]:
    """The minibatch size n at which the gradient noise is ``target`` posterior sds.

    In whitened coordinates z (x = mode + L z, :func:`with_preconditioner`) the posterior
    has unit scale, so a gradient component at a typical point is O(1).  At ``num_points``
    draws z ~ N(0, I) of the Laplace approximation, per-example gradients of ``probe_size``
    random data give s_j² = Var_i ∂_j ℓ_i, and the estimator (N/n) Σ_{i∈idx} ∂_j ℓ_i (indices
    with replacement) has noise sd N s_j / √n.  The estimator is the potential's own: with
    control variates (``potential.anchor`` set) ℓ_i is the anchored difference, whose noise
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
    potential, mode, factor
        The potential (model coordinates), the mode and L (:func:`posterior_scale`).
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
    >>> from pplsamplers.potential import build_potential
    >>> a = jnp.linspace(-1.0, 1.0, 20)
    >>> terms = lambda x, idx: (0.0, 0.5 * (x[0] - a[idx]) ** 2)
    >>> pot = build_potential(terms, dim=1, N=20, n=20, init_position=jnp.zeros(1))
    >>> suggest_batch_size(jax.random.key(0), pot, jnp.zeros(1), jnp.ones(1) / 20**0.5)[0]
    20
    """
    if not target > 0:
        raise ValueError(f"target must be positive; got {target}.")
    if not 0 < full_batch_fraction <= 1:
        raise ValueError(f"full_batch_fraction must lie in (0, 1]; got {full_batch_fraction}.")
    N = potential.N
    white = with_preconditioner(potential, mode, factor)
    m = min(int(probe_size), N)
    point_key, index_key = jax.random.split(rng_key)

    @jax.jit
    def probe(point_key: PRNGKey, index_key: PRNGKey) -> Array:
        points = jax.random.normal(
            point_key, (num_points, potential.dim), white.init_position.dtype
        )
        idx = jnp.arange(N) if m == N else jax.random.randint(index_key, (m,), 0, N)
        variance = lambda z: jnp.var(white.per_example_grads(z, idx), axis=0, ddof=1)
        return jnp.mean(lax.map(variance, points), axis=0)

    s2 = float(jnp.max(probe(point_key, index_key))) if m > 1 else 0.0
    estimator = "control-variate" if potential.anchor is not None else "plain"
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


__all__ = [
    "fisher_diagonal",
    "full_hessian",
    "gradient_noise_variance",
    "max_curvature",
    "posterior_scale",
    "suggest_batch_size",
    "suggest_sgld_step_size",
]
