"""Bad input gets a clear error naming the site or argument (DESIGN §7)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from models import linear_gaussian, logistic_regression
from pplsamplers import SGLD, make_potential

X, Y = logistic_regression.load_data(N=50, d=2, seed=0)[0]


def discrete_model(X, y=None):
    k = numpyro.sample("k", dist.Bernoulli(0.5))
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w + k), obs=y[idx])


def no_plate_model(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w).to_event(1), obs=y)


def two_plate_model(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("a", X.shape[0], subsample_size=5) as i:
        numpyro.sample("ya", dist.Bernoulli(logits=X[i] @ w), obs=y[i])
    with numpyro.plate("b", X.shape[0], subsample_size=5) as j:
        numpyro.sample("yb", dist.Bernoulli(logits=X[j] @ w), obs=y[j])


def local_latent_model(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]) as idx:
        z = numpyro.sample("z", dist.Normal(0, 1))
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w + z), obs=y[idx])


def bad_start_model(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=2 * y[idx])  # not in {0, 1}


def test_discrete_latent_site_is_named():
    with pytest.raises(ValueError, match="latent site 'k' is discrete"):
        make_potential(discrete_model, (X, Y))


def test_missing_plate_with_subsample_size_explains_the_fix():
    with pytest.raises(ValueError, match="no data plate.*numpyro.plate"):
        make_potential(no_plate_model, (X, Y), subsample_size=10)
    # without subsample_size the model is usable full-batch: the whole likelihood is one datum
    pot = make_potential(no_plate_model, (X, Y))
    assert (pot.N, pot.n) == (1, 1)


def test_two_subsample_plates_are_rejected():
    with pytest.raises(ValueError, match="2 subsample plates.*data_plate"):
        make_potential(two_plate_model, (X, Y))


def test_unknown_data_plate_name():
    with pytest.raises(ValueError, match="data_plate='nope' is not a plate"):
        make_potential(logistic_regression.model, (X, Y), data_plate="nope")


def test_local_latent_inside_data_plate():
    with pytest.raises(ValueError, match="latent site 'z' lies inside the data plate"):
        make_potential(local_latent_model, (X, Y))


@pytest.mark.parametrize("size", [0, -3, 51, 2.5, True])
def test_invalid_subsample_size(size):
    with pytest.raises(ValueError, match="subsample_size"):
        make_potential(logistic_regression.model, (X, Y), subsample_size=size)


@pytest.mark.parametrize("size", [0, -1, 1.5])
def test_invalid_subsample_size_in_kernel(size):
    with pytest.raises(ValueError, match="subsample_size"):
        SGLD(logistic_regression.model, step_size=1e-3, subsample_size=size)


@pytest.mark.parametrize("step", [0.0, -1e-3, float("nan"), float("inf"), "big"])
def test_invalid_step_size(step):
    with pytest.raises(ValueError, match="step_size"):
        SGLD(logistic_regression.model, step_size=step)


def test_invalid_start_names_the_site():
    with pytest.raises(RuntimeError, match="observed site 'y'"):
        make_potential(bad_start_model, (X, Y))


def test_invalid_init_params_names_the_site():
    def model(y):
        s = numpyro.sample("s", dist.HalfNormal(1.0))
        with numpyro.plate("data", y.shape[0]) as idx:
            numpyro.sample("y", dist.Normal(0, s), obs=y[idx])

    mcmc = MCMC(SGLD(model, step_size=1e-3), num_warmup=2, num_samples=2, progress_bar=False)
    with pytest.raises(RuntimeError, match="invalid initial point"):
        mcmc.run(jax.random.key(0), jnp.ones(5), init_params={"s": jnp.asarray(jnp.inf)})


def test_non_finite_steps_are_reverted_and_counted():
    # a huge step makes SGLD on a Gaussian likelihood blow up geometrically until it
    # overflows; the chain must stay finite, flag the reverted steps and count them
    args, kwargs = linear_gaussian.load_data(N=50, D=2)
    mcmc = MCMC(
        SGLD(linear_gaussian.model, step_size=1e6, subsample_size=10),
        num_warmup=0,
        num_samples=200,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), *args, **kwargs)
    samples = mcmc.get_samples()["theta"]
    assert np.all(np.isfinite(samples))
    reverted = mcmc.get_extra_fields()["reverted"]
    assert int(reverted.sum()) > 0
    assert int(mcmc.last_state.num_reverted) == int(reverted.sum())
