"""Adaptive interpolation thinning (pplsamplers.kernels.pdmp.interpolation, Goan et al. Alg. 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from pplsamplers.kernels.pdmp.builder import ThinningOptions
from pplsamplers.kernels.pdmp.interpolation import (
    Envelope,
    envelope_rate,
    fresh_envelope,
    interpolation_thinning,
)
from pplsamplers.kernels.pdmp.lack_of_fit import curvature, no_fit, observe
from pplsamplers.kernels.pdmp.poisson import integrated_linear_rate, linear_rate_arrival


def _envelope(time, rate, slope, noise=0.0, slope_noise=0.0, gap=0.25, fit=None):
    return Envelope(
        jnp.asarray(time),
        jnp.asarray(rate),
        jnp.asarray(slope),
        jnp.asarray(True),
        jnp.asarray(False),
        jnp.asarray(noise),
        jnp.asarray(slope_noise),
        jnp.asarray(gap),
        no_fit() if fit is None else fit,
    )


def _thin(rate, key=0, envelope=None, **kw):
    config = dict(horizon=50.0, alpha=1.0, t_init=0.25, max_extrapolation=5.0)
    config.update(kw)
    fn = lambda k, t: (rate(t), 0.0, ())
    return interpolation_thinning(jax.random.key(key), fn, envelope or fresh_envelope(), **config)


@pytest.mark.parametrize(
    "time,rate,slope,now,alpha,noise",
    [
        (0.0, 1.0, 2.0, 0.0, 1.0, 0.0),  # growing
        (0.0, 3.0, -1.0, 0.5, 1.5, 0.0),  # decaying
        (-1.0, -2.0, 3.0, 0.0, 2.0, 0.0),  # negative now, crosses zero later
        (0.0, 0.0, 0.0, 0.0, 1.0, 0.7),  # flat, from the noise margin only
        (0.0, 5.0, 0.0, 1.0, 1.2, 0.0),
    ],  # constant
)
def test_envelope_segments_invert_their_integrated_rate_exactly(
    time, rate, slope, now, alpha, noise
):
    env = _envelope(time, rate, slope, noise, slope_noise=0.5 * noise)
    h0, a = envelope_rate(env, jnp.asarray(now), alpha, noise_margin=2.0)
    np.testing.assert_allclose(
        h0, alpha * (rate + slope * (now - time)) + 2.0 * noise * (1 + 0.5 * (now - time))
    )
    np.testing.assert_allclose(a, alpha * slope + 2.0 * 0.5 * noise)
    for E in (1e-3, 0.3, 1.0, 4.0):
        wait = linear_rate_arrival(h0, a, E)
        if np.isfinite(wait):
            np.testing.assert_allclose(integrated_linear_rate(h0, a, wait), E, rtol=1e-12)
            # and the envelope is positive just before the arrival (a proposal is in its support)
            assert float(h0 + a * wait) > 0
        else:  # no arrival: a decaying envelope whose whole mass is below E
            assert float(a) < 0 or float(h0) <= 0
            total = integrated_linear_rate(h0, a, 1e6)
            assert float(total) < E


def test_decaying_envelope_never_reaching_E_gives_no_arrival():
    # h = [1 - s]_+ has total mass 1/2
    assert np.isinf(float(linear_rate_arrival(1.0, -1.0, 0.6)))
    np.testing.assert_allclose(integrated_linear_rate(1.0, -1.0, 0.999999), 0.5, atol=1e-6)


def test_linear_rate_is_interpolated_exactly_and_never_violated():
    # G(t) = 1 + 2t is its own interpolation: with alpha = 1 every proposal is accepted
    outs = jax.vmap(
        lambda k: interpolation_thinning(
            k,
            lambda kk, t: (1.0 + 2.0 * t, 0.0, ()),
            fresh_envelope(),
            horizon=50.0,
            alpha=1.0,
            t_init=0.25,
            max_extrapolation=5.0,
        )
    )(jax.random.split(jax.random.key(0), 200))
    assert bool(jnp.all(outs.accepted))
    assert int(outs.stats.violations.sum()) == 0
    assert int(outs.stats.proposals.max()) == 1
    assert bool(jnp.all(outs.stats.rate_evals == 3))  # t0, t_init, one proposal


def test_first_event_time_is_exact_when_the_envelope_bounds_the_rate():
    # concave rate: a secant extrapolated beyond its newer point lies above it; inside the
    # first segment [0, t_init] it lies below by at most 0.01, which alpha = 1.1 covers, so
    # thinning is exact.  Compare the event times with the exact law P(T > t) = exp(-Lambda(t))
    # by a Kolmogorov-Smirnov test.
    rate = lambda t: 2.0 - (t - 1.0) ** 2

    def lam(t):
        return integrate.quad(lambda s: max(rate(s), 0.0), 0.0, t, limit=200)[0]

    keys = jax.random.split(jax.random.key(42), 4000)
    outs = jax.jit(
        jax.vmap(
            lambda k: interpolation_thinning(
                k,
                lambda kk, t: (rate(t), 0.0, ()),
                fresh_envelope(),
                horizon=50.0,
                alpha=1.1,
                t_init=0.2,
                max_extrapolation=5.0,
            )
        )
    )(keys)
    assert int(outs.stats.violations.sum()) == 0
    times = np.asarray(outs.time)[np.asarray(outs.accepted)]
    total = lam(1 + np.sqrt(2.0))
    # events happen before the rate dies with probability 1 - exp(-total)
    assert abs(np.mean(np.asarray(outs.accepted)) - (1 - np.exp(-total))) < 4 * np.sqrt(
        np.exp(-total) * (1 - np.exp(-total)) / len(keys)
    )
    grid = np.linspace(0, 1 + np.sqrt(2.0), 400)
    cdf_grid = (1 - np.exp(-np.array([lam(t) for t in grid]))) / (1 - np.exp(-total))
    cdf = lambda t: np.interp(t, grid, cdf_grid)
    assert stats.kstest(times, cdf).pvalue > 1e-3


def test_violations_are_counted_and_alpha_reduces_them():
    # convex rate: linear extrapolation undershoots, so the envelope is violated
    rate = lambda kk, t: (jnp.exp(3.0 * t) - 1.5, 0.0, ())
    keys = jax.random.split(jax.random.key(7), 2000)

    def violations(alpha):
        run = jax.vmap(
            lambda k: interpolation_thinning(
                k,
                rate,
                fresh_envelope(),
                horizon=50.0,
                alpha=alpha,
                t_init=0.3,
                max_extrapolation=5.0,
            )
        )
        out = run(keys)
        return int(out.stats.violations.sum()), float(out.stats.max_ratio.max())

    v1, r1 = violations(1.0)
    v2, _ = violations(2.0)
    v4, _ = violations(4.0)
    assert v1 > 0 and r1 > 1.0
    assert v1 > v2 > v4


def test_horizon_cap_moves_on_and_reinitialises():
    # G = -1 everywhere: no proposal, the envelope is re-initialised every max_extrapolation
    out = _thin(lambda t: -1.0 + 0.0 * t, horizon=1.0, max_extrapolation=0.3)
    assert not bool(out.accepted) and bool(out.reached_horizon)
    np.testing.assert_allclose(out.time, 1.0)
    assert int(out.stats.horizon_cap_hits) == 3  # at 0.3, 0.6, 0.9
    assert int(out.stats.proposals) == 0
    # 2 evaluations to start, then 2 per re-initialisation (cap point + t_init point)
    assert int(out.stats.rate_evals) == 2 + 2 * 3


def test_proposal_cap_returns_without_event_and_the_envelope_carries_over():
    rate = lambda t: 1.0 + 2.0 * t
    first = _thin(rate, max_evaluations=2)
    assert int(first.stats.proposal_cap_hits) == 1
    assert not bool(first.accepted) and not bool(first.reached_horizon)
    assert float(first.time) == 0.0 and bool(first.envelope.valid)
    np.testing.assert_allclose(first.envelope.slope, 2.0)
    second = _thin(rate, key=1, envelope=first.envelope)
    assert bool(second.accepted) and int(second.stats.rate_evals) == 1


def test_envelope_times_shift_when_stopping_at_the_horizon():
    out = _thin(lambda t: 0.01 + 0.0 * t, horizon=0.5, max_extrapolation=10.0)
    if bool(out.reached_horizon):
        np.testing.assert_allclose(out.envelope.time, -0.5)
        assert bool(out.envelope.valid)


def test_known_start_rate_saves_an_evaluation():
    out = _thin(lambda t: 1.0 + 2.0 * t, envelope=fresh_envelope(start_rate=1.0))
    assert int(out.stats.rate_evals) == 2 and bool(out.accepted)


def test_invalid_settings_raise_naming_the_argument():
    with pytest.raises(ValueError, match="alpha"):
        ThinningOptions(alpha=0.9)
    with pytest.raises(ValueError, match="max_evaluations"):
        ThinningOptions(max_evaluations=1)
    with pytest.raises(ValueError, match="max_events_per_sample"):
        ThinningOptions(max_events_per_sample=0)
    with pytest.raises(ValueError, match="min_gap"):
        ThinningOptions(min_gap=-1.0)
    with pytest.raises(ValueError, match="noise_margin"):
        ThinningOptions(noise_margin=-1.0)
    with pytest.raises(ValueError, match="fit_margin"):
        ThinningOptions(fit_margin=-1.0)


def test_fit_margin_adds_its_slope_from_the_newest_point():
    # kappa = 2 learned from one residual (see lack_of_fit.observe); H = 1, |delta| = 0.25,
    # k_fit = 2: b = 2 * 2 * (1 + 0.25) / 2 = 2.5, added to the slope from t_n on
    fit = observe(no_fit(), jnp.asarray(2.0), 1.0, -1.0, 0.0, jnp.asarray(True))
    env = _envelope(0.0, 1.0, 2.0, fit=fit)
    h0, a = envelope_rate(env, jnp.asarray(0.4), 1.5, fit_margin=2.0, max_extrapolation=1.0)
    np.testing.assert_allclose([h0, a], [1.5 * (1 + 2 * 0.4) + 2.5 * 0.4, 1.5 * 2 + 2.5])
    h0, a = envelope_rate(env, jnp.asarray(0.4), 1.5, max_extrapolation=1.0)  # k_fit = 0
    np.testing.assert_allclose([h0, a], [1.5 * (1 + 2 * 0.4), 1.5 * 2])


def test_lack_of_fit_learns_the_curvature_of_a_quadratic_rate():
    # G = 1 + t + t^2 (G'' = 2): every secant extrapolation misses by exactly k w, so the
    # learned root-mean-square curvature is 2; a linear rate leaves it at 0 (alpha = 50
    # makes most proposals rejections, so one call observes many residuals)
    def learned(rate):
        out = interpolation_thinning(
            jax.random.key(3),
            lambda k, t: (rate(t), 0.0, ()),
            fresh_envelope(),
            horizon=20.0,
            alpha=50.0,
            t_init=0.1,
            max_extrapolation=0.5,
            max_evaluations=50,
        )
        assert int(out.envelope.fit.count) > 3
        return float(curvature(out.envelope.fit))

    np.testing.assert_allclose(learned(lambda t: 1.0 + t + t**2), 2.0, rtol=1e-6)
    assert learned(lambda t: 1.0 + 2.0 * t) < 1e-6


def test_fit_margin_bounds_a_rate_that_curves_up():
    # a cubic rate G(t) = (t - 1)^3 + 0.1 (a BPS rate on a quartic target has this form):
    # the secant falls below it; after the curvature has been learned (one warm-up call whose
    # envelope statistics are carried over), k_fit = 3 leaves no violation on [0, 2]
    rate = lambda k, t: ((t - 1.0) ** 3 + 0.1, 0.0, ())
    keys = jax.random.split(jax.random.key(11), 1000)

    def run(key, fit_margin):
        warm_key, key = jax.random.split(key)
        config = dict(horizon=2.0, alpha=1.0, t_init=0.1, max_extrapolation=0.5)
        warm = interpolation_thinning(warm_key, rate, fresh_envelope(), **config)
        start = fresh_envelope(fit=warm.envelope.fit)
        return interpolation_thinning(key, rate, start, fit_margin=fit_margin, **config)

    plain = jax.jit(jax.vmap(lambda k: run(k, 0.0)))(keys)
    fitted = jax.jit(jax.vmap(lambda k: run(k, 3.0)))(keys)
    assert int(plain.stats.violations.sum()) > 50
    assert int(fitted.stats.violations.sum()) == 0


def test_noise_margin_recovers_the_event_rate_of_a_noisy_rate():
    # a noisy rate estimate G~ = 1 + 3 Z (fresh Z at every evaluation, like a minibatch):
    # exact thinning of the random rate gives events at rate E[1 + 3Z]_+ = 1.7631 (a local
    # BPS over minibatch "factors"), so the first event time has mean 1 / 1.7631.  Two-point
    # interpolation of noisy values (Alg. 2 as printed) misses events; the noise margin and
    # the slope guard restore the rate.
    exact_mean = 1.0 / (stats.norm.cdf(1 / 3) + 3 * stats.norm.pdf(1 / 3))

    def rate(key, t):
        return 1.0 + 3.0 * jax.random.normal(key, dtype=jnp.float64), 3.0, ()

    def first_event_times(noise_margin, min_gap):
        run = jax.jit(
            jax.vmap(
                lambda k: interpolation_thinning(
                    k,
                    rate,
                    fresh_envelope(),
                    horizon=1e6,
                    alpha=1.0,
                    t_init=0.2,
                    max_extrapolation=1.0,
                    noise_margin=noise_margin,
                    min_gap=min_gap,
                )
            )
        )
        out = run(jax.random.split(jax.random.key(5), 4000))
        assert bool(jnp.all(out.accepted))
        return np.asarray(out.time)

    plain = first_event_times(0.0, 0.0)
    guarded = first_event_times(3.0, 1.0)
    se = exact_mean / np.sqrt(4000)
    assert plain.mean() > exact_mean + 6 * se  # events are missed
    assert abs(guarded.mean() - exact_mean) < 4 * se
