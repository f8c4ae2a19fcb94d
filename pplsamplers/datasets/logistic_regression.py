"""Bayesian logistic regression: the synthetic data of Pakman et al. 2017 (§7.1), breast cancer.

Model: w ~ N(0, prior_scale² I_d), y_i ~ Bernoulli(sigmoid(x_i·w)), with a data plate that
pplsamplers subsamples.  This is the model of ``pplsamplers demo``.

Generator of Pakman et al. (2017), §7.1: covariates x_ij ~ N(0, 1) (covariate 0 of variance 6
for the ill-conditioned design), weights w_true ~ N(0, I); labels y_i ~
Bernoulli(sigmoid(x_i·w_true)).
No analytic posterior exists; the tests use a NumPyro NUTS reference (``tests/data/``).
The synthetic data need only NumPy; ``dataset="breast_cancer"`` needs scikit-learn, the
``datasets`` extra (``pip install "pplsamplers[datasets]"``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist


def model(X, y=None, prior_scale: float = 1.0, subsample_size: int | None = None):
    """Logistic regression with a normal(0, ``prior_scale``) prior on the weights."""
    d = X.shape[1]
    w = numpyro.sample("w", dist.Normal(0.0, prior_scale).expand([d]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=None if y is None else y[idx])


def _load_breast_cancer():
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as error:  # scikit-learn is an optional extra
        raise ImportError(
            "dataset='breast_cancer' needs scikit-learn: pip install \"pplsamplers[datasets]\" "
            "(or pip install scikit-learn); dataset='synthetic' needs nothing more."
        ) from error
    return load_breast_cancer()


def load_data(
    N: int = 1000,
    d: int = 20,
    seed: int = 0,
    ill_conditioned: bool = False,
    dataset: str = "synthetic",
) -> tuple[tuple, dict]:
    """Return ``(model_args, model_kwargs)`` for :func:`model`.

    ``dataset="synthetic"`` follows Pakman et al. (2017), §7.1: x_ij ~ N(0, 1) (covariate 0 has
    variance 6 when ``ill_conditioned``, the paper's pSBPS design), w_true ~ N(0, I_d),
    y_i ~ Bernoulli(sigmoid(x_i·w_true)).  ``dataset="breast_cancer"`` is scikit-learn's
    bundled data set (N = 569, d = 30 standardised covariates plus an intercept column).
    """
    if dataset == "breast_cancer":
        data = _load_breast_cancer()
        X = (data.data - data.data.mean(0)) / data.data.std(0)
        X = np.concatenate([np.ones((X.shape[0], 1)), X], axis=1)
        return (jnp.asarray(X), jnp.asarray(data.target, dtype=jnp.float32)), {}
    if dataset != "synthetic":
        raise ValueError(f"dataset must be 'synthetic' or 'breast_cancer'; got {dataset!r}.")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, d))
    if ill_conditioned:
        X[:, 0] *= np.sqrt(6.0)
    w_true = rng.standard_normal(d)
    p = 1.0 / (1.0 + np.exp(-(X @ w_true)))
    y = (rng.uniform(size=N) < p).astype(np.float32)
    return (jnp.asarray(X, dtype=jnp.float32), jnp.asarray(y)), {}


def true_weights(d: int = 20, seed: int = 0, N: int = 1000) -> np.ndarray:
    """The w_true used by :func:`load_data` (same ``seed``, same draws order)."""
    rng = np.random.default_rng(seed)
    rng.standard_normal((N, d))
    return rng.standard_normal(d)


def hand_written_terms(X: jax.Array, y: jax.Array, prior_scale: float = 1.0):
    """The same potential written by hand in JAX: ``(x, idx) -> (prior, per-datum NLL)``."""

    def terms(w, idx):
        logits = X[idx] @ w
        per_datum = jnp.logaddexp(0.0, logits) - y[idx] * logits
        prior = 0.5 * jnp.sum(w**2) / prior_scale**2 + 0.5 * w.shape[0] * jnp.log(
            2 * jnp.pi * prior_scale**2
        )
        return prior, per_datum

    return terms


__all__ = ["hand_written_terms", "load_data", "model", "true_weights"]
