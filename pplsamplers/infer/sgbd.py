"""SGBD (:mod:`pplsamplers.kernels.sgbd`) and c-SGLD (:mod:`~.kernels.csgld`) declared on the
generic adapter."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.infer.adapter import SubsampledKernel
from pplsamplers.infer.spec import (
    BARKER_VARIANCE_BIAS,
    STEP_SIZE_STEPS_PER_SAMPLE,
    KernelSpec,
    WarmupWindow,
    auto_langevin_steps,
    coherent_variance_bias,
    dilated_steps,
    halve_step_size,
    langevin_step_size,
)
from pplsamplers.kernels import csgld, sgbd
from pplsamplers.potential import SubsampledPotential, posterior_scale
from pplsamplers.types import Array, PRNGKey

AUTO_SIGMA = 0.5
"""``step_size="auto"``: σ_j = 0.5 Laplace sds of coordinate j (0.5 on the adapter's whitened
potential) at small D, :func:`auto_sigma` beyond.  Measured on the raw-scale regression of
the robustness suite (N = 10⁵, control variates, whitened): mean errors ≤ 0.1 sd and sd
ratios within 5%; larger σ mixes faster and biases more (SGBD has no accept step).

On a whitened potential the local scale 1/√H_jj at the start is capped at the whitening's
scale, 1: where the shared warmup replaced a poor Laplace fit by a variational one, the
curvature at the variational mean can be far flatter than the posterior (on the non-centred
``reparam`` model of ``benchmarks/model_sweep.py``, 14 whitened sds along τ), and σ = 7 sds
sent τ wandering to 10⁹ (the metric refinement fed on its spread)."""


def auto_sigma(dim: int) -> float:
    """σ in local Laplace sds for ``step_size="auto"``: :data:`AUTO_SIGMA`, or less where
    D coordinates' variance biases 0.27σ² would add up to more than the coherent bias budget
    (:data:`~pplsamplers.infer.spec.COHERENT_BIAS`): σ = min(0.5, √(0.1 √(2/D) / 0.27)),
    0.5 up to D = 4, 0.27 at D = 53, 0.17 at D = 300.

    On the non-centred hierarchical logistic regression of ``benchmarks/model_sweep.py``
    (D = 53), in 2 × (1000 + 4000) draws at seed 1, σ = 0.5 left τ 0.35 sd low (the
    self-check flagged it only in such long runs, +0.08 coherent scale error); σ = 0.27 left
    it 0.09 sd low, every mean within 0.16 sd and every sd within 10 %, and quiet.

    >>> auto_sigma(2), round(auto_sigma(53), 2), round(auto_sigma(300), 2)
    (0.5, 0.27, 0.17)
    """
    return min(AUTO_SIGMA, math.sqrt(coherent_variance_bias(dim) / BARKER_VARIANCE_BIAS))


@dataclass(frozen=True, eq=False)
class SGBDConfig:
    """SGBD's options, validated once (σ's length is checked against the model at ``init``)."""

    step_size: float | Array | str = "auto"
    variant: str = "corrected"
    noise_decay: float = 0.9
    adapt_step_size: bool = False

    def __post_init__(self) -> None:
        validation.switches(self)
        if not (isinstance(self.step_size, str) and self.step_size == "auto"):
            validation.positive_array("step_size", self.step_size)
        validation.one_of("variant", self.variant, sgbd.VARIANTS)
        validation.in_interval("noise_decay", self.noise_decay, 0.0, 1.0)


@dataclass(frozen=True)
class CSGLDConfig:
    """c-SGLD's options, validated once."""

    step_size: float | str = "auto"
    noise_decay: float = 0.9

    def __post_init__(self) -> None:
        validation.positive_or_auto("step_size", self.step_size)
        validation.in_interval("noise_decay", self.noise_decay, 0.0, 1.0)


