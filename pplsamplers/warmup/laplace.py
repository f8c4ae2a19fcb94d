"""The centre of a hierarchical posterior's mass: the mode of the global latents' Laplace
marginal, with the group effects integrated out (the nested Laplace approach of INLA and TMB).

Write x = (θ, u) with θ the p global latents and u the groups' effects
(:class:`~pplsamplers.estimator.blocks.Blocks`).  The joint mode of a hierarchical posterior
lies where the group effects collapse onto their mean, away from the mass: it ignores the
volume of u, which shrinks with the group scale.  The Laplace approximation of the marginal of
θ restores it,

    f(θ) = U(θ, u*(θ)) + ½ Σ_g log det A_g(θ, u*(θ)),      u*(θ) = argmin_u U(θ, u),     (1)

with A_g the g-th diagonal block of the Hessian in u.  Its gradient follows from the implicit
function theorem (du*/dθ = −A⁻¹B, B = ∂²U/∂u∂θ):

    ∇f = ∂_θU + ½ ∂_θ LD − ½ Bᵀ A⁻¹ ∂_u LD,      LD = Σ_g log det A_g.                     (2)

:func:`conditional_mode` solves for u*(θ) by Newton's method, all groups at once (A is block
diagonal); :func:`nested_laplace` minimises (1) by BFGS started from the inverse of the Schur
complement S = C − Bᵀ A⁻¹ B, the curvature of U along θ with u following u*.  Every step is a
few data passes whatever the number of groups: a gradient, k Hessian-vector products for the
blocks A_g (one per coordinate of a group, all groups at once) and p for the couplings.

The Gaussian built at the result (:func:`~pplsamplers.estimator.blocks.block_whitening`) takes
θ's precision from f's curvature (central differences of (2)), not from S alone: the volume
term changes the curvature along the group scale as much as the data do.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pplsamplers.estimator import Estimator
from pplsamplers.estimator.blocks import (
    BlockHessian,
    Blocks,
    block_hessian,
    floored_root,
    group_hessian,
    inverse_root,
)
from pplsamplers.types import Array

NEWTON_STEPS = 30
"""Newton iterations of the group effects' solve, at most."""
BFGS_STEPS = 60
"""Quasi-Newton iterations over the global latents, at most."""
TOLERANCE = 1e-2
"""Convergence over the globals: f's Newton decrement, in posterior sds (a centre 1 % of an
sd off is as good as the exact one for what it is used for)."""
INNER_TOLERANCE = 1e-4
"""Convergence of the group effects' solve: each group's Newton decrement, in sds."""
FULL_STEP = 0.25
"""Below this decrement (sds) a Newton step is taken whole."""
REL_FLOOR = 1e-8
"""Eigenvalues of a block below this fraction of its largest are floored (a flat direction)."""


def _gradient(estimator: Estimator):
    """∇U over the full data, as a function of x."""
    return lambda y: estimator.full_value_and_grad(y)[1]


def _log_det(matrices: Array) -> Array:
    """Σ log det of symmetric (..., k, k) matrices, their eigenvalues floored."""
    values = jnp.linalg.eigvalsh(matrices)
    top = jnp.max(jnp.abs(values), axis=-1, keepdims=True)
    floor = REL_FLOOR * jnp.maximum(top, jnp.finfo(values.dtype).tiny)
    return jnp.sum(jnp.log(jnp.maximum(values, floor)))


def _solve_groups(A: Array, b: Array) -> Array:
    """A_g⁻¹ b_g for every group, through floored inverse roots (A_g may be indefinite away
    from u*)."""
    root = inverse_root(A, REL_FLOOR)
    return jnp.einsum("gkl,gml,gm->gk", root, root, b)


