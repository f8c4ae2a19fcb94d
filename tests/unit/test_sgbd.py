"""Unit invariants of SGBD (paper Alg. 2–4, §4.2) and c-SGLD (Alg. 7), in float64.

Kernels are compiled once per variant on shared test potentials (the suite's time budget).
"""

import functools
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC
from numpyro.infer.util import log_density

from models import logistic_regression, skew_normal
from pplsamplers.estimator import (
    Whitening,
    build_estimator,
    build_potential,
    whiten,
    with_control_variate,
)
from pplsamplers.infer import CSGLD, SGBD
from pplsamplers.kernels.sgmcmc import csgld, sgbd, sgld
from pplsamplers.kernels.sgmcmc.csgld import CSGLDOptions
from pplsamplers.kernels.sgmcmc.sgbd import SGBDOptions
from pplsamplers.kernels.sgmcmc.sgbd import declare as sgbd_spec
from pplsamplers.kernels.sgmcmc.step_size import STEP_SIZE_STEPS_PER_SAMPLE
from pplsamplers.kernels.spec import WarmupContext

NUM_DRAWS = 4000


@functools.partial(jax.jit, static_argnames="variant")
def _one_step_draws(slope, sigma, key, variant):
    """NUM_DRAWS independent single steps from 0 on log π(x) = slope·x (gradient = slope)."""
    terms = lambda x, idx: (-slope @ x, jnp.zeros(idx.shape[0]) + 0.0 * jnp.sum(x))
    pot = build_estimator(terms, dim=3, N=20, n=5)
    kernel, params = sgbd.build_kernel(variant), sgbd.make_params(sigma, 3)  # σ traced
    start = sgbd.init(key, jnp.zeros(3), pot, params)
    return jax.vmap(lambda k: kernel(k, start, pot, params))(jax.random.split(key, NUM_DRAWS))


def _quadratic_potential(n):
    """log π = −½|x|² − ½ Σ_i (d_i − x_0)², N = 50 data of spread 1, minibatch n."""
    data = jnp.linspace(-1.0, 1.0, 50)
    terms = lambda x, idx: (0.5 * x @ x, 0.5 * (data[idx] - x[0]) ** 2 + 0.0 * x[1])
    return build_estimator(terms, dim=2, N=50, n=n)


def _context(dim, whitened=False):
    """The warmup context of a kernel started at 0 with no mode, anchor or whitening
    (``whitened``: the estimator is declared to be in unit-scale coordinates)."""
    zero = jnp.zeros(dim)
    return WarmupContext(zero, None, None, Whitening(zero, jnp.ones(dim)), whitened=whitened)


# ------------------------------------------------------------------ flip probability
def test_flip_probability_is_finite_for_huge_arguments():
    grad = jnp.array([1e30, -1e30, 1e30, -1e30])
    z = jnp.array([1.0, 1.0, -1.0, 0.5])
    for alpha in (1.0, 1e10):
        p = sgbd.flip_probability(grad, z, alpha)
        assert np.all(np.isfinite(p))
        np.testing.assert_array_equal(p, [1.0, 0.0, 0.0, 0.0])
    for variant in sgbd.VARIANTS:
        for tau in (0.0, 1.0, 1e30):
            p, _ = sgbd.move_probability(variant, grad, z, jnp.full(4, tau))
            assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1)), (variant, tau)


