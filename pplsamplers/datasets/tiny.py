"""Tiny ready-made targets for the runnable examples of the docstrings.

:func:`tiny_regression` is a NumPyro model with a data plate and its data (the samplers'
examples); :func:`tiny_estimator` is a hand-written
:class:`~pplsamplers.estimator.Estimator` (the kernels' examples).

Examples
--------
>>> model, run = tiny_regression()
>>> model.__name__
'normal_mean'
>>> tiny_estimator(3).dim, tiny_estimator(1, N=50, n=10).n
(3, 10)
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC
from numpyro.infer.mcmc import MCMCKernel

from pplsamplers.estimator import Estimator, build_estimator
from pplsamplers.types import Array


def normal_mean(y: Array) -> None:
    """The model of :func:`tiny_regression`: mu ~ N(0, 10²), y_i ~ N(mu, 1) over the plate
    ``"data"``."""
    mu = numpyro.sample("mu", dist.Normal(0, 10))
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(mu, 1), obs=y[idx])


def tiny_regression(N: int = 100) -> tuple[Callable[[Array], None], Callable[..., MCMC]]:
    """A one-parameter model with a data plate, and a runner of NumPyro's ``MCMC`` on its data.

    Parameters
    ----------
    N
        Number of data (all equal to 1, so the posterior of mu is about N(1, 1/N)).

    Returns
    -------
    tuple
        ``(model, run)``: :func:`normal_mean`, and ``run(kernel, num_warmup=100,
        num_samples=100, seed=0)`` which runs ``MCMC(kernel, ...)`` (one chain, no progress
        bar) on the N data and returns the ``MCMC`` object.

    Examples
    --------
    >>> from numpyro.infer import NUTS
    >>> model, run = tiny_regression()
    >>> run(NUTS(model), num_warmup=50, num_samples=20).get_samples()["mu"].shape
    (20,)
    """
    y = jnp.ones(N)

    def run(
        kernel: MCMCKernel, num_warmup: int = 100, num_samples: int = 100, seed: int = 0
    ) -> MCMC:
        mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, progress_bar=False)
        mcmc.run(jax.random.key(seed), y)
        return mcmc

    return normal_mean, run


def tiny_estimator(
    dim: int = 2, N: int | None = None, n: int = 10, center: float = 0.0
) -> Estimator:
    """A Gaussian estimator in ``dim`` coordinates, written by hand.

    Parameters
    ----------
    dim
        Dimension of x.
    N
        ``None``: U(x) = ½‖x‖² (a standard normal, one datum with a zero term).  Otherwise
        U(x) = ½‖x‖² + Σ_i ½(y_i − x₀)² with N data y_i evenly spaced on [c − 1, c + 1]: its
        mode is at x₀ = N c / (N + 1), its Hessian diag(N + 1, 1, …, 1).
    n
        Minibatch size when ``N`` is given (at most N).
    center
        c, the data's mean.
    """
    if N is None:
        terms = lambda x, idx: (0.5 * x @ x, jnp.zeros(idx.shape[0]))
        return build_estimator(terms, dim=dim, N=1)
    data = center + jnp.linspace(-1.0, 1.0, N)
    terms = lambda x, idx: (0.5 * x @ x, 0.5 * (data[idx] - x[0]) ** 2)
    return build_estimator(terms, dim=dim, N=N, n=min(n, N))


__all__ = ["normal_mean", "tiny_estimator", "tiny_regression"]
