"""The Boomerang sampler, declared on the PDMP builder.

Goan et al. §2.3 and Bierkens et al. (2020), with event times from adaptive interpolation
thinning (Goan et al. Alg. 2), as a :class:`~pplsamplers.kernels.pdmp.builder.Dynamics`:

* reference N(x*, Σ*) ⊗ N(0, Σ*) (:class:`~pplsamplers.kernels.pdmp.reference.GaussianReference`,
  a field of :class:`BoomerangParams`);
* flow: x(t) = x* + (x − x*) cos t + v sin t, v(t) = −(x − x*) sin t + v cos t, so that
  x(0) = x (the paper prints the sign of the first term wrong; ``docs/design.md``);
* rate: λ(t) = [v(t)·∇E(x(t))]_+ with ∇E(x) = ∇Ũ(x) − Σ*⁻¹(x − x*), *not* ∇U as the paper
  prints: the Gaussian part is carried by the flow, and counting it again samples the wrong
  law;
* reflection (eq. 6 with ∇E): v' = v − 2 (∇E·v / ∇E·Σ*∇E) Σ*∇E;
* refreshment at rate λ_ref: v ~ N(0, Σ*).

Rate evaluations use one ``estimator.directional`` (jvp) each; the reflection uses the
gradient of the minibatch that accepted the event.  On the shared warmup's whitened estimator
the natural reference is N(0, I); the automatic one is N(x*, γ diag(H(x*))⁻¹) at the mode or
the control variate's anchor."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from pplsamplers import validation
from pplsamplers.estimator import Estimator
from pplsamplers.kernels.pdmp.builder import (
    PDMP,
    Dynamics,
    PDMPState,
    ThinningOptions,
    build,
    make_pdmp_params,
)
from pplsamplers.kernels.pdmp.events import PDMPInfo
from pplsamplers.kernels.pdmp.flow import elliptical_flow
from pplsamplers.kernels.pdmp.reference import (
    GaussianReference,
    build_reference,
    gaussian_reference,
)
from pplsamplers.kernels.pdmp.tuning import (
    check_pdmp_options,
    init_adapt,
    interval_warmup,
    pdmp_spec,
    radial_refresh_rate,
)
from pplsamplers.kernels.spec import KernelSpec, WarmupContext
from pplsamplers.types import Array, PRNGKey

BoomerangState = PDMPState
BoomerangInfo = PDMPInfo


class BoomerangParams(NamedTuple):
    """Tunables: the :class:`~pplsamplers.kernels.pdmp.builder.PDMPParams` fields, whose times are
    angles of the elliptical flow, and the reference N(x*, Σ*)."""

    sample_interval: Array
    """Δ in radians: 2π is one whole orbit of the flow around x*."""
    t_init: Array
    """Angle of the envelope's second evaluation."""
    max_extrapolation: Array
    """Largest angle an envelope is extrapolated past its newest evaluation."""
    refresh_rate: Array
    """λ_ref, refreshments per radian."""
    reference: GaussianReference
    """N(x*, Σ*): the flow's centre x* and the velocity law N(0, Σ*)."""


def make_params(
    reference: GaussianReference,
    *,
    sample_interval: float,
    t_init: float,
    max_extrapolation: float,
    refresh_rate: float,
) -> BoomerangParams:
    """:class:`BoomerangParams` from Python values, validated (errors name the argument).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.kernels.pdmp.reference import gaussian_reference
    >>> reference = gaussian_reference(jnp.zeros(2), jnp.ones(2))
    >>> make_params(reference, sample_interval=1.0, t_init=0.25, max_extrapolation=0.5,
    ...             refresh_rate=1.0).t_init
    Array(0.25, dtype=float32)
    """
    common = make_pdmp_params(
        sample_interval, t_init, max_extrapolation, refresh_rate, reference.mean.dtype
    )
    return BoomerangParams(*common, reference)


def energy_gradient(
    estimator: Estimator, reference: GaussianReference, x: Array, idx: Array
) -> Array:
    """∇E(x) = ∇Ũ(x) − Σ*⁻¹(x − x*) on minibatch ``idx``."""
    return estimator.grad(x, idx) - reference.precision_times(x - reference.mean)


