"""A one-hidden-layer Bayesian neural network on sklearn's bundled digits (Goan et al. §5).

8×8 grey-level images (pixel values / 16, so in [0, 1]), 10 classes, 1797 images split
into train and test sets.  Every weight and bias has a standard normal prior, as in the
paper's BNN experiments:

    W1 ~ N(0, 1)^{64×H}, b1 ~ N(0, 1)^H, W2 ~ N(0, 1)^{H×10}, b2 ~ N(0, 1)^10,
    y_i ~ Categorical(softmax(tanh(x_i W1 + b1) W2 + b2)),  inside the data plate.

Predictive helpers: :func:`predict_proba` (Monte Carlo predictive, eq. 14), :func:`metrics`
(accuracy, NLL, expected calibration error) and :func:`pc1_ess` (ESS of the samples' first
principal component, the paper's mixing summary).
"""

from __future__ import annotations

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

NUM_CLASSES = 10
SITES = ("w1", "b1", "w2", "b2")


def model(X, y=None, hidden: int = 16, prior_scale: float = 1.0, subsample_size: int | None = None):
    """The BNN: standard normal priors (``prior_scale``), tanh hidden layer of width ``hidden``."""
    num_inputs = X.shape[1]
    normal = dist.Normal(0.0, prior_scale)
    w1 = numpyro.sample("w1", normal.expand([num_inputs, hidden]).to_event(2))
    b1 = numpyro.sample("b1", normal.expand([hidden]).to_event(1))
    w2 = numpyro.sample("w2", normal.expand([hidden, NUM_CLASSES]).to_event(2))
    b2 = numpyro.sample("b2", normal.expand([NUM_CLASSES]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        logits = jnp.tanh(X[idx] @ w1 + b1) @ w2 + b2
        numpyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx])


def load_data(
    split: str = "train",
    hidden: int = 16,
    test_fraction: float = 0.25,
    seed: int = 0,
    max_train: int | None = None,
) -> tuple[tuple, dict]:
    """Return ``((X, y), {"hidden": hidden})`` for the ``"train"`` or ``"test"`` split.

    The split is a fixed random permutation (``seed``) of sklearn's 1797 digits;
    ``max_train`` keeps only the first training images (for quick runs).

    Examples
    --------
    >>> (X, y), kwargs = load_data("train")
    >>> X.shape, int(y.max()), kwargs
    ((1348, 64), 9, {'hidden': 16})
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:  # scikit-learn is an optional extra
        raise ImportError(
            'models/bnn.py needs scikit-learn: pip install "pplsamplers[datasets]"'
        ) from error

    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}.")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1); got {test_fraction}.")
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    num_test = int(round(test_fraction * len(order)))
    chosen = order[num_test:] if split == "train" else order[:num_test]
    if split == "train" and max_train is not None:
        chosen = chosen[:max_train]
    X = digits.data[chosen] / 16.0
    y = digits.target[chosen]
    return (jnp.asarray(X), jnp.asarray(y, dtype=jnp.int32)), {"hidden": hidden}


def predict_proba(samples: dict, X) -> jax.Array:
    """Class probabilities for every draw: shape (draws, len(X), 10).

    ``samples`` holds the sites w1, b1, w2, b2 with a leading draw axis (e.g.
    ``mcmc.get_samples()``).
    """
    X = jnp.asarray(X)

    def one(w1, b1, w2, b2):
        return jax.nn.softmax(jnp.tanh(X @ w1 + b1) @ w2 + b2, axis=-1)

    return jax.lax.map(
        lambda s: one(*s), tuple(jnp.asarray(samples[k]) for k in SITES), batch_size=64
    )


def expected_calibration_error(probs, y, num_bins: int = 15) -> float:
    """ECE (Guo et al. 2017): Σ_bins (|bin|/M) |accuracy − confidence| of the top class."""
    probs, y = np.asarray(probs), np.asarray(y)
    confidence = probs.max(-1)
    correct = probs.argmax(-1) == y
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, num_bins - 1)
    total = 0.0
    for b in range(num_bins):
        mask = which == b
        if mask.any():
            total += mask.mean() * abs(correct[mask].mean() - confidence[mask].mean())
    return float(total)


def metrics(draw_probs, y) -> dict[str, float]:
    """Accuracy, mean NLL and ECE of the posterior predictive mean (eq. 14).

    ``draw_probs`` is (draws, M, 10) from :func:`predict_proba`.
    """
    mean = np.asarray(jnp.mean(jnp.asarray(draw_probs), axis=0))
    y = np.asarray(y)
    picked = np.clip(mean[np.arange(len(y)), y], 1e-12, 1.0)
    return {
        "accuracy": float(np.mean(mean.argmax(-1) == y)),
        "nll": float(-np.mean(np.log(picked))),
        "ece": float(expected_calibration_error(mean, y)),
    }


def flatten(samples: dict, group_by_chain: bool = False) -> np.ndarray:
    """The sites as one flat parameter vector per draw: (draws, D) or (chains, draws, D)."""
    lead = 2 if group_by_chain else 1
    parts = [np.asarray(samples[k]).reshape(*np.shape(samples[k])[:lead], -1) for k in SITES]
    return np.concatenate(parts, axis=-1)


def pc1_ess(samples: dict, group_by_chain: bool = False) -> float:
    """ESS of the projection of the draws on their first principal component (paper §5).

    The principal axis is computed from all draws pooled; ArviZ's bulk ESS of the projection
    (chains kept apart when ``group_by_chain``).
    """
    flat = flatten(samples, group_by_chain)
    if not group_by_chain:
        flat = flat[None]
    pooled = flat.reshape(-1, flat.shape[-1])
    centred = pooled - pooled.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    projection = (flat - pooled.mean(0)) @ vt[0]
    return float(az.ess(projection))


__all__ = [
    "expected_calibration_error",
    "flatten",
    "load_data",
    "metrics",
    "model",
    "pc1_ess",
    "predict_proba",
]
