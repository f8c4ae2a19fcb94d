"""The checks on the data a user passes in: every observed value and every data argument
finite, named by site or argument and row when not."""

from __future__ import annotations

from pplsamplers.model import _numpyro
from pplsamplers.model.view import (
    _FIX_DATA,
    ModelView,
    _first_bad,
    _observed_sites,
    _validate_arguments,
)


def validate_data(view: ModelView) -> None:
    """Raise ``ValueError`` naming the first non-finite datum, before any sampling.

    Checks, each in one vectorised pass over all N, every observed site inside the data plate
    (traced once over all data) and then every floating array among the model's positional
    and keyword arguments.  Tracers (inside ``jit``/``pmap``) are skipped.  That pass also
    checks its reads: an argument read past its end (``y[idx]`` with ``len(y) < N``, which
    JAX clamps silently) raises ``ValueError`` naming it, its length and the plate.

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from pplsamplers.model import inspect
    >>> def model(y):
    ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
    ...     with numpyro.plate("data", y.shape[0]) as idx:
    ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])
    >>> validate_data(inspect(model, (jnp.zeros(5).at[3].set(jnp.nan),)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: observed site 'y' has a non-finite value in datum 3 of plate 'data' ...
    """
    try:
        sites = _observed_sites(view, checked=True)  # and no read past an argument's end
    except Exception as error:  # non-finite arguments may fail NumPyro's validation first
        _validate_arguments(view.model, view.model_args, view.model_kwargs, error)
        raise
    for site in sites:
        axis = None
        if view.data_plate is not None:
            axis = _numpyro._plate_axis(site, view.data_plate)
        bad = _first_bad(site["value"], axis)
        if bad is not None:
            where = (
                f"in datum {bad[0]} of plate '{view.data_plate}'"
                if axis is not None
                else f"at flat index {bad[0]}"
            )
            raise ValueError(
                f"observed site '{site['name']}' has a non-finite value {where} "
                f"({bad[1]} bad in all). {_FIX_DATA}"
            )
    _validate_arguments(view.model, view.model_args, view.model_kwargs)


__all__ = ["validate_data"]
