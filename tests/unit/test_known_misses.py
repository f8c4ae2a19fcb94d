"""Runs that are known to miss without a warning: each is a strict ``xfail``, so the test
fails (XPASS) the day the miss is fixed or warned, and the marker must then go.

A regression with N = 10 rows, d = 8 raw coefficients and a scale σ: with so few rows the
posterior of σ has most of its mass near the residual scale (σ ≈ 0.1) and a minor region at
σ ≈ 1–2 where the coefficients shrink.  The minor region is a volume effect, not a second
optimum of the joint density, so the mode search and the mode probe find one mode; both chains
start in the set-up's variational fit, and HAMCMC keeps them in the minor region.  The Stein
identities hold locally there, so the in-run check passes.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS

from pplsamplers import HAMCMC
from pplsamplers.diagnostics import SelfCheckWarning


def _regression(X, y):
    w = numpyro.sample("w", dist.Normal(0.0, 3.0).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(3.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ w, sigma), obs=y)


def _data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(10, 8))
    y = X @ rng.normal(size=8) + 0.05 * rng.normal(size=10)
    return jnp.asarray(X), jnp.asarray(y)


def _below(kernel, draws: int, key: int) -> float:
    """The fraction of σ's draws below 0.3, 2 vectorised chains."""
    mcmc = MCMC(kernel, num_warmup=1000, num_samples=draws, num_chains=2,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(key), *_data())
    return float(np.mean(np.asarray(mcmc.get_samples()["sigma"]) < 0.3))


@pytest.mark.xfail(strict=True, reason="HAMCMC stays in a volume-driven minor region of σ and "
                   "its in-run check passes: both chains start in the variational fit")  # fmt: skip
def test_hamcmc_on_a_small_n_scale_posterior_is_right_or_warns():
    with jax.enable_x64(True):
        reference = _below(NUTS(_regression, target_accept_prob=0.95), 5000, 0)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            below = _below(HAMCMC(_regression), 2000, 1)
    warned = any(issubclass(r.category, SelfCheckWarning) for r in records)
    # NUTS puts about 0.8 of σ's mass below 0.3; a binomial sd of 0.1 is generous for chains
    assert abs(below - reference) < 0.2 or warned, (below, reference)
