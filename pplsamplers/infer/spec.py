"""What a sampler declares to the one NumPyro adapter (DESIGN §3.2–3.3).

A sampler is a pure kernel (``kernels/<name>.py``: ``State``, ``Info``, ``Params``, ``init``,
``build_kernel``) plus a :class:`KernelSpec` that tells the generic
:class:`~pplsamplers.infer.adapter.SubsampledKernel` how to start it, which tunables it
begins with, and how its own warmup moves them.  The anchors are BlackJAX's two-level
kernels (``init`` / ``build_kernel``) and Optax's ``GradientTransformationExtraArgs``: a
kernel that needs more inputs declares them as arguments, never as function attributes.

Every callable is pure and traceable:

* ``init(rng_key, position, potential, params) -> State``
* ``kernel(rng_key, state, potential, params) -> (State, Info)`` (from ``build_kernel()``)
* ``default_params(rng_key, potential, mode) -> Params``: the tunables' starting values for
  this potential; ``mode`` is the posterior mode the shared warmup found, in the potential's
  coordinates (``None`` when it looked for none), so no sampler searches for it again.  The
  adapter hands kernels a *whitened* potential by default (DESIGN §8), in which the
  posterior has roughly unit scale, so unit-scale defaults are right there.
* ``warmup_init(state, params) -> AdaptState`` and
  ``warmup(rng_key, state, params, adapt_state, info, potential, window) -> (State, Params,
  AdaptState)``: one warmup update after each warmup step.  The adapter stops calling it when
  warmup ends, which freezes the params.  It may return a new state, for kernels that carry
  something derived from the params (a PDMP's thinning envelope), which must be reset when
  they change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey

Kernel = Callable[[PRNGKey, Any, SubsampledPotential, Any], tuple[Any, Any]]


class WarmupWindow(NamedTuple):
    """Where a warmup update happens: ``iteration`` (0-based, traced) of ``num_warmup``;
    ``settled``: the first iteration whose coordinates the chains' metric refinement
    (:mod:`pplsamplers.infer.metric`) no longer changes (0 when the metric is fixed)."""

    iteration: Array
    num_warmup: int
    settled: int = 0


def no_warmup_init(state: Any, params: Any) -> None:
    """``warmup_init`` of a sampler that adapts nothing."""
    return None


def position_field(state: Any) -> Array:
    """The flat (whitened) position of a kernel state with a ``position`` field."""
    return state.position


class KernelSpec(NamedTuple):
    """A sampler's declaration to :class:`~pplsamplers.infer.adapter.SubsampledKernel`.

    Attributes
    ----------
    init
        ``(rng_key, position, potential, params) -> State``.
    build_kernel
        ``() -> kernel``, with ``kernel(rng_key, state, potential, params) -> (State, Info)``;
        the structural options are already bound.
    default_params
        ``(rng_key, potential, mode) -> Params`` (``mode``: the shared warmup's, in the
        potential's coordinates, or ``None``).
    warmup
        ``(rng_key, state, params, adapt_state, info, potential, window) -> (State, Params,
        AdaptState)`` or ``None`` when the sampler adapts nothing of its own.
    warmup_init
        ``(state, params) -> AdaptState``.
    diagnostic_fields
        ``Info`` fields exported to NumPyro's extra fields and ArviZ's ``sample_stats``.
    describe
        ``Info -> str`` for the progress bar (fields may carry a chain axis), or ``None``.
    position
        ``State -> flat position``.
    start
        ``(rng_key, potential, params) -> position`` when the sampler has its own starting
        point (e.g. the Boomerang's reference mean), or ``None`` for the adapter's.
    chains_in_turn
        Whether vectorised chains step one after the other (``lax.map``) instead of as one
        batched program (``vmap``): for event-driven kernels, whose batched step would run
        both branches of every ``cond`` and every chain's loops as long as the slowest's.
    steps_per_sample
        Kernel steps per draw by default (the sampler's ``steps_per_sample=None``): 1 for
        the PDMPs, whose sample interval already spends about ten proposals per draw (more
        above 30 latents for the straight flows: :func:`~pplsamplers.infer.pdmp.radial_events`);
        :data:`STEP_SIZE_STEPS_PER_SAMPLE` for the step-size kernels.
    steps_per_sample_at
        ``dim -> steps per draw``, the default instead of ``steps_per_sample`` where the
        automatic step shrinks with the dimension (:func:`dilated_steps`); ``None``: the
        fixed ``steps_per_sample``.  A user's ``steps_per_sample`` overrides both.
    stabilize
        ``Params -> Params``, warmup's answer to a divergent step (one that is not finite,
        or that jumps more than :data:`DIVERGENT_JUMP` √D in whitened coordinates): the
        step is rejected and the params made more cautious (:func:`halve_step_size` for
        the step-size kernels).  ``None``: a divergent step is only rejected when it is
        not finite (event-driven kernels travel far by design).
    moved_point
        ``State -> flat position`` the next step moves, from which its jump is measured;
        ``None``: the state's ``position``.  HAMCMC's step moves θ_{t−M}, the state of
        another of its interleaved sub-chains: measured from θ_{t−1}, a step of a sub-chain
        far from the other was rejected again and again, and froze it there.
    """

    init: Callable[[PRNGKey, Array, SubsampledPotential, Any], Any]
    build_kernel: Callable[[], Kernel]
    default_params: Callable[[PRNGKey, SubsampledPotential, Array | None], Any]
    warmup: Callable[..., tuple[Any, Any, Any]] | None = None
    warmup_init: Callable[[Any, Any], Any] = no_warmup_init
    diagnostic_fields: tuple[str, ...] = ("data_evals",)
    describe: Callable[[Any], str] | None = None
    position: Callable[[Any], Array] = position_field
    start: Callable[[PRNGKey, SubsampledPotential, Any], Array | None] | None = None
    chains_in_turn: bool = False
    stabilize: Callable[[Any], Any] | None = None
    steps_per_sample: int = 1
    steps_per_sample_at: Callable[[int], int] | None = None
    moved_point: Callable[[Any], Array] | None = None


STEP_SIZE_STEPS_PER_SAMPLE = 10
"""Default steps per draw of the step-size kernels (SGLD, pSGLD, cSGLD, SGRLD, SGBD,
HAMCMC): one minibatch step per draw left SGLD's default with a bulk ESS of 11-33 in 2 × 500
draws on flat-prior linear and Poisson regressions (autocorrelation times of 30-90 steps;
the self-check asked for more draws on every run) while costing a tenth of a PDMP draw
(about ten proposals).  Ten steps per draw spend what a PDMP draw spends; the stationary
distribution, and so the bias, is unchanged."""


COHERENT_BIAS = 0.1
"""The automatic step of a step-size kernel keeps its predicted shift of the log density
within ``COHERENT_BIAS`` of that quantity's posterior sd (half what the self-check's
coherent scale error flags, 0.2).

A fixed step widens every whitened coordinate's variance by a relative b (ULA: b = εh/2;
Barker: b ≈ 0.27σ², :data:`BARKER_VARIANCE_BIAS`).  Per coordinate that is harmless, but the
log density, and any quantity coupled to all D coordinates such as a hierarchical scale,
sums the D biases: its mean moves by D b / 2 against a posterior sd of √(D / 2), that is by
b √(D / 2) sds.  A step tuned at small D is therefore wrong in the hundreds: SGBD's default
σ = 0.5 (b = 0.067) left the hierarchical scale τ 0.35 sd low at D = 53 (predicted 0.35) and
0.7 sd low at D = 304 (predicted 0.83), where the self-check saw the first only in long runs.
:func:`coherent_variance_bias` is the b that keeps the shift at ``COHERENT_BIAS``."""

BARKER_VARIANCE_BIAS = 0.27
"""SGBD's (unadjusted Barker's) stationary variance on N(0, 1), full batch, is 1 + bσ² with
b → 1/4 as σ → 0 (the second-moment balance 2E[xΔ] + E[Δ²] = 0 with E[Δ | x] = −z tanh(zx/2)
gives v = 1 + z²E[x⁴]/12 = 1 + σ²/4 to leading order) and b = 0.27 at σ = 0.4–0.7: measured
1.067, 1.045, 1.028 at σ = 0.5, 0.4, 0.3 (64 coordinates × 8 chains × 38000 steps, standard
errors 0.001; ``tests/statistical/test_sgbd.py::test_barker_variance_bias_coefficient``).
The larger value keeps the budget on the safe side."""


MAX_STEP_DILATION = 10.0
""":func:`dilated_steps` spends at most ten times the default steps per draw (100)."""


def dilated_steps(slowdown: float) -> int:
    """Steps per draw for an automatic step whose diffusion per step is ``slowdown`` times
    smaller than at small D (SGLD: ε / ε₀; SGBD: (σ / σ₀)²), so that a draw covers the same
    time as :data:`STEP_SIZE_STEPS_PER_SAMPLE` steps there: without it, the smaller step of
    the coherent bias budget kept the bias down but mixed several times slower, and in
    2 × 500 draws on the 304-dimensional hierarchical model of the robustness suite SGLD
    ended 0.57 sd from NUTS instead of 0.24.  At most :data:`MAX_STEP_DILATION` times.

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
    """The largest SGLD step whose bias, summed over ``dim`` coordinates, moves the log
    density by at most :data:`~pplsamplers.infer.spec.COHERENT_BIAS` of its posterior sd.

    A fixed step ε widens coordinate j's variance by the relative b_j = ε h_j / 2 (ULA on a
    Gaussian of curvature h_j: 1 / (1 − ε h_j / 2)); their mean ε tr(H) / (2D) must stay
    within :func:`~pplsamplers.infer.spec.coherent_variance_bias`, so ε ≤ 2 b D / tr(H):
    0.28 / √D in whitened coordinates (tr H = D), 0.039 at D = 53 and 0.016 at D = 300,
    against the conservative 0.1 / λ_max.

    >>> round(coherent_step_limit(2, 2.0), 3), round(coherent_step_limit(300, 300.0), 4)
    (0.2, 0.0163)
    """
    return 2.0 * coherent_variance_bias(dim) * dim / max(curvature_trace, 1e-12)