@pytest.mark.parametrize("variant", sgbd.VARIANTS)
def test_moves_are_bounded_symmetric_at_zero_gradient_and_scaled_per_coordinate(variant):
    sigma = jnp.array([0.01, 1.0, 100.0])
    # |∇log π| = 1e30: Barker moves ±z whatever the gradient, along its sign, no overflow
    states, info = _one_step_draws(
        jnp.array([1e30, -1e30, 1e30]), sigma, jax.random.key(0), variant
    )
    moves = np.asarray(states.position)
    assert np.all(np.isfinite(moves)) and np.all(np.isfinite(np.asarray(info.flip_prob_mean)))
    assert np.all(moves[:, [0, 2]] > 0) and np.all(moves[:, 1] < 0)
    assert np.all(np.abs(moves) < 1.7 * sigma)  # |z| ≤ σ(1 + 7 sd) for these 12 000 draws
    np.testing.assert_array_equal(info.uphill_prob_mean, 1.0)
    # ĝ = 0: each sign has probability exactly ½
    p, _ = sgbd.move_probability(variant, jnp.zeros(3), sigma, jnp.array([0.0, 1.0, 5.0]))
    np.testing.assert_array_equal(p, 0.5)
    states, info = _one_step_draws(jnp.zeros(3), sigma, jax.random.key(1), variant)
    moves = np.asarray(states.position)
    plus = np.mean(moves > 0)
    # Binomial(3·4000, ½) fraction: sd = √(¼/12000) ≈ 0.0046; 4 sd ≈ 0.018
    assert abs(plus - 0.5) < 4 * np.sqrt(0.25 / moves.size), plus
    # E|z| = σ_j per coordinate; se of the mean of 4000 |z| is 0.1σ/√4000 ≈ 0.0016σ
    np.testing.assert_allclose(np.abs(moves).mean(0), sigma, rtol=0.01)
    np.testing.assert_allclose(info.flip_prob_mean, 0.5)


def test_corrected_flip_probability_is_unbiased_prop4():
    """Prop. 4: |E p̃ − p| < 0.019 under Gaussian noise of known sd τ when τ|z| < 1.702.

    M = 10⁶ draws; p̃ ∈ [0, 1] has sd ≤ ½, so the Monte Carlo error of each mean is ≤ 5e-4
    and 2 MCSE ≤ 0.001: the tolerance is 0.019 + 0.001 = 0.02.  Vanilla p̂ must miss the same
    tolerance somewhere on the grid (the correction matters; worst vanilla error ≈ 0.07).
    """
    M = 1_000_000
    grid = [
        (g, z, tau)
        for g in (0.25, 1.0, 2.0, -1.0)
        for z in (0.5, 1.0, 2.0)
        for tau in (0.3, 1.0, 1.5)
        if tau * z < sgbd.LOGISTIC_PROBIT_SCALE
    ]
    eta = jax.random.normal(jax.random.key(0), (M,))

    @jax.jit
    def errors(config):
        g, z, tau = config
        noisy, zz, tt = g + tau * eta, jnp.full(M, z), jnp.full(M, tau)
        truth = jax.nn.sigmoid(z * g)
        corrected, past = sgbd.move_probability("corrected", noisy, zz, tt)
        vanilla, _ = sgbd.move_probability("vanilla", noisy, zz, tt)
        return jnp.abs(corrected.mean() - truth), jnp.abs(vanilla.mean() - truth), past.any()

    corrected, vanilla, past = jax.lax.map(errors, jnp.array(grid))
    assert not bool(past.any())
    assert float(corrected.max()) < 0.02, grid[int(corrected.argmax())]
    assert float(vanilla.max()) > 0.02


def test_correction_factor_and_breaking_point():
    tau = jnp.array([0.0, 1.0, 1.0, 2.0])
    z = jnp.array([1.0, 1.0, -1.0, 1.0])
    alpha, past = sgbd.correction_factor(tau, z)
    unit = 1.702 / np.sqrt(1.702**2 - 1.0)  # α at τ|z| = 1
    np.testing.assert_allclose(alpha[:3], [1.0, unit, unit])
    np.testing.assert_array_equal(past, [False, False, False, True])
    # past the breaking point the corrected rule is the extreme one
    grad = jnp.array([0.3, -0.3, 0.3, -0.3])
    corrected, _ = sgbd.move_probability("corrected", grad, z, tau)
    extreme, _ = sgbd.move_probability("extreme", grad, z, tau)
    assert float(corrected[3]) == float(extreme[3]) == 0.0
    np.testing.assert_array_equal(extreme, [1.0, 0.0, 0.0, 0.0])


