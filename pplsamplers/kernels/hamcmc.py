"""Hessian-approximated MCMC (HAMCMC): stochastic quasi-Newton Langevin (Şimşekli et al. 2016).

Alg. 1 / eq. (10): for t > 2M, with a fresh minibatch Ω_t and z ~ N(0, I),

    θ_t = θ_{t−M} − ε_t H_t ∇Ũ_{Ω_t}(θ_{t−M}) + √(2ε_t) S_t z,          S_t S_tᵀ = H_t,
    s_t = θ_t − θ_{t−M},   y_t = ∇Ũ_{Ω_t}(θ_t) − ∇Ũ_{Ω_t}(θ_{t−M}) + λ s_t.

``H_t`` is the L-BFGS inverse Hessian (eq. 6, ``H⁰ = γ I``) of the M−1 pairs
τ = t−M+1, …, t−1.  None of them involves θ_{t−M}, so H_t does not depend on the point it
moves and the Langevin correction term Γ (eq. 9) vanishes (§3.2, App. A): each of the M
interleaved sub-chains is a preconditioned SGLD with a state-independent metric.  Both
gradients of a pair use the same minibatch (data consistency), so a step costs two
minibatch gradients, ``data_evals = 2n``.  With the full data (n = N) the "minibatch" is the
same at every step, and the pair's gradient at θ_t is exactly the one the sub-chain's next
step needs at its θ_{t−M}: the state keeps the gradients of the M states it holds, and a
step costs one data pass, ``data_evals = n``.  ``λ`` is the trust-region shift ``y += λ s``
(L-BFGS then approximates ``(∇²U + λI)⁻¹``); pairs with ``sᵀy ≤ 0`` are skipped and counted,
and so are pairs whose y points more than 60° away from s (``MIN_PAIR_COSINE``, a cautious
update beyond the paper).
``H_t g`` uses the two-loop recursion (O(MD)) and ``S_t z`` the product form of eq. (11)
(O(M²D), with the erratum fixed, see :mod:`pplsamplers.kernels.lbfgs`).  No D×D matrix is
formed: memory is O(MD).

Start (Alg. 1 takes θ_0, …, θ_{2M} as input): the first 2M states are SGLD steps
θ_t = θ_{t−M} − ε' ∇Ũ(θ_{t−M}) + √(2ε') ξ, i.e. M interleaved SGLD chains of two steps from
θ_0 (θ_{t−M} := θ_0 for t < M), with ε' = γ ε_t by default (SGLD with the initial metric
H⁰ = γI).  They use the same two gradients and fill the pair memory, so every step costs
exactly 2n data.
Step size: constant, or ε_t = (a/t_k)^0.51 with t_k = M⌈t/M⌉, constant within each block of
M steps as Condition 1 requires.

The state stores the last M states and M−1 pairs in ring buffers indexed by ``t mod M`` and
``t mod (M−1)``.  BlackJAX-style two levels: :func:`init` and :func:`build_kernel` take the
structural options (M, the schedule's form); ε or a, κ, γ, λ and the start's step are
:class:`HAMCMCParams`, traced, so a warmup or a vmapped grid changes them without recompiling.

When the preconditioning pays (measured, ``benchmarks/hamcmc_linear_gaussian.py``): a pair
``s = θ_t − θ_{t−M}`` is one sub-chain step, drift ``εHg`` plus noise ``√(2ε) S z``.  While the
chain is far from the posterior mass (many posterior sds, e.g. large N) the drift dominates, the
pairs follow the descent directions and H acts as in L-BFGS optimisation: the base step ``γε``
may then exceed SGLD's stable step by several times.  Near stationarity in high D the noise
dominates, s is nearly isotropic, and M − 1 ≤ 2 pairs only partly deflate the stiffest
direction, so ``γε`` stays near SGLD's stable step and HAMCMC behaves like SGLD.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers.kernels import lbfgs
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey

Schedule = Literal["constant", "polynomial"]


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
        ``(M−1,)``: the pair is filled and passed the curvature test ``sᵀy > 0``.
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
    ``skipped_pairs`` is 1 if this step's new pair failed ``sᵀy > 0`` (its sum over draws is
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
    potential: SubsampledPotential,
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
    if potential.full_batch:
        gradient = potential.grad(position, potential.sample_indices(rng_key))
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


def step_size_at(
    t: Array,
    step_size: Array | float,
    memory_size: int,
    schedule: Schedule,
    exponent: Array | float = 0.51,
) -> Array:
    """ε_t: ``step_size`` (constant), or ``(step_size / (M⌈t/M⌉))^exponent`` (polynomial).

    The polynomial schedule is the paper's ε_t = (a/t)^0.51 (§4.1), held constant within each
    block ⌊(t−1)/M⌋ as Condition 1 requires.
    """
    if schedule == "constant":
        return jnp.asarray(step_size, dtype=jnp.result_type(float))
    block_end = memory_size * ((t - 1) // memory_size + 1)
    return (step_size / block_end.astype(jnp.result_type(float))) ** exponent


class ScheduledStep(NamedTuple):
    """What every scheduled SG step starts with (:func:`scheduled_step`)."""

    iteration: Array
    """t = ``state.iteration`` + 1."""
    step_size: Array
    """ε_t in the position's dtype."""
    minibatch: Array
    """Indices of this step's minibatch."""
    noise: Array
    """ξ ~ N(0, I), shaped like the position."""


