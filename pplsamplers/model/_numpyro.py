"""Everything pplsamplers needs to know about NumPyro internals (and :mod:`._support`).

:mod:`~pplsamplers.model.view` and :func:`make_terms` rely on these facts (NumPyro 0.22):

* a ``numpyro.plate`` message has the subsample indices as ``value`` and
  ``(size, subsample_size)`` as ``args``; the plate scales its sites by ``size / len(value)``;
* unconstrained parameters map to constrained ones through ``biject_to(site["fn"].support)``,
  evaluated when the site is reached so that parameter-dependent supports work;
* every trace substitutes init-strategy values for the latent sites, as NumPyro's own
  ``initialize_model`` does: ``.sample()`` is never called on an improper prior;
* a plain data plate whose observed data ignore the plate's indices (``obs=y``, NumPyro's
  usual style) is subsampled through its arguments (:attr:`SiteInfo.slice_rows`): each
  array with N rows is cut to the minibatch's rows, and the plate then declares n (read
  off the data) or N (a constant), which :func:`make_terms` reads from the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers, validation_enabled
from numpyro.distributions import Unit
from numpyro.distributions.transforms import biject_to
from numpyro.distributions.util import sum_rightmost

from pplsamplers.model import _enumerate, _inputs, _support
from pplsamplers.model._components import LabelledSite, labelled_sites
from pplsamplers.model._tracing import (
    LocalLatentError,
    _plate_axis,  # noqa: F401 - view and data read it here
    _plates_of,
    _trace,
    _trace_or_explain,
    set_plate,
)
from pplsamplers.types import Array


class SiteInfo(NamedTuple):
    """Static description of a model, read off one trace at init-strategy values."""

    latent_names: tuple[str, ...]
    latent_shapes: dict[str, tuple[int, ...]]
    constrained_sites: tuple[str, ...]
    data_plate: str | None
    data_size: int
    model_subsample_size: int | None
    observed_names: tuple[str, ...]
    deterministic_outside_plate: tuple[str, ...]
    unconstrained_shapes: dict[str, tuple[int, ...]] = {}
    deterministic_in_plate: tuple[str, ...] = ()
    edge_sites: tuple[str, ...] = ()  # observed, support depends on latents (see _support)
    slice_rows: bool = False  # the data plate's data are not indexed: slice the arguments
    enumerated: tuple[str, ...] = ()  # per-datum discrete sites, marginalised (_enumerate)
    max_plate_nesting: int = 0
    ordered_sites: tuple[str, ...] = ()  # latents on an ordered vector (no label switching)
    labelled: tuple[LabelledSite, ...] = ()  # a mixture's per-component latents (_components)


def inspect_model(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    data_plate: str | None = None,
    init_strategy: Callable | None = None,
) -> SiteInfo:
    """Trace ``model`` once (at ``init_strategy`` values) and describe its sites and data plate.

    Raises
    ------
    ValueError
        For a discrete latent site not marked for enumeration or marked outside the data
        plate, a continuous latent site inside the data plate, an unknown or ambiguous
        data plate, a subsample plate whose observed data ignore the plate's indices, data
        left out (``y=None``) or data of another length than their plate.
    """
    trace = _trace_or_explain(model, model_args, model_kwargs, init_strategy)
    for check in (_inputs.missing_data_error, _inputs.plate_length_error):
        if (error := check(trace, model, model_args, model_kwargs)) is not None:
            raise error
    plates = {name: site for name, site in trace.items() if site["type"] == "plate"}
    samples = {n: s for n, s in trace.items() if s["type"] == "sample"}
    observed = {n: s for n, s in samples.items() if s["is_observed"]}
    discrete = _enumerate.discrete_sites(trace)
    latent = {n: s for n, s in samples.items() if not s["is_observed"] and n not in discrete}

    if data_plate is not None and data_plate not in plates:
        raise ValueError(
            f"data_plate='{data_plate}' is not a plate of this model; its plates are "
            f"{sorted(plates) or 'none'}."
        )
    subsampled = sorted(n for n, p in plates.items() if p["args"][1] not in (None, p["args"][0]))
    if data_plate is None:
        if len(subsampled) > 1:
            raise ValueError(
                f"the model has {len(subsampled)} subsample plates ({', '.join(subsampled)}); "
                "pplsamplers subsamples exactly one data plate. Give subsample_size to one "
                "plate only and pass data_plate='<name>'."
            )
        over_obs = None
        for site in observed.values():
            names = set(_plates_of(site))
            if isinstance(site["fn"], Unit) and not names:
                continue  # a numpyro.factor outside every plate is a global term, not data
            over_obs = names if over_obs is None else over_obs & names
        candidates = sorted(over_obs or ())
        if len(candidates) > 1:
            narrowed = [c for c in candidates if c in subsampled]
            if len(narrowed) != 1:  # subsampling any conditional independence is unbiased:
                local = {c for v in latent.values() for c in _plates_of(v)}  # plates of latents
                free = sorted(set(candidates) - local) or candidates
                sizes = {c: int(plates[c]["args"][0]) for c in free}
                narrowed = [c for c in free if sizes[c] == max(sizes.values())]  # the largest
            if len(narrowed) != 1:
                raise ValueError(
                    f"several plates of the same size cover the observed sites "
                    f"({', '.join(narrowed)}); name the data plate with data_plate='<name>'."
                )
            candidates = narrowed
        data_plate = candidates[0] if candidates else None
    elif len([s for s in subsampled if s != data_plate]) > 0:
        other = [s for s in subsampled if s != data_plate]
        raise ValueError(
            f"plate(s) {other} also subsample; only data_plate='{data_plate}' may have a "
            "subsample_size."
        )

    _enumerate.check_discrete(discrete, data_plate)
    if data_plate is not None:
        local = tuple(name for name, site in latent.items() if data_plate in _plates_of(site))
        if local:
            raise LocalLatentError(local, data_plate, int(plates[data_plate]["args"][0]))
        size, sub = plates[data_plate]["args"]
    else:
        size, sub = 1, None
    constrained = tuple(n for n, s in latent.items() if not _support.is_real(s["fn"].support))
    outside = lambda s: data_plate is None or data_plate not in _plates_of(s)  # noqa: E731
    determ = tuple(n for n, s in trace.items() if s["type"] == "deterministic" and outside(s))
    determ_in = tuple(
        n for n, s in trace.items() if s["type"] == "deterministic" and n not in determ
    )
    unconstrained = {n: tuple(np.shape(s["unconstrained_value"])) for n, s in latent.items()}
    values = {n: s["value"] for n, s in latent.items()}
    one = set_plate(model, data_plate, jnp.arange(min(int(size), 1))) if data_plate else model
    return SiteInfo(
        latent_names=tuple(latent),
        latent_shapes={n: tuple(np.shape(v)) for n, v in values.items()},
        constrained_sites=constrained,
        data_plate=data_plate,
        data_size=int(size),
        model_subsample_size=None if sub is None else int(sub),
        observed_names=tuple(observed),
        deterministic_outside_plate=determ,
        unconstrained_shapes=unconstrained,
        deterministic_in_plate=determ_in,
        edge_sites=_support.edge_sites(one, model_args, model_kwargs, values),
        enumerated=tuple(discrete),
        max_plate_nesting=_enumerate.max_plate_nesting(trace),
        ordered_sites=tuple(n for n, s in latent.items() if _support.is_ordered(s["fn"].support)),
        labelled=labelled_sites(trace),
    )


def initial_values(
    rng_key: Array | None,
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    info: SiteInfo,
    init_strategy: Callable,
) -> Any:
    """Unconstrained starting values drawn by a NumPyro ``init_strategy``; with ``rng_key``
    ``None``, the compiled drawer ``key -> values`` itself (to draw many without compiling
    again)."""
    fixed = _fixed_plate_model(model, info, jnp.arange(min(info.data_size, 1)))

    @jax.jit  # one program, not the model's operations one by one
    def draw(key: Array) -> dict[str, Array]:
        substituted = handlers.substitute(handlers.seed(fixed, key), substitute_fn=init_strategy)
        trace = handlers.trace(substituted).get_trace(*model_args, **model_kwargs)
        return {
            name: biject_to(trace[name]["fn"].support).inv(trace[name]["value"])
            for name in info.latent_names
        }

    return draw if rng_key is None else draw(rng_key)


def has_rows(leaf: Any, N: int) -> bool:
    """Whether ``leaf`` has ``N`` rows along its first axis (per-datum, by NumPyro convention)."""
    return hasattr(leaf, "shape") and len(leaf.shape) >= 1 and leaf.shape[0] == N


def _row_sliced(model: Callable, N: int, indices: Array) -> Callable:
    """``model`` with each argument of ``N`` rows cut to its rows ``indices`` (``slice_rows``)."""

    def sliced(*model_args: Any, **model_kwargs: Any) -> Any:
        take = lambda leaf: jnp.take(leaf, indices, axis=0) if has_rows(leaf, N) else leaf
        model_args, model_kwargs = jax.tree.map(take, (model_args, model_kwargs))
        return model(*model_args, **model_kwargs)

    return sliced


def _fixed_plate_model(model: Callable, info: SiteInfo, indices: Array | None) -> Callable:
    if info.data_plate is None:
        return model
    fixed = set_plate(model, name=info.data_plate, indices=indices)
    if info.slice_rows and indices is not None:
        return _row_sliced(fixed, info.data_size, indices)
    return fixed


def make_unconstrain(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    info: SiteInfo,
    init_strategy: Callable | None = None,
) -> Callable[[dict[str, Array]], dict[str, Array]]:
    """Constrained latent values -> unconstrained ones, through each site's support bijection,
    read from one trace: abstract, or eager on one datum where a support depends on a latent
    value (which is then taken at its initial value)."""
    fixed = _fixed_plate_model(model, info, jnp.arange(min(info.data_size, 1)))
    with validation_enabled(False):  # an init point may give invalid parameters (float32
        # overflow of exp(raw covariate · coefficient) to 0 or inf); only supports are read
        trace = _trace(fixed, model_args, model_kwargs, init_strategy, abstract=True)
        supports = [trace[name]["fn"].support for name in info.latent_names]
        if any(_support.depends_on_values(support) for support in supports):
            trace = _trace(fixed, model_args, model_kwargs, init_strategy)
    transforms = {name: biject_to(trace[name]["fn"].support) for name in info.latent_names}
    return lambda values: {name: t.inv(values[name]) for name, t in transforms.items()}


def full_data_model(model: Callable, info: SiteInfo) -> Callable:
    """The model with its data plate un-subsampled (every datum, scale one): the view through
    which ArviZ reads ``observed_data`` and ``log_likelihood``."""
    return _fixed_plate_model(model, info, None)


def all_data_model(model: Callable) -> Callable:
    """The model with every plate un-subsampled, e.g. for NumPyro's NUTS."""
    return set_plate(model, name=None, indices=None)