def dynamics() -> Dynamics:
    """The Boomerang declaration (module docstring)."""

    def rate(
        estimator: Estimator, params: BoomerangParams, x: Array, v: Array, idx: Array
    ) -> tuple[Array, Array]:
        reference = params.reference
        value, per_example = estimator.directional(x, v, idx)
        # v·∇E = v·∇Ũ − v·Σ*⁻¹(x − x*)
        return value - v @ reference.precision_times(x - reference.mean), per_example

    def bounce(
        estimator: Estimator, params: BoomerangParams, x: Array, v: Array, idx: Array
    ) -> Array:
        reference = params.reference
        return reference.reflect(v, energy_gradient(estimator, reference, x, idx))

    return Dynamics(
        flow=lambda params: elliptical_flow(params.reference.mean),
        rate=rate,
        reflect=bounce,
        draw_velocity=lambda key, params, position: params.reference.draw(key),
    )


def build_pdmp(thinning: ThinningOptions | None = None) -> PDMP:
    """The Boomerang's ``(init, kernel, skeleton)`` with the structural ``thinning`` options.

    Examples
    --------
    With the target equal to the reference, ∇E = 0 and nothing bounces:

    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> from pplsamplers.kernels.pdmp.reference import gaussian_reference
    >>> est = tiny_estimator(2)
    >>> params = make_params(gaussian_reference(jnp.zeros(2), jnp.ones(2)), sample_interval=1.0,
    ...                      t_init=0.25, max_extrapolation=0.5, refresh_rate=1.0)
    >>> pdmp = build_pdmp()
    >>> state = pdmp.init(jax.random.key(0), jnp.ones(2), est, params)
    >>> int(pdmp.kernel(jax.random.key(1), state, est, params)[1].num_bounces)
    0
    """
    return build(dynamics(), thinning)


STARTS = ("reference", "map", "model")
CURVATURES = ("hessian", "fisher", "full_hessian")


@dataclass(frozen=True)
class BoomerangOptions:
    """The Boomerang's options, validated once (``reference`` too, before any compilation).

    Parameters
    ----------
    reference : "auto" or tuple of array_like, default "auto"
        ``"auto"`` (default): N(x*, Σ*) with x* the control variate's anchor, else the mode,
        and Σ* = γ diag(curvature at x*)⁻¹; or ``(mean, covariance)`` over the model's flat
        unconstrained coordinates (variances, or a positive-definite matrix).
    curvature : {"hessian", "fisher", "full_hessian"}, default "hessian"
        ``"hessian"`` (exact diagonal, D Hessian-vector products) or ``"fisher"`` (summed
        squared per-example gradients plus the prior's curvature; with a control variate the
        exact diagonal is used, since the per-example gradients vanish at its anchor) for the
        automatic diagonal Σ*, or ``"full_hessian"`` for the dense inverse Hessian of the
        original Boomerang (D² memory).
    gamma : float, default 1.0
        γ > 0, the paper's scale of Σ* (eq. 5).
    refresh_rate : float or "auto", default 1.0
        λ_ref ≥ 0 per radian of the flow (one turn is 2π); ``"auto"`` is 1 at every dimension,
        since the ellipses move the radial direction every period.
    sample_interval : float or None, default None
        Δ > 0 in radians; ``None`` (default) adapts it during warmup to
        ``target_evals_per_sample`` rate evaluations per draw.
    target_evals_per_sample : float or "auto", default 20.0
        Rate evaluations one draw should cost (warmup target for Δ).
    t_init, max_extrapolation : float, defaults 0.25 and 0.5
        Envelope start offset and horizon cap, in radians.  The horizon cap matters more than
        α: a long extrapolation can step over an event (no proposal, no violation counted).
    thinning : ThinningOptions or dict, default ThinningOptions()
        :class:`~pplsamplers.kernels.pdmp.builder.ThinningOptions` (or a dict of its fields):
        α, the caps on evaluations and events, and the envelope's noise and fit margins.
    start : {"reference", "map", "model"}, default "reference"
        ``"reference"`` (default): chains start at draws of N(x*, Σ*); ``"map"``: at x*;
        ``"model"``: the shared warmup's start.  ``init_params`` always wins.
    """

    reference: str | tuple[Array, Array] = "auto"
    curvature: str = "hessian"
    gamma: float = 1.0
    refresh_rate: float | str = 1.0
    sample_interval: float | None = None
    target_evals_per_sample: float | str = 20.0
    t_init: float = 0.25
    max_extrapolation: float = 0.5
    thinning: ThinningOptions | dict = field(default_factory=ThinningOptions)
    start: str = "reference"

    def __post_init__(self) -> None:
        if self.t_init is None or self.max_extrapolation is None:
            raise ValueError(
                "t_init and max_extrapolation must be given for the Boomerang "
                "(finite positive angles of its flow)."
            )
        check_pdmp_options(self)
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


