"""Contract tests: every registered kernel compiles, is deterministic per key, produces no NaN,
gives the right shapes, exports ``data_evals`` to ArviZ and gives the same draws with the
sequential and vectorized chain methods (parallel: ``test_parallel_devices.py``)."""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from models import logistic_regression
from tests.contract.registry import REGISTRY

# at -O1, as users run: with most XLA optimisations off (the suite's compile-bound mode) XLA
# rounds a batch of one chain differently from a batch of two in the metric refinement, and
# SBPS's event times amplify the last bit until the chain methods' draws differ
pytestmark = pytest.mark.runtime_bound

NUM_WARMUP, NUM_SAMPLES, NUM_CHAINS, D = 30, 40, 2, 3

# SBPS plans its event times from a regression on the G̃ it observed along the path, so a
# last-bit difference between two programs (vmapped or not, plain plate or indexed data) grows
# about twofold per draw here: 2e-15 at the first draw, 3e-7 at the 19th, O(1) by the 35th.
# Its chain methods are compared over the first draws, where rounding is still invisible; a
# wrong key split or minibatch differs from the first draw on.
AMPLIFIES_ROUNDING = {"sbps", "psbps"}
COMPARED_PREFIX = 10


@pytest.fixture(scope="module")
def data():
    return logistic_regression.load_data(N=200, d=D, seed=1)[0]


def plain_plate_model(X, y=None):
    """``logistic_regression.model`` written as NumPyro models usually are: a plain plate whose
    data are not indexed with its indices (NUTS accepts it; issue 14, item 1)."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def _run(kernel, data, method):
    mcmc = MCMC(
        kernel,
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        num_chains=NUM_CHAINS,
        chain_method=method,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), *data)
    return mcmc


def test_registry_is_not_empty():
    assert {"sgld", "psgld", "sbps", "boomerang", "sgbd", "hamcmc"} <= set(REGISTRY)


def test_the_registrys_exactness_is_the_kernels_own():
    """The registry reads ``exact`` from each kernel's declaration (``KernelSpec.exact``,
    which the self-check reads): the PDMPs and NUTS are exact, the step-size kernels are not,
    and a built kernel declares the same."""
    from pplsamplers.registry import SAMPLERS, make_kernel

    exact = {name for name, spec in SAMPLERS.items() if spec.exact}
    assert exact == {"nuts", "boomerang", "sbps", "psbps", "bps", "sigmabps"}
    for name, spec in SAMPLERS.items():
        if spec.minibatch:
            kernel = make_kernel(name, logistic_regression.model)
            assert kernel.spec.exact == spec.exact, name


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_contract(name, data):
    make = REGISTRY[name]
    runs = {}
    # "parallel" on this one device would run the chains sequentially (NumPyro falls back and
    # warns): the same program as "sequential".  Real parallel chains on two devices, for every
    # sampler: tests/contract/test_parallel_devices.py
    # The vectorized run is a fresh kernel on the same model written with a plain plate
    # (obs=y, not y[idx]; issue 14 item 1): it is subsampled through its arguments, so its
    # minibatches, and hence its draws, must be those of the sequential run of the indexed
    # model.  One comparison checks the chain methods, determinism per key and the plain
    # plate (a third run for the last cost each sampler a whole set-up and compile).
    for method, model in (
        ("sequential", logistic_regression.model),
        ("vectorized", plain_plate_model),
    ):
        mcmc = _run(make(model), data, method)
        samples = mcmc.get_samples(group_by_chain=True)
        assert samples["w"].shape == (NUM_CHAINS, NUM_SAMPLES, D), method
        assert np.all(np.isfinite(samples["w"])), method
        runs[method] = samples["w"]
    compared = slice(0, COMPARED_PREFIX if name in AMPLIFIES_ROUNDING else NUM_SAMPLES)
    np.testing.assert_allclose(
        runs["vectorized"][:, compared], runs["sequential"][:, compared], rtol=1e-6, atol=1e-8
    )
    # different keys give different draws: the two chains of a run get two keys split from
    # the run's key
    assert not np.allclose(runs["sequential"][0], runs["sequential"][1])
    # ArviZ: posterior, sample_stats with data_evals, full-data log_likelihood
    idata = az.from_numpyro(mcmc, log_likelihood=True)  # the vectorized plain-plate run
    stats = idata.sample_stats
    assert "data_evals" in stats and int(stats["data_evals"].min()) > 0
    assert idata.log_likelihood["y"].shape[-1] == data[0].shape[0]
    assert idata.observed_data["y"].shape == (data[0].shape[0],)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_post_warmup_state_continues(name, data):
    mcmc = MCMC(
        REGISTRY[name](logistic_regression.model),
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        progress_bar=False,
    )
    mcmc.warmup(jax.random.key(3), *data)
    mcmc.run(mcmc.post_warmup_state.rng_key, *data)
    first = mcmc.get_samples()["w"]
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(mcmc.post_warmup_state.rng_key, *data)
    second = mcmc.get_samples()["w"]
    assert first.shape == second.shape == (NUM_SAMPLES, D)
    assert int(mcmc.last_state.iteration) == NUM_WARMUP + 2 * NUM_SAMPLES
    assert np.all(jnp.isfinite(second))
