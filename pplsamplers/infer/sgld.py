"""SGLD and pSGLD declared on the generic adapter (:mod:`pplsamplers.kernels.sgld`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.infer.adapter import SubsampledKernel
from pplsamplers.infer.spec import (
    STEP_SIZE_STEPS_PER_SAMPLE,
    KernelSpec,
    WarmupWindow,
    auto_langevin_steps,
    coherent_step_limit,
    halve_step_size,
)
from pplsamplers.kernels import sgld
from pplsamplers.potential import (
    SubsampledPotential,
    find_map,
    gradient_noise_variance,
    posterior_scale,
    suggest_sgld_step_size,
)
from pplsamplers.types import Array, PRNGKey


@dataclass(frozen=True)
class SGLDConfig:
    """SGLD's options, validated once."""

    step_size: float | str = "auto"
    preconditioned: bool = False
    rmsprop_decay: float = 0.99
    rmsprop_eps: float = 1e-5

    def __post_init__(self) -> None:
        validation.switches(self)
        validation.positive_or_auto("step_size", self.step_size)
        validation.in_interval("rmsprop_decay", self.rmsprop_decay, 0.0, 1.0)
        validation.positive("rmsprop_eps", self.rmsprop_eps)


def sgld_spec(config: SGLDConfig) -> KernelSpec:
    """The :class:`KernelSpec` of SGLD / pSGLD."""

    def default_params(
        rng_key: PRNGKey, potential: SubsampledPotential, mode: Array | None = None
    ) -> sgld.SGLDParams:
        dtype = potential.init_position.dtype
        step = config.step_size
        if step == "auto":
            map_key, probe_key = jax.random.split(rng_key)
            anchor = find_map(map_key, potential).position if mode is None else mode
            curvature = posterior_scale(potential, anchor, "diag")[0] ** -2
            step = min(
                suggest_sgld_step_size(probe_key, potential, anchor),
                coherent_step_limit(potential.dim, float(jnp.sum(curvature))),
            )
            if config.preconditioned:
                # pSGLD moves coordinate j by ε·G_j with G_j = 1/(λ + √a_j) and a_j ≈ E[g_j²]
                # = H_jj + V_j over the posterior (Laplace: Var ∇U = H; V the minibatch
                # noise): keep every ε·G_j within the plain-SGLD step
                noise = jax.jit(lambda k, x: gradient_noise_variance(k, potential, x))(
                    probe_key, anchor
                )
                slowest = float(jnp.min(config.rmsprop_eps + jnp.sqrt(curvature + noise)))
                # ε·G starts as the plain-SGLD step, and the warmup's RMSprop G is capped at
                # 1/slowest (see warmup): a coordinate whose gradients were small during
                # warmup must not get a step beyond the stable one (on the hierarchical
                # model such coordinates reached 1.8 times it and pSGLD ended 26 sd away)
                return sgld.SGLDParams(
                    jnp.asarray(step * slowest, dtype), jnp.full(potential.dim, 1 / slowest, dtype)
                )
        return sgld.SGLDParams(jnp.asarray(step, dtype), jnp.ones(potential.dim, dtype))

    capped = config.preconditioned and config.step_size == "auto"

    def warmup_init(state: sgld.SGLDState, params: sgld.SGLDParams) -> tuple[Array, Array, Array]:
        # RMSprop average a, the cap of G (ε·G ≤ the SGLD step) and whether a has started.
        # a holds the value that gives the initial G, (1/G − λ)², until the first gradient,
        # which starts a at max(g², that): at g² alone one first gradient near 0 made
        # G ~ 10⁵ with a given ε, and the divergence guard's halvings then froze ε at a
        # sixteenth of the user's (tests/statistical/test_preconditioned_langevin.py)
        cap = params.inverse_metric if capped else jnp.full_like(state.position, jnp.inf)
        floor = jnp.maximum(1.0 / params.inverse_metric - config.rmsprop_eps, 0.0) ** 2
        floor = jnp.broadcast_to(floor, state.position.shape).astype(state.position.dtype)
        return floor, cap, jnp.asarray(False)

    def warmup(
        rng_key: PRNGKey,
        state: sgld.SGLDState,
        params: sgld.SGLDParams,
        adapt_state: tuple[Array, Array, Array],
        info: sgld.SGLDInfo,
        potential: SubsampledPotential,
        window: WarmupWindow,
    ) -> tuple[sgld.SGLDState, sgld.SGLDParams, tuple[Array, Array, Array]]:
        square_avg, cap, started = adapt_state
        g2, beta = info.gradient**2, config.rmsprop_decay
        square_avg = jnp.where(
            started, beta * square_avg + (1 - beta) * g2, jnp.maximum(g2, square_avg)
        )
        metric = jnp.minimum(sgld.rmsprop_metric(square_avg, config.rmsprop_eps), cap)
        return state, params._replace(inverse_metric=metric), (square_avg, cap, jnp.asarray(True))

    def describe(info: sgld.SGLDInfo) -> str:
        return (
            f"step {float(jnp.mean(info.step_size)):.2e}, "
            f"|grad| {float(jnp.mean(info.grad_norm)):.3g}"
        )

    return KernelSpec(
        init=sgld.init,
        build_kernel=sgld.build_kernel,
        default_params=default_params,
        warmup=warmup if config.preconditioned else None,
        warmup_init=warmup_init,
        diagnostic_fields=("data_evals", "step_size", "grad_norm"),
        describe=describe,
        stabilize=halve_step_size,
        steps_per_sample=STEP_SIZE_STEPS_PER_SAMPLE,
        steps_per_sample_at=auto_langevin_steps if config.step_size == "auto" else None,
    )


