"""Statistical tests of SBPS / pSBPS (fixed keys, ArviZ ESS and MCSE).

The chains are driven by the samplers' own :class:`~pplsamplers.kernels.spec.KernelSpec` (``kernel.spec``:
init, kernel, default params and warmup, frozen after ``num_warmup`` steps as the adapter does),
on the raw potential, without NumPyro's per-run recompilation.  Logistic-regression references are NumPyro NUTS runs stored by
``tests/data/make_references.py``.
"""

import json
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from models import logistic_regression
from pplsamplers.estimator import Whitening, build_potential
from pplsamplers.infer import SBPS
from pplsamplers.kernels.spec import WarmupContext, WarmupWindow
from pplsamplers.registry import PSBPS
from tests.statistical import QUARTIC_SECOND_MOMENT, quartic_potential

pytestmark = [pytest.mark.statistical, pytest.mark.runtime_bound]

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "logreg_nuts_n1000_d20_ill.json"
NUM_CHAINS = 4


def run_chains(kernel, potential, key, num_warmup, num_samples, starts, return_params=False):
    """Sequential chains through one compiled scan: draws (C, S, D) and summed infos (and
    each chain's frozen params with ``return_params``)."""
    spec = kernel.spec
    step = spec.build_kernel()
    potential = potential.estimator  # on the raw potential's estimator (no whitening)
    zero = jnp.zeros(potential.dim)
    context = WarmupContext(zero, None, None, Whitening(zero, jnp.ones_like(zero)), whitened=False)
    start_params = spec.default_params(jax.random.key(1), potential, context)

    @jax.jit
    def chain(key, start):
        init_key, run_key = jax.random.split(key)
        kernel_state = spec.init(init_key, start, potential, start_params)
        adapt = spec.warmup_init(kernel_state, start_params)

        def body(carry, xs):
            iteration, key = xs
            step_key, warmup_key = jax.random.split(key)
            state, params, adapt = carry
            state, info = step(step_key, state, potential, params)
            window = WarmupWindow(iteration, num_warmup)
            state, params, adapt = jax.lax.cond(
                iteration < num_warmup,
                lambda: spec.warmup(warmup_key, state, params, adapt, info, potential, window),
                lambda: (state, params, adapt),
            )
            return (state, params, adapt), (state.position, info)

        total = num_warmup + num_samples
        xs = (jnp.arange(total), jax.random.split(run_key, total))
        (_, params, _), (positions, infos) = jax.lax.scan(
            body, (kernel_state, start_params, adapt), xs
        )
        return jax.tree.map(lambda a: a[num_warmup:], (positions, infos)), params

    runs = [chain(k, s) for k, s in zip(jax.random.split(key, len(starts)), starts, strict=True)]
    positions = np.stack([np.asarray(r[0][0]) for r in runs])
    infos = jax.tree.map(lambda *a: np.stack([np.asarray(x) for x in a]), *[r[0][1] for r in runs])
    if return_params:
        return positions, infos, [r[1] for r in runs]
    return positions, infos


def ess_per_coordinate(draws):
    return np.array([float(az.ess(draws[:, :, j])) for j in range(draws.shape[-1])])


def mcse_per_coordinate(draws):
    return np.array([float(az.mcse(draws[:, :, j])) for j in range(draws.shape[-1])])


# ------------------------------------------------------- exact mode: 5-d Gaussian
def test_full_batch_sbps_matches_a_correlated_gaussian():
    """n = N and a very large k: exact BPS up to the violation count, which must be 0."""
    rng = np.random.default_rng(0)
    factor = rng.standard_normal((5, 5))
    cov = factor @ factor.T / 5 + 0.5 * np.eye(5)
    mean = np.array([0.0, 0.5, 1.0, -1.5, 2.0])
    precision, mu = jnp.asarray(np.linalg.inv(cov)), jnp.asarray(mean)
    terms = lambda x, idx: (0.0, 0.5 * (x - mu) @ precision @ (x - mu) * jnp.ones(idx.shape[0]))
    potential = build_potential(terms, dim=5, N=1, n=1, init_position=jnp.zeros(5))
    kernel = SBPS(potential=potential, k=100.0, refresh_rate=1.0)
    starts = jnp.asarray(rng.standard_normal((NUM_CHAINS, 5)))
    draws, info = run_chains(kernel, potential, jax.random.key(2024), 300, 2500, starts)

    assert int(info.bound_violations.sum()) == 0 and not info.interval_capped.any()
    centred = draws - mean
    products = {(i, j): centred[..., i] * centred[..., j] for i in range(5) for j in range(i, 5)}
    for j in range(5):
        series = draws[..., j]
        assert float(az.ess(series)) >= 100
        assert abs(series.mean() - mean[j]) < 4 * float(az.mcse(series))
        # the exact interval time-averages (eq. 19) estimate the same mean
        averages = info.time_average[..., j]
        assert abs(averages.mean() - mean[j]) < 4 * float(az.mcse(averages))
    for (i, j), series in products.items():
        # E[(x_i − μ_i)(x_j − μ_j)] = Σ_ij, checked with the MCSE of the product series
        assert float(az.ess(series)) >= 100
        assert abs(series.mean() - cov[i, j]) < 4 * float(az.mcse(series)), (i, j)


