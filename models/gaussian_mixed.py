"""A Gaussian varying-intercept model with thousands of groups and an exact posterior.

    α ~ N(0, 10²),  β_j ~ N(0, 10²),  τ ~ HalfNormal(1),  z_g ~ N(0, 1)  (g = 1..G),
    y_i ~ N(α + x_iᵀ β + τ z_{g(i)}, σ²)  with σ known,

on raw covariates (an age, a log income, a flag, as in :mod:`models.mixed_glm`) and
lognormal group sizes from 1 row to a few percent of N (:func:`models.mixed_glm.group_sizes`).
The group effects are non-centred, as NumPyro's examples write them, so the posterior has the
funnel-like coupling of τ and z that hierarchical models have; ``centred=True`` writes them
centred, u_g ~ N(0, τ²) (the same posterior), and records z = u / τ as a deterministic site.

Given τ, the latents θ = (α, β, z) are jointly Gaussian: with A(τ) = [1, X, τ·onehot(g)] the
posterior precision is P(τ) = Λ₀ + AᵀA/σ², an arrowhead (a diagonal z block and a 4-wide
border), and p(y | τ) is a Gaussian marginal likelihood.  :func:`reference` integrates τ
numerically on a fine grid, so every coordinate's posterior mean and sd are exact to
quadrature error, at any number of groups: a reference no sampler is needed for.

Examples
--------
>>> args, kwargs = load_data(N=2000, num_groups=200)
>>> ref = reference(*args, **kwargs)
>>> sorted(ref), ref["z"]["mean"].shape
(['alpha', 'beta', 'tau', 'z'], (200,))
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from models.mixed_glm import group_sizes

NOISE_SD = 1.0
TAU = 0.8
COEFFICIENTS = (1.0, 0.03, 0.2, 0.5)
"""(α, β_age, β_log_income, β_flag) of the simulated data."""
PRIOR_SD = 10.0


def model(X, group, y=None, *, num_groups: int, noise_sd: float = NOISE_SD, centred: bool = False):
    """The varying-intercept Gaussian model; the data plate runs over the rows."""
    alpha = numpyro.sample("alpha", dist.Normal(0.0, PRIOR_SD))
    beta = numpyro.sample("beta", dist.Normal(0.0, PRIOR_SD).expand([X.shape[1]]).to_event(1))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("groups", num_groups):
        if centred:
            u = numpyro.sample("u", dist.Normal(0.0, tau))
            numpyro.deterministic("z", u / tau)
        else:
            u = tau * numpyro.sample("z", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(alpha + X @ beta + u[group], noise_sd), obs=y)


def load_data(
    N: int = 20_000,
    num_groups: int = 5_000,
    seed: int = 0,
    dtype=jnp.float32,
    centred: bool = False,
    noise_sd: float = NOISE_SD,
) -> tuple[tuple, dict]:
    """Simulated data: ``((X, group, y), {"num_groups": G})``, rows in group order (and
    ``"centred": True``, ``"noise_sd"`` in the keywords where they are not the defaults)."""
    if N < 2 * num_groups:
        raise ValueError(f"N must be at least twice num_groups; got N={N}, G={num_groups}.")
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(num_groups), group_sizes(N, num_groups, rng))
    X = np.stack([rng.normal(45.0, 12.0, N), rng.normal(10.5, 0.6, N), rng.integers(0, 2, N)], 1)
    alpha, *beta = COEFFICIENTS
    effects = TAU * rng.normal(size=num_groups)
    mean = alpha + X @ np.asarray(beta) + effects[group]
    y = mean + noise_sd * rng.normal(size=N)
    args = (jnp.asarray(X, dtype), jnp.asarray(group, jnp.int32), jnp.asarray(y, dtype))
    kwargs = {"num_groups": num_groups, **({"centred": True} if centred else {})}
    return args, {**kwargs, **({} if noise_sd == NOISE_SD else {"noise_sd": noise_sd})}


def _conditional(
    tau: float, X, group, y, num_groups: int, noise_sd: float, prior_sd: float = PRIOR_SD
) -> tuple:
    """Given τ and σ: (log p(y | τ, σ), the mean of θ, the marginal variances of θ),
    θ = (α, β, z), with α, β ~ N(0, ``prior_sd``²)."""
    s2 = noise_sd**2
    B = np.column_stack([np.ones(len(y)), X])  # the border columns (α, β)
    k = B.shape[1]
    counts = np.bincount(group, minlength=num_groups).astype(float)
    A11 = np.eye(k) / prior_sd**2 + B.T @ B / s2
    A21 = np.zeros((num_groups, k))
    np.add.at(A21, group, B)
    A21 *= tau / s2
    D = 1.0 + tau**2 * counts / s2
    b1 = B.T @ y / s2
    b2 = tau * np.bincount(group, weights=y, minlength=num_groups) / s2
    S = A11 - A21.T @ (A21 / D[:, None])  # Schur complement of the z block
    S_inv = np.linalg.inv(S)
    m1 = S_inv @ (b1 - A21.T @ (b2 / D))
    m2 = (b2 - A21 @ m1) / D
    V = A21 / D[:, None]
    var2 = 1.0 / D + np.einsum("gi,ij,gj->g", V, S_inv, V)
    log_det_P = np.linalg.slogdet(S)[1] + np.sum(np.log(D))
    log_det_prior = -2 * k * np.log(prior_sd)
    quad = y @ y / s2 - (b1 @ m1 + b2 @ m2)
    log_lik = -0.5 * (len(y) * np.log(2 * np.pi * s2) + log_det_P - log_det_prior + quad)
    return log_lik, np.concatenate([m1, m2]), np.concatenate([np.diag(S_inv), var2])


def _locate(log_post, low: float, high: float, zooms: int = 4) -> tuple[float, float]:
    """(mean, sd) of the density exp(log_post) on (low, high), 200 points at a time, zooming
    in on it (a peak narrower than the first spacing is found at the second zoom)."""
    for _ in range(zooms):
        points = np.linspace(low, high, 200)
        values = np.array([log_post(t) for t in points])
        weights = np.exp(values - values.max())
        centre = np.sum(points * weights) / weights.sum()
        spread = np.sqrt(np.sum((points - centre) ** 2 * weights) / weights.sum())
        half = max(8.0 * spread, 3.0 * (points[1] - points[0]))
        low, high = max(low, centre - half), min(high, centre + half)
    return centre, spread


def reference(
    X,
    group,
    y,
    *,
    num_groups: int,
    noise_sd: float = NOISE_SD,
    grid: int = 801,
    prior_sd: float = PRIOR_SD,
    tau_scale: float = 1.0,
    noise_scale: float | None = None,
    centred: bool = False,
) -> dict:
    """The exact posterior ``{site: {"mean", "sd"}}``: θ given τ (and σ) in closed form, τ
    ~ HalfNormal(``tau_scale``) on a grid of ``grid`` points spanning ±8 sds of its marginal
    posterior.  With ``noise_scale``, σ ~ HalfNormal(``noise_scale``) is unknown too and
    (τ, σ) are integrated on a ``grid`` × ``grid`` product grid (a ``"sigma"`` entry is added);
    otherwise σ = ``noise_sd``.  ``centred`` writes the same posterior (z = u / τ)."""
    X, group, y = (np.asarray(a, dtype=float) for a in (X, group, y))
    group = group.astype(int)
    X = X.reshape(len(y), -1)
    prior = lambda tau, sigma: (
        -0.5 * (tau / tau_scale) ** 2
        - (0.0 if noise_scale is None else 0.5 * (sigma / noise_scale) ** 2)
    )

    def log_post(tau: float, sigma: float) -> float:
        return _conditional(tau, X, group, y, num_groups, sigma, prior_sd)[0] + prior(tau, sigma)

    size = grid if noise_scale is None else min(grid, 81)  # per axis of the product grid

    def around(centre: float, spread: float) -> np.ndarray:
        return np.linspace(max(1e-6, centre - 8 * spread), centre + 8 * spread, size)

    sigma_c, tau_c, sigmas = noise_sd, tau_scale, np.array([noise_sd])
    for _ in range(1 if noise_scale is None else 2):  # σ is pinned by the rows, τ by the groups
        if noise_scale is not None:
            sigmas = around(*_locate(lambda s, t=tau_c: log_post(t, s), 1e-3, 5.0 * np.std(y)))
            sigma_c = sigmas[size // 2]
        taus = around(*_locate(lambda t, s=sigma_c: log_post(t, s), 1e-3, 5.0 * tau_scale))
        tau_c = taus[size // 2]
    pairs = [(t, s) for t in taus for s in sigmas]
    parts = [_conditional(t, X, group, y, num_groups, s, prior_sd) for t, s in pairs]
    logp = np.array([p[0] + prior(t, s) for p, (t, s) in zip(parts, pairs, strict=True)])
    w = np.exp(logp - logp.max())
    w /= w.sum()
    means = np.array([p[1] for p in parts])
    second = np.array([p[2] + p[1] ** 2 for p in parts])
    mean = w @ means
    sd = np.sqrt(w @ second - mean**2)
    moments = lambda v: {
        "mean": np.asarray(w @ v),
        "sd": np.asarray(np.sqrt(w @ v**2 - (w @ v) ** 2)),
    }
    k = X.shape[1] + 1
    out = {
        "alpha": {"mean": mean[0], "sd": sd[0]},
        "beta": {"mean": mean[1:k], "sd": sd[1:k]},
        "tau": moments(np.array([t for t, _ in pairs])),
        "z": {"mean": mean[k:], "sd": sd[k:]},
    }
    if noise_scale is not None:
        out["sigma"] = moments(np.array([s for _, s in pairs]))
    return out
