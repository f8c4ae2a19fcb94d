"""BPS / σBPS invariants, data accounting, warmup adaptation and validation."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from pplsamplers.estimator import build_potential
from pplsamplers.infer import BPS
from pplsamplers.kernels.pdmp import bps
from pplsamplers.kernels.pdmp.builder import ThinningOptions
from pplsamplers.kernels.pdmp.flow import reflect
from pplsamplers.kernels.pdmp.tuning import events_per_draw, radial_events, radial_refresh_rate
from pplsamplers.registry import SigmaBPS
from pplsamplers.warmup import metric as metric_module
from tests.unit.pdmp_cost import counters_per_draw

SDS = jnp.array([0.05, 1.0, 3.0])


def _gaussian_potential(sds=SDS, N=10, n=10):
    def terms(x, idx):  # N(0, diag(sds^2)) spread over N identical data terms
        return jnp.zeros(()), 0.5 * jnp.sum((x / sds) ** 2) / N * jnp.ones(idx.shape[0])

    return build_potential(terms, dim=sds.shape[0], N=N, n=n, init_position=jnp.ones_like(sds))


def test_reflections_flip_the_rate_and_keep_the_speed():
    for seed in range(5):
        kv, kg, ka = jax.random.split(jax.random.key(seed), 3)
        v = jax.random.normal(kv, (4,))
        g = jax.random.normal(kg, (4,))
        scale = jnp.exp(jax.random.normal(ka, (4,)))
        w = reflect(v, g)  # eq. (3)
        np.testing.assert_allclose(w @ g, -(v @ g), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(jnp.linalg.norm(w), jnp.linalg.norm(v), rtol=1e-12)
        w = reflect(v, scale * g)  # eq. (4): the sigma-BPS rate is (A v)·g = v·(A g)
        np.testing.assert_allclose((scale * w) @ g, -((scale * v) @ g), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(jnp.linalg.norm(w), jnp.linalg.norm(v), rtol=1e-12)


@pytest.mark.parametrize("n", [10, 4])
def test_gaussian_rate_is_linear_so_alpha_one_is_never_violated(n):
    # along the BPS flow the rate of a Gaussian target is exactly linear in t: the envelope is
    # exact with alpha = 1 in full batch (n = N); data are counted n per rate evaluation and
    # per reflection (here every minibatch term is identical, so n < N is exact as well)
    potential = _gaussian_potential(n=n).estimator
    pdmp = bps.build_pdmp(thinning=ThinningOptions(alpha=1.0))
    params = bps.make_params(
        3, sample_interval=2.0, t_init=0.01, max_extrapolation=0.1, refresh_rate=0.5
    )
    state = pdmp.init(jax.random.key(0), jnp.ones(3), potential, params)

    def body(s, k):
        return pdmp.kernel(k, s, potential, params)

    _, infos = jax.lax.scan(body, state, jax.random.split(jax.random.key(1), 50))
    assert int(infos.num_bounces.sum()) > 10
    assert int(infos.bound_violations.sum()) == 0
    np.testing.assert_array_equal(infos.data_evals, (infos.rate_evals + infos.num_bounces) * n)
    np.testing.assert_array_equal(infos.num_proposals, infos.num_bounces)  # all accepted


def test_sigma_bps_moves_along_a_v_and_reflects_with_a_grad():
    potential = _gaussian_potential().estimator
    params = bps.make_params(
        3,
        direction_scale=SDS,
        sample_interval=3.0,
        t_init=0.1,
        max_extrapolation=1.0,
        refresh_rate=0.0,
    )
    pdmp = bps.build_pdmp(thinning=ThinningOptions(alpha=1.0))
    state = pdmp.init(jax.random.key(0), jnp.ones(3), potential, params)
    sk = pdmp.skeleton(jax.random.key(1), state, potential, params, 30)
    steps = jnp.diff(sk.positions, axis=0)
    dts = jnp.diff(sk.times)
    np.testing.assert_allclose(steps, SDS * sk.velocities[:-1] * dts[:, None], atol=1e-12)
    speeds = jnp.linalg.norm(sk.velocities, axis=1)
    np.testing.assert_allclose(speeds, speeds[0], rtol=1e-10)  # no refreshment: |v| is kept
    assert bool(jnp.any(sk.is_event))


def test_adapter_warmup_adapts_then_freezes():
    potential = _gaussian_potential()
    # raw coordinates (no whitening), so that A estimates the posterior sds themselves
    kernel = SigmaBPS(
        potential=potential, subsample_size=10, precondition=None, target_evals_per_sample=15
    )
    mcmc = MCMC(kernel, num_warmup=200, num_samples=200, progress_bar=False)
    mcmc.warmup(jax.random.key(0), collect_warmup=True, extra_fields=("sample_interval",))
    warm = np.asarray(mcmc.get_samples()["x"])
    scale = mcmc.last_state.params.direction_scale
    # A = Welford sd of the warmup draws in the window [0.3, 0.7) of the warmup
    np.testing.assert_allclose(scale, warm[60:140].std(0, ddof=1), rtol=1e-8)
    assert np.all((np.asarray(scale) > SDS / 3) & (np.asarray(scale) < 3 * SDS))
    interval = np.asarray(mcmc.get_extra_fields()["sample_interval"])
    assert np.ptp(interval[140:]) > 0  # Delta still adapts after A is set
    mcmc.run(mcmc.post_warmup_state.rng_key, extra_fields=("sample_interval", "rate_evals"))
    extra = mcmc.get_extra_fields()
    assert np.ptp(np.asarray(extra["sample_interval"])) == 0  # frozen after warmup
    np.testing.assert_array_equal(mcmc.last_state.params.direction_scale, scale)
    # Delta was tuned so that a sample costs about the target number of evaluations
    assert 15 / 2 < float(np.mean(extra["rate_evals"])) < 15 * 2


def _heavy_tailed(y):
    numpyro.sample("x", dist.StudentT(3.0, 0.0, 1.0))  # far from its Laplace approximation
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y[idx])


def test_sigma_bps_estimates_a_after_the_last_metric_refinement():
    """Where the chains refine the shared warmup's metric (a t₃ posterior), A is the Welford
    sd of the draws after the last refinement (iterations 250-299 of 300), in the final
    coordinates: estimated in a window the refinement rescales, it counted the same variance
    twice (on the 304-d hierarchical model of the robustness suite A reached 2.0)."""
    kernel = SigmaBPS(_heavy_tailed, subsample_size=200, control_variate=False)
    mcmc = MCMC(kernel, num_warmup=300, num_samples=5, progress_bar=False)
    mcmc.warmup(jax.random.key(2), y=jnp.zeros(200), collect_warmup=True)
    assert metric_module.window_ends(300)[-1] == 249
    final = mcmc.last_state.metric
    assert mcmc.last_state.metric_stats is not None  # the metric was refined
    x = np.asarray(mcmc.get_samples()["x"])
    z = (x - float(final.center[0])) / float(np.reshape(final.factor, -1)[0])
    scale = np.asarray(mcmc.last_state.params.direction_scale)
    np.testing.assert_allclose(scale, [z[250:].std(ddof=1)], rtol=1e-6)


def test_plain_bps_keeps_identity_preconditioner():
    mcmc = MCMC(
        BPS(potential=_gaussian_potential(), subsample_size=10, precondition=None),
        num_warmup=20,
        num_samples=5,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0))
    np.testing.assert_array_equal(mcmc.last_state.params.direction_scale, jnp.ones(3))


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"thinning": {"alpha": 0.99}}, "alpha"),
        ({"refresh_rate": -0.1}, "refresh_rate"),
        ({"sample_interval": 0.0}, "sample_interval"),
        ({"velocity_scale": 0.0}, "velocity_scale"),
        ({"target_evals_per_sample": -1.0}, "target_evals_per_sample"),
        ({"t_init": -1.0}, "t_init"),
        ({"max_extrapolation": 0.0}, "max_extrapolation"),
        ({"thinning": {"max_evaluations": 0}}, "max_evaluations"),
        ({"welford_window": (0.8, 0.2)}, "welford_window"),
        ({"t_init_fraction": 0.0}, "t_init_fraction"),
        ({"thinning": {"min_gap": -1.0}}, "min_gap"),
    ],
)
def test_invalid_arguments_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        BPS(lambda: None, **kwargs)
    with pytest.raises(ValueError, match=name):
        SigmaBPS(lambda: None, **kwargs)


def test_kernel_level_validation():
    with pytest.raises(ValueError, match="alpha"):
        bps.build_pdmp(thinning=ThinningOptions(alpha=0.5))
    with pytest.raises(ValueError, match="velocity_scale"):
        bps.build_pdmp(velocity_scale=0.0)
    times = dict(sample_interval=1.0, t_init=0.1, max_extrapolation=1.0, refresh_rate=1.0)
    with pytest.raises(ValueError, match="refresh_rate"):
        bps.make_params(3, **{**times, "refresh_rate": -1.0})
    with pytest.raises(ValueError, match="sample_interval"):
        bps.make_params(3, **{**times, "sample_interval": 0.0})
    with pytest.raises(ValueError, match="direction_scale"):
        bps.make_params(3, direction_scale=jnp.ones(2), **times)


def test_default_evals_per_draw_grow_with_the_dimension_for_straight_flows_only():
    """BPS and sigmaBPS spend 20 rate evaluations per draw up to 30 latents, then 20 D / 30
    (their radial direction relaxes in O(D) events), at most 200, and refresh at rate
    √(D / 30) (only refreshments move it); the Boomerang keeps 20 at every D; a given target
    is kept.  Counted in a run: about 80 per draw of a 120-d Gaussian, about 20 at D = 10."""
    assert [radial_events(20, d) for d in (1, 30, 120, 304, 10**4)] == [20, 20, 80, 200, 200]
    assert events_per_draw("auto", 120, radial=True) == 80.0
    assert events_per_draw("auto", 120, radial=False) == 20.0
    assert events_per_draw(7, 120, radial=True) == 7.0

    fields = ("rate_evals", "num_refreshes", "sample_interval")
    counted = {dim: counters_per_draw(BPS, dim, *fields) for dim in (10, 120)}
    per_draw = {dim: c["rate_evals"] for dim, c in counted.items()}
    assert 14 <= per_draw[10] <= 28, per_draw
    assert 56 <= per_draw[120] <= 110, per_draw
    # the refresh rate per unit time: 1 up to 30 latents, then √(D / 30), at most √10
    assert [radial_refresh_rate("auto", d) for d in (1, 30, 120)] == [1.0, 1.0, 2.0]
    assert radial_refresh_rate("auto", 10**4) == pytest.approx(10**0.5)
    assert radial_refresh_rate(0.5, 120) == 0.5
    assert radial_refresh_rate("auto", 304, radial=False) == 1.0  # the Boomerang's
    rates = {dim: c["num_refreshes"] / c["sample_interval"] for dim, c in counted.items()}
    # Poisson counts over 100 draws of a few time units each: within ±30 %
    assert 0.7 <= rates[10] <= 1.3 and 1.4 <= rates[120] <= 2.6, rates