def scheduled_step(
    rng_key: PRNGKey,
    state: NamedTuple,
    potential: SubsampledPotential,
    params: NamedTuple,
    memory_size: int,
    schedule: Schedule,
) -> ScheduledStep:
    """Start a scheduled SG step: t, ε_t of ``params`` (fields ``step_size`` and
    ``decay_exponent``, :func:`step_size_at`), a minibatch and Gaussian noise, one key each.

    ``state`` has fields ``position`` and ``iteration`` (HAMCMC's and SGRLD's states).
    """
    batch_key, noise_key = jax.random.split(rng_key)
    t = state.iteration + 1
    dtype = state.position.dtype
    epsilon = step_size_at(t, params.step_size, memory_size, schedule, params.decay_exponent)
    noise = jax.random.normal(noise_key, state.position.shape, dtype)
    return ScheduledStep(t, epsilon.astype(dtype), potential.sample_indices(batch_key), noise)


def chronological(buffer: Array, t: Array) -> Array:
    """Pairs τ = t−K, …, t−1 of a ``(K, ...)`` ring buffer (slot ``τ mod K``), oldest first."""
    num = buffer.shape[0]
    return jnp.take(buffer, (t + jnp.arange(num)) % num, axis=0)


MIN_PAIR_COSINE = 0.5
"""A pair is kept only if cos∠(s, y) ≥ 0.5.  The inverse-BFGS update from one pair,
H = (I − ρ s yᵀ) H⁰ (I − ρ y sᵀ) + ρ s sᵀ with ρ = 1/sᵀy, stretches H⁰ by up to
(1 + 1/cos∠(s, y))² in its first term; the second adds |s|²/sᵀy, which the angle does not
bound (the damping λ does where the curvature along s is not negative: y = Δg + λs).  For a
quadratic U in whitened coordinates y = (∇²U + λI)s points along s, but on a steep, curved
tail a pair with cos 0.2 stretched H 36-fold, and the sub-chain's every later step was too
long and rejected (it froze there).  With cos ≥ 0.5 the first term's stretch is at most
9-fold."""


def moved_point(state: HAMCMCState) -> Array:
    """θ_{t−M}, the point the next step moves (eq. 10), not the last state θ_{t−1}: the M
    interleaved sub-chains may be far apart, so a step's length is measured from here (the
    adapter's divergence guard)."""
    memory = state.history.shape[0]
    return state.history[(state.iteration + 1) % memory]


def build_kernel(
    memory_size: int = 2, schedule: Schedule = "constant"
) -> Callable[
    [PRNGKey, HAMCMCState, SubsampledPotential, HAMCMCParams], tuple[HAMCMCState, HAMCMCInfo]
]:
    """Build a HAMCMC step (Alg. 1, eqs. 6, 10, 11); the tunables come in :class:`HAMCMCParams`.

    Parameters
    ----------
    memory_size
        M ≥ 2: each step moves θ_{t−M}; H_t uses the M−1 most recent pairs.
    schedule
        ``"constant"`` or ``"polynomial"`` step size (see :func:`step_size_at`).

    Returns
    -------
    kernel(rng_key, state, potential, params) -> (state, info)
        One step costs two minibatch gradients (2n data), one data pass with the full data.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_potential
    >>> pot = tiny_potential(3)
    >>> params = HAMCMCParams(step_size=0.1)
    >>> kernel = build_kernel(memory_size=2)
    >>> state = init(jax.random.key(0), jnp.zeros(3), pot, params, memory_size=2)
    >>> for key in jax.random.split(jax.random.key(1), 6):
    ...     state, info = kernel(key, state, pot, params)
    >>> state.position.shape, int(info.data_evals), bool(info.sgld_start)  # full data: one pass
    ((3,), 1, False)
    """
    M = memory_size

    def kernel(
        rng_key: PRNGKey, state: HAMCMCState, potential: SubsampledPotential, params: HAMCMCParams
    ) -> tuple[HAMCMCState, HAMCMCInfo]:
        t, epsilon, idx, z = scheduled_step(rng_key, state, potential, params, M, schedule)
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
        full = potential.full_batch  # static
        grad_back = state.history_gradients[slot] if full else potential.grad(theta_back, idx)
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
        # (Under the adapter's gradient clip both gradients may be clipped, so y is then no
        # secant of U; such pairs arise only far in a steep tail, and MIN_PAIR_COSINE drops
        # the misaligned ones.)
        grad_new = potential.grad(theta, idx)
        s_new = theta - theta_back
        y_new = grad_new - grad_back + params.damping * s_new
        s_y = jnp.dot(s_new, y_new)
        formed = t >= M  # θ_{t−M} is θ_0 or a later state, not a placeholder
        alignment = MIN_PAIR_COSINE * jnp.linalg.norm(s_new) * jnp.linalg.norm(y_new)
        curvature_ok = jnp.isfinite(s_y) & (s_y > 0) & (s_y >= alignment)
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


__all__ = [
    "MIN_PAIR_COSINE",
    "moved_point",
    "HAMCMCInfo",
    "HAMCMCParams",
    "HAMCMCState",
    "build_kernel",
    "chronological",
    "init",
    "ScheduledStep",
    "scheduled_step",
    "step_size_at",
]
