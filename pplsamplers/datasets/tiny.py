"""Tiny ready-made targets for the runnable examples of the docstrings.

:func:`tiny_regression` is a NumPyro model with a data plate and its data (the samplers'
examples), :func:`tiny_linear` a two-parameter regression and :func:`tiny_mixture` a mixture
with enumerated assignments (the set-up's examples); :func:`tiny_estimator` is a hand-written
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
from pplsamplers.select.model_features import ModelFeatures
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


def linear(A: Array, x: Array) -> None:
    """The model of :func:`tiny_linear`: theta ~ N(0, I₂), x_i ~ N(a_i · theta, 3²) over the
    plate ``"data"``."""
    theta = numpyro.sample("theta", dist.Normal(0, 1).expand([2]).to_event(1))
    with numpyro.plate("data", A.shape[0]) as idx:
        numpyro.sample("x", dist.Normal(A[idx] @ theta, 3.0), obs=x[idx])


def tiny_linear(N: int = 2000) -> tuple[Callable[..., None], tuple[Array, Array]]:
    """A two-parameter linear regression and its N rows: ``(model, (A, x))``.

    Examples
    --------
    >>> model, (A, x) = tiny_linear()
    >>> model.__name__, A.shape, x.shape
    ('linear', (2000, 2), (2000,))
    """
    A = jax.random.normal(jax.random.key(0), (N, 2))
    return linear, (A, A.sum(1) + 3 * jax.random.normal(jax.random.key(1), (N,)))


def mixture(y: Array) -> None:
    """The model of :func:`tiny_mixture`: three normal components with weights w, means mu
    and a common sd sigma; each datum's component z is enumerated (``config_enumerate``)."""
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    mu = numpyro.sample("mu", dist.Normal(70, 50).expand([3]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(20))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Categorical(w), infer={"enumerate": "parallel"})
        numpyro.sample("y", dist.Normal(mu[z], sigma), obs=y)


def tiny_mixture(per_component: int = 500) -> tuple[Callable[..., None], tuple[Array]]:
    """A three-component mixture with enumerated assignments and its data, ``per_component``
    draws around each of 60, 75 and 90 with sd 3: ``(model, (y,))``.

    Examples
    --------
    >>> model, (y,) = tiny_mixture()
    >>> model.__name__, y.shape
    ('mixture', (1500,))
    """
    y = jnp.tile(jnp.array([60.0, 75, 90]), per_component)
    return mixture, (y + 3 * jax.random.normal(jax.random.key(0), y.shape),)


def tiny_features(**changes: object) -> ModelFeatures:
    """The :class:`~pplsamplers.ModelFeatures` of a near-Gaussian posterior with many data
    (N = 10⁴, n = 100, D = 5, one mode, small misfit and skewness), with ``changes`` applied:
    the selection examples' record.

    Examples
    --------
    >>> f = tiny_features(num_data=1_000)
    >>> f.num_data, f.cost_ratio, f.mode_count
    (1000, 0.01, 1)
    """
    features = ModelFeatures(
        num_data=10_000, subsample_size=100, dim=5, has_data_plate=True, discrete_sites=(),
        constrained_sites=(), cost_ratio=0.01, curvature_spread=3.0, correlation_condition=2.0,
        gradient_noise_ratio=0.5, quadratic_misfit=0.02, skewness=0.01, tail_growth=1.0,
        gradient_kurtosis=3.0,
    )  # fmt: skip
    return features._replace(**changes)


__all__ = [
    "linear",
    "mixture",
    "normal_mean",
    "tiny_estimator",
    "tiny_features",
    "tiny_linear",
    "tiny_mixture",
    "tiny_regression",
]
