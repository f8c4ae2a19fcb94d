"""Invariants of the shared PDMP core (pplsamplers.kernels.pdmp): flows, reflections, refreshment,
exact Poisson inversion (linear and piecewise-linear rates), the grid driver's exact
time-averages (SBPS eq. 19), and the skeleton / integrate pair."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from pplsamplers.kernels.pdmp.driver import advance, integrate, run_skeleton
from pplsamplers.kernels.pdmp.flow import linear_flow, reflect, refresh_sphere
from pplsamplers.kernels.pdmp.poisson import integrated_linear_rate, linear_rate_arrival
from pplsamplers.kernels.pdmp.thinning import piecewise_linear_arrival


# ---------------------------------------------------------------------------- flows
def test_linear_flow_moves_along_scaled_direction_and_integrates_exactly():
    scale = jnp.array([0.5, 2.0])
    flow = linear_flow(scale)
    x, v, t = jnp.array([1.0, -1.0]), jnp.array([0.6, 0.8]), 1.7
    np.testing.assert_allclose(flow.move(x, v, t)[0], x + scale * v * t)
    first, second = flow.moments(x, v, t)
    grid = np.linspace(0.0, t, 20001)
    path = np.asarray(x)[None] + np.asarray(scale * v)[None] * grid[:, None]
    np.testing.assert_allclose(first, np.trapezoid(path, grid, axis=0), rtol=1e-7)
    np.testing.assert_allclose(second, np.trapezoid(path**2, grid, axis=0), rtol=1e-7)


@pytest.mark.parametrize("metric", [None, jnp.array([0.3, 1.0, 2.5])])
def test_reflection_keeps_norm_and_flips_directional_derivative(metric):
    v = jax.random.normal(jax.random.key(0), (50, 3))
    g = jax.random.normal(jax.random.key(1), (50, 3))
    out = jax.vmap(lambda a, b: reflect(a, b, metric))(v, g)
    inverse = 1.0 if metric is None else 1.0 / metric
    # |v| (or vᵀM⁻¹v) is kept and v·g changes sign; reflecting twice is the identity
    np.testing.assert_allclose(jnp.sum(inverse * out**2, 1), jnp.sum(inverse * v**2, 1), rtol=1e-12)
    np.testing.assert_allclose(jnp.sum(out * g, 1), -jnp.sum(v * g, 1), rtol=1e-10, atol=1e-12)
    back = jax.vmap(lambda a, b: reflect(a, b, metric))(out, g)
    np.testing.assert_allclose(back, v, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(reflect(v[0], jnp.zeros(3)), v[0])


def test_psbps_reflection_eq16_flips_v_dot_A_grad():
    # pSBPS (eq. 16): v_r = v − 2 (v·A∇U) A∇U / |A∇U|²  ==  reflect(v, A∇U)
    scale, grad = jnp.array([0.4, 1.3, 1.3]), jnp.array([2.0, -1.0, 0.5])
    v = refresh_sphere(jax.random.key(3), 3)
    out = reflect(v, scale * grad)
    np.testing.assert_allclose(jnp.linalg.norm(out), 1.0, rtol=1e-12)
    np.testing.assert_allclose(out @ (scale * grad), -(v @ (scale * grad)), rtol=1e-10)


def test_refresh_sphere_is_unit_and_isotropic():
    draws = jax.vmap(lambda k: refresh_sphere(k, 4))(jax.random.split(jax.random.key(1), 4000))
    np.testing.assert_allclose(jnp.linalg.norm(draws, axis=1), 1.0, rtol=1e-12)
    # E[v vᵀ] = I/D; 4000 draws: sd of each diagonal entry ≈ 0.0035, so 0.02 is > 5 sd
    np.testing.assert_allclose(draws.T @ draws / 4000, jnp.eye(4) / 4, atol=0.02)


# --------------------------------------------------------------- Poisson inversion
@pytest.mark.parametrize(
    "rate0, slope",
    [(2.0, 0.0), (1.0, 3.0), (0.0, 2.0), (-1.5, 2.0), (3.0, -0.5), (-0.5, -1.0), (0.2, -4.0)],
)
def test_integrated_rate_at_sampled_time_equals_the_exponential_draw(rate0, slope):
    draws = jax.random.exponential(jax.random.key(7), (500,))
    times = linear_rate_arrival(rate0, slope, draws)
    total = integrated_linear_rate(rate0, slope, 1e9) if slope < 0 else jnp.inf
    finite = jnp.isfinite(times)
    # arrival exists exactly when the total mass exceeds E
    np.testing.assert_array_equal(finite, draws < total)
    mass = integrated_linear_rate(rate0, slope, jnp.where(finite, times, 0.0))
    np.testing.assert_allclose(mass[finite], draws[finite], rtol=1e-10, atol=1e-12)


def _ks_pvalue(samples, cdf):
    return stats.kstest(np.asarray(samples), cdf).pvalue


@pytest.mark.parametrize("rate0, slope", [(0.5, 1.0), (-1.0, 2.0), (2.0, -0.5)])
def test_sampled_times_follow_the_analytic_cdf(rate0, slope):
    """KS test against F(s) = 1 − exp(−Λ(s)), conditioned on arrival (fixed key)."""
    draws = jax.random.exponential(jax.random.key(11), (4000,))
    times = np.asarray(linear_rate_arrival(rate0, slope, draws))
    total = float(integrated_linear_rate(rate0, slope, 1e9)) if slope < 0 else np.inf
    arrival_probability = 1.0 - np.exp(-total)

    def cdf(s):
        mass = np.asarray(integrated_linear_rate(rate0, slope, jnp.asarray(s)))
        return (1.0 - np.exp(-mass)) / arrival_probability

    finite = times[np.isfinite(times)]
    # the fraction of arrivals is binomial(4000, P(arrival)); 5 sd bound
    sd = np.sqrt(arrival_probability * (1 - arrival_probability) / 4000)
    assert abs(finite.size / 4000 - arrival_probability) < 5 * sd + 1e-12
    assert _ks_pvalue(finite, cdf) > 0.01


def test_ks_detects_a_wrong_rate():
    # the KS test above has power: times drawn for slope 1 are rejected against slope 2
    draws = jax.random.exponential(jax.random.key(11), (4000,))
    times = np.asarray(linear_rate_arrival(0.5, 1.0, draws))
    wrong = lambda s: 1.0 - np.exp(-np.asarray(integrated_linear_rate(0.5, 2.0, jnp.asarray(s))))
    assert _ks_pvalue(times, wrong) < 1e-6


# -------------------------------------------------- piecewise-linear (thinning) bound
def _band(s):
    # a convex band with a negative start, a zero crossing and a negative-slope segment
    return jnp.abs(s - 1.0) * 2.0 - 0.5 + 0.3 * s


def _positive_line_mass(r0, r1, length):
    """∫ over a segment of [linear from r0 to r1]_+ (numpy reference, no shared code)."""
    if r0 >= 0 and r1 >= 0:
        return length * (r0 + r1) / 2
    if r0 <= 0 and r1 <= 0:
        return 0.0
    crossing = length * r0 / (r0 - r1)
    return r0 * crossing / 2 if r0 > 0 else r1 * (length - crossing) / 2


def _np_band(s):
    return np.abs(s - 1.0) * 2.0 - 0.5 + 0.3 * s


def _interpolated_mass(s, spacing):
    knots = np.unique(np.append(np.minimum(np.arange(0.0, s + spacing, spacing), s), s))
    rates = _np_band(knots)
    return sum(
        _positive_line_mass(r0, r1, right - left)
        for left, right, r0, r1 in zip(knots[:-1], knots[1:], rates[:-1], rates[1:], strict=True)
    )


def test_piecewise_arrival_integrates_to_the_exponential_draw():
    spacing = 0.13
    for e in [0.05, 0.4, 1.0, 2.5, 6.0]:
        out = piecewise_linear_arrival(
            _band, jnp.asarray(e), jnp.inf, lambda s: spacing, block_size=4
        )
        assert bool(out.arrived) and not bool(out.capped)
        # the knots are multiples of the spacing from 0, so the interpolant is known exactly
        np.testing.assert_allclose(_interpolated_mass(float(out.time), spacing), e, rtol=1e-9)
        knots = np.arange(0.0, float(out.time) + spacing, spacing)
        j = np.searchsorted(knots, float(out.time), side="right") - 1
        left, right = knots[j], knots[j] + spacing
        r0, r1 = _np_band(left), _np_band(right)
        expected = max(r0 + (r1 - r0) * (float(out.time) - left) / spacing, 0.0)
        np.testing.assert_allclose(out.rate, expected, rtol=1e-9)


def test_piecewise_arrival_cdf_ks():
    spacing = 0.25
    draws = jax.random.exponential(jax.random.key(5), (3000,))
    sample = jax.vmap(
        lambda e: piecewise_linear_arrival(_band, e, jnp.inf, lambda s: spacing).time
    )(draws)
    grid = np.linspace(0.0, 8.0, 801)
    masses = np.array([_interpolated_mass(g, spacing) if g > 0 else 0.0 for g in grid])
    cdf = lambda s: np.interp(s, grid, 1.0 - np.exp(-masses))
    assert _ks_pvalue(sample, cdf) > 0.01


def test_piecewise_arrival_respects_horizon_and_cap():
    beyond = piecewise_linear_arrival(lambda s: 0.0 * s + 1.0, jnp.asarray(5.0), 2.0, lambda s: 0.1)
    assert not bool(beyond.arrived) and not bool(beyond.capped)
    np.testing.assert_allclose(beyond.time, 2.0)
    capped = piecewise_linear_arrival(
        lambda s: 0.0 * s - 1.0,
        jnp.asarray(1.0),
        jnp.inf,
        lambda s: 0.1,
        block_size=4,
        max_blocks=3,
    )
    assert bool(capped.capped) and not bool(capped.arrived)
    np.testing.assert_allclose(capped.time, 1.2)
    assert int(capped.num_knots) == 12


# ------------------------------------------------------------- driver and skeleton
def _bounce_every(period):
    def next_event(key, x, v, state, horizon):
        dt = jnp.minimum(period, horizon)
        hit = dt >= period
        return dt, jnp.where(hit, -v, v), state, hit

    return next_event


def test_advance_time_averages_are_exact_segment_integrals():
    flow = linear_flow()
    out = advance(
        jax.random.key(0),
        jnp.array([0.0, 1.0]),
        jnp.array([1.0, 0.5]),
        (),
        interval=2.5,
        next_event=_bounce_every(1.0),
        flow=flow,
    )
    # path: x0 goes 0→1→0→0.5; x1 goes 1→1.5→1→1.25
    grid = np.linspace(0.0, 2.5, 250001)
    tri = np.where(grid < 1, grid, np.where(grid < 2, 2 - grid, grid - 2))
    path = np.stack([tri, 1.0 + 0.5 * tri], axis=1)
    np.testing.assert_allclose(out.position, path[-1], atol=1e-12)
    np.testing.assert_allclose(out.mean, np.trapezoid(path, grid, axis=0) / 2.5, rtol=1e-8)
    np.testing.assert_allclose(out.mean_sq, np.trapezoid(path**2, grid, axis=0) / 2.5, rtol=1e-8)
    assert not bool(out.capped) and float(out.time_covered) == 2.5


def test_skeleton_and_integrate_agree_with_advance():
    flow = linear_flow(jnp.array([1.0, 2.0]))
    x0, v0 = jnp.array([0.2, -0.1]), jnp.array([0.6, -0.8])
    skeleton, _ = run_skeleton(
        jax.random.key(0), x0, v0, (), next_event=_bounce_every(0.7), flow=flow, num_iterations=6
    )
    assert skeleton.positions.shape == (7, 2) and bool(skeleton.is_event[1])
    np.testing.assert_allclose(skeleton.times[-1], 4.2)
    out = advance(
        jax.random.key(0), x0, v0, (), interval=4.2, next_event=_bounce_every(0.7), flow=flow
    )
    np.testing.assert_allclose(integrate(skeleton, lambda x: x, flow), out.mean, rtol=1e-10)
    np.testing.assert_allclose(integrate(skeleton, lambda x: x**2, flow), out.mean_sq, rtol=1e-10)


# ------------------------------------------------------------------ the one builder
def test_builder_gives_one_info_and_a_skeleton_that_matches_the_kernel_flow():
    from pplsamplers.estimator import build_estimator
    from pplsamplers.kernels.pdmp import boomerang, bps
    from pplsamplers.kernels.pdmp.builder import ThinningOptions
    from pplsamplers.kernels.pdmp.events import PDMPInfo
    from pplsamplers.kernels.pdmp.reference import gaussian_reference

    terms = lambda x, idx: (x @ x, jnp.zeros(idx.shape[0]))  # N(0, I/2): bounces
    potential = build_estimator(terms, dim=2, N=1, n=1)
    # the former defaults of make_params (its times are required now)
    bps_times = dict(sample_interval=1.0, t_init=0.1, max_extrapolation=1.0)
    boomerang_times = dict(sample_interval=1.0, t_init=0.25, max_extrapolation=0.5)
    reference = gaussian_reference(jnp.zeros(2), jnp.ones(2))
    declared = [
        (
            bps.build_pdmp(thinning=ThinningOptions(alpha=1.0)),
            bps.make_params(2, refresh_rate=0.0, **bps_times),
        ),
        (
            boomerang.build_pdmp(),
            boomerang.make_params(reference, refresh_rate=0, **boomerang_times),
        ),
    ]
    for pdmp, params in declared:
        state = pdmp.init(jax.random.key(0), jnp.ones(2), potential, params)
        _, info = pdmp.kernel(jax.random.key(1), state, potential, params)
        assert isinstance(info, PDMPInfo) and int(info.num_auxiliary) == 0
        assert int(info.data_evals) == int(info.rate_evals + info.num_bounces)
        path = pdmp.skeleton(jax.random.key(1), state, potential, params, 20)
        assert bool(jnp.any(path.is_event)) and bool(jnp.all(jnp.diff(path.times) >= 0))
