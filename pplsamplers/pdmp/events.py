"""Alg. 1 of Goan et al.: the next event of a PDMP from competing clocks, and the
diagnostics every PDMP kernel reports.

:func:`make_next_event` races a refreshment time τ_ref ~ Exp(λ_ref) against the thinned event
time of :func:`~pplsamplers.pdmp.interpolation.interpolation_thinning` (Alg. 2), applies the
reflection or the refreshment, and keeps the envelope and the counters in the kernel state
that :func:`pplsamplers.pdmp.driver.advance` threads through a sample interval.
:func:`interval_diagnostics` turns one interval into the ``Info`` fields shared by BPS, σBPS
and the Boomerang.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from pplsamplers.pdmp.driver import IntervalResult, NextEventFn
from pplsamplers.pdmp.flow import Flow
from pplsamplers.pdmp.interpolation import (
    Envelope,
    PDMPTuning,
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


def make_next_event(
    *,
    rate_along: Callable[[Array, Array], RateFn],
    reflect_at: Callable[[Array, Array, Any], Array],
    draw_velocity: Callable[[PRNGKey], Array],
    flow: Flow,
    refresh_rate: float,
    alpha: float,
    tuning: PDMPTuning,
    max_evaluations: int,
    min_gap: float = 0.0,
    noise_margin: float = 0.0,
    violation_tol: float = 1e-8,
) -> NextEventFn:
    """A next-event function for :func:`pplsamplers.pdmp.driver.advance` (Alg. 1 + Alg. 2).

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
        ``key -> v``: the refreshment law Φ(v).
    flow
        The deterministic flow.
    refresh_rate
        λ_ref ≥ 0.
    alpha, tuning, max_evaluations, min_gap, noise_margin, violation_tol
        See :func:`interpolation_thinning` and :class:`PDMPTuning`.
    """

    def next_event(
        rng_key: PRNGKey, x: Array, v: Array, carry: tuple[Envelope, EventCounts], horizon: Array
    ) -> tuple[Array, Array, tuple[Envelope, EventCounts], Array]:
        envelope, counts = carry
        refresh_key, thin_key, velocity_key = jax.random.split(rng_key, 3)
        if refresh_rate > 0:
            t_refresh = jax.random.exponential(refresh_key, dtype=x.dtype) / refresh_rate
        else:
            t_refresh = jnp.asarray(jnp.inf, x.dtype)
        out = interpolation_thinning(
            thin_key,
            rate_along(x, v),
            envelope,
            horizon=jnp.minimum(horizon, t_refresh),
            alpha=alpha,
            t_init=tuning.t_init,
            max_extrapolation=tuning.max_extrapolation,
            max_evaluations=max_evaluations,
            min_gap=min_gap,
            noise_margin=noise_margin,
            violation_tol=violation_tol,
        )
        x_t, v_t = flow.move(x, v, out.time)
        bounced = lax.cond(out.accepted, lambda: reflect_at(x_t, v_t, out.aux), lambda: v_t)
        refreshed = out.reached_horizon & (t_refresh < horizon)
        v_after = jnp.where(
            out.accepted, bounced, jnp.where(refreshed, draw_velocity(velocity_key), v_t)
        )
        # after a reflection G(0+) = -G(tau) for the same minibatch: the envelope starts from it
        after_bounce = fresh_envelope(x.dtype, -out.rate)._replace(noise=out.noise)
        envelope = jax.tree.map(
            lambda b, f, c: jnp.where(out.accepted, b, jnp.where(refreshed, f, c)),
            after_bounce,
            fresh_envelope(x.dtype),
            out.envelope,
        )
        counts = EventCounts(
            add_stats(counts.thinning, out.stats),
            counts.bounces + out.accepted.astype(jnp.int32),
            counts.refreshes + refreshed.astype(jnp.int32),
        )
        return out.time, v_after, (envelope, counts), out.accepted | refreshed

    return next_event


def interval_diagnostics(
    out: IntervalResult, counts: EventCounts, evals_per_rate: int, sample_interval: Array
) -> dict[str, Array]:
    """The ``Info`` fields shared by the PDMP kernels, from one :func:`advance` call.

    ``data_evals`` = (rate evaluations + reflections) × ``evals_per_rate`` (n, or N for a
    full batch): every rate evaluation is one jvp on a minibatch and every reflection one
    gradient on the same minibatch.
    """
    stats = counts.thinning
    return dict(
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
        time_average=out.mean,
        time_average_sq=out.mean_sq,
        sample_interval=jnp.asarray(sample_interval, out.mean.dtype),
    )


PDMP_INFO_FIELDS = (
    "data_evals",
    "num_proposals",
    "num_bounces",
    "num_refreshes",
    "rate_evals",
    "bound_violations",
    "max_rate_ratio",
    "proposal_cap_hits",
    "horizon_cap_hits",
    "interval_capped",
    "time_average",
    "time_average_sq",
    "sample_interval",
)
"""Names of the fields returned by :func:`interval_diagnostics` (the kernels' Info order)."""


__all__ = [
    "PDMP_INFO_FIELDS",
    "EventCounts",
    "interval_diagnostics",
    "make_next_event",
    "zero_counts",
]
