"""MAP estimation with optax: an optional minibatch Adam warm start, then full-batch L-BFGS.

Robust to raw scales: the L-BFGS loop runs to convergence in a ``lax.while_loop``, measured
in posterior standard deviations, and says when it did not converge.  Each value-and-gradient of the line search is one chunked data pass
(:func:`full_value_with_grad`), and the jitted search is compiled once per estimator.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from pplsamplers.estimator import Estimator
from pplsamplers.types import Array, PRNGKey

MAX_DENSE_DIM = 1000
"""Up to this many dimensions the posterior scale is a dense matrix, beyond it a diagonal
(:func:`~pplsamplers.warmup.scale.posterior_scale`); :func:`find_map` without ``scale`` runs on
the identity of that form, so that the polish with the estimated scale reuses its program."""


def full_value_with_grad(estimator: Estimator) -> Callable[[Array], Array]:
    """The full-data U(x) whose reverse-mode derivative costs no second data pass.

    ``jax.value_and_grad`` of it runs the chunked ``full_value_and_grad`` once and returns
    the gradient from that same pass (a ``jax.custom_vjp``), instead of differentiating
    through the chunked scan.  Reverse mode only.
    """

    @jax.custom_vjp
    def value(x: Array) -> Array:
        return estimator.full_value_and_grad(x)[0]

    def forward(x: Array) -> tuple[Array, Array]:
        return estimator.full_value_and_grad(x)

    value.defvjp(forward, lambda grad, cotangent: (cotangent * grad,))
    return value


class MapResult(NamedTuple):
    """Result of :func:`find_map`.

    Attributes
    ----------
    position : the mode x*.
    potential, grad_norm : the full-data U(x*) and ‖∇U(x*)‖ (Euclidean, model coordinates).
    converged : True when the distance to the mode, in posterior sds, is below ``tol``.
    scaled_grad_norm : that distance: √(∇Uᵀ H⁻¹ ∇U) (the Newton decrement), with H⁻¹ the
        L-BFGS inverse curvature, or ‖Lᵀ∇U‖ when ``scale`` = L is given.
    num_evals : per-datum evaluations spent (the unit of ``data_evals``), a float array:
        ``num_steps · n`` for the warm start plus ``N`` per full-data pass, times
        ``cost_per_datum``.
    num_iterations : L-BFGS iterations.
    """

    position: Array
    potential: Array
    grad_norm: Array
    converged: Array = True
    scaled_grad_norm: Array = 0.0
    num_evals: Array = 0
    num_iterations: Array = 0


def _affine(x0: Array, scale: Array):
    if scale.ndim == 1:
        return lambda z: x0 + scale * z
    return lambda z: x0 + scale @ z


def _better(first: MapResult, other: MapResult) -> MapResult:
    """The better end point of two searches (converged first, then the lower finite U), with
    the evaluations of both counted."""
    finite = lambda r: jnp.where(jnp.isfinite(r.potential), r.potential, jnp.inf)
    take = (other.converged & ~first.converged) | (
        (other.converged == first.converged) & (finite(other) < finite(first))
    )
    best = jax.tree.map(lambda a, b: jnp.where(take, b, a), first, other)
    return best._replace(num_evals=first.num_evals + other.num_evals)


@partial(jax.jit, static_argnums=(0, 1))
def _search(
    potential: Estimator,
    config: tuple[int, float],
    key: PRNGKey,
    x0: Array,
    scale: Array,
    exact_metric: Array,
    polish_steps: Array,
    tol: Array,
) -> MapResult:
    """One search (:func:`find_map`), compiled once per estimator and warm-start config."""
    num_steps, learning_rate = config
    full_value = full_value_with_grad(potential)
    pass_cost = potential.N * potential.cost_per_datum
    adam = optax.adam(optax.cosine_decay_schedule(learning_rate, max(num_steps, 1), alpha=0.01))
    lbfgs = optax.lbfgs()
    to_x = _affine(x0, scale)
    value = lambda z: full_value(to_x(z))  # z: x = x0 + L z (L = I without scale)
    z0 = jnp.zeros_like(x0)

    def adam_step(carry: tuple, key: PRNGKey) -> tuple[tuple, None]:
        z, state = carry
        idx = potential.sample_indices(key)
        g = jax.grad(lambda y: potential.value(to_x(y), idx))(z)
        updates, state = adam.update(jnp.where(jnp.isfinite(g), g, 0.0), state, z)
        return (optax.apply_updates(z, updates), state), None

    start = z0
    evals = jnp.asarray(0.0, x0.dtype)  # float: an int32 count overflows at N = 1e7
    if num_steps > 0:
        keys = jax.random.split(key, num_steps)
        (warm, _), _ = lax.scan(adam_step, (z0, adam.init(z0)), keys)
        v_warm, v0 = value(warm), value(z0)
        better = jnp.isfinite(v_warm) & (v_warm < jnp.where(jnp.isfinite(v0), v0, jnp.inf))
        start = jnp.where(better, warm, z0)
        evals += num_steps * potential.n * potential.cost_per_datum + 2 * pass_cost
    v, g = jax.value_and_grad(value)(start)

    def cond(carry: tuple) -> Array:
        _, _, v, g, it, _, decrement, stalled = carry
        finite = jnp.isfinite(v) & jnp.all(jnp.isfinite(g))
        return (it < polish_steps) & (decrement > tol) & finite & ~stalled

    def body(carry: tuple) -> tuple:
        z, state, v, g, it, passes, _, _ = carry
        updates, state = lbfgs.update(g, state, z, value=v, grad=g, value_fn=value)
        z_new = optax.apply_updates(z, updates)
        v_new = optax.tree_utils.tree_get(state, "value")
        g_new = optax.tree_utils.tree_get(state, "grad")
        steps = optax.tree_utils.tree_get(state, "num_linesearch_steps")
        rate = optax.tree_utils.tree_get(state, "learning_rate")
        # Newton decrement at z: -g·d with d = updates / rate ≈ -H⁻¹ g
        newton = jnp.sqrt(jnp.maximum(-(g @ updates) / jnp.maximum(rate, 1e-30), 0.0))
        slack = 64 * jnp.finfo(v.dtype).eps * (1.0 + jnp.abs(v))  # rounding of U
        ok = jnp.isfinite(v_new) & jnp.all(jnp.isfinite(z_new)) & (v_new <= v + slack)
        # a step that rounds to zero at a non-zero gradient (float32 at a huge gradient,
        # where exp overflowed at the start) measures nothing: a stall, not convergence
        moved = jnp.any(updates != 0) | jnp.all(g == 0)
        stalled = ~ok | (rate == 0) | ~moved
        z, v, g = (jnp.where(ok, new, old) for new, old in ((z_new, z), (v_new, v), (g_new, g)))
        # with the user's scale L, the exact distance ‖Lᵀ∇U‖ at the point kept, stall or not;
        # without, L-BFGS's estimate, which a stalled step does not give
        decrement = jnp.where(exact_metric, jnp.linalg.norm(g), jnp.where(stalled, jnp.inf, newton))
        return z, state, v, g, it + 1, passes + steps.astype(passes.dtype), decrement, stalled

    inf = jnp.asarray(jnp.inf, v.dtype)
    decrement0 = jnp.where(exact_metric, jnp.linalg.norm(g), inf)
    carry = (start, lbfgs.init(start), v, g, 0, jnp.asarray(1, jnp.int32), decrement0, False)
    z, _, v, g, iterations, passes, decrement, _ = lax.while_loop(cond, body, carry)
    converged = decrement <= tol
    x = to_x(z)
    v, g = potential.full_value_and_grad(x)  # the model-coordinate gradient: one more pass
    passes = passes + 1
    evals = evals + passes.astype(x0.dtype) * pass_cost
    return MapResult(x, v, jnp.linalg.norm(g), converged, decrement, evals, iterations)


def find_map(
    rng_key: PRNGKey,
    estimator: Estimator,
    init_position: Array,
    *,
    retry_at_origin: bool = True,
    num_steps: int = 0,
    learning_rate: float = 0.05,
    polish_steps: int = 500,
    tol: float | None = None,
    scale: Array | None = None,
) -> MapResult:
    """Maximum a posteriori point of an :class:`~pplsamplers.estimator.Estimator`, with a
    convergence flag.

    1. Optional warm start: ``num_steps`` of minibatch Adam (cosine-decayed
       ``learning_rate``); its end point is kept only if its full-data U is lower.
    2. Full-batch optax L-BFGS with a zoom line search, in a ``lax.while_loop``, until the
       Newton decrement √(∇Uᵀ H⁻¹ ∇U), the distance to the mode in posterior sds, is below
       ``tol``, the line search stalls, or ``polish_steps`` iterations.  H⁻¹ is L-BFGS's own
       estimate, or L Lᵀ when ``scale`` = L is given (then L-BFGS runs in z, x = x₀ + L z).

    The L-BFGS is affine-covariant up to its first step, so raw, unscaled, correlated
    coordinates with flat priors converge.  With ``retry_at_origin`` (outside a trace) a
    search that does not converge is run once more from the unconstrained origin by the same
    compiled program, and the better end point is kept: a
    random start on raw covariates can saturate a likelihood (an ordered logistic at
    η ≈ ±200 computes ``log(σ(a) − σ(b)) = -inf`` a step away, so the line search stalls),
    where the origin (β = 0) does not.  Every value-and-gradient is one data pass
    (:func:`full_value_with_grad`), and the program is compiled once per estimator and
    configuration, with or without ``scale`` (without it the search runs
    on the identity in the form of the posterior scale, :data:`MAX_DENSE_DIM`, so the shared
    warmup's polish reuses its first search's program).  It is traceable: it can be vmapped
    over keys and initial points.

    Parameters
    ----------
    rng_key : jax.Array
        Key of the minibatch warm start.
    estimator : Estimator
        The estimator; full-data passes use ``full_value_and_grad``.
    init_position : jax.Array
        Start.
    retry_at_origin : bool, default True
        Search once more from the origin when the first search did not converge.
    num_steps, learning_rate : int; float, defaults 0 and 0.05
        Adam warm start, off by default: full-batch L-BFGS from the initial point converged
        in fewer data passes on the raw-scale regressions of the tests, and compiles faster.
    polish_steps : int, default 500
        Maximum L-BFGS iterations (each at least one data pass).
    tol : float or None, default None
        Convergence threshold in posterior sds; default 1e-6 in float64, 1e-3 in float32.
    scale : jax.Array or None, default None
        Optional L, ``(D,)`` or ``(D, D)``, with L Lᵀ ≈ the posterior covariance.

    Returns
    -------
    MapResult
        Arrays (traceable); ``converged`` says whether ``tol`` was met.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.estimator import build_estimator
    >>> terms = lambda x, idx: (0.5 * x @ x, 0.5 * (x[0] - 3.0) ** 2 * jnp.ones(idx.shape[0]))
    >>> result = find_map(jax.random.key(0), build_estimator(terms, dim=1, N=10), jnp.zeros(1))
    >>> round(float(result.position[0]), 3), bool(result.converged)  # (10*3)/(10+1)
    (2.727, True)
    """
    if num_steps < 0 or polish_steps < 0:
        raise ValueError(
            f"num_steps and polish_steps must be non-negative; got {num_steps}, {polish_steps}."
        )
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be positive; got {learning_rate}.")
    x0 = jnp.asarray(init_position)
    if tol is None:
        tol = 1e-6 if jnp.asarray(x0).dtype == jnp.float64 else 1e-3
    if not tol > 0:
        raise ValueError(f"tol must be positive; got {tol}.")
    dtype, dim = x0.dtype, estimator.dim
    exact_metric = scale is not None
    if scale is None:  # the identity, in the form the polish's scale will take (host arrays:
        # built on the device, each would be a compiled program of its own)
        scale = np.eye(dim, dtype=dtype) if dim <= MAX_DENSE_DIM else np.ones(dim, dtype)
    if getattr(scale, "dtype", None) != dtype:
        scale = jnp.asarray(scale, dtype)
    if scale.shape not in ((dim,), (dim, dim)):
        raise ValueError(f"scale must have shape ({dim},) or (D, D); got {scale.shape}.")
    # the iteration cap and tolerance are arguments of the program, not part of it: the mode
    # probe's shorter searches (:func:`~pplsamplers.warmup.modes.count_modes`) reuse it
    config = (int(num_steps), float(learning_rate))
    limits = (np.asarray(exact_metric), np.asarray(polish_steps), np.asarray(tol, dtype))
    runner = partial(_search, estimator, config)
    result = runner(rng_key, x0, scale, *limits)
    eager = not isinstance(result.converged, jax.core.Tracer)
    if retry_at_origin and eager and not bool(result.converged):
        # the model's own start stalled: once more from the origin, same compiled program
        origin = runner(rng_key, jnp.zeros_like(x0), scale, *limits)
        result = _better(result, origin)
    return result


REFIT_NATS = 1.0
"""A polish that lowers U by more than this many nats started from a worse optimum than the
mode: :func:`polish` rebuilds the curvature where it ended."""


def polish(
    rng_key: PRNGKey,
    estimator: Estimator,
    mode: Array,
    factor: Array,
    rescale: Callable[[Array], Array],
    max_rebuilds: int = 2,
) -> tuple[MapResult, Array, int]:
    """Polish ``mode`` in the Laplace metric x = mode + ``factor`` z (:func:`find_map` with
    ``scale``), and rebuild the metric where the polish found a better optimum.

    A multi-start search can stop at a worse optimum whose curvature is degenerate: in a
    mixture, a component whose weight went to 0 leaves its mean flat, so the search's
    convergence test, in that curvature's sds, passes, and the floored curvature lets the
    polish travel to the real mode.  The Gaussian must then be the curvature there: where U
    fell by more than :data:`REFIT_NATS`, ``rescale(x)`` gives the factor at the polished
    point and the polish is repeated, up to ``max_rebuilds`` times.

    Returns
    -------
    The last polish, the factor it used, and how many times the factor was rebuilt.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(2, N=4)  # U = ((1 + N) x0² + x1²) / 2 around 0
    >>> far = jnp.array([3.0, 0.0])
    >>> result, factor, rebuilt = polish(jax.random.key(0), est, far, jnp.ones(2), lambda x: 2 * jnp.ones(2))
    >>> bool(jnp.allclose(result.position, 0.0, atol=1e-3)), rebuilt, factor.tolist()
    (True, 1, [2.0, 2.0])
    """
    rebuilt = 0
    while True:
        result = find_map(rng_key, estimator, mode, retry_at_origin=False, scale=factor)
        drop = float(estimator.full_value_difference(mode, result.position))  # U(mode) − U(end)
        if not drop > REFIT_NATS or rebuilt == max_rebuilds:
            return result, factor, rebuilt
        mode, rebuilt = result.position, rebuilt + 1
        factor = rescale(mode)


__all__ = ["MAX_DENSE_DIM", "REFIT_NATS", "MapResult", "find_map", "full_value_with_grad", "polish"]