# ------------------------------------------------------------------ noise estimate
def test_gradient_and_noise_match_the_potential():
    X, y = logistic_regression.load_data(N=60, d=3, seed=2)[0]
    terms = logistic_regression.hand_written_terms(X.astype(jnp.float64), y)
    pot = build_estimator(terms, dim=3, N=60, n=12)
    anchor = jnp.array([0.3, -0.2, 0.1])
    cv = with_control_variate(pot, anchor)
    x = anchor + 0.01
    idx = pot.sample_indices(jax.random.key(3))

    @jax.jit
    def compute(x, idx):
        full = pot._replace(n=pot.N)
        return (
            sgbd.gradient_and_noise(pot, x, idx),
            pot.grad(x, idx),
            pot.per_example_grads(x, idx),
            sgbd.gradient_and_noise(full, x, jnp.arange(pot.N))[1],
            sgbd.gradient_and_noise(cv, x, idx),
            pot.full_value_and_grad(x)[1],
        )

    (grad, tau), expected_grad, per_example, tau_full, (grad_cv, tau_cv), exact = compute(x, idx)
    np.testing.assert_allclose(grad, -expected_grad, atol=1e-10)
    # τ_j = N s_j / √n, the sd of the minibatch gradient estimator
    expected = pot.N * per_example.std(axis=0, ddof=1) / np.sqrt(pot.n)
    np.testing.assert_allclose(tau, expected, rtol=1e-10)
    np.testing.assert_array_equal(tau_full, 0.0)  # full batch: no noise
    # control variate: far less noise near the anchor, and the estimate is within 4 τ_cv
    assert np.all(tau_cv < 0.1 * tau)
    np.testing.assert_allclose(grad_cv, -exact, atol=4 * float(jnp.max(tau_cv)))


def test_noise_average_and_adaptive_step_size():
    first = sgbd.update_noise_average(jnp.zeros(2), jnp.array([2.0, 4.0]), jnp.asarray(0), 0.9)
    np.testing.assert_allclose(first, [2.0, 4.0])
    later = sgbd.update_noise_average(first, jnp.array([4.0, 4.0]), jnp.asarray(1), 0.9)
    np.testing.assert_allclose(later, [2.2, 4.0])
    sigma = sgbd.adaptive_step_size(jnp.array([0.0, 2.0]), jnp.array([0.3, 0.3]))
    np.testing.assert_allclose(sigma, [0.3, 1.702 / (1.233 * 2.0)])


def test_skew_normal_toy_injects_the_stated_noise():
    """The toy model is the hand-written target; its minibatch gradient noise has sd τ."""
    args, kwargs = skew_normal.load_data(shape=5.0, noise_sd=1.5, subsample_size=10, N=2000)
    noise = args[0]
    assert abs(float(noise.sum())) < 1e-12
    hand = skew_normal.hand_written_terms(noise, kwargs["shape"], kwargs["loc"], kwargs["scale"])
    full_data = {k: v for k, v in kwargs.items() if k != "subsample_size"}
    log_joint, _ = log_density(skew_normal.model, args, full_data, {"theta": 0.4})
    global_term, per_datum = hand(jnp.array([0.4]), jnp.arange(noise.shape[0]))
    np.testing.assert_allclose(log_joint, -(global_term + per_datum.sum()), atol=1e-10)
    np.testing.assert_allclose(log_joint, skew_normal.log_density(0.4, 5.0), atol=1e-10)

    pot = build_estimator(hand, dim=1, N=noise.shape[0], n=10)
    x = jnp.array([0.4])
    keys = jax.random.split(jax.random.key(4), 10_000)
    grads, taus = jax.jit(
        jax.vmap(lambda k: sgbd.gradient_and_noise(pot, x, pot.sample_indices(k)))
    )(keys)
    exact = jax.grad(lambda t: skew_normal.log_density(t, 5.0))(0.4)
    # 10 000 draws: se of the mean 1.5/√10⁴ = 0.015, of the sd ≈ 0.011; tolerances ≈ 4 se
    assert abs(float(grads.mean()) - float(exact)) < 0.06
    assert abs(float(grads.std()) - 1.5) < 0.045
    # E[s] = c₄(10)·σ ≈ 0.973·1.5 for n = 10 Gaussian draws; se of the mean of τ ≈ 0.004
    assert abs(float(taus.mean()) - 0.973 * 1.5) < 0.02
    mean, sd = skew_normal.moments(5.0)
    draws = skew_normal.SkewNormal(0.0, kwargs["scale"], 5.0).sample(jax.random.key(5), (100_000,))
    # se of the mean and sd of 10⁵ draws ≈ 0.003; 0.02 is > 6 se
    assert abs(float(draws.mean()) - mean) < 0.02 and abs(float(draws.std()) - sd) < 0.02


