"""One inspection of a NumPyro model, and the checks on what users pass in.

:func:`inspect` traces the model once, at init-strategy values (so flat priors such as
``dist.ImproperUniform`` work), and returns the :class:`ModelView` that everything downstream
takes (:func:`~pplsamplers.model.make_potential`, ``check_position``, ``make_postprocess``,
``full_data_model``): the model, its arguments and the static facts about its sites.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro import validation_enabled
from numpyro.distributions import Unit
from numpyro.infer import init_to_uniform

from pplsamplers.model import _agreement, _numpyro, _tracing
from pplsamplers.model._inputs import (
    _data_arguments,
    failed_trace_error,
    out_of_bounds_error,
    unsliceable_error,
)
from pplsamplers.model._numpyro import SiteInfo
from pplsamplers.model._tracing import _plates_of, as_jax_arguments
from pplsamplers.model.sharding import check_processes
from pplsamplers.types import Array

_FIX_DATA = (
    "pplsamplers needs finite data: drop or impute the non-finite rows before sampling "
    "(e.g. keep = np.isfinite(X).all(axis=1); X, y = X[keep], y[keep]), or mask them out of "
    "the likelihood inside the model."
)


class ModelView(NamedTuple):
    """A NumPyro model with its arguments and the facts read off one trace (:func:`inspect`).

    Attributes
    ----------
    model, model_args, model_kwargs : the user's NumPyro model and its arguments (the data).
    info : :class:`SiteInfo`, the static facts: latent sites and shapes, data plate, N.
    init_strategy : the NumPyro init strategy every trace substitutes latent values from.
    """

    model: Callable
    model_args: tuple
    model_kwargs: dict
    info: SiteInfo
    init_strategy: Callable = init_to_uniform

    @property
    def data_plate(self) -> str | None:
        """Name of the data plate (``None``: the whole likelihood is one datum)."""
        return self.info.data_plate

    @property
    def data_size(self) -> int:
        """N, the size of the data plate."""
        return self.info.data_size

    @property
    def model_subsample_size(self) -> int | None:
        """The model's own ``subsample_size`` on the data plate, if any."""
        return self.info.model_subsample_size

    @property
    def latent_names(self) -> tuple[str, ...]:
        """Latent site names, in trace order."""
        return self.info.latent_names

    @property
    def unconstrained_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of each latent site in unconstrained space (what ``init_params`` gives)."""
        return self.info.unconstrained_shapes


def is_concrete(*trees: Any) -> bool:
    """False when any leaf is a JAX tracer (inside ``jit``/``vmap``/``pmap``): skip eager checks."""
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(trees))


def require_concrete(model_args: Any, model_kwargs: Any, who: str) -> None:
    """Raise ``ValueError`` when the model's arguments are traced: ``MCMC.run`` was called
    inside ``jax.jit`` (or ``vmap``, ``grad``), where ``who``'s set-up cannot read the data."""
    if not is_concrete(model_args, model_kwargs):
        raise ValueError(
            f"{who}'s set-up needs the data as concrete arrays (it reads them: mode, scale, "
            "batch size), but the model's arguments are traced: MCMC.run was called inside "
            "jax.jit, vmap or grad. Call mcmc.run(key, *data) outside jax.jit; MCMC compiles "
            "the sampling itself, and MCMC(..., jit_model_args=True) reuses that program for "
            "new data of the same shapes."
        )


def inspect(
    model: Callable,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    data_plate: str | None = None,
    init_strategy: Callable | None = None,
) -> ModelView:
    """Inspect ``model`` once and return its :class:`ModelView`.

    The model is traced with latent values substituted from ``init_strategy`` (as NumPyro's
    ``initialize_model`` does), once as written and once with the data plate fixed to a few
    indices; no trace costs more than one eager pass over the data.

    Raises
    ------
    ValueError
        Discrete latent sites, latent sites inside the data plate, unknown or ambiguous data
        plates, or observed data inside the data plate not indexed with the plate's indices.

    Warns
    -----
    UserWarning
        Naming the ``numpyro.deterministic`` sites inside the data plate (not returned).

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.distributions import constraints
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.ImproperUniform(constraints.real, (), ()))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> view = inspect(model, (jnp.arange(100.0),))
    >>> view.data_plate, view.data_size, view.unconstrained_shapes
    ('data', 100, {'mu': ()})
    """
    check_processes()  # several processes need the data as arguments: fail early, clearly
    # NumPy data become JAX arrays, as for NUTS: a NumPy array refuses traced indices (X[idx])
    model_args, kwargs = as_jax_arguments(model_args, model_kwargs)
    strategy = init_strategy or init_to_uniform
    try:
        info = _numpyro.inspect_model(model, tuple(model_args), kwargs, data_plate, strategy)
        view = check_plate_indexing(ModelView(model, tuple(model_args), kwargs, info, strategy))
    except Exception as error:  # non-finite data often fails first (NumPyro's validation)
        _validate_arguments(model, tuple(model_args), kwargs, error)
        lengths = failed_trace_error(error, model, tuple(model_args), kwargs, strategy)
        if lengths is not None:
            raise lengths from error
        raise
    if info.deterministic_in_plate:
        warnings.warn(
            f"deterministic site(s) {list(info.deterministic_in_plate)} inside the data plate "
            f"'{info.data_plate}' are not returned: they are per-datum, and each step sees only "
            "a minibatch of the data. Compute them afterwards from the posterior draws with "
            "numpyro.infer.Predictive(model, posterior_samples=mcmc.get_samples())(key, *args).",
            UserWarning,
            stacklevel=2,
        )
    return view


