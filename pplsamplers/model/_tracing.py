"""How pplsamplers traces a NumPyro model: plates fixed to given indices, latent values from
an init strategy (never ``fn.sample()``), optionally staged into one compiled program.

Part of :mod:`~pplsamplers.model._numpyro` (NumPyro internals), split off for length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.infer import init_to_uniform
from numpyro.primitives import Messenger

from pplsamplers.types import Array


class set_plate(Messenger):
    """Fix the indices of plate ``name`` to ``indices``; the plate applies ``size/len``.

    ``indices=None`` gives the full-data view: every datum, scale one.  ``name=None``
    applies to every plate of the model.
    """

    def __init__(
        self, fn: Callable | None = None, name: str | None = "", indices: Array | None = None
    ):
        self.name = name
        self.indices = indices
        self.original: dict[str, tuple] = {}  # plate name -> the model's own (size, subsample)
        super().__init__(fn)

    def process_message(self, msg: dict) -> None:
        if msg["type"] == "plate" and (self.name is None or msg["name"] == self.name):
            self.original[msg["name"]] = tuple(msg["args"])
            size = msg["args"][0]
            indices = jnp.arange(size) if self.indices is None else self.indices
            msg["value"] = indices
            msg["args"] = (size, indices.shape[0])


def as_jax_arguments(model_args: Any, model_kwargs: dict | None) -> tuple[tuple, dict]:
    """``(model_args, model_kwargs)`` as a tuple and a dict, their numeric NumPy arrays as JAX
    arrays, as ``jit`` makes them for NUTS: a minibatch indexes the data with traced indices
    (``X[idx]``), which NumPy refuses."""
    convert = lambda leaf: (
        jnp.asarray(leaf) if isinstance(leaf, np.ndarray) and leaf.dtype.kind in "biuf" else leaf
    )
    return jax.tree.map(convert, (tuple(model_args), dict(model_kwargs or {})))


def same_objects(a: Any, b: Any) -> bool:
    """Whether pytrees ``a`` and ``b`` have one structure and the same leaves: the very same
    objects (arrays by identity, as the set-up caches key data), or Python scalars and strings
    of one type that compare equal (``num_groups=300`` typed twice).  ``a is None`` never
    matches.

    Examples
    --------
    >>> x = np.ones(3)
    >>> same_objects((x, {"k": 1000}), (x, {"k": int("1000")})), same_objects((x,), (x.copy(),))
    (True, False)
    """
    if a is None:
        return False
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    return tree_a == tree_b and all(
        leaf_identity(x) == leaf_identity(y) for x, y in zip(leaves_a, leaves_b, strict=True)
    )


def leaf_identity(leaf: Any) -> Any:
    """A hashable stand-in for one argument leaf, the rule of :func:`same_objects` and of the
    set-up caches' keys: ``(type, value)`` for a Python scalar or string, else ``id(leaf)``
    (the caller keeps the leaf alive while the key is in use).

    Examples
    --------
    >>> leaf_identity(1000) == leaf_identity(int("1000")), leaf_identity(True) == leaf_identity(1)
    (True, False)
    """
    if isinstance(leaf, bool | int | float | complex | str):
        return (type(leaf), leaf)
    return id(leaf)


def _trace(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    init_strategy: Callable | None = None,
    seed: int = 0,
    *,
    staged: bool = False,
    abstract: bool = False,
    out_of_bounds: Callable[[str], None] | None = None,
) -> dict:
    """Trace ``model`` with latent values from ``init_strategy`` (never ``fn.sample()``).

    ``staged=True`` traces it inside one ``jax.jit`` program: one compiled call instead of
    an eager pass over the data that compiles one small program per operation of the model.
    The model's arrays are the program's arguments, not constants, which XLA would fold at
    compile time wherever the model computes on the data alone (an index check over every
    row); a model that reads its arguments' values in Python gets them as constants.
    The sites' metadata and shapes are those of the eager trace, and the values of the
    sample sites (latent and observed) are concrete, the program's outputs; every other
    array in the trace (deterministic values, distribution parameters) is abstract: read
    only its shape.  ``abstract=True`` (staged whatever ``staged`` says) traces that program with
    ``jax.eval_shape`` instead: nothing is compiled or run, and the sample sites' values are
    ``jax.ShapeDtypeStruct`` too, for callers that read sites, supports and shapes only (a
    set-up saved two compiled programs and a pass over the data this way).  A staged trace's
    continuous latent sites also carry ``"unconstrained_value"``, their value mapped through
    their support's bijection inside the program: a support bounded by another latent
    (``Uniform(0, θ)``) holds a tracer, so its bijection cannot be built outside it.
    ``out_of_bounds`` (staged): the program checks its reads (``checkify.index_checks``), and
    this is called with the message of a read past an array's end, which JAX would clamp.
    """
    model_args, model_kwargs = as_jax_arguments(model_args, model_kwargs)
    seeded = handlers.seed(model, rng_seed=seed)
    substituted = handlers.substitute(seeded, substitute_fn=init_strategy or init_to_uniform)
    if not (staged or abstract):
        return handlers.trace(substituted).get_trace(*model_args, **model_kwargs)
    staged_trace: dict = {}
    leaves, tree = jax.tree.flatten((model_args, model_kwargs))
    is_array = [isinstance(leaf, jax.Array) for leaf in leaves]

    def sample_values(args: tuple, kwargs: dict) -> tuple[dict[str, Array], dict[str, Array]]:
        staged_trace.clear()
        staged_trace.update(handlers.trace(substituted).get_trace(*args, **kwargs))
        samples = {n: s for n, s in staged_trace.items() if s["type"] == "sample"}
        unconstrained = {
            name: biject_to(site["fn"].support).inv(site["value"])
            for name, site in samples.items()
            if not site["is_observed"] and not site["fn"].support.is_discrete
        }
        return {name: site["value"] for name, site in samples.items()}, unconstrained

    def with_arguments(*arrays: Array) -> tuple[dict[str, Array], dict[str, Array]]:
        given = iter(arrays)
        filled = [next(given) if a else leaf for leaf, a in zip(leaves, is_array, strict=True)]
        return sample_values(*jax.tree.unflatten(tree, filled))

    def execute(program: Callable, *arrays: Array) -> tuple[dict, dict]:
        if abstract:
            return jax.eval_shape(program, *arrays)
        if out_of_bounds is None:
            return jax.jit(program)(*arrays)
        error, out = jax.jit(checkify.checkify(program, errors=checkify.index_checks))(*arrays)
        if error.get() is not None:
            out_of_bounds(error.get())
        return out

    arrays = [leaf for leaf, a in zip(leaves, is_array, strict=True) if a]
    try:  # the data as arguments: as constants, XLA folds every data-only operation
        values, unconstrained = execute(with_arguments, *arrays)
    except jax.errors.JAXTypeError:  # the model reads its arguments' values: constants then
        values, unconstrained = execute(lambda: sample_values(model_args, model_kwargs))
    out = {
        name: {**site, "value": values[name]} if name in values else site
        for name, site in staged_trace.items()
    }
    for name, value in unconstrained.items():
        out[name]["unconstrained_value"] = value
    return out


def _is_broadcast_error(error: Exception) -> bool:
    return "broadcast" in str(error).lower()


class LocalLatentError(ValueError):
    """Latent sites inside the data plate: per-datum latents, which no minibatch kernel can
    subsample (``sites``, the plate's name and size are attributes; AutoSampler reads them
    and runs full-data NUTS)."""

    def __init__(self, sites: tuple[str, ...], data_plate: str, data_size: int) -> None:
        self.sites, self.data_plate, self.data_size = sites, data_plate, data_size
        names = ", ".join(f"'{name}'" for name in sites)
        super().__init__(
            f"latent site(s) {names} lie inside the data plate '{data_plate}'; local "
            "(per-datum) latent variables cannot be subsampled. Move them out of the plate or "
            "marginalise them, or use AutoSampler or NumPyro's NUTS on the full data."
        )


class FullDataOnlyError(ValueError):
    """A model that no minibatch kernel can run though NumPyro's NUTS can (no latent
    dimension, a likelihood that cannot be subsampled).  ``reason`` says why in one clause,
    for AutoSampler's decision (it hands the model to full-data NUTS); ``data_size``: the data
    plate's N (0 without one)."""

    def __init__(self, message: str, reason: str, data_size: int = 0) -> None:
        self.reason, self.data_size = reason, data_size
        super().__init__(message)