# ------------------------------------------------------------------ kernel steps
def test_adaptation_breaking_point_and_full_batch():
    minibatch, full = _quadratic_potential(n=5), _quadratic_potential(n=50)
    spec = sgbd_spec(SGBDOptions(10.0, noise_decay=0.0, adapt_step_size=True))
    frozen = spec.build_kernel()
    vanilla_full = sgbd.build_kernel("vanilla")
    corrected_full = sgbd.build_kernel("corrected")
    key, params = jax.random.key(7), spec.default_params(jax.random.key(0), minibatch, _context(2))
    start = sgbd.init(key, jnp.array([0.5, -0.5]), minibatch, params)

    @jax.jit
    def run():
        stepped, info = frozen(key, start, minibatch, params)
        warm = spec.warmup(key, stepped, params, None, info, minibatch, None)
        return (
            (warm[0], warm[1], info),
            frozen(key, start, minibatch, params._replace(step_size=jnp.full(2, 100.0))),
            vanilla_full(key, start, full, params),
            corrected_full(key, start, full, params),
        )

    (adapted, warm_params, info), (_, info_far), (vanilla, _), (corrected, info_full) = run()
    # §4.2: warmup sets σ = 1.702/(1.233 τ̂) where τ̂ > 0; coordinate 1 has no data term
    # (τ̂ = 0): σ kept
    assert float(adapted.tau[0]) > 0 and float(adapted.tau[1]) == 0.0
    np.testing.assert_allclose(warm_params.step_size[0], 1.702 / (1.233 * adapted.tau[0]))
    assert float(warm_params.step_size[1]) == 10.0
    assert int(info.data_evals) == 5
    # σ ≫ 1.702/τ̂: the data coordinate is past the breaking point and moves uphill for sure
    assert float(info_far.frac_past_breaking_point) == 0.5
    # full batch: τ = 0, so the corrected rule is the vanilla one, draw for draw
    np.testing.assert_array_equal(vanilla.position, corrected.position)
    assert float(info_full.tau_mean) == 0.0


