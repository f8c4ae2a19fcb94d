"""Deterministic invariants of SBPS / pSBPS: the local regression (eq. 9–13), the slope-prior
step, the preconditioner (eq. 17–18), the kernel's cost discipline, exact-BPS mode, negative
slopes (Supp. E), the warmup, argument validation, and identical draws for every chain method."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

from models import logistic_regression
from pplsamplers.estimator import Whitening, build_potential, with_control_variate
from pplsamplers.infer import SBPS
from pplsamplers.kernels.pdmp import regression
from pplsamplers.kernels.pdmp import sbps_kernel as sbps
from pplsamplers.kernels.pdmp.sbps import (
    PROPOSALS_PER_SAMPLE,
    SBPSOptions,
    declare,
    relative_refresh,
)
from pplsamplers.kernels.pdmp.sbps_events import REOBSERVE_PENDING
from pplsamplers.kernels.pdmp.tuning import events_per_draw, radial_events
from pplsamplers.kernels.spec import WarmupContext, WarmupWindow
from pplsamplers.registry import PSBPS
from tests.unit.pdmp_cost import counters_per_draw

# ------------------------------------------------------------------- regression
TIMES = np.array([0.0, 0.3, 0.5, 0.9, 1.4])
VALUES = np.array([-2.0, -1.1, -0.2, 1.3, 2.2])
NOISE = np.array([0.5, 0.2, 0.8, 0.3, 0.4])


def _buffer(times=TIMES, values=VALUES, noise=NOISE, size=8):
    buf = regression.buffer_reset(regression.buffer_init(size), times[0], values[0], noise[0])
    for t, g, c2 in zip(times[1:], values[1:], noise[1:], strict=True):
        buf = regression.buffer_add(buf, t, g, c2)
    return buf


def test_band_noise_is_the_larger_of_the_minibatch_noise_and_the_lack_of_fit():
    """ρ² = x Σ xᵀ + max(c_m², m · mean G̃²): a misfit within the noise changes nothing, a
    larger one sets the margin, a negative one (noise explains every error) is ignored; the
    line itself does not move."""
    buf, last_noise = _buffer(), 0.4
    scale = float(regression.mean_square(buf))
    np.testing.assert_allclose(scale, np.mean(VALUES**2))
    base = regression.fit(buf, 0.0, 1e6, last_noise, relative_noise_floor=0.0)
    for misfit, expected in [(-1.0, 0.4), (0.5 * 0.4 / scale, 0.4), (10 * 0.4 / scale, 4.0)]:
        fit = regression.fit(
            buf, 0.0, 1e6, last_noise, relative_noise_floor=0.0, relative_misfit=misfit
        )
        np.testing.assert_allclose(fit.noise_var, expected, rtol=1e-10)
        np.testing.assert_allclose(fit.slope, base.slope)
        np.testing.assert_allclose(fit.mean_at_center, base.mean_at_center)


def test_excess_error_is_zero_on_average_for_a_linear_rate_with_noise():
    """G = 1 + 2t (the line known: exact buffered values), a new observation with noise c²:
    the excess (G̃ − mean)² − xΣxᵀ − c² averages 0, so a linear rate learns no misfit."""
    buf = _buffer(values=1.0 + 2.0 * TIMES, noise=np.full(5, 1e-8))
    fit = regression.fit(buf, 0.0, 1e6, 0.25, relative_noise_floor=0.0)
    noisy = 1.0 + 2.0 * 2.0 + 0.5 * jax.random.normal(jax.random.key(0), (20000,))
    excess = jax.vmap(lambda g: regression.excess_error(fit, 2.0, g, 0.25))(noisy)
    assert abs(float(excess.mean())) < 4 * float(excess.std()) / np.sqrt(excess.size)


def test_regression_posterior_matches_closed_form():
    """β ~ posterior of G = β₀ + β₁ t + ε, ε ~ N(0, c²), β₁ ~ N(μ, σ²), β₀ flat."""
    mu, var, last_noise = 1.5, 4.0, NOISE[-1]
    fit = regression.fit(_buffer(), mu, var, last_noise, relative_noise_floor=0.0)
    design = np.stack([np.ones_like(TIMES), TIMES], axis=1)
    weights = 1.0 / NOISE
    precision = design.T @ (weights[:, None] * design) + np.diag([0.0, 1.0 / var])
    cov = np.linalg.inv(precision)
    beta = cov @ (design.T @ (weights * VALUES) + np.array([0.0, mu / var]))
    np.testing.assert_allclose(fit.slope, beta[1], rtol=1e-10)
    for t in [1.4, 2.0, 3.7]:
        x = np.array([1.0, t])
        np.testing.assert_allclose(regression.predictive_mean(fit, t), x @ beta, rtol=1e-10)
        rho2 = x @ cov @ x + last_noise  # eq. (12)
        np.testing.assert_allclose(regression.predictive_var(fit, t), rho2, rtol=1e-10)
        np.testing.assert_allclose(
            regression.upper_band(fit, t, 3.0), x @ beta + 3.0 * np.sqrt(rho2), rtol=1e-10
        )


def test_ring_buffer_keeps_the_most_recent_observations():
    times = np.arange(7.0)
    buf = _buffer(times, 2.0 * times + 1.0, np.full(7, 0.1), size=4)
    assert int(buf.count) == 7
    assert sorted(np.asarray(buf.times).tolist()) == [3.0, 4.0, 5.0, 6.0]
    fit = regression.fit(buf, 0.0, 1e8, 0.1, relative_noise_floor=0.0)
    np.testing.assert_allclose(fit.slope, 2.0, rtol=1e-6)


def test_negative_slope_is_clamped_through_the_centroid():
    values = -VALUES  # a decreasing G̃
    fit = regression.fit(_buffer(values=values), 0.7, 1e6, 0.1, relative_noise_floor=0.0)
    raw = regression.fit(
        _buffer(values=values), 0.7, 1e6, 0.1, relative_noise_floor=0.0, clamp_negative_slope=False
    )
    assert float(fit.raw_slope) < 0 and float(raw.slope) == float(fit.raw_slope)
    np.testing.assert_allclose(fit.slope, 0.7)  # max(μ, 0)
    weights = 1.0 / NOISE
    centroid_t, centroid_g = weights @ TIMES / weights.sum(), weights @ values / weights.sum()
    np.testing.assert_allclose(regression.predictive_mean(fit, centroid_t), centroid_g)


def test_full_batch_noise_floor_keeps_the_fit_defined():
    buf = _buffer(noise=np.zeros(5), values=1.0 + 2.0 * TIMES)
    fit = regression.fit(buf, 0.0, 1e6, 0.0, relative_noise_floor=1e-2)
    assert np.isfinite(float(fit.var_mean)) and float(fit.var_mean) > 0
    np.testing.assert_allclose(fit.slope, 2.0, rtol=1e-6)
    assert float(regression.upper_band(fit, 2.0, 3.0)) > 5.0


def test_slope_prior_step_is_the_em_update():
    fit = regression.fit(_buffer(), 1.0, 2.0, 0.4)
    mu, var = regression.slope_prior_step(fit, 1.0, 2.0, 0.25)
    np.testing.assert_allclose(mu, 1.0 + 0.25 * (fit.raw_slope - 1.0))
    expected = 0.75 * 2.0 + 0.25 * ((fit.raw_slope - 1.0) ** 2 + fit.var_slope)
    np.testing.assert_allclose(var, max(expected, (0.5 * mu) ** 2))
    # a single observation carries no slope information: nothing moves
    one = regression.fit(
        regression.buffer_reset(regression.buffer_init(4), 0.0, 1.0, 0.1), 1.0, 2.0, 0.1
    )
    np.testing.assert_allclose(regression.slope_prior_step(one, 1.0, 2.0, 0.5), (1.0, 2.0))


def test_preconditioner_follows_eq_17_18_with_mean_one():
    square_avg = jnp.array([4.0, 1.0, 0.25, 9.0])
    scale = sbps.preconditioner(square_avg, 1e-4)
    inverse = 1.0 / (jnp.sqrt(square_avg) + 1e-4)
    np.testing.assert_allclose(scale, inverse / inverse.mean(), rtol=1e-12)
    np.testing.assert_allclose(scale.mean(), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(sbps.preconditioner(jnp.zeros(3), 1e-4), jnp.ones(3))


# ----------------------------------------------------------------------- kernel
def _gaussian_potential(dim=3, N=1, n=1):
    prec = jnp.diag(jnp.arange(1.0, dim + 1.0))
    terms = lambda x, idx: (0.0, 0.5 * x @ prec @ x * jnp.ones(idx.shape[0]))
    return build_potential(terms, dim=dim, N=N, n=n, init_position=jnp.zeros(dim)).estimator


def _params(interval=1.0, refresh=1.0, dim=3):
    return sbps.SBPSParams(jnp.asarray(interval), jnp.asarray(refresh), jnp.ones(dim))


@pytest.fixture(scope="module")
def logreg_potential():
    (X, y), _ = logistic_regression.load_data(N=200, d=3, seed=1)
    terms = logistic_regression.hand_written_terms(jnp.asarray(X, float), jnp.asarray(y, float))
    return build_potential(terms, dim=3, N=200, n=20, init_position=jnp.zeros(3)).estimator


def _counting(potential, counter):
    def count(name):
        def bump():
            counter[name] += 1

        return bump

    class Counting(type(potential)):  # the estimator, counting its jvps and gradients
        __slots__ = ()

        def directional(self, x, v, idx):
            jax.debug.callback(count("directional"))
            return super().directional(x, v, idx)

        def grad(self, x, idx):
            jax.debug.callback(count("grad"))
            return super().grad(x, idx)

    return Counting(*potential)


def _run(kernel, state, potential, params, num, key=1):
    def body(s, k):
        return kernel(k, s, potential, params)

    return jax.lax.scan(body, state, jax.random.split(jax.random.key(key), num))


def test_cost_discipline_one_jvp_per_observation_and_gradient_only_on_bounces(logreg_potential):
    counter = collections.Counter()
    potential = _counting(logreg_potential, counter)
    params = _params(0.2, 2.0)
    options = SBPSOptions(k=3.0)
    state = sbps.init(jax.random.key(0), jnp.zeros(3), potential, params, options)
    assert counter["directional"] == 1
    state, info = _run(sbps.build_kernel(options), state, potential, params, 40)
    jax.block_until_ready(state)
    proposals, bounces = int(info.num_proposals.sum()), int(info.num_bounces.sum())
    refreshes, auxiliary = int(info.num_refreshes.sum()), int(info.num_auxiliary.sum())
    observations = int(info.rate_evals.sum())
    assert proposals > 50 and bounces > 5 and refreshes > 0
    assert observations == proposals + refreshes + auxiliary
    assert counter["grad"] == bounces
    assert counter["directional"] == 1 + observations
    assert int(info.data_evals.sum()) == 20 * (observations + bounces)
    assert float(info.max_rate_ratio.max()) > 0 and int(info.horizon_cap_hits.sum()) == 0
    np.testing.assert_allclose(jnp.linalg.norm(state.velocity), 1.0, rtol=1e-12)
    # the interval's time-averages of x and x² (eq. 19) come with every sample
    assert info.time_average.shape == (40, 3) and info.time_average_sq.shape == (40, 3)
    assert bool(jnp.all(info.time_average_sq >= info.time_average**2 - 1e-12))


def test_exact_reference_mode_has_no_violations():
    """Full batch on a Gaussian: G(t) is linear, so a large k never violates (exact BPS)."""
    potential, params = _gaussian_potential(), _params(1.0, 1.0)
    state = sbps.init(jax.random.key(0), jnp.ones(3), potential, params, SBPSOptions())
    state, info = _run(sbps.build_kernel(SBPSOptions(k=100.0)), state, potential, params, 300)
    assert int(info.num_bounces.sum()) > 100
    assert int(info.bound_violations.sum()) == 0
    assert not bool(info.interval_capped.any())
    np.testing.assert_allclose(info.sample_interval, 1.0)


def test_negative_slopes_trigger_auxiliary_observations():
    """A bimodal target (Supp. E): G̃ falls between modes, so look-ahead observations fire."""
    terms = lambda x, idx: (
        0.0,
        (-jnp.logaddexp(-2 * (x[0] - 1.0) ** 2, -2 * (x[0] + 1.0) ** 2) + 0.5 * x[1] ** 2)
        * jnp.ones(idx.shape[0]),
    )
    potential = build_potential(terms, dim=2, N=1, n=1, init_position=jnp.zeros(2)).estimator
    params = _params(1.0, 0.5, dim=2)
    # no gap-filling observations: every auxiliary observation is a Supp. E look-ahead
    options = SBPSOptions(k=3.0, max_observation_gap=float("inf"))
    kernel = sbps.build_kernel(options)
    state = sbps.init(jax.random.key(0), jnp.array([1.0, 0.0]), potential, params, options)
    state, info = _run(kernel, state, potential, params, 200)
    assert int(info.num_auxiliary.sum()) > 0
    assert bool(jnp.all(jnp.isfinite(state.position)))


def test_skeleton_records_bounces(logreg_potential):
    params = _params(1.0, 1.0)
    options = SBPSOptions()
    state = sbps.init(jax.random.key(0), jnp.zeros(3), logreg_potential, params, options)
    path, final = sbps.skeleton(jax.random.key(1), state, logreg_potential, params, 60, options)
    assert path.positions.shape == (61, 3)
    assert bool(jnp.all(jnp.diff(path.times) >= 0))
    assert int(path.is_event.sum()) >= int(final.num_bounces) > 0
    np.testing.assert_allclose(path.positions[-1], final.position, rtol=1e-12)


def test_psbps_warmup_adapts_the_preconditioner_and_the_interval(logreg_potential):
    """The spec's warmup sets A once, at the end of its window (0.6–0.9 of the warmup: the
    mean of the RMSprop snapshots there; mean 1, re-observation pending, running means
    restarted), keeps A = I before it, and Δ = target·t̄; the adapter stops calling it after
    warmup, which freezes them."""
    spec = declare(SBPSOptions(preconditioned=True, sample_interval=0.2))
    kernel = spec.build_kernel()
    zero = jnp.zeros(3)  # the estimator's own coordinates: no mode, no anchor, no whitening
    context = WarmupContext(zero, None, None, Whitening(zero, jnp.ones(3)), whitened=False)
    params = spec.default_params(jax.random.key(2), logreg_potential, context)
    np.testing.assert_allclose(params.sample_interval, 0.2)
    state = spec.init(jax.random.key(0), jnp.zeros(3), logreg_potential, params)
    adapt = spec.warmup_init(state, params)

    def body(carry, xs):
        state, params, adapt = carry
        iteration, key = xs
        state, info = kernel(key, state, logreg_potential, params)
        window = WarmupWindow(iteration, 30)
        state, params, adapt = spec.warmup(
            key, state, params, adapt, info, logreg_potential, window
        )
        return (state, params, adapt), (info, params.direction_scale, state.pending)

    xs = (jnp.arange(30), jax.random.split(jax.random.key(1), 30))
    (state, params, adapt), (info, scales, pending) = jax.lax.scan(body, (state, params, adapt), xs)
    np.testing.assert_array_equal(scales[:26], 1.0)  # window [18, 27): set at iteration 26
    assert int(pending[26]) == REOBSERVE_PENDING and int(adapt[1]) == 9
    scale = params.direction_scale
    assert not np.allclose(scale, 1.0) and int(info.num_bounces.sum()) > 0
    np.testing.assert_array_equal(scales[26:], np.broadcast_to(scale, (4, 3)))
    np.testing.assert_allclose(scale.mean(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(params.sample_interval, 0.2)  # given, so never adapted
    plain = declare(SBPSOptions())
    _, tuned, _ = plain.warmup(None, state, params, None, info, logreg_potential, window=None)
    np.testing.assert_allclose(tuned.sample_interval, 10.0 * state.mean_proposal_time)


def test_psbps_preconditioner_is_capped_relative_to_its_mean():
    """Within the cap A is RMSprop's eq. 17–18 normalised to mean 1; a coordinate whose
    gradients are 100x larger is held at 1/max_ratio of the others' level, and mean 1 holds."""
    square_avg = jnp.array([1e4, 1.0, 4.0, 1.0])
    free = sbps.preconditioner(square_avg, 0.0)
    inverse = 1.0 / jnp.sqrt(square_avg)
    np.testing.assert_allclose(free, inverse / inverse.mean(), rtol=1e-6)
    capped = sbps.preconditioner(square_avg, 0.0, max_ratio=3.0)
    np.testing.assert_allclose(capped.mean(), 1.0, rtol=1e-6)
    assert float(capped.max() / capped.min()) <= 9.0 + 1e-5
    assert float(free.max() / free.min()) > 90.0
    mild = jnp.array([1.0, 1.5, 2.0])  # spread within the cap: unchanged
    np.testing.assert_allclose(
        sbps.preconditioner(mild, 0.0, 3.0), sbps.preconditioner(mild, 0.0), rtol=1e-6
    )
    with pytest.raises(ValueError, match="max_scale_ratio must be >= 1"):
        SBPSOptions(max_scale_ratio=0.5)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(k=0.0), "k"),
        (dict(k=-1.0), "k"),
        (dict(refresh_rate=-0.1), "refresh_rate"),
        (dict(sample_interval=0.0), "sample_interval"),
        (dict(relative_dt=0.0), "relative_dt"),
        (dict(rmsprop_decay=1.0), "rmsprop_decay"),
        (dict(max_events_per_sample=0), "max_events_per_sample"),
        (dict(slope_prior_step_size=0.0), "slope_prior_step_size"),
        (dict(max_observation_gap=-1.0), "max_observation_gap"),
    ],
)
def test_bad_settings_raise_value_errors_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SBPSOptions(**kwargs)
    with pytest.raises(ValueError, match=name):
        SBPS(logistic_regression.model, **kwargs)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(target_proposals=0), "target_proposals"),
        (dict(buffer_size=0), "buffer_size"),
        (dict(relative_refresh_rate=-1.0), "relative_refresh_rate"),
        (dict(subsample_size=0), "subsample_size"),
    ],
)
def test_adapter_validates_its_own_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PSBPS(logistic_regression.model, **kwargs)


