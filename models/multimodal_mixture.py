"""The multimodal toy of the SBPS paper, Supp. E (eqs. E.62–E.63).

    L(w) = Σ_i Σ_k log[ exp(−(w_k − 1 − μ_k^i)²/(2σ_L²)) + exp(−(w_k + 1 − μ_{D+k}^i)²/(2σ_L²)) ],

with μ_j^i ~ N(0, σ_μ²).  Each coordinate has two modes near ±1, so the target has 2^D
modes.  It is not a posterior; a wide N(0, 10²) prior makes it proper.  The paper uses D = 2,
N = 1000, σ_L = 0.25, σ_μ = 0.01 and minibatches of n = 10.

By symmetry of the generator each mode carries nearly equal mass, so the marginal mean of
every coordinate is close to 0 and its sd close to 1: :func:`reference` returns that
approximation (exact up to O(σ_μ) mode asymmetry and the prior's O(1/100) pull).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp


def model(mu, sigma_l: float = 0.25, prior_scale: float = 10.0, subsample_size: int | None = None):
    """``mu`` has shape (N, 2D): the per-datum mode offsets μ^i."""
    D = mu.shape[1] // 2
    w = numpyro.sample("w", dist.Normal(0.0, prior_scale).expand([D]).to_event(1))
    with numpyro.plate("data", mu.shape[0], subsample_size=subsample_size) as idx:
        m = mu[idx]
        right = -((w - 1.0 - m[:, :D]) ** 2) / (2 * sigma_l**2)
        left = -((w + 1.0 - m[:, D:]) ** 2) / (2 * sigma_l**2)
        per_datum = jnp.sum(logsumexp(jnp.stack([right, left]), axis=0), axis=-1)
        numpyro.factor("likelihood", per_datum)


def load_data(
    N: int = 1000, D: int = 2, sigma_mu: float = 0.01, sigma_l: float = 0.25, seed: int = 0
) -> tuple[tuple, dict]:
    """``((mu,), {"sigma_l": σ_L})`` with μ_j^i ~ N(0, σ_μ²)."""
    rng = np.random.default_rng(seed)
    return (jnp.asarray(sigma_mu * rng.standard_normal((N, 2 * D))),), {"sigma_l": sigma_l}


def reference(model_args: tuple, model_kwargs: dict) -> dict[str, dict[str, np.ndarray]]:
    """Approximate marginal mean and sd of w (equal-mass modes at ±1 with tiny width)."""
    D = model_args[0].shape[1] // 2
    return {"w": {"mean": np.zeros(D), "sd": np.ones(D)}}
