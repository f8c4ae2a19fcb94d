"""Selector: features on models with known structure, every competence branch, KSD."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from models import linear_gaussian, logistic_regression
from pplsamplers.diagnostics import kernel_stein_discrepancy
from pplsamplers.select import ModelFeatures, model_features, rank_candidates
from pplsamplers.select import competence as C
from pplsamplers.warmup import SetupOptions, mode_stage


def diagonal_gaussian_data(N=400, D=4):
    # orthogonal design columns with different scales: the posterior is exactly diagonal
    A = np.zeros((N, D))
    for j in range(D):
        A[j::D, j] = 1.0 + j
    x = A @ np.arange(1.0, D + 1) + np.random.default_rng(0).normal(size=N)
    return (jnp.asarray(A), jnp.asarray(x)), {"noise_var": 1.0}


def heavy_tailed_model(y):
    theta = numpyro.sample("theta", dist.StudentT(1.5, 0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(theta.sum(), 30.0), obs=y[idx])


def test_diagonal_gaussian_has_no_correlation():
    args, kwargs = diagonal_gaussian_data()
    f = model_features(linear_gaussian.model, args, kwargs, subsample_size=40)
    np.testing.assert_allclose(f.correlation_condition, 1.0, atol=1e-6)
    # an exact Gaussian: only the MAP's error moves these.  It is within find_map's float64
    # tolerance, δ ≤ 1e-6 posterior sd, and the rise t sds from a point δ off the mode is
    # t²/2 + tδ: misfit ≤ 2δ (at t = 1), skewness ≤ δ, and the ±3 sd tail growth is exact
    assert f.quadratic_misfit < 2e-6 and f.skewness < 1e-6
    assert abs(f.tail_growth - 1.0) < 1e-8
    assert f.curvature_spread > 5  # the scales 1..4 squared: spread ≈ 16
    assert f.mode_count == 1  # the random-start MAP fits all reach the one optimum


def test_multimodal_mixture_is_flagged():
    """The SBPS paper's Supp. E mixture (4 modes at (±1, ±1)): the random-start MAP fits find
    other modes, so neither a Laplace reference nor a control-variate anchor is offered."""
    from models import multimodal_mixture

    args, kwargs = multimodal_mixture.load_data(N=1000)
    f = model_features(multimodal_mixture.model, args, kwargs, subsample_size=10)
    assert 1 < f.mode_count <= 4
    assert f.quadratic_misfit < 0.01  # locally Gaussian: only mode_count sees the other modes
    ranked = rank_candidates(f._replace(num_data=10**6))  # as if N were large
    assert ranked[0].name == "sbps" and "separated modes" in ranked[0].reasons[0]
    assert [c.name for c in ranked[:3]] == ["sbps", "psbps", "sgbd"]
    assert all("control_variate" not in c.params for c in ranked)


def test_mode_probe_on_a_weighted_subset_keeps_u_and_the_modes():
    """Above MODE_PROBE_DATA data the mode probe reads a weighted random subset: its U is an
    unbiased estimate of the full U (same scale), the mixture's separated modes still show,
    and a unimodal posterior still has one (the subset's optima stray, without a barrier)."""
    from models import multimodal_mixture
    from pplsamplers.model import make_potential
    from pplsamplers.warmup import find_map
    from pplsamplers.warmup.modes import count_modes, on_a_subset

    args, kwargs = multimodal_mixture.load_data(N=4000)
    pot = make_potential(multimodal_mixture.model, args, kwargs, 10)
    est = pot.estimator
    x_map = find_map(jax.random.key(0), est, pot.init_position).position
    values = []
    for seed in range(20):
        subset = on_a_subset(jax.random.key(seed), est, 400)
        assert (subset.N, subset.n) == (400, 10)
        values.append(float(subset.full_value_and_grad(x_map)[0]))
    full = float(est.full_value_and_grad(x_map)[0])
    assert abs(np.mean(values) - full) < 4 * np.std(values) / np.sqrt(20)
    curvature = jnp.full(2, 1.6e4 * 4)
    assert (
        count_modes(jax.random.key(1), est, x_map, curvature, max_data=400, draw_init=pot.draw_init)
        > 1
    )

    args, kwargs = linear_gaussian.load_data(N=4000, D=3)
    pot = make_potential(linear_gaussian.model, args, kwargs, 40)
    est = pot.estimator
    x_map = find_map(jax.random.key(0), est, pot.init_position).position
    assert (
        count_modes(
            jax.random.key(1),
            est,
            x_map,
            jnp.full(3, 4000.0),
            max_data=400,
            draw_init=pot.draw_init,
        )
        == 1
    )


def test_mode_probe_in_a_posterior_scale_starts_at_laplace_draws():
    """With ``scale`` = L the probe starts at x_map + L ε and searches in L's metric (the
    shared warmup's probe, reusing its L-BFGS program): a double well U = 5 (x² − 1)² per
    coordinate (modes at ±1, a 5-nat barrier between them) shows a second mode from draws
    wide enough to cross the barrier, dense L or diagonal, and none from its Laplace scale
    at one well (sd 0.16), whose starts all fall back into that well."""
    from pplsamplers.estimator import build_potential
    from pplsamplers.warmup import find_map
    from pplsamplers.warmup.modes import count_modes

    def terms(x, idx):
        return 5.0 * jnp.sum((x**2 - 1.0) ** 2), jnp.zeros(idx.shape[0])

    pot = build_potential(terms, dim=2, N=10, n=10, init_position=jnp.ones(2)).estimator
    x_map = find_map(jax.random.key(0), pot, jnp.ones(2)).position
    np.testing.assert_allclose(x_map, [1.0, 1.0], atol=1e-6)
    wide = jnp.array([[3.0, 0.0], [0.5, 3.0]])
    assert count_modes(jax.random.key(1), pot, x_map, scale=wide) > 1
    assert count_modes(jax.random.key(1), pot, x_map, scale=jnp.diagonal(wide)) > 1
    laplace = jnp.full(2, 1 / np.sqrt(40.0))  # U'' = 40 at ±1
    assert count_modes(jax.random.key(1), pot, x_map, scale=laplace) == 1
    assert count_modes(jax.random.key(1), pot, x_map, scale=jnp.diag(laplace)) == 1
    with pytest.raises(ValueError, match="curvature_diagonal or scale"):
        count_modes(jax.random.key(1), pot, x_map)


def test_correlated_design_is_flagged():
    args, kwargs = linear_gaussian.load_data(N=400, D=6, correlation=0.95)
    f = model_features(linear_gaussian.model, args, kwargs, subsample_size=40)
    assert f.correlation_condition > C.STRONG_CORRELATION


def test_features_on_the_shared_warmup_match_the_probes_of_their_own():
    """With the shared warmup's mode stage (what AutoSampler passes above SMALL_N), the
    features reuse its mode, mode probe and dense curvature instead of their own MAP fit,
    mode probe and Hessian-vector products; on a correlated, badly scaled posterior the
    features agree (the curvature ones are exact eigenvalues there, power iterations here)."""
    (X, y), kwargs = logistic_regression.load_data(N=4000, d=4, seed=1)
    X = X * jnp.array([30.0, 1.0, 1.0, 0.05]) + 0.9 * X[:, :1]  # scales and correlations
    args = (X, y)
    stage = mode_stage(SetupOptions(logistic_regression.model), args, kwargs)
    assert stage.whitening.factor.shape == (4, 4) and stage.mode_count == 1
    own = model_features(logistic_regression.model, args, kwargs, subsample_size=100)
    shared = model_features(
        logistic_regression.model, args, kwargs, subsample_size=100, stage=stage
    )
    np.testing.assert_allclose(shared.map_position, own.map_position, atol=1e-4)
    for name in ("curvature_spread", "correlation_condition", "max_curvature"):
        np.testing.assert_allclose(getattr(shared, name), getattr(own, name), rtol=1e-3)
    np.testing.assert_allclose(shared.curvature_diagonal, own.curvature_diagonal, rtol=1e-4)
    for name in ("quadratic_misfit", "skewness", "tail_growth"):
        np.testing.assert_allclose(getattr(shared, name), getattr(own, name), atol=1e-3)
    assert shared.mode_count == own.mode_count == 1
    assert shared.correlation_condition > 10  # the design is correlated indeed


def test_ill_conditioned_design_yields_large_spread():
    well = logistic_regression.load_data(N=4000, d=4, seed=1)
    args, kwargs = well
    X = args[0] * jnp.array([30.0, 1.0, 1.0, 0.05])  # covariate scales differ by 600x
    f_ill = model_features(logistic_regression.model, (X, args[1]), kwargs, subsample_size=100)
    f_well = model_features(logistic_regression.model, args, kwargs, subsample_size=100)
    assert f_ill.curvature_spread > C.SCALE_SPREAD > f_well.curvature_spread


def test_heavy_tailed_model_is_flagged():
    y = jnp.asarray(np.random.default_rng(1).normal(size=20))
    f = model_features(heavy_tailed_model, (y,))
    assert f.tail_growth < C.HEAVY_TAILS
    ranked = rank_candidates(f._replace(num_data=10**6, has_data_plate=True))
    assert ranked[0].name == "sgbd" and "heavy-tailed" in " ".join(ranked[0].reasons)


def _features(**changes):
    base = ModelFeatures(
        num_data=100_000,
        subsample_size=1000,
        dim=20,
        has_data_plate=True,
        discrete_sites=(),
        constrained_sites=(),
        cost_ratio=0.01,
        curvature_spread=2.0,
        correlation_condition=2.0,
        gradient_noise_ratio=5.0,
        quadratic_misfit=0.02,
        skewness=0.01,
        tail_growth=1.0,
        gradient_kurtosis=5.0,
    )
    return base._replace(**changes)


@pytest.mark.parametrize(
    "changes, best, phrase",
    [
        (dict(num_data=500), "nuts", "a full-data gradient is cheap"),
        (dict(has_data_plate=False), "nuts", "no data plate"),
        (dict(discrete_sites=("k",), num_data=200), "nuts", "DiscreteHMCGibbs"),
        ({}, "boomerang", "Laplace approximation"),
        (dict(correlation_condition=500.0, quadratic_misfit=0.3), "hamcmc", "strong correlations"),
        (dict(skewness=0.6, quadratic_misfit=0.4), "sgbd", "skewed"),
        (dict(gradient_kurtosis=400.0, quadratic_misfit=0.3), "sgbd", "wild per-example"),
        (dict(quadratic_misfit=3.0), "sbps", "non-Gaussian"),
        (dict(mode_count=3), "sbps", "separated modes"),
        (dict(quadratic_misfit=3.0, correlation_condition=500.0), "sbps", "non-Gaussian"),
        (dict(curvature_spread=1e3, quadratic_misfit=0.3), "psbps", "rescales"),
        (dict(dim=304, quadratic_misfit=1.8, num_data=10_000), "nuts", "hierarchical"),
        # locally quadratic at the polished joint mode, but Laplace draws weigh badly
        (
            dict(dim=304, quadratic_misfit=0.22, laplace_weight_sd=41.0, num_data=10_000),
            "nuts",
            "hierarchical",
        ),
        (
            dict(dim=304, quadratic_misfit=0.22, laplace_weight_sd=0.5, num_data=10_000),
            "boomerang",
            "non-Gaussian",
        ),
        # the same posterior at N = 10⁶: NUTS is not affordable, the minibatch kernels rank
        (dict(dim=304, quadratic_misfit=1.8, num_data=10**6), "sbps", "non-Gaussian"),
        (dict(dim=20, quadratic_misfit=1.8, num_data=10_000), "sbps", "non-Gaussian"),
        # a poor Laplace fit of the whole posterior counts at any D (a non-centred model with
        # 20 well-identified groups: D = 23, log-weight sd 1.4e3; Boomerang was 3 sd away)
        (
            dict(dim=23, quadratic_misfit=0.04, laplace_weight_sd=1.4e3, num_data=20_000),
            "nuts",
            "hierarchical",
        ),
        # y ~ Uniform(0, θ): a hard edge at the data, which no minibatch sees
        (dict(edge_sites=("y",), num_data=10**6), "nuts", "depends on the latent values"),
    ],
)
def test_every_competence_branch(changes, best, phrase):
    ranked = rank_candidates(_features(**changes))
    assert ranked[0].name == best, [(c.name, c.score) for c in ranked]
    assert phrase in " ".join(ranked[0].reasons)
    assert all(c.reasons and all(c.reasons) for c in ranked)  # every candidate says why


def test_boomerang_gets_control_variates_and_candidates_restrict():
    ranked = rank_candidates(_features())
    # no scale-dependent settings: control variates and scales come from the shared warmup
    assert ranked[0].name == "boomerang" and ranked[0].params == {}
    assert [c.name for c in rank_candidates(_features(), ["sgld", "sbps"])] in (
        ["sbps", "sgld"],
        ["sgld", "sbps"],
    )
    with pytest.raises(ValueError, match="unknown candidates"):
        rank_candidates(_features(), ["magic"])


def test_pilot_shortlists_follow_the_suite_measurements():
    names = lambda ranked: [c.name for c in ranked[:3]]
    # skewed and non-Gaussian: SGBD first, SBPS (measured best per epoch) in the pilot's top 3,
    # and NUTS (slowest per epoch at large N in the suite) out of it
    skewed = rank_candidates(_features(skewness=0.8, quadratic_misfit=2.6))
    assert names(skewed)[0] == "sgbd" and "sbps" in names(skewed) and "nuts" not in names(skewed)
    # at large N NUTS ranks below every compatible kernel, even where no rule favours any
    for features in (_features(), _features(mode_count=2), _features(quadratic_misfit=0.3)):
        ranked = rank_candidates(features)
        assert ranked[-1].name == "nuts" and ranked[-1].score == C.LAST_RESORT
    # wild gradients: SGBD, then pSBPS (measured best on the heavy-tailed logistic regression)
    assert names(rank_candidates(_features(gradient_kurtosis=140.0, quadratic_misfit=0.4)))[:2] == [
        "sgbd",
        "psbps",
    ]
    # correlated but non-Gaussian: HAMCMC is not preferred (its pairs diverged there)
    ranked = rank_candidates(_features(quadratic_misfit=3.0, correlation_condition=500.0))
    hamcmc = next(c for c in ranked if c.name == "hamcmc")
    assert hamcmc.score == C.COMPATIBLE and "L-BFGS pairs from one region" in hamcmc.reasons[0]


def test_candidates_carry_no_scale_dependent_settings():
    """Every sampler runs on the adapter's whitened potential, so the selector
    passes no step sizes, reference curvatures or anchors: only structural choices."""
    f = _features(
        dim=3,
        max_curvature=2e4,
        curvature_diagonal=np.array([1.0, 100.0, 1e4]),
        gradient_noise_sd=np.array([0.1, 1.0, 1e3]),
        map_position=np.zeros(3),
    )
    for features in (f, f._replace(skewness=0.8, quadratic_misfit=2.6)):
        for candidate in rank_candidates(features):
            assert set(candidate.params) <= {"variant", "discrete"}, candidate


def test_discrete_sites_with_large_n_raise():
    with pytest.raises(ValueError, match="discrete latent site"):
        rank_candidates(_features(discrete_sites=("k",)))
    ranked = rank_candidates(_features(discrete_sites=("k",), num_data=100))
    assert [c.name for c in ranked] == ["nuts"] and ranked[0].params == {"discrete": True}


def test_ksd_ranks_exact_draws_below_biased_draws():
    key = jax.random.key(0)
    cov = jnp.array([[1.0, 0.8], [0.8, 1.0]])
    precision = jnp.linalg.inv(cov)
    draws = jax.random.normal(key, (500, 2)) @ jnp.linalg.cholesky(cov).T
    score = lambda x: -x @ precision
    exact = kernel_stein_discrepancy(draws, score(draws))
    shifted = kernel_stein_discrepancy(draws + 0.5, score(draws + 0.5))
    wide = kernel_stein_discrepancy(1.5 * draws, score(1.5 * draws))
    # margin: both biased samples must score at least twice the exact one
    assert shifted > 2 * exact and wide > 2 * exact, (exact, shifted, wide)


def test_ksd_chunked_equals_unchunked_and_matches_autodiff_stein_kernel():
    x = jax.random.normal(jax.random.key(1), (70, 3))
    s = -x
    full = kernel_stein_discrepancy(x, s, chunk_size=None, lengthscale=1.3)
    chunked = kernel_stein_discrepancy(x, s, chunk_size=16, lengthscale=1.3)
    np.testing.assert_allclose(full, chunked, rtol=1e-12)

    def imq(a, b):
        return (1.0 + jnp.sum((a - b) ** 2) / 1.3**2) ** -0.5

    def stein(a, b, sa, sb):
        grad_a = jax.grad(imq, 0)(a, b)
        grad_b = jax.grad(imq, 1)(a, b)
        trace = jnp.trace(jax.jacfwd(jax.grad(imq, 1), 0)(a, b))
        return sa @ sb * imq(a, b) + sa @ grad_b + sb @ grad_a + trace

    pairs = jax.vmap(lambda a, sa: jax.vmap(lambda b, sb: stein(a, b, sa, sb))(x, s))(x, s)
    np.testing.assert_allclose(full, jnp.sqrt(pairs.sum()) / x.shape[0], rtol=1e-10)


def test_stein_u_statistic_drops_the_diagonal_and_chunks_agree():
    from pplsamplers.diagnostics import stein_u_statistic
    from pplsamplers.diagnostics.ksd import _stein_kernel_block

    x = jax.random.normal(jax.random.key(3), (70, 3))
    scores = -x
    full = _stein_kernel_block(x, scores, x, scores, 1.0, -0.5, jnp.asarray(1.7))
    expected = (full.sum() - jnp.trace(full)) / (70 * 69)
    for chunk in (16, 256):
        stat = stein_u_statistic(x, scores, 1.7, chunk_size=chunk)
        np.testing.assert_allclose(stat.ksd_squared, expected, rtol=1e-10)
    # exact N(0, I) draws score 0 within 3 se; over-dispersed ones (sd 1.5) are > 5 se away
    x = jax.random.normal(jax.random.key(4), (400, 3))
    exact = stein_u_statistic(x, -x, 2.0)
    assert abs(float(exact.ksd_squared)) < 3 * float(exact.standard_error)
    over = stein_u_statistic(1.5 * x, -1.5 * x, 2.0)
    assert float(over.ksd_squared) > 5 * float(over.standard_error)


def test_bias_guard_rejects_only_significant_excess():
    from pplsamplers.select.pilot import bias_guard, effective_se

    rejected = bias_guard(
        {
            "exact": (0.0, 0.01),
            "noisy_exact": (0.03, 0.01),
            "biased": (1.0, 0.01),
            "failed": (float("inf"), 0.0),
        }
    )
    # noisy_exact: 0.03 above a floor of 4·0 but within 3·√(0.01² + 0.01²) = 0.042
    assert rejected == {"exact": False, "noisy_exact": False, "biased": True, "failed": True}
    # a positive best: twice its KSD (4× its KSD²) is tolerated, more is not
    rejected = bias_guard({"best": (0.1, 0.001), "twice": (0.39, 0.001), "thrice": (0.9, 0.001)})
    assert rejected == {"best": False, "twice": False, "thrice": True}
    # a diverged chain: its error is as large as its KSD², but it is 10⁶× the best's bound
    rejected = bias_guard({"best": (0.5, 0.2), "diverged": (1e6, 1e6), "nan": (np.nan, 0.0)})
    assert rejected == {"best": False, "diverged": True, "nan": True}

    class Stat(NamedTuple):
        standard_error: float

    assert effective_se(Stat(0.1), num_points=200, ess=50.0) == pytest.approx(0.2)
    assert effective_se(Stat(0.1), num_points=200, ess=1e4) == pytest.approx(0.1)


def test_float32_rounding_of_the_data_sum_is_not_read_as_a_misfit():
    """A Gaussian posterior whose per-datum terms are large (a constant 2·10⁴ per row, as
    log y! of large counts would be) in float32 at N = 10⁵: each ℓ_i is rounded to about 10⁻³,
    and the rise over one posterior sd (0.5) carries about 0.1 of rounding, which read as it
    is makes the misfit about 0.4 and takes the Boomerang's rank away.  The probe reads the
    rounding from two close steps and discounts it; a posterior that is not Gaussian, and one
    whose potential is infinite a step away, still read as such in the same precision."""

    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)
            numpyro.factor("constant", jnp.full(y.shape, 2e4, y.dtype))

    def walled(x, idx):  # U = x²/2 inside |x| < 0.05, infinite beyond: every rise is infinite
        inside = jnp.abs(x[0]) < 0.05
        return jnp.where(inside, 0.5 * x @ x, jnp.inf), jnp.zeros(idx.shape, x.dtype)

    from pplsamplers.estimator import build_estimator
    from pplsamplers.select.features import _probe_arrays

    with jax.enable_x64(False):  # the suite runs in float64, as users mostly do not
        y = 3.0 + jax.random.normal(jax.random.key(0), (100_000,), jnp.float32)
        f = model_features(model, (y,), subsample_size=100)
        y_heavy = jnp.asarray(np.random.default_rng(1).normal(size=20), jnp.float32)
        f_heavy = model_features(heavy_tailed_model, (y_heavy,))
        estimator = build_estimator(walled, dim=1, N=10, n=10)
        wall = _probe_arrays(jax.random.key(0), estimator, jnp.zeros(1, jnp.float32))
    assert f.quadratic_misfit < C.NEAR_GAUSSIAN_MISFIT / 5
    assert f.skewness < C.SKEWED and abs(f.tail_growth - 1.0) < 0.1
    assert f_heavy.quadratic_misfit > C.NEAR_GAUSSIAN_MISFIT and f_heavy.tail_growth < C.HEAVY_TAILS
    assert float(wall["quadratic_misfit"]) > C.NON_GAUSSIAN_MISFIT
