"""Checks that two ways of computing a model's per-datum terms agree (the plain-plate row
slicing, :mod:`~pplsamplers.model.view`, and the one-off shuffle,
:mod:`~pplsamplers.model.shuffle`), at points where those terms are finite."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from pplsamplers.model._numpyro import SiteInfo, initial_values, make_terms
from pplsamplers.types import Array


def terms_match(terms: Array, reference: Array) -> Array:
    """``[reference finite, terms finite and equal to it up to rounding]`` (1e-9, 1e-4 in
    f32): a point where the reference overflows (exp of a raw covariate in float32) tells
    nothing, and :func:`agree_where_finite` looks at others."""
    tol = 1e-9 if terms.dtype == jnp.float64 else 1e-4
    close = jnp.isfinite(terms) & (jnp.abs(terms - reference) <= tol * (1.0 + jnp.abs(reference)))
    return jnp.stack([jnp.all(jnp.isfinite(reference)), jnp.all(close)])


def agree_where_finite(
    agree: Callable[[dict], Array], points: list[dict], undecided: bool | None = False
) -> bool | None:
    """Whether ``agree(params)`` (stacked :func:`terms_match` pairs) matches at every point
    of ``points`` where the reference terms are finite; ``undecided`` where they are at none."""
    results = np.stack([np.asarray(agree(params)).reshape(-1, 2).all(0) for params in points])
    finite, match = results[:, 0], results[:, 1]
    return bool(match[finite].all()) if finite.any() else undecided


def check_points(
    keys: Array, model: Callable, model_args: tuple, model_kwargs: dict, info: SiteInfo,
    init_strategy: Callable,
) -> list[dict]:  # fmt: skip
    """One init-strategy point per key, then the first one shrunk 10 and 100 times towards
    the unconstrained origin, and the origin: raw-covariate models, whose random starts
    overflow in float32, have finite terms there, and a term that vanishes at the origin
    (so cannot be compared there) rarely does at the shrunk points."""
    draw = initial_values(None, model, model_args, model_kwargs, info, init_strategy)
    points = [draw(key) for key in keys]  # one compiled drawer for every key
    shrunk = [jax.tree.map(lambda v, f=f: f * v, points[0]) for f in (0.1, 0.01, 0.0)]
    return points + shrunk


def row_slices_agree(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    info: SiteInfo,
    init_strategy: Callable,
    count: int,
) -> bool | None:
    """Whether the row-sliced model (``info.slice_rows``) gives the full model's per-datum
    terms on rows 0..count-1 and its global term, at the :func:`check_points` of one
    init-strategy start where the full model's are finite (one compiled full-data pass
    each): an argument with N rows that is not per-datum breaks it.  ``None`` where the full
    model's terms are finite at none of those points (nothing to compare)."""
    full = make_terms(model, model_args, model_kwargs, info._replace(slice_rows=False))
    rows = make_terms(model, model_args, model_kwargs, info._replace(slice_rows=True))

    @jax.jit
    def agree(params: dict) -> Array:
        global_full, every = full(params, jnp.arange(info.data_size))
        global_rows, some = rows(params, jnp.arange(count))
        return terms_match(jnp.append(some, global_rows), jnp.append(every[:count], global_full))

    keys = jax.random.PRNGKey(0)[None]
    points = check_points(keys, model, model_args, model_kwargs, info, init_strategy)
    return agree_where_finite(agree, points, undecided=None)


__all__ = ["agree_where_finite", "check_points", "row_slices_agree", "terms_match"]
