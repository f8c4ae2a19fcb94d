"""SGLD on the linear Gaussian model (HAMCMC eq. 14): exact mean, step-size variance bias.

For a Gaussian target with precision P, full-batch SGLD x' = x − εP(x−μ) + √(2ε)ξ is a
Gaussian AR(1) chain whose stationary law has mean μ exactly and, along each eigenvector
of P with eigenvalue λ, variance 2/(λ(2 − ελ)) instead of 1/λ: a relative bias of
ελ/(2 − ελ) that vanishes linearly in ε.  The tests check both facts through the public
NumPyro/ArviZ pipeline.
"""

import arviz as az
import jax
import numpy as np
import pytest
from numpyro.infer import MCMC

from models import linear_gaussian
from pplsamplers import SGLD

pytestmark = pytest.mark.statistical

ARGS, KWARGS = linear_gaussian.load_data(N=100, D=2, correlation=0.3, seed=11)
MEAN, COV = linear_gaussian.posterior(*ARGS, **KWARGS)
EIGVALS, EIGVECS = np.linalg.eigh(np.linalg.inv(COV))


def _run(step_size, key, num_samples=20000):
    # the theory is for the model's own coordinates: switch off the default whitening, in
    # which ε would be measured in posterior variances (test_whitened_step_is_scale_free)
    mcmc = MCMC(
        SGLD(linear_gaussian.model, step_size=step_size, precondition=None),
        num_warmup=500,
        num_samples=num_samples,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(key), *ARGS, **KWARGS)
    return mcmc


def _eigen_variances(draws):
    projected = draws.reshape(-1, draws.shape[-1]) @ EIGVECS
    return projected.var(0)


def test_full_batch_sgld_mean_within_4_mcse():
    step = 0.2 / EIGVALS.max()
    mcmc = _run(step, key=20260101, num_samples=5000)
    idata = az.from_numpyro(mcmc)
    ess = az.ess(idata, var_names=["theta"])["theta"].values
    mcse = az.mcse(idata, var_names=["theta"])["theta"].values
    assert ess.min() >= 100, ess
    draws = mcmc.get_samples()["theta"]
    np.testing.assert_array_less(np.abs(draws.mean(0) - MEAN), 4 * mcse)


def test_variance_bias_matches_theory_and_shrinks_with_step():
    errors = []
    for fraction, key in ((0.5, 7), (0.125, 8)):
        step = fraction / EIGVALS.max()
        draws = np.asarray(_run(step, key).get_samples(group_by_chain=True)["theta"])
        variances = _eigen_variances(draws)
        theory = 2.0 / (EIGVALS * (2.0 - step * EIGVALS))
        # the measured variances follow the SGLD stationary law; the tolerance is 4 standard
        # errors of a variance estimate, sd ≈ var·sqrt(2/ESS) (conservative: x² mixes faster
        # than x for an AR(1) chain), with ESS ≥ 1000 here
        ess = az.ess(draws.reshape(4, -1, 2) @ EIGVECS).min()
        assert ess >= 1000
        np.testing.assert_allclose(variances, theory, rtol=4 * np.sqrt(2 / ess))
        errors.append(np.max(np.abs(variances * EIGVALS - 1.0)))
    # the relative variance bias at ελ_max = 0.5 is 1/3; at 0.125 it is 1/15: it must shrink
    assert errors[1] < 0.5 * errors[0], errors
