"""One MCMC draw of a batch of chains: the kernel's steps, the rejection of non-finite or
divergent steps, the sampler's own warmup, and the refinement of each chain's whitening.

:func:`sample_chains` advances chains stacked on a leading axis that share ``iteration``.  The warmup stages are ``lax.cond`` on that shared iteration
*outside* the ``vmap`` over chains, so after warmup no warmup work is computed (a ``cond``
inside ``vmap`` runs both branches).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers.estimator import Estimator, Whitening, whiten, with_clipped_gradient
from pplsamplers.infer.monitor import RunPlan, count_capped, keep_draw, report_at_last_draw
from pplsamplers.infer.state import info_of, with_info
from pplsamplers.kernels.sgmcmc.step_size import DIVERGENT_JUMP, gradient_clip_norm
from pplsamplers.kernels.spec import Kernel, KernelSpec, WarmupWindow
from pplsamplers.types import Array
from pplsamplers.warmup import metric as metrics


class Stepper(NamedTuple):
    """The static configuration of :func:`build_step`."""

    spec: KernelSpec
    kernel: Kernel
    estimator: Estimator
    """The kernel's estimator with the set-up's whitening."""
    batched: Estimator
    """The same before whitening (model coordinates), rewhitened with a chain's own metric."""
    refine: bool
    """Whether each chain refines its whitening in warmup (then its metric is used)."""
    guard: bool
    """Whether a divergent jump is rejected (step-size kernels on a whitened estimator)."""
    num_warmup: int
    window_ends: tuple[int, ...]
    first_window_draw: int
    steps: int
    plan: RunPlan | None = None
    """The run the self-check follows (``None``: no check)."""
    scores: Estimator | None = None
    """The estimator of the kept draws' scores (model coordinates)."""
    report: Callable[..., None] | None = None
    """Receives the kept draws, their scores and the rejected steps at the run's end."""


