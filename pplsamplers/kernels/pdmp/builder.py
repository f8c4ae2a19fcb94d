"""One builder for the PDMPs with adaptive interpolation thinning (BPS, σBPS, Boomerang).

A PDMP is declared by its :class:`Dynamics` (Goan et al., §2):

* ``flow(params) -> Flow``: the deterministic motion between events;
* ``rate(estimator, params, x, v, idx) -> (G, per_example)``: the raw event rate at (x, v) on
  minibatch ``idx`` (λ = [G]_+) and the per-example terms of its jvp (for the noise margin);
* ``reflect(estimator, params, x, v, idx) -> v'``: the velocity after an accepted event, with
  the gradient of the minibatch that accepted it;
* ``draw_velocity(rng_key, params, position) -> v``: the refreshment law Φ(v) (``position``
  gives the shape and dtype).

:func:`build` turns a declaration into a :class:`PDMP` ``(init, kernel, skeleton)``: one step
body (Alg. 1 with event times from Alg. 2, run to the next grid time) and one skeleton body,
with the one :class:`~pplsamplers.kernels.pdmp.events.PDMPInfo`.  Tunables are the
``params`` (traced, so warmup may move them without recompiling): any NamedTuple with the
fields of :class:`PDMPParams` first, followed by the declaration's own (σBPS's A, the
Boomerang's reference).  Structural options are the :class:`ThinningOptions`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any, NamedTuple

import jax.numpy as jnp

from pplsamplers import validation
from pplsamplers.estimator import Estimator
from pplsamplers.kernels.pdmp.driver import Skeleton, advance, run_skeleton
from pplsamplers.kernels.pdmp.events import (
    PDMPInfo,
    interval_diagnostics,
    make_next_event,
    zero_counts,
)
from pplsamplers.kernels.pdmp.flow import Flow
from pplsamplers.kernels.pdmp.interpolation import Envelope, fresh_envelope
from pplsamplers.types import Array, PRNGKey

NOISY_DEFAULTS = MappingProxyType({"min_gap": 1.0, "noise_margin": 2.0})
"""Envelope noise handling used by default with minibatch / control-variate rates."""

FIT_MARGIN = 3.0
"""Default k_fit of the envelope's lack-of-fit margin (:mod:`pplsamplers.kernels.pdmp.lack_of_fit`)."""


class PDMPState(NamedTuple):
    """Position, velocity and the carried thinning envelope (it survives grid times)."""

    position: Array
    velocity: Array
    envelope: Envelope


class PDMPParams(NamedTuple):
    """The tunables every thinning PDMP has (a declaration's Params start with these).

    Attributes
    ----------
    sample_interval
        Δ, the time between two MCMC samples.
    t_init
        Time of the second evaluation that starts an envelope (Alg. 2).
    max_extrapolation
        Horizon cap: the furthest the envelope is extrapolated past its newest evaluation.
    refresh_rate
        λ_ref ≥ 0 of the refreshment clock.
    """

    sample_interval: Array
    t_init: Array
    max_extrapolation: Array
    refresh_rate: Array


def make_pdmp_params(
    sample_interval: float,
    t_init: float,
    max_extrapolation: float,
    refresh_rate: float,
    dtype: jnp.dtype | None = None,
) -> PDMPParams:
    """:class:`PDMPParams` from Python values, validated (errors name the argument).

    Examples
    --------
    >>> make_pdmp_params(1.0, 0.1, 1.0, 0.0).refresh_rate
    Array(0., dtype=float32)
    """
    for name, value in (
        ("sample_interval", sample_interval),
        ("t_init", t_init),
        ("max_extrapolation", max_extrapolation),
    ):
        validation.positive(name, value)
    validation.positive("refresh_rate", refresh_rate, allow_zero=True)
    dtype = dtype or jnp.result_type(float)
    times = (sample_interval, t_init, max_extrapolation, refresh_rate)
    return PDMPParams(*(jnp.asarray(t, dtype) for t in times))