class SGLD(SubsampledKernel):
    """Stochastic gradient Langevin dynamics as a NumPyro ``MCMCKernel``.

    x ← x − ε ∇Ũ(x) + √(2ε) ξ with a fresh minibatch each step (Welling & Teh 2011, eq. 4).
    With ``preconditioned=True`` this is pSGLD (Li et al. 2016, Alg. 1): the RMSprop diagonal
    metric G = 1/(λ + √a) is adapted during warmup and frozen afterwards; with
    ``step_size="auto"`` it is capped so that no coordinate's step ε G_j exceeds the plain-SGLD
    step.

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    step_size
        ε > 0, or ``"auto"``: at ``init`` ε is set to a tenth of min(1/λ_max(∇²U),
        4/λ_max(V)) (curvature and gradient-noise limits, Welling & Teh 2011 §4; see
        :func:`~pplsamplers.potential.suggest_sgld_step_size`), and at most
        2 b D / tr(∇²U) (:func:`~pplsamplers.infer.spec.coherent_step_limit`: about 0.28/√D
        in whitened coordinates), which keeps the bias summed over D coordinates, e.g. on a
        hierarchical scale, within 0.1 posterior sd; the default ``steps_per_sample`` then
        grows in proportion (26 at D = 53, 62 at D = 300).  ε is in the sampler's
        coordinates, which are whitened by default (``precondition="auto"``: unit posterior
        scale, so ``"auto"`` gives ε ≈ 0.1 and a variance inflation of about 1/(1 − ε/2));
        with ``precondition=None`` it is in the model's unconstrained coordinates.  SGLD is
        biased at any ε > 0; the bias shrinks with ε.
    preconditioned
        Use pSGLD's RMSprop metric.
    rmsprop_decay, rmsprop_eps
        β and λ of pSGLD.
    **options
        The options of every sampler: ``subsample_size``, ``data_plate``, ``potential``,
        ``control_variate``, ``precondition``, ``init_strategy``,
        ``steps_per_sample`` (default 10 here, more in high D with ``step_size="auto"``)
        (see :class:`~pplsamplers.infer.adapter.SubsampledKernel`).

    Examples
    --------
    Ten of the 100 data per step, with a fixed step size:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> run(SGLD(model, step_size=1e-3, subsample_size=10)).get_samples()["mu"].shape
    (100,)
    """

    def __init__(
        self,
        model: Callable | None = None,
        step_size: float | str = "auto",
        *,
        preconditioned: bool = False,
        rmsprop_decay: float = 0.99,
        rmsprop_eps: float = 1e-5,
        **options: Any,
    ) -> None:
        self.config = SGLDConfig(step_size, preconditioned, rmsprop_decay, rmsprop_eps)
        super().__init__(model, sgld_spec(self.config), **options)


class PSGLD(SGLD):
    """pSGLD: :class:`SGLD` with ``preconditioned=True`` (RMSprop metric, frozen after warmup)."""

    def __init__(
        self, model: Callable | None = None, step_size: float | str = "auto", **options: Any
    ) -> None:
        super().__init__(model, step_size, preconditioned=True, **options)


__all__ = ["PSGLD", "SGLD", "SGLDConfig", "sgld_spec"]
