"""Hessian-approximated MCMC (HAMCMC): stochastic quasi-Newton Langevin (Şimşekli et al. 2016).

Alg. 1 / eq. (10): for t > 2M, with a fresh minibatch Ω_t and z ~ N(0, I),

    θ_t = θ_{t−M} − ε_t H_t ∇Ũ_{Ω_t}(θ_{t−M}) + √(2ε_t) S_t z,          S_t S_tᵀ = H_t,
    s_t = θ_t − θ_{t−M},   y_t = ∇Ũ_{Ω_t}(θ_t) − ∇Ũ_{Ω_t}(θ_{t−M}) + λ s_t.

``H_t`` is the L-BFGS inverse Hessian (eq. 6, ``H⁰ = γ I``) of the M−1 pairs
τ = t−M+1, …, t−1.  None of them involves θ_{t−M}, so H_t does not depend on the point it
moves and the Langevin correction term Γ (eq. 9) vanishes (§3.2, App. A): each of the M
interleaved sub-chains is a preconditioned SGLD with a state-independent metric.  Both
gradients of a pair use the same minibatch (data consistency), so a step costs two
minibatch gradients, ``data_evals = 2n``; with the full data the pair's gradient at θ_t is
the one the sub-chain's next step needs at its θ_{t−M}, so the state keeps the gradients of
the M states it holds and a step costs one data pass, ``data_evals = n``.  ``λ`` is the
trust-region shift (L-BFGS then approximates ``(∇²U + λI)⁻¹``); pairs with ``sᵀy ≤ 0`` are
skipped and counted, and so are pairs made from a clipped gradient whose y points more than
60° away from s (:data:`~pplsamplers.kernels.sgmcmc.lbfgs.MIN_PAIR_COSINE`, a cautious
update beyond the paper).  ``H_t g`` uses the two-loop recursion (O(MD)) and ``S_t z`` the
product form of eq. (11) (O(M²D), with the erratum fixed, see
:mod:`~pplsamplers.kernels.sgmcmc.lbfgs`); no D×D matrix is formed: memory is O(MD).

Start (Alg. 1 takes θ_0, …, θ_{2M} as input): the first 2M states are SGLD steps
θ_t = θ_{t−M} − ε' ∇Ũ(θ_{t−M}) + √(2ε') ξ, M interleaved SGLD chains of two steps from θ_0
(θ_{t−M} := θ_0 for t < M), with ε' = γ ε_t by default (SGLD with the metric H⁰ = γI); they
use the same two gradients and fill the pair memory at the same cost per step.  Step size:
constant, or ε_t = (a/t_k)^0.51 with t_k = M⌈t/M⌉, constant within each block of M steps as
Condition 1 requires.  States and pairs live in ring buffers (``t mod M``, ``t mod (M−1)``).
ε or a, κ, γ, λ and the start's step are :class:`HAMCMCParams`, traced (a warmup or a vmapped
grid changes them without recompiling); M and the schedule's form are structural.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.estimator import Estimator
from pplsamplers.kernels.sgmcmc import lbfgs
from pplsamplers.kernels.sgmcmc import step_size as steps
from pplsamplers.kernels.sgmcmc.step_size import SCHEDULES, Schedule, scheduled_step
from pplsamplers.kernels.spec import KernelSpec, WarmupContext
from pplsamplers.types import Array, PRNGKey


class HAMCMCState(NamedTuple):
    """Everything the next step needs (O(MD) memory).

    Attributes
    ----------
    position
        The most recent sample θ_{t−1}, shape ``(D,)``.
    history
        Ring buffer ``(M, D)`` of θ_{t−M}, …, θ_{t−1}; θ_τ lives in slot ``τ mod M``.
    s_memory, y_memory
        Ring buffers ``(M−1, D)`` of the pairs; pair τ lives in slot ``τ mod (M−1)``.
    pair_valid
        ``(M−1,)``: the pair is filled and passed the curvature test (``sᵀy > 0``, and
        ``MIN_PAIR_COSINE`` where a gradient was clipped).
    pair_time
        ``(M−1,)`` int: the τ of each stored pair (−1 while empty).
    iteration
        Number of steps taken so far, ``t − 1`` for the next step t.
    num_skipped_pairs
        Running count of pairs rejected by the curvature test.
    history_gradients
        ``(M, D)``: ∇U at each state of ``history`` (same slots) with the full data, where a
        step reuses it instead of recomputing ∇U(θ_{t−M}); zeros with minibatches.
    """

    position: Array
    history: Array
    s_memory: Array
    y_memory: Array
    pair_valid: Array
    pair_time: Array
    iteration: Array
    num_skipped_pairs: Array
    history_gradients: Array


class HAMCMCInfo(NamedTuple):
    """Per-step diagnostics.

    ``data_evals`` is per-datum likelihood terms evaluated (2n: two minibatch gradients; n
    with the full data, whose gradient at θ_{t−M} is kept from the step that made it);
    ``skipped_pairs`` is 1 if this step's new pair failed the curvature test (its sum over draws is
    the number skipped); ``step_size`` is ε_t; ``curvature`` is the new pair's ``sᵀy``;
    ``sgld_start`` flags the first 2M steps; ``num_skipped_pairs`` is the running count.
    """

    data_evals: Array
    skipped_pairs: Array
    step_size: Array
    curvature: Array
    sgld_start: Array
    num_skipped_pairs: Array


class HAMCMCParams(NamedTuple):
    """Tunables (traced): the step size, the schedule, H⁰ = γI and the trust-region shift.

    Attributes
    ----------
    step_size
        ε > 0 for ``schedule="constant"``; ``a`` of ε_t = (a/t)^κ for ``"polynomial"``.
    initial_scale
        γ > 0 of H⁰ = γI.  ε γ acts as the SGLD step size in directions the pairs miss.
    damping
        λ ≥ 0, the trust-region shift y ← y + λ s (keeps H positive definite under noise).
    decay_exponent
        κ of the polynomial schedule (the paper's 0.51).
    sgld_step_size
        Step size of the first 2M SGLD steps; ``None`` uses γ ε_t (SGLD with metric H⁰).
    """

    step_size: Array | float
    initial_scale: Array | float = 1.0
    damping: Array | float = 1.0
    decay_exponent: Array | float = 0.51
    sgld_step_size: Array | float | None = None


def init(
    rng_key: PRNGKey,
    position: Array,
    estimator: Estimator,
    params: HAMCMCParams,
    *,
    memory_size: int = 2,
) -> HAMCMCState:
    """Initial state θ_0 = ``position``, empty pair memory (and, with the full data, ∇U(θ_0)
    for every slot of the history: one data pass).

    Parameters
    ----------
    position
        Flat starting point, shape ``(D,)``.
    memory_size
        M ≥ 2 (the same value as given to :func:`build_kernel`).
    """
    position = jnp.asarray(position)
    num_pairs = memory_size - 1
    empty = jnp.zeros((num_pairs,) + position.shape, position.dtype)
    if estimator.full_batch:
        gradient = estimator.grad(position, estimator.sample_indices(rng_key))
    else:
        gradient = jnp.zeros_like(position)
    return HAMCMCState(
        position=position,
        history=jnp.broadcast_to(position, (memory_size,) + position.shape),
        s_memory=empty,
        y_memory=empty,
        pair_valid=jnp.zeros(num_pairs, bool),
        pair_time=jnp.full(num_pairs, -1, jnp.int32),
        iteration=jnp.asarray(0, jnp.int32),
        num_skipped_pairs=jnp.asarray(0, jnp.int32),
        history_gradients=jnp.broadcast_to(gradient, (memory_size,) + position.shape),
    )


def chronological(buffer: Array, t: Array) -> Array:
    """Pairs τ = t−K, …, t−1 of a ``(K, ...)`` ring buffer (slot ``τ mod K``), oldest first."""
    num = buffer.shape[0]
    return jnp.take(buffer, (t + jnp.arange(num)) % num, axis=0)


def moved_point(state: HAMCMCState) -> Array:
    """θ_{t−M}, the point the next step moves (eq. 10), not the last state θ_{t−1}: the M
    interleaved sub-chains may be far apart, so a step's length is measured from here (the
    adapter's divergence guard)."""
    memory = state.history.shape[0]
    return state.history[(state.iteration + 1) % memory]


def build_kernel(
    memory_size: int = 2, schedule: Schedule = "constant"
) -> Callable[[PRNGKey, HAMCMCState, Estimator, HAMCMCParams], tuple[HAMCMCState, HAMCMCInfo]]:
    """Build a HAMCMC step (Alg. 1, eqs. 6, 10, 11); the tunables come in :class:`HAMCMCParams`.

    Parameters
    ----------
    memory_size
        M ≥ 2: each step moves θ_{t−M}; H_t uses the M−1 most recent pairs.
    schedule
        ``"constant"`` or ``"polynomial"`` step size (see :func:`~pplsamplers.kernels.sgmcmc.step_size.step_size_at`).

    Returns
    -------
    kernel(rng_key, state, estimator, params) -> (state, info)
        One step costs two minibatch gradients (2n data), one data pass with the full data.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(3)
    >>> params = HAMCMCParams(step_size=0.1)
    >>> kernel = build_kernel(memory_size=2)
    >>> state = init(jax.random.key(0), jnp.zeros(3), est, params, memory_size=2)
    >>> for key in jax.random.split(jax.random.key(1), 6):
    ...     state, info = kernel(key, state, est, params)
    >>> state.position.shape, int(info.data_evals), bool(info.sgld_start)  # full data: one pass
    ((3,), 1, False)
    """
    M = memory_size

    def kernel(
        rng_key: PRNGKey, state: HAMCMCState, estimator: Estimator, params: HAMCMCParams
    ) -> tuple[HAMCMCState, HAMCMCInfo]:
        t, epsilon, idx, z = scheduled_step(rng_key, state, estimator, params, M, schedule)
        dtype = state.position.dtype
        initial_scale = jnp.asarray(params.initial_scale, dtype)
        sgld_start = t <= 2 * M

        # θ_{t−M} sits in slot t mod M; pairs τ = t−M+1..t−1, none involving θ_{t−M}.
        slot = t % M
        theta_back = state.history[slot]
        s_pairs = chronological(state.s_memory, t)
        y_pairs = chronological(state.y_memory, t)
        valid = chronological(state.pair_valid, t)

        # eq. (10): move θ_{t−M}.  In the start (t ≤ 2M) the move is SGLD with step ε'.
        # With the full data ∇U(θ_{t−M}) was computed by the step that made θ_{t−M} (or init).
        full = estimator.full_batch  # static
        grad_back = state.history_gradients[slot] if full else estimator.grad(theta_back, idx)
        preconditioned_grad = lbfgs.inverse_hessian_product(
            s_pairs, y_pairs, valid, initial_scale, grad_back
        )
        factors = lbfgs.sqrt_factors(s_pairs, y_pairs, valid, initial_scale)
        noise = lbfgs.sqrt_product(factors, initial_scale, z)
        start_eps = (
            initial_scale * epsilon
            if params.sgld_step_size is None  # pytree structure: a Python-level choice
            else jnp.asarray(params.sgld_step_size, dtype)
        )
        drift = jnp.where(sgld_start, start_eps * grad_back, epsilon * preconditioned_grad)
        diffusion = jnp.where(
            sgld_start, jnp.sqrt(2 * start_eps) * z, jnp.sqrt(2 * epsilon) * noise
        )
        theta = theta_back - drift + diffusion

        # memory pair on the same minibatch Ω_t (Alg. 1 line 8); trust-region shift y += λ s.
        grad_new = estimator.grad(theta, idx)
        s_new = theta - theta_back
        y_new = grad_new - grad_back + params.damping * s_new
        s_y = jnp.dot(s_new, y_new)
        formed = t >= M  # θ_{t−M} is θ_0 or a later state, not a placeholder
        curvature_ok = (
            jnp.isfinite(s_y)
            & (s_y > 0)
            & lbfgs.secant_trusted(s_new, y_new, s_y, grad_back, grad_new, estimator.max_grad_norm)
        )
        skipped = formed & ~curvature_ok

        pair_slot = t % (M - 1)
        new_state = HAMCMCState(
            position=theta,
            history=state.history.at[slot].set(theta),
            s_memory=state.s_memory.at[pair_slot].set(s_new),
            y_memory=state.y_memory.at[pair_slot].set(y_new),
            pair_valid=state.pair_valid.at[pair_slot].set(formed & curvature_ok),
            pair_time=state.pair_time.at[pair_slot].set(t.astype(jnp.int32)),
            iteration=t,
            num_skipped_pairs=state.num_skipped_pairs + skipped.astype(jnp.int32),
            history_gradients=(
                state.history_gradients.at[slot].set(grad_new) if full else state.history_gradients
            ),
        )
        info = HAMCMCInfo(
            data_evals=jnp.asarray((1 if full else 2) * idx.shape[0]),
            skipped_pairs=skipped.astype(jnp.int32),
            step_size=epsilon,
            curvature=s_y,
            sgld_start=sgld_start,
            num_skipped_pairs=new_state.num_skipped_pairs,
        )
        return new_state, info

    return kernel


@dataclass(frozen=True)
class HAMCMCOptions:
    """HAMCMC's options, validated once.

    Parameters
    ----------
    step_size : float or "auto", default "auto"
        ε > 0 (``schedule="constant"``), or ``a`` of ε_t = (a/t)^0.51 (``"polynomial"``);
        ``"auto"`` (default): 0.1 in the whitened coordinates of the shared warmup, less in
        high D (:func:`~pplsamplers.kernels.sgmcmc.step_size.auto_langevin_step`), with the
        default ``steps_per_sample`` growing in proportion.  The paper tunes ε by grid search
        and does not adapt it, so warmup only runs the chain.
    memory_size : int, default 2
        M ≥ 2.  Each draw is the most recent θ_t; consecutive draws come from M interleaved
        sub-chains, so the default ``steps_per_sample`` is M times the step-size kernels'.
    damping : float, default 1.0
        λ ≥ 0, the trust-region shift y ← y + λ s.
    initial_scale : float, default 1.0
        γ > 0, H⁰ = γI.  ``step_size * initial_scale`` is the SGLD-like step in directions
        that the pairs do not cover; keep it below 2 / (largest curvature).
    schedule : {"constant", "polynomial"}, default "constant"
        ``"constant"`` or ``"polynomial"`` (held constant within blocks of M steps).
    sgld_step_size : float or None, default None
        Step of the first 2M SGLD steps (default γ ε_t).
    """

    step_size: float | str = "auto"
    memory_size: int = 2
    damping: float = 1.0
    initial_scale: float = 1.0
    schedule: Schedule = "constant"
    sgld_step_size: float | None = None

    def __post_init__(self) -> None:
        validation.switches(self)
        validation.positive_or_auto("step_size", self.step_size)
        memory = validation.positive_int("memory_size", self.memory_size)
        validation.at_least("memory_size", memory, 2)  # the pairs then exclude θ_(t−M)
        validation.positive("damping", self.damping, allow_zero=True)
        validation.positive("initial_scale", self.initial_scale)
        validation.one_of("schedule", self.schedule, SCHEDULES)
        validation.optional_positive("sgld_step_size", self.sgld_step_size)


def declare(options: HAMCMCOptions) -> KernelSpec:
    """The declaration of HAMCMC to the adapter (no warmup of its own: the first 2M steps are
    SGLD, Alg. 1)."""
    memory = options.memory_size

    def default_params(
        rng_key: PRNGKey, estimator: Estimator, context: WarmupContext
    ) -> HAMCMCParams:
        as_array = partial(jnp.asarray, dtype=context.dtype)
        start = options.sgld_step_size
        return HAMCMCParams(
            step_size=as_array(steps.langevin_step_size(options.step_size, estimator.dim)),
            initial_scale=as_array(options.initial_scale),
            damping=as_array(options.damping),
            decay_exponent=as_array(0.51),
            sgld_step_size=None if start is None else as_array(start),
        )

    def describe(info: HAMCMCInfo) -> str:
        skipped = int(jnp.max(info.num_skipped_pairs))
        return f"ε {float(jnp.mean(info.step_size)):.2e}, skipped pairs {skipped}, M {memory}"

    return steps.step_size_spec(
        options.step_size == "auto",
        init=partial(init, memory_size=memory),
        build_kernel=lambda: build_kernel(memory, options.schedule),
        default_params=default_params,
        diagnostic_fields=("data_evals", "skipped_pairs", "step_size", "curvature", "sgld_start"),
        describe=describe,
        # each step moves one of the M interleaved sub-chains
        steps_per_sample=steps.STEP_SIZE_STEPS_PER_SAMPLE * memory,
        steps_per_sample_at=(
            (lambda dim: steps.auto_langevin_steps(dim) * memory)
            if options.step_size == "auto"
            else None
        ),
        moved_point=moved_point,
    )


Options, Info = HAMCMCOptions, HAMCMCInfo  # the options (NumPyro class) and diagnostics

__all__ = [
    "Info",
    "Options",
    "HAMCMCInfo",
    "HAMCMCOptions",
    "HAMCMCParams",
    "HAMCMCState",
    "build_kernel",
    "chronological",
    "declare",
    "init",
    "moved_point",
]