# ------------------------------------ exact gradients in 100-d: the radial direction
def test_full_batch_sbps_refreshes_enough_to_mix_the_radius_of_a_100d_gaussian():
    """N(0, I) in D = 100 with exact gradients and default options.  Along the flow and at
    every bounce |x|² − (x·v)² is constant, so only refreshment moves r = |x|²/D.  At the old
    default (refreshing at 1 % of the bounce rate) r had ESS 15 in 40 000 draws, and at
    D = 300 a short run gave E[x_i²] = 1.12; the full-batch default is now the bounce rate.
    r must mix (ESS ≥ 100), its mean must be 1 within 4 MCSE and its sd √(2/D) within 20 %
    (the sd of a sample sd with ESS ≥ 100 is ≤ 7 %, so 20 % is about 3 of them)."""
    dim = 100
    terms = lambda x, idx: (0.5 * jnp.sum(x**2), jnp.zeros(idx.shape[0]))
    potential = build_potential(terms, dim=dim, N=1, n=1, init_position=jnp.zeros(dim))
    starts = jax.random.normal(jax.random.key(3), (NUM_CHAINS, dim))
    draws, info = run_chains(
        SBPS(potential=potential), potential, jax.random.key(4), 500, 5000, starts
    )

    assert int(info.bound_violations.sum()) == 0
    radius = (draws**2).mean(-1)
    assert float(az.ess(radius)) >= 100
    assert abs(radius.mean() - 1.0) < 4 * float(az.mcse(radius))
    assert abs(radius.std() / np.sqrt(2.0 / dim) - 1.0) < 0.2