def check_plate_indexing(view: ModelView) -> ModelView:
    """``view``, its data plate checked: observed sites must follow the plate's indices.

    Traces the model with the data plate fixed to a few indices (a few data).  A plain plate
    (no ``subsample_size`` in the model) whose observed data ignore the indices (``obs=y``, as
    NumPyro models are usually written) is subsampled through its arguments instead: the view
    slices every argument with N rows (:attr:`~pplsamplers.model._numpyro.SiteInfo.slice_rows`)
    once the sliced model's per-datum terms are checked to equal the full model's on those
    rows.  Anything else (a model's own ``subsample_size`` used without its indices, or data
    that slicing does not line up) raises ``ValueError`` with the fix.
    """
    info = view.info
    if info.data_plate is None or info.data_size < 2:
        return view
    count = min(3, info.data_size - 1)
    problem = _plate_indexing_problem(view, count)
    if problem is None:
        return view
    if info.model_subsample_size is None:
        sliced = view._replace(info=info._replace(slice_rows=True))
        try:
            fits = _plate_indexing_problem(sliced, count) is None and _agreement.row_slices_agree(
                view.model, view.model_args, view.model_kwargs, info, view.init_strategy, count
            )
        except Exception:  # noqa: BLE001 - slicing does not fit this model: the error below
            fits = False
        if fits:
            return sliced
        # the full model traces (its data have the plate's length), but not on a minibatch's
        # rows, or with other terms there: no minibatch kernel can run it, NUTS can
        if fits is False:
            raise unsliceable_error(info.data_plate, info.data_size)
    site, length, error = problem
    raise _tracing._unindexed_plate_error(site, info.data_plate, length, count) from error


def _plate_indexing_problem(
    view: ModelView, count: int
) -> tuple[dict, int, Exception | None] | None:
    """``None`` when the model with its data plate fixed to ``count`` indices gives every
    observed site inside it ``count`` values; else ``(site, its length, the error)``."""
    info = view.info
    fixed = _numpyro._fixed_plate_model(view.model, info, jnp.arange(count))
    try:
        trace = _tracing._trace(
            fixed,
            view.model_args,
            view.model_kwargs,
            view.init_strategy,
            abstract=True,
        )
    except (ValueError, TypeError) as error:
        if not _tracing._is_broadcast_error(error):
            raise
        sites = _observed_sites(view, factors=True)
        if not sites:
            raise
        return sites[0], info.data_size, error
    for site in trace.values():
        if site["type"] == "sample" and site["is_observed"] and info.data_plate in _plates_of(site):
            axis = _numpyro._plate_axis(site, info.data_plate)
            length = None if axis is None else np.shape(site["value"])[axis]
            if length is not None and length != count:
                return site, length, None
    return None


def _observed_sites(view: ModelView, factors: bool = False, checked: bool = False) -> list[dict]:
    """Observed sites inside the data plate (``numpyro.factor`` sites too when ``factors``),
    traced over all N (one compiled pass; their values are concrete).  ``checked``: raise
    :func:`~pplsamplers.model._inputs.out_of_bounds_error` where that pass reads an argument
    past its end (a per-datum argument shorter than the plate)."""

    def out_of_bounds(message: str) -> None:
        error = out_of_bounds_error(message, view)
        if error is not None:
            raise error

    check = checked and is_concrete(view.model_args, view.model_kwargs)
    full = _numpyro._fixed_plate_model(view.model, view.info, None)
    trace = _tracing._trace(
        full, view.model_args, view.model_kwargs, view.init_strategy, staged=True,
        out_of_bounds=out_of_bounds if check else None,
    )  # fmt: skip
    plate = view.data_plate
    return [
        site
        for site in trace.values()
        if site["type"] == "sample"
        and site["is_observed"]
        and (factors or not isinstance(site["fn"], Unit))
        and (plate is None or plate in _plates_of(site))
    ]


def _first_bad(value: Any, axis: int | None) -> tuple[int, int] | None:
    """``(first bad row, number of bad rows)`` along ``axis`` (flat index when ``None``)."""
    if isinstance(value, jax.core.Tracer):
        return None
    xp = np if isinstance(value, np.ndarray | float | np.floating) else jnp
    array = xp.asarray(value)
    if not xp.issubdtype(array.dtype, xp.inexact) or array.size == 0:
        return None
    finite = xp.isfinite(array)
    if axis is None or array.ndim == 0:
        ok = finite.reshape(-1)
    else:
        ok = xp.moveaxis(finite, axis, 0).reshape(array.shape[axis], -1).all(axis=1)
    if bool(ok.all()):
        return None
    return int(xp.argmin(ok)), int((~ok).sum())


