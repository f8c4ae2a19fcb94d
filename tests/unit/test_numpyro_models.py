"""Any model NUTS runs runs with AutoSampler, or is refused by a minibatch kernel with the
reason and the alternative: models with no latent dimension, likelihoods that cannot be
subsampled, ``jit_model_args=True``, and ``MCMC.run`` inside ``jax.jit``."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from pplsamplers import SGLD, AutoSampler

Y = jnp.linspace(-1.0, 1.0, 30) + 0.5


def _mcmc(kernel, *args, draws=10, seed=0, **options):
    mcmc = MCMC(kernel, num_warmup=draws, num_samples=draws, progress_bar=False, **options)
    mcmc.run(jax.random.PRNGKey(seed), *args)
    return mcmc


def no_latent(y):
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y)


def only_deterministic(y):
    numpyro.deterministic("total", jnp.sum(y))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y)


def one_category(y):  # a Dirichlet over one category: unconstrained size 0
    p = numpyro.sample("p", dist.Dirichlet(jnp.ones(1)))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(p[0], 1.0), obs=y)


def zero_sized(y):
    e = numpyro.sample("e", dist.Normal(0.0, 1.0).expand([0]).to_event(1))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(e.sum(), 1.0), obs=y)


def with_ordinary_latents(y):  # the empty sites contribute nothing
    p = numpyro.sample("p", dist.Dirichlet(jnp.ones(1)))
    e = numpyro.sample("e", dist.Normal(0.0, 1.0).expand([0]).to_event(1))
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu + e.sum() + p[0] - 1.0, 1.0), obs=y)


@pytest.mark.parametrize(
    "model, shapes",
    [
        (no_latent, {}),
        (only_deterministic, {"total": (10,)}),
        (one_category, {"p": (10, 1)}),
        (zero_sized, {"e": (10, 0)}),
    ],
)
def test_a_model_with_no_latent_dimension_is_refused_and_autosampler_runs_nuts(model, shapes):
    with pytest.raises(ValueError, match="no latent dimension to sample.*AutoSampler.*NUTS"):
        _mcmc(SGLD(model), Y)
    sampler = AutoSampler(model)
    samples = _mcmc(sampler, Y).get_samples()
    assert sampler.decision.kernel == "nuts"
    assert "no latent dimension" in sampler.decision.reasons[0]
    assert {name: value.shape for name, value in samples.items()} == shapes
    if "p" in samples:
        np.testing.assert_allclose(samples["p"], 1.0)


@pytest.mark.filterwarnings("ignore:pplsamplers self-check")  # 10 draws: too few to judge
def test_empty_latent_sites_next_to_ordinary_ones_run_with_the_kernels():
    samples = _mcmc(SGLD(with_ordinary_latents), Y).get_samples()
    assert samples["e"].shape == (10, 0)
    np.testing.assert_allclose(samples["p"], 1.0)
    assert samples["mu"].shape == (10,) and bool(jnp.all(jnp.isfinite(samples["mu"])))


N = 40
COUNTS = jnp.asarray(np.random.default_rng(0).poisson(np.where(np.arange(N) < 20, 2.0, 6.0)))


def change_point(y):  # the rate is built from jnp.arange(N): no minibatch's rows give it
    r1 = numpyro.sample("r1", dist.Exponential(0.2))
    r2 = numpyro.sample("r2", dist.Exponential(0.2))
    tau = numpyro.sample("tau", dist.Uniform(0.0, 1.0))
    rate = jnp.where(jnp.arange(N) < tau * N, r1, r2)
    with numpyro.plate("data", N):
        numpyro.sample("y", dist.Poisson(rate), obs=y)


@pytest.mark.filterwarnings("ignore:pplsamplers self-check")  # 10 draws: too few to judge
def test_a_likelihood_that_cannot_be_subsampled_is_refused_and_autosampler_runs_nuts():
    with pytest.raises(ValueError, match=r"plate 'data' cannot be subsampled.*AutoSampler.*NUTS"):
        _mcmc(SGLD(change_point), COUNTS)
    sampler = AutoSampler(change_point, candidates=["sgld", "nuts"])
    samples = _mcmc(sampler, COUNTS).get_samples()
    assert sampler.decision.kernel == "nuts"
    assert "cannot be subsampled" in sampler.decision.reasons[0]
    assert samples["tau"].shape == (10,)
    # without NUTS among the candidates, the error says why
    with pytest.raises(ValueError, match="cannot be subsampled.*only NUTS can run it"):
        AutoSampler(change_point, candidates=["sgld"]).decide((COUNTS,))


def normal_mean(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def poisson_rate(y):
    log_rate = numpyro.sample("log_rate", dist.Normal(0.0, 3.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(log_rate)), obs=y)


@pytest.mark.filterwarnings("ignore:pplsamplers self-check")  # 20 draws: too few to judge
@pytest.mark.parametrize("num_chains, chain_method", [(1, "sequential"), (2, "vectorized")])
@pytest.mark.parametrize("make", [SGLD, lambda m: AutoSampler(m, candidates=["sgld"])])
def test_jit_model_args_runs_and_follows_new_data(make, num_chains, chain_method):
    """With ``jit_model_args=True`` NumPyro reuses its compiled step for new data of the same
    shapes; the run on the second data set draws what a fresh run on it draws (a step that
    kept the first data set's potential would not)."""
    rng = np.random.default_rng(0)
    first, second = (jnp.asarray(rng.poisson(rate, 30), float) for rate in (2.0, 20.0))
    options = dict(draws=20, seed=1, num_chains=num_chains, chain_method=chain_method)
    mcmc = _mcmc(make(poisson_rate), first, jit_model_args=True, **options)
    mcmc.run(jax.random.PRNGKey(1), second)  # the same shapes: NumPyro reuses its step
    fresh = _mcmc(make(poisson_rate), second, **options).get_samples()["log_rate"]
    draws = mcmc.get_samples()["log_rate"]
    assert draws.shape == (20 * num_chains,) and bool(jnp.all(jnp.isfinite(draws)))
    np.testing.assert_allclose(draws, fresh, rtol=1e-9)


@pytest.mark.parametrize("kernel", [SGLD, AutoSampler])
def test_mcmc_run_inside_jit_is_refused_with_the_fix(kernel):
    @jax.jit
    def run(y):
        return _mcmc(kernel(normal_mean), y).get_samples()["mu"]

    with pytest.raises(ValueError, match="needs the data as concrete arrays.*outside jax.jit"):
        run(Y)


def test_extra_fields_the_state_lacks_are_named_with_the_fields_it_has():
    mcmc = MCMC(SGLD(normal_mean), num_warmup=5, num_samples=5, progress_bar=False)
    with pytest.raises(
        ValueError, match=r"extra_fields \['accept_prob'\] are not fields of this sampler's state"
    ):
        mcmc.run(jax.random.key(0), Y, extra_fields=("accept_prob",))