def given_reference(mean: Array, covariance: Array, context: WarmupContext) -> GaussianReference:
    """A user reference N(``mean``, ``covariance``) over the model's x, in the kernel's z
    (x = c + L z: z* = L⁻¹(x* − c), Σ_z = L⁻¹ Σ L⁻ᵀ)."""
    gaussian_reference(mean, covariance, dim=context.init_position.shape[0])  # validated in x
    whitening = context.whitening
    factor = np.asarray(whitening.matrix(), dtype=float)
    inverse = np.linalg.inv(factor)
    mean_z = np.asarray(whitening.to_z(jnp.asarray(mean, whitening.center.dtype)), dtype=float)
    covariance = np.asarray(covariance, dtype=float)
    if covariance.ndim == 1 and np.count_nonzero(factor - np.diag(np.diag(factor))) == 0:
        return gaussian_reference(mean_z, covariance / np.diag(factor) ** 2)
    full = np.diag(covariance) if covariance.ndim == 1 else covariance
    return gaussian_reference(mean_z, inverse @ full @ inverse.T)


def automatic_reference(
    options: BoomerangOptions, estimator: Estimator, context: WarmupContext
) -> GaussianReference:
    """N(x*, γ diag(curvature at x*)⁻¹) at x* = the anchor, else the mode, in z.  Where the
    curvature there is not positive (the centre of a variational fit on a curved posterior
    need not be a minimum), the whitening already gives the posterior unit scale, so the
    reference is N(x*, γ I)."""
    mean = context.anchor if context.anchor is not None else context.mode
    curvature = options.curvature
    if context.anchor is not None and curvature == "fisher":
        curvature = "hessian"  # a control variate's per-datum gradients vanish at its anchor
    known = context.curvature_at(mean)
    try:
        return build_reference(
            estimator, mean, curvature=curvature, gamma=options.gamma, known=known
        )
    except ValueError:
        gradient = estimator.full_value_and_grad(mean)[1]
        if not (context.whitened and bool(jnp.all(jnp.isfinite(gradient)))):
            raise
        return GaussianReference(mean, jnp.full(estimator.dim, options.gamma, mean.dtype))


def declare(options: BoomerangOptions) -> KernelSpec:
    """The declaration of the Boomerang to the adapter."""
    pdmp = build_pdmp(options.thinning)
    automatic = isinstance(options.reference, str)

    def default_params(
        rng_key: PRNGKey, estimator: Estimator, context: WarmupContext
    ) -> BoomerangParams:
        if automatic:
            reference = automatic_reference(options, estimator, context)
        else:
            reference = given_reference(*options.reference, context)
        return make_params(
            reference,
            sample_interval=options.sample_interval or 1.0,
            t_init=options.t_init,
            max_extrapolation=options.max_extrapolation,
            refresh_rate=radial_refresh_rate(options.refresh_rate, estimator.dim, radial=False),
        )

    def start(rng_key: PRNGKey, estimator: Estimator, params: Any, context: WarmupContext) -> Array:
        reference = params.reference
        return (
            reference.mean if options.start == "map" else reference.mean + reference.draw(rng_key)
        )

    adapted = options.sample_interval is None  # else nothing to adapt
    return pdmp_spec(
        pdmp,
        default_params=default_params,
        warmup=interval_warmup(options.target_evals_per_sample) if adapted else None,
        warmup_init=lambda state, params: init_adapt(state.position),
        start=None if options.start == "model" else start,
        needs_mode=automatic,
    )


Options = BoomerangOptions
"""The options dataclass of this sampler (what the NumPyro class takes)."""
Info = PDMPInfo
"""The per-step diagnostics of this sampler's kernel."""

__all__ = [
    "Info",
    "Options",
    "BoomerangInfo",
    "BoomerangOptions",
    "BoomerangParams",
    "BoomerangState",
    "automatic_reference",
    "given_reference",
    "build_pdmp",
    "declare",
    "dynamics",
    "energy_gradient",
    "make_params",
]
