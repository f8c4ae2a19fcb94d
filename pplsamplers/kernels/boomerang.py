"""The Boomerang sampler, declared on the PDMP builder.

Goan et al. (pdmp-bnn-boomerang-goan.txt) §2.3 and Bierkens et al. (2020), with the two
errata of DESIGN §5 and event times from Alg. 2, as a
:class:`~pplsamplers.pdmp.builder.Dynamics`:

* reference N(x*, Σ*) ⊗ N(0, Σ*) (:class:`~pplsamplers.kernels.boomerang_reference.GaussianReference`,
  a field of :class:`BoomerangParams`);
* flow: x(t) = x* + (x − x*) cos t + v sin t, v(t) = −(x − x*) sin t + v cos t (x(0) = x;
  the paper prints the sign of the first term wrong);
* rate: λ(t) = [v(t)·∇E(x(t))]_+ with ∇E(x) = ∇Ũ(x) − Σ*⁻¹(x − x*), *not* ∇U as the paper
  prints: the Gaussian part is carried by the flow;
* reflection (eq. 6 with ∇E): v' = v − 2 (∇E·v / ∇E·Σ*∇E) Σ*∇E;
* refreshment at rate λ_ref: v ~ N(0, Σ*).

Rate evaluations use one ``potential.directional`` (jvp) each; the reflection uses the
gradient of the minibatch that accepted the event.  Full-batch, minibatch and
control-variate gradients come from the potential.  On a whitened potential the natural
reference is N(0, I).
"""

from __future__ import annotations

from typing import NamedTuple, Unpack

from pplsamplers.kernels.boomerang_reference import GaussianReference
from pplsamplers.pdmp.builder import (
    PDMP,
    Dynamics,
    PDMPState,
    ThinningArguments,
    ThinningOptions,
    build,
    make_pdmp_params,
)
from pplsamplers.pdmp.events import PDMPInfo
from pplsamplers.pdmp.flow import elliptical_flow
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array

BoomerangState = PDMPState
BoomerangInfo = PDMPInfo


class BoomerangParams(NamedTuple):
    """Tunables: the :class:`~pplsamplers.pdmp.builder.PDMPParams` fields, whose times are
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
    sample_interval: float = 1.0,
    t_init: float = 0.25,
    max_extrapolation: float = 0.5,
    refresh_rate: float = 1.0,
) -> BoomerangParams:
    """:class:`BoomerangParams` from Python values, validated (errors name the argument).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.kernels.boomerang_reference import gaussian_reference
    >>> make_params(gaussian_reference(jnp.zeros(2), jnp.ones(2))).t_init
    Array(0.25, dtype=float32)
    """
    common = make_pdmp_params(
        sample_interval, t_init, max_extrapolation, refresh_rate, reference.mean.dtype
    )
    return BoomerangParams(*common, reference)


def energy_gradient(
    potential: SubsampledPotential, reference: GaussianReference, x: Array, idx: Array
) -> Array:
    """∇E(x) = ∇Ũ(x) − Σ*⁻¹(x − x*) on minibatch ``idx`` (DESIGN §5)."""
    return potential.grad(x, idx) - reference.precision_times(x - reference.mean)


def dynamics() -> Dynamics:
    """The Boomerang declaration (module docstring)."""

    def rate(
        potential: SubsampledPotential, params: BoomerangParams, x: Array, v: Array, idx: Array
    ) -> tuple[Array, Array]:
        reference = params.reference
        value, per_example = potential.directional(x, v, idx)
        # v·∇E = v·∇Ũ − v·Σ*⁻¹(x − x*)
        return value - v @ reference.precision_times(x - reference.mean), per_example

    def bounce(
        potential: SubsampledPotential, params: BoomerangParams, x: Array, v: Array, idx: Array
    ) -> Array:
        reference = params.reference
        return reference.reflect(v, energy_gradient(potential, reference, x, idx))

    return Dynamics(
        flow=lambda params: elliptical_flow(params.reference.mean),
        rate=rate,
        reflect=bounce,
        draw_velocity=lambda key, params, position: params.reference.draw(key),
    )


def build_pdmp(**thinning: Unpack[ThinningArguments]) -> PDMP:
    """The Boomerang's ``(init, kernel, skeleton)`` from the structural
    :class:`~pplsamplers.pdmp.builder.ThinningOptions`, given as keyword arguments
    (:class:`~pplsamplers.pdmp.builder.ThinningArguments`).

    Examples
    --------
    With the target equal to the reference, ∇E = 0 and nothing bounces:

    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_potential
    >>> from pplsamplers.kernels.boomerang_reference import gaussian_reference
    >>> pot = tiny_potential(2)
    >>> params = make_params(gaussian_reference(jnp.zeros(2), jnp.ones(2)))
    >>> pdmp = build_pdmp()
    >>> state = pdmp.init(jax.random.key(0), jnp.ones(2), pot, params)
    >>> int(pdmp.kernel(jax.random.key(1), state, pot, params)[1].num_bounces)
    0
    """
    return build(dynamics(), ThinningOptions(**thinning))


__all__ = [
    "BoomerangInfo",
    "BoomerangParams",
    "BoomerangState",
    "build_pdmp",
    "dynamics",
    "energy_gradient",
    "make_params",
]
