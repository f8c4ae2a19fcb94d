"""The Bouncy Particle Sampler (BPS) and σBPS, declared on the PDMP builder.

Goan et al. (pdmp-bnn-boomerang-goan.txt) §2.1–2.2, with event times from Alg. 2
(:mod:`pplsamplers.pdmp.interpolation`), as a :class:`~pplsamplers.pdmp.builder.Dynamics`:

* flow (§2.2): x(t) = x + A v t, v constant; A = I for BPS, A = diag(σ̂) for σBPS;
* rate (eq. 2 / §2.2): λ(t) = [(A v)·∇Ũ(x + A v t)]_+, one ``potential.directional`` (jvp)
  per evaluation;
* reflection (eq. 3 / eq. 4): v' = v − 2 (A∇Ũ·v / ‖A∇Ũ‖²) A∇Ũ, with the gradient of the
  minibatch that accepted the event;
* refreshment (§2.4): at rate λ_ref, v ~ N(0, s² I) (s = ``velocity_scale``, structural).

A is a tunable (:class:`BPSParams` ``.direction_scale``) that σBPS's warmup sets.  Gradients
are exact with a full-batch potential (``n == N``), approximate with a minibatch potential (the
paper's scheme), and much less noisy with a control-variate potential: the kernel only sees
the potential.  One kernel step is one MCMC sample: the PDMP runs to the next grid time (Δ
later, DESIGN §3.4) and the :class:`~pplsamplers.pdmp.events.PDMPInfo` carries the exact
time-averages of x and x² over the interval.
"""

from __future__ import annotations

from typing import NamedTuple, Unpack

import jax.numpy as jnp

from pplsamplers import validation
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
from pplsamplers.pdmp.flow import linear_flow, reflect, refresh_gaussian
from pplsamplers.potential import SubsampledPotential
from pplsamplers.types import Array, PRNGKey

BPSState = PDMPState
BPSInfo = PDMPInfo


class BPSParams(NamedTuple):
    """Tunables: the :class:`~pplsamplers.pdmp.builder.PDMPParams` fields and σBPS's A."""

    sample_interval: Array
    t_init: Array
    max_extrapolation: Array
    refresh_rate: Array
    direction_scale: Array
    """A = diag(``direction_scale``) (ones for plain BPS)."""


def make_params(
    dim: int,
    *,
    sample_interval: float = 1.0,
    t_init: float = 0.1,
    max_extrapolation: float = 1.0,
    refresh_rate: float = 1.0,
    direction_scale: Array | None = None,
    dtype: jnp.dtype | None = None,
) -> BPSParams:
    """:class:`BPSParams` from Python values, validated (``ValueError`` names the argument).

    Examples
    --------
    >>> make_params(2, sample_interval=0.5).direction_scale
    Array([1., 1.], dtype=float32)
    """
    common = make_pdmp_params(sample_interval, t_init, max_extrapolation, refresh_rate, dtype)
    dtype = common.sample_interval.dtype
    scale = (
        jnp.ones(dim, dtype)
        if direction_scale is None
        else jnp.asarray(validation.positive_array("direction_scale", direction_scale), dtype)
    )
    if scale.shape != (dim,):
        raise ValueError(f"direction_scale must have shape ({dim},); got {scale.shape}.")
    return BPSParams(*common, scale)


def dynamics(velocity_scale: float = 1.0) -> Dynamics:
    """The BPS / σBPS declaration (module docstring)."""

    def rate(
        potential: SubsampledPotential, params: BPSParams, x: Array, v: Array, idx: Array
    ) -> tuple[Array, Array]:
        return potential.directional(x, params.direction_scale * v, idx)  # eq. (2)

    def bounce(
        potential: SubsampledPotential, params: BPSParams, x: Array, v: Array, idx: Array
    ) -> Array:
        return reflect(v, params.direction_scale * potential.grad(x, idx))  # eq. (3) / (4)

    def draw_velocity(rng_key: PRNGKey, params: BPSParams, position: Array) -> Array:
        return refresh_gaussian(rng_key, velocity_scale * jnp.ones_like(position))

    return Dynamics(
        flow=lambda params: linear_flow(params.direction_scale),
        rate=rate,
        reflect=bounce,
        draw_velocity=draw_velocity,
    )


def build_pdmp(*, velocity_scale: float = 1.0, **thinning: Unpack[ThinningArguments]) -> PDMP:
    """BPS's ``(init, kernel, skeleton)`` from the structural options.

    Parameters
    ----------
    velocity_scale
        s > 0 of the velocity law N(0, s² I).
    **thinning
        The :class:`~pplsamplers.pdmp.builder.ThinningOptions` (``alpha``,
        ``max_evaluations``, ``max_events_per_sample``, ``min_gap``, ``noise_margin``;
        ``min_gap``/``noise_margin`` ``None``: 0 with a full batch, the noisy defaults with
        minibatches).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_potential
    >>> pot = tiny_potential(2)
    >>> pdmp, params = build_pdmp(alpha=1.0), make_params(2)
    >>> state = pdmp.init(jax.random.key(0), jnp.zeros(2), pot, params)
    >>> state, info = pdmp.kernel(jax.random.key(1), state, pot, params)
    >>> state.position.shape, info.time_average.shape, int(info.bound_violations)
    ((2,), (2,), 0)
    """
    validation.positive("velocity_scale", velocity_scale)
    return build(dynamics(float(velocity_scale)), ThinningOptions(**thinning))


__all__ = [
    "BPSInfo",
    "BPSParams",
    "BPSState",
    "build_pdmp",
    "dynamics",
    "make_params",
]
