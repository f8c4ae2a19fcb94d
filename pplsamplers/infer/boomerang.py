"""The Boomerang declared on the generic adapter (:mod:`pplsamplers.kernels.boomerang`).

The reference N(x*, Σ*) is a tunable (:class:`~pplsamplers.kernels.boomerang.BoomerangParams`
``.reference``) built once by ``default_params`` for the potential the kernel runs on; warmup
adapts Δ only (t_init and the horizon cap are in radians of the flow and fixed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers import validation
from pplsamplers.infer.adapter import SubsampledKernel
from pplsamplers.infer.pdmp import (
    PDMPConfig,
    config_from,
    init_adapt,
    interval_warmup,
    pdmp_spec,
    radial_refresh_rate,
)
from pplsamplers.infer.spec import KernelSpec
from pplsamplers.kernels import boomerang
from pplsamplers.kernels.boomerang_reference import (
    GaussianReference,
    build_reference,
    gaussian_reference,
)
from pplsamplers.pdmp.builder import FIT_MARGIN
from pplsamplers.potential import SubsampledPotential, find_map
from pplsamplers.types import Array, PRNGKey

STARTS = ("reference", "map", "model")
CURVATURES = ("hessian", "fisher", "full_hessian")
MAP_EVALS = (500, 50)
"""``find_map``'s default data cost: 500 minibatch steps (n each) and ~50 full passes."""


@dataclass(frozen=True)
class BoomerangConfig(PDMPConfig):
    """The Boomerang's options, validated once (``reference`` too, before any compilation)."""

    t_init: float = 0.25
    max_extrapolation: float = 0.5
    reference: str | tuple[Array, Array] = "auto"
    curvature: str = "hessian"
    gamma: float = 1.0
    start: str = "reference"
    map_seed: int = 0

    def __post_init__(self) -> None:
        if self.t_init is None or self.max_extrapolation is None:
            raise ValueError(
                "t_init and max_extrapolation must be given for the Boomerang "
                "(finite positive times in radians of its flow)."
            )
        super().__post_init__()
        validation.one_of("curvature", self.curvature, CURVATURES)
        validation.positive("gamma", self.gamma)
        validation.one_of("start", self.start, STARTS)
        if isinstance(self.reference, str):
            validation.one_of("reference", self.reference, ("auto",))
            return
        try:
            mean, covariance = self.reference
        except (TypeError, ValueError):
            raise ValueError("reference must be 'auto' or a pair (mean, covariance).") from None
        gaussian_reference(mean, covariance)  # validates now


@dataclass
class SetupCost:
    """What building the reference cost: seconds and per-datum evaluations (a lower bound:
    L-BFGS line searches may evaluate more)."""

    seconds: float = 0.0
    data_evals: int = 0
    notes: list[str] = field(default_factory=list)


def kernel_reference(
    potential: SubsampledPotential, mean: Array, covariance: Array
) -> GaussianReference:
    """A user reference N(``mean``, ``covariance``), given in the model's flat unconstrained
    coordinates x, in the kernel's coordinates z (the same unless the potential is
    preconditioned, x = x₀ + L z: then z* = L⁻¹(x* − x₀) and Σ_z = L⁻¹ Σ L⁻ᵀ)."""
    gaussian_reference(mean, covariance, dim=potential.dim)  # validated in x
    dtype = jnp.asarray(potential.init_position).dtype
    mean = jnp.asarray(mean, dtype)
    covariance = np.asarray(covariance, dtype=float)
    jacobian = np.asarray(jax.jacfwd(potential.from_model)(mean), dtype=float)
    z_mean = potential.from_model(mean)
    if covariance.ndim == 1 and np.array_equal(jacobian, np.diag(np.diag(jacobian))):
        return gaussian_reference(z_mean, np.diag(jacobian) ** 2 * covariance)
    full = np.diag(covariance) if covariance.ndim == 1 else covariance
    return gaussian_reference(z_mean, jacobian @ full @ jacobian.T)


