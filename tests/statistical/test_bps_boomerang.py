"""Statistical tests of BPS and the Boomerang (fixed keys, ArviZ ESS / MCSE).

Every check first requires ESS ≥ 100 and then compares with 4·MCSE (|z| > 4 has probability
6e-5 per check for a correct sampler), except where a tolerance is stated and justified.
"""

import json
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC
from scipy import stats

from models import linear_gaussian, logistic_regression
from pplsamplers.infer import BPS, Boomerang
from tests.statistical import QUARTIC_SECOND_MOMENT, quartic_potential

pytestmark = pytest.mark.statistical

D = 10
N_DATA = 200
"""Data size of the linear-Gaussian tests; ``subsample_size=N_DATA`` is full batch."""
NUTS_REFERENCE = Path(__file__).parents[1] / "data" / "logreg_N100000_nuts.json"


@pytest.fixture(scope="module")
def gaussian():
    # correlated covariates make the posterior correlated (neighbour correlations about -0.4)
    args, kwargs = linear_gaussian.load_data(N=N_DATA, D=D, correlation=0.6, seed=3)
    mean, cov = linear_gaussian.posterior(*args, **kwargs)
    return args, kwargs, mean, cov


def _run(kernel, args, kwargs, key, num_warmup, num_samples, **run_kwargs):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, progress_bar=False)
    mcmc.run(
        jax.random.key(key),
        *args,
        extra_fields=("bound_violations", "num_proposals"),
        **kwargs,
        **run_kwargs,
    )
    return mcmc


def _check_mean_and_covariance(draws, mean, cov):
    """Means and every covariance entry E[(θi−μi)(θj−μj)] = Σij within 4 MCSE."""
    draws = np.asarray(draws)
    ess = np.asarray(az.ess(draws[None]))
    assert ess.min() >= 100, ess
    mcse = np.asarray(az.mcse(draws[None]))
    assert np.all(np.abs(draws.mean(0) - mean) < 4 * mcse), (draws.mean(0) - mean) / mcse
    centred = draws - mean
    rows, cols = np.triu_indices(len(mean))
    products = centred[:, rows] * centred[:, cols]
    ess_products = np.asarray(az.ess(products[None]))
    assert ess_products.min() >= 100, ess_products
    mcse_products = np.asarray(az.mcse(products[None]))
    z = (products.mean(0) - cov[rows, cols]) / mcse_products
    assert np.all(np.abs(z) < 4), z


def test_full_batch_bps_matches_linear_gaussian_posterior(gaussian):
    args, kwargs, mean, cov = gaussian
    # Gaussian target: the BPS rate is linear in t, so the interpolation envelope is exact
    # (alpha = 1 has no violations) and full-batch BPS is exact.  Posterior sds are about
    # 0.2 and |v| about 3, so refreshing at rate 5 happens every few crossings.
    mcmc = _run(
        BPS(
            linear_gaussian.model,
            subsample_size=N_DATA,
            refresh_rate=5.0,
            thinning={"alpha": 1.0},
        ),
        args,
        kwargs,
        key=11,
        num_warmup=300,
        num_samples=3000,
    )
    assert int(np.sum(mcmc.get_extra_fields()["bound_violations"])) == 0
    _check_mean_and_covariance(mcmc.get_samples()["theta"], mean, cov)


def test_full_batch_boomerang_matches_linear_gaussian_posterior(gaussian):
    args, kwargs, mean, cov = gaussian
    # automatic reference: MAP and inverse Hessian diagonal, which misses the correlations,
    # so the sampler has to bounce; alpha = 1.5 with a 0.5 rad horizon cap keeps envelope
    # misses rare (the violation rate is asserted small below)
    mcmc = _run(
        # raw coordinates: a dense preconditioner would make the reference exact (no events)
        Boomerang(linear_gaussian.model, subsample_size=N_DATA, precondition=None),
        args,
        kwargs,
        key=12,
        num_warmup=300,
        num_samples=3000,
    )
    extra = mcmc.get_extra_fields()
    assert np.sum(extra["bound_violations"]) < 0.01 * np.sum(extra["num_proposals"])
    _check_mean_and_covariance(mcmc.get_samples()["theta"], mean, cov)


def test_boomerang_with_reference_equal_to_target_gives_exact_marginals(gaussian):
    args, kwargs, mean, cov = gaussian
    # with N(x*, Σ*) equal to the posterior, ∇E = 0: the flow and the N(0, Σ*) refreshment
    # alone must preserve the posterior; start far out (5 sd) and let warmup forget it
    start = {"theta": jnp.asarray(mean + 5 * np.sqrt(np.diag(cov)))}
    mcmc = _run(
        Boomerang(linear_gaussian.model, subsample_size=N_DATA, reference=(mean, cov)),
        args,
        kwargs,
        key=13,
        num_warmup=100,
        num_samples=1000,
        init_params=start,
    )
    draws = np.asarray(mcmc.get_samples()["theta"])
    ess = np.asarray(az.ess(draws[None]))
    assert ess.min() >= 100, ess
    # the KS test assumes independent draws: require ESS close to the number of draws
    assert ess.min() > 0.7 * len(draws), ess
    z = (draws - mean) / np.sqrt(np.diag(cov))
    pvalues = [stats.kstest(z[:, j], "norm").pvalue for j in range(D)]
    assert min(pvalues) > 1e-3, pvalues  # Bonferroni over 10 marginals at 1e-2


