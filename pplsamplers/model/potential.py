"""``make_potential``: a NumPyro model (or its :class:`ModelView`) -> a
:class:`~pplsamplers.estimator.Potential`, and the checks of a starting point."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from pplsamplers.estimator import Potential, build_estimator
from pplsamplers.model import _enumerate, _numpyro
from pplsamplers.model._inputs import failed_trace_error, no_dimension_error
from pplsamplers.model.data import validate_data
from pplsamplers.model.sharding import check_processes, sharded_full_pass, warn_embedded_data
from pplsamplers.model.view import (
    ModelView,
    inspect,
    is_concrete,
    site_diagnosis,
)
from pplsamplers.types import Array, PRNGKey


def make_potential(
    model: Callable | ModelView,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    subsample_size: int | None = None,
    *,
    data_plate: str | None = None,
    rng_key: PRNGKey | None = None,
    init_strategy: Callable | None = None,
    chunk_size: int = 4096,
    check_data: bool = True,
) -> Potential:
    """Turn a NumPyro model into a minibatch potential over flat unconstrained positions.

    ``model`` is either the model itself (inspected here with :func:`inspect`) or a
    :class:`ModelView` from :func:`inspect`, which already carries the arguments, the data
    plate and the init strategy: ``make_potential(view, subsample_size=n)``.

    The data plate is the plate over the observed sites (or ``data_plate=``).  Its
    subsample size comes from ``subsample_size`` if given, else from the model's own
    ``numpyro.plate(..., subsample_size=...)``, else the full data set is used.  Inside
    the plate the model must index its data with the plate's indices (``X[idx]``).

    Parameters
    ----------
    model : callable or ModelView
        A NumPyro model, or its :class:`ModelView`.
    model_args, model_kwargs : tuple; dict or None, defaults () and None
        Its arguments (the data); empty when ``model`` is a view.
    subsample_size : int or None, default None
        Minibatch size n (``None``: the model's own, or full batch).
    data_plate : str or None, default None
        Name of the data plate when it cannot be found automatically.
    rng_key : jax.Array or None, default None
        Key for the initial point (``init_strategy``); defaults to ``PRNGKey(0)``.
    init_strategy : callable or None, default None
        A NumPyro init strategy, e.g. ``numpyro.infer.init_to_median`` (default
        ``init_to_uniform``).  Every trace substitutes its values, so flat priors work.
    chunk_size : int, default 4096
        Chunk of data used by the full-data value and gradient.
    check_data : bool, default True
        Check every observed datum and data argument for non-finite values first
        (:func:`validate_data`, one pass over N).  Turn off only for a model that handles
        non-finite values itself.

    Returns
    -------
    Potential
        Its ``estimator`` (full-data passes SPMD where the data are split over devices), the
        maps between the flat x and the model's sites, and a valid starting point.

    Raises
    ------
    ValueError
        No latent dimension to sample (``FullDataOnlyError``, as for a likelihood that cannot
        be subsampled: NUTS runs such models), missing data, per-datum arguments of different
        lengths, discrete latent sites, latent sites inside the data plate, ambiguous or duplicated
        subsample plates, a ``subsample_size`` outside ``1..N`` or one given without a data plate,
        data not indexed with the plate's indices, non-finite data (names the site or argument
        and the first bad row).
    RuntimeError
        When the initial point has a non-finite potential or gradient (names the site), or
        several JAX processes run without ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> estimator = make_potential(model, (jnp.arange(100.0),), subsample_size=10).estimator
    >>> estimator.dim, estimator.N, estimator.n
    (1, 100, 10)
    >>> idx = estimator.sample_indices(jax.random.key(0))
    >>> estimator.directional(jnp.zeros(1), jnp.ones(1), idx)[1].shape
    (10,)
    """
    check_processes()  # several processes need the data as arguments: fail early, clearly
    if isinstance(model, ModelView):
        if model_args or model_kwargs or data_plate is not None or init_strategy is not None:
            raise ValueError(
                "make_potential(view, ...) takes the model's arguments, data_plate and "
                "init_strategy from the view; pass them to inspect(...) instead."
            )
        view = model
    else:
        view = inspect(model, model_args, model_kwargs, data_plate, init_strategy)
    info = view.info
    if (refusal := no_dimension_error(info)) is not None:
        raise refusal
    if check_data:
        validate_data(view)
    warn_embedded_data(view.model_args, view.model_kwargs)
    N = info.data_size
    if subsample_size is None:
        n = info.model_subsample_size or N
    else:
        if isinstance(subsample_size, bool) or not isinstance(subsample_size, int | np.integer):
            raise ValueError(f"subsample_size must be a positive integer; got {subsample_size!r}.")
        if info.data_plate is None and subsample_size != 1:
            raise ValueError(
                "subsample_size was given but the model has no data plate over its observed "
                "sites. Wrap the likelihood in `with numpyro.plate('data', N) as idx:` and index "
                "the data with idx (X[idx], y[idx]), or drop subsample_size for full batch."
            )
        if not 0 < subsample_size <= N:
            raise ValueError(
                f"subsample_size must satisfy 0 < subsample_size <= N = {N} (the size of plate "
                f"'{info.data_plate}'); got {subsample_size}."
            )
        n = int(subsample_size)

    model, model_args, model_kwargs, strategy = (
        view.model,
        view.model_args,
        view.model_kwargs,
        view.init_strategy,
    )
    key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    draw = _numpyro.initial_values(None, model, model_args, model_kwargs, info, strategy)
    init_dict = draw(key)  # the drawer is compiled once, for this start and the random ones
    init_flat, unravel = ravel_pytree(init_dict)
    # jitted: tracing the model runs NumPyro's handlers in Python (tens of ms per trace), and a
    # run traces the potential dozens of times (kernel, warmup, checks, each under jvp, grad
    # or vmap); as one jitted function, every later trace at the same shapes reuses the first
    terms = jax.jit(_numpyro.make_terms(model, model_args, model_kwargs, info, unravel))
    constrain_dict = _numpyro.make_constrain(model, model_args, model_kwargs, info)

    draw_init = lambda key: ravel_pytree(draw(key))[0]

    estimator = build_estimator(terms, dim=init_flat.shape[0], N=N, n=n, chunk_size=chunk_size)
    potential = Potential(
        estimator._replace(partitioned_pass=sharded_full_pass),
        init_flat,
        unravel=unravel,
        constrain=lambda x: constrain_dict(unravel(x)),
        draw_init=draw_init,
    )
    to_unconstrained = _numpyro.make_unconstrain(model, model_args, model_kwargs, info, strategy)
    return potential._replace(
        init_position=valid_start(potential, init_flat, key, view),
        unconstrain=lambda values: ravel_pytree(to_unconstrained(values))[0],
    )


START_RETRIES = 20
"""Random init-strategy draws tried when the first start is invalid (NumPyro tries 100)."""


def valid_start(potential: Potential, first: Array, rng_key: PRNGKey, view: ModelView) -> Array:
    """``first`` if the potential and its gradient are finite there, else the first valid of
    :data:`START_RETRIES` more init-strategy draws, else the origin of the unconstrained
    space (e.g. all regression coefficients 0, where raw covariates of size 100 cannot push
    a likelihood to zero density), as NumPyro's ``find_valid_initial_params`` retries.
    Raises the first point's error (naming the site) when none is valid."""
    estimator = potential.estimator
    value_and_grad = jax.jit(estimator.value_and_grad)  # compiled once for every candidate
    idx = jnp.arange(min(estimator.n, estimator.N))

    def valid(x: Array) -> bool:
        value, grad = value_and_grad(x, idx)
        if not is_concrete(value, grad):  # traced data: the caller checks a concrete point
            return True
        return bool(jnp.isfinite(value)) and bool(jnp.all(jnp.isfinite(grad)))

    if not is_concrete(first) or valid(first):
        return first
    if potential.draw_init is not None:
        keys = jax.random.split(jax.random.fold_in(rng_key, 1), START_RETRIES)
        for candidate in [*(potential.draw_init(k) for k in keys), jnp.zeros_like(first)]:
            if valid(candidate):
                return candidate
    check_position(potential, first, view, value_and_grad)  # raises, naming the site
    return first