def test_csgld_full_batch_is_sgld_and_noise_is_corrected():
    pot = _quadratic_potential(n=50)
    x, key = jnp.array([0.5, -0.5]), jax.random.key(10)
    corrected, plain = csgld.build_kernel(), sgld.build_kernel()
    c_params, s_params = csgld.CSGLDParams(jnp.asarray(0.01)), sgld.SGLDParams(0.01, jnp.ones(2))
    a, b = jax.jit(
        lambda: (
            corrected(key, csgld.init(key, x, pot, c_params), pot, c_params)[0],
            plain(key, sgld.init(key, x, pot, s_params), pot, s_params)[0],
        )
    )()
    np.testing.assert_allclose(a.position, b.position, atol=1e-14)
    np.testing.assert_allclose(
        csgld.injected_variance(0.1, jnp.array([0.0, 2.0, 10.0])), [0.2, 0.2 - 0.04, 0.0]
    )


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: SGBD(logistic_regression.model, step_size=0.0), "step_size"),
        (lambda: SGBD(logistic_regression.model, step_size=-1.0), "step_size"),
        (lambda: SGBD(logistic_regression.model, step_size=[0.1, -0.1]), "step_size"),
        (lambda: SGBD(logistic_regression.model, noise_decay=1.0), "noise_decay"),
        (lambda: SGBD(logistic_regression.model, noise_decay=-0.1), "noise_decay"),
        (lambda: SGBD(logistic_regression.model, variant="barker"), "variant"),
        (lambda: CSGLD(logistic_regression.model, step_size=0.0), "step_size"),
        (lambda: CSGLD(logistic_regression.model, noise_decay=1.5), "noise_decay"),
        (lambda: SGBDOptions(variant="Vanilla"), "variant"),
        (lambda: SGBDOptions(step_size=jnp.ones((2, 2))), "step_size"),
        (lambda: CSGLDOptions(step_size=float("inf")), "step_size"),
    ],
)
def test_bad_arguments_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# ------------------------------------------------------------------ adapters
@pytest.fixture(scope="module")
def logreg_potential():
    """Logistic regression (N = 200, d = 3) as a hand-written potential: cheap to compile."""
    X, y = logistic_regression.load_data(N=200, d=3, seed=1)[0]
    terms = logistic_regression.hand_written_terms(X.astype(jnp.float64), y)
    return build_potential(terms, dim=3, N=200, n=20, init_position=jnp.zeros(3))


def test_sgbd_adapter_adapts_in_warmup_then_freezes(logreg_potential):
    # σ is in the kernel's whitened coordinates (posterior sd ≈ 1): start far above the rule
    kernel = SGBD(potential=logreg_potential, step_size=5.0, adapt_step_size=True)
    mcmc = MCMC(kernel, num_warmup=50, num_samples=30, progress_bar=False)
    mcmc.run(jax.random.key(11))
    stats = az.from_numpyro(mcmc).sample_stats
    for field in ("data_evals", "flip_prob_mean", "frac_past_breaking_point", "tau_mean"):
        assert field in stats
    sigma = stats["step_size_mean"].values.ravel()
    assert np.all(sigma == sigma[0]) and sigma[0] < 5.0  # adapted, then frozen after warmup
    final = mcmc.last_state
    assert np.all(final.params.step_size < 5.0) and np.all(final.kernel_state.tau > 0)
    assert np.all(stats["tau_mean"].values > 0)
    text = kernel.get_diagnostics_str(mcmc.last_state)
    assert "σ" in text and "breaking point" in text
    # a vector σ of the wrong length is refused before compilation
    with pytest.raises(ValueError, match="step_size"):
        MCMC(
            SGBD(potential=logreg_potential, step_size=[0.1, 0.1]),
            num_warmup=1,
            num_samples=1,
            progress_bar=False,
        ).run(jax.random.key(0))


def test_csgld_adapter_runs_vectorized(logreg_potential):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*There are not enough devices.*")
        mcmc = MCMC(
            CSGLD(potential=logreg_potential, step_size=1e-3, control_variate=False),
            num_warmup=20,
            num_samples=30,
            num_chains=2,
            chain_method="vectorized",
            progress_bar=False,
        )
        mcmc.run(jax.random.key(12))
    draws = mcmc.get_samples(group_by_chain=True)["x"]
    assert draws.shape == (2, 30, 3) and np.all(np.isfinite(draws))
    assert not np.allclose(draws[0], draws[1])
    stats = az.from_numpyro(mcmc).sample_stats
    assert (
        int(stats["data_evals"].min()) == 20 * STEP_SIZE_STEPS_PER_SAMPLE
        and "frac_past_breaking_point" in stats
    )
    first_chain = jax.tree.map(lambda leaf: leaf[0], mcmc.last_state)
    assert "τ̂" in mcmc.sampler.get_diagnostics_str(first_chain)


