"""Checks that find a user's input mistake before any sampling, each naming the argument or
site and the fix: data left out (an observed site turned latent), per-datum arguments of
different lengths (an error when the model fails on them, and a read past an argument's end,
which JAX clamps silently, in the full-data pass), and a model with nothing to sample.

Part of :mod:`~pplsamplers.model._numpyro` (NumPyro internals), split off for length.
"""

from __future__ import annotations

import inspect as _pyinspect
import math
import re
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from numpyro import handlers
from numpyro.distributions import Unit
from numpyro.infer import init_to_uniform

from pplsamplers.model._tracing import (
    FullDataOnlyError,
    _is_broadcast_error,
    _plate_axis,
    _plates_of,
    as_jax_arguments,
)

_ALTERNATIVE = "Use AutoSampler, which hands such a model to NumPyro's NUTS, or NUTS itself"


def _data_arguments(model: Callable, model_args: tuple, model_kwargs: dict) -> list:
    """``(label, leaf)`` for every array or float among the model's arguments."""
    try:
        parameters = _pyinspect.signature(model).parameters.values()
        names = [
            p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        names = []
    labelled = [
        (f"argument '{names[i]}' (positional {i})" if i < len(names) else f"positional {i}", a)
        for i, a in enumerate(model_args)
    ] + [(f"keyword '{k}'", a) for k, a in model_kwargs.items()]
    out = []
    for label, arg in labelled:
        for path, leaf in jax.tree_util.tree_flatten_with_path(arg)[0]:
            if isinstance(leaf, np.ndarray | jax.Array | float | np.floating):
                out.append((label + jax.tree_util.keystr(path), leaf))
    return out


def _rows(model: Callable, model_args: tuple, model_kwargs: dict) -> list[tuple[str, int]]:
    """``(label, number of rows)`` of every array argument with at least one axis."""
    return [
        (label, int(np.shape(leaf)[0]))
        for label, leaf in _data_arguments(model, model_args, model_kwargs)
        if np.ndim(leaf) >= 1
    ]


def _listed(rows: list[tuple[str, int]]) -> str:
    return "; ".join(f"{label} has {count} rows" for label, count in rows)


def _none_arguments(model: Callable, model_args: tuple, model_kwargs: dict) -> list[str]:
    """The model's parameters that are ``None`` in this call (defaults included)."""
    try:
        bound = _pyinspect.signature(model).bind_partial(*model_args, **model_kwargs)
    except (TypeError, ValueError):
        return []
    bound.apply_defaults()
    return [name for name, value in bound.arguments.items() if value is None]


def missing_data_error(
    trace: dict, model: Callable, model_args: tuple, model_kwargs: dict
) -> ValueError | None:
    """The error for a model whose data were left out, or ``None``: the model has no observed
    site at all, and a latent site lies inside a plate with one value per datum (the plate's
    size is the row count of an array argument), as ``y`` does when ``y=None``."""
    samples = [site for site in trace.values() if site["type"] == "sample"]
    if any(site["is_observed"] for site in samples):
        return None
    rows = {count for _, count in _rows(model, model_args, model_kwargs)}
    sizes = {n: int(s["args"][0]) for n, s in trace.items() if s["type"] == "plate"}
    for site in samples:
        for plate in _plates_of(site):
            axis = _plate_axis(site, plate)
            length = None if axis is None else np.shape(site["value"])[axis]
            if length == sizes.get(plate) and length in rows and length > 1:
                none = _none_arguments(model, model_args, model_kwargs)
                none = [site["name"]] if site["name"] in none else none
                given = f" (the model's argument(s) {none} are None)" if none else ""
                return ValueError(
                    f"site '{site['name']}' is latent inside plate '{plate}' with one value "
                    f"per datum ({length}), and the model has no observed site: the data of "
                    f"'{site['name']}' look missing{given}. Pass them, e.g. mcmc.run(key, X, "
                    f"y) for a model(X, y=None), so that '{site['name']}' is observed. (To "
                    "draw it from the prior predictive, use numpyro.infer.Predictive.)"
                )
    return None


def plate_length_error(
    trace: dict, model: Callable, model_args: tuple, model_kwargs: dict
) -> ValueError | None:
    """The error for an observed site whose data have another length along a plate over all
    its data than the plate's size (``numpyro.plate('data', X.shape[0])`` with ``obs=y`` and
    ``len(y) != len(X)``), or ``None``."""
    for site in trace.values():
        if site["type"] != "sample" or not site["is_observed"] or isinstance(site["fn"], Unit):
            continue
        for frame in site["cond_indep_stack"]:
            plate = trace.get(frame.name)
            if plate is None or plate["args"][1] not in (None, plate["args"][0]):
                continue  # a subsample plate: its indexing is checked by check_plate_indexing
            axis = _plate_axis(site, frame.name)
            length = None if axis is None else np.shape(site["value"])[axis]
            size = int(plate["args"][0])
            if length is not None and length not in (1, size):
                return _lengths_error(
                    f"observed site '{site['name']}' has {length} values along plate "
                    f"'{frame.name}', whose size is {size}",
                    [r for r in _rows(model, model_args, model_kwargs) if r[1] in (size, length)],
                )
    return None


def _lengths_error(what: str, rows: list[tuple[str, int]]) -> ValueError:
    named = f" ({_listed(rows)})" if rows else ""
    return ValueError(
        f"{what}{named}: the per-datum data arguments have different lengths. Every argument "
        "with one row per datum needs the same number of rows (e.g. len(y) == X.shape[0]), "
        "and the data plate that size (numpyro.plate('data', len(y)))."
    )


def failed_trace_error(
    error: Exception,
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    init_strategy: Callable | None = None,
) -> ValueError | None:
    """The error for per-datum arguments of different lengths where the model's trace failed
    on them with a broadcasting error (a plate over ``len(y)`` rows holding ``X @ w`` of
    ``len(X)``), or ``None``: a plate's size is one argument's row count, and the shapes the
    error names hold another argument's row count."""
    if not _is_broadcast_error(error):
        return None
    model_args, model_kwargs = as_jax_arguments(model_args, model_kwargs)  # NumPy refuses X[idx]
    recorder = handlers.trace(
        handlers.substitute(handlers.seed(model, 0), substitute_fn=init_strategy or init_to_uniform)
    )
    try:  # the plates entered before the failure are recorded
        jax.eval_shape(lambda: recorder.get_trace(*model_args, **model_kwargs) and None)
    except Exception:  # noqa: BLE001 - the very error being explained
        pass
    plates = [s for s in getattr(recorder, "trace", {}).values() if s["type"] == "plate"]
    dims = {int(d) for d in re.findall(r"\d+", str(error).split("shapes", 1)[-1])}
    rows = _rows(model, model_args, model_kwargs)
    for plate in reversed(plates):  # the innermost plate first
        size = int(plate["args"][0])
        others = [r for r in rows if r[1] != size and r[1] > 1 and r[1] in dims]
        if others and any(count == size for _, count in rows):
            return _lengths_error(
                f"plate '{plate['name']}' has size {size}",
                [r for r in rows if r[1] == size] + others,
            )
    return None


_OUT_OF_BOUNDS = re.compile(r"array of shape \(([\d, ]*)\): index (\d+) .*axis 0 with size")


def out_of_bounds_error(message: str, view: Any) -> ValueError | None:
    """The error for the full-data pass reading an argument past its end (``message``:
    ``jax.experimental.checkify``'s), or ``None`` where no argument has the array's shape:
    ``y[idx]`` in a plate over ``X.shape[0]`` rows with ``len(y) < X.shape[0]``, which JAX
    clamps to the last row, silently."""
    match = _OUT_OF_BOUNDS.search(message)
    if match is None:
        return None
    shape = tuple(int(d) for d in match.group(1).replace(" ", "").split(",") if d)
    arguments = _data_arguments(view.model, view.model_args, view.model_kwargs)
    read = [label for label, leaf in arguments if np.shape(leaf) == shape]
    if not read:
        return None
    N, plate = view.data_size, view.data_plate
    full = [label for label, leaf in arguments if np.ndim(leaf) >= 1 and np.shape(leaf)[0] == N]
    others = f"; {', '.join(full)} {'has' if len(full) == 1 else 'have'} {N}" if full else ""
    return ValueError(
        f"{read[0]} has {shape[0]} rows, but the model reads its row {match.group(2)} in the "
        f"pass over all data of plate '{plate}' (N = {N}{others}). JAX clamps reads past an "
        "array's end, so the run would silently use wrong data. Every per-datum argument needs "
        "N rows: check that the data arguments have the same length (e.g. len(y) == "
        "X.shape[0]) and that the plate's size is theirs."
    )


def no_dimension_error(info: Any) -> FullDataOnlyError | None:
    """The refusal of a model with no latent dimension (no latent site, or only sites of
    unconstrained size 0 such as a Dirichlet over one category), or ``None``."""
    shapes = info.unconstrained_shapes
    if sum(math.prod(shape) for shape in shapes.values()) > 0:
        return None
    what = (
        f"its latent site(s) {list(shapes)} have no free dimension (unconstrained shapes "
        f"{list(shapes.values())})"
        if shapes
        else "it has no latent site"
    )
    reason = f"the model has no latent dimension to sample ({what})"
    return FullDataOnlyError(
        f"{reason}: a pplsamplers kernel has nothing to move. {_ALTERNATIVE} (it returns the "
        "deterministic sites), or numpyro.infer.Predictive.",
        reason,
        info.data_size if info.data_plate is not None else 0,
    )


def unsliceable_error(plate: str, size: int) -> FullDataOnlyError:
    """The refusal of a plain data plate (``obs=y``, no indices) whose per-datum terms are not
    those of the model on a minibatch's rows (something inside the plate spans all N)."""
    reason = (
        f"the likelihood in plate '{plate}' cannot be subsampled: the model on a minibatch's "
        "rows does not give the per-datum terms of the full model (something inside the plate "
        f"spans all N = {size} data, e.g. an array built from jnp.arange(N))"
    )
    return FullDataOnlyError(
        f"{reason}. {_ALTERNATIVE}; or, if each datum's term depends on its own row only, "
        f"index every per-datum array with the plate's indices (`with numpyro.plate('{plate}', "
        "N, subsample_size=n) as idx:` then rate[idx], y[idx]).",
        reason,
        size,
    )


__all__ = [
    "failed_trace_error",
    "missing_data_error",
    "no_dimension_error",
    "out_of_bounds_error",
    "plate_length_error",
    "unsliceable_error",
]