@partial(jax.jit, static_argnums=(0, 2))
def _newton_step(estimator: Estimator, x: Array, blocks: Blocks) -> tuple[Array, Array]:
    """(x after one Newton step in u, the largest group decrement before it, in sds).

    Where every group's decrement is below ``FULL_STEP`` the quadratic model holds and the
    full step is taken (U's rounding, not its decrease, would decide a comparison of values
    there); otherwise the step is halved until U falls (Armijo)."""
    value, gradient = estimator.full_value_and_grad(x)
    A = group_hessian(_gradient(estimator), x, blocks)
    g = gradient[blocks.groups]
    step = _solve_groups(A, g)
    decrement = jnp.max(jnp.sqrt(jnp.maximum(jnp.einsum("gk,gk->g", g, step), 0.0)))
    moved = lambda t: x.at[blocks.groups].add(-t * step)

    def too_high(t: Array) -> Array:
        new = estimator.full_value_and_grad(moved(t))[0]
        return (t > 1e-4) & ~(new <= value - 0.25 * t * jnp.sum(g * step))

    t = lax.cond(
        decrement < FULL_STEP,
        lambda: jnp.asarray(1.0, x.dtype),
        lambda: lax.while_loop(too_high, lambda t: 0.5 * t, jnp.asarray(1.0, x.dtype)),
    )
    return moved(t), decrement


def conditional_mode(
    estimator: Estimator, blocks: Blocks, x: Array, max_steps: int = NEWTON_STEPS
) -> tuple[Array, float]:
    """u*(θ) of (1) for the θ in ``x``: ``(x with u = u*, the last decrement in sds)``.
    Stops at ``INNER_TOLERANCE`` or where rounding stops the decrement from falling."""
    previous = np.inf
    for _ in range(max_steps):
        moved, decrement = _newton_step(estimator, x, blocks)
        decrement = float(decrement)
        if decrement < INNER_TOLERANCE or decrement > 0.5 * previous >= 0.0 and decrement < 1e-2:
            return x, decrement
        x, previous = moved, decrement
    return x, previous


@partial(jax.jit, static_argnums=(0, 2))
def _log_det_terms(estimator: Estimator, x: Array, blocks: Blocks) -> tuple[Array, Array]:
    """(LD, ∇_x LD) of (2) at ``x``."""
    log_det = lambda y: _log_det(group_hessian(_gradient(estimator), y, blocks))
    return jax.value_and_grad(log_det)(x)


@partial(jax.jit, static_argnums=(0, 2))
def _marginal(estimator: Estimator, x: Array, blocks: Blocks) -> tuple[Array, Array, BlockHessian]:
    """(LD, ∇f of (2), the arrowhead Hessian) at ``x`` with u = u*(θ)."""
    gradient = estimator.full_value_and_grad(x)[1]
    log_det, log_det_grad = _log_det_terms(estimator, x, blocks)
    hessian = block_hessian(_gradient(estimator), x, blocks)
    _, _, B, A = hessian
    along_u = _solve_groups(A, log_det_grad[blocks.groups])  # A⁻¹ ∂_u LD
    total = (
        gradient[blocks.globals_]
        + 0.5 * log_det_grad[blocks.globals_]
        - 0.5 * jnp.einsum("gkp,gk->p", B, along_u)
    )
    return log_det, total, hessian


def schur_complement(hessian: BlockHessian) -> Array:
    """S = C − Σ_g B_gᵀ A_g⁻¹ B_g: the curvature of U along θ with u following u*(θ)."""
    _, C, B, A = hessian
    root = inverse_root(A, REL_FLOOR)
    inverse_a_b = jnp.einsum("gkl,gml,gmp->gkp", root, root, B)
    schur = C - jnp.einsum("gkp,gkq->pq", B, inverse_a_b)
    return 0.5 * (schur + schur.T)


class NestedLaplace(NamedTuple):
    """Result of :func:`nested_laplace`.

    Attributes
    ----------
    center
        x̂ = (θ̂, u*(θ̂)): the marginal mode of the globals and the group effects' conditional
        mode there.
    hessian
        The arrowhead Hessian of U at ``center``.
    global_precision
        (p, p): the curvature of f at θ̂ (central differences of its gradient).
    converged
        Whether the decrement of f, in posterior sds of θ, fell below the tolerance.
    decrement
        That decrement at the end, and the group solve's.
    iterations
        Quasi-Newton iterations over θ.
    """

    center: Array
    hessian: BlockHessian
    global_precision: Array
    converged: bool
    decrement: tuple[float, float]
    iterations: int