def sgbd_spec(config: SGBDConfig) -> KernelSpec:
    """The :class:`KernelSpec` of SGBD; with ``adapt_step_size`` its warmup sets σ (§4.2)."""

    def default_params(
        rng_key: PRNGKey, potential: SubsampledPotential, mode: Array | None = None
    ) -> sgbd.SGBDParams:
        if isinstance(config.step_size, str):  # "auto": half the Laplace sd per coordinate
            at = potential.anchor if potential.anchor is not None else potential.init_position
            scale = posterior_scale(potential, at, "diag")[0]
            if potential.whitened:  # the whitening's scale (1) bounds the local one
                scale = jnp.minimum(scale, 1.0)
            sigma = auto_sigma(potential.dim) * scale
        else:
            sigma = validation.positive_array("step_size", config.step_size, potential.dim)
        return sgbd.make_params(sigma, potential.dim, potential.init_position.dtype)

    def warmup(
        rng_key: PRNGKey,
        state: sgbd.SGBDState,
        params: sgbd.SGBDParams,
        adapt_state: None,
        info: sgbd.SGBDInfo,
        potential: SubsampledPotential,
        window: WarmupWindow,
    ) -> tuple[sgbd.SGBDState, sgbd.SGBDParams, None]:
        sigma = sgbd.adaptive_step_size(state.tau, params.step_size)
        return state, params._replace(step_size=sigma), adapt_state

    def describe(info: sgbd.SGBDInfo) -> str:
        return (
            f"σ {float(jnp.mean(info.step_size_mean)):.2e}, "
            f"P(uphill) {float(jnp.mean(info.uphill_prob_mean)):.2f}, "
            f"past breaking point {float(jnp.mean(info.frac_past_breaking_point)):.0%}, "
            f"τ̂ {float(jnp.mean(info.tau_mean)):.3g}"
        )

    return KernelSpec(
        init=sgbd.init,
        build_kernel=lambda: sgbd.build_kernel(config.variant, config.noise_decay),
        default_params=default_params,
        warmup=warmup if config.adapt_step_size else None,
        diagnostic_fields=sgbd.SGBDInfo._fields,
        describe=describe,
        stabilize=halve_step_size,
        steps_per_sample=STEP_SIZE_STEPS_PER_SAMPLE,
        # a smaller automatic σ diffuses (σ / 0.5)² as far per step: more steps per draw
        steps_per_sample_at=(
            (lambda dim: dilated_steps((AUTO_SIGMA / auto_sigma(dim)) ** 2))
            if isinstance(config.step_size, str)
            else None
        ),
    )


def csgld_spec(config: CSGLDConfig) -> KernelSpec:
    """The :class:`KernelSpec` of c-SGLD (no warmup of its own)."""

    def default_params(
        rng_key: PRNGKey, potential: SubsampledPotential, mode: Array | None = None
    ) -> csgld.CSGLDParams:
        step = langevin_step_size(config.step_size, potential.dim)
        return csgld.CSGLDParams(jnp.asarray(step, potential.init_position.dtype))

    def describe(info: csgld.CSGLDInfo) -> str:
        return (
            f"step {float(jnp.mean(info.step_size)):.2e}, τ̂ {float(jnp.mean(info.tau_mean)):.3g}, "
            f"noise clipped {float(jnp.mean(info.frac_past_breaking_point)):.0%}"
        )

    return KernelSpec(
        init=csgld.init,
        build_kernel=lambda: csgld.build_kernel(config.noise_decay),
        default_params=default_params,
        diagnostic_fields=csgld.CSGLDInfo._fields,
        describe=describe,
        stabilize=halve_step_size,
        steps_per_sample=STEP_SIZE_STEPS_PER_SAMPLE,
        steps_per_sample_at=auto_langevin_steps if config.step_size == "auto" else None,
    )


