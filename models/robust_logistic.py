"""Logistic regression with interactions of raw covariates and a flat prior (issue 14, item 6b).

    β ~ ImproperUniform(ℝ⁶),    y_i ~ Bernoulli(sigmoid(x_iᵀβ)),
    x_i = (1, a_i, b_i, t_i, a_i·t_i, a_i·b_i / 100),

with ``a ~ N(100, 15²)``, ``b ~ N(50, 10²)`` correlated with ``a`` (ρ = 0.5) and a 0/1 ``t``
that rises with ``a`` (:func:`models.robust_linear.raw_design`).  Nothing is centred or
scaled.  No analytic posterior: the tests compare with a stored NumPyro NUTS run
(``tests/data/robust_logistic_nuts.json``, made by ``tests/data/make_references.py``).

Examples
--------
>>> import jax
>>> from numpyro.infer import MCMC, NUTS
>>> args, kwargs = load_data(N=2000)
>>> mcmc = MCMC(NUTS(model), num_warmup=200, num_samples=200, progress_bar=False)
>>> mcmc.run(jax.random.key(0), *args, **kwargs)
>>> mcmc.get_samples()["beta"].shape
(200, 6)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from models.robust_linear import raw_design

BETA_TRUE = np.array([-7.1, 0.04, 0.05, 1.5, -0.012, 0.01])


def model(X, y=None, subsample_size: int | None = None):
    """Flat prior on ``beta``, Bernoulli-logit likelihood in the data plate."""
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real, (), (X.shape[1],)))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ beta), obs=None if y is None else y[idx])


def load_data(N: int = 100_000, seed: int = 1) -> tuple[tuple, dict]:
    """Return ``((X, y), {})``; about half of the labels are 1 at the default ``BETA_TRUE``."""
    if N < 10:
        raise ValueError(f"N must be at least 10; got {N}.")
    rng = np.random.default_rng(seed)
    base = raw_design(rng, N)
    a, t = base[:, 1], base[:, 2]
    b = 50.0 + 10.0 * (0.5 * (a - 100.0) / 15.0 + np.sqrt(0.75) * rng.standard_normal(N))
    X = np.stack([np.ones(N), a, b, t, a * t, a * b / 100.0], axis=1)
    p = 1.0 / (1.0 + np.exp(-(X @ BETA_TRUE)))
    y = (rng.uniform(size=N) < p).astype(np.float64)
    return (jnp.asarray(X), jnp.asarray(y)), {}
