"""The linear Gaussian model of the HAMCMC paper, eq. (14), with its analytic posterior.

    θ ~ N(0, I_D),    x_n | θ ~ N(a_nᵀ θ, σ_x²),    n = 1..N.

The posterior is Gaussian with precision P = I + AᵀA/σ_x² and mean P⁻¹ Aᵀx/σ_x².
``correlation`` makes the rows a_n correlated (a_n ~ N(0, C) with C_ij = ρ^|i−j| scaled),
which makes the posterior correlated, as in the paper's Fig. 1.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist


def model(A, x=None, noise_var: float = 10.0, subsample_size: int | None = None):
    """θ ~ N(0, I), x_n ~ N(a_nᵀθ, noise_var) inside the data plate."""
    D = A.shape[1]
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    with numpyro.plate("data", A.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample(
            "x", dist.Normal(A[idx] @ theta, jnp.sqrt(noise_var)), obs=None if x is None else x[idx]
        )


def load_data(
    N: int = 1000,
    D: int = 2,
    noise_var: float = 10.0,
    correlation: float = 0.0,
    seed: int = 0,
) -> tuple[tuple, dict]:
    """Return ``(model_args, model_kwargs)`` = ``((A, x), {"noise_var": σ_x²})``.

    Rows ``a_n ~ N(0, C)`` with ``C_ij = correlation^|i−j|`` (``correlation`` in [0, 1));
    θ_true ~ N(0, I); ``x = Aθ_true + noise``.
    """
    if not 0.0 <= correlation < 1.0:
        raise ValueError(f"correlation must lie in [0, 1); got {correlation}.")
    rng = np.random.default_rng(seed)
    lags = np.abs(np.subtract.outer(np.arange(D), np.arange(D)))
    chol = np.linalg.cholesky(correlation**lags)
    A = rng.standard_normal((N, D)) @ chol.T
    theta = rng.standard_normal(D)
    x = A @ theta + np.sqrt(noise_var) * rng.standard_normal(N)
    return (jnp.asarray(A), jnp.asarray(x)), {"noise_var": noise_var}


def posterior(A, x, noise_var: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    """Analytic posterior ``(mean, covariance)`` of θ."""
    A = np.asarray(A, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    precision = np.eye(A.shape[1]) + A.T @ A / noise_var
    cov = np.linalg.inv(precision)
    return cov @ (A.T @ x) / noise_var, cov


def reference(model_args: tuple, model_kwargs: dict) -> dict[str, dict[str, np.ndarray]]:
    """Reference posterior in the common format ``{site: {"mean": ..., "sd": ...}}``."""
    mean, cov = posterior(*model_args, **model_kwargs)
    return {"theta": {"mean": mean, "sd": np.sqrt(np.diag(cov)), "cov": cov}}