def _plate_axis(site: dict, plate: str) -> int | None:
    """Axis of ``plate`` in ``site``'s value (``None`` when the value lacks it)."""
    frame = next(f for f in site["cond_indep_stack"] if f.name == plate)
    event_dim = len(site["fn"].event_shape) if site.get("fn") is not None else 0
    axis = np.ndim(site["value"]) - event_dim + frame.dim
    return axis if axis >= 0 else None


def _unindexed_plate_error(site: dict, plate: str, values: int, indices: int) -> ValueError:
    return ValueError(
        f"site '{site['name']}' in plate '{plate}' has {values} values where the plate gave "
        f"{indices} indices: index the data with the plate's indices "
        f"(`with numpyro.plate('{plate}', N, subsample_size=n) as idx:` then X[idx], y[idx]) "
        "or use numpyro.subsample(X, event_dim=...) inside the plate."
    )


def _plates_of(site: dict) -> list[str]:
    return [frame.name for frame in site["cond_indep_stack"]]


def _trace_or_explain(
    model: Callable, model_args: tuple, model_kwargs: dict, init_strategy: Callable | None
) -> dict:
    """:func:`_trace` (staged and abstract: sites, supports and shapes), turning a subsample
    plate used without its indices into a clear error."""
    try:
        return _trace(model, model_args, model_kwargs, init_strategy, abstract=True)
    except (ValueError, TypeError) as error:
        if not _is_broadcast_error(error):
            raise
        full = set_plate(model, name=None, indices=None)
        try:
            trace = _trace(full, model_args, model_kwargs, init_strategy)
        except Exception:
            raise error from None
        for plate, (size, sub) in full.original.items():
            if sub in (None, size):
                continue
            for site in trace.values():
                if site["type"] == "sample" and site["is_observed"] and plate in _plates_of(site):
                    raise _unindexed_plate_error(site, plate, size, sub) from error
        raise


__all__ = ["set_plate"]
