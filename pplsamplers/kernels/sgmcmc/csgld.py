"""Corrected stochastic gradient Langevin dynamics (c-SGLD), the baseline of Mauri & Zanella's SGBD.

Mauri & Zanella, Appendix A.1, Algorithm 7.  SGLD (:mod:`~pplsamplers.kernels.sgmcmc.sgld`) moves by
x ← x + ε ĝ + √(2ε) ξ with ĝ = −∇Ũ.  The minibatch noise in ĝ already contributes variance
ε² τ_j² to coordinate j, so c-SGLD injects only what is missing:

    x_j ← x_j + ε ĝ_j + √(max(2ε − ε² τ̂_j², 0)) ξ_j,         ξ ~ N(0, I),

with τ̂ the moving average of the estimator sd τ_j = N s_j/√n (as in SGBD).
Alg. 7 writes the step as h = 2ε (drift h/2, injected variance h for plain SGLD, Alg. 5) and
prints the corrected noise as N(0, √(h² − τ̂² h⁴/4)); that expression is not dimensionally
consistent (τ̂² h² carries units).  Matching the variance of the update, h − τ̂² h²/4 = 2ε − ε²τ̂²,
is what the text describes and what is implemented.  Where ε τ̂_j² ≥ 2 nothing is injected
(the paper's "extreme" c-SGLD, i.e. SGD) and the coordinate is counted as past the
breaking point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.estimator import Estimator
from pplsamplers.kernels.sgmcmc.sgbd import averaged_gradient
from pplsamplers.kernels.sgmcmc.step_size import (
    langevin_step_size,
    step_size_spec,
)
from pplsamplers.kernels.spec import KernelSpec, WarmupContext
from pplsamplers.types import Array, PRNGKey


class CSGLDState(NamedTuple):
    """Position, noise average τ̂ and how many τ were averaged."""

    position: Array
    tau: Array
    num_noise_updates: Array


class CSGLDParams(NamedTuple):
    """Tunables: the step size ε."""

    step_size: Array


class CSGLDInfo(NamedTuple):
    """Per-step diagnostics; ``frac_past_breaking_point`` counts coordinates with ε τ̂² ≥ 2."""

    data_evals: Array
    step_size: Array
    grad_norm: Array
    tau_mean: Array
    frac_past_breaking_point: Array


def init(
    rng_key: PRNGKey, position: Array, estimator: Estimator, params: CSGLDParams
) -> CSGLDState:
    """Initial state at ``position``: no noise averaged yet (τ̂ = 0)."""
    position = jnp.asarray(position)
    return CSGLDState(position, jnp.zeros_like(position), jnp.asarray(0, jnp.int32))


def injected_variance(step_size: Array | float, tau: Array) -> Array:
    """2ε − ε² τ̂², clipped at zero (Alg. 7 with h = 2ε)."""
    return jnp.maximum(2.0 * step_size - step_size**2 * tau**2, 0.0)


def build_kernel(
    noise_decay: float = 0.9,
) -> Callable[[PRNGKey, CSGLDState, Estimator, CSGLDParams], tuple[CSGLDState, CSGLDInfo]]:
    """Build a c-SGLD step (Alg. 7); ε comes in ``params``.

    Parameters
    ----------
    noise_decay
        β in [0, 1): weight of the old τ̂ in its moving average.

    Returns
    -------
    kernel(rng_key, state, estimator, params) -> (state, info)
        One step costs one pass over one minibatch (n data).  ε is in the convention of
        :mod:`~pplsamplers.kernels.sgmcmc.sgld` (Alg. 7's h is 2ε).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> est = tiny_estimator(1, N=50, n=10)
    >>> params = CSGLDParams(jnp.asarray(1e-3))
    >>> state = init(jax.random.key(0), jnp.zeros(1), est, params)
    >>> state, info = build_kernel()(jax.random.key(1), state, est, params)
    >>> int(info.data_evals)  # one minibatch of n = 10
    10
    """

    def kernel(
        rng_key: PRNGKey, state: CSGLDState, estimator: Estimator, params: CSGLDParams
    ) -> tuple[CSGLDState, CSGLDInfo]:
        batch_key, noise_key = jax.random.split(rng_key)
        grad, state, batch_size = averaged_gradient(estimator, state, batch_key, noise_decay)
        step_size = jnp.asarray(params.step_size, grad.dtype)
        variance = injected_variance(step_size, state.tau)
        noise = jax.random.normal(noise_key, grad.shape, grad.dtype)
        position = state.position + step_size * grad + jnp.sqrt(variance) * noise
        info = CSGLDInfo(
            data_evals=batch_size,
            step_size=step_size,
            grad_norm=jnp.linalg.norm(grad),
            tau_mean=jnp.mean(state.tau),
            frac_past_breaking_point=jnp.mean((variance == 0.0).astype(grad.dtype)),
        )
        return state._replace(position=position), info

    return kernel


@dataclass(frozen=True)
class CSGLDOptions:
    """c-SGLD's options, validated once.

    Parameters
    ----------
    step_size : float or "auto", default "auto"
        ε > 0 (SGLD's convention: in the whitened coordinates by default, so 0.1 is a tenth of
        a posterior variance); ``"auto"`` (default): 0.1, less in high D
        (:func:`~pplsamplers.kernels.sgmcmc.step_size.auto_langevin_step`), with the default
        ``steps_per_sample`` growing in proportion.
    noise_decay : float, default 0.9
        β in [0, 1) of the moving average τ̂.
    """

    step_size: float | str = "auto"
    noise_decay: float = 0.9

    def __post_init__(self) -> None:
        validation.positive_or_auto("step_size", self.step_size)
        validation.in_interval("noise_decay", self.noise_decay, 0.0, 1.0)


def declare(options: CSGLDOptions) -> KernelSpec:
    """The declaration of c-SGLD to the adapter (no warmup of its own)."""

    def default_params(
        rng_key: PRNGKey, estimator: Estimator, context: WarmupContext
    ) -> CSGLDParams:
        step = langevin_step_size(options.step_size, estimator.dim)
        return CSGLDParams(jnp.asarray(step, context.dtype))

    def describe(info: CSGLDInfo) -> str:
        return (
            f"step {float(jnp.mean(info.step_size)):.2e}, τ̂ {float(jnp.mean(info.tau_mean)):.3g}, "
            f"noise clipped {float(jnp.mean(info.frac_past_breaking_point)):.0%}"
        )

    return step_size_spec(
        options.step_size == "auto",
        init=init,
        build_kernel=lambda: build_kernel(options.noise_decay),
        default_params=default_params,
        diagnostic_fields=CSGLDInfo._fields,
        describe=describe,
    )


Options = CSGLDOptions
"""The options dataclass of this sampler (what the NumPyro class takes)."""
Info = CSGLDInfo
"""The per-step diagnostics of this sampler's kernel."""

__all__ = [
    "Info",
    "Options",
    "CSGLDInfo",
    "CSGLDOptions",
    "CSGLDParams",
    "CSGLDState",
    "build_kernel",
    "declare",
    "init",
    "injected_variance",
]
