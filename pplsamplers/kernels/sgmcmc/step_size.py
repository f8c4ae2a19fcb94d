"""What the step-size kernels (SGLD, pSGLD, cSGLD, SGRLD, SGBD, HAMCMC) share: how long a
fixed step may be, how many steps make a draw, and when a step has diverged.

A fixed step ε is biased: it widens every whitened coordinate's variance by a relative b
(unadjusted Langevin on a Gaussian of curvature h: b = εh/2; Barker: b ≈ σ²/4).  Per
coordinate that is harmless, but the log density, and any quantity coupled to all D
coordinates such as a hierarchical scale, sums the D biases: its mean moves by D b / 2
against a posterior sd of √(D / 2), that is by b √(D / 2) sds.  A step tuned at small D is
therefore wrong in the hundreds, so the automatic steps keep that *coherent* shift within
:data:`COHERENT_BIAS` sds (:func:`coherent_variance_bias`), and take proportionally more steps
per draw so that a draw covers the same time (:func:`dilated_steps`).  The schedule of
HAMCMC's and SGRLD's step (constant, or ε_t = (a/t)^κ) is here too.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers.estimator import Estimator
from pplsamplers.kernels.spec import KernelSpec
from pplsamplers.types import Array, PRNGKey

Schedule = Literal["constant", "polynomial"]
SCHEDULES = ("constant", "polynomial")

STEP_SIZE_STEPS_PER_SAMPLE = 10
"""Default steps per draw: one minibatch step per draw mixes too slowly to give a useful ESS
in a few hundred draws, while ten cost what a PDMP draw costs (about ten proposals); the
stationary distribution, and so the bias, is unchanged."""

COHERENT_BIAS = 0.1
"""The automatic step keeps its predicted shift of the log density within this many
posterior sds (half what the self-check's coherent scale error flags)."""

BARKER_VARIANCE_BIAS = 0.27
"""SGBD's stationary variance on N(0, 1) is 1 + bσ² with b → 1/4 as σ → 0 (the second-moment
balance of the Barker move); at the step sizes used (σ = 0.4–0.7) b is a little above that
limit (``tests/statistical/test_sgbd.py``), and the larger value keeps the budget on the safe
side."""

MAX_STEP_DILATION = 10.0
""":func:`dilated_steps` spends at most ten times the default steps per draw."""

AUTO_LANGEVIN_STEP = 0.1
"""The automatic Langevin step in whitened coordinates (unit curvature), before the coherent
bias budget."""

DIVERGENT_JUMP = 10.0
"""A step that moves more than this many √D in whitened coordinates (ten diameters of a
unit-scale posterior) is divergent: it is rejected, and in warmup the step is halved.  A
stable step moves about √(2εD) ≤ 0.5 √D; an unstable one grows geometrically and passes the
limit a few steps after it starts, long before it overflows."""

GRADIENT_LIMIT = 10.0
"""Minibatch gradients are clipped at this many times their norm in the bulk of the whitened
posterior (:func:`gradient_clip_norm`): rejecting a long step cannot help a chain that sits
where the gradient is steep, since every later step from there is as long."""


def dilated_steps(slowdown: float) -> int:
    """Steps per draw for an automatic step whose diffusion per step is ``slowdown`` times
    smaller than at small D, so that a draw covers the same time as
    :data:`STEP_SIZE_STEPS_PER_SAMPLE` steps there (at most :data:`MAX_STEP_DILATION` times).

    >>> dilated_steps(1.0), dilated_steps(2.6), dilated_steps(50.0)
    (10, 26, 100)
    """
    factor = min(max(float(slowdown), 1.0), MAX_STEP_DILATION)
    return math.ceil(round(STEP_SIZE_STEPS_PER_SAMPLE * factor, 6))


def coherent_variance_bias(dim: int) -> float:
    """The largest relative variance bias b per whitened coordinate whose sum over ``dim``
    coordinates moves the log density by :data:`COHERENT_BIAS` of its sd: 0.1 √(2 / D).

    >>> round(coherent_variance_bias(2), 3), round(coherent_variance_bias(200), 3)
    (0.1, 0.01)
    """
    return COHERENT_BIAS * math.sqrt(2.0 / max(int(dim), 1))


def coherent_step_limit(dim: int, curvature_trace: float) -> float:
    """The largest Langevin step whose bias, summed over ``dim`` coordinates, moves the log
    density by at most :data:`COHERENT_BIAS` sds: the mean relative variance bias ε tr(H)/(2D)
    stays within :func:`coherent_variance_bias`, so ε ≤ 2 b D / tr(H) (about 0.28/√D in
    whitened coordinates, where tr H = D).

    >>> round(coherent_step_limit(2, 2.0), 3), round(coherent_step_limit(300, 300.0), 4)
    (0.2, 0.0163)
    """
    return 2.0 * coherent_variance_bias(dim) * dim / max(curvature_trace, 1e-12)


def auto_langevin_step(dim: int) -> float:
    """``step_size="auto"`` of cSGLD, SGRLD and HAMCMC: :data:`AUTO_LANGEVIN_STEP`, or the
    coherent bias budget in whitened coordinates (tr H = D) where that is smaller.

    >>> auto_langevin_step(8), round(auto_langevin_step(300), 4)
    (0.1, 0.0163)
    """
    return min(AUTO_LANGEVIN_STEP, coherent_step_limit(dim, float(dim)))


def langevin_step_size(step_size: float | str, dim: int) -> float:
    """A Langevin kernel's ε: ``step_size``, or :func:`auto_langevin_step` for ``"auto"``."""
    return auto_langevin_step(dim) if step_size == "auto" else float(step_size)


def auto_langevin_steps(dim: int) -> int:
    """Default steps per draw with an automatic Langevin step (:func:`dilated_steps` of the
    factor by which the budget shrinks the step below :data:`AUTO_LANGEVIN_STEP`).

    >>> auto_langevin_steps(5), auto_langevin_steps(53), auto_langevin_steps(300)
    (10, 26, 62)
    """
    return dilated_steps(AUTO_LANGEVIN_STEP / auto_langevin_step(dim))


def gradient_clip_norm(estimator: Estimator) -> float:
    """:data:`GRADIENT_LIMIT` × the minibatch gradient's norm in the bulk of a whitened
    posterior: there ‖∇U‖ ≈ √D, and a plain minibatch estimator adds noise of variance about
    N/n per coordinate, so the bulk norm is √(D (1 + N/n)); with a control variate or the full
    data the noise is small there and the bulk norm is √D.

    Examples
    --------
    >>> from types import SimpleNamespace as E
    >>> gradient_clip_norm(E(dim=4, N=100, n=100, control_variate=False))
    20.0
    >>> round(gradient_clip_norm(E(dim=4, N=1000, n=10, control_variate=False)), 1)
    201.0
    """
    plain = not estimator.control_variate and estimator.n < estimator.N
    ratio = estimator.N / estimator.n if plain else 0.0
    return GRADIENT_LIMIT * math.sqrt(estimator.dim * (1.0 + ratio))


def halve_step_size(params: Any) -> Any:
    """``params`` with ``step_size`` halved: the step-size kernels' ``stabilize``."""
    return params._replace(step_size=params.step_size * 0.5)


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
    estimator: Estimator,
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
    return ScheduledStep(t, epsilon.astype(dtype), estimator.sample_indices(batch_key), noise)


def step_size_spec(automatic: bool, **declared: Any) -> KernelSpec:
    """A step-size kernel's :class:`~pplsamplers.kernels.spec.KernelSpec`: ``declared``, and what
    these kernels share: a divergent step halves the step size (:func:`halve_step_size`), and a
    draw is :data:`STEP_SIZE_STEPS_PER_SAMPLE` steps, more in high dimension where the
    ``automatic`` step shrinks (:func:`auto_langevin_steps`) unless ``declared`` says
    otherwise; the kernel is not ``exact`` (a fixed step's bias)."""
    shared = dict(
        stabilize=halve_step_size,
        steps_per_sample=STEP_SIZE_STEPS_PER_SAMPLE,
        steps_per_sample_at=auto_langevin_steps if automatic else None,
        exact=False,
    )
    return KernelSpec(**{**shared, **declared})


__all__ = [
    "AUTO_LANGEVIN_STEP",
    "SCHEDULES",
    "Schedule",
    "ScheduledStep",
    "BARKER_VARIANCE_BIAS",
    "COHERENT_BIAS",
    "DIVERGENT_JUMP",
    "GRADIENT_LIMIT",
    "MAX_STEP_DILATION",
    "STEP_SIZE_STEPS_PER_SAMPLE",
    "auto_langevin_step",
    "auto_langevin_steps",
    "coherent_step_limit",
    "coherent_variance_bias",
    "dilated_steps",
    "gradient_clip_norm",
    "halve_step_size",
    "langevin_step_size",
    "scheduled_step",
    "step_size_at",
    "step_size_spec",
]
