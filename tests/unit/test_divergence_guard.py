"""The adapter's guard against divergent steps of the step-size kernels (``KernelSpec.stabilize``).

In whitened coordinates the posterior of ``normal_mean`` is N(0, 1) and a full-batch SGLD
step is z ← (1 − ε) z + √(2ε) ξ, which grows geometrically when ε > 2.  A step that is not
finite or jumps more than ``DIVERGENT_JUMP`` √D is rejected; in warmup the step size is also
halved, so a run started with ε = 8 ends warmup stable, with finite draws.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

from pplsamplers import HAMCMC, SGLD
from pplsamplers.datasets import tiny_regression
from pplsamplers.kernels.sgmcmc import sgld
from pplsamplers.kernels.sgmcmc.step_size import DIVERGENT_JUMP, halve_step_size


def test_halve_step_size_halves_only_the_step():
    params = sgld.SGLDParams(np.float32(0.4), np.ones(3, np.float32))
    halved = halve_step_size(params)
    assert float(halved.step_size) == pytest.approx(0.2)
    np.testing.assert_array_equal(halved.inverse_metric, params.inverse_metric)
    assert DIVERGENT_JUMP >= 5.0  # far beyond a stable step's √(2ε D)


def _run_unstable_sgld(num_warmup: int, num_samples: int) -> MCMC:
    """Full-batch SGLD at ε = 8 on ``normal_mean``: geometric blow-up without the guard."""
    model, _ = tiny_regression()
    kernel = SGLD(model, step_size=8.0, subsample_size=1000)
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, progress_bar=False)
    mcmc.run(jax.random.key(3), jnp.ones(1000), extra_fields=("step_size", "diverging"))
    return mcmc


def test_warmup_shrinks_an_unstable_step_until_the_chain_is_stable():
    mcmc = _run_unstable_sgld(num_warmup=200, num_samples=300)
    draws = np.asarray(mcmc.get_samples()["mu"])
    step = np.asarray(mcmc.get_extra_fields()["step_size"])
    assert np.all(np.isfinite(draws))
    assert float(step[-1]) <= 2.0  # the stable range of the whitened Euler step
    # posterior N(1, 1/1000): the chain moves (not frozen at a rejected start) and stays
    # within a few posterior sds (without the guard it overflows at ε = 8, and every later
    # step is rejected)
    assert abs(draws.mean() - 1.0) < 0.01
    assert 0.3 < draws.std() * np.sqrt(1000) < 5.0
    assert int(np.sum(mcmc.get_extra_fields()["diverging"])) == 0  # none after warmup


def test_without_warmup_divergent_steps_are_rejected_and_counted():
    mcmc = _run_unstable_sgld(num_warmup=0, num_samples=100)
    draws = np.asarray(mcmc.get_samples()["mu"])
    assert np.all(np.isfinite(draws))  # never NaN or an overflow: the step is rejected
    assert int(np.sum(mcmc.get_extra_fields()["diverging"])) > 10


def test_hamcmc_declares_the_guard():
    model, _ = tiny_regression()
    assert HAMCMC(model).spec.stabilize is halve_step_size


def test_a_chain_started_on_a_steep_tail_comes_back():
    """A log-scale latent under an exponential prior has ∇U ∝ eᵘ: at s = e¹² (8 Laplace sds
    above the mode s = 50) one SGLD step at the default ε would jump 300 sds, so the guard
    rejected every step and the chain froze there (a chain of a positive-ordered model did
    so in a sweep of unseen models).  The clipped gradient (``gradient_clip_norm``) brings it
    back to the posterior in a few steps, without warmup to shrink the step."""
    import numpyro
    import numpyro.distributions as dist

    from pplsamplers.kernels.sgmcmc.step_size import gradient_clip_norm

    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        numpyro.sample("s", dist.Exponential(0.02))  # only its prior: posterior Exp(0.02)
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    y = jnp.asarray(np.random.default_rng(0).normal(size=200))
    mcmc = MCMC(SGLD(model), num_warmup=0, num_samples=300, progress_bar=False)
    start = {"mu": jnp.asarray(0.0), "s": jnp.asarray(12.0)}  # unconstrained, as in NumPyro
    mcmc.run(jax.random.key(0), y, init_params=start, extra_fields=("diverging",))
    s = np.asarray(mcmc.get_samples()["s"])
    estimator = mcmc.sampler.estimator  # the kernel's (whitened) estimator
    # control variates (or the full data): the clip is ten bulk norms, 10 √D, and a clipped
    # step at the default ε = 0.1 moves √D, far below the jump limit
    assert estimator.control_variate or estimator.n == estimator.N
    assert gradient_clip_norm(estimator) == pytest.approx(10 * np.sqrt(2))
    assert np.all(np.isfinite(s)) and np.ptp(s[100:]) > 0  # it moves
    assert np.median(s[100:]) < 500  # back in the bulk of Exp(0.02) (without: e¹² ≈ 1.6e5)
    assert int(np.sum(mcmc.get_extra_fields()["diverging"])) == 0