AUTO_LANGEVIN_STEP = 0.1
"""The automatic step of the Langevin kernels (SGLD's at unit curvature; cSGLD, SGRLD and
HAMCMC in the shared warmup's whitened coordinates), before the coherent bias budget."""


def auto_langevin_step(dim: int) -> float:
    """``step_size="auto"`` of cSGLD, SGRLD and HAMCMC: 0.1, or the coherent bias budget's
    :func:`coherent_step_limit` in whitened coordinates (tr H = D) where that is smaller.

    On the 304-dimensional hierarchical model of the robustness suite, a step of 0.1 left the
    group scale 0.55 sd (cSGLD, SGRLD) and 0.47 sd (HAMCMC) from NUTS in 2 × 500 draws; at
    this step (0.016) with :func:`auto_langevin_steps` steps per draw, 0.17, 0.17 and 0.20.

    >>> auto_langevin_step(8), round(auto_langevin_step(300), 4)
    (0.1, 0.0163)
    """
    return min(AUTO_LANGEVIN_STEP, coherent_step_limit(dim, float(dim)))


def langevin_step_size(step_size: float | str, dim: int) -> float:
    """A Langevin kernel's ε: ``step_size``, or :func:`auto_langevin_step` for ``"auto"``."""
    return auto_langevin_step(dim) if step_size == "auto" else float(step_size)


