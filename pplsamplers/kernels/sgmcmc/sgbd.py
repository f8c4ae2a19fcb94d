"""Stochastic gradient Barker dynamics (SGBD): vanilla, corrected and extreme.

Mauri & Zanella's stochastic gradient Barker dynamics, §3–4, Algorithms 2 (vanilla),
3 (corrected) and 4 (extreme), with the adaptive step size of §4.2.  Per coordinate j:

* draw the increment z_j ~ N(σ_j, (0.1 σ_j)²) (the paper's "N(σ, 0.1σ)" gives the sd);
* estimate the gradient of the log density ĝ = −∇Ũ on a fresh minibatch (eq. 4) and the
  standard deviation of that *estimator*, τ_j = N s_j / √n, where s_j is the sd over the
  minibatch of the per-example gradients (Alg. 3 prints s_j itself, ``docs/design.md``);
* keep an exponential moving average τ̂ ← β τ̂ + (1 − β) τ (β = ``noise_decay`` is the weight
  of the *old* value, the RMSprop convention; Alg. 3 writes the new value's weight as β);
* move θ_j ← θ_j + b_j z_j with b_j = +1 with probability

  - vanilla (Alg. 2):   p̂ = sigmoid(z_j ĝ_j);
  - corrected (Alg. 3): p̃ = sigmoid(α_j z_j ĝ_j) with α_j = 1.702/√(1.702² − τ̂_j² z_j²) (eq. 9,
    Prop. 4), and the extreme rule below wherever τ̂_j |z_j| ≥ 1.702 (the breaking point
    τ* ≈ 1.702/|z|, eq. 42);
  - extreme (Alg. 4):   p̄ = 1{z_j ĝ_j > 0} (½ when z_j ĝ_j = 0, so that a zero gradient moves
    symmetrically).

σ is a tunable (:class:`SGBDParams`); the adaptive rule of §4.2, σ_j = 1.702/(1.233 τ̂_j)
(:func:`adaptive_step_size`, so that about 99 % of increments stay below the breaking point;
σ_j is left unchanged where τ̂_j = 0, a full batch), is the sampler's warmup with
``adapt_step_size``, after which σ is frozen.  τ̂ is the algorithm's own moving
average and lives in the state.  BlackJAX-style two levels: :func:`init` and
:func:`build_kernel` (structural options: ``variant``, ``noise_decay``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.estimator import Estimator, hessian_diagonal
from pplsamplers.kernels.sgmcmc.sgld import floored_diagonal
from pplsamplers.kernels.sgmcmc.step_size import (
    BARKER_VARIANCE_BIAS,
    coherent_variance_bias,
    dilated_steps,
    step_size_spec,
)
from pplsamplers.kernels.spec import KernelSpec, WarmupContext, WarmupWindow
from pplsamplers.types import Array, PRNGKey

LOGISTIC_PROBIT_SCALE = 1.702
"""sigmoid(x) ≈ Φ(x / 1.702) (eq. 27); sets the correction α and the breaking point."""
INCREMENT_QUANTILE = 1.233
"""About 99 % of increments z ~ N(σ, (0.1σ)²) satisfy |z| ≤ 1.233 σ (§4.2)."""
INCREMENT_RELATIVE_SD = 0.1
VARIANTS = ("vanilla", "corrected", "extreme")
_COUNT_CAP = 2**30  # the update count only needs to tell the first τ from later ones


class SGBDState(NamedTuple):
    """Position, noise average τ̂ and how many τ were averaged.

    τ̂ is part of the algorithm (the corrected rule reads it at every step, warmup or not), so
    it lives here; σ is a tunable and lives in :class:`SGBDParams`.
    """

    position: Array
    tau: Array
    num_noise_updates: Array


class SGBDParams(NamedTuple):
    """Tunables: σ, one per coordinate (shape ``(D,)``; :func:`make_params` broadcasts a scalar)."""

    step_size: Array


class SGBDInfo(NamedTuple):
    """Per-step diagnostics (means are over coordinates).

    ``flip_prob_mean`` is the mean of the paper's p_j = P(b_j = +1) actually used;
    ``uphill_prob_mean`` the mean probability of stepping along the sign of ĝ_j (½: a pure
    random walk, 1: the extreme rule); ``frac_past_breaking_point`` the fraction of
    coordinates with τ̂_j |z_j| ≥ 1.702 (where the corrected rule falls back to extreme).
    """

    data_evals: Array
    flip_prob_mean: Array
    uphill_prob_mean: Array
    frac_past_breaking_point: Array
    tau_mean: Array
    step_size_mean: Array


def make_params(step_size: float | Array, dim: int, dtype: jnp.dtype | None = None) -> SGBDParams:
    """:class:`SGBDParams` with σ (a scalar or a ``(dim,)`` vector) broadcast to ``(dim,)``."""
    return SGBDParams(jnp.broadcast_to(jnp.asarray(step_size, dtype), (dim,)))


def init(rng_key: PRNGKey, position: Array, estimator: Estimator, params: SGBDParams) -> SGBDState:
    """Initial state at ``position``: no noise averaged yet (τ̂ = 0)."""
    position = jnp.asarray(position)
    return SGBDState(position, jnp.zeros_like(position), jnp.asarray(0, jnp.int32))


def gradient_and_noise(estimator: Estimator, x: Array, idx: Array) -> tuple[Array, Array]:
    """Minibatch gradient of the log density ĝ = −∇Ũ and its per-coordinate sd τ.

    Both come from the minibatch's per-example gradients (their mean and variance,
    :meth:`~pplsamplers.estimator.Estimator.per_example_moments`; O((p + k) n) for a model with
    group effects) plus the gradient of the global (prior, Jacobian) term.  τ² =
    (N²/n) Var_i(∂_j ℓ_i) is the variance of the estimator (indices drawn with replacement).
    A full batch is exact: τ = 0, and the plain gradient is used (no per-example pass).
    """
    if estimator.full_batch:
        return -estimator.grad(x, idx), jnp.zeros_like(x)
    mean, variance = estimator.per_example_moments(x, idx)
    n = idx.shape[0]
    gradient = estimator.global_grad(x) + estimator.N * mean
    return -gradient, jnp.sqrt(estimator.N**2 / n * variance)


def update_noise_average(
    tau_average: Array, tau: Array, num_updates: Array, noise_decay: float
) -> Array:
    """τ̂ ← β τ̂ + (1 − β) τ; the first estimate is taken as is."""
    averaged = noise_decay * tau_average + (1.0 - noise_decay) * tau
    return jnp.where(num_updates == 0, tau, averaged)


def averaged_gradient(
    estimator: Estimator, state: SGBDState, batch_key: PRNGKey, noise_decay: float
) -> tuple[Array, SGBDState, Array]:
    """ĝ on a fresh minibatch, ``state`` with τ̂ and its count updated, and the batch size n.

    Shared by SGBD and c-SGLD (any state with ``tau`` and ``num_noise_updates`` fields).
    """
    idx = estimator.sample_indices(batch_key)
    grad, tau_now = gradient_and_noise(estimator, state.position, idx)
    tau = update_noise_average(state.tau, tau_now, state.num_noise_updates, noise_decay)
    count = jnp.minimum(state.num_noise_updates + 1, _COUNT_CAP)
    return grad, state._replace(tau=tau, num_noise_updates=count), jnp.asarray(idx.shape[0])


def correction_factor(tau: Array, increment: Array) -> tuple[Array, Array]:
    """α = 1.702/√(1.702² − τ²z²) of Alg. 3 and the mask τ|z| ≥ 1.702 (past the breaking point).

    Past the breaking point α is returned as 1 (unused: the extreme rule applies there).
    """
    scaled = tau * jnp.abs(increment)
    past = scaled >= LOGISTIC_PROBIT_SCALE
    gap = jnp.where(past, 1.0, LOGISTIC_PROBIT_SCALE**2 - scaled**2)
    alpha = jnp.where(past, 1.0, LOGISTIC_PROBIT_SCALE / jnp.sqrt(gap))
    return alpha, past


def flip_probability(grad: Array, increment: Array, alpha: Array | float = 1.0) -> Array:
    """p = sigmoid(α z ĝ), the probability of moving by +z (eq. 9; α = 1 gives Alg. 2's p̂).

    ``jax.nn.sigmoid`` keeps it in [0, 1] for any finite or infinite ``α z ĝ``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> flip_probability(jnp.array([1e30, -1e30, 0.0]), jnp.ones(3)).tolist()
    [1.0, 0.0, 0.5]
    """
    return jax.nn.sigmoid(alpha * increment * grad)


def extreme_probability(grad: Array, increment: Array) -> Array:
    """p̄ = 1{z ĝ > 0} of Alg. 4, with ½ when z ĝ = 0 (a symmetric move)."""
    return jnp.heaviside(increment * grad, 0.5).astype(jnp.result_type(grad, increment))


def move_probability(
    variant: str, grad: Array, increment: Array, tau: Array
) -> tuple[Array, Array]:
    """Probability of moving by +z for ``variant``, and the past-breaking-point mask."""
    alpha, past = correction_factor(tau, increment)
    if variant == "vanilla":
        return flip_probability(grad, increment), past
    if variant == "extreme":
        return extreme_probability(grad, increment), past
    corrected = flip_probability(grad, increment, alpha)
    return jnp.where(past, extreme_probability(grad, increment), corrected), past


def adaptive_step_size(tau: Array, step_size: Array) -> Array:
    """σ = 1.702/(1.233 τ̂) (§4.2), keeping the current σ where τ̂ = 0 (full batch)."""
    positive = tau > 0
    return jnp.where(
        positive,
        LOGISTIC_PROBIT_SCALE / (INCREMENT_QUANTILE * jnp.where(positive, tau, 1.0)),
        step_size,
    )


def build_kernel(
    variant: str = "corrected", noise_decay: float = 0.9
) -> Callable[[PRNGKey, SGBDState, Estimator, SGBDParams], tuple[SGBDState, SGBDInfo]]:
    """Build an SGBD step (Alg. 2, 3 or 4); σ comes in ``params`` (adapted by warmup, §4.2).

    Parameters
    ----------
    variant
        ``"vanilla"`` (Alg. 2), ``"corrected"`` (Alg. 3, extreme past the breaking point)
        or ``"extreme"`` (Alg. 4).
    noise_decay
        β in [0, 1): weight of the old τ̂ in its moving average (0: current minibatch only).

    Returns
    -------
    kernel(rng_key, state, estimator, params) -> (state, info)
        One step costs one pass over one minibatch (n data).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(1, N=50, n=10)
    >>> params = make_params(0.1, dim=1)
    >>> state = init(jax.random.key(0), jnp.zeros(1), est, params)
    >>> state, info = build_kernel("corrected")(jax.random.key(1), state, est, params)
    >>> state.position.shape, int(info.data_evals)
    ((1,), 10)
    """

    def kernel(
        rng_key: PRNGKey, state: SGBDState, estimator: Estimator, params: SGBDParams
    ) -> tuple[SGBDState, SGBDInfo]:
        batch_key, increment_key, sign_key = jax.random.split(rng_key, 3)
        grad, state, batch_size = averaged_gradient(estimator, state, batch_key, noise_decay)
        tau = state.tau
        shape, dtype = state.position.shape, state.position.dtype
        step_size = jnp.broadcast_to(params.step_size, shape).astype(dtype)
        increment = step_size * (
            1.0 + INCREMENT_RELATIVE_SD * jax.random.normal(increment_key, shape, dtype)
        )
        prob_plus, past = move_probability(variant, grad, increment, tau)
        plus = jax.random.uniform(sign_key, shape, dtype) < prob_plus
        position = state.position + jnp.where(plus, increment, -increment)
        uphill = jnp.where(increment * grad >= 0, prob_plus, 1.0 - prob_plus)
        info = SGBDInfo(
            data_evals=batch_size,
            flip_prob_mean=jnp.mean(prob_plus),
            uphill_prob_mean=jnp.mean(uphill),
            frac_past_breaking_point=jnp.mean(past.astype(dtype)),
            tau_mean=jnp.mean(tau),
            step_size_mean=jnp.mean(step_size),
        )
        return state._replace(position=position), info

    return kernel


AUTO_SIGMA = 0.5
"""``step_size="auto"``: σ_j = 0.5 local Laplace sds of coordinate j at small D
(:func:`auto_sigma` beyond); larger σ mixes faster and biases more (SGBD has no accept step).
On a whitened estimator the local scale is capped at the whitening's, 1: where a variational
fit replaced a poor Laplace approximation, the curvature at its mean can be far flatter than
the posterior."""


def auto_sigma(dim: int) -> float:
    """σ in local Laplace sds for ``step_size="auto"``: :data:`AUTO_SIGMA`, or less where the
    D coordinates' variance biases 0.27σ² would add up to more than the coherent bias budget:
    σ = min(0.5, √(0.1 √(2/D) / 0.27)).

    >>> auto_sigma(2), round(auto_sigma(53), 2), round(auto_sigma(300), 2)
    (0.5, 0.27, 0.17)
    """
    return min(AUTO_SIGMA, math.sqrt(coherent_variance_bias(dim) / BARKER_VARIANCE_BIAS))


@dataclass(frozen=True, eq=False)
class SGBDOptions:
    """SGBD's options, validated once (σ's length is checked against the model at ``init``).

    Parameters
    ----------
    step_size : float, array_like or "auto", default "auto"
        σ > 0: a scalar or one value per unconstrained coordinate (scale heterogeneity,
        §5.1.1), in the sampler's coordinates (whitened by default, unit posterior scale);
        ``"auto"`` (default): :func:`auto_sigma` local Laplace sds per coordinate (0.5 at
        small D, less in high D, where the fixed σ's bias adds up).  With
        ``adapt_step_size`` it is only the starting value.
    variant : {"corrected", "vanilla", "extreme"}, default "corrected"
        ``"corrected"`` (default, Alg. 3: de-biases the flip probability for the gradient
        noise, the extreme rule past the breaking point τ̂|z| ≥ 1.702), ``"vanilla"``
        (Alg. 2) or ``"extreme"`` (Alg. 4: always step along the minibatch gradient's sign).
    noise_decay : float, default 0.9
        β in [0, 1): weight of the old value in the moving average τ̂ of the gradient
        estimator's per-coordinate sd.
    adapt_step_size : bool, default False
        During warmup set σ_j = 1.702/(1.233 τ̂_j) (§4.2), then freeze it: the largest σ for
        which the correction stays valid, calibrated for plain minibatches (with a control
        variate τ̂ is much smaller and σ grows past the posterior scale; prefer a fixed σ
        there, or ``control_variate=False``).
    """

    step_size: float | Array | str = "auto"
    variant: str = "corrected"
    noise_decay: float = 0.9
    adapt_step_size: bool = False

    def __post_init__(self) -> None:
        validation.switches(self)
        if not (isinstance(self.step_size, str) and self.step_size == "auto"):
            validation.positive_array("step_size", self.step_size)
        validation.one_of("variant", self.variant, VARIANTS)
        validation.in_interval("noise_decay", self.noise_decay, 0.0, 1.0)


def declare(options: SGBDOptions) -> KernelSpec:
    """The declaration of SGBD to the adapter; with ``adapt_step_size`` its warmup sets σ
    (§4.2)."""
    automatic = isinstance(options.step_size, str)

    def default_params(
        rng_key: PRNGKey, estimator: Estimator, context: WarmupContext
    ) -> SGBDParams:
        if not automatic:
            sigma = validation.positive_array("step_size", options.step_size, estimator.dim)
            return make_params(sigma, estimator.dim, context.dtype)
        at = context.anchor if context.anchor is not None else context.init_position
        known = context.curvature_at(at)
        curvature = hessian_diagonal(estimator, at) if known is None else known
        scale = floored_diagonal(curvature) ** -0.5
        if context.whitened:  # the whitening's scale (1) bounds the local one
            scale = jnp.minimum(scale, 1.0)
        return make_params(auto_sigma(estimator.dim) * scale, estimator.dim, context.dtype)

    def warmup(
        rng_key: PRNGKey,
        state: SGBDState,
        params: SGBDParams,
        adapt_state: None,
        info: SGBDInfo,
        estimator: Estimator,
        window: WarmupWindow,
    ) -> tuple[SGBDState, SGBDParams, None]:
        sigma = adaptive_step_size(state.tau, params.step_size)
        return state, params._replace(step_size=sigma), adapt_state

    def describe(info: SGBDInfo) -> str:
        return (
            f"σ {float(jnp.mean(info.step_size_mean)):.2e}, "
            f"P(uphill) {float(jnp.mean(info.uphill_prob_mean)):.2f}, "
            f"past breaking point {float(jnp.mean(info.frac_past_breaking_point)):.0%}, "
            f"τ̂ {float(jnp.mean(info.tau_mean)):.3g}"
        )

    return step_size_spec(
        automatic,
        init=init,
        build_kernel=lambda: build_kernel(options.variant, options.noise_decay),
        default_params=default_params,
        warmup=warmup if options.adapt_step_size else None,
        diagnostic_fields=SGBDInfo._fields,
        describe=describe,
        # a smaller automatic σ diffuses (σ / 0.5)² as far per step: more steps per draw
        steps_per_sample_at=(
            (lambda dim: dilated_steps((AUTO_SIGMA / auto_sigma(dim)) ** 2)) if automatic else None
        ),
    )


Options = SGBDOptions
"""The options dataclass of this sampler (what the NumPyro class takes)."""
Info = SGBDInfo
"""The per-step diagnostics of this sampler's kernel."""

__all__ = [
    "Info",
    "Options",
    "AUTO_SIGMA",
    "INCREMENT_QUANTILE",
    "LOGISTIC_PROBIT_SCALE",
    "VARIANTS",
    "SGBDInfo",
    "SGBDOptions",
    "SGBDParams",
    "SGBDState",
    "adaptive_step_size",
    "auto_sigma",
    "averaged_gradient",
    "build_kernel",
    "correction_factor",
    "declare",
    "extreme_probability",
    "flip_probability",
    "gradient_and_noise",
    "init",
    "make_params",
    "move_probability",
    "update_noise_average",
]
