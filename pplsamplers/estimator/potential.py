"""A :class:`Potential`: an estimator in a model's flat unconstrained coordinates, with the maps
to the model's sites and a starting point.  The warmup takes one (:func:`~pplsamplers.warmup.
setup`); kernels see only its estimator.  A NumPyro model gives one through
:func:`pplsamplers.model.make_potential`; :func:`build_potential` builds one by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp

from pplsamplers.estimator.core import DEFAULT_CHUNK, Estimator, Terms, build_estimator
from pplsamplers.types import Array, PRNGKey


def _as_sites(x: Array) -> dict:
    return {"x": x}


class Potential(NamedTuple):
    """A model's estimator (full batch, in the model's flat unconstrained x) and its coordinates.

    Parameters
    ----------
    estimator : Estimator
        The :class:`~pplsamplers.estimator.Estimator` of U(x).
    init_position : jax.Array
        A valid starting point (shape ``(D,)``).
    unravel : callable, optional
        x -> dict of the model's unconstrained sites.
    constrain : callable, optional
        x -> dict of the model's constrained sites.
    unconstrain : callable or None, default None
        dict of constrained sites -> x (``None`` for a hand-built potential).
    draw_init : callable or None, default None
        ``key -> x``, random starting points (the model's init strategy), or ``None``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from pplsamplers.datasets import tiny_estimator
    >>> potential = Potential(tiny_estimator(2, N=9), init_position=jnp.zeros(2))
    >>> potential.dim, potential.N, potential.constrain(jnp.ones(2))["x"].tolist()
    (2, 9, [1.0, 1.0])
    """

    estimator: Estimator
    init_position: Array
    unravel: Callable[[Array], dict] = _as_sites
    constrain: Callable[[Array], dict] = _as_sites
    unconstrain: Callable[[dict], Array] | None = None
    draw_init: Callable[[PRNGKey], Array] | None = None

    @property
    def dim(self) -> int:
        """D, the number of flat unconstrained coordinates x."""
        return self.estimator.dim

    @property
    def N(self) -> int:
        """The number of data (rows of the data plate) the potential sums over."""
        return self.estimator.N


def build_potential(
    terms: Terms,
    *,
    dim: int,
    N: int,
    n: int | None = None,
    init_position: Array | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    draw_init: Callable[[PRNGKey], Array] | None = None,
) -> Potential:
    """A :class:`Potential` from a terms function ``(x, idx) -> (g(x), ℓ_idx(x))``, with the
    identity coordinates (the sites are ``{"x": x}``) and ``init_position`` (default 0).

    Parameters
    ----------
    terms : callable
        ``(x, idx) -> (global_term, per_datum)``: minus the log prior g(x), and minus the log
        likelihood of each datum in ``idx`` (``per_datum.shape == idx.shape``).
    dim, N : int
        Dimension of x and number of data.
    n : int or None, default None
        Minibatch size of the estimator (default N: full batch).
    init_position : jax.Array or None, default None
        The starting point, shape ``(dim,)`` (default zeros).
    chunk_size : int, default 4096
        Data per chunk of the full-data passes.
    draw_init : callable or None, default None
        ``key -> x``, random starting points, or ``None``.

    Returns
    -------
    Potential
        The validated :class:`~pplsamplers.estimator.Estimator` (:func:`build_estimator`) in
        the identity coordinates, with its starting point; ``unconstrain`` is ``None``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> potential = build_potential(lambda x, idx: (0.5 * x @ x, 0.0 * idx), dim=2, N=10)
    >>> potential.estimator.n, potential.constrain(jnp.ones(2))["x"].shape
    (10, (2,))
    """
    estimator = build_estimator(terms, dim=dim, N=N, n=n, chunk_size=chunk_size)
    start = jnp.zeros(dim) if init_position is None else jnp.asarray(init_position)
    return Potential(estimator, start, draw_init=draw_init)


__all__ = ["Potential", "build_potential"]
