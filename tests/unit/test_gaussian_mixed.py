"""The exact reference of ``models/gaussian_mixed.py`` (the D = 5004 robustness model)."""

import numpy as np
from scipy.stats import multivariate_normal

from models import gaussian_mixed as gm


def test_conditional_posterior_matches_dense_linear_algebra():
    """Given τ, the arrowhead solve gives the dense Gaussian's mean, marginal variances and
    marginal likelihood p(y | τ) = N(y; 0, σ²I + A Λ₀⁻¹ Aᵀ)."""
    (X, group, y), kw = gm.load_data(N=24, num_groups=6, seed=1)
    X, group, y = np.asarray(X, float), np.asarray(group), np.asarray(y, float)
    tau, s2 = 0.7, gm.NOISE_SD**2
    A = np.column_stack([np.ones(len(y)), X, tau * np.eye(6)[group]])
    prior = np.diag([gm.PRIOR_SD**2] * 4 + [1.0] * 6)
    P = np.linalg.inv(prior) + A.T @ A / s2
    cov = np.linalg.inv(P)
    log_lik, mean, var = gm._conditional(tau, X, group, y, 6, gm.NOISE_SD)
    np.testing.assert_allclose(mean, cov @ A.T @ y / s2, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, np.diag(cov), rtol=1e-8)
    marginal = multivariate_normal(np.zeros(len(y)), s2 * np.eye(len(y)) + A @ prior @ A.T)
    np.testing.assert_allclose(log_lik, marginal.logpdf(y), rtol=1e-10)


def test_reference_integrates_tau_on_a_fine_enough_grid():
    """Halving the grid moves no moment by more than 10⁻⁴ posterior sd."""
    args, kw = gm.load_data(N=400, num_groups=100, seed=2)
    fine, coarse = gm.reference(*args, **kw), gm.reference(*args, **kw, grid=401)
    for site in fine:
        sd = fine[site]["sd"]
        assert np.all(np.abs(fine[site]["mean"] - coarse[site]["mean"]) / sd < 1e-4), site
        assert np.all(np.abs(coarse[site]["sd"] / sd - 1) < 1e-4), site


def test_reference_with_unknown_noise_matches_a_brute_force_grid():
    """With σ unknown the reference locates (τ, σ) and integrates them on a product grid; a
    plain 160 × 160 grid over a wide box gives the same moments."""
    (X, group, y), kw = gm.load_data(N=80, num_groups=16, seed=3)
    ref = gm.reference(X, group, y, **kw, noise_scale=2.0)
    X, group, y = np.asarray(X, float), np.asarray(group), np.asarray(y, float)
    taus, sigmas = np.linspace(1e-3, 3.0, 160), np.linspace(0.3, 2.5, 160)
    logp, means = [], []
    for t in taus:
        for s in sigmas:
            log_lik, mean, _ = gm._conditional(t, X, group, y, 16, s)
            logp.append(log_lik - 0.5 * t**2 - 0.5 * (s / 2.0) ** 2)
            means.append(mean)
    w = np.exp(np.array(logp) - max(logp))
    w /= w.sum()
    grid_t, grid_s = np.repeat(taus, 160), np.tile(sigmas, 160)
    for site, values in (("tau", grid_t), ("sigma", grid_s)):
        mean, sd = w @ values, np.sqrt(w @ values**2 - (w @ values) ** 2)
        assert abs(ref[site]["mean"] - mean) / sd < 2e-3, site
        assert abs(ref[site]["sd"] / sd - 1) < 5e-3, site
    z_mean = (w @ np.array(means))[4:]
    np.testing.assert_allclose(ref["z"]["mean"], z_mean, atol=2e-3 * ref["z"]["sd"].min())
