"""Stochastic gradient Langevin dynamics (SGLD) and its RMSprop-preconditioned form (pSGLD).

SGLD (Welling & Teh 2011, eq. 4):  x ← x − ε ∇Ũ(x) + √(2ε) ξ,          ξ ~ N(0, I).
pSGLD (Li et al. 2016, Alg. 1):    a ← β a + (1−β) (∇Ũ)²,  G = 1 / (λ + √a),
                                   x ← x − ε G ∇Ũ(x) + √(2ε G) ξ.

The Γ correction term of pSGLD is dropped, as in the paper's practical algorithm; the metric
G is a tunable (``SGLDParams.inverse_metric``) that warmup adapts from the RMSprop average and
then freezes, after which the update is Langevin with a constant metric.  Both are biased at
any ε > 0; the bias shrinks with ε (:mod:`~pplsamplers.kernels.sgmcmc.step_size`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.estimator import (
    Estimator,
    gradient_noise_variance,
    hessian_diagonal,
    max_curvature,
)
from pplsamplers.kernels.sgmcmc.step_size import (
    coherent_step_limit,
    step_size_spec,
)
from pplsamplers.kernels.spec import KernelSpec, WarmupContext, WarmupWindow
from pplsamplers.types import Array, PRNGKey


class SGLDState(NamedTuple):
    """The position."""

    position: Array


class SGLDInfo(NamedTuple):
    """Per-step diagnostics; ``gradient`` feeds pSGLD's warmup (not exported)."""

    data_evals: Array
    step_size: Array
    grad_norm: Array
    gradient: Array


class SGLDParams(NamedTuple):
    """Tunables: ε and the diagonal metric G (ones for plain SGLD)."""

    step_size: Array
    inverse_metric: Array


def init(rng_key: PRNGKey, position: Array, estimator: Estimator, params: SGLDParams) -> SGLDState:
    """Initial state at ``position`` (SGLD keeps nothing else)."""
    return SGLDState(jnp.asarray(position))


def build_kernel() -> Callable[
    [PRNGKey, SGLDState, Estimator, SGLDParams], tuple[SGLDState, SGLDInfo]
]:
    """An SGLD (or pSGLD) step; each step costs one minibatch gradient (n data).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> estimator, params = tiny_estimator(2), SGLDParams(jnp.asarray(0.1), jnp.ones(2))
    >>> state = init(jax.random.key(0), jnp.zeros(2), estimator, params)
    >>> state, info = build_kernel()(jax.random.key(1), state, estimator, params)
    >>> state.position.shape, int(info.data_evals)
    ((2,), 1)
    """

    def kernel(
        rng_key: PRNGKey, state: SGLDState, estimator: Estimator, params: SGLDParams
    ) -> tuple[SGLDState, SGLDInfo]:
        batch_key, noise_key = jax.random.split(rng_key)
        idx = estimator.sample_indices(batch_key)
        grad = estimator.grad(state.position, idx)
        step = params.step_size * params.inverse_metric
        noise = jax.random.normal(noise_key, grad.shape, grad.dtype)
        position = state.position - step * grad + jnp.sqrt(2 * step) * noise
        info = SGLDInfo(
            data_evals=jnp.asarray(idx.shape[0]),
            step_size=jnp.asarray(params.step_size, grad.dtype),
            grad_norm=jnp.linalg.norm(grad),
            gradient=grad,
        )
        return SGLDState(position), info

    return kernel


def rmsprop_metric(square_avg: Array, eps: float) -> Array:
    """pSGLD's G = 1 / (λ + √a)."""
    return 1.0 / (eps + jnp.sqrt(square_avg))


@partial(jax.jit, static_argnums=1)
def _step_probe(rng_key: PRNGKey, estimator: Estimator, x: Array) -> tuple[Array, Array]:
    """(λ_max(∇²U), max_j V_j) at x: the curvature and gradient-noise limits of the step."""
    curvature_key, noise_key = jax.random.split(rng_key)
    noise = gradient_noise_variance(noise_key, estimator, x)
    return max_curvature(curvature_key, estimator, x), jnp.max(noise)


def suggest_step_size(
    rng_key: PRNGKey, estimator: Estimator, x: Array, fraction: float = 0.1
) -> float:
    """A conservative SGLD step: ``fraction`` of min(1/λ_max(∇²U), 4/λ_max(V)), V the
    diagonal of the gradient-noise covariance at ``x``: the first keeps the discretisation
    bias O(ελ) small, the second is Welling & Teh's condition ε N² V / (4n) ≪ 1 that the
    injected noise dominates (§4).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> round(suggest_step_size(jax.random.key(0), tiny_estimator(2, N=9), jnp.zeros(2)), 4)
    0.01
    """
    curvature, noise = (float(v) for v in _step_probe(rng_key, estimator, x))
    limit = 1.0 / max(curvature, 1e-12)
    if noise > 0:
        limit = min(limit, 4.0 / noise)
    return fraction * limit


