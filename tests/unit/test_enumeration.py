"""Discrete sites marked for enumeration: marginalised datum by datum (the per-datum terms
against the closed form and against NumPyro's own enumerated log density), refused with the
fix where they are not marked or cannot be subsampled, and run by a kernel through MCMC."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.contrib.funsor import config_enumerate
from numpyro.infer import MCMC, Predictive
from numpyro.infer.util import initialize_model

from models import mixture
from pplsamplers import SAMPLERS, SGLD, AutoSampler, make_kernel
from pplsamplers.diagnostics.fixes import LABEL_SWITCHING_FIX, model_hints
from pplsamplers.infer.monitor import kernel_hints
from pplsamplers.model import FullDataOnlyError, inspect, make_potential

N = 400


@pytest.fixture(scope="module")
def mixture_data():
    return mixture.load_data(N=N, dtype=jnp.float64)[0][0]


@config_enumerate
def indexed_mixture(y):
    """The mixture with a subsample plate whose data are indexed (``y[idx]``)."""
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    mu = numpyro.sample("mu", dist.Normal(70.0, 50.0).expand([3]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(20.0))
    with numpyro.plate("data", y.shape[0], subsample_size=50) as idx:
        z = numpyro.sample("z", dist.Categorical(w))
        numpyro.sample("y", dist.Normal(mu[z], sigma), obs=y[idx])


def _closed_form(w, mu, sigma, y):
    return -jax.scipy.special.logsumexp(
        jnp.log(w) + dist.Normal(mu, sigma).log_prob(y[:, None]), -1
    )


@pytest.mark.parametrize("model", [mixture.model, indexed_mixture], ids=["plain", "indexed"])
def test_per_datum_terms_are_the_marginal_log_sum_exp(model, mixture_data):
    view = inspect(model, (mixture_data,), {})
    assert view.info.enumerated == ("z",)
    assert view.info.latent_names == ("w", "mu", "sigma")
    # an unordered mixture's failed R-hat suggests ordering it (label switching)
    unordered = model is indexed_mixture
    assert view.info.ordered_sites == (() if unordered else ("mu",))
    hints = model_hints(view.info.enumerated, view.info.ordered_sites)
    assert hints == ({"rhat": (LABEL_SWITCHING_FIX,)} if unordered else {})
    potential = make_potential(view)
    x = jax.random.normal(jax.random.key(0), (potential.dim,)) * 0.3
    params = potential.constrain(x)
    idx = jnp.array([0, 7, 399, 123])
    _, per_datum = potential.estimator.terms(x, idx)
    expected = _closed_form(params["w"], params["mu"], params["sigma"], mixture_data[idx])
    np.testing.assert_allclose(per_datum, expected, rtol=1e-10)
    if model is mixture.model:  # the full-data potential is NumPyro's, NUTS's own
        numpyro_model = initialize_model(jax.random.key(0), model, model_args=(mixture_data,))
        expected_total = numpyro_model.potential_fn(potential.unravel(x))
        total = potential.estimator.full_value_and_grad(x)[0]
        np.testing.assert_allclose(total, expected_total, rtol=1e-10)


def unmarked(y):
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Categorical(w))
        numpyro.sample("y", dist.Normal(jnp.array([60.0, 75.0, 90.0])[z], 6.0), obs=y)


@pytest.mark.parametrize("name", [name for name in SAMPLERS if name != "nuts"])
def test_every_kernel_refuses_an_unmarked_discrete_site_with_the_fix(mixture_data, name):
    mcmc = MCMC(make_kernel(name, unmarked), num_warmup=5, num_samples=5, progress_bar=False)
    with pytest.raises(ValueError, match=r"'z'.*not marked for enumeration.*config_enumerate"):
        mcmc.run(jax.random.key(0), mixture_data)


def test_autosampler_at_a_large_n_refuses_an_unmarked_discrete_site_with_the_fix(mixture_data):
    big = jnp.tile(mixture_data, 200)  # AutoSampler at a large N: no Gibbs fallback either
    auto = MCMC(AutoSampler(unmarked), num_warmup=5, num_samples=5, progress_bar=False)
    with pytest.raises(ValueError, match=r"not marked for enumeration.*config_enumerate"):
        auto.run(jax.random.key(0), big)


def test_an_enumerated_site_outside_the_data_plate_is_refused_and_auto_runs_nuts():
    @config_enumerate
    def switch(y):
        regime = numpyro.sample("regime", dist.Bernoulli(0.5))
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu + 3.0 * regime, 1.0), obs=y)

    y = jnp.asarray(np.random.default_rng(1).normal(3.0, 1.0, 200))
    with pytest.raises(FullDataOnlyError, match=r"'regime'.*couples every datum"):
        MCMC(SGLD(switch), num_warmup=5, num_samples=5, progress_bar=False).run(
            jax.random.key(0), y
        )
    auto = AutoSampler(switch)
    assert auto.decide((y,)).kernel == "nuts"


def test_a_kernel_samples_the_marginalised_mixture(mixture_data):
    """SGLD at its defaults on the 3-component mixture (N = 400): the ordered means land on
    the simulated ones (within 4 posterior sds of a 400-point fit) and the weights sum to 1."""
    mcmc = MCMC(SGLD(mixture.model), num_warmup=300, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.key(1), mixture_data)
    samples = mcmc.get_samples()
    mu = np.asarray(samples["mu"])
    assert np.all(np.diff(mu, axis=-1) > 0)
    assert np.all(np.abs(mu.mean(0) - np.asarray(mixture.MEANS)) < 4 * mu.std(0) + 1.0)
    np.testing.assert_allclose(np.asarray(samples["w"]).sum(-1), 1.0, rtol=1e-6)
    # its means are ordered: a failed R-hat is not blamed on label switching
    assert mcmc.sampler.setup.view.info.ordered_sites == ("mu",)
    assert kernel_hints(mcmc.sampler) == {}
    # the assignments, as the docs recover them: mostly the nearest component mean's
    z = Predictive(mixture.model, posterior_samples=samples, infer_discrete=True)(
        jax.random.key(2), mixture_data
    )["z"]
    assert z.shape == (300, N)
    means = np.asarray(mixture.MEANS)
    nearest = np.argmin(np.abs(np.asarray(mixture_data)[:, None] - means), -1)
    assert np.mean(np.asarray(z) == nearest) > 0.8


def test_a_search_stopped_at_an_empty_component_still_gives_the_gaussian_at_the_mode(
    monkeypatch,
):
    """In float32 at N = 10⁵ (outside the test suite's XLA flags) every start of the mode
    search stopped where the first component's weight went to 0 and its mean went flat, 1139
    nats above the mode.  The polish in that floored curvature reached the mode, but the
    Gaussian kept the floored curvature (Laplace log-weight sd 1.6·10⁴) and AutoSampler fell
    back to NUTS.  The search's result is that point here; the curvature is rebuilt where the
    polish ends."""
    import importlib
    import warnings

    from pplsamplers.warmup import MapResult, SetupOptions, mode_stage
    from pplsamplers.warmup.modes import ModeSearch

    stage_module = importlib.import_module("pplsamplers.warmup.setup")
    empty = jnp.array([33.65, 3.44, 3.10, 2.06, -10.62, -0.65])  # mu (ordered), sigma, w

    def stopped_search(potential, notes):
        notes["mode"] = "converged (a search stopped at an empty component)"
        return ModeSearch(MapResult(empty, jnp.nan, jnp.nan, converged=True), "", 0)

    monkeypatch.setattr(stage_module, "_search_mode", stopped_search)
    (y,), _ = mixture.load_data(N=100_000, dtype=jnp.float32)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        stage = mode_stage(SetupOptions(mixture.model, needs_mode=True), (y,), {})
    assert not [r for r in records if "pplsamplers" in str(r.message)]
    assert stage.laplace_misfit < 1.0 and "degenerate_mode" not in stage.notes
    assert stage.notes["precondition"] == "dense inverse curvature at the mode"
    assert "the curvature rebuilt 1×" in stage.notes["mode"]
    mu = stage.potential.constrain(stage.mode)["mu"]
    np.testing.assert_allclose(mu, mixture.MEANS, atol=0.5)
