"""pSGLD and SGRLD at their defaults (whitened): the step-size bias is the one their AR(1)
law predicts, and it shrinks with ε.

Full batch on a Gaussian posterior N(μ, Σ), the sampler's coordinates are z with
x = c + L z (the shared warmup's whitening, ``state.metric``, per chain), where the
precision is P_z = Lᵀ Σ⁻¹ L.  One step z' = z − ε G P_z (z − m) + √(2εG) ξ (pSGLD: G the
frozen RMSprop diagonal, ``params.inverse_metric``; SGRLD without a metric: G = I) is a
Gaussian AR(1) chain whose stationary covariance S solves the discrete Lyapunov equation
S = A S Aᵀ + 2εG, A = I − εG P_z, with the mean exact.  So the draws' covariance in the
model's coordinates is L S Lᵀ, not Σ: a variance bias of about ε G/2 that vanishes with ε.
The draws are every tenth step (``steps_per_sample``), which leaves the stationary law alone.
"""

import arviz as az
import jax
import numpy as np
import pytest
from numpyro.infer import MCMC
from scipy.linalg import solve_discrete_lyapunov

from models import linear_gaussian
from pplsamplers import PSGLD, SGRLD

pytestmark = pytest.mark.statistical

ARGS, KWARGS = linear_gaussian.load_data(N=100, D=2, correlation=0.3, seed=11)
MEAN, COV = linear_gaussian.posterior(*ARGS, **KWARGS)
PRECISION = np.linalg.inv(COV)
CHAINS, DRAWS = 4, 5000


def _run(sampler, step_size: float, key: int) -> MCMC:
    mcmc = MCMC(
        sampler(linear_gaussian.model, step_size=step_size),
        num_warmup=500,
        num_samples=DRAWS,
        num_chains=CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(key), *ARGS, **KWARGS)
    return mcmc


def _predicted_covariance(state, chain: int) -> np.ndarray:
    """L S Lᵀ for one chain's final metric and frozen step (module docstring)."""
    factor = np.asarray(state.metric.factor[chain], float)
    factor = np.diag(factor) if factor.ndim == 1 else factor
    params = state.params
    step = float(np.asarray(params.step_size)[chain])
    metric = getattr(params, "inverse_metric", None)
    g = np.ones(2) if metric is None else np.asarray(metric, float)[chain]
    precision_z = factor.T @ PRECISION @ factor
    transition = np.eye(2) - step * g[:, None] * precision_z
    stationary = solve_discrete_lyapunov(transition, np.diag(2 * step * g))
    return factor @ stationary @ factor.T


@pytest.mark.parametrize("sampler", [PSGLD, SGRLD], ids=["psgld", "sgrld"])
def test_variance_bias_is_the_ar1_law_and_shrinks_with_step(sampler):
    excess = []
    for step, key in ((0.5, 4), (0.125, 3)):
        mcmc = _run(sampler, step, key)
        draws = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"], float)
        ess = float(np.min(az.ess(draws)))  # bulk ESS of (chains, draws, 2)
        assert ess >= 2000, ess
        state = mcmc.last_state
        # the given ε is kept: at key 3 pSGLD's RMSprop started at one first g² near 0,
        # G ~ 10⁵, and the divergence guard halved ε to 0.0078 in warmup
        np.testing.assert_allclose(np.asarray(state.params.step_size), step)
        biases = []
        for chain in range(CHAINS):
            predicted = _predicted_covariance(state, chain)
            observed = np.cov(draws[chain], rowvar=False)
            # a variance's relative sd is √(2/ESS_chain); 4 of them, ESS per chain ≥ ess/4
            tol = 4 * np.sqrt(2 / (ess / CHAINS))
            np.testing.assert_allclose(np.diag(observed), np.diag(predicted), rtol=tol)
            biases.append(np.max(np.diag(predicted) / np.diag(COV)) - 1)
        # the mean is exact: within 4 MCSE of the analytic posterior mean
        mcse = np.asarray(az.mcse(draws))
        np.testing.assert_array_less(np.abs(draws.mean((0, 1)) - MEAN), 4 * mcse)
        excess.append(max(biases))
    # a real bias at ε = 0.5 (about ε/2 of the variance), a quarter of it at ε = 0.125
    assert excess[0] > 0.15 and excess[1] < 0.4 * excess[0], excess
