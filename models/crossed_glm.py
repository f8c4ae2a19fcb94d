"""A logistic regression with two crossed groupings, as users write one: a subject effect and an
item effect per row, raw covariates.

    α ~ N(0, 10²),  β_j ~ N(0, 10²),  τ_s, τ_i ~ HalfNormal(1),
    z_s ~ N(0, 1) (S subjects),  z_i ~ N(0, 1) (I items),
    y_n ~ Bernoulli(logit⁻¹(α + x_nᵀ β + τ_s z_s[s(n)] + τ_i z_i[i(n)])).

Subjects have lognormal sizes (some with very few rows), items uniform ones.  Each row reads one
subject and one item, so the group effects do not form one set of groups: the set-up's arrowhead
path does not apply, and the Gaussian comes from the mode and, where the Laplace approximation
is poor, a variational fit.

Examples
--------
>>> (X, subject, item, y), kwargs = load_data(N=2000, num_subjects=30, num_items=12)
>>> X.shape, kwargs
((2000, 3), {'num_subjects': 30, 'num_items': 12})
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist


def model(X, subject, item, y=None, *, num_subjects: int, num_items: int):
    """The crossed varying-intercept logistic regression; the data plate runs over the rows."""
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[1]]).to_event(1))
    tau_s = numpyro.sample("tau_s", dist.HalfNormal(1.0))
    tau_i = numpyro.sample("tau_i", dist.HalfNormal(1.0))
    with numpyro.plate("subjects", num_subjects):
        z_s = numpyro.sample("z_s", dist.Normal(0.0, 1.0))
    with numpyro.plate("items", num_items):
        z_i = numpyro.sample("z_i", dist.Normal(0.0, 1.0))
    eta = alpha + X @ beta + tau_s * z_s[subject] + tau_i * z_i[item]
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=eta), obs=y)


def load_data(
    N: int = 20_000, num_subjects: int = 150, num_items: int = 60, seed: int = 0
) -> tuple[tuple, dict]:
    """``((X, subject, item, y), kwargs)`` simulated with τ_s = 0.8 and τ_i = 0.5."""
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, 1.2, num_subjects)
    subject = rng.choice(num_subjects, N, p=weights / weights.sum())
    item = rng.integers(0, num_items, N)
    X = np.stack([rng.normal(45, 12, N), rng.normal(10.5, 0.6, N), rng.integers(0, 2, N)], 1)
    eta = -4.0 + X @ np.array([0.03, 0.2, 0.5])
    eta += 0.8 * rng.normal(size=num_subjects)[subject] + 0.5 * rng.normal(size=num_items)[item]
    y = (rng.uniform(size=N) < 1.0 / (1.0 + np.exp(-eta))).astype(np.float32)
    arrays = (jnp.asarray(X, jnp.float32), jnp.asarray(subject), jnp.asarray(item), jnp.asarray(y))
    return arrays, {"num_subjects": num_subjects, "num_items": num_items}
