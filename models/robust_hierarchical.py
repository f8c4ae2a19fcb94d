"""A non-centred random-intercept model with groups of very unequal sizes (issue 14, item 6c).

    μ ~ N(0, 100²),  β ~ N(0, 100²),  τ ~ HalfNormal(1),  σ ~ HalfNormal(5),
    z_g ~ N(0, 1)  (g = 1..G),
    y_i ~ N(μ + β a_i + τ z_{g(i)}, σ²),     a_i ~ N(40, 10²)  (a raw covariate).

The G = 300 group sizes follow a lognormal law (a few groups hold thousands of rows, a dozen
hold 1–3 rows), N ≈ 10⁴ in all.  The non-centred form suits the small groups and makes the
large ones strongly coupled to τ, as in real random-intercept fits.  D = G + 4 latents.
The reference is a stored NumPyro NUTS run (``tests/data/robust_hierarchical_nuts.json``).

Examples
--------
>>> args, kwargs = load_data()
>>> a, group, y = args
>>> int(a.shape[0]) > 9000, kwargs["num_groups"]
(True, 300)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

MU_TRUE, BETA_TRUE, TAU_TRUE, SIGMA_TRUE = 5.0, 0.3, 0.7, 2.0


def model(a, group, y=None, num_groups: int = 300, subsample_size: int | None = None):
    """Non-centred random intercepts ``τ z_g``; the data plate runs over the N rows."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 100.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 100.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([num_groups]).to_event(1))
    with numpyro.plate("data", a.shape[0], subsample_size=subsample_size) as idx:
        loc = mu + beta * a[idx] + tau * z[group[idx]]
        numpyro.sample("y", dist.Normal(loc, sigma), obs=None if y is None else y[idx])


def group_sizes(num_groups: int = 300, total: int = 10_000, seed: int = 2) -> np.ndarray:
    """Lognormal group sizes summing to about ``total``; groups 0..11 hold 1, 2 or 3 rows."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=0.0, sigma=1.6, size=num_groups)
    sizes = np.maximum(1, np.round(raw / raw.sum() * total)).astype(int)
    sizes[:12] = np.tile([1, 2, 3], 4)
    return sizes


def load_data(num_groups: int = 300, total: int = 10_000, seed: int = 2) -> tuple[tuple, dict]:
    """Return ``((a, group, y), {"num_groups": G})``."""
    if num_groups < 13:
        raise ValueError(f"num_groups must be at least 13; got {num_groups}.")
    sizes = group_sizes(num_groups, total, seed)
    rng = np.random.default_rng(seed + 1)
    group = np.repeat(np.arange(num_groups), sizes)
    a = rng.normal(40.0, 10.0, size=group.size)
    z = rng.standard_normal(num_groups)
    y = MU_TRUE + BETA_TRUE * a + TAU_TRUE * z[group] + SIGMA_TRUE * rng.standard_normal(a.size)
    return (jnp.asarray(a), jnp.asarray(group), jnp.asarray(y)), {"num_groups": num_groups}
