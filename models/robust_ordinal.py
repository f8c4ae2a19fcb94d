"""Ordinal regression with ordered cutpoints and flat priors on raw covariates (issue 14, item 6d).

    β ~ ImproperUniform(ℝ³),  c ~ ImproperUniform(ordered vectors of ℝ^{K−1}),
    y_i ~ OrderedLogistic(x_iᵀβ, c),    x_i = (a_i, t_i, a_i·t_i)  (no intercept: c absorbs it),

with ``a ~ N(100, 15²)`` uncentred, so the cutpoints sit near 100·β_a and move with it.
K = 4 categories.  The reference is a stored NumPyro NUTS run
(``tests/data/robust_ordinal_nuts.json``).

Examples
--------
>>> args, kwargs = load_data(N=100)
>>> args[0].shape, int(args[1].max()) <= 3
((100, 3), True)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from models.robust_linear import raw_design

BETA_TRUE = np.array([0.06, 1.0, -0.01])
CUTPOINTS_TRUE = np.array([4.5, 6.0, 7.5])


def model(X, y=None, num_categories: int = 4, subsample_size: int | None = None):
    """Flat ``beta`` and flat ordered ``cutpoints``; ordered-logistic likelihood."""
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real, (), (X.shape[1],)))
    cutpoints = numpyro.sample(
        "cutpoints", dist.ImproperUniform(constraints.ordered_vector, (), (num_categories - 1,))
    )
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample(
            "y",
            dist.OrderedLogistic(X[idx] @ beta, cutpoints),
            obs=None if y is None else y[idx],
        )


def load_data(N: int = 10_000, seed: int = 4) -> tuple[tuple, dict]:
    """Return ``((X, y), {"num_categories": 4})``; every category holds 15–40% of the rows."""
    if N < 10:
        raise ValueError(f"N must be at least 10; got {N}.")
    rng = np.random.default_rng(seed)
    X = raw_design(rng, N)[:, 1:]
    eta = X @ BETA_TRUE
    latent = eta + rng.logistic(size=N)
    y = np.searchsorted(CUTPOINTS_TRUE, latent)
    return (jnp.asarray(X), jnp.asarray(y)), {"num_categories": len(CUTPOINTS_TRUE) + 1}
