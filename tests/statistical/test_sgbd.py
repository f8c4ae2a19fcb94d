"""Statistical tests of SGBD (paper §4–5): fixed keys, ArviZ ESS/MCSE, tolerances justified inline.

Relative bias of the mean is (mean − true mean) / true sd (``docs/design.md``).  The skew-normal toy
targets have sd 1, so it is the plain bias there.
"""

import functools

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

from models import linear_gaussian, skew_normal
from pplsamplers.estimator import Estimator, build_estimator
from pplsamplers.infer import SGBD
from pplsamplers.kernels.sgmcmc import sgbd, sgld
from pplsamplers.kernels.sgmcmc.step_size import STEP_SIZE_STEPS_PER_SAMPLE

pytestmark = [pytest.mark.statistical, pytest.mark.runtime_bound]


def test_full_batch_sgbd_matches_the_linear_gaussian_posterior():
    """Full batch (τ = 0, so corrected = vanilla) with σ_j = 0.25 sd_j: no noise bias.

    The Barker chain without accept/reject is exactly symmetric about the mean of a Gaussian
    target (the kernel commutes with x ↦ 2μ − x since p(−ĝ) = 1 − p(ĝ)), so the mean must
    match to Monte Carlo error.  Its variance carries a discretisation error O(σ²): on a
    standard normal at σ = 0.25 sd, 512 chains × 19 000 draws give var 1.018 ± 0.003, i.e.
    sd +0.9 %.  So sd must be within 4 MCSE(sd) + 2 % of the truth.
    """
    (A, x), kwargs = linear_gaussian.load_data(N=200, D=2, seed=0)
    reference = linear_gaussian.reference((A, x), kwargs)["theta"]
    sigma = 0.25 * np.asarray(reference["sd"])  # per-coordinate σ
    mcmc = MCMC(
        # σ in the model's coordinates on the full batch: no whitening, no automatic batch size
        SGBD(linear_gaussian.model, step_size=sigma, subsample_size=200, precondition=None),
        num_warmup=200,
        num_samples=4000,
        num_chains=4,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(20240601), A, x, **kwargs)
    idata = az.from_numpyro(mcmc)
    assert int(idata.sample_stats["data_evals"].min()) == 200 * STEP_SIZE_STEPS_PER_SAMPLE
    assert float(idata.sample_stats["tau_mean"].max()) == 0.0
    draws = idata.posterior["theta"].values  # (chain, draw, D)
    ess = az.ess(draws)
    assert np.all(ess >= 100), ess
    mcse, mcse_sd = az.mcse(draws), az.mcse(draws, method="sd")
    mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
    assert np.all(np.abs(mean - reference["mean"]) < 4 * mcse), (mean, reference["mean"], mcse)
    assert np.all(np.abs(sd - reference["sd"]) < 4 * mcse_sd + 0.02 * reference["sd"]), sd


# ---------------------------------------------------------------- skew-normal toy (§5.0.1)
N_PSEUDO, BATCH, CHAINS, STEPS, BURN = 10_000, 10, 256, 2200, 200
UNIT_NOISE = skew_normal.noise_coefficients(1.0, BATCH, N_PSEUDO)
SGLD_STEP = 0.5  # √(2ε) = 50 % of the target sd: SGLD's per-step noise, "equal step" to σ
K_SE = 3.0  # one-sided tolerance, in standard errors, for "no worse than" comparisons
# (shape, τ, σ) -> (the runs made there, how many batches of CHAINS chains).  "exact" is
# vanilla with τ = 0 (the exact gradient: Barker without accept/reject, whose bias is the
# discretisation error alone).  τ = 10 mixes slowly (sd ≈ 1.9), hence two batches there.
TOY_SETTINGS = {
    (5.0, 1.0, 0.5): (("vanilla", "corrected", "sgld", "exact"), 1),  # Fig. 2 / Fig. 9a
    (20.0, 1.0, 0.5): (("vanilla", "corrected", "sgld", "exact"), 1),
    (20.0, 1.0, 1.0): (("vanilla", "corrected"), 1),  # the step-size knob
    (5.0, 10.0, 0.5): (("vanilla", "corrected", "sgld"), 2),  # Fig. 9b: τ = 10 target sd
    (20.0, 10.0, 0.5): (("vanilla", "corrected", "sgld"), 2),
}