def make_reference(
    config: BoomerangConfig,
    potential: SubsampledPotential,
    cost: SetupCost,
    mode: Array | None = None,
) -> GaussianReference:
    """The reference for ``potential``: the user's, or x* = the control-variate anchor (else
    ``mode``, the shared warmup's, else the MAP) and Σ* = γ diag(curvature at x*)⁻¹ (or the
    dense γ H⁻¹)."""
    started, evals = time.perf_counter(), 0
    if not isinstance(config.reference, str):
        reference = kernel_reference(potential, *config.reference)
    else:
        mean, curvature = potential.anchor, config.curvature
        if mean is None and mode is not None:
            mean = mode
        elif mean is None:
            mean = find_map(jax.random.PRNGKey(config.map_seed), potential).position
            evals += MAP_EVALS[0] * potential.n + MAP_EVALS[1] * potential.N
        elif curvature == "fisher":
            # a control-variate potential's per-datum gradients vanish at its anchor, so the
            # summed squared gradients are not available there: use the exact diagonal
            curvature = "hessian"
            cost.notes.append("curvature 'fisher' replaced by 'hessian' (control variate)")
        try:
            reference = build_reference(
                jax.random.PRNGKey(config.map_seed),
                potential,
                curvature=curvature,
                gamma=config.gamma,
                mean=mean,
            )
        except ValueError:
            # the shared warmup's centre need not be a minimum (a variational fit's mean on a
            # curved posterior): its curvature is no covariance there, but the whitening
            # already gives the posterior unit scale, so the reference is N(x*, γ I) in z
            # (not where the potential is not finite there: that error stands)
            mean = jnp.asarray(mean)
            if not (
                potential.whitened and jnp.all(jnp.isfinite(potential.full_value_and_grad(mean)[1]))
            ):
                raise
            reference = GaussianReference(mean, jnp.full(potential.dim, config.gamma, mean.dtype))
            cost.notes.append(
                f"curvature {curvature!r} at the reference mean is not positive definite: "
                "reference N(x*, γ I) in the shared warmup's whitened coordinates"
            )
        evals += potential.N * (1 if curvature == "fisher" else potential.dim)
    cost.seconds, cost.data_evals = time.perf_counter() - started, evals
    return reference


def boomerang_spec(config: BoomerangConfig, cost: SetupCost | None = None) -> KernelSpec:
    """The :class:`KernelSpec` of the Boomerang (``cost`` records the reference set-up)."""
    cost = SetupCost() if cost is None else cost
    pdmp = boomerang.build_pdmp(**asdict(config.thinning))

    def default_params(
        rng_key: PRNGKey, potential: SubsampledPotential, mode: Array | None = None
    ) -> boomerang.BoomerangParams:
        return boomerang.make_params(
            make_reference(config, potential, cost, mode),
            sample_interval=config.sample_interval or 1.0,
            t_init=config.t_init,
            max_extrapolation=config.max_extrapolation,
            refresh_rate=radial_refresh_rate(config.refresh_rate, potential.dim, radial=False),
        )

    def start(rng_key: PRNGKey, potential: SubsampledPotential, params: Any) -> Array:
        reference = params.reference
        return reference.mean if config.start == "map" else reference.mean + reference.draw(rng_key)

    adapted = config.sample_interval is None  # else nothing to adapt
    warmup = interval_warmup(config.target_evals_per_sample) if adapted else None
    return pdmp_spec(
        pdmp,
        default_params=default_params,
        warmup=warmup,
        warmup_init=lambda state, params: init_adapt(state.position),
        start=None if config.start == "model" else start,
    )