def _constrained_trace(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    info: SiteInfo,
    params: dict[str, Array],
    indices: Array | None,
    enumerate_sites: bool = False,
) -> tuple[dict, list[Array]]:
    """Trace at unconstrained ``params`` (and their log-Jacobians); the enumerated sites are
    enumerated (``enumerate_sites``) or held at a placeholder value."""
    log_dets: list[Array] = []

    def substitute_fn(site: dict) -> Any:
        name = site["name"]
        if name in info.enumerated and not enumerate_sites:
            return _enumerate.placeholder(site)
        if site["type"] != "sample" or site["is_observed"] or name not in params:
            return None
        unconstrained = params[name]
        transform = biject_to(site["fn"].support)
        value = transform(unconstrained)
        log_det = transform.log_abs_det_jacobian(unconstrained, value)
        log_det = sum_rightmost(
            log_det, jnp.ndim(log_det) - jnp.ndim(value) + len(site["fn"].event_shape)
        )
        log_dets.append(jnp.sum(log_det))
        return value

    fixed = _fixed_plate_model(model, info, indices)
    nesting = info.max_plate_nesting if enumerate_sites else None
    get_trace = _enumerate.tracer(fixed, substitute_fn, nesting)
    return get_trace(*model_args, **model_kwargs), log_dets


