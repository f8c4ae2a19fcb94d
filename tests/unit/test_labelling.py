"""An unordered mixture's K! labellings: its per-component sites are found, every draw's
components are ordered before R-hat and ESS, chains in different labellings pass, and a
chain that really misses still fails."""

import warnings
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.contrib.funsor import config_enumerate
from numpyro.distributions.transforms import biject_to
from numpyro.infer import MCMC

from models import mixture
from pplsamplers import AutoSampler, SelfCheckWarning, check_run
from pplsamplers.diagnostics.checks import self_check
from pplsamplers.diagnostics.fixes import LABEL_SWITCHING_FIX, model_hints
from pplsamplers.diagnostics.health import convergence
from pplsamplers.diagnostics.labelling import Labelling, labelling_of, view_labels
from pplsamplers.model import inspect

K = 3


@config_enumerate
def unordered(y):
    """The three-component mixture of ``models.mixture`` without the ordering of its means."""
    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(K)))
    mu = numpyro.sample("mu", dist.Normal(70.0, 50.0).expand([K]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(20.0))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Categorical(w))
        numpyro.sample("y", dist.Normal(mu[z], sigma), obs=y)


@config_enumerate
def zero_inflated(x, y):
    """A Bernoulli flag per datum: its two states are not exchangeable, so nothing is
    ordered, although ``beta`` has two coefficients."""
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    gate = numpyro.sample("gate", dist.Beta(1.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        zero = numpyro.sample("zero", dist.Bernoulli(gate))
        rate = jnp.exp(x @ beta) * (1 - zero) + 1e-6
        numpyro.sample("y", dist.Poisson(rate), obs=y)


@pytest.fixture(scope="module")
def data():
    return mixture.load_data(N=400, dtype=jnp.float64)[0][0]


def test_the_per_component_sites_of_an_unordered_mixture_are_found(data):
    info = inspect(unordered, (data,), {}).info
    assert [(s.name, s.axis, s.size, s.real) for s in info.labelled] == [
        ("mu", 0, K, True),
        ("w", 0, K, False),
    ]
    assert model_hints(*view_labels(info)) == {}  # ordered before R-hat: no hint needed
    kernel = SimpleNamespace(setup=SimpleNamespace(view=inspect(unordered, (data,), {})))
    found = labelling_of(kernel)  # what a kernel's in-run check and check_run order by
    assert found.sites == info.labelled and found.shapes == {"mu": (3,), "sigma": (), "w": (2,)}
    assert inspect(mixture.model, (data,), {}).info.labelled == ()  # ordered means
    x, y = np.ones((20, 2)), np.zeros(20)
    assert inspect(zero_inflated, (x, y), {}).info.labelled == ()
    # enumerated, unordered, but no site found: the hint stays
    assert model_hints(("z",), (), ()) == {"rhat": (LABEL_SWITCHING_FIX,)}


def _two_labellings(rng: np.random.Generator, draws: int = 1000):
    """Unconstrained draws of (mu, sigma, w) around one mode, chain 1 in another labelling."""
    mu = np.array([60.0, 75.0, 90.0]) + rng.normal(size=(2, draws, K))
    w = np.array([0.2, 0.3, 0.5]) + 0.01 * rng.normal(size=(2, draws, K))
    w /= w.sum(-1, keepdims=True)
    sigma = 6.0 + 0.1 * rng.normal(size=(2, draws, 1))
    perm = np.array([2, 0, 1])
    mu[1], w[1] = mu[1][:, perm], w[1][:, perm]
    simplex = biject_to(dist.constraints.simplex)
    x_w = np.asarray(simplex.inv(jnp.asarray(w)))
    flat = np.concatenate([mu, np.log(sigma), x_w], -1)  # sorted names: mu, sigma, w
    return flat, mu, w


def test_two_chains_in_two_labellings_pass_and_a_real_miss_still_fails(data):
    info = inspect(unordered, (data,), {}).info
    labelling = Labelling(info.labelled, info.unconstrained_shapes)
    flat, mu, w = _two_labellings(np.random.default_rng(0))
    names = ["mu[0]", "mu[1]", "mu[2]", "sigma", "w[0]", "w[1]"]
    ordered = labelling(flat)
    np.testing.assert_array_equal(ordered[0], flat[0])  # already ordered: exactly unchanged
    order = np.argsort(mu, -1)
    np.testing.assert_allclose(ordered[..., :K], np.take_along_axis(mu, order, -1))
    back = biject_to(dist.constraints.simplex)(jnp.asarray(ordered[..., 4:]))
    np.testing.assert_allclose(back, np.take_along_axis(w, order, -1), rtol=1e-6)
    assert np.max(convergence(flat)[0]) > 1.5  # the raw draws look unconverged
    assert not self_check(flat, None, names=names).passed
    assert self_check(flat, None, names=names, relabel=labelling).passed
    miss = flat.copy()
    miss[1, :, 3] += 0.05  # chain 1's sigma 5 % high: about 3 of its sds
    failed = self_check(miss, None, names=names, relabel=labelling)
    assert "rhat" in failed.failures and "R-hat" in failed.warning and "on sigma" in failed.warning
    wrong = flat.copy()
    wrong[1, :, :K] += np.array([0.0, 4.0, 0.0])  # one component 4 sds off in chain 1
    assert "rhat" in self_check(wrong, None, names=names, relabel=labelling).failures


def test_autosampler_on_an_unordered_mixture_is_not_flagged_for_its_labellings(data):
    """AutoSampler takes NUTS at N = 400; its chains move between the labellings, so the raw
    means' R-hat fails, while the run is right: neither ``MCMC.run`` nor ``check_run`` warns."""
    mcmc = MCMC(
        AutoSampler(unordered),
        num_warmup=400,
        num_samples=800,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", SelfCheckWarning)
        mcmc.run(jax.random.key(0), data)
        assert check_run(mcmc).passed
    mu = np.asarray(mcmc.get_samples(group_by_chain=True)["mu"])
    assert np.max(convergence(mu)[0]) > 1.05  # the labellings differ between the chains
    means = np.sort(mu, -1).reshape(-1, K).mean(0)
    np.testing.assert_allclose(means, mixture.MEANS, atol=5.0)
