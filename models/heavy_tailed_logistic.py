"""Logistic regression on imbalanced, heavy-tailed or unstandardised covariates (SGBD paper).

Model (paper eq. 14): w ~ N(0, prior_scale² I_d), y_i ~ Bernoulli(sigmoid(x_i·w)).

Data generators:

* :func:`load_data` defaults to Appendix A.4.2: N = 100 labels all equal to 1 (extreme
  imbalance) and covariates X_i ~ Half-Cauchy(s).  The larger s, the more extreme covariates
  and the more skewed the posterior of w.  ``scales`` may give one s per covariate.
* ``tail="normal"`` with per-covariate ``scales`` and ``labels="logistic"`` gives the
  unstandardised covariates of §5.1.1 (scale heterogeneity): posterior sds that differ by
  the ratio of the covariate scales, so that no single step size fits every coordinate.

For d = 1, :func:`reference` integrates the posterior on a fine grid (exact to quadrature
error); for d > 1 there is no analytic posterior (use NumPyro NUTS).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

TAILS = ("half_cauchy", "normal")
LABELS = ("all_positive", "logistic")


def model(X, y=None, prior_scale: float = 1.0, subsample_size: int | None = None):
    """Logistic regression without intercept, w ~ N(0, prior_scale² I)."""
    d = X.shape[1]
    w = numpyro.sample("w", dist.Normal(0.0, prior_scale).expand([d]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=None if y is None else y[idx])


def load_data(
    N: int = 100,
    scales: float | tuple[float, ...] = 1.0,
    tail: str = "half_cauchy",
    labels: str = "all_positive",
    seed: int = 0,
) -> tuple[tuple, dict]:
    """Return ``(model_args, model_kwargs)`` = ``((X, y), {})``.

    Parameters
    ----------
    N
        Number of data.
    scales
        Scale s_j of each covariate (a scalar gives d = 1); X_ij = s_j |C_ij| with C_ij
        standard Cauchy (``tail="half_cauchy"``) or X_ij = s_j Z_ij, Z_ij ~ N(0, 1)
        (``tail="normal"``).
    labels
        ``"all_positive"``: y_i = 1 for all i (A.4.2).  ``"logistic"``: y_i ~
        Bernoulli(sigmoid(x_i·w_true)) with w_true,j ~ N(0, 1)/s_j, so that every covariate
        moves the logits by O(1) whatever its scale.
    seed
        Seed of the NumPy generator.
    """
    if tail not in TAILS:
        raise ValueError(f"tail must be one of {TAILS}; got {tail!r}.")
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {LABELS}; got {labels!r}.")
    scales = np.atleast_1d(np.asarray(scales, dtype=np.float64))
    if scales.ndim != 1 or not np.all(scales > 0):
        raise ValueError(f"scales must be positive (a scalar or one per covariate); got {scales}.")
    if N <= 0:
        raise ValueError(f"N must be a positive integer; got {N}.")
    rng = np.random.default_rng(seed)
    d = scales.shape[0]
    if tail == "half_cauchy":
        X = scales * np.abs(rng.standard_cauchy((N, d)))
    else:
        X = scales * rng.standard_normal((N, d))
    if labels == "all_positive":
        y = np.ones(N)
    else:
        w_true = rng.standard_normal(d) / scales
        y = (rng.uniform(size=N) < 1.0 / (1.0 + np.exp(-(X @ w_true)))).astype(np.float64)
    return (jnp.asarray(X), jnp.asarray(y)), {}


def hand_written_terms(X, y, prior_scale: float = 1.0):
    """The model's potential in plain JAX: ``(w, idx) -> (−log prior, per-datum −log lik)``."""

    def terms(w, idx):
        logits = X[idx] @ w
        per_datum = jnp.logaddexp(0.0, logits) - y[idx] * logits
        prior = 0.5 * jnp.sum(w**2) / prior_scale**2 + 0.5 * w.shape[0] * jnp.log(
            2 * jnp.pi * prior_scale**2
        )
        return prior, per_datum

    return terms


def log_posterior_1d(w_grid: np.ndarray, X, y, prior_scale: float = 1.0) -> np.ndarray:
    """Unnormalised log posterior of a one-covariate model on a grid of w values."""
    x = np.asarray(X, dtype=np.float64)[:, 0]
    labels = np.asarray(y, dtype=np.float64)
    logits = np.outer(np.asarray(w_grid, dtype=np.float64), x)
    log_lik = (labels * logits - np.logaddexp(0.0, logits)).sum(axis=1)
    return log_lik - 0.5 * (np.asarray(w_grid) / prior_scale) ** 2


def reference(
    model_args: tuple, model_kwargs: dict | None = None, num_points: int = 200_001
) -> dict[str, dict[str, np.ndarray]]:
    """Posterior mean and sd of w by quadrature (d = 1 only), ``{"w": {"mean", "sd"}}``.

    The grid covers the prior ± 12 prior sds around the posterior mode region; the
    posterior is log-concave, so its mass lies well inside.
    """
    X, y = model_args
    prior_scale = (model_kwargs or {}).get("prior_scale", 1.0)
    if np.shape(X)[1] != 1:
        raise ValueError("reference() integrates one covariate only; use NUTS for d > 1.")
    grid = np.linspace(-12 * prior_scale, 12 * prior_scale, num_points)
    log_post = log_posterior_1d(grid, X, y, prior_scale)
    weights = np.exp(log_post - log_post.max())
    weights /= weights.sum()
    mean = float(weights @ grid)
    sd = float(np.sqrt(weights @ (grid - mean) ** 2))
    return {"w": {"mean": np.array([mean]), "sd": np.array([sd])}}


__all__ = [
    "LABELS",
    "TAILS",
    "hand_written_terms",
    "load_data",
    "log_posterior_1d",
    "model",
    "reference",
]