class _UniformIndices(Estimator):
    """An estimator whose minibatch indices are drawn through ``uniform`` (see _toy_draws)."""

    def sample_indices(self, rng_key):
        return jnp.minimum(
            (jax.random.uniform(rng_key, (BATCH,)) * N_PSEUDO).astype(jnp.int32), N_PSEUDO - 1
        )


@functools.partial(jax.jit, static_argnames="kind")
def _toy_draws(key, shape, noise_sd, sigma, kind):
    """CHAINS × (STEPS − BURN) draws minus the true mean, started at the true mean.

    Target SN(0, ω, shape) with sd 1; minibatch gradient noise of sd ``noise_sd``, injected
    through the data plate of ``models/skew_normal.py`` (so corrected SGBD sees it through
    its per-example estimate τ̂, as on a real model).  Indices are drawn uniformly with
    replacement through ``uniform`` (same law as the potential's ``randint``, which compiles
    about 1 s slower under ``vmap``).
    """
    delta = shape / jnp.sqrt(1.0 + shape**2)
    scale = 1.0 / jnp.sqrt(1.0 - 2.0 * delta**2 / jnp.pi)
    mean = scale * delta * jnp.sqrt(2.0 / jnp.pi)
    terms = skew_normal.hand_written_terms(noise_sd * jnp.asarray(UNIT_NOISE), shape, 0.0, scale)
    start = jnp.full(1, mean)
    with jax.ensure_compile_time_eval():
        potential = _UniformIndices(*build_estimator(terms, dim=1, N=N_PSEUDO, n=BATCH))
    if kind == "sgld":
        kernel, params = sgld.build_kernel(), sgld.SGLDParams(SGLD_STEP**2 / 2, jnp.ones(1))
        state = sgld.init(key, start, potential, params)
    else:
        kernel, params = sgbd.build_kernel(kind), sgbd.make_params(sigma, 1)
        state = sgbd.init(key, start, potential, params)
    step = lambda k, s: kernel(k, s, potential, params)

    def chain(chain_key):
        def body(current, step_key):
            current, _ = step(step_key, current)
            return current, current.position[0]

        return jax.lax.scan(body, state, jax.random.split(chain_key, STEPS))[1][BURN:] - mean

    return jax.vmap(chain)(jax.random.split(key, CHAINS))


def _abs_excess(chain_means_a, chain_means_b, weight=1.0):
    """|ā| − weight·|b̄| and its standard error, ā and b̄ averages of paired chain means.

    The chains are independent, and chain i of both runs shares its random numbers (common
    random numbers), so the pairs (a_i, b_i) are i.i.d. and the delta method gives the se
    from the per-chain values sign(ā) a_i − weight·sign(b̄) b_i (batch means over chains,
    which absorbs the within-chain autocorrelation).
    """
    a_bar, b_bar = chain_means_a.mean(), chain_means_b.mean()
    linear = np.sign(a_bar) * chain_means_a - weight * np.sign(b_bar) * chain_means_b
    excess = abs(a_bar) - weight * abs(b_bar)
    return float(excess), float(linear.std(ddof=1) / np.sqrt(linear.size))


def toy_summary():
    """Summaries per (kind, shape, τ, σ); all runs of one setting share keys (paired chains)."""
    summary = {}
    for number, ((shape, noise_sd, sigma), (kinds, batches)) in enumerate(TOY_SETTINGS.items()):
        keys = jax.random.split(jax.random.key(1000 + number), batches)
        for kind in kinds:
            noise, sampler = (0.0, "vanilla") if kind == "exact" else (noise_sd, kind)
            centred = np.concatenate(
                [np.asarray(_toy_draws(key, shape, noise, sigma, sampler)) for key in keys]
            )
            assert float(az.ess(centred)) >= 100, (kind, shape, noise_sd, sigma)
            summary[kind, shape, noise_sd, sigma] = dict(
                bias=float(centred.mean()),
                se=float(az.mcse(centred)),
                sd=float(centred.std()),
                chain_means=centred.mean(axis=1),
                chain_sds=centred.std(axis=1),
                draws=centred,
            )
    return summary