def test_auto_step_size_is_capped_at_the_whitening_scale():
    """σ = 0.5 local Laplace sd, but on a whitened potential never more than 0.5 whitened sd:
    where the whitening is a variational fit, the curvature at its mean can be far flatter
    than the posterior (14 sds along τ on a non-centred model) and σ = 7 sds sent τ to 10⁹."""
    # curvature 1/25 along x0 at the start (local sd 5), 1 along x1
    terms = lambda x, idx: (0.5 * (x[0] ** 2 / 25 + x[1] ** 2), jnp.zeros(idx.shape[0]))
    raw = build_estimator(terms, dim=2, N=10, n=10)
    spec = sgbd_spec(SGBDOptions())
    key = jax.random.key(0)
    np.testing.assert_allclose(spec.default_params(key, raw, _context(2)).step_size, [2.5, 0.5])
    # whitened with the identity (a whitening that claims unit scale): the flat direction
    # keeps the whitening's scale, the other its own
    white = whiten(raw, Whitening(jnp.zeros(2), jnp.ones(2)))
    np.testing.assert_allclose(
        spec.default_params(key, white, _context(2, whitened=True)).step_size, [0.5, 0.5]
    )
    narrow = whiten(raw, Whitening(jnp.zeros(2), jnp.array([1.0, 4.0])))  # x1 sd 1 = z1 sd 1/4
    np.testing.assert_allclose(
        spec.default_params(key, narrow, _context(2, whitened=True)).step_size,
        [0.5, 0.125],
        rtol=1e-6,
    )


@pytest.mark.parametrize("dim", [1, 4, 5, 53, 304, 10_000])
def test_auto_sigma_keeps_the_coherent_bias_within_budget(dim):
    """σ = auto_sigma(D): the predicted shift of the log density, 0.27σ²·√(D/2) posterior sds,
    is at most COHERENT_BIAS (0.1) at every D, and σ is the former 0.5 where that allows it."""
    import math

    from pplsamplers.kernels.sgmcmc.sgbd import AUTO_SIGMA, auto_sigma
    from pplsamplers.kernels.sgmcmc.step_size import BARKER_VARIANCE_BIAS, COHERENT_BIAS

    sigma = auto_sigma(dim)
    assert 0 < sigma <= AUTO_SIGMA
    shift = BARKER_VARIANCE_BIAS * sigma**2 * math.sqrt(dim / 2)
    assert shift <= COHERENT_BIAS * (1 + 1e-9)
    assert sigma == AUTO_SIGMA or shift == pytest.approx(COHERENT_BIAS)


def test_auto_sigma_and_its_steps_per_draw_follow_the_dimension():
    """On a whitened 60-dimensional potential the automatic σ is auto_sigma(60) (not 0.5), and
    a run takes (0.5 / σ)² times ten steps per draw; a given σ keeps ten."""
    from pplsamplers.kernels.sgmcmc.sgbd import auto_sigma
    from pplsamplers.kernels.sgmcmc.step_size import dilated_steps

    dim = 60
    terms = lambda x, idx: (0.5 * jnp.sum(x**2), jnp.zeros(idx.shape[0]))
    raw = build_potential(terms, dim=dim, N=10, n=10, init_position=jnp.zeros(dim))
    white = whiten(raw.estimator, Whitening(jnp.zeros(dim), jnp.ones(dim)))
    spec = sgbd_spec(SGBDOptions())
    sigma = spec.default_params(jax.random.key(0), white, _context(dim, whitened=True)).step_size
    np.testing.assert_allclose(sigma, auto_sigma(dim), rtol=1e-6)
    expected = dilated_steps((0.5 / auto_sigma(dim)) ** 2)
    assert spec.steps_per_sample_at(dim) == expected > STEP_SIZE_STEPS_PER_SAMPLE
    assert sgbd_spec(SGBDOptions(step_size=0.3)).steps_per_sample_at is None

    mcmc = MCMC(SGBD(potential=raw), num_warmup=2, num_samples=3, progress_bar=False)
    mcmc.run(jax.random.key(1))
    evals = az.from_numpyro(mcmc).sample_stats["data_evals"]
    assert int(evals.min()) == 10 * expected  # N = 10 data per full-batch step