class Dynamics(NamedTuple):
    """A PDMP declaration (module docstring)."""

    flow: Callable[[Any], Flow]
    rate: Callable[[Estimator, Any, Array, Array, Array], tuple[Array, Array]]
    reflect: Callable[[Estimator, Any, Array, Array, Array], Array]
    draw_velocity: Callable[[PRNGKey, Any, Array], Array]


@dataclass(frozen=True)
class ThinningOptions:
    """Structural options of interpolation thinning, validated once.

    Attributes
    ----------
    alpha
        α ≥ 1 of eq. (12): the envelope is α × the interpolated rate.
    max_evaluations
        Cap on rate evaluations per event (``proposal_cap_hits``).
    max_events_per_sample
        Cap on next-event iterations per sample interval (``interval_capped``).
    min_gap, noise_margin
        Noise handling of the envelope (see
        :func:`~pplsamplers.kernels.pdmp.interpolation.interpolation_thinning`); ``None``: 0 and 0
        (Alg. 2 as printed) with a full batch, :data:`NOISY_DEFAULTS` with minibatch or
        control-variate rates.
    fit_margin
        k_fit ≥ 0: the envelope adds k_fit times the curvature learned from its own
        residuals (:mod:`pplsamplers.kernels.pdmp.lack_of_fit`); 0 is Alg. 2 as printed.
    """

    alpha: float = 1.5
    max_evaluations: int = 1000
    max_events_per_sample: int = 10_000
    min_gap: float | None = None
    noise_margin: float | None = None
    fit_margin: float = FIT_MARGIN

    def __post_init__(self) -> None:
        validation.at_least("alpha", self.alpha, 1.0)  # eq. (12) of Goan et al.
        if validation.positive_int("max_evaluations", self.max_evaluations) < 2:
            raise ValueError(
                f"max_evaluations must be an integer >= 2; got {self.max_evaluations}."
            )
        validation.positive_int("max_events_per_sample", self.max_events_per_sample)
        for name in ("min_gap", "noise_margin", "fit_margin"):
            if getattr(self, name) is not None:
                validation.positive(name, getattr(self, name), allow_zero=True)

    def noise_handling(self, estimator: Estimator) -> tuple[float, float]:
        """``(min_gap, noise_margin)`` for ``estimator`` (class docstring)."""
        defaults = NOISY_DEFAULTS if not estimator.full_batch else {"min_gap": 0, "noise_margin": 0}
        min_gap = defaults["min_gap"] if self.min_gap is None else self.min_gap
        margin = defaults["noise_margin"] if self.noise_margin is None else self.noise_margin
        return float(min_gap), float(margin)

    def thinning_arguments(self, estimator: Estimator) -> dict[str, Any]:
        """The keyword arguments of
        :func:`~pplsamplers.kernels.pdmp.interpolation.interpolation_thinning` for ``estimator``:
        ``alpha``, ``max_evaluations``, and ``min_gap`` and ``noise_margin`` resolved by
        :meth:`noise_handling`, and ``fit_margin``."""
        min_gap, noise_margin = self.noise_handling(estimator)
        return {
            "alpha": self.alpha,
            "max_evaluations": self.max_evaluations,
            "min_gap": min_gap,
            "noise_margin": noise_margin,
            "fit_margin": float(self.fit_margin),
        }


class PDMP(NamedTuple):
    """What :func:`build` returns.

    Attributes
    ----------
    init
        ``(rng_key, position, estimator, params) -> PDMPState``: v ~ Φ, a fresh envelope.
    kernel
        ``(rng_key, state, estimator, params) -> (PDMPState, PDMPInfo)``: one sample interval.
    skeleton
        ``(rng_key, state, estimator, params, num_iterations) -> Skeleton``: the event path.
    """

    init: Callable[[PRNGKey, Array, Estimator, Any], PDMPState]
    kernel: Callable[[PRNGKey, PDMPState, Estimator, Any], tuple[PDMPState, PDMPInfo]]
    skeleton: Callable[[PRNGKey, PDMPState, Estimator, Any, int], Skeleton]