@pytest.fixture(scope="module")
def toy():
    return toy_summary()


@pytest.mark.parametrize("noise_sd", [1.0, 10.0])
@pytest.mark.parametrize("shape", [5.0, 20.0])
def test_sgbd_bias_is_at_most_half_of_sgld_fig2(toy, shape, noise_sd):
    """Fig. 2 / Fig. 9: step 50 % of the target sd (σ = 0.5 for SGBD, √(2ε) = 0.5 for SGLD),
    gradient noise τ = 1 and 10 target sd (the two levels of the paper's Fig. 9).

    Measured with these keys (relative bias ± MCSE): τ = 1, shape 5: SGLD +0.093 ± 0.006,
    vanilla SGBD +0.006 ± 0.007, corrected −0.012 ± 0.007; τ = 1, shape 20: SGLD +1.57 ± 0.01,
    vanilla −0.031 ± 0.007, corrected −0.053 ± 0.007; τ = 10: SGLD +1.86 / +6.63, vanilla
    +0.77 / +0.98, corrected +0.73 / +0.91 (shapes 5 / 20, MCSE ≤ 0.026).  2 MCSE counted
    against the claim on both sides.
    (``python -m tests.statistical.test_sgbd`` prints every number quoted in this file.)
    """
    langevin = toy["sgld", shape, noise_sd, 0.5]
    for variant in ("vanilla", "corrected"):
        barker = toy[variant, shape, noise_sd, 0.5]
        assert abs(barker["bias"]) + 2 * barker["se"] <= 0.5 * (
            abs(langevin["bias"]) - 2 * langevin["se"]
        ), (variant, barker["bias"], langevin["bias"])


CORRECTED_WORSE_AT_SHAPE_20 = (
    "measured, not an implementation error: at shape 20, tau = 1, sigma = 0.5 the "
    "exact-gradient Barker chain (no accept/reject) has relative bias -0.06; the gradient "
    "noise shifts vanilla's mean up by about +0.035 (to -0.03) and the correction removes most "
    "of that shift (corrected -0.05; the same with the true tau in place of tau-hat), so "
    "|corrected| exceeds |vanilla| by 0.021 +- 0.002 (paired), about 10 se.  The paper's "
    "Fig. 9a only reports 'little difference' between the variants at tau = target sd."
)


@pytest.mark.parametrize(
    "shape",
    [
        5.0,
        pytest.param(
            20.0, marks=pytest.mark.xfail(strict=True, reason=CORRECTED_WORSE_AT_SHAPE_20)
        ),
    ],
)
def test_corrected_sgbd_bias_vs_vanillas_at_unit_noise(toy, shape):
    """Corrected ≤ vanilla at τ = target sd (Fig. 9a), σ = 50 % of the target sd.

    The paper makes the corrected-versus-vanilla claim only at τ = 10 target sd (Fig. 9b,
    tested by ``test_corrected_sgbd_has_less_bias_under_large_noise_fig9b``, where both halves
    of the Fig. 2 statement hold together); at τ = target sd it reports "little difference".
    This records what happens there.

    Checked: |bias_corrected| ≤ |bias_vanilla| + 3 se, with se that of the paired difference
    of the two absolute biases (same keys; delta method over the 256 independent chain
    pairs).  Measured with these keys: shape 5: excess +0.006 ± 0.012 (passes; a 2·10⁷-step
    probe with Gaussian noise gives vanilla +0.014 ± 0.001, corrected −0.006 ± 0.001);
    shape 20: excess +0.021 ± 0.002, about 10 se: fails, hence the strict xfail, whose reason
    gives the mechanism (checked by the next test).
    """
    vanilla, corrected = toy["vanilla", shape, 1.0, 0.5], toy["corrected", shape, 1.0, 0.5]
    excess, se = _abs_excess(corrected["chain_means"], vanilla["chain_means"])
    assert excess <= K_SE * se, (corrected["bias"], vanilla["bias"], excess, se)


