"""End-of-run self-check (issue 14 item 5, issue 18 item 9): exact runs pass, wrong runs warn."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from pplsamplers.diagnostics.checks import (
    SelfCheckWarning,
    Thresholds,
    coordinate_names,
    self_check,
    warn,
)
from pplsamplers.diagnostics.stein_identities import scores_fn
from pplsamplers.estimator import build_potential
from pplsamplers.model import make_potential

D = 5
RNG = np.random.default_rng(0)
_A = RNG.normal(size=(D, D))
SIGMA = _A @ _A.T / D + 0.1 * np.eye(D)  # correlated Gaussian posterior
MU = 3.0 * RNG.normal(size=D)
SD = np.sqrt(np.diag(SIGMA))


def _gaussian_potential():
    precision, mu = jnp.asarray(np.linalg.inv(SIGMA)), jnp.asarray(MU)

    def terms(x, idx):  # U = ½ (x − μ)ᵀ Σ⁻¹ (x − μ), spread over N = 100 data
        return 0.0, 0.5 * (x - mu) @ precision @ (x - mu) / 100 * jnp.ones(idx.shape)

    return build_potential(terms, dim=D, N=100, n=10, init_position=jnp.zeros(D))


GAUSS = _gaussian_potential()
EXACT = MU + RNG.normal(size=(2, 2000, D)) @ np.linalg.cholesky(SIGMA).T  # independent draws


def test_exact_gaussian_passes_and_reads_realised_errors():
    result = self_check(EXACT, GAUSS)
    assert result.passed and result.warning == "" and result.failures == ()
    # N = 100: the default Stein budget (2·10⁷ datum evaluations) covers every draw
    assert result.stein_whitening == "dense" and result.stein.num_draws == 4000
    assert self_check(EXACT, GAUSS, thin_to=200).stein.num_draws == 200
    # the control-variate Stein estimate is (nearly) the run's own realised error
    realised = (EXACT.reshape(-1, D).mean(0) - MU) / SD
    np.testing.assert_allclose(result.stein.mean_err, realised, atol=0.01)
    np.testing.assert_allclose(result.stein.sd_ratio, EXACT.reshape(-1, D).std(0) / SD, atol=0.02)
    assert np.all(result.stein.mean_mcse < 0.01)
    attrs = result.to_attrs()
    assert attrs["self_check_passed"] == 1 and attrs["self_check_warning"] == ""
    assert all(isinstance(v, (int, float, str)) for v in attrs.values())
    lines = result.summary_lines()
    assert lines[0] == "self-check: passed" and "R-hat max" in lines[1]


@pytest.mark.parametrize(
    "label, shift, scale, expected",
    [
        ("shift", 0.25, 1.0, r"Stein mean error \+0\.2[4-6] sd on x\[3\]"),
        ("narrow", 0.0, 0.7, r"Stein sd ratio 0\.(69|70|71) on x\[\d\]"),
        ("wide", 0.0, 1.3, r"Stein sd ratio 1\.(29|30|31|32) on x\[\d\]"),
    ],
)
def test_wrong_gaussian_runs_fail_with_numbers(label, shift, scale, expected):
    draws = MU + scale * (EXACT - MU) + shift * SD * np.eye(D)[3]
    result = self_check(draws, GAUSS)
    assert not result.passed
    assert result.warning.startswith("pplsamplers self-check FAILED: ")
    assert re.search(expected, result.warning), result.warning
    assert "Try: " in result.warning and "AutoSampler" in result.warning
    assert "\n" not in result.warning
    with pytest.warns(SelfCheckWarning, match="self-check FAILED"):
        warn(result)
    # an AutoSampler run (check_run) names its choice instead of suggesting AutoSampler
    own = self_check(draws, GAUSS, alternatives=("another sampler than 'sbps'",))
    assert own.warning.endswith(" / another sampler than 'sbps'"), own.warning


def test_thresholds_catch_every_gaussian_run_outside_the_tolerance():
    """The defaults, and why: the project's tolerance is |Δmean|/sd ≤ 0.25, |sd ratio − 1| ≤ 0.3.

    tol_mean = tol_sd = 0.2 lie inside it, so every Gaussian run outside it is flagged (its
    MCSE is ~0), combinations of a shift with a smaller scale error included; runs well inside
    it (0.1 sd off, sd ratio 0.9 or 1.1) pass.  In these 5 coordinates the coherent-scale
    check flags every sd more than 10 % off at once (``tol_coherent_small``); from 10 on it
    flags every sd a few per cent off at once:
    :func:`test_coherent_scale_error_is_flagged_when_each_coordinate_passes`.
    """
    assert Thresholds() == Thresholds(1.05, 100.0, 0.2, 0.2, 3.0, 1e-12, 0.01, 1e3, 0.2, 0.21, 0.3)
    outside = [(0.26, 1.0), (0.5, 1.0), (0.0, 0.69), (0.0, 1.31), (0.26, 0.85), (0.26, 1.15)]
    inside = [(0.1, 1.0), (0.0, 0.9), (0.0, 1.1), (0.1, 1.1), (0.15, 0.9)]
    for j, (shift, scale) in enumerate(outside + inside):
        direction = np.eye(D)[j % D] * (-1) ** j
        draws = MU + scale * (EXACT - MU) + shift * SD * direction
        realised_mean = np.max(np.abs(draws.reshape(-1, D).mean(0) - MU) / SD)
        realised_sd = np.max(np.abs(draws.reshape(-1, D).std(0) / SD - 1))
        is_outside = realised_mean > 0.25 or realised_sd > 0.3
        assert is_outside == ((shift, scale) in outside)
        result = self_check(draws, GAUSS)
        assert result.passed == (not is_outside), (shift, scale, result.warning)


def _gaussian_of_dim(dim: int):
    def terms(x, idx):  # U = ½ |x|² over N = 100 data: N(0, I)
        return 0.0, 0.5 * jnp.sum(x**2) / 100 * jnp.ones(idx.shape)

    return build_potential(terms, dim=dim, N=100, n=10, init_position=jnp.zeros(dim))


@pytest.mark.parametrize("scale, flagged", [(1.1, True), (0.9, True), (1.05, True), (1.01, False)])
def test_coherent_scale_error_is_flagged_when_each_coordinate_passes(scale, flagged):
    """A step-size bias widens every sd a little at once (SGBD and cSGLD on the hierarchical
    model: z sds 5–6% wide on average, τ then 0.6–0.7 sd off; module docstring).  Each
    coordinate's sd ratio 1.1 passes its own check (tol_sd 0.2); their average scale error
    c² − 1 = 0.21 does not, and the warning says so with the numbers.  In 50 coordinates the
    average may reach tol_coherent_shift·√(2/50) = 0.04 (a scale parameter coupled to all 50
    moves by 0.2 sd), so every sd 5% wide (0.1025: 0.5 sd) is flagged and 1% (0.02) passes."""
    dim = 50
    draws = scale * np.random.default_rng(5).normal(size=(2, 1000, dim))
    result = self_check(draws, _gaussian_of_dim(dim))
    realised = draws.reshape(-1, dim).std(0)  # each coordinate's sd ratio, c ± 0.05
    assert "stein_sd" not in result.failures and "stein_mean" not in result.failures
    assert result.stein.coherent_scale_err == pytest.approx(np.mean(realised**2) - 1, abs=0.05)
    assert ("stein_coherent_scale" in result.failures) == flagged, result.warning
    if flagged:
        sign = "+" if scale > 1 else "-"
        assert re.search(
            rf"Stein scale error averages \{sign}0\.[12]\d over 50 coordinates", result.warning
        ), result.warning
        assert "a smaller step" in result.warning
    attrs = result.to_attrs()
    assert attrs["self_check_stein_coherent_scale_err"] == result.stein.coherent_scale_err


def _logistic():
    rng = np.random.default_rng(1)
    X = jnp.asarray(rng.normal(size=(60, 2)))
    p = 1 / (1 + np.exp(-(np.asarray(X) @ np.array([1.5, -1.0]) + 0.5)))
    y = jnp.asarray((rng.uniform(size=60) < p).astype(float))

    def model(X, y):
        b = numpyro.sample("b", dist.Normal(0, 3))
        w = numpyro.sample("w", dist.Normal(0, 3).expand([2]).to_event(1))
        with numpyro.plate("data", X.shape[0]) as idx:
            numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w + b), obs=y[idx])

    return make_potential(model, (X, y))


def _metropolis(potential, chains=4, steps=10_000, thin=4):
    """A long, exact random-walk Metropolis run (Laplace-scaled proposal), ``lax.scan``-ed."""
    everything = jnp.arange(potential.N)
    u = lambda x: potential.estimator.value(x, everything)
    newton = lambda _, m: m - jnp.linalg.solve(jax.hessian(u)(m), jax.grad(u)(m))
    mode = jax.jit(lambda m: jax.lax.fori_loop(0, 15, newton, m))(jnp.zeros(potential.dim))
    chol = jnp.linalg.cholesky(jnp.linalg.inv(jax.jit(jax.hessian(u))(mode))) * 2.38 / np.sqrt(3)

    def step(state, key):
        x, ux = state
        k1, k2 = jax.random.split(key)
        y = x + chol @ jax.random.normal(k1, x.shape)
        uy = u(y)
        accept = jnp.log(jax.random.uniform(k2)) < ux - uy
        x, ux = jnp.where(accept, y, x), jnp.where(accept, uy, ux)
        return (x, ux), x

    def chain(key):
        k0, k1 = jax.random.split(key)
        x0 = mode + chol @ jax.random.normal(k0, mode.shape)
        _, xs = jax.lax.scan(step, (x0, u(x0)), jax.random.split(k1, steps))
        return xs[steps // 5 :: thin]

    return np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(3), chains)))


def test_logistic_regression_exact_run_passes_and_wrong_runs_fail():
    potential = _logistic()
    assert coordinate_names(potential) == ["b", "w[0]", "w[1]"]
    draws = _metropolis(potential)
    flat = draws.reshape(-1, 3)
    mean, sd = flat.mean(0), flat.std(0)
    exact = self_check(draws, potential)
    assert exact.passed, exact.warning
    assert np.all(np.abs(exact.stein.mean_err) < 0.1) and np.all(
        np.abs(exact.stein.sd_ratio - 1) < 0.1
    )
    for shift, scale, check in [
        (0.25, 1.0, "stein_mean"),
        (0.0, 0.7, "stein_sd"),
        (0.0, 1.3, "stein_sd"),
    ]:
        wrong = mean + scale * (draws - mean) + shift * sd * np.array([0.0, 0.0, 1.0])
        result = self_check(wrong, potential)
        assert check in result.failures, (shift, scale, result.warning)


def test_frozen_chain_is_flagged():
    draws = EXACT.copy()
    draws[1] = draws[1, 0]  # every step of chain 1 reverted
    result = self_check(draws, GAUSS)
    assert result.frozen_chains == (1,) and "frozen" in result.failures
    assert "chain 1 frozen" in result.warning and "a smaller step" in result.warning


def test_diverged_and_nonfinite_chains_are_flagged():
    draws = np.concatenate([EXACT, EXACT[:1]])
    draws[1] = MU + (EXACT[1] - MU) * np.logspace(0, 40, 2000)[:, None]  # runs off
    draws[2, 1500:] = np.nan
    result = self_check(draws, GAUSS)
    assert result.diverged_chains == (1, 2) and result.nonfinite_draws == 500
    assert "chains 1, 2 diverged" in result.warning and "500 non-finite draws" in result.warning
    assert result.stein.num_draws > 0  # the Stein check still runs on the healthy chain


def test_rhat_flags_disagreeing_chains_and_one_drifting_chain():
    apart = EXACT.copy()
    apart[1] += 1.0 * SD
    result = self_check(apart, GAUSS)
    assert "rhat" in result.failures and "R-hat" in result.warning
    drift = EXACT[:1] + np.linspace(-1, 1, 2000)[None, :, None] * SD  # one chain: split R-hat
    assert "rhat" in self_check(drift, GAUSS).failures
    assert self_check(EXACT[:1], GAUSS).passed


def test_step_counts_and_nonfinite_potential_are_reported():
    result = self_check(EXACT, GAUSS, counts={"reverted": np.array([0, 3]), "rejected": [12, 0]})
    assert result.counts == {"reverted": 3, "rejected": 12}
    # 12 of 4000 draws fails; 3 (below MAX_REJECTED_FRACTION, 0.1 %) is reported, not failed
    assert "12 steps rejected" in result.warning and "reverted" not in result.warning
    assert result.to_attrs()["self_check_steps_rejected"] == 12
    assert self_check(EXACT, GAUSS, counts={"rejected": [1, 0]}).passed

    def terms(x, idx):  # zero density beyond x[0] > 1
        return jnp.where(x[0] > 1.0, jnp.inf, 0.5 * x @ x), jnp.zeros(idx.shape)

    potential = build_potential(terms, dim=2, N=4, n=4, init_position=jnp.zeros(2))
    draws = RNG.normal(size=(2, 500, 2))
    bad = self_check(draws, potential)
    assert "nonfinite" in bad.failures and "non-finite potential at" in bad.warning
    assert bad.stein_whitening.startswith("skipped")


def test_passed_check_does_not_warn_and_jit_is_cached():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn(self_check(EXACT, GAUSS))
    # compiled once per potential: a second scores_fn of it hits the first one's program
    first, second = scores_fn(GAUSS), scores_fn(GAUSS)
    xs = jnp.asarray(EXACT[0, :8])
    first(xs)
    compiled = first.func._cache_size()
    second(xs)
    assert second.func is first.func and second.func._cache_size() == compiled
    with pytest.raises(ValueError, match="draws must have shape"):
        self_check(EXACT[..., :2], GAUSS)


def test_dense_whitening_sharpens_the_check_on_a_correlated_posterior():
    """Why S is the draws' dense covariance: with a diagonal S the Stein terms of a correlated
    posterior keep their cross-coordinate noise (MCSE ~0.1 sd); dense S removes it (~0)."""
    # 200 checked draws (the default at large N; at N = 100 every draw is checked)
    dense = self_check(EXACT, GAUSS, thin_to=200, rng_key=jax.random.key(1))
    diag = self_check(EXACT, GAUSS, thin_to=200, whiten="diag", rng_key=jax.random.key(1))
    assert dense.passed and diag.passed and diag.stein_whitening == "diag"
    assert np.max(dense.stein.mean_mcse) < 0.01 < 0.05 < np.max(diag.stein.mean_mcse)
    shifted = self_check(EXACT + 0.25 * SD * np.eye(D)[1], GAUSS, thin_to=200, whiten="diag")
    assert "stein_mean" in shifted.failures  # still caught (diag over-reads correlated shifts)


def test_the_setups_gaussian_gives_the_diagonal_check_the_posteriors_correlations():
    """Where S cannot be the draws' dense covariance (D > 1000, or fewer than 2D draws), the
    set-up's Gaussian x = c + L z shapes the mean term, S = L diag(v) Lᵀ: a shift along the
    correlated posterior then reads as its size in sds, with a smaller Monte Carlo error than
    a diagonal S gives, and exact draws still pass."""
    from pplsamplers.estimator import Whitening

    metric = Whitening(jnp.asarray(MU), jnp.linalg.cholesky(jnp.asarray(SIGMA)))
    shift = 0.5 * np.linalg.cholesky(SIGMA)[:, 0]  # 0.5 sd of x[0], along the correlations
    reads = {}
    for name, given in (("diag", None), ("structured", metric)):
        exact = self_check(EXACT, GAUSS, thin_to=200, whiten="diag", metric=given)
        assert exact.passed and exact.stein_whitening == name
        moved = self_check(EXACT + shift, GAUSS, thin_to=200, whiten="diag", metric=given)
        reads[name] = (moved.stein.mean_err, moved.stein.mean_mcse, exact.stein.mean_mcse)
    expected = shift / SD
    mean, _, mcse = reads["structured"]
    assert np.max(np.abs(mean - expected)) < 0.1
    assert np.max(mcse) < np.max(reads["diag"][2])
    assert np.max(np.abs(reads["diag"][0] - expected)) > 0.3  # diagonal S: the wrong scale


def _funnel(dim: int):
    def terms(x, idx):  # v ~ N(0, 1), x_i | v ~ N(0, e^v): a funnel, heavy-tailed in x
        v, rest = x[0], x[1:]
        u = 0.5 * v**2 + 0.5 * jnp.sum(rest**2) * jnp.exp(-v) + 0.5 * (dim - 1) * v
        return 0.0, u / 100 * jnp.ones(idx.shape)

    return build_potential(terms, dim=dim, N=100, n=10, init_position=jnp.zeros(dim))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_funnel_draws_pass_with_many_coordinates_per_draw(seed):
    """Exact draws of a 121-d funnel, 2 × 200 of them, must pass.  When each draw was whitened
    with a covariance S that contained the draw itself, its own share c cᵀ/N biased the scale
    term by (D + 2)/N (a Stein identity: E[c_j² c·s] = −(D + 2) S_jj), here +0.31, and the
    averaged scale error failed (+0.27 to +0.37 on every seed; NUTS and Boomerang on the
    304-d hierarchical model read +0.5 at 2 × 500 draws).  S now leaves out a window of
    correlated draws around each checked draw."""
    dim = 121
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(2, 200, 1))
    draws = np.concatenate([v, np.exp(v / 2) * rng.normal(size=(2, 200, dim - 1))], -1)
    result = self_check(draws, _funnel(dim))
    assert result.stein_whitening == "dense"
    assert result.passed, result.warning
    assert abs(result.stein.coherent_scale_err) < 0.1


def test_scale_error_is_unbiased_when_draws_are_few_per_coordinate():
    """Independent N(0, I) draws, D = 304 and 2 × 500 draws: the averaged scale error reads
    0 within its MCSE (it read (D + 2)/N = 0.306 before the leave-window-out covariance)."""
    dim = 304
    draws = np.random.default_rng(7).normal(size=(2, 500, dim))
    result = self_check(draws, _gaussian_of_dim(dim))
    assert abs(result.stein.coherent_scale_err) < 0.02 + 3 * result.stein.coherent_scale_mcse
    assert np.max(np.abs(result.stein.sd_ratio - 1)) < 0.15


@pytest.mark.parametrize("step_size, wrong", [(1.6, True), (None, False)])
def test_a_run_checks_itself_inside_mcmc_run(step_size, wrong):
    """NumPyro's own workflow (``MCMC.run`` then ``get_samples``, no ``check_run``) warns as
    the run ends when it is wrong: SGLD at a fixed step of 1.6 whitened units inflates the
    variance of a Gaussian posterior by 1 / (1 − h/4) = 1.67; at its automatic step it is
    right and stays quiet."""
    from numpyro.infer import MCMC

    from models import linear_gaussian
    from pplsamplers import SGLD

    args, kwargs = linear_gaussian.load_data(N=500, D=2)
    options = {} if step_size is None else {"step_size": step_size, "steps_per_sample": 1}
    kernel = SGLD(linear_gaussian.model, **options)
    mcmc = MCMC(
        kernel,
        num_warmup=200,
        num_samples=1000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        mcmc.run(jax.random.key(3), *args, **kwargs)
    warned = [str(r.message) for r in records if issubclass(r.category, SelfCheckWarning)]
    assert kernel.self_check_result.passed is not wrong, kernel.self_check_result.warning
    assert bool(warned) is wrong, warned
    if wrong:
        assert "self-check FAILED" in warned[0] and "\n" not in warned[0]


def test_check_run_budgets_a_plateless_model_by_its_rows():
    """Without a data plate the whole likelihood is one "datum" (N = 1) and every draw would
    get a full pass; the Stein check's draws are budgeted by the arguments' rows instead."""
    from numpyro.infer import MCMC

    from pplsamplers import SGLD, check_run
    from pplsamplers.diagnostics.checks import default_thin_to

    rows = 100_000
    y = jnp.asarray(np.random.default_rng(0).normal(1.0, 2.0, rows))

    def plateless(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        numpyro.sample("y", dist.Normal(mu, 2.0), obs=y)

    mcmc = MCMC(SGLD(plateless), num_warmup=100, num_samples=1000, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SelfCheckWarning)
        mcmc.run(jax.random.key(0), y)
        result = check_run(mcmc, warn_user=False)
    assert mcmc.sampler.setup.potential.N == 1
    assert result.stein.num_draws == default_thin_to(rows) < 1000


def test_a_coordinate_that_never_moved_fails_although_r_hat_and_ess_skip_it():
    """NUTS started at Neal's funnel's joint mode (v = −40.5) adapts its step to the neck and
    v never moves: R-hat and ESS are undefined on a constant and pass it over, and the chains
    are not frozen (the other coordinates move).  An unconstrained coordinate that never moved
    fails; a constant constrained site (a one-category simplex) does not."""
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(2, 500, 3))
    draws[:, :, 1] = -40.5
    names = ["x[0]", "v", "x[1]"]
    result = self_check(draws, None, names=names)
    assert "stuck" in result.failures and "v never moved in chains 0, 1" in result.warning
    assert not result.frozen_chains
    assert self_check(draws, None, names=names, constrained=True).passed


def test_counts_are_a_fraction_of_the_draws_they_were_counted_over():
    """A run keeps 200 of its 500 draws per chain for the check but counts its rejected steps
    (or NUTS's divergences) over all 500: one in 1000 is within the allowed fraction (10⁻³),
    two are not."""
    kept = EXACT[:, :200]
    assert self_check(kept, GAUSS, counts={"divergent": [1, 0]}, counted_draws=500).passed
    assert not self_check(kept, GAUSS, counts={"divergent": [1, 1]}, counted_draws=500).passed
    assert not self_check(kept, GAUSS, counts={"divergent": [1, 0]}).passed  # 1 in 400


def test_capped_intervals_fail_above_one_percent_of_the_draws():
    """A PDMP interval cut short at the event cap hands out its draw early: rare ones pass
    (up to ``MAX_CAPPED_FRACTION``, 1 %), more fail with the count and the fix."""
    assert self_check(EXACT, GAUSS, counts={"capped": [20, 20]}).passed  # 40 of 4000
    result = self_check(EXACT, GAUSS, counts={"capped": [21, 20]})
    assert result.failures == ("capped",)
    assert "41 sample intervals cut short at the event cap" in result.warning
    assert "a larger max_events_per_sample" in result.warning


def test_a_pdmp_stuck_at_its_event_cap_warns_during_warmup_and_at_the_end():
    """A Boomerang allowed one event per sample interval cannot reach its sampling times: NumPyro's
    own workflow hears so after the first warmup draws (not only when a slow run ends), and the
    run's check counts the capped intervals after warmup.  (Runs at the default cap stay quiet:
    the robustness suites assert it.)"""
    from numpyro.infer import MCMC

    from models import linear_gaussian
    from pplsamplers import Boomerang

    args, kwargs = linear_gaussian.load_data(N=500, D=2)
    kernel = Boomerang(linear_gaussian.model, thinning={"max_events_per_sample": 1})
    mcmc = MCMC(kernel, num_warmup=40, num_samples=200, num_chains=2,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        mcmc.run(jax.random.key(0), *args, **kwargs)
    warned = [str(r.message) for r in records if issubclass(r.category, SelfCheckWarning)]
    early = [w for w in warned if "stopped at the event cap" in w]
    assert len(early) == 1 and "of the first 40 warmup draws" in early[0], warned
    assert "\n" not in early[0] and "capped" in kernel.self_check_result.failures
    assert "sample intervals cut short at the event cap" in warned[-1]


def test_a_mixtures_r_hat_failure_suggests_ordering_its_components():
    """Two right chains in two labellings of an unordered mixture fail R-hat: for a model with
    enumerated sites the warning adds the ordering fix, and only to an R-hat failure."""
    from pplsamplers.diagnostics.fixes import LABEL_SWITCHING_FIX, model_hints

    hints = model_hints(("z",))
    swapped = EXACT.copy()
    swapped[1] = swapped[1] + 5 * SD  # chain 1 in "another labelling"
    result = self_check(swapped, None, names=list(coordinate_names(GAUSS)), hints=hints)
    assert "rhat" in result.failures and LABEL_SWITCHING_FIX in result.warning
    assert LABEL_SWITCHING_FIX not in self_check(swapped, None, names=["a"] * D).warning
    wide = MU + 1.5 * (EXACT - MU)  # every sd 1.5×: Stein fails, R-hat passes
    assert LABEL_SWITCHING_FIX not in self_check(wide, GAUSS, hints=hints).warning


def _student_t_potential(nu: float = 3.0):
    terms = lambda x, idx: (0.0, 0.5 * (nu + 1.0) * jnp.log1p(x[0] ** 2 / nu) * jnp.ones(idx.shape))
    return build_potential(terms, dim=1, N=1)


@pytest.mark.parametrize("draws_per_chain, unverified", [(20, True), (10_000, False)])
def test_a_step_size_kernels_run_fails_where_the_stein_check_cannot_see_a_bias(
    draws_per_chain, unverified
):
    # exact draws of a Student-t(3): the Stein mean term is noisy (its score is not linear):
    # 3 MCSE is 0.44 sd with these 2 x 20 draws, past Thresholds.unverified, and 0.02 with
    # 2 x 10,000
    draws = np.random.default_rng(3).standard_t(3.0, size=(2, draws_per_chain, 1))
    potential = _student_t_potential()
    biased = self_check(draws, potential, exact=False)
    assert ("unverified" in biased.failures) == unverified, biased.warning
    if unverified:
        assert (
            "too noisy to see a step-size bias" in biased.warning and "more draws" in biased.warning
        )
    assert "unverified" not in self_check(draws, potential).failures  # an exact sampler's run