def test_sequential_and_vectorized_chains_give_the_same_draws():
    """Issue 18 item 3: a batched SBPS step reorders float reductions (d = 20 differs from
    the 4th step on), and the chaotic PDMP amplifies that until the chain methods disagree
    by posterior sds.  Each chain now runs the unbatched step (``sequential_vmap``)."""
    data = logistic_regression.load_data(N=500, d=20, seed=0, ill_conditioned=True)[0]
    draws = {}
    for method in ("sequential", "vectorized"):
        mcmc = MCMC(
            SBPS(logistic_regression.model, subsample_size=50),
            num_warmup=60,
            num_samples=20,
            num_chains=2,
            chain_method=method,
            progress_bar=False,
        )
        mcmc.run(jax.random.key(0), *data)
        draws[method] = np.asarray(mcmc.get_samples(group_by_chain=True)["w"])
    assert draws["sequential"].shape == (2, 20, 20)
    np.testing.assert_allclose(draws["vectorized"], draws["sequential"], rtol=1e-6)


def test_default_refresh_fraction_follows_the_gradient_noise():
    """1 of the bounce rate with exact gradients (only refreshment mixes radial directions),
    0.1 with control variates (little noise), 0.01 with plain minibatches (the paper's
    regime, whose noise randomises reflections); a user's value always wins."""
    terms = lambda x, idx: (0.5 * jnp.sum(x**2), jnp.zeros(idx.shape[0]))
    plain = build_potential(terms, dim=3, N=100, n=10, init_position=jnp.zeros(3)).estimator
    exact = build_potential(terms, dim=3, N=100, n=100, init_position=jnp.zeros(3)).estimator
    controlled = with_control_variate(plain, jnp.zeros(3))
    default = SBPSOptions()
    assert relative_refresh(default, exact) == 1.0
    assert relative_refresh(default, controlled) == 0.1
    assert relative_refresh(default, plain) == 0.01
    assert relative_refresh(SBPSOptions(relative_refresh_rate=0.5), controlled) == 0.5


def test_default_proposals_per_draw_grow_with_the_dimension():
    """Ten proposals per draw up to 30 latents, then D / 3 (the radial direction relaxes in
    O(D) events), at most 100; a given ``target_proposals`` is kept.  Counted in a run: the
    warmup sets Δ so that a draw of a 120-d Gaussian costs about 40 proposals, and about 10
    at D = 20."""
    auto = [radial_events(PROPOSALS_PER_SAMPLE, d) for d in (1, 30, 120, 304, 10**4)]
    assert auto == [10, 10, 40, 100, 100]
    assert events_per_draw(SBPSOptions().target_proposals, 120, PROPOSALS_PER_SAMPLE) == 40.0
    assert events_per_draw(SBPSOptions(target_proposals=7).target_proposals, 304) == 7.0

    per_draw = {
        dim: counters_per_draw(SBPS, dim, "num_proposals")["num_proposals"] for dim in (20, 120)
    }
    assert 7 <= per_draw[20] <= 14, per_draw
    assert 30 <= per_draw[120] <= 55, per_draw