def test_control_variate_boomerang_matches_nuts_on_large_logistic_regression():
    reference = json.loads(NUTS_REFERENCE.read_text())
    ref_mean, ref_sd = np.asarray(reference["mean"]), np.asarray(reference["sd"])
    args, kwargs = logistic_regression.load_data(N=100_000, d=20, seed=0)
    # the original Boomerang's dense inverse-Hessian reference (Bierkens et al. 2020): draws
    # are then nearly independent, so 2000 of them pin the means to ~0.02 sd.  (With the
    # diagonal reference the chain also matches NUTS, see docs/sections/boomerang.md, but
    # ESS/draw is ~0.2, too slow for this suite.)  The minibatch noise is handled by the
    # default noise margin for control-variate rates.
    kernel = Boomerang(
        logistic_regression.model,
        subsample_size=1000,
        control_variate=True,
        curvature="full_hessian",
    )
    mcmc = _run(kernel, args, kwargs, key=14, num_warmup=100, num_samples=2000)
    # the reference is built around the control-variate anchor (one MAP search), both in the
    # kernel's coordinates
    np.testing.assert_array_equal(kernel.reference.mean, kernel.prepared.context.anchor)
    draws = np.asarray(mcmc.get_samples()["w"])
    ess = np.asarray(az.ess(draws[None]))
    assert ess.min() >= 100, ess
    # acceptance criterion of the issue: mean within 0.1 posterior sd, sd within 10%.  The
    # Monte Carlo error of each mean is sd/sqrt(ESS) (~0.025 sd here; NUTS adds ~0.013 sd),
    # so 0.1 sd is ~3.5 combined standard errors; the sd's relative error is ~1/sqrt(2 ESS),
    # ~2%, so 10% is ~5 of them.
    assert ess.min() >= 1000, ess
    assert np.max(np.abs(draws.mean(0) - ref_mean) / ref_sd) < 0.1
    assert np.max(np.abs(draws.std(0, ddof=1) / ref_sd - 1)) < 0.1


# ------------------------------------ a non-Gaussian target with exact gradients
def _bps_quartic(key: jax.Array, **thinning) -> tuple[float, float, float, float]:
    """BPS with exact gradients on U = Σ x⁴/4 in 2-d, 4 chains × 6000 draws (the first 1000
    dropped): (E[x²] relative error, its MCSE relative to the truth, the fraction of
    proposals above the envelope, proposals per draw)."""
    from pplsamplers.kernels.pdmp import bps
    from pplsamplers.kernels.pdmp.builder import ThinningOptions

    potential = quartic_potential(2).estimator
    pdmp = bps.build_pdmp(thinning=ThinningOptions(**thinning))
    params = bps.make_params(  # t_init and max_extrapolation: make_params' former defaults
        2,
        sample_interval=0.5,
        t_init=0.1,
        max_extrapolation=1.0,
        refresh_rate=0.3,
        dtype=jnp.float64,
    )

    def chain(key):
        init_key, run_key = jax.random.split(key)
        state = pdmp.init(init_key, 0.5 * jnp.ones(2), potential, params)

        def body(state, key):
            state, info = pdmp.kernel(key, state, potential, params)
            return state, (state.position, info.bound_violations, info.num_proposals)

        return jax.lax.scan(body, state, jax.random.split(run_key, 6000))[1]

    positions, violations, proposals = jax.jit(jax.vmap(chain))(jax.random.split(key, 4))
    squares = np.asarray(positions[:, 1000:] ** 2).reshape(4, -1)
    assert float(az.ess(squares)) >= 100
    mcse = float(az.mcse(squares)) / QUARTIC_SECOND_MOMENT
    error = float(squares.mean()) / QUARTIC_SECOND_MOMENT - 1.0
    total = float(proposals.sum())
    return error, mcse, float(violations.sum()) / total, total / proposals.size


def test_full_batch_bps_is_unbiased_on_a_quartic_target_with_the_default_envelope():
    """Along a line of U = Σ x⁴/4 the BPS rate is cubic, so the secant of Alg. 2 (eq. 12)
    falls below it whatever α.  The default envelope adds k_fit = 3 times the curvature it
    learns from its own residuals (pdmp/lack_of_fit.py), which bounds the rate where the
    curvature is at most that: E[x²] must then be right within 4 MCSE (about 6 % here) and
    violations rare.  Measured with 6 keys: +1.0 ± 0.6 %, 0.04 % of proposals violated.
    The paper's envelope (``fit_margin=0``, same key) is checked to be biased, so that this
    test can tell the two apart: +18 ± 1.7 % with 11 % violations (it was the default before
    the margin; α = 10 instead gave +4.3 ± 1.5 % at 5× the proposals)."""
    key = jax.random.key(5)
    error, mcse, violated, cost = _bps_quartic(key)
    assert abs(error) < 4 * mcse, (error, mcse)
    assert violated < 0.005, violated
    paper_error, paper_mcse, paper_violated, paper_cost = _bps_quartic(key, fit_margin=0.0)
    assert paper_error > 4 * paper_mcse and paper_violated > 0.05, (paper_error, paper_violated)
    # the price: a few times the proposals of the (too low) paper envelope, measured 2.2
    # per draw of 0.5 time units against 0.6 (α = 10 needs about 3)
    assert cost < 6 * paper_cost, (cost, paper_cost)