def _log_prob(site: dict, edge_sites: tuple[str, ...]) -> Array:
    log_prob = site["fn"].log_prob(site["value"])
    if site["name"] in edge_sites:
        log_prob = _support.support_mask(site, log_prob)
    if site.get("mask") is not None:
        log_prob = jnp.where(site["mask"], log_prob, 0.0)
    return log_prob


def _relative_scale(site: dict, plate: str, ratio: Array) -> Array:
    """A site's scale, relative to one datum inside the data plate (its subsample scale out)."""
    scale = 1.0 if site["scale"] is None else site["scale"]
    return scale / ratio if plate in _plates_of(site) else scale


def _per_datum_log_prob(site: dict, plate: str, scale_ratio: Array, edges: tuple) -> Array:
    log_prob = _log_prob(site, edges)
    frame = next(f for f in site["cond_indep_stack"] if f.name == plate)
    axis = log_prob.ndim + frame.dim
    if axis < 0:
        raise ValueError(
            f"site '{site['name']}' is inside plate '{plate}' but its log-density has shape "
            f"{log_prob.shape}, which lacks the plate dimension {frame.dim}."
        )
    log_prob = jnp.moveaxis(log_prob, axis, 0).reshape(log_prob.shape[axis], -1).sum(-1)
    return log_prob * _relative_scale(site, plate, scale_ratio)