def _finite(tree: Any) -> Array:
    leaves = [
        jnp.all(jnp.isfinite(leaf))
        for leaf in jax.tree.leaves(tree)
        if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def zeros_like_shapes(shapes: Any) -> Any:
    """Zeros with the shapes and dtypes of ``jax.eval_shape``'s output."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def model_time_averages(info: Any, metric: Whitening) -> Any:
    """A PDMP's exact interval averages of z and z² (SBPS eq. 19) mapped to x = c + L z.

    The mean maps exactly.  The average of x² needs the interval's cross moments of z when L
    is not diagonal, which the kernels do not keep, so it is NaN then (a diagonal L maps
    exactly).
    """
    if not hasattr(info, "time_average"):
        return info
    mean_z, square_z = info.time_average, info.time_average_sq
    mean_x = metric.to_x(mean_z)
    if isinstance(metric, Whitening) and not metric.dense:
        center, factor = metric
        square_x = center**2 + 2 * center * factor * mean_z + factor**2 * square_z
    else:
        square_x = jnp.full_like(mean_x, jnp.nan)
    return info._replace(time_average=mean_x, time_average_sq=square_x)


def estimator_of(stepper: Stepper, metric: Whitening) -> Estimator:
    """The estimator a chain with whitening ``metric`` runs on (its refined metric holds after
    warmup too: ``post_warmup_state``, resumed runs), with clipped gradients where guarded."""
    estimator = whiten(stepper.batched, metric) if stepper.refine else stepper.estimator
    if stepper.guard:  # a step-size kernel's step is bounded where the gradient runs away
        return with_clipped_gradient(estimator, gradient_clip_norm(estimator))
    return estimator


def kernel_step(
    stepper: Stepper,
    estimator: Estimator,
    iteration: Array,
    step_key: Array,
    i: Array,
    carry: tuple,
) -> tuple[tuple, Any]:
    """Step ``i`` of a draw from ``carry = ((kernel state, params, data evals, rejected
    steps), last Info)``, with the key ``fold_in(step_key, i)``.  A step that is not finite
    (or, guarded, that jumps past ``DIVERGENT_JUMP`` √D) is rejected, and in warmup a
    divergent step makes the params more cautious (``spec.stabilize``)."""
    spec = stepper.spec
    (kernel_state, params, evals, rejected), _ = carry
    new_state, info = stepper.kernel(
        jax.random.fold_in(step_key, i), kernel_state, estimator, params
    )
    keep = _finite(new_state)
    if stepper.guard:
        origin = (spec.moved_point or spec.position)(kernel_state)
        jump = jnp.linalg.norm(spec.position(new_state) - origin)
        keep = keep & (jump <= DIVERGENT_JUMP * math.sqrt(estimator.dim))
        shrink = ~keep & (iteration < stepper.num_warmup)
        params = jax.tree.map(lambda a, b: jnp.where(shrink, a, b), spec.stabilize(params), params)
    new_state = jax.tree.map(lambda a, b: jnp.where(keep, a, b), new_state, kernel_state)
    rejected = rejected + (~keep).astype(jnp.int32)
    return (new_state, params, evals + info.data_evals, rejected), info


def move(stepper: Stepper, unravel: Callable, state: Any) -> tuple[Any, Array]:
    """The chain's next draw: ``stepper.steps`` kernel steps (the draw is the last); also keys
    for the warmup stages.  ``unravel``: the model's flat x -> its unconstrained sites."""
    rng_key, step_key, *stage_keys = jax.random.split(state.rng_key, 4)
    estimator = estimator_of(stepper, state.metric)
    step = partial(kernel_step, stepper, estimator, state.iteration, step_key)
    start = ((state.kernel_state, state.params, 0, jnp.zeros((), jnp.int32)), info_of(state))
    if stepper.steps == 1:
        carry, info = step(0, start)
    else:  # the kernel is traced once, inside the loop
        carry, info = jax.lax.fori_loop(0, stepper.steps, step, start)
    kernel_state, params, evals, rejected = carry
    info = info._replace(data_evals=evals * estimator.cost_per_datum)
    diverging = rejected > 0
    moved = state._replace(
        z=unravel(state.metric.to_x(stepper.spec.position(kernel_state))),
        kernel_state=kernel_state,
        params=params,
        iteration=state.iteration + 1,
        diverging=diverging,
        num_diverging=state.num_diverging + diverging.astype(jnp.int32),
        rng_key=rng_key,
    )
    return with_info(moved, info), jnp.stack(stage_keys)


def adapt(stepper: Stepper, state: Any, keys: Array) -> Any:
    """The sampler's own warmup update after a warmup draw."""
    ends = stepper.window_ends
    window = WarmupWindow(state.iteration - 1, stepper.num_warmup, ends[-1] + 1 if ends else 0)
    kernel_state, params, adapt_state = stepper.spec.warmup(
        keys[0],
        state.kernel_state,
        state.params,
        state.adapt_state,
        info_of(state),
        estimator_of(stepper, state.metric),
        window,
    )
    return state._replace(kernel_state=kernel_state, params=params, adapt_state=adapt_state)


def collect(stepper: Stepper, state: Any, keys: Array) -> Any:
    """Add the draw to the chain's current metric window."""
    stats = metrics.accumulate(state.metric_stats, stepper.spec.position(state.kernel_state))
    return state._replace(metric_stats=stats)


def refine(stepper: Stepper, state: Any, keys: Array) -> Any:
    """At a window's end: the refined whitening, the position mapped to it, the kernel
    re-initialised there (its own warmup statistics carry over)."""
    spec = stepper.spec
    metric, shift, root, _ = metrics.refine(state.metric, state.metric_stats)
    position = metrics.map_position(spec.position(state.kernel_state), shift, root)
    estimator = estimator_of(stepper._replace(refine=True), metric)
    kernel_state = spec.init(keys[1], position, estimator, state.params)
    return state._replace(
        kernel_state=kernel_state, metric=metric, metric_stats=metrics.init_stats(metric)
    )


def _stage(when: Array, update: Callable, states: Any, keys: Array) -> Any:
    return jax.lax.cond(when, jax.vmap(update), lambda s, k: s, states, keys)


def keep_for_check(stepper: Stepper, post: Array, state: Any, keys: Array) -> Any:
    """Keep the chain's draw (post-warmup draw number ``post``) and its score for the check."""
    x = state.metric.to_x(stepper.spec.position(state.kernel_state))
    key = jax.random.fold_in(keys[0], 1)
    monitor = keep_draw(state.monitor, stepper.plan, stepper.scores, x, post, key)
    return state._replace(monitor=monitor)


def follow_run(stepper: Stepper, iteration: Array, states: Any, keys: Array) -> Any:
    """The self-check's part of a draw: keep every ``stride``-th draw after warmup, count the
    rejected steps and a PDMP's capped intervals, and at the run's last draw hand the kept
    draws to ``stepper.report``."""
    plan = stepper.plan
    post = iteration - plan.num_warmup
    keep = (post >= 0) & (post % plan.stride == plan.stride - 1)
    states = _stage(keep, partial(keep_for_check, stepper, post), states, keys)
    monitor = states.monitor
    capped = getattr(states, "interval_capped", None)  # a PDMP's Info field
    if capped is not None:
        monitor = count_capped(plan, iteration, monitor, capped, stepper.report.warn_capped)
    rejected = monitor.rejected + ((post >= 0) & states.diverging).astype(jnp.int32)
    last = report_at_last_draw(plan, post, monitor, rejected, stepper.report)
    return states._replace(monitor=monitor._replace(rejected=jnp.where(last, 0, rejected)))


def sample_chains(stepper: Stepper, unravel: Callable[[Array], dict], states: Any) -> Any:
    """One draw of every chain (module docstring); ``states`` have a leading chain axis.
    ``unravel``: the model's flat x -> its unconstrained sites."""
    spec, num_warmup, ends = stepper.spec, stepper.num_warmup, stepper.window_ends
    iteration = states.iteration[0]  # the chains step together
    chain_move = partial(move, stepper, unravel)
    if spec.chains_in_turn:
        states, keys = jax.lax.map(chain_move, states)
    else:
        states, keys = jax.vmap(chain_move)(states)
    if spec.warmup is not None and num_warmup > 0:
        states = _stage(iteration < num_warmup, partial(adapt, stepper), states, keys)
    info = jax.vmap(lambda s: model_time_averages(info_of(s), s.metric))(states)
    states = jax.vmap(with_info)(states, info)
    if ends:
        window = (iteration >= stepper.first_window_draw) & (iteration <= ends[-1])
        states = _stage(window, partial(collect, stepper), states, keys)
        at_end = jnp.isin(iteration, jnp.asarray(ends))
        states = _stage(at_end, partial(refine, stepper), states, keys)
    if stepper.plan is not None:
        states = follow_run(stepper, iteration, states, keys)
    return states


@jax.jit
def stack_chains(*chains: Any) -> Any:
    """The chains' states stacked along a leading axis, as one program (not one per field)."""
    return jax.tree.map(lambda *fields: jnp.stack(fields), *chains)


__all__ = ["Stepper", "model_time_averages", "sample_chains", "stack_chains", "zeros_like_shapes"]
