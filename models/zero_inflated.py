"""A zero-inflated Poisson regression with an explicit structural-zero indicator per datum,
marked for enumeration, on raw covariates (one around 50 with sd 10, a 0/1 flag)::

    α ~ N(0, 10²),  β_j ~ N(0, 10²),  logit π ~ N(0, 2²),
    zero_i ~ Bernoulli(π),  y_i = 0 if zero_i, else y_i ~ Poisson(exp(α + x_iᵀ β)).

The structural zero is written as a masked Poisson plus a factor: ``Poisson(where(zero, 0,
rate))`` gives the same terms, but second derivatives 0 · ∞ = NaN at every y > 0.

Examples
--------
>>> (X, y), kwargs = load_data(N=1000)
>>> X.shape, bool((y == 0).mean() > 0.3)
((1000, 2), True)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.funsor import config_enumerate

INTERCEPT, COEFFICIENTS, ZERO_PROB = -1.5, (0.04, 0.5), 0.3
TRUTH = {
    "alpha": jnp.asarray(INTERCEPT),
    "beta": jnp.asarray(COEFFICIENTS),
    "gate_logit": jnp.asarray(np.log(ZERO_PROB / (1 - ZERO_PROB))),
}
"""The simulated parameters, e.g. a reference run's starting point."""


@config_enumerate
def model(X, y=None):
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[1]]).to_event(1))
    gate = numpyro.sample("gate_logit", dist.Normal(0.0, 2.0))
    with numpyro.plate("data", X.shape[0]):
        zero = numpyro.sample("zero", dist.Bernoulli(logits=gate))
        rate = jnp.exp(alpha + X @ beta)
        numpyro.sample("y", dist.Poisson(rate).mask(zero == 0), obs=y)
        numpyro.factor("structural_zero", jnp.where((zero == 1) & (y > 0), -jnp.inf, 0.0))


def load_data(N: int = 10_000, seed: int = 0, dtype=jnp.float32) -> tuple[tuple, dict]:
    """``((X, y), {})``: ``N`` rows of raw covariates and zero-inflated counts."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(50.0, 10.0, N), rng.integers(0, 2, N)])
    rate = np.exp(INTERCEPT + X @ np.asarray(COEFFICIENTS))
    y = np.where(rng.random(N) < ZERO_PROB, 0, rng.poisson(rate))
    return (jnp.asarray(X, dtype), jnp.asarray(y, dtype)), {}