def _validate_arguments(
    model: Callable, model_args: tuple, model_kwargs: dict, cause: Exception | None = None
) -> None:
    for label, leaf in _data_arguments(model, model_args, model_kwargs):
        bad = _first_bad(leaf, 0)
        if bad is not None:
            where = f"in row {bad[0]}" if np.ndim(leaf) > 0 else "(a scalar)"
            raise ValueError(
                f"{label} has a non-finite value {where} ({bad[1]} bad rows in all). {_FIX_DATA}"
            ) from cause


def _layout(view_or_potential: Any) -> tuple[dict[str, tuple[int, ...]] | None, int, Any]:
    """``(unconstrained shapes by site or None, dimension D, dtype)``."""
    if isinstance(view_or_potential, ModelView):
        shapes = dict(view_or_potential.unconstrained_shapes)
        dim = sum(math.prod(s) for s in shapes.values())
        return shapes, dim, jnp.result_type(float)
    potential = view_or_potential
    out = jax.eval_shape(potential.unravel, potential.init_position)
    shapes = {k: tuple(v.shape) for k, v in out.items()} if isinstance(out, dict) else None
    return shapes, potential.dim, potential.init_position.dtype


def flatten_init_params(view_or_potential: Any, init_params: Any) -> Array:
    """One chain's ``init_params`` -> the flat unconstrained position ``x`` (shape ``(D,)``).

    ``init_params``: a dict with exactly the model's latent site names, each value in the
    site's *unconstrained* shape (``ModelView.unconstrained_shapes``), or a flat array of the D
    unconstrained values.  For several chains (a leading chain axis), call once per chain.

    Raises
    ------
    ValueError
        Naming every unknown site (with the valid names), missing site and wrongly shaped
        value (expected and given), or for a flat array whose size is not D.

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> def model(y):
    ...     w = numpyro.sample("w", dist.Normal(0, 1).expand([3]).to_event(1))
    ...     sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(w.sum(), sigma), obs=y[idx])
    >>> view = inspect(model, (jnp.zeros(5),))
    >>> flatten_init_params(view, {"w": jnp.ones(3), "sigma": 0.0}).shape
    (4,)
    """
    shapes, dim, dtype = _layout(view_or_potential)
    if not isinstance(init_params, dict):
        flat = jnp.asarray(init_params, dtype)
        if flat.size != dim:
            raise ValueError(
                f"init_params has {flat.size} values; the model has {dim} unconstrained "
                f"dimensions{'' if shapes is None else f' (sites {shapes})'}. For several "
                "chains pass one row per chain."
            )
        return flat.reshape(-1)
    if shapes is None:
        raise ValueError(
            "init_params is a dict but this potential was not built from a model; pass a flat "
            f"array of its {dim} unconstrained values."
        )
    moved = {n: f"; '{n}' is sampled as '{n}_decentered'" for n in init_params}  # centring
    problems = [
        f"unknown site '{n}' (the latent sites are {sorted(shapes)}"
        + (moved[n] if f"{n}_decentered" in shapes else "")
        + ")"
        for n in init_params
        if n not in shapes
    ]
    problems += [f"site '{name}' is missing" for name in shapes if name not in init_params]
    values = {}
    for name, shape in shapes.items():
        if name in init_params:
            values[name] = jnp.asarray(init_params[name], dtype)
            if values[name].shape != shape:
                problems.append(
                    f"site '{name}' needs unconstrained shape {shape}; got {values[name].shape}"
                )
    if problems:
        raise ValueError(
            "init_params does not match the model: " + "; ".join(problems) + ". Give every "
            "latent site its unconstrained value (one chain; call per chain for several)."
        )
    return ravel_pytree(values)[0]


def site_diagnosis(view: ModelView, params: dict[str, Array], indices: Array) -> tuple[str, bool]:
    """``(description, data_fault)`` of the first site whose log-density is not finite at
    ``params`` (unconstrained); ``data_fault``: that site is observed and its value itself is
    not finite (a data problem, not a starting-point problem)."""
    with validation_enabled(False):  # a bad point may give invalid distribution parameters
        trace, _ = _numpyro._constrained_trace(
            view.model, view.model_args, view.model_kwargs, view.info, params, indices
        )
    for name, site in trace.items():
        if site["type"] != "sample":
            continue
        with warnings.catch_warnings():  # out-of-support values are what we are reporting
            warnings.simplefilter("ignore")
            log_prob = jnp.sum(site["fn"].log_prob(site["value"]))
        if not bool(jnp.isfinite(log_prob)):
            value = np.asarray(site["value"])
            kind = "observed" if site["is_observed"] else "latent"
            where = f"{kind} site '{name}' has log density {float(log_prob)} at value "
            where += f"{value.ravel()[:4]}"
            if site["is_observed"] and _first_bad(value, None) is not None:
                return where + " (the observed value itself is not finite)", True
            return where, False
    return "", False


__all__ = [
    "ModelView",
    "check_plate_indexing",
    "flatten_init_params",
    "inspect",
    "is_concrete",
    "require_concrete",
    "site_diagnosis",
]
