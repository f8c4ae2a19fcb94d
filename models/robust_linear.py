"""Linear regression on raw, unscaled, correlated covariates with a flat prior (issue 14, item 6a).

    β ~ ImproperUniform(ℝ⁴),    y_i ~ N(x_iᵀβ, σ²),  σ known,
    x_i = (1, a_i, t_i, a_i·t_i),  a_i ~ N(100, 15²),  t_i ∈ {0, 1} with P(t_i = 1) rising in a_i.

This is a regression as people fit it: an intercept next to a covariate around 100, a 0/1
covariate correlated with it, and their interaction, none of them centred or scaled.  The
posterior correlation between the intercept and the slope is about −0.99 and the posterior
sds span four orders of magnitude, which is what breaks samplers tuned on unit scales.

With a flat prior and a known σ the posterior is exactly Gaussian (no large-N approximation):
mean β̂ = (XᵀX)⁻¹Xᵀy (the OLS solution) and covariance σ²(XᵀX)⁻¹; :func:`posterior` returns
it.  :func:`raw_design` is shared by the other ``models/robust_*.py`` files.

Examples
--------
>>> import jax
>>> from numpyro.infer import MCMC, NUTS
>>> args, kwargs = load_data(N=1000)
>>> mcmc = MCMC(NUTS(model), num_warmup=200, num_samples=200, progress_bar=False)
>>> mcmc.run(jax.random.key(0), *args, **kwargs)
>>> mcmc.get_samples()["beta"].shape
(200, 4)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

BETA_TRUE = np.array([3.0, 0.05, -2.0, 0.02])
NOISE_SD = 2.0


def model(X, y=None, noise_sd: float = NOISE_SD, subsample_size: int | None = None):
    """Flat prior on the coefficients ``beta``, Gaussian likelihood with a known sd."""
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real, (), (X.shape[1],)))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ beta, noise_sd), obs=None if y is None else y[idx])


def raw_design(rng: np.random.Generator, N: int) -> np.ndarray:
    """Columns ``(1, a, t, a·t)``: ``a ~ N(100, 15²)``, ``t ~ Bernoulli(sigmoid((a − 100)/15))``."""
    a = rng.normal(100.0, 15.0, size=N)
    t = (rng.uniform(size=N) < 1.0 / (1.0 + np.exp(-(a - 100.0) / 15.0))).astype(np.float64)
    return np.stack([np.ones(N), a, t, a * t], axis=1)


def load_data(N: int = 100_000, seed: int = 0, noise_sd: float = NOISE_SD) -> tuple[tuple, dict]:
    """Return ``((X, y), {"noise_sd": σ})`` with ``y = X β_true + σ ε``."""
    if N < 10:
        raise ValueError(f"N must be at least 10; got {N}.")
    rng = np.random.default_rng(seed)
    X = raw_design(rng, N)
    y = X @ BETA_TRUE + noise_sd * rng.standard_normal(N)
    return (jnp.asarray(X), jnp.asarray(y)), {"noise_sd": noise_sd}


def posterior(X, y, noise_sd: float = NOISE_SD) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior ``(mean, covariance)`` of ``beta``: ``(β̂_OLS, σ²(XᵀX)⁻¹)``."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    q, r = np.linalg.qr(X)
    mean = np.linalg.solve(r, q.T @ y)
    r_inv = np.linalg.inv(r)
    return mean, noise_sd**2 * (r_inv @ r_inv.T)


def reference(X, y, noise_sd: float = NOISE_SD) -> dict[str, dict[str, np.ndarray]]:
    """``{"beta": {"mean": ..., "sd": ...}}``, the format of the stored NUTS references."""
    mean, cov = posterior(X, y, noise_sd)
    return {"beta": {"mean": mean, "sd": np.sqrt(np.diag(cov))}}