def auto_langevin_steps(dim: int) -> int:
    """Default steps per draw with an automatic Langevin step: ten, times the factor by which
    the coherent bias budget shrinks the step below :data:`AUTO_LANGEVIN_STEP`
    (:func:`dilated_steps`).

    >>> auto_langevin_steps(5), auto_langevin_steps(53), auto_langevin_steps(300)
    (10, 26, 62)
    """
    return dilated_steps(AUTO_LANGEVIN_STEP / auto_langevin_step(dim))


DIVERGENT_JUMP = 10.0
"""A step of a step-size kernel that moves more than ``DIVERGENT_JUMP`` √D in whitened
coordinates (ten diameters of a unit-scale posterior) is divergent: it is rejected, and in
warmup the step size is halved.  A stable step moves about √(2εD) ≤ 0.5 √D; an unstable one
grows geometrically and passes the limit a few steps after it starts, long before it
overflows."""


GRADIENT_LIMIT = 10.0
"""A step-size kernel's minibatch gradient is clipped at ``GRADIENT_LIMIT`` times its norm in
the bulk of the whitened posterior (:func:`gradient_clip_norm`,
:func:`~pplsamplers.potential.with_clipped_gradient`).  Rejecting a long step alone cannot
help a chain that sits where the gradient is steep: every later step from there is as long.
On a log-scale latent under an exponential prior (∇U ∝ eᵘ) one SGLD chain ran off that way
and froze with its step size halved to 0."""


def gradient_clip_norm(potential: SubsampledPotential) -> float:
    """``GRADIENT_LIMIT`` × the minibatch gradient's norm in the bulk of a whitened posterior.

    There ‖∇U‖ ≈ √D, and a plain minibatch estimator (N/n) Σ ∇ℓ_i adds noise of variance
    about N/n per coordinate (the per-datum gradients' covariance is about I/N once the
    posterior has unit scale), so the bulk norm is √(D (1 + N/n)); with a control variate or
    the full data the noise is small there (the automatic batch size holds it near 0.3 sd) and
    the bulk norm is √D.  Ten times that is never reached in the bulk, so the clip changes no
    step there and only bounds the runaway ones.

    Examples
    --------
    >>> from types import SimpleNamespace as P
    >>> gradient_clip_norm(P(dim=4, N=100, n=100, anchor=None))
    20.0
    >>> round(gradient_clip_norm(P(dim=4, N=1000, n=10, anchor=None)), 1)
    201.0
    """
    noise = 0.0 if potential.anchor is not None or potential.n >= potential.N else potential.N
    ratio = noise / potential.n
    return GRADIENT_LIMIT * math.sqrt(potential.dim * (1.0 + ratio))


def halve_step_size(params: Any) -> Any:
    """``params`` with ``step_size`` halved: :attr:`KernelSpec.stabilize` of SG kernels."""
    return params._replace(step_size=params.step_size * 0.5)


__all__ = [
    "AUTO_LANGEVIN_STEP",
    "BARKER_VARIANCE_BIAS",
    "COHERENT_BIAS",
    "DIVERGENT_JUMP",
    "GRADIENT_LIMIT",
    "MAX_STEP_DILATION",
    "STEP_SIZE_STEPS_PER_SAMPLE",
    "Kernel",
    "KernelSpec",
    "WarmupWindow",
    "auto_langevin_step",
    "auto_langevin_steps",
    "coherent_step_limit",
    "coherent_variance_bias",
    "dilated_steps",
    "gradient_clip_norm",
    "halve_step_size",
    "langevin_step_size",
    "no_warmup_init",
    "position_field",
]