def build(dynamics: Dynamics, options: ThinningOptions | None = None) -> PDMP:
    """The ``init``, ``kernel`` and ``skeleton`` of the PDMP declared by ``dynamics``.

    Examples
    --------
    A one-dimensional BPS on U(x) = x²/2:

    >>> import jax, jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> from pplsamplers.kernels.pdmp.flow import linear_flow, reflect, refresh_gaussian
    >>> bps = Dynamics(
    ...     flow=lambda p: linear_flow(),
    ...     rate=lambda pot, p, x, v, idx: pot.directional(x, v, idx),
    ...     reflect=lambda pot, p, x, v, idx: reflect(v, pot.grad(x, idx)),
    ...     draw_velocity=lambda key, p, x: refresh_gaussian(key, jnp.ones_like(x)),
    ... )
    >>> pdmp, est = build(bps, ThinningOptions(alpha=1.0)), tiny_estimator(1)
    >>> params = PDMPParams(*(jnp.asarray(t) for t in (2.0, 0.1, 1.0, 1.0)))
    >>> state = pdmp.init(jax.random.key(0), jnp.ones(1), est, params)
    >>> state, info = pdmp.kernel(jax.random.key(1), state, est, params)
    >>> info.time_average.shape, int(info.bound_violations)
    ((1,), 0)
    """
    options = ThinningOptions() if options is None else options

    def next_event(estimator: Estimator, params: Any) -> tuple[Callable, Flow]:
        flow = dynamics.flow(params)
        thinning = options.thinning_arguments(estimator)
        noise_margin = thinning["noise_margin"]

        def noise_sd(per_example: Array) -> Array:
            if noise_margin == 0:
                return jnp.zeros((), per_example.dtype)
            return jnp.sqrt(estimator.noise_variance(per_example))

        def rate_along(x: Array, v: Array) -> Callable:
            def rate_fn(key: PRNGKey, t: Array) -> tuple[Array, Array, Array]:
                x_t, v_t = flow.move(x, v, t)
                idx = estimator.sample_indices(key)
                value, per_example = dynamics.rate(estimator, params, x_t, v_t, idx)
                return value, noise_sd(per_example), idx

            return rate_fn

        event = make_next_event(
            rate_along=rate_along,
            reflect_at=partial(dynamics.reflect, estimator, params),
            draw_velocity=lambda key, x: dynamics.draw_velocity(key, params, x),
            flow=flow,
            params=params,
            **thinning,
        )
        return event, flow

    def init(rng_key: PRNGKey, position: Array, estimator: Estimator, params: Any) -> PDMPState:
        position = jnp.asarray(position)
        velocity = dynamics.draw_velocity(rng_key, params, position).astype(position.dtype)
        return PDMPState(position, velocity, fresh_envelope(position.dtype))

    def kernel(
        rng_key: PRNGKey, state: PDMPState, estimator: Estimator, params: Any
    ) -> tuple[PDMPState, PDMPInfo]:
        event, flow = next_event(estimator, params)
        out = advance(
            rng_key,
            state.position,
            state.velocity,
            (state.envelope, zero_counts(state.position.dtype)),
            interval=params.sample_interval,
            next_event=event,
            flow=flow,
            max_iterations=options.max_events_per_sample,
        )
        envelope, counts = out.kernel_state
        info = interval_diagnostics(out, counts, estimator.n, params.sample_interval)
        return PDMPState(out.position, out.velocity, envelope), info

    def skeleton(
        rng_key: PRNGKey,
        state: PDMPState,
        estimator: Estimator,
        params: Any,
        num_iterations: int,
    ) -> Skeleton:
        event, flow = next_event(estimator, params)
        path, _ = run_skeleton(
            rng_key,
            state.position,
            state.velocity,
            (state.envelope, zero_counts(state.position.dtype)),
            next_event=event,
            flow=flow,
            num_iterations=num_iterations,
            horizon=jnp.inf,
        )
        return path

    return PDMP(init, kernel, skeleton)


__all__ = [
    "FIT_MARGIN",
    "NOISY_DEFAULTS",
    "PDMP",
    "Dynamics",
    "PDMPParams",
    "PDMPState",
    "ThinningOptions",
    "build",
    "make_pdmp_params",
]
