"""Alg. 1 of Goan et al.: the next event of a PDMP from competing clocks, and the one ``Info``
every PDMP reports.

:func:`make_next_event` races a refreshment time τ_ref ~ Exp(λ_ref) against the thinned event
time of :func:`~pplsamplers.kernels.pdmp.interpolation.interpolation_thinning` (Alg. 2), applies the
reflection or the refreshment, and keeps the envelope and the counters in the kernel state
that :func:`pplsamplers.kernels.pdmp.driver.advance` threads through a sample interval.
:func:`interval_diagnostics` turns one interval into the :class:`PDMPInfo` of every PDMP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.kernels.pdmp.driver import IntervalResult, NextEventFn
from pplsamplers.kernels.pdmp.flow import Flow
from pplsamplers.kernels.pdmp.interpolation import (
    Envelope,
    RateFn,
    ThinningStats,
    add_stats,
    fresh_envelope,
    interpolation_thinning,
    zero_stats,
)
from pplsamplers.types import Array, PRNGKey


class EventCounts(NamedTuple):
    """What a PDMP did between two grid times: thinning counters, bounces, refreshments."""

    thinning: ThinningStats
    bounces: Array
    refreshes: Array


def zero_counts(dtype: Any = float) -> EventCounts:
    """All counters zero."""
    count = jnp.zeros((), jnp.int32)
    return EventCounts(zero_stats(dtype), count, count)


def _unreflected(x: Array, v: Array, aux: Any) -> Array:
    """The velocity where no event was accepted (the other branch of the reflection)."""
    return v


def make_next_event(
    *,
    rate_along: Callable[[Array, Array], RateFn],
    reflect_at: Callable[[Array, Array, Any], Array],
    draw_velocity: Callable[[PRNGKey, Array], Array],
    flow: Flow,
    params: Any,
    **thinning: Any,
) -> NextEventFn:
    """A next-event function for :func:`pplsamplers.kernels.pdmp.driver.advance` (Alg. 1 + Alg. 2).

    The competing clocks of Alg. 1: a refreshment time τ_ref ~ Exp(λ_ref) and the thinned
    event time of :func:`interpolation_thinning`.  The kernel state threaded through the
    driver is ``(Envelope, EventCounts)``.

    Parameters
    ----------
    rate_along
        ``(x, v) -> rate_fn``: the raw rate G(t) along the flow from (x, v) (see
        :data:`RateFn`), returning the minibatch indices as aux.
    reflect_at
        ``(x(τ), v(τ), aux) -> v'``: the reflection at an accepted event, with the same aux.
    draw_velocity
        ``(key, x) -> v``: the refreshment law Φ(v) at position x.
    flow
        The deterministic flow.
    params
        The tunables (traced), a NamedTuple with the fields of
        :class:`~pplsamplers.kernels.pdmp.builder.PDMPParams`: λ_ref = ``refresh_rate`` ≥ 0 (0 never
        refreshes), and the envelope's start offset ``t_init`` and horizon cap
        ``max_extrapolation``.
    **thinning
        The structural options of :func:`interpolation_thinning`: ``alpha``,
        ``max_evaluations`` and optionally ``min_gap``, ``noise_margin``, ``fit_margin``,
        ``violation_tol``.
    """

    def next_event(
        rng_key: PRNGKey, x: Array, v: Array, carry: tuple[Envelope, EventCounts], horizon: Array
    ) -> tuple[Array, Array, tuple[Envelope, EventCounts], Array]:
        envelope, counts = carry
        refresh_key, thin_key, velocity_key = jax.random.split(rng_key, 3)
        rate = jnp.asarray(params.refresh_rate, x.dtype)
        draw = jax.random.exponential(refresh_key, dtype=x.dtype)
        t_refresh = jnp.where(rate > 0, draw / jnp.where(rate > 0, rate, 1.0), jnp.inf)
        out = interpolation_thinning(
            thin_key,
            rate_along(x, v),
            envelope,
            horizon=jnp.minimum(horizon, t_refresh),
            t_init=params.t_init,
            max_extrapolation=params.max_extrapolation,
            **thinning,
        )
        x_t, v_t = flow.move(x, v, out.time)
        bounced = lax.cond(out.accepted, reflect_at, _unreflected, x_t, v_t, out.aux)
        refreshed = out.reached_horizon & (t_refresh < horizon)
        v_after = jnp.where(
            out.accepted, bounced, jnp.where(refreshed, draw_velocity(velocity_key, x_t), v_t)
        )
        # after a reflection G(0+) = -G(tau) for the same minibatch: the envelope starts from it
        # (the envelope's learned lack of fit survives velocity jumps)
        fit = out.envelope.fit
        after_bounce = fresh_envelope(x.dtype, -out.rate, fit)._replace(noise=out.noise)
        envelope = jax.tree.map(
            lambda b, f, c: jnp.where(out.accepted, b, jnp.where(refreshed, f, c)),
            after_bounce,
            fresh_envelope(x.dtype, fit=fit),
            out.envelope,
        )
        counts = EventCounts(
            add_stats(counts.thinning, out.stats),
            counts.bounces + out.accepted.astype(jnp.int32),
            counts.refreshes + refreshed.astype(jnp.int32),
        )
        return out.time, v_after, (envelope, counts), out.accepted | refreshed

    return next_event


class PDMPInfo(NamedTuple):
    """Diagnostics of one sample interval, shared by every PDMP (BPS, σBPS, Boomerang, SBPS).

    A field a sampler does not have is zero (e.g. ``num_auxiliary`` outside SBPS, the
    thinning caps in SBPS, whose proposals come from its regression bound).
    """

    data_evals: Array
    num_proposals: Array
    num_bounces: Array
    num_refreshes: Array
    rate_evals: Array
    bound_violations: Array
    max_rate_ratio: Array
    proposal_cap_hits: Array
    horizon_cap_hits: Array
    interval_capped: Array
    num_auxiliary: Array
    """Observations outside proposals (SBPS's Supp. E look-aheads and gap fillers)."""
    time_average: Array
    """(1/Δ) ∫ x(t) dt over the interval (Pakman et al. 2017, eq. 19)."""
    time_average_sq: Array
    """(1/Δ) ∫ x(t)² dt over the interval."""
    sample_interval: Array


PDMP_INFO_FIELDS = PDMPInfo._fields
"""The ``Info`` fields every PDMP exports to ``sample_stats``."""


def interval_diagnostics(
    out: IntervalResult, counts: EventCounts, evals_per_rate: int, sample_interval: Array
) -> PDMPInfo:
    """The :class:`PDMPInfo` of one :func:`~pplsamplers.kernels.pdmp.driver.advance` call of a
    thinning PDMP.

    ``data_evals`` = (rate evaluations + reflections) × ``evals_per_rate`` (n, or N for a
    full batch): every rate evaluation is one jvp on a minibatch and every reflection one
    gradient on the same minibatch.  ``num_auxiliary`` is zero (there are none).
    """
    stats = counts.thinning
    return PDMPInfo(
        data_evals=(stats.rate_evals + counts.bounces) * evals_per_rate,
        num_proposals=stats.proposals,
        num_bounces=counts.bounces,
        num_refreshes=counts.refreshes,
        rate_evals=stats.rate_evals,
        bound_violations=stats.violations,
        max_rate_ratio=stats.max_ratio,
        proposal_cap_hits=stats.proposal_cap_hits,
        horizon_cap_hits=stats.horizon_cap_hits,
        interval_capped=out.capped,
        num_auxiliary=jnp.zeros((), jnp.int32),
        time_average=out.mean,
        time_average_sq=out.mean_sq,
        sample_interval=jnp.asarray(sample_interval, out.mean.dtype),
    )


__all__ = [
    "PDMP_INFO_FIELDS",
    "PDMPInfo",
    "EventCounts",
    "interval_diagnostics",
    "make_next_event",
    "zero_counts",
]