def make_terms(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    info: SiteInfo,
    unravel: Callable[[Array], dict[str, Array]] | None = None,
) -> Callable[[Any, Array], tuple[Array, Array]]:
    """``terms(params, indices) -> (global_term, per_datum)``: ``-log prior - log|J|`` plus
    every site outside the data plate, and ``per_datum[i] = -log p(y_{indices[i]} | params)``;
    the minibatch potential is ``global_term + (N / n) * sum(per_datum)``.  ``params``: the
    unconstrained sites, or the flat vector ``unravel`` maps to them."""
    plate = info.data_plate
    size = info.data_size
    edges = info.edge_sites

    def terms(params: Any, indices: Array) -> tuple[Array, Array]:
        params = params if unravel is None else unravel(params)
        trace, log_dets = _constrained_trace(
            model, model_args, model_kwargs, info, params, indices if plate else None,
            enumerate_sites=bool(info.enumerated),
        )  # fmt: skip
        # the plate scales by its declared size / n; a row-sliced plate may declare n, not N
        declared = trace[plate]["args"][0] if plate in trace else size
        ratio = declared / indices.shape[0]
        global_term = -sum(log_dets) if log_dets else jnp.zeros(())
        if info.enumerated:
            site_log_prob = lambda site: (
                _log_prob(site, edges) * _relative_scale(site, plate, ratio)
            )
            marginal = _enumerate.marginal_terms(trace, plate, site_log_prob, indices.shape[0])
            return global_term + marginal[0], marginal[1]
        per_datum = jnp.zeros(indices.shape[0])
        for site in trace.values():
            if site["type"] != "sample":
                continue
            if plate is not None and plate in _plates_of(site):
                per_datum = per_datum - _per_datum_log_prob(site, plate, ratio, edges)
                continue
            global_term = global_term - _relative_scale(site, plate, ratio) * jnp.sum(
                _log_prob(site, edges)
            )
        if plate is None:  # the whole likelihood is one "datum"
            return jnp.zeros(()), per_datum + global_term
        return global_term, per_datum

    return terms


def make_constrain(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    info: SiteInfo,
    with_deterministic: bool = False,
) -> Callable[[dict[str, Array]], dict[str, Array]]:
    """Map unconstrained latent values to constrained ones by replaying the model on one datum,
    with the deterministic sites outside the data plate when ``with_deterministic`` (those
    inside it would be minibatch-sized)."""
    keep = info.latent_names + (info.deterministic_outside_plate if with_deterministic else ())
    one = jnp.arange(min(info.data_size, 1))

    def constrain(params: dict[str, Array]) -> dict[str, Array]:
        trace, _ = _constrained_trace(
            model, model_args, model_kwargs, info, params, one if info.data_plate else None
        )
        return {name: trace[name]["value"] for name in keep}

    return constrain


__all__ = [
    "SiteInfo",
    "all_data_model",
    "full_data_model",
    "has_rows",
    "initial_values",
    "inspect_model",
    "make_constrain",
    "make_terms",
    "make_unconstrain",
    "set_plate",
]
