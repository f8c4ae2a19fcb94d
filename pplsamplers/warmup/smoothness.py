"""Is U smooth where the posterior lives?  A check of the shared warmup.

Every pplsamplers kernel moves by gradients (and the PDMPs' event rates are gradients along
the velocity).  A likelihood that a latent enters through a branch — ``jnp.where(t < τ, a, b)``,
a comparison, a rounding — is piecewise flat in that latent: its gradient is zero while U
jumps, so a gradient kernel samples the latent from its prior, silently.  NUTS is right on
such a model, slowly: its trajectories weigh each point by exp(−H), which sees the jumps.

:func:`smoothness_check` compares, along coordinate directions of the whitened coordinates
(a Laplace posterior sd each, capped at a unit step of the unconstrained coordinates), the
rise of U with the trapezoid rule's prediction from the gradients at both ends,

    U(x + s) − U(x)   against   ½ (∇U(x) + ∇U(x + s))·s,                                (1)

whose error is O(|s|³) for a smooth U: a mismatch above ``JUMP_NATS`` nats and half the
rise is a jump the gradients do not see — or a smooth U curved on a scale shorter than the
step (a horseshoe's or a funnel's neck).  A suspect direction is therefore read again in
``PIECES`` pieces: for a smooth U the summed mismatch of (1) over the pieces falls as
1/``PIECES``², while a jump (or a staircase of them) keeps its full size in the piece that
holds it, so only a mismatch that survives the refinement is a jump.  U is read on a fixed random subset of at most
``CHECK_DATA`` rows, each weighted N / size (a jump in a latent that many rows read shows
on any subset), so the check costs the same at every N.  A rise to +∞ a short step from the mode is an edge
of the support that the gradients do not see either.  Both raise
:class:`~pplsamplers.model.FullDataOnlyError`, which names the site and the remedies, and
which AutoSampler turns into a NUTS run.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.estimator import Estimator, Whitening
from pplsamplers.model import FullDataOnlyError
from pplsamplers.types import Array, PRNGKey
from pplsamplers.warmup.modes import host_rng, on_a_subset

JUMP_NATS = 1.0
"""A mismatch of (1) above this many nats (and half the rise) is a jump."""
MAX_DIRECTIONS = 64
"""Coordinates probed: all of them up to this many, a random subset beyond."""
CHECK_DATA = 8_192
"""The check reads U on at most this many rows (module docstring)."""
STEP = 0.5
"""Probe step, in Laplace posterior sds, at most a unit step of the unconstrained x."""


PIECES = 16
"""Pieces a suspect probe step is cut into to tell a jump from strong curvature."""


@partial(jax.jit, static_argnums=0)
def _mismatch(estimator: Estimator, x: Array, steps: Array) -> tuple[Array, Array]:
    """(|rise − trapezoid| of (1), rise) for each row of ``steps``."""
    gradient = estimator.full_value_and_grad(x)[1]

    def one(step: Array) -> tuple[Array, Array]:
        rise = estimator.full_value_difference(x + step, x)
        end = estimator.full_value_and_grad(x + step)[1]
        return jnp.abs(rise - 0.5 * (gradient + end) @ step), rise

    return jax.lax.map(one, steps)


@partial(jax.jit, static_argnums=0)
def _refined_mismatch(estimator: Estimator, x: Array, steps: Array) -> tuple[Array, Array]:
    """(Σ |rise − trapezoid| of (1), Σ |rise|) over ``PIECES`` equal pieces of each step."""
    fractions = jnp.linspace(0.0, 1.0, PIECES + 1, dtype=x.dtype)

    def one(step: Array) -> tuple[Array, Array]:
        points = x + fractions[:, None] * step
        slopes = jax.lax.map(lambda p: estimator.full_value_and_grad(p)[1] @ step, points)
        rises = jax.lax.map(
            lambda pair: estimator.full_value_difference(pair[1], pair[0]),
            jnp.stack([points[:-1], points[1:]], axis=1),
        )
        trapezoid = 0.5 * (slopes[1:] + slopes[:-1]) / PIECES
        return jnp.sum(jnp.abs(rises - trapezoid)), jnp.sum(jnp.abs(rises))

    return jax.lax.map(one, steps)


def probe_steps(whitening: Any, dim: int, rng_key: PRNGKey) -> tuple[Array, np.ndarray]:
    """(steps in x, the coordinates they follow): ``STEP`` whitened units along each probed
    coordinate, rescaled to at most a unit change of any unconstrained coordinate."""
    # on the host: a handful of small arrays, each of which would be a compiled program
    dtype = whitening.center.dtype
    if dim <= MAX_DIRECTIONS:
        coords = np.arange(dim)
    else:
        coords = np.sort(host_rng(rng_key).choice(dim, MAX_DIRECTIONS, replace=False))
    basis = np.zeros((coords.size, dim), dtype)  # STEP along each probed coordinate of z
    basis[np.arange(coords.size), coords] = STEP
    factor = whitening.factor if isinstance(whitening, Whitening) else None
    if factor is None:  # a structured (arrowhead) whitening: its own map
        steps = np.asarray(whitening.to_x(jnp.asarray(basis)) - whitening.center)
    elif factor.ndim == 2:  # x = c + L z
        steps = basis @ np.asarray(factor).T
    else:
        steps = basis * np.asarray(factor)
    largest = np.max(np.abs(steps), axis=1, keepdims=True)
    return jnp.asarray(steps / np.maximum(largest, 1.0), dtype), coords


def smoothness_check(
    estimator: Estimator,
    x: Array,
    whitening: Any,
    names: list[str],
    rng_key: PRNGKey,
    data_size: int,
) -> None:
    """Raise :class:`~pplsamplers.model.FullDataOnlyError` where U jumps, or rises to +∞,
    along a probed coordinate at ``x`` (module docstring); ``names``: the coordinates'
    names for the message.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.estimator import Whitening, build_estimator
    >>> step = lambda x, idx: (0.5 * x @ x, jnp.where(idx < 50 * (x[0] + 1), 0.0, 5.0))
    >>> estimator = build_estimator(step, dim=1, N=100)
    >>> smoothness_check(estimator, jnp.zeros(1), Whitening(jnp.zeros(1), jnp.ones(1)),
    ...                  ["tau"], jax.random.key(0), 100)
    Traceback (most recent call last):
    ...
    pplsamplers.model._tracing.FullDataOnlyError: pplsamplers: U is not smooth in 'tau' ...
    """
    subset_key, coordinate_key = jax.random.split(rng_key)
    subset = on_a_subset(subset_key, estimator, min(estimator.N, CHECK_DATA))
    steps, coords = probe_steps(whitening, estimator.dim, coordinate_key)
    mismatch, rise = (np.array(a, float) for a in _mismatch(subset, x, steps))
    edge = ~np.isfinite(rise)
    jump = np.isfinite(rise) & (mismatch > np.maximum(JUMP_NATS, 0.5 * np.abs(rise)))
    if jump.any():  # a jump, or curvature on a scale shorter than the step: read in pieces
        suspects = np.flatnonzero(jump)
        fine, total = (np.asarray(a, float) for a in _refined_mismatch(subset, x, steps[suspects]))
        jump[suspects] = fine > np.maximum(JUMP_NATS, 0.5 * total)
        mismatch[suspects], rise[suspects] = fine, np.sign(rise[suspects]) * total
    if not (edge.any() or jump.any()):
        return
    j = int(np.argmax(np.where(jump, mismatch, -np.inf))) if jump.any() else int(np.argmax(edge))
    name = names[int(coords[j])]
    if jump[j]:
        what = (
            f"U changes by {rise[j]:.3g} nats over a step where its gradient predicts "
            f"{rise[j] - np.sign(rise[j]) * mismatch[j]:.3g}: the latent selects a branch (a "
            "jnp.where, a comparison, a rounding) that gradients do not see"
        )
    else:
        what = "U becomes infinite a short step from the mode: an edge of the support"
    reason = f"the likelihood is not smooth in '{name}'"
    raise FullDataOnlyError(
        f"pplsamplers: U is not smooth in '{name}' ({what}), so every gradient-based "
        "minibatch kernel would miss it silently. Use AutoSampler or NUTS (its trajectories "
        "weigh each point by its density, which sees the jump), or write the likelihood "
        "smoothly in that latent (a sigmoid instead of a step).",
        reason,
        data_size,
    )


__all__ = ["JUMP_NATS", "PIECES", "smoothness_check"]
