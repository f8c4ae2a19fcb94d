"""The windowed refinement of each chain's preconditioner (``pplsamplers.warmup.metric``).

Deterministic invariants of the update (eq. 1 of the module), and one adapter run on a
posterior whose Laplace approximation is too narrow (a Student-t with 3 degrees of freedom:
Laplace sd √3/2 ≈ 0.87 against the true sd √3 ≈ 1.73), where warmup must widen the metric.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from pplsamplers import SGLD
from pplsamplers.estimator import Whitening
from pplsamplers.kernels.welford import WindowStats, effective_count
from pplsamplers.warmup import metric


def test_windows_are_numpyros_slow_windows():
    assert metric.window_ends(300) == (99, 149, 249)
    assert metric.window_start(300) == 75
    assert metric.window_ends(10) == ()  # too short for a slow window: the metric stays
    assert metric.window_ends(0) == ()


def _stats(draws: np.ndarray, dense: bool) -> WindowStats:
    shape = (draws.shape[1],) * (2 if dense else 1)
    empty = jnp.zeros(draws.shape[1])
    stats = WindowStats(jnp.zeros(()), empty, jnp.zeros(shape, draws.dtype), empty, empty)
    for z in draws:
        stats = metric.accumulate(stats, jnp.asarray(z))
    return stats


@pytest.mark.parametrize("dense", [True, False])
def test_refine_recovers_the_window_moments_and_keeps_x(dense):
    rng = np.random.default_rng(0)
    dim, count = 3, 4000
    shift = np.array([1.0, -2.0, 0.5])
    root = np.array([[2.0, 0.0, 0.0], [0.6, 0.5, 0.0], [0.0, 0.3, 3.0]])
    if not dense:
        root = np.diag(np.diag(root))
    draws = shift + rng.standard_normal((count, dim)) @ root.T
    old_factor = np.array([[1.0, 0.0, 0.0], [0.5, 2.0, 0.0], [0.1, 0.2, 0.5]])
    factor0 = jnp.asarray(old_factor if dense else np.diag(old_factor))
    old = Whitening(jnp.array([0.3, 0.2, 0.1]), factor0)
    new, map_shift, map_root, ok = metric.refine(old, _stats(draws, dense))
    assert bool(ok)
    # the window's mean moves the center (weighted by its effective count against the
    # regularisation's five draws); its covariance (λ = D / n shrinks little) the scale
    old_full = old_factor if dense else np.diag(np.diag(old_factor))
    effective = np.asarray(effective_count(_stats(draws, dense)))
    weight = effective / (effective + metric.REGULARIZATION)
    assert np.all(weight > 0.99)
    np.testing.assert_allclose(
        new.center, old.center + old_full @ (weight * draws.mean(0)), atol=1e-12
    )
    new_full = np.asarray(new.factor) if dense else np.diag(np.asarray(new.factor))
    target = old_full @ np.cov(draws.T) @ old_full.T
    if not dense:
        target = old_full @ np.diag(np.var(draws, 0, ddof=1)) @ old_full.T
    np.testing.assert_allclose(new_full @ new_full.T, target, rtol=0.03, atol=0.03)
    if dense:
        assert np.allclose(new_full, np.tril(new_full))  # stays triangular: traceable solves
    # a position keeps its x: c + L z = c' + L' z'
    z = jnp.array([0.7, -1.1, 2.0])
    z_new = metric.map_position(z, map_shift, map_root)
    x_old = old.center + (old_full @ np.asarray(z))
    x_new = new.center + (new_full @ np.asarray(z_new))
    np.testing.assert_allclose(x_new, x_old, atol=1e-10)


def test_autocorrelated_draws_count_for_less():
    rng = np.random.default_rng(1)
    independent = rng.standard_normal((2000, 2))
    ar = np.zeros((2000, 2))
    for t in range(1, 2000):  # AR(1) with ρ = 0.9: ESS fraction 0.1 / 1.9 ≈ 0.053
        ar[t] = 0.9 * ar[t - 1] + np.sqrt(1 - 0.81) * rng.standard_normal(2)
    n_iid = np.asarray(effective_count(_stats(independent, dense=False)))
    n_ar = np.asarray(effective_count(_stats(ar, dense=False)))
    assert n_iid.shape == n_ar.shape == (2,)  # one count per coordinate
    assert np.all((1800 < n_iid) & (n_iid <= 2000))
    assert np.all((0.035 * 2000 < n_ar) & (n_ar < 0.075 * 2000))


@pytest.mark.parametrize("dense", [True, False])
def test_a_stuck_coordinate_keeps_its_scale_while_the_others_adapt(dense):
    """A window in which one direction barely moved (a chain stuck on a hierarchical scale)
    says little about that direction's variance: its scale must stay near the current metric
    instead of collapsing onto the window's tiny spread, which would slow that direction
    further (the Boomerang's hierarchical cell at seed 4 read 0.66 sd on τ with one weight
    for all coordinates, 0.11 with one per coordinate).  The other coordinates adapt."""
    rng = np.random.default_rng(2)
    count, dim = 100, 4
    draws = 2.0 * rng.standard_normal((count, dim))
    stuck = np.zeros(count)
    for t in range(1, count):  # ρ = 0.99, spread about 0.1
        stuck[t] = 0.99 * stuck[t - 1] + 0.1 * np.sqrt(1 - 0.99**2) * rng.standard_normal()
    draws[:, 0] = stuck
    old = Whitening(jnp.zeros(dim), jnp.eye(dim) if dense else jnp.ones(dim))
    new, _, _, ok = metric.refine(old, _stats(draws, dense))
    assert bool(ok)
    factor = np.asarray(new.factor) if dense else np.diag(np.asarray(new.factor))
    sds = np.sqrt(np.diag(factor @ factor.T))
    assert sds[0] > 0.7, sds  # one weight for all coordinates gave 0.28
    assert np.all((1.6 < sds[1:]) & (sds[1:] < 2.4)), sds
    assert abs(float(new.center[0])) < 0.5 * abs(stuck.mean())  # its mean moves it less too


def test_few_draws_shrink_to_the_current_metric_and_nan_keeps_it():
    old = Whitening(jnp.zeros(4), jnp.eye(4))
    one_draw = _stats(np.ones((1, 4)), dense=True)
    new, _, _, ok = metric.refine(old, one_draw)  # fewer than two draws: no update
    assert not bool(ok) and np.array_equal(new.factor, old.factor)
    broken = _stats(np.array([[np.nan] * 4, [1.0] * 4, [2.0] * 4]), dense=True)
    new, shift, root, ok = metric.refine(old, broken)
    assert not bool(ok)
    assert np.array_equal(new.center, old.center) and np.array_equal(root, np.eye(4))
    # five draws of a constant: the covariance is 0, the regularised metric stays positive
    flat = _stats(np.ones((5, 4)), dense=True)
    new, _, _, ok = metric.refine(old, flat)
    assert bool(ok) and np.all(np.linalg.eigvalsh(np.asarray(new.factor @ new.factor.T)) > 0.3)


def _student_t(y):
    numpyro.sample("x", dist.StudentT(3.0, 0.0, 1.0))
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y[idx])  # no information on x


def test_warmup_widens_a_too_narrow_laplace_metric():
    kernel = SGLD(_student_t, control_variate=False, subsample_size=200)
    mcmc = MCMC(
        kernel,
        num_warmup=600,
        num_samples=10,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(3), y=jnp.zeros(200))
    laplace = float(kernel.setup.whitening.factor.reshape(-1)[0])
    refined = np.abs(np.asarray(mcmc.last_state.metric.factor).reshape(2, -1)[:, 0])
    assert abs(laplace - np.sqrt(3.0) / 2.0) < 0.05
    # the window variance of a heavy-tailed t₃ from autocorrelated draws is noisy: on average
    # over the chains the metric moves most of the way to √3, and each chain widens it
    assert np.mean(refined) > 1.3 * laplace and np.all(refined > 1.1 * laplace), refined
    assert "refined from each chain's draws" in kernel.setup.notes["precondition"]


def test_a_given_covariance_is_not_refined():
    kernel = SGLD(_student_t, control_variate=False, subsample_size=200, precondition=[4.0])
    mcmc = MCMC(kernel, num_warmup=300, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.key(4), y=jnp.zeros(200))
    assert mcmc.last_state.metric_stats is None
    np.testing.assert_allclose(np.asarray(mcmc.last_state.metric.factor), [2.0])


def _gaussian(y):
    x = numpyro.sample("x", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(x, 1.0), obs=y[idx])


def test_an_accurate_laplace_approximation_is_not_refined():
    """A Gaussian posterior: the Laplace check reads a log-weight sd near 0, so the chains keep
    the Laplace metric (refining it from a few effective warmup draws only added noise:
    ``metric.REFINE_ABOVE_MISFIT``); the heavy-tailed t₃ above is refined."""
    kernel = SGLD(_gaussian, control_variate=False, subsample_size=200)
    mcmc = MCMC(kernel, num_warmup=300, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.key(5), y=jnp.ones(200))
    assert mcmc.last_state.metric_stats is None
    assert "not refined from the chains' draws" in kernel.setup.notes["precondition"]
    # the whitening itself is the exact posterior scale 1/√(200 + 1/100)
    np.testing.assert_allclose(
        np.ravel(kernel.setup.whitening.factor)[0], 1 / np.sqrt(200.01), rtol=1e-4
    )