class SGBD(SubsampledKernel):
    """Stochastic gradient Barker dynamics as a NumPyro ``MCMCKernel``.

    Each step moves every unconstrained coordinate by ±z_j, z_j ~ N(σ_j, (0.1σ_j)²), the
    sign drawn from a minibatch estimate of the Barker probability sigmoid(z_j ∂_j log π)
    (paper Alg. 2–4).  The increment size never depends on the gradient, which makes SGBD
    robust to the step size, to skewed targets and to exploding gradients.

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        σ > 0: a scalar or one value per unconstrained coordinate (scale heterogeneity,
        §5.1.1), in the sampler's coordinates (whitened by default, where the posterior has
        unit scale); ``"auto"`` (default): :func:`auto_sigma` Laplace sds per coordinate
        (0.5 at small D, less in high D, where the fixed σ's bias adds up).
        With ``adapt_step_size`` it is only the starting value.
    variant
        ``"corrected"`` (default, Alg. 3: de-biases the flip probability for the gradient
        noise, extreme rule past the breaking point τ̂|z| ≥ 1.702), ``"vanilla"`` (Alg. 2) or
        ``"extreme"`` (Alg. 4: always step along the sign of the minibatch gradient).
    noise_decay
        β in [0, 1): weight of the old value in the moving average τ̂ of the gradient
        estimator's per-coordinate sd.
    adapt_step_size
        During warmup set σ_j = 1.702/(1.233 τ̂_j) (§4.2) after every step, then freeze it.
        τ̂_j ∝ N/√n times the spread of the per-example gradients, so this σ_j follows the
        posterior scale of coordinate j for the plain minibatch estimator.  Needs minibatches
        (τ̂ = 0 keeps σ for a full batch).  The rule is the largest σ for which the correction
        stays valid: with ``control_variate`` the noise, hence τ̂, is much smaller and σ grows
        past the posterior scale, so prefer a fixed σ there.
    control_variate
        ``"auto"`` (default) as for every sampler.  At large N a plain minibatch gradient
        is far too noisy in posterior units (its sd grows as √(N/n)) for any fixed σ, so the
        adapter's control variate is what makes SGBD usable there; with ``adapt_step_size``
        prefer ``False`` (the §4.2 rule is calibrated for plain minibatches).
    **options
        The options of every sampler: ``subsample_size``, ``data_plate``, ``potential``,
        ``precondition``, ``init_strategy``, ``steps_per_sample`` (default 10 here, more
        in high D with ``step_size="auto"``)
        (see :class:`~pplsamplers.infer.adapter.SubsampledKernel`).

    Examples
    --------
    With a fixed σ (``step_size``) and minibatches of 10:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> run(SGBD(model, step_size=0.05, subsample_size=10)).get_samples()["mu"].shape
    (100,)
    """

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float | Array | str = "auto",
        *,
        variant: str = "corrected",
        noise_decay: float = 0.9,
        adapt_step_size: bool = False,
        control_variate: bool | str | Array = "auto",
        **options: Any,
    ) -> None:
        self.config = SGBDConfig(step_size, variant, noise_decay, adapt_step_size)
        spec = sgbd_spec(self.config)
        super().__init__(model, spec, control_variate=control_variate, **options)


class CSGLD(SubsampledKernel):
    """Corrected SGLD (the SGBD paper's Alg. 7) as a NumPyro ``MCMCKernel``.

    x ← x + ε ĝ + √(max(2ε − ε²τ̂², 0)) ξ: SGLD that injects only the noise the minibatch
    gradient does not already bring (τ̂ per coordinate, as in SGBD).

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        ε > 0 (same convention as :class:`~pplsamplers.infer.sgld.SGLD`: in the whitened
        coordinates of the shared warmup by default, so 0.1 is a tenth of a posterior
        variance); ``"auto"`` (default): 0.1, less in high D
        (:func:`~pplsamplers.infer.spec.auto_langevin_step`, about 0.28/√D beyond D = 8, where
        the fixed step's bias adds up over the coordinates), with the default
        ``steps_per_sample`` growing in proportion (26 at D = 53, 62 at D = 300).
    noise_decay
        β in [0, 1) of the moving average τ̂.
    control_variate
        ``"auto"`` (default) as for every sampler: at large N a plain minibatch gradient is
        far too noisy in posterior units for τ̂'s correction to absorb.
    **options
        See :class:`~pplsamplers.infer.adapter.SubsampledKernel`.

    Examples
    --------
    c-SGLD injects only the noise that the minibatch gradient lacks:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> run(CSGLD(model, step_size=1e-3, subsample_size=10)).get_samples()["mu"].shape
    (100,)
    """

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float | str = "auto",
        *,
        noise_decay: float = 0.9,
        control_variate: bool | str | Array = "auto",
        **options: Any,
    ) -> None:
        self.config = CSGLDConfig(step_size, noise_decay)
        spec = csgld_spec(self.config)
        super().__init__(model, spec, control_variate=control_variate, **options)


__all__ = [
    "AUTO_SIGMA",
    "CSGLD",
    "SGBD",
    "CSGLDConfig",
    "SGBDConfig",
    "auto_sigma",
    "csgld_spec",
    "sgbd_spec",
]