@pytest.mark.parametrize("shape", [5.0, 20.0])
def test_corrected_sgbd_removes_the_noise_induced_shift(toy, shape):
    """What the correction provably targets (Prop. 1, Prop. 4), at τ = target sd, σ = 0.5.

    Gradient noise shrinks p̂ towards ½ (Prop. 1); p̃ undoes that to within 0.019 (Prop. 4),
    so corrected SGBD should behave like the exact-gradient chain ("exact", same keys), whose
    own bias is Barker's discretisation error (measured −0.022 / −0.064 at shapes 5 / 20).
    Checked: corrected's mean is closer to the exact chain's than vanilla's is, 3 se counted
    against the claim (measured distances 0.009 vs 0.028 and 0.011 vs 0.033, se ≈ 0.003);
    and its sd inflation is smaller (vanilla − corrected sd measured 0.02, paired se ≈ 0.002),
    without dropping below the target sd.
    """
    exact = toy["exact", shape, 1.0, 0.5]
    vanilla, corrected = toy["vanilla", shape, 1.0, 0.5], toy["corrected", shape, 1.0, 0.5]
    excess, se = _abs_excess(
        corrected["chain_means"] - exact["chain_means"],
        vanilla["chain_means"] - exact["chain_means"],
    )
    assert excess + K_SE * se <= 0, (exact["bias"], vanilla["bias"], corrected["bias"], se)

    paired = vanilla["chain_sds"] - corrected["chain_sds"]
    paired_se = paired.std(ddof=1) / np.sqrt(paired.size)
    assert vanilla["sd"] - corrected["sd"] > 4 * paired_se
    sd_se = float(az.mcse(corrected["draws"], method="sd"))
    assert corrected["sd"] > 1.0 - 2 * sd_se  # closer to 1 without overshooting it


@pytest.mark.parametrize("shape", [5.0, 20.0])
def test_corrected_sgbd_has_less_bias_under_large_noise_fig9b(toy, shape):
    """Fig. 9b: τ = 10 target sd, σ = 50 % of the target sd (the paper's large-step case).

    The issue's "corrected SGBD's bias is at most vanilla's" (shapes 5 and 20, step 50 % of
    the target sd), at the noise level where the paper makes that claim; SGBD's bias is at
    most half of SGLD's at the same τ (``test_sgbd_bias_is_at_most_half_of_sgld_fig2``).
    τ̂|z| ≈ 5 > 1.702, so corrected SGBD uses the extreme rule (Alg. 4) almost everywhere;
    Cor. 2 makes that the largest bias reduction a symmetric rule can give.  Measured with
    these keys: vanilla +0.77 / +0.98, corrected +0.73 / +0.91 (shapes 5 / 20; MCSE 0.017);
    |corrected| − |vanilla| = −0.047 ± 0.011 / −0.073 ± 0.011 (paired).  2 se counted
    against the claim.
    """
    vanilla, corrected = toy["vanilla", shape, 10.0, 0.5], toy["corrected", shape, 10.0, 0.5]
    excess, se = _abs_excess(corrected["chain_means"], vanilla["chain_means"])
    assert excess + 2 * se < 0, (corrected["bias"], vanilla["bias"], excess, se)