def check_position(
    potential: Potential,
    position: Array,
    view: ModelView | None = None,
    value_and_grad: Callable | None = None,
) -> None:
    """Raise ``RuntimeError`` naming the offending site if ``position`` is not a valid start.

    Valid means: finite potential and finite gradient on a minibatch of the data.  The check
    is eager: under ``jit``/``vmap``/``pmap`` (a traced ``position`` or potential) it does
    nothing, and the caller validates a concrete point beforehand.  ``view`` names the site;
    ``value_and_grad``: the estimator's, already jitted (one compilation for many points).

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> def model(y):
    ...     s = numpyro.sample("s", dist.HalfNormal(1.0))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(0, s), obs=y[idx])
    >>> view = inspect(model, (jnp.ones(5),))
    >>> pot = make_potential(view)
    >>> check_position(pot, jnp.zeros(1), view)  # log s = 0: fine
    """
    if not is_concrete(position):
        return
    estimator = potential.estimator
    idx = jnp.arange(min(estimator.n, estimator.N))
    value, grad = (value_and_grad or jax.jit(estimator.value_and_grad))(position, idx)
    if not is_concrete(value, grad):  # the potential closes over traced data
        return
    finite_grad = bool(jnp.all(jnp.isfinite(grad)))
    if bool(jnp.isfinite(value)) and finite_grad:
        return
    where, data_fault = "", False
    if view is not None:
        where, data_fault = site_diagnosis(view, potential.unravel(position), idx)
        if not where:
            bad = [
                name
                for name, g in potential.unravel(grad).items()
                if not bool(jnp.all(jnp.isfinite(g)))
            ]
            where = f"the gradient with respect to site(s) {bad} is not finite" if bad else ""
    if data_fault:
        raise RuntimeError(
            f"invalid data: the potential at the starting point is {float(value)} because "
            f"{where}. Fix the data (pplsamplers.model.validate_data names every "
            "non-finite row); another starting point will not help."
        )
    raise RuntimeError(
        "invalid initial point: the potential is "
        f"{float(value)} with {'finite' if finite_grad else 'non-finite'} gradient; "
        f"{where or 'check the model'}. Pass init_params in the support, or another "
        "init_strategy (e.g. numpyro.infer.init_to_median)."
    )