class Boomerang(SubsampledKernel):
    """The Boomerang sampler with adaptive interpolation thinning, as a NumPyro kernel.

    Goan et al. §2.3 / Bierkens et al. (2020) with the errata of DESIGN §5: elliptical flow
    around x*, velocities N(0, Σ*) refreshed at rate λ_ref, rate [v·∇E]_+ and reflection in
    the Σ* metric with ∇E = ∇Ũ − Σ*⁻¹(x − x*); event times by Alg. 2.

    The reference N(x*, Σ*) is built automatically (``reference="auto"``) for the potential
    the kernel runs on: x* is the control-variate anchor when there is one (the MAP with
    ``control_variate=True``), else the MAP (:func:`~pplsamplers.potential.find_map`), and
    Σ* = γ diag(curvature at x*)⁻¹ with ``curvature="hessian"`` (exact diagonal, D
    Hessian-vector products) or ``"fisher"`` (summed squared per-example gradients plus the
    prior's curvature; with a control variate the exact diagonal is used, since the
    per-example gradients of a control-variate potential vanish at its anchor).
    ``reference=(mean, covariance)`` gives it instead: a vector of variances, or a full
    covariance matrix (used through its Cholesky factor).  A covariance that is not positive
    definite raises ``ValueError``.  After ``init`` the reference is ``kernel.reference``, and
    the one-time cost of building it is ``kernel.setup_seconds`` and
    ``kernel.setup_data_evals`` (a lower bound: MAP search, curvature and control-variate
    anchor passes; L-BFGS line searches may evaluate more).

    Parameters
    ----------
    model
        A NumPyro model with a data plate.
    reference
        ``"auto"`` or ``(mean, covariance)`` in the flat unconstrained space.
    curvature
        ``"hessian"`` or ``"fisher"`` for the automatic diagonal Σ* (Goan et al.), or
        ``"full_hessian"`` for the dense inverse Hessian of the original Boomerang
        (Bierkens et al. 2020; D² memory).
    gamma
        γ > 0, the paper's scale of Σ* (eq. 5).
    refresh_rate
        λ_ref ≥ 0 (time is in radians of the flow; one turn is 2π); ``"auto"`` is 1 at every
        dimension, since the ellipses move the radial direction every period
        (:func:`~pplsamplers.infer.pdmp.radial_refresh_rate`).
    alpha
        α ≥ 1 of eq. (12).
    sample_interval
        Δ > 0; ``None`` adapts it during warmup to ``target_evals_per_sample``.
    target_evals_per_sample
        Rate evaluations one sample should cost (warmup target for Δ).
    t_init, max_extrapolation
        Envelope start offset and horizon cap, in radians.  The horizon cap matters more than
        α: a long extrapolation can step over an event (no proposal, no violation counted).
    max_evaluations, max_events_per_sample, min_gap, noise_margin, fit_margin
        As in :class:`~pplsamplers.BPS`.
    start
        ``"reference"`` (default): chains start at draws of N(x*, Σ*); ``"map"``: at x*;
        ``"model"``: NumPyro's ``init_strategy``.  ``init_params`` always wins.
    map_seed
        Seed of the MAP search.
    **options
        What every sampler takes (:class:`~pplsamplers.infer.adapter.SubsampledKernel`).

    Examples
    --------
    With a control variate, whose anchor is the reference's mean x*:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> kernel = Boomerang(model, subsample_size=20, control_variate=True)
    >>> run(kernel, num_warmup=50).get_samples()["mu"].shape
    (100,)
    """

    def __init__(
        self,
        model: Callable | None = None,
        *,
        reference: str | tuple[Array, Array] = "auto",
        curvature: str = "hessian",
        gamma: float = 1.0,
        refresh_rate: float | Literal["auto"] = 1.0,
        alpha: float = 1.5,
        sample_interval: float | None = None,
        target_evals_per_sample: float = 20.0,
        t_init: float = 0.25,
        max_extrapolation: float = 0.5,
        max_evaluations: int = 1000,
        max_events_per_sample: int = 10_000,
        min_gap: float | None = None,
        noise_margin: float | None = None,
        fit_margin: float = FIT_MARGIN,
        start: str = "reference",
        map_seed: int = 0,
        **options: Any,
    ) -> None:
        self.config = config_from(BoomerangConfig, locals())
        self.setup = SetupCost()
        super().__init__(model, boomerang_spec(self.config, self.setup), **options)

    @property
    def reference(self) -> GaussianReference | None:
        """N(x*, Σ*) in the kernel's coordinates (``None`` before ``init``)."""
        return None if self.prepared is None else self.prepared.params.reference

    @property
    def setup_seconds(self) -> float:
        """Seconds spent building the reference."""
        return self.setup.seconds

    @property
    def setup_data_evals(self) -> int:
        """Per-datum evaluations of the reference set-up and of the control-variate anchor
        (its full pass, and the MAP search when ``control_variate=True``)."""
        evals = self.setup.data_evals
        potential = self.potential
        if potential is not None and potential.anchor is not None:
            evals += potential.N
            if self.options.control_variate is True:
                evals += MAP_EVALS[0] * potential.n + MAP_EVALS[1] * potential.N
        return int(evals)


__all__ = [
    "Boomerang",
    "BoomerangConfig",
    "SetupCost",
    "boomerang_spec",
    "kernel_reference",
    "make_reference",
]