# ------------------------------------- pSBPS: the frozen preconditioner of a 100-d Gaussian
def test_psbps_preconditioner_converges_with_warmup_and_samples_correctly():
    """N(0, diag(s²)) in D = 100, s from 0.5 to 2 (the RMSprop A ∝ 1/√E[g²] ∝ s, within the
    factor-3 cap), exact gradients, default pSBPS, 2 chains × (1500 + 1500).  A was the
    RMSprop average of the last ~100 bounce gradients at the end of warmup; consecutive
    bounces see nearly the same x, so that is a handful of independent draws whatever the
    warmup length: log A missed log(s / mean s) by 0.20–0.23 (rms over coordinates) for both
    chains and both keys tried, and on the hierarchical robustness model the two chains' A
    were uncorrelated noise.  A is now the mean over the warmup window (0.6–0.9 of it) and
    converges with warmup: rms 0.08–0.09.  The bound 0.12 lies between the two.  The draws (A ≠ I,
    frozen) must be unbiased: each mean within 4 MCSE of 0 (max over 100 coordinates), and
    the sd of z = x / s, pooled over each half of the coordinates, within 10 % of 1."""
    dim = 100
    scale = jnp.asarray(np.geomspace(0.5, 2.0, dim))
    terms = lambda x, idx: (0.5 * jnp.sum((x / scale) ** 2), jnp.zeros(idx.shape[0]))
    potential = build_potential(terms, dim=dim, N=1, n=1, init_position=jnp.zeros(dim))
    starts = jax.random.normal(jax.random.key(3), (2, dim)) * scale
    draws, info, params = run_chains(
        PSBPS(potential=potential), potential, jax.random.key(5), 1500, 1500, starts, True
    )

    truth = np.log(np.asarray(scale) / np.asarray(scale).mean())
    for chain_params in params:
        error = np.log(np.asarray(chain_params.direction_scale)) - truth
        assert np.sqrt(np.mean(error**2)) < 0.12, np.sqrt(np.mean(error**2))
    assert int(info.bound_violations.sum()) == 0
    assert ess_per_coordinate(draws).min() >= 100
    assert np.all(np.abs(draws.mean((0, 1))) < 4 * mcse_per_coordinate(draws))
    z = draws / np.asarray(scale)
    for half in (z[..., : dim // 2], z[..., dim // 2 :]):
        assert abs(np.sqrt(np.mean(half**2)) - 1.0) < 0.1


# ------------------------------ exact gradients on a non-Gaussian target: the band's fit
def test_full_batch_sbps_on_a_quartic_target_k_shrinks_its_bias_and_violations_show_it():
    """U = Σ x⁴/4 in 2-d with exact gradients.  G(t) along a line is cubic, so the band's
    linear extrapolation (eq. 9) falls below the true rate; the band adds the observed lack of
    fit (``regression.excess_error``), yet some proposals still violate it, and each violation
    lets the particle run further into the tails than the true rate allows: E[x²] is biased
    upward.  This is SBPS's known approximation, and k is its knob: over 16 chains, k = 0.5's
    per-chain errors in E[x²] exceed k = 3's (the default) by a one-sided Mann–Whitney test at
    the 1 % level, and fewer of k = 3's proposals violate the band.  The test is on ranks
    because a few violations carry the bias: the pooled error at k = 0.5 is heavy-tailed
    (0.2 to 1.9 over keys and chain counts) and its MCSE is no guide.  The residual bias at
    k = 3 stays under 15 %; larger k does not remove it (the band's width is the fit's noise,
    tiny with exact gradients), which is why the self-check's full-data Stein test, not k, is
    the guard: it flags the k = 0.5 run."""
    from pplsamplers.diagnostics import self_check

    potential = quartic_potential(2)
    chains = 16
    starts = 0.5 * jax.random.normal(jax.random.key(7), (chains, 2))
    errors, per_chain, violations, checks = {}, {}, {}, {}
    for k in (3.0, 0.5):
        kernel = SBPS(potential=potential, k=k, refresh_rate=0.3, sample_interval=0.5)
        draws, info = run_chains(kernel, potential, jax.random.key(41), 500, 2000, starts)
        squares = (draws**2).reshape(chains, -1)
        assert float(az.ess(squares)) >= 400
        errors[k] = float(squares.mean()) / QUARTIC_SECOND_MOMENT - 1.0  # signed: upward
        per_chain[k] = squares.mean(axis=1) / QUARTIC_SECOND_MOMENT - 1.0
        violations[k] = int(info.bound_violations.sum()) / int(info.num_proposals.sum())
        checks[k] = self_check(np.asarray(draws), potential)
    assert violations[3.0] < 0.01, violations
    assert violations[0.5] > 2 * violations[3.0], violations
    assert abs(errors[3.0]) < 0.15, errors
    ranks = stats.mannwhitneyu(per_chain[0.5], per_chain[3.0], alternative="greater")
    assert ranks.pvalue < 0.01, (ranks, per_chain)
    assert not checks[0.5].passed, checks[0.5]


# ------------------------------------------- minibatch: the paper's logistic regression
@pytest.fixture(scope="module")
def logreg():
    (X, y), _ = logistic_regression.load_data(N=1000, d=20, seed=0, ill_conditioned=True)
    terms = logistic_regression.hand_written_terms(jnp.asarray(X, float), jnp.asarray(y, float))
    potential = build_potential(terms, dim=20, N=1000, n=100, init_position=jnp.zeros(20))
    with open(REFERENCE) as handle:
        reference = json.load(handle)
    starts = 0.1 * jax.random.normal(jax.random.key(5), (NUM_CHAINS, 20))
    return potential, np.asarray(reference["mean"]), np.asarray(reference["sd"]), starts


@pytest.fixture(scope="module")
def sbps_k3(logreg):
    potential, _, _, starts = logreg
    return run_chains(
        SBPS(potential=potential, k=3.0), potential, jax.random.key(31), 500, 3000, starts
    )


def test_minibatch_sbps_matches_nuts_on_logistic_regression(logreg, sbps_k3):
    """d = 20, N = 1000, n = 100, k = 3 (paper §7.1): every mean within 0.2 posterior sd
    and every sd within 20% of NUTS.  SBPS is biased by bound violations, so these are
    bias bounds, not MCSE bounds; the run is long enough (MCSE ≤ 0.07 sd) that a bias of
    0.2 sd would be seen."""
    _, ref_mean, ref_sd, _ = logreg
    draws, _ = sbps_k3
    ess = ess_per_coordinate(draws)
    assert ess.min() >= 100
    assert np.max(mcse_per_coordinate(draws) / ref_sd) < 0.07
    flat = draws.reshape(-1, draws.shape[-1])
    assert np.max(np.abs(flat.mean(0) - ref_mean) / ref_sd) < 0.2
    assert np.max(np.abs(flat.std(0, ddof=1) / ref_sd - 1.0)) < 0.2


def _violation_rate(info):
    return info.bound_violations.sum() / info.num_proposals.sum()


def test_bound_violation_rate_falls_as_k_grows(logreg, sbps_k3):
    """§4.1 / Supp. G.2: the violation probability decreases monotonically with k."""
    potential, _, _, starts = logreg
    rates = {3.0: _violation_rate(sbps_k3[1])}
    for k in (1.0, 5.0):
        _, info = run_chains(
            SBPS(potential=potential, k=k), potential, jax.random.key(32), 300, 1000, starts[:2]
        )
        rates[k] = _violation_rate(info)
    assert rates[1.0] > rates[3.0] > rates[5.0], rates
    assert rates[3.0] < 0.02  # the band is an approximate bound, not a loose one


def test_psbps_beats_sbps_in_ess_per_epoch(logreg, sbps_k3):
    """§5, Fig. 3: with covariate 0 of variance 6, the RMSprop preconditioner raises the
    minimum ESS per epoch (epoch = N per-datum evaluations, warmup excluded)."""
    potential, *_, starts = logreg
    psbps = run_chains(
        PSBPS(potential=potential, k=3.0), potential, jax.random.key(31), 500, 3000, starts
    )

    def min_ess_per_epoch(run):
        draws, info = run
        return ess_per_coordinate(draws).min() / (info.data_evals.sum() / potential.N)

    assert ess_per_coordinate(psbps[0]).min() >= 100
    assert min_ess_per_epoch(psbps) > min_ess_per_epoch(sbps_k3)
