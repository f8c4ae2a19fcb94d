"""Student-t regression with a learned scale and df on raw covariates (issue 14, item 6d).

    β ~ N(0, 1000² I),  σ ~ HalfNormal(10),  ν ~ Gamma(2, 0.1),
    y_i ~ StudentT(ν, x_iᵀβ, σ),    x_i = (1, a_i, t_i, a_i·t_i)  (raw, as in robust_linear).

Two constrained scales (σ > 0, ν > 0) next to raw-scale coefficients with a very wide prior.
The reference is a stored NumPyro NUTS run (``tests/data/robust_student_t_nuts.json``).

Examples
--------
>>> args, kwargs = load_data(N=100)
>>> args[0].shape
(100, 4)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from models.robust_linear import raw_design

BETA_TRUE = np.array([3.0, 0.05, -2.0, 0.02])
SIGMA_TRUE, NU_TRUE = 1.5, 4.0


def model(X, y=None, subsample_size: int | None = None):
    """Wide normal prior on ``beta``, HalfNormal ``sigma``, Gamma(2, 0.1) ``nu``."""
    beta = numpyro.sample("beta", dist.Normal(0.0, 1000.0).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample(
            "y", dist.StudentT(nu, X[idx] @ beta, sigma), obs=None if y is None else y[idx]
        )


def load_data(N: int = 10_000, seed: int = 3) -> tuple[tuple, dict]:
    """Return ``((X, y), {})`` with Student-t(ν = 4) noise of scale 1.5."""
    if N < 10:
        raise ValueError(f"N must be at least 10; got {N}.")
    rng = np.random.default_rng(seed)
    X = raw_design(rng, N)
    y = X @ BETA_TRUE + SIGMA_TRUE * rng.standard_t(NU_TRUE, size=N)
    return (jnp.asarray(X), jnp.asarray(y)), {}
