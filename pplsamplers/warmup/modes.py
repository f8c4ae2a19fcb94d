"""Several optima: the mode search's starts, and the mode probe.

A single L-BFGS search ends in the optimum whose basin holds its start.  Where the posterior
has poor local optima (a mixture with an empty component, a component that swallowed two),
the model's random initial point often lies in one of those basins, and every kernel would
then sample around it.  :func:`search_mode` starts from the model's initial point and
``MODE_STARTS`` more draws of its init strategy, and keeps the lowest end.  Control variates
anchored at one mode are valid for a unimodal posterior only; the adapter's
``control_variate="auto"`` and the selector's features ask :func:`count_modes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.estimator import Estimator
from pplsamplers.types import Array, PRNGKey
from pplsamplers.warmup.mode import MapResult, find_map

MODE_STARTS = 4
"""Extra MAP fits, from the model's own random initial points, that look for other modes (and
for a better one to start the mode search from)."""
MODE_BARRIER = 3.0
"""Rise of U (nats) on the segment to the MAP above both ends that separates two optima."""
MODE_MASS = 10.0
"""An optimum more than this many nats above the MAP's U carries negligible mass."""
MODE_PROBE_DATA = 20_000
"""The probe's U reads at most this many data: a fixed random subset (with replacement), each
datum weighted N / size, so U stays an unbiased estimate of the full U on the same scale.
Separated optima (label switching, mixture components) are structural and show on such a
subset, and the cost of the probe's ~10³ data passes does not grow with N."""


def host_rng(rng_key: PRNGKey) -> np.random.Generator:
    """A NumPy generator seeded by a JAX key: the set-up's random rows and coordinates are
    drawn on the host, where a device draw would compile one program per shape."""
    return np.random.default_rng(np.asarray(jax.random.key_data(rng_key)).ravel().tolist())


def on_a_subset(rng_key: PRNGKey, potential: Estimator, size: int) -> Estimator:
    """``potential`` with its data replaced by ``size`` rows drawn with replacement, each
    weighted N / ``size`` (its "full-data" pass reads ``size`` rows)."""
    # sorted: the same multiset of rows, read in increasing order, so each pass walks the
    # data forwards instead of jumping across it (at N = 10⁶ a random gather is
    # cache-bound; U is a sum, so the order of its terms does not matter)
    rows = jnp.asarray(np.sort(host_rng(rng_key).integers(0, potential.N, size)))
    weight = potential.N / size

    def terms(x: Array, idx: Array) -> tuple[Array, Array]:
        global_term, per_datum = potential.terms(x, rows[idx])  # in the estimator's coordinates
        return global_term, weight * per_datum

    return potential._replace(
        model_terms=terms, N=size, n=min(potential.n, size), contiguous=False, whitening=None,
        cv=None,
    )  # fmt: skip


class ModeSearch(NamedTuple):
    """The result of :func:`search_mode`."""

    result: MapResult
    note: str
    """How many starts there were, and how far above the winner the others ended."""
    other_optima: int
    """Starts that ended more than ``MODE_BARRIER`` nats above the winner."""
    subset: Estimator | None = None
    """The weighted subset the starts ran on (above ``max_data`` data): :func:`count_modes`
    given it reuses the programs compiled for it."""


def search_mode(
    rng_key: PRNGKey,
    estimator: Estimator,
    init_position: Array,
    draw_init: Callable[[PRNGKey], Array] | None,
    num_starts: int = MODE_STARTS,
    max_data: int = MODE_PROBE_DATA,
) -> ModeSearch:
    """:func:`find_map` from the best of ``init_position`` and ``num_starts`` init-strategy
    draws.

    Each start runs the full search on at most ``max_data`` data (:func:`on_a_subset`
    above), by one compiled program; the end with the lowest U wins (summed datum by datum,
    :meth:`~pplsamplers.estimator.Estimator.full_value_difference`), and on a subset the
    full-data search continues from it.  ``note`` says how far above the winner the other
    ends stopped, when some did (the posterior then has other optima).

    Examples
    --------
    >>> import jax
    >>> from pplsamplers.datasets import tiny_mixture
    >>> from pplsamplers.model import make_potential
    >>> mixture, (y,) = tiny_mixture()  # components at 60, 75 and 90, the assignments enumerated
    >>> potential = make_potential(mixture, (y,))
    >>> search = search_mode(jax.random.key(0), potential.estimator,
    ...                      potential.init_position, potential.draw_init)
    >>> sorted(round(float(m)) for m in potential.constrain(search.result.position)["mu"])
    [60, 75, 90]
    """
    if draw_init is None or num_starts < 1:
        return ModeSearch(find_map(rng_key, estimator, init_position), "", 0)
    probe = estimator
    if estimator.N > max_data:
        probe = on_a_subset(jax.random.fold_in(rng_key, 2), estimator, max_data)
    keys = jax.random.split(jax.random.fold_in(rng_key, 1), num_starts)
    starts = [init_position] + [draw_init(k) for k in keys]
    results = [find_map(rng_key, probe, x0) for x0 in starts]
    first = results[0].position
    values = np.array([float(probe.full_value_difference(r.position, first)) for r in results])
    values = np.where(np.isfinite(values), values, np.inf)
    best = int(np.argmin(values))
    above = np.sort(values - values[best])[1:]
    higher = above[np.isfinite(above) & (above > MODE_BARRIER)]  # not the failed starts
    note = f"best of {len(starts)} starts" + (
        f"; {len(higher)} ended {np.min(higher):.3g}–{np.max(higher):.3g} nats higher "
        "(other optima)"
        if len(higher)
        else ""
    )
    if probe is not estimator:
        results[best] = find_map(rng_key, estimator, results[best].position)
    return ModeSearch(results[best], note, len(higher), None if probe is estimator else probe)


