"""A Gaussian mixture with a discrete assignment per datum, marked for enumeration.

K = 3 components with ordered means (the ordering removes label switching), on raw data
(component means 60, 75 and 90, sd 6, weights 0.2, 0.3, 0.5)::

    w ~ Dirichlet(1),  μ ~ N(70, 50²) ordered,  σ ~ HalfNormal(20),
    z_i ~ Categorical(w),  y_i ~ N(μ_{z_i}, σ²).

The model is decorated with ``config_enumerate`` and its data plate is plain (``obs=y``).

Examples
--------
>>> args, kwargs = load_data(N=1000)
>>> args[0].shape, kwargs
((1000,), {})
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.funsor import config_enumerate

MEANS, SD, WEIGHTS = (60.0, 75.0, 90.0), 6.0, (0.2, 0.3, 0.5)
TRUTH = {"w": jnp.asarray(WEIGHTS), "mu": jnp.asarray(MEANS), "sigma": jnp.asarray(SD)}
"""The simulated parameters (constrained), e.g. a reference run's starting point."""


@config_enumerate
def model(y=None, num_components: int = 3):
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(num_components)))
    base = dist.Normal(70.0, 50.0).expand([num_components]).to_event(1)
    mu = numpyro.sample(
        "mu", dist.TransformedDistribution(base, dist.transforms.OrderedTransform())
    )
    sigma = numpyro.sample("sigma", dist.HalfNormal(20.0))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Categorical(w))
        numpyro.sample("y", dist.Normal(mu[z], sigma), obs=y)


def load_data(N: int = 10_000, seed: int = 0, dtype=jnp.float32) -> tuple[tuple, dict]:
    """``((y,), {})``: ``N`` draws of the mixture."""
    rng = np.random.default_rng(seed)
    z = rng.choice(len(WEIGHTS), size=N, p=WEIGHTS)
    y = np.asarray(MEANS)[z] + SD * rng.normal(size=N)
    return (jnp.asarray(y, dtype),), {}