def _set_globals(x: Array, blocks: Blocks, theta: Array) -> Array:
    return x.at[blocks.globals_].set(theta)


def _evaluate(estimator: Estimator, blocks: Blocks, x: Array) -> tuple:
    """(x with u = u*, LD, ∇f, Hessian, group decrement) for the θ in ``x``."""
    x, inner = conditional_mode(estimator, blocks, x)
    log_det, gradient, hessian = _marginal(estimator, x, blocks)
    return x, float(log_det), np.asarray(gradient, float), hessian, inner


def _rise(estimator: Estimator, new: tuple, old: tuple) -> float:
    """f(new) − f(old) of two :func:`_evaluate` results, U's part summed datum by datum (its
    rounding is relative to the difference, not to U)."""
    return float(estimator.full_value_difference(new[0], old[0])) + 0.5 * (new[1] - old[1])


def _curvature(
    estimator: Estimator, blocks: Blocks, x: Array, start: np.ndarray, step: float = 0.25
) -> np.ndarray:
    """f's Hessian at the θ in ``x`` by central differences of ∇f along the columns of
    ``start`` (a square root of an inverse-curvature guess), ``step`` of those sds apart."""
    theta = np.asarray(x[blocks.globals_], float)
    columns = []
    for j in range(start.shape[1]):
        shift = step * start[:, j]
        ends = [
            _evaluate(estimator, blocks, _set_globals(x, blocks, jnp.asarray(theta + s, x.dtype)))
            for s in (shift, -shift)
        ]
        columns.append((ends[0][2] - ends[1][2]) / (2 * step))  # F · start[:, j]
    curvature = np.stack(columns, 1) @ np.linalg.pinv(start)
    return 0.5 * (curvature + curvature.T)


def _host_inverse_root(matrix: Array) -> np.ndarray:
    """:func:`~pplsamplers.estimator.blocks.inverse_root` of the small p × p ``matrix`` in
    float64 on the host: in float32 the eigenvalues of globals on raw covariates (an intercept
    beside an age in years) are lost below 10⁻⁷ of the largest, the floor is meaningless and
    the metric points nowhere."""
    matrix = np.asarray(matrix, np.float64)
    if not np.all(np.isfinite(matrix)):  # NaN, as the device's eigh would give: no metric
        return np.full_like(matrix, np.nan)
    values, vectors = np.linalg.eigh(0.5 * (matrix + matrix.T))
    return floored_root(values, vectors, REL_FLOOR, xp=np)


def _positive_inverse(matrix: Array) -> np.ndarray:
    """M⁻¹ with M's eigenvalues made positive and floored: a descent metric even where M is
    indefinite (S is, along a group scale, wherever the joint density rises toward the funnel's
    neck)."""
    root = _host_inverse_root(matrix)
    return root @ root.T