def model_info(
    model: Callable,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    data_plate: str | None = None,
) -> _numpyro.SiteInfo:
    """Static facts about a model: latent sites, data plate, N (see
    :class:`~pplsamplers.model._numpyro.SiteInfo`)."""
    return _numpyro.inspect_model(model, model_args, dict(model_kwargs or {}), data_plate)


def full_data_model(view: ModelView) -> Callable:
    """The model with the data plate set to all N data (for ArviZ's observed_data/log_likelihood)."""
    return _numpyro.full_data_model(view.model, view.info)


def discrete_latent_sites(
    model: Callable, model_args: tuple = (), model_kwargs: dict | None = None
) -> list[str]:
    """Names of the model's discrete latent sites that these samplers cannot marginalise:
    those not marked for enumeration (a site marked for parallel enumeration inside the data
    plate is summed out datum by datum).

    Raises ``ValueError`` where the model's data look missing (an observed site turned
    latent), or where its per-datum arguments have different lengths and the model fails on
    them."""
    model_kwargs = dict(model_kwargs or {})
    try:
        return _enumerate.discrete_latent_sites(model, model_args, model_kwargs)
    except Exception as error:
        lengths = failed_trace_error(error, model, tuple(model_args), model_kwargs)
        if lengths is not None:
            raise lengths from error
        raise


def all_data_model(model: Callable) -> Callable:
    """``model`` with every subsample plate switched off (all data, scale one).

    NumPyro's NUTS cannot subsample; wrap the model with this to run it on the same model.

    Parameters
    ----------
    model : callable
        A NumPyro model.

    Returns
    -------
    callable
        The model, taking the same arguments, with no plate subsampled.

    Examples
    --------
    >>> from numpyro.infer import NUTS
    >>> from pplsamplers.datasets.logistic_regression import model
    >>> kernel = NUTS(all_data_model(model))
    """
    return _numpyro.all_data_model(model)


def make_postprocess(view: ModelView) -> Callable[[dict], dict]:
    """Unconstrained dict -> constrained latent sites plus deterministic sites outside the plate."""
    constrain = _numpyro.make_constrain(
        view.model, view.model_args, view.model_kwargs, view.info, with_deterministic=True
    )
    return jax.jit(constrain)  # one program, not the model replayed op by op on each call


__all__ = [
    "all_data_model",
    "check_position",
    "discrete_latent_sites",
    "full_data_model",
    "make_postprocess",
    "make_potential",
    "model_info",
]
