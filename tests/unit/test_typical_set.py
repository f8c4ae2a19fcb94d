"""The self-check's test of draws outside the typical set (``diagnostics.typical_set``): exact
draws of the heaviest-tailed usual posteriors pass, a few draws where the posterior has no
mass fail where they move the moments, and a minibatch estimate of U is judged with its
noise."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pplsamplers.diagnostics.checks import self_check
from pplsamplers.diagnostics.typical_set import outlying_bound, outlying_failure
from pplsamplers.estimator import build_potential, with_batch_size
from pplsamplers.infer.monitor import RunPlan, empty_monitor, keep_draw


def cauchy(dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """2 × 2000 exact draws of a D-dimensional multivariate Cauchy (Student-t, ν = 1), and U
    at them."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4000, dim)) / np.abs(rng.normal(size=(4000, 1)))
    u = (dim + 1) / 2 * np.log1p(np.sum(x**2, -1))
    return x.reshape(2, 2000, dim), u.reshape(2, 2000)


def gaussian(seed: int, dim: int = 10) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """2 × 1000 exact N(0, I) draws, U at them, and their names."""
    x = np.random.default_rng(seed).normal(size=(2, 1000, dim))
    return x, 0.5 * np.sum(x**2, -1), tuple(f"x[{j}]" for j in range(dim))


@pytest.mark.parametrize("dim", [1, 2, 10, 100, 300])
def test_exact_draws_of_a_multivariate_cauchy_pass_with_the_bound_not_loose(dim):
    """The bound is set by this tail (the module docstring): 20 exact runs pass, and the
    largest excess reaches at least a third of the bound, so it is not far too loose."""
    worst = 0.0
    for seed in range(20):
        x, u = cauchy(dim, seed)
        assert outlying_failure(u, None, x, ("x",) * dim) is None
        worst = max(worst, (u.max() - np.median(u, 1).min()) / outlying_bound(dim, u.size))
    assert 0.33 < worst < 1.0


def test_exact_draws_of_neals_funnel_pass():
    """Neal's funnel (v ~ N(0, 3), nine x_i ~ N(0, e^{v/2})): its scores are so heavy that the
    Stein check's MCSE reaches tens of sds on exact draws, but U stays typical."""
    rng = np.random.default_rng(3)
    for _ in range(10):
        v = 3.0 * rng.normal(size=(2, 2000))
        x = np.exp(v[..., None] / 2) * rng.normal(size=(2, 2000, 9))
        u = v**2 / 18 + 0.5 * np.sum(x**2, -1) * np.exp(-v) + 4.5 * v
        draws = np.concatenate([v[..., None], x], -1)
        assert outlying_failure(u, None, draws, ("v",) + ("x",) * 9) is None


def test_far_draws_fail_where_they_move_the_moments_and_pass_where_they_do_not():
    """Three draws 10⁴ nats out (a Langevin overshoot, as on stochastic volatility) move x[0]'s
    sd several-fold: the run fails, with the count, the excess and what they move.  One draw
    30 sds out among 2000 moves x[0]'s sd by about 20 %: at the tolerance's edge it passes
    at 25 sds and fails at 40."""
    x, _, names = gaussian(0)
    x[0, [10, 500, 900], 0] = [150.0, 140.0, 160.0]
    check, message, fix = outlying_failure(0.5 * np.sum(x**2, -1), None, x, names)
    assert (check, fix) == ("outlying", "outlying")
    assert message.startswith("3 of 2000 draws lie 1.28e+04 nats above the typical potential")
    assert "which alone move x[0]'s mean" in message
    for far, fails in [(25.0, False), (40.0, True)]:
        x, _, names = gaussian(1)
        x[0, 10, 3] = far
        failure = outlying_failure(0.5 * np.sum(x**2, -1), None, x, names)
        assert (failure is not None) == fails, (far, failure)


