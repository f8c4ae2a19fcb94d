"""Models with a discrete latent per datum, marked for enumeration as NumPyro users write them.

``mixture``: a Gaussian mixture of K = 3 components with ordered means (the ordering removes
label switching), on raw data (component means 60, 75 and 90, sd 6)::

    w ~ Dirichlet(1),  μ ~ N(70, 50²) ordered,  σ ~ HalfNormal(20),
    z_i ~ Categorical(w),  y_i ~ N(μ_{z_i}, σ²).

``zip``: a zero-inflated Poisson regression with raw covariates (an exposure-like covariate
around 50 with sd 10 and a 0/1 flag) and an explicit structural-zero indicator::

    α ~ N(0, 10²),  β_j ~ N(0, 10²),  logit π ~ N(0, 2²),
    zero_i ~ Bernoulli(π),  y_i = 0 if zero_i else y_i ~ Poisson(exp(α + x_iᵀ β)).

Both decorate the model with ``config_enumerate``; the data plate is plain (``obs=y``).

Examples
--------
>>> args, kwargs = load_data("mixture", N=1000)
>>> args[0].shape, kwargs
((1000,), {})
>>> args, _ = load_data("zip", N=1000)
>>> args[0].shape, round(float((args[1] == 0).mean()), 2) > 0.3
((1000, 2), True)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.funsor import config_enumerate

MEANS, SD, WEIGHTS = (60.0, 75.0, 90.0), 6.0, (0.2, 0.3, 0.5)
INTERCEPT, COEFFICIENTS, ZERO_PROB = -1.5, (0.04, 0.5), 0.3


@config_enumerate
def mixture(y=None, num_components: int = 3):
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(num_components)))
    base = dist.Normal(70.0, 50.0).expand([num_components]).to_event(1)
    mu = numpyro.sample(
        "mu", dist.TransformedDistribution(base, dist.transforms.OrderedTransform())
    )
    sigma = numpyro.sample("sigma", dist.HalfNormal(20.0))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Categorical(w))
        numpyro.sample("y", dist.Normal(mu[z], sigma), obs=y)


@config_enumerate
def zip_regression(X, y=None):
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[1]]).to_event(1))
    gate = numpyro.sample("gate_logit", dist.Normal(0.0, 2.0))
    with numpyro.plate("data", X.shape[0]):
        zero = numpyro.sample("zero", dist.Bernoulli(logits=gate))
        rate = jnp.exp(alpha + X @ beta)
        # a structural zero: y = 0 with probability one.  Written as Poisson(where(zero, 0,
        # rate)) the terms are right, but their second derivatives are 0 · ∞ = NaN at every
        # y > 0 (log 0 inside); the mask keeps every derivative finite
        numpyro.sample("y", dist.Poisson(rate).mask(zero == 0), obs=y)
        numpyro.factor("structural_zero", jnp.where((zero == 1) & (y > 0), -jnp.inf, 0.0))


MODELS = {"mixture": mixture, "zip": zip_regression}
SITES = {"mixture": ("w", "mu", "sigma"), "zip": ("alpha", "beta", "gate_logit")}
"""The continuous latent sites of each model, the ones its posterior is compared on."""


def load_data(family: str, N: int = 10_000, seed: int = 0, dtype=jnp.float32) -> tuple:
    """``(args, kwargs)`` of ``MODELS[family]``: simulated data of ``N`` rows."""
    rng = np.random.default_rng(seed)
    if family == "mixture":
        z = rng.choice(len(WEIGHTS), size=N, p=WEIGHTS)
        y = np.asarray(MEANS)[z] + SD * rng.normal(size=N)
        return (jnp.asarray(y, dtype),), {}
    if family == "zip":
        X = np.column_stack([rng.normal(50.0, 10.0, N), rng.integers(0, 2, N)])
        rate = np.exp(INTERCEPT + X @ np.asarray(COEFFICIENTS))
        y = np.where(rng.random(N) < ZERO_PROB, 0, rng.poisson(rate))
        return (jnp.asarray(X, dtype), jnp.asarray(y, dtype)), {}
    raise ValueError(f"family must be one of {sorted(MODELS)}, not {family!r}")
