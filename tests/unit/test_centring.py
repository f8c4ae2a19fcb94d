"""Per-group centring (``pplsamplers.warmup.centring``): a group effect written centred is
sampled centred where its group's data outweigh its prior and non-centred where they do not,
by equation (1) of the module, c = d / (d + p), where the model as written leaves the Gaussian
approximation poor; the output keeps the user's sites.

    .venv/bin/pytest -q tests/unit/test_centring.py -p no:cacheprovider
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from models import gaussian_mixed
from models.classic import funnel
from pplsamplers import Boomerang
from pplsamplers.model import inspect, make_potential
from pplsamplers.warmup import SetupOptions, setup
from pplsamplers.warmup.centring import choose_centring
from pplsamplers.warmup.structured import structured_fit


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _centred_data(N=3_000, num_groups=200, noise_sd=1.0):
    return gaussian_mixed.load_data(
        N=N, num_groups=num_groups, seed=5, dtype=jnp.float64, centred=True, noise_sd=noise_sd
    )


def test_c_follows_each_groups_data_against_its_prior():
    """c_g = d_g / (d_g + p_g): with unit noise d_g is the group's row count and p_g = 1/τ²
    at the centre, so c is a function of the rows alone, rising from about 0.4 for one row
    to nearly 1 for the largest groups."""
    args, kwargs = _centred_data()
    view = inspect(gaussian_mixed.model, args, kwargs)
    potential = make_potential(view)
    fit, _ = structured_fit(potential, potential.init_position, jax.random.key(0))
    centring = choose_centring(view, potential, fit)
    c = centring.centredness["u"]
    rows = np.bincount(np.asarray(args[1]), minlength=kwargs["num_groups"])
    tau = float(potential.constrain(fit.center)["tau"])
    np.testing.assert_allclose(c, rows / (rows + 1 / tau**2), rtol=1e-6)
    assert c[rows == 1].max() < 0.5 < 0.95 < c[rows == rows.max()].min()
    assert centring.model is not None and "'u' sampled as 'u_decentered'" in centring.note


@pytest.mark.filterwarnings("ignore::pplsamplers.SelfCheckWarning")  # 50 draws
def test_a_funnel_is_sampled_in_the_chosen_coordinates_and_the_output_keeps_the_users_sites():
    """Noise sd 3: a row tells a group a ninth of what its prior does, so most of the 100
    groups are barely informed and the model as written is a funnel (a poor Gaussian)."""
    args, kwargs = _centred_data(N=1_000, num_groups=100, noise_sd=3.0)
    result = setup(SetupOptions(gaussian_mixed.model), args, kwargs)
    note = result.notes["centring"]
    assert note.startswith("'u' sampled as 'u_decentered'") and "as written" in note
    sds = [float(word.rstrip(",")) for word in note.split("log-weight sd ")[1].split()[:2]]
    assert sds[0] < 1.0 < sds[1], note  # the chosen coordinates fit, the written ones do not
    assert "u_decentered" in result.potential.unravel(result.whitening.center)
    kernel = Boomerang(gaussian_mixed.model, setup=result)  # the set-up above, not another
    mcmc = MCMC(kernel, num_warmup=50, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.key(0), *args, **kwargs)
    samples = mcmc.get_samples()
    assert samples["u"].shape == samples["z"].shape == (50, 100)
    np.testing.assert_allclose(samples["z"] * samples["tau"][:, None], samples["u"], rtol=1e-9)
    init = {name: samples[name][0] for name in ("alpha", "beta", "tau", "u")}
    with pytest.raises(ValueError, match="'u' is sampled as 'u_decentered'"):
        mcmc.run(jax.random.key(1), *args, init_params=init, **kwargs)


def test_a_model_the_gaussian_fits_as_written_is_kept():
    """Noise sd 1: the arrowhead Gaussian fits the centred model, whose Gaussian likelihood
    is quadratic in u, so the control variate is exact; reparameterising would lose that."""
    args, kwargs = _centred_data(N=2_000, num_groups=100)
    result = setup(SetupOptions(gaussian_mixed.model), args, kwargs)
    assert result.notes["centring"].startswith("kept as written: the Gaussian fits")
    assert "u" in result.potential.unravel(result.whitening.center)


def test_models_written_non_centred_or_with_centring_off_are_kept_as_written():
    args, kwargs = gaussian_mixed.load_data(N=1_000, num_groups=100, seed=5, dtype=jnp.float64)
    assert "centring" not in setup(SetupOptions(gaussian_mixed.model), args, kwargs).notes
    args, kwargs = _centred_data(N=1_000, num_groups=100, noise_sd=3.0)
    kept = setup(SetupOptions(gaussian_mixed.model, centring=False), args, kwargs)
    assert "centring" not in kept.notes
    assert "u" in kept.potential.unravel(kept.whitening.center)


def test_groups_whose_data_outweigh_their_prior_stay_centred():
    def model(group, y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        tau = numpyro.sample("tau", dist.HalfNormal(2.0))
        with numpyro.plate("groups", 20):
            theta = numpyro.sample("theta", dist.Normal(mu, tau))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(theta[group], 1.0), obs=y)

    group = jnp.repeat(jnp.arange(20), 200)
    y = 3.0 * (group % 4) + jax.random.normal(jax.random.key(1), group.shape)
    result = setup(SetupOptions(model), (group, y), {})
    assert result.notes["centring"] == "'theta' kept centred: every group's data outweigh its prior"
    assert "theta" in result.potential.unravel(result.whitening.center)


def test_a_scale_mixture_without_groups_is_sampled_non_centred():
    """Neal's funnel has no data: x's own prior is all its precision, so c = 0 and x is
    sampled as x_decentered ~ N(0, 1), an exactly Gaussian posterior with v.  The joint mode
    of the funnel as written is its neck (v = −40.5), where the chains used to start: the
    Boomerang at its defaults then ended 11.7 sd off in v's mean.  Exact: v ~ N(0, 3²)."""
    result = setup(SetupOptions(funnel), (), {})
    assert result.notes["centring"].startswith("'x' sampled as 'x_decentered'")
    assert "9 non-centred" in result.notes["centring"] and "degenerate_mode" not in result.notes
    kernel = Boomerang(funnel, setup=result)
    mcmc = MCMC(kernel, num_warmup=300, num_samples=500, num_chains=2,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(20261122))
    v = np.asarray(mcmc.get_samples()["v"])
    assert abs(v.mean()) < 0.25 * 3.0 and abs(v.std() / 3.0 - 1) < 0.3, (v.mean(), v.std())