def test_far_draws_beyond_a_tenth_of_a_percent_fail_even_where_they_move_nothing():
    """Stochastic volatility's HAMCMC run: 5 of 500 draws 4·10⁶ nats out, in a run whose
    every draw is wide, so that they alone move no moment much.  Three far draws in 2000
    fail; one, which moves nothing, passes."""
    for rows, fails in [([3, 500, 700], True), ([3], False)]:
        x, _, names = gaussian(4)
        x[:, :, 0] *= 30.0  # a wide coordinate: a few more draws out there move nothing
        u = 0.5 * np.sum(x**2, -1) - 0.5 * x[..., 0] ** 2 * (1 - 1 / 900)
        u[0, rows] = 4e6
        failure = outlying_failure(u, None, x, names)
        assert (failure is not None) == fails, rows
        assert not fails or failure[1].endswith("more than 0.1% of the draws"), failure


def test_a_chain_wholly_in_a_bad_region_is_measured_from_the_good_one():
    x, _, names = gaussian(1)
    x[1] += 50.0
    message = outlying_failure(0.5 * np.sum(x**2, -1), None, x, names)[1]
    assert message.startswith("1000 of 2000 draws"), message


def test_a_minibatch_estimate_of_u_is_judged_with_its_noise():
    """Twenty draws 1800 nats high pass when each estimate's sd is 500 (a normal quantile of it
    is subtracted first) and fail when U is exact."""
    x, _, names = gaussian(2)
    x[0, :20, 0] = 60.0
    u = 0.5 * np.sum(x**2, -1)
    noise = np.zeros_like(u)
    noise[0, :20] = 500.0
    assert outlying_failure(u, noise, x, names) is None
    assert outlying_failure(u, None, x, names) is not None


def test_self_check_fails_on_draws_outside_the_typical_set():
    """U = Σ cosh(x_j), whose scores grow like e^|x|: three draws at 25–40 fail the check on
    their potential, both through ``values`` (the in-run check's) and through the full-data
    pass (where the Stein checks may or may not also see them; on stochastic volatility their
    terms swamped their own MCSE and only this check failed)."""

    def terms(x, idx):  # over N = 10 data
        return 0.0, 0.1 * jnp.sum(jnp.cosh(x)) * jnp.ones(idx.shape)

    potential = build_potential(terms, dim=3, N=10)
    rng = np.random.default_rng(4)
    proposal = rng.normal(size=(20_000, 3))  # exact draws by rejection from N(0, I)
    accept = rng.uniform(size=proposal.shape) < np.exp(1 + proposal**2 / 2 - np.cosh(proposal))
    draws = proposal[np.all(accept, -1)][:1000].reshape(2, 500, 3)
    assert self_check(draws, potential, thin_to=1000).passed
    for chain, step, far in [(0, 50, 40.0), (1, 150, 30.0), (0, 350, 25.0)]:
        draws[chain, step] = [far, -far, far]  # the largest's score dominates, as it does
    full = self_check(draws, potential, thin_to=1000)
    assert "outlying" in full.failures, full.warning
    values = np.sum(np.cosh(draws), -1)
    given = self_check(draws, None, names=["a", "b", "c"], values=values)
    assert given.failures == ("outlying",), given.warning
    assert "a smaller step" in given.warning


def test_the_in_run_monitor_keeps_u_and_its_minibatch_noise():
    """``keep_draw`` keeps U and its estimate's sd from the score's own minibatch: exact (sd 0)
    at the full batch, and the minibatch sd (N/√n)·sd(ℓ_i) below it."""

    def terms(x, idx):
        y = jnp.linspace(-1.0, 1.0, 100)[idx]
        return 0.5 * jnp.sum(x**2), 0.5 * (y - x[0]) ** 2

    potential = build_potential(terms, dim=2, N=100, n=100)
    plan = RunPlan(10, 10, 1, 1, 10, 100)
    x = jnp.array([0.3, -0.2])
    exact = keep_draw(
        empty_monitor(plan, 2, x.dtype), plan, potential.estimator, x, 3, jax.random.key(0)
    )
    u, _ = potential.estimator.full_value_and_grad(x)
    assert float(exact.values[3]) == pytest.approx(float(u), rel=1e-5)
    assert float(exact.noise[3]) == 0.0
    assert np.allclose(exact.scores[3], -potential.estimator.full_value_and_grad(x)[1], rtol=1e-5)
    small = with_batch_size(potential.estimator, 10)
    noisy = keep_draw(empty_monitor(plan, 2, x.dtype), plan, small, x, 3, jax.random.key(1))
    assert 0.0 < float(noisy.noise[3]) < 100.0