def count_modes(
    rng_key: PRNGKey,
    potential: Estimator,
    x_map: Array,
    curvature_diagonal: Array | None = None,
    num_starts: int = MODE_STARTS,
    map_steps: int = 100,
    max_data: int = MODE_PROBE_DATA,
    *,
    scale: Array | None = None,
    draw_init: Callable[[PRNGKey], Array] | None = None,
    subset: Estimator | None = None,
) -> int:
    """``ModelFeatures.mode_count``: the MAP plus the distinct separated optima reached by
    ``num_starts`` more MAP fits.

    The fits start at the model's random initial points (``draw_init``), or with ``scale`` = L (L Lᵀ ≈ the
    posterior covariance, ``(D,)`` or lower-triangular ``(D, D)``, as the shared warmup
    estimates it) at Laplace draws x_map + L ε, and then run in L's metric
    (:func:`find_map`'s ``scale``).  They run one after another by :func:`find_map`'s
    compiled program, which a search with a scale on the same potential has already
    compiled (the warmup's polish), and then U on the segments to the MAP by the potential's
    jitted full-data pass.  The fits are not vmapped: a vmapped fit would be a program of its
    own, slower to compile than the search it reuses.

    Two optima are the same when they are within 3 Laplace sds of each other (in L's units,
    else scaled by ``curvature_diagonal``); an optimum counts when U rises more than
    ``MODE_BARRIER`` nats above both ends somewhere on the segment from it to the MAP, and it
    lies within ``MODE_MASS`` nats of the MAP.

    Above ``max_data`` data, U is read on a fixed weighted subset (:func:`on_a_subset`), or
    on ``subset``, the one :func:`search_mode` ran on (its programs are then compiled
    already); its optima stray from the full MAP by a few posterior sds, but the segment from
    such a stray optimum to the MAP has no barrier, so only a separated optimum counts.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from pplsamplers.model import make_potential
    >>> def four_modes(m):  # each coordinate of w has two modes, near -1 and +1
    ...     w = numpyro.sample("w", dist.Normal(0, 10).expand([2]).to_event(1))
    ...     with numpyro.plate("data", m.shape[0]) as idx:
    ...         near = lambda c: -8 * (w - c - m[idx]) ** 2
    ...         numpyro.factor("likelihood", jnp.logaddexp(near(1), near(-1)).sum(-1))
    >>> m = 0.01 * jax.random.normal(jax.random.key(0), (1000, 2))
    >>> potential = make_potential(four_modes, (m,), {}, 10)
    >>> x_map = find_map(jax.random.key(0), potential.estimator, potential.init_position).position
    >>> count_modes(jax.random.key(1), potential.estimator, x_map, jnp.full(2, 1.6e4),
    ...             draw_init=potential.draw_init) > 1
    True
    """
    if scale is None and curvature_diagonal is None:
        raise ValueError("count_modes needs curvature_diagonal or scale.")
    if num_starts < 1 or (scale is None and draw_init is None):
        return 1
    if subset is not None:
        potential = subset
    elif potential.N > max_data:
        potential = on_a_subset(jax.random.fold_in(rng_key, 2), potential, max_data)
    init_keys = jax.random.split(jax.random.fold_in(rng_key, 1), num_starts)
    fit_keys = jax.random.split(rng_key, num_starts)
    center = np.asarray(x_map)
    if scale is None:
        starts = [draw_init(k) for k in init_keys]  # the model's init strategy
        factor = 1.0 / np.sqrt(np.asarray(curvature_diagonal, center.dtype))
    else:
        factor = np.asarray(scale, center.dtype)
        noise = [np.asarray(jax.random.normal(k, center.shape, center.dtype)) for k in init_keys]
        starts = [center + (factor @ e if factor.ndim == 2 else factor * e) for e in noise]
    optima = np.stack(
        [
            np.asarray(
                find_map(
                    k, potential, x0, retry_at_origin=False, polish_steps=map_steps, scale=scale
                ).position
            )
            for k, x0 in zip(fit_keys, starts, strict=True)
        ]
    )
    # U − U(x_map), summed datum by datum (float32 U's rounding grows with N), at each
    # optimum and on the segment from the MAP to it
    value = lambda x: float(potential.full_value_difference(x, x_map))
    u_opt = np.array([value(x) for x in optima])
    path = np.array(
        [[value(center + t * (x - center)) for t in (np.arange(1, 8) / 8).tolist()] for x in optima]
    )
    rise = path.max(axis=1) - np.maximum(u_opt, 0.0)  # U(x_map) − U(x_map) = 0
    with np.errstate(invalid="ignore"):
        is_mode = np.isfinite(rise) & (rise > MODE_BARRIER) & (u_opt < MODE_MASS)
    offsets = (optima - center).T  # in Laplace sds: L⁻¹ (x − x_map)
    scaled = (np.linalg.solve(factor, offsets) if factor.ndim == 2 else offsets / factor[:, None]).T
    distinct: list[np.ndarray] = []
    for point in scaled[is_mode]:  # at most num_starts points: dedupe by scaled distance
        if all(np.linalg.norm(point - other) > 3.0 for other in distinct):
            distinct.append(point)
    return 1 + len(distinct)


__all__ = [
    "MODE_BARRIER",
    "MODE_MASS",
    "MODE_PROBE_DATA",
    "MODE_STARTS",
    "ModeSearch",
    "count_modes",
    "host_rng",
    "search_mode",
    "on_a_subset",
]