@dataclass(frozen=True)
class SGLDOptions:
    """SGLD's options, validated once.

    Parameters
    ----------
    step_size : float or "auto", default "auto"
        ε > 0, or ``"auto"`` (default): a tenth of min(1/λ_max(∇²U), 4/λ_max(V)) (curvature
        and gradient-noise limits, :func:`suggest_step_size`), at most the coherent bias
        budget 2 b D / tr(∇²U) (:func:`~pplsamplers.kernels.sgmcmc.step_size.
        coherent_step_limit`, about 0.28/√D in whitened coordinates), with the default
        ``steps_per_sample`` growing in proportion.  ε is in the sampler's coordinates:
        whitened by default (unit posterior scale), the model's unconstrained coordinates
        with ``precondition=None``.
    preconditioned : bool, default False
        pSGLD: the RMSprop diagonal metric G, adapted in warmup and then frozen; with
        ``step_size="auto"`` capped so that no coordinate's step ε G_j exceeds the SGLD step.
    rmsprop_decay, rmsprop_eps : float, defaults 0.99 and 1e-5
        β and λ of pSGLD.
    """

    step_size: float | str = "auto"
    preconditioned: bool = False
    rmsprop_decay: float = 0.99
    rmsprop_eps: float = 1e-5

    def __post_init__(self) -> None:
        validation.switches(self)
        validation.positive_or_auto("step_size", self.step_size)
        validation.in_interval("rmsprop_decay", self.rmsprop_decay, 0.0, 1.0)
        validation.positive("rmsprop_eps", self.rmsprop_eps)


def declare(options: SGLDOptions) -> KernelSpec:
    """The declaration of SGLD / pSGLD to the adapter."""
    automatic = options.step_size == "auto"

    def default_params(
        rng_key: PRNGKey, estimator: Estimator, context: WarmupContext
    ) -> SGLDParams:
        dtype, dim = context.dtype, estimator.dim
        if not automatic:
            return SGLDParams(jnp.asarray(options.step_size, dtype), jnp.ones(dim, dtype))
        anchor, (_, probe_key) = context.mode, jax.random.split(rng_key)
        known = context.curvature_at(anchor)
        diagonal = floored_diagonal(hessian_diagonal(estimator, anchor) if known is None else known)
        step = min(
            suggest_step_size(probe_key, estimator, anchor),
            coherent_step_limit(dim, float(jnp.sum(diagonal))),
        )
        if not options.preconditioned:
            return SGLDParams(jnp.asarray(step, dtype), jnp.ones(dim, dtype))
        # pSGLD moves coordinate j by ε G_j with G_j = 1/(λ + √a_j) and a_j ≈ E[g_j²] = H_jj + V_j
        # over the posterior: ε G starts as the plain-SGLD step, and warmup caps G at 1/slowest,
        # so a coordinate whose gradients were small in warmup gets no step beyond the stable one
        noise = jax.jit(gradient_noise_variance, static_argnums=1)(probe_key, estimator, anchor)
        slowest = float(jnp.min(options.rmsprop_eps + jnp.sqrt(diagonal + noise)))
        return SGLDParams(jnp.asarray(step * slowest, dtype), jnp.full(dim, 1 / slowest, dtype))

    def warmup_init(state: SGLDState, params: SGLDParams) -> tuple[Array, Array, Array]:
        # (RMSprop average a, the cap of G, whether a has started); a holds the value that
        # gives the initial G until the first gradient, which starts a at max(g², that): a
        # first gradient near 0 would otherwise make G huge
        cap = params.inverse_metric if automatic else jnp.full_like(state.position, jnp.inf)
        floor = jnp.maximum(1.0 / params.inverse_metric - options.rmsprop_eps, 0.0) ** 2
        floor = jnp.broadcast_to(floor, state.position.shape).astype(state.position.dtype)
        return floor, cap, jnp.asarray(False)

    def warmup(
        rng_key: PRNGKey,
        state: SGLDState,
        params: SGLDParams,
        adapt_state: tuple[Array, Array, Array],
        info: SGLDInfo,
        estimator: Estimator,
        window: WarmupWindow,
    ) -> tuple[SGLDState, SGLDParams, tuple[Array, Array, Array]]:
        square_avg, cap, started = adapt_state
        g2, beta = info.gradient**2, options.rmsprop_decay
        square_avg = jnp.where(
            started, beta * square_avg + (1 - beta) * g2, jnp.maximum(g2, square_avg)
        )
        metric = jnp.minimum(rmsprop_metric(square_avg, options.rmsprop_eps), cap)
        return state, params._replace(inverse_metric=metric), (square_avg, cap, jnp.asarray(True))

    def describe(info: SGLDInfo) -> str:
        return (
            f"step {float(jnp.mean(info.step_size)):.2e}, "
            f"|grad| {float(jnp.mean(info.grad_norm)):.3g}"
        )

    return step_size_spec(
        automatic,
        init=init,
        build_kernel=build_kernel,
        default_params=default_params,
        warmup=warmup if options.preconditioned else None,
        warmup_init=warmup_init,
        diagnostic_fields=("data_evals", "step_size", "grad_norm"),
        describe=describe,
        needs_mode=automatic,
    )


def floored_diagonal(curvature: Array, rel_floor: float = 1e-8) -> Array:
    """|diag ∇²U| floored at ``rel_floor`` times its largest entry, as the whitening's scale is
    (:func:`~pplsamplers.warmup.scale.posterior_scale`)."""
    magnitude = jnp.abs(curvature)
    return jnp.maximum(magnitude, rel_floor * jnp.max(magnitude))


Options = SGLDOptions
"""The options dataclass of this sampler (what the NumPyro class takes)."""
Info = SGLDInfo
"""The per-step diagnostics of this sampler's kernel."""

__all__ = [
    "Info",
    "Options",
    "SGLDInfo",
    "SGLDOptions",
    "SGLDParams",
    "SGLDState",
    "build_kernel",
    "declare",
    "floored_diagonal",
    "init",
    "rmsprop_metric",
    "suggest_step_size",
]
