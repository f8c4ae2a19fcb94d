"""Generalised linear mixed models as users write them: many groups of very unequal size,
raw covariates, a group effect per group.

    α ~ N(0, 10²),  β_j ~ N(0, 10²),  τ ~ HalfNormal(1),
    z_g ~ N(0, 1)  (g = 1..G; a second effect z′_g with scale τ′ in the varying-slope model),
    η_i = α + x_iᵀ β + τ z_{g(i)} [+ τ′ z′_{g(i)} s_i],
    y_i ~ Bernoulli(logit⁻¹ η_i)   or   y_i ~ Poisson(e_i exp(η_i))  (e_i: an exposure).

The covariates are raw: an age (mean 45, sd 12), a log income (mean 10.5, sd 0.6) and a
binary flag; the varying slope is on the standardised age ``s_i``.  Group sizes are lognormal
with a heavy tail: the largest groups hold a few percent of the rows and the smallest 1–3
rows.  The group effects are non-centred (``z`` standard normal, scaled by ``τ``), as
NumPyro's examples write them; ``centred=True`` writes them centred (``u_g ~ N(0, τ²)``).

Examples
--------
>>> args, kwargs = load_data(N=2000, num_groups=50)
>>> X, group, y, exposure = args
>>> X.shape, int(group.max()) + 1, kwargs["family"], int(np.bincount(np.asarray(group)).min())
((2000, 3), 50, 'logistic', 1)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

FAMILIES = ("logistic", "poisson")
COEFFICIENTS = {"logistic": (-4.0, 0.03, 0.2, 0.5), "poisson": (-3.0, 0.02, 0.15, 0.3)}
"""(α, β_age, β_log_income, β_flag) of the simulated data, per family."""
TAU, TAU_SLOPE = 0.8, 0.3


def model(
    X,
    group,
    y=None,
    exposure=None,
    *,
    num_groups: int,
    family: str = "logistic",
    slope: bool = False,
    centred: bool = False,
):
    """A varying-intercept (and, with ``slope``, varying-slope) GLM; the data plate runs over
    the rows."""
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[1]]).to_event(1))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("groups", num_groups):
        if centred:
            effect = numpyro.sample("u", dist.Normal(0.0, tau))
        else:
            effect = tau * numpyro.sample("z", dist.Normal(0.0, 1.0))
    eta = alpha + X @ beta + effect[group]
    if slope:
        tau_slope = numpyro.sample("tau_slope", dist.HalfNormal(1.0))
        with numpyro.plate("groups", num_groups):
            slope_effect = tau_slope * numpyro.sample("z_slope", dist.Normal(0.0, 1.0))
        eta = eta + slope_effect[group] * (X[:, 0] - 45.0) / 12.0
    with numpyro.plate("data", X.shape[0]):
        if family == "logistic":
            numpyro.sample("y", dist.Bernoulli(logits=eta), obs=y)
        else:
            numpyro.sample("y", dist.Poisson(exposure * jnp.exp(eta)), obs=y)


def group_sizes(N: int, num_groups: int, rng: np.random.Generator) -> np.ndarray:
    """Lognormal group sizes summing to N; every group holds at least one row, and the first
    few hold 1, 2 or 3."""
    raw = rng.lognormal(0.0, 1.5, num_groups)
    sizes = np.maximum(1, np.floor(raw / raw.sum() * N)).astype(int)
    small = min(9, num_groups // 4)
    sizes[:small] = np.tile([1, 2, 3], 3)[:small]
    sizes[np.argmax(sizes)] += N - sizes.sum()
    return sizes


def load_data(
    N: int = 100_000,
    num_groups: int = 1000,
    family: str = "logistic",
    slope: bool = False,
    centred: bool = False,
    seed: int = 0,
    dtype=jnp.float32,
) -> tuple[tuple, dict]:
    """``((X, group, y, exposure), kwargs)`` with the rows in group order (as data come)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}; got {family!r}.")
    if N < 2 * num_groups:
        raise ValueError(f"N must be at least twice num_groups; got N={N}, G={num_groups}.")
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(num_groups), group_sizes(N, num_groups, rng))
    age = rng.normal(45.0, 12.0, N)
    X = np.stack([age, rng.normal(10.5, 0.6, N), rng.integers(0, 2, N)], 1)
    alpha, *beta = COEFFICIENTS[family]
    eta = alpha + X @ np.asarray(beta) + TAU * rng.standard_normal(num_groups)[group]
    if slope:
        eta += TAU_SLOPE * rng.standard_normal(num_groups)[group] * (age - 45.0) / 12.0
    exposure = rng.uniform(0.5, 2.0, N)
    if family == "logistic":
        y = (rng.uniform(size=N) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    else:
        y = rng.poisson(exposure * np.exp(eta)).astype(float)
    arrays = tuple(jnp.asarray(a, dtype) for a in (X, group, y, exposure))
    arrays = (arrays[0], jnp.asarray(group, jnp.int32), arrays[2], arrays[3])
    kwargs = {"num_groups": num_groups, "family": family, "slope": slope, "centred": centred}
    return arrays, kwargs
