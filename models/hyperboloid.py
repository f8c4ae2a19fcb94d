"""The hyperboloid posterior of the SBPS paper, Supp. D (eq. D.60): highly non-Gaussian.

    y_i ~ N(w₀ w₁, σ²),  i = 1..N,    w ~ N(0, I / c).

The likelihood only sees the product w₀w₁, so the posterior concentrates on the hyperbola
w₀w₁ ≈ ȳ: a curved ridge no Laplace approximation describes.  The paper uses N = 1000,
n = 100, c = 1e-4, w* = (0, 0), σ = 1; the default ``prior_precision`` here is 0.1, which
keeps the ridge bounded enough for a NUTS reference (pass 1e-4 for the paper's setting).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist


def model(y, sigma: float = 1.0, prior_precision: float = 0.1, subsample_size: int | None = None):
    """w ~ N(0, I/c), y_i ~ N(w₀w₁, σ²) inside the data plate."""
    w = numpyro.sample(
        "w", dist.Normal(0.0, 1.0 / jnp.sqrt(prior_precision)).expand([2]).to_event(1)
    )
    with numpyro.plate("data", y.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(w[0] * w[1], sigma), obs=y[idx])


def load_data(
    N: int = 1000,
    w_true: tuple[float, float] = (0.0, 0.0),
    sigma: float = 1.0,
    prior_precision: float = 0.1,
    seed: int = 0,
) -> tuple[tuple, dict]:
    """``((y,), {"sigma": σ, "prior_precision": c})`` with y_i ~ N(w₀*w₁*, σ²)."""
    rng = np.random.default_rng(seed)
    y = w_true[0] * w_true[1] + sigma * rng.standard_normal(N)
    return (jnp.asarray(y),), {"sigma": sigma, "prior_precision": prior_precision}