def test_sgbd_bias_grows_with_the_step_size(toy):
    """Halving σ (1.0 → 0.5 target sd) shrinks the bias (shape 20, τ = 1).

    Measured corrected relative bias −0.154 ± 0.004 vs −0.053 ± 0.007; sds 1.26 / 1.19 vs
    1.08 / 1.06 (vanilla / corrected).  2 MCSE counted against the claim.
    """
    large, small = toy["corrected", 20.0, 1.0, 1.0], toy["corrected", 20.0, 1.0, 0.5]
    assert abs(large["bias"]) - 2 * large["se"] > abs(small["bias"]) + 2 * small["se"]
    for variant in ("vanilla", "corrected"):
        large, small = toy[variant, 20.0, 1.0, 1.0], toy[variant, 20.0, 1.0, 0.5]
        assert large["sd"] - 1.0 > 2 * (small["sd"] - 1.0) > 0, variant


if __name__ == "__main__":  # python -m tests.statistical.test_sgbd: the numbers quoted above
    summary = toy_summary()
    for (shape, noise_sd, sigma), (kinds, _) in TOY_SETTINGS.items():
        print(f"shape {shape:g}, τ {noise_sd:g}, σ {sigma:g}")
        for kind in kinds:
            run = summary[kind, shape, noise_sd, sigma]
            chain_se = run["chain_means"].std(ddof=1) / np.sqrt(run["chain_means"].size)
            print(
                f"  {kind:<9} bias {run['bias']:+.4f} ± {run['se']:.4f} (ArviZ MCSE; "
                f"{chain_se:.4f} from chain means)   sd {run['sd']:.4f}"
            )
        if "corrected" in kinds:
            means = {kind: summary[kind, shape, noise_sd, sigma]["chain_means"] for kind in kinds}
            excess, se = _abs_excess(means["corrected"], means["vanilla"])
            print(f"  |corrected| − |vanilla| = {excess:+.4f} ± {se:.4f} (paired)")
        if "exact" in kinds:
            excess, se = _abs_excess(
                means["corrected"] - means["exact"], means["vanilla"] - means["exact"], 0.5
            )
            print(f"  |corrected − exact| − ½|vanilla − exact| = {excess:+.4f} ± {se:.4f}")


@pytest.mark.parametrize("sigma", [0.2, 0.5])
def test_barker_variance_bias_coefficient(sigma):
    """The coherent bias budget's premise (``pplsamplers.kernels.sgmcmc.step_size.
    BARKER_VARIANCE_BIAS``):
    full-batch SGBD on N(0, 1) has stationary variance 1 + bσ² with b between the leading
    order 1/4 and the budget's 0.27, so the automatic σ (``auto_sigma``) is never too large.

    64 independent coordinates per chain, 16 chains of 400/σ² steps (about 200 relaxation
    times of the slowest moment); the standard error comes from the 16 chain means.  At σ =
    0.5 the variance is 1.067 ± 0.001 (b = 0.27); at σ = 0.2 the leading order holds (about
    1.01, with a standard error of 0.003, so that case only bounds b to about ±0.3).  The test
    allows b in [0.25, 0.27] widened by 4 standard errors.
    """
    from pplsamplers.kernels.sgmcmc.step_size import BARKER_VARIANCE_BIAS

    dim = 64
    terms = lambda x, idx: (0.5 * jnp.sum(x**2), jnp.zeros(idx.shape[0], x.dtype))
    potential = build_estimator(terms, dim=dim, N=10, n=10)
    kernel, params = sgbd.build_kernel("corrected"), sgbd.make_params(jnp.full(dim, sigma), dim)
    steps = int(400 / sigma**2)

    def chain(key):
        start_key, run_key = jax.random.split(key)
        state = sgbd.init(start_key, jax.random.normal(start_key, (dim,)), potential, params)

        def body(current, step_key):
            current, _ = kernel(step_key, current, potential, params)
            return current, jnp.mean(current.position**2)

        return jax.lax.scan(body, state, jax.random.split(run_key, steps))[1][steps // 10 :]

    per_chain = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(7), 16)))
    variance = per_chain.mean(1)
    excess, se = variance.mean() - 1.0, variance.std(ddof=1) / np.sqrt(variance.size)
    assert 0.25 * sigma**2 - 4 * se <= excess <= BARKER_VARIANCE_BIAS * sigma**2 + 4 * se, (
        excess,
        se,
    )
