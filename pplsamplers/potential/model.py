"""``make_potential``: a NumPyro model with one data plate -> :class:`SubsampledPotential`."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer import init_to_uniform

from pplsamplers.potential import _numpyro
from pplsamplers.potential.subsampled import SubsampledPotential, build_potential
from pplsamplers.types import Array, PRNGKey


def make_potential(
    model: Callable,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    subsample_size: int | None = None,
    *,
    data_plate: str | None = None,
    rng_key: PRNGKey | None = None,
    init_strategy: Callable = init_to_uniform,
    chunk_size: int = 4096,
) -> SubsampledPotential:
    """Turn a NumPyro model into a minibatch potential over flat unconstrained positions.

    The data plate is the plate over the observed sites (or ``data_plate=``).  Its
    subsample size comes from ``subsample_size`` if given, else from the model's own
    ``numpyro.plate(..., subsample_size=...)``, else the full data set is used.  Inside
    the plate the model must index its data with the plate's indices (``X[idx]``).

    Parameters
    ----------
    model
        A NumPyro model.
    model_args, model_kwargs
        Its arguments (the data).
    subsample_size
        Minibatch size n (``None``: the model's own, or full batch).
    data_plate
        Name of the data plate when it cannot be found automatically.
    rng_key
        Key for the initial point (``init_strategy``); defaults to ``PRNGKey(0)``.
    init_strategy
        A NumPyro init strategy, e.g. ``numpyro.infer.init_to_median``.
    chunk_size
        Chunk of data used by the full-data value and gradient.

    Returns
    -------
    SubsampledPotential

    Raises
    ------
    ValueError
        Discrete latent sites, latent sites inside the data plate, ambiguous or duplicated
        subsample plates, a ``subsample_size`` outside ``1..N`` or one given without a data plate.
    RuntimeError
        When the initial point has a non-finite potential or gradient (names the site).

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> pot = make_potential(model, (jnp.arange(100.0),), subsample_size=10)
    >>> pot.dim, pot.N, pot.n
    (1, 100, 10)
    >>> v, per_example = pot.directional(jnp.zeros(1), jnp.ones(1), pot.sample_indices(jax.random.key(0)))
    >>> per_example.shape
    (10,)
    """
    model_kwargs = dict(model_kwargs or {})
    info = _numpyro.inspect_model(model, model_args, model_kwargs, data_plate)
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

    key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    init_dict = _numpyro.initial_values(key, model, model_args, model_kwargs, info, init_strategy)
    init_flat, unravel = ravel_pytree(init_dict)
    dict_terms = _numpyro.make_terms(model, model_args, model_kwargs, info)
    constrain_dict = _numpyro.make_constrain(model, model_args, model_kwargs, info)

    def terms(x: Array, idx: Array) -> tuple[Array, Array]:
        return dict_terms(unravel(x), idx)

    def draw_init(key: PRNGKey) -> Array:
        values = _numpyro.initial_values(key, model, model_args, model_kwargs, info, init_strategy)
        return ravel_pytree(values)[0]

    potential = build_potential(
        terms,
        dim=init_flat.shape[0],
        N=N,
        n=n,
        init_position=init_flat,
        constrain=lambda x: constrain_dict(unravel(x)),
        unravel=unravel,
        chunk_size=chunk_size,
        draw_init=draw_init,
    )
    check_position(potential, init_flat, model, model_args, model_kwargs, info)
    to_unconstrained = _numpyro.make_unconstrain(model, model_args, model_kwargs, info)
    return potential._replace(
        init_position=init_flat,
        unconstrain=lambda values: ravel_pytree(to_unconstrained(values))[0],
    )


def check_position(
    potential: SubsampledPotential,
    position: Array,
    model: Callable | None = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    info: _numpyro.SiteInfo | None = None,
) -> None:
    """Raise ``RuntimeError`` naming the offending site if ``position`` is not a valid start.

    Valid means: finite potential and finite gradient on a minibatch of the data.
    """
    idx = jnp.arange(min(potential.n, potential.N))
    value, grad = jax.jit(potential.value_and_grad)(position, idx)
    if bool(jnp.isfinite(value)) and bool(jnp.all(jnp.isfinite(grad))):
        return
    where = ""
    if model is not None and info is not None:
        params = potential.unravel(position)
        where = _numpyro.site_diagnosis(model, model_args, model_kwargs or {}, info, params, idx)
        if not where:
            bad = [
                name
                for name, g in potential.unravel(grad).items()
                if not bool(jnp.all(jnp.isfinite(g)))
            ]
            where = f"the gradient with respect to site(s) {bad} is not finite" if bad else ""
    raise RuntimeError(
        "invalid initial point: the potential is "
        f"{float(value)} with {'non-finite' if not bool(jnp.all(jnp.isfinite(grad))) else 'finite'} "
        f"gradient; {where or 'check the model'}. Pass init_params in the support, or "
        "another init_strategy (e.g. numpyro.infer.init_to_median)."
    )


def model_info(
    model: Callable,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    data_plate: str | None = None,
) -> _numpyro.SiteInfo:
    """Static facts about a model: latent sites, data plate, N (see :class:`SiteInfo`)."""
    return _numpyro.inspect_model(model, model_args, dict(model_kwargs or {}), data_plate)


def full_data_model(model: Callable, info: _numpyro.SiteInfo) -> Callable:
    """The model with the data plate set to all N data (for ArviZ's observed_data/log_likelihood)."""
    return _numpyro.full_data_model(model, info)


def discrete_latent_sites(
    model: Callable, model_args: tuple = (), model_kwargs: dict | None = None
) -> list[str]:
    """Names of the model's discrete latent sites (which these samplers cannot move)."""
    return _numpyro.discrete_latent_sites(model, model_args, dict(model_kwargs or {}))


def all_data_model(model: Callable) -> Callable:
    """``model`` with every subsample plate switched off (all data, scale one).

    NumPyro's NUTS cannot subsample; wrap the model with this to run it on the same model.

    Examples
    --------
    >>> from numpyro.infer import NUTS
    >>> from models.logistic_regression import model
    >>> kernel = NUTS(all_data_model(model))
    """
    return _numpyro.all_data_model(model)


def make_postprocess(
    model: Callable, model_args: tuple, model_kwargs: dict | None, info: _numpyro.SiteInfo
) -> Callable[[dict], dict]:
    """Unconstrained dict -> constrained latent sites plus deterministic sites outside the plate."""
    return _numpyro.make_constrain(model, model_args, dict(model_kwargs or {}), info, True)


__all__ = [
    "all_data_model",
    "check_position",
    "discrete_latent_sites",
    "full_data_model",
    "make_postprocess",
    "make_potential",
    "model_info",
]