def _quasi_newton(
    estimator: Estimator, blocks: Blocks, point: tuple, inverse: np.ndarray, max_steps: int
) -> tuple[tuple, float, int]:
    """BFGS over θ from ``point`` with inverse curvature ``inverse``, Armijo steps on f:
    ``(the last point, its decrement in sds of that metric, iterations)``."""
    decrement, iterations, start = np.inf, 0, inverse
    for iterations in range(1, max_steps + 1):  # noqa: B007 (returned)
        gradient = point[2]
        direction = -inverse @ gradient
        if gradient @ direction >= 0.0 and np.any(gradient):  # lost definiteness: restart
            inverse = start
            direction = -inverse @ gradient
        decrement = float(np.sqrt(max(-gradient @ direction, 0.0)))
        if decrement < TOLERANCE:
            break
        theta, t, result = np.asarray(point[0][blocks.globals_], float), 1.0, None
        # halve down to steps at θ's float resolution, not to a fixed t: a metric from a
        # region where the data's curvature vanished (a logistic model saturated at a start on
        # raw covariates) proposes steps 10⁶ sds long, of which a decreasing one is tiny
        resolution = 10.0 * float(jnp.finfo(point[0].dtype).eps) * (1.0 + np.max(np.abs(theta)))
        while t * np.max(np.abs(direction)) >= resolution:
            trial = _set_globals(
                point[0], blocks, jnp.asarray(theta + t * direction, point[0].dtype)
            )
            candidate = _evaluate(estimator, blocks, trial)
            rise = _rise(estimator, candidate, point)
            if np.isfinite(rise) and rise <= 1e-4 * t * (gradient @ direction):
                result = candidate
                break
            t *= 0.5
        if result is None:  # no decrease along a descent direction: rounding's floor
            break
        s, y = t * direction, result[2] - gradient
        point = result
        if s @ y > 1e-12 * np.linalg.norm(s) * np.linalg.norm(y):
            rho = 1.0 / (s @ y)
            left = np.eye(s.size) - rho * np.outer(s, y)
            inverse = left @ inverse @ left.T + rho * np.outer(s, s)
    return point, decrement, iterations


def _finite(point: tuple) -> bool:
    return bool(np.isfinite(point[1]) and np.all(np.isfinite(point[2])))


def _best_start(estimator: Estimator, blocks: Blocks, starts: tuple[Array, ...]) -> tuple | None:
    """:func:`_evaluate` at the start with the lowest f of (1), or ``None`` where f is not
    finite at any.  A centred model's joint mode lies deep in the funnel's neck (the group
    scale at e⁻⁴⁰, where 1/τ² overflows float32): f, which rises without bound toward the
    neck, is larger there than at any start in the mass, or not finite at all."""
    best = None
    for x0 in starts:
        point = _evaluate(estimator, blocks, x0)
        if _finite(point) and (best is None or _rise(estimator, point, best) < 0.0):
            best = point
    return best


def nested_laplace(
    estimator: Estimator,
    blocks: Blocks,
    starts: Array | tuple[Array, ...],
    max_steps: int = BFGS_STEPS,
) -> NestedLaplace | None:
    """The marginal mode of the globals under (1) (module docstring), or ``None`` where f is
    not finite at any start or at the end.

    BFGS from the Schur complement's inverse to a decrement of ``FULL_STEP`` sds, then Newton
    steps with f's own curvature (central differences of (2)) to ``TOLERANCE``.

    Parameters
    ----------
    estimator
        The full-batch estimator of U in the model's coordinates.
    blocks
        The global and group coordinates (:func:`~pplsamplers.warmup.structure.find_blocks`).
    starts
        One start or several (the joint mode search's end point, the model's initial point):
        the search begins at the one with the lowest f.
    max_steps
        Quasi-Newton iterations over θ, at most.
    """
    starts = (starts,) if isinstance(starts, jax.Array | np.ndarray) else tuple(starts)
    point = _best_start(estimator, blocks, starts)
    if point is None:
        return None
    inverse = _positive_inverse(schur_complement(point[3]))
    point, decrement, iterations = _quasi_newton(estimator, blocks, point, inverse, max_steps)
    for _ in range(3):  # Newton with f's curvature: the BFGS metric's decrement is unreliable
        guess = _host_inverse_root(schur_complement(point[3]))
        if not np.all(np.isfinite(guess)):
            return None
        precision = _curvature(estimator, blocks, point[0], guess)
        if not (_finite(point) and np.all(np.isfinite(precision))):
            return None
        inverse = _positive_inverse(precision)
        point, decrement, steps = _quasi_newton(estimator, blocks, point, inverse, 1)
        iterations += steps
        if decrement < TOLERANCE:
            break
    x, _, _, hessian, inner = point
    return NestedLaplace(
        x, hessian, jnp.asarray(precision, x.dtype), decrement < TOLERANCE,
        (decrement, float(inner)), iterations,
    )  # fmt: skip


__all__ = ["NestedLaplace", "conditional_mode", "nested_laplace", "schur_complement"]
