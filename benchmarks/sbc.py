"""Simulation-based calibration (Talts et al. 2018) of every sampler on a conjugate model.

SBC checks a sampler against its own prior predictive: draw θ̃ ~ p(θ), data ỹ ~ p(y | θ̃), run
the sampler on ỹ and take the rank of θ̃ among L (roughly independent) posterior draws.  If the
draws come from p(θ | ỹ), θ̃ is one more draw from the same distribution, so the rank is
uniform on {0, …, L} (Talts et al., Theorem 1).  Too wide a sampler gives a ∩-shaped
histogram, too narrow a ∪, a shifted one a slope.

The model (:func:`model`) holds R independent replicates side by side, so that one MCMC run
gives R ranks (one compilation, one warmup, vectorised):

    θ_r ~ N(0, 1),    y_nr | θ_r ~ N(a_nr θ_r, σ²),    n = 1..N (the data plate), r = 1..R,

with a_nr ~ N(0, s_a²) drawn once per replicate.  Each θ_r has its own conjugate posterior
N(m_r, v_r), v_r = 1 / (1 + Σ_n a_nr² / σ²), m_r = v_r Σ_n a_nr y_nr / σ² (:func:`posterior`).
With s_a = 0.1 and N = 200 prior and data weigh about 1 : 2, so a mis-weighted prior (say
scaled by N/n with the likelihood) is visible too.  The covariate makes the control-variate
gradient noise non-zero (with a_nr = 1 it would vanish and the minibatch would test nothing).
The cost of the design: the sampler sees one R-dimensional target, a product of R
one-dimensional posteriors, rather than R small runs.

Ranks: per chain, ``num_samples`` draws are thinned to ⌈L / chains⌉ evenly spaced ones and the
pooled first L kept (Talts §4.1: thin by the ESS, so that the L draws are close to independent;
autocorrelated draws give a ∪-shaped histogram even for an exact sampler).  The ArviZ bulk ESS
of each θ_r over all chains is reported; L must not exceed it.

Uniformity (:func:`rank_tests`) is tested three ways on the R ranks, u = rank / L:

* χ² on ``bins`` equal bins (the omnibus test);
* location: z of mean(u) against 1/2 (a shifted sampler);
* dispersion: z of mean((u − ½)²) against its value (L + 2) / (12 L) for a uniform rank on
  {0, …, L} (a too wide or too narrow sampler; the most powerful of the three for scale errors).

Run ``python benchmarks/sbc.py`` (every run; ≈ 1.5–3 min on 2 shared CPU cores) or
``python benchmarks/sbc.py sgld sgbd hamcmc``; ``--png PATH`` also saves the histograms.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402
from scipy import stats  # noqa: E402

from pplsamplers.registry import SAMPLERS, make_kernel  # noqa: E402

NUM_REPLICATES = 400
NUM_DATA = 200
NOISE_SD = 1.0
COVARIATE_SD = 0.1
NUM_DRAWS = 19
"""L: ranks take the values 0..19, two per bin of ten."""
BINS = 10

RUNS: dict[str, dict[str, Any]] = {
    # label: the registry name, num_warmup and num_samples per chain (2 chains), and options
    # (none: package defaults).  Lengths chosen so that the bulk ESS of 95 % of the θ_r is at
    # least L (printed by this script and asserted by the test).  New runs go at the end:
    # a run's key is folded in from its position.  SBPS, BPS and σBPS spend ten times the
    # events per draw at this D = 400 (pplsamplers.kernels.pdmp.tuning.radial_events), so a quarter
    # of their former draws keep the ESS above L (5 % quantiles 94, 84, 73; docs/sbc.md).
    "nuts": {"sampler": "nuts", "num_warmup": 100, "num_samples": 100},
    "sbps": {"sampler": "sbps", "num_warmup": 100, "num_samples": 50},
    "bps": {"sampler": "bps", "num_warmup": 100, "num_samples": 100},
    "sigmabps": {"sampler": "sigmabps", "num_warmup": 100, "num_samples": 100},
    "boomerang": {"sampler": "boomerang", "num_warmup": 100, "num_samples": 100},
    "sgld": {"sampler": "sgld", "num_warmup": 100, "num_samples": 400},
    "sgbd": {"sampler": "sgbd", "num_warmup": 100, "num_samples": 400},
    "hamcmc": {"sampler": "hamcmc", "num_warmup": 100, "num_samples": 400},
    # the biased kernels at a large fixed step, in the whitened coordinates (posterior sd 1):
    # SGLD's exact-gradient stationary variance is 1 / (1 − ε/2) = 1.67 at ε = 0.8
    "sgld-large-step": {"sampler": "sgld", "num_warmup": 100, "num_samples": 400, "step_size": 0.8},
    "sgbd-large-step": {"sampler": "sgbd", "num_warmup": 100, "num_samples": 400, "step_size": 2.0},
    "hamcmc-large-step": {
        "sampler": "hamcmc",
        "num_warmup": 100,
        "num_samples": 400,
        "step_size": 0.5,
    },
}
EXACT = ("nuts", "sbps", "bps", "sigmabps", "boomerang")
BIASED = ("sgld", "sgbd", "hamcmc", "sgld-large-step", "sgbd-large-step", "hamcmc-large-step")


def model(A, y=None, noise_sd: float = NOISE_SD):
    """R independent conjugate regressions: θ_r ~ N(0, 1), y_nr ~ N(a_nr θ_r, σ²).

    ``A`` and ``y`` are ``(N, R)``; the data plate runs over n.

    Examples
    --------
    >>> A = np.ones((3, 2))
    >>> numpyro.handlers.seed(model, 0)(A) is None
    True
    """
    num_data, num_replicates = A.shape
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([num_replicates]).to_event(1))
    with numpyro.plate("data", num_data) as idx:
        numpyro.sample(
            "y",
            dist.Normal(A[idx] * theta, noise_sd).to_event(1),
            obs=None if y is None else y[idx],
        )


class Simulation(NamedTuple):
    """θ̃ drawn from the prior and the data drawn given it."""

    theta: jax.Array
    """(R,) the prior draws."""
    A: jax.Array
    """(N, R) covariates."""
    y: jax.Array
    """(N, R) responses."""


def simulate(
    rng_key: jax.Array,
    num_replicates: int = NUM_REPLICATES,
    num_data: int = NUM_DATA,
    covariate_sd: float = COVARIATE_SD,
    noise_sd: float = NOISE_SD,
) -> Simulation:
    """θ̃_r ~ N(0, 1), a_nr ~ N(0, s_a²), y_nr ~ N(a_nr θ̃_r, σ²), from one key.

    Examples
    --------
    >>> sim = simulate(jax.random.key(0), num_replicates=3, num_data=5)
    >>> sim.A.shape, sim.theta.shape
    ((5, 3), (3,))
    """
    key_theta, key_a, key_y = jax.random.split(rng_key, 3)
    theta = jax.random.normal(key_theta, (num_replicates,))
    A = covariate_sd * jax.random.normal(key_a, (num_data, num_replicates))
    y = A * theta + noise_sd * jax.random.normal(key_y, (num_data, num_replicates))
    return Simulation(theta, A, y)


def posterior(A, y, noise_sd: float = NOISE_SD) -> tuple[np.ndarray, np.ndarray]:
    """The analytic posterior means m_r and sds √v_r of every θ_r."""
    A, y = np.asarray(A), np.asarray(y)
    var = 1.0 / (1.0 + np.sum(A**2, axis=0) / noise_sd**2)
    return var * np.sum(A * y, axis=0) / noise_sd**2, np.sqrt(var)


def thin(draws: np.ndarray, num_draws: int) -> np.ndarray:
    """``(chains, samples, R)`` -> ``(L, R)``: evenly spaced draws of each chain, pooled.

    Examples
    --------
    >>> thin(np.arange(20.0).reshape(2, 10, 1), 5)[:, 0]
    array([ 0.,  3.,  6., 10., 13.])
    """
    chains, samples = draws.shape[:2]
    per_chain = -(-num_draws // chains)
    if per_chain > samples:
        raise ValueError(f"num_draws={num_draws} needs at least {per_chain} samples per chain.")
    stride = samples // per_chain
    kept = draws[:, : stride * per_chain : stride]
    return kept.reshape((chains * per_chain,) + draws.shape[2:])[:num_draws]


def ranks_of(truth: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Rank of each ``truth[r]`` among ``draws[:, r]`` (0..L): how many draws lie below it."""
    return np.sum(np.asarray(draws) < np.asarray(truth)[None], axis=0)


class RankTests(NamedTuple):
    """Uniformity tests of R ranks on {0, …, L}; p-values are two-sided."""

    chi2_p: float
    location_z: float
    dispersion_z: float
    counts: np.ndarray

    @property
    def location_p(self) -> float:
        return float(2 * stats.norm.sf(abs(self.location_z)))

    @property
    def dispersion_p(self) -> float:
        return float(2 * stats.norm.sf(abs(self.dispersion_z)))

    @property
    def min_p(self) -> float:
        """The smallest of the three p-values (compare with α / 3, Bonferroni)."""
        return min(self.chi2_p, self.location_p, self.dispersion_p)


def rank_tests(ranks: np.ndarray, num_draws: int, bins: int = BINS) -> RankTests:
    """χ², location and dispersion tests of uniformity of ``ranks`` on {0, …, num_draws}.

    Under the null, u = rank / L is uniform on {0, 1/L, …, 1}: mean ½ and E(u − ½)² = (L + 2)
    / (12 L); the z statistics use the exact null variances of u and of (u − ½)² on that grid.

    Examples
    --------
    >>> ranks = np.random.default_rng(0).integers(0, 20, size=400)
    >>> rank_tests(ranks, 19).min_p > 0.01
    True
    """
    ranks = np.asarray(ranks)
    if (num_draws + 1) % bins:
        raise ValueError(f"num_draws + 1 = {num_draws + 1} must be a multiple of bins={bins}.")
    n = ranks.size
    counts = np.bincount(ranks * bins // (num_draws + 1), minlength=bins)
    chi2_p = float(stats.chisquare(counts).pvalue)
    grid = np.arange(num_draws + 1) / num_draws - 0.5  # u − ½ on the support
    u = ranks / num_draws - 0.5
    location_z = u.mean() / np.sqrt(np.mean(grid**2) / n)
    spread = grid**2
    dispersion_z = (np.mean(u**2) - spread.mean()) / np.sqrt(spread.var() / n)
    return RankTests(chi2_p, float(location_z), float(dispersion_z), counts)


class SBCResult(NamedTuple):
    name: str
    ranks: np.ndarray
    tests: RankTests
    ess: np.ndarray
    """(R,) ArviZ bulk ESS of each θ_r over all chains and draws (before thinning)."""
    z_mean: np.ndarray
    """(R,) (mean of the draws − m_r) / √v_r: the analytic sanity check."""
    sd_ratio: np.ndarray
    """(R,) sd of the draws / √v_r."""
    seconds: float
    notes: dict


def run_sbc(
    name: str,
    rng_key: jax.Array,
    sim: Simulation,
    *,
    sampler: str | None = None,
    num_warmup: int,
    num_samples: int,
    num_chains: int = 2,
    num_draws: int = NUM_DRAWS,
    bins: int = BINS,
    **options: Any,
) -> SBCResult:
    """Run ``make_kernel(sampler, model, **options)`` on ``sim`` and rank θ̃ among its draws.

    ``name`` labels the result; ``sampler`` (the registry name) defaults to it.
    """
    start = time.perf_counter()
    if SAMPLERS[sampler or name].minibatch:
        # the runs are deliberately short (thinned to L draws, ranked by this script): the
        # kernel's own self-check of its draws would warn on them
        options = {"self_check": False, **options}
    kernel = make_kernel(sampler or name, model, **options)
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(rng_key, sim.A, sim.y)
    draws = np.asarray(jax.block_until_ready(mcmc.get_samples(group_by_chain=True)["theta"]))
    seconds = time.perf_counter() - start
    ranks = ranks_of(sim.theta, thin(draws, num_draws))
    mean, sd = posterior(sim.A, sim.y)
    pooled = draws.reshape(-1, draws.shape[-1])
    setup = getattr(kernel, "setup", None)
    notes = {} if setup is None else dict(setup.notes)
    return SBCResult(
        name,
        ranks,
        rank_tests(ranks, num_draws, bins),
        np.asarray(az.ess(draws)),
        (pooled.mean(0) - mean) / sd,
        pooled.std(0) / sd,
        seconds,
        notes,
    )


def distorted_ranks(
    rng: np.random.Generator,
    num_replicates: int,
    num_draws: int = NUM_DRAWS,
    shift: float = 0.0,
    scale: float = 1.0,
) -> np.ndarray:
    """Ranks from a sampler whose draws are iid N(m + shift·s, (scale·s)²) instead of N(m, s²).

    Standardised: θ̃ ~ N(0, 1) (the posterior of θ given the data, by construction of SBC) and
    the draws ~ N(shift, scale²), independent; ``shift=0, scale=1`` is an exact sampler.
    """
    truth = rng.standard_normal(num_replicates)
    draws = shift + scale * rng.standard_normal((num_draws, num_replicates))
    return ranks_of(truth, draws)


def power(
    num_replicates: int,
    alpha: float,
    shift: float = 0.0,
    scale: float = 1.0,
    experiments: int = 2000,
    seed: int = 0,
) -> float:
    """Monte Carlo probability that :func:`rank_tests` rejects (min p < α / 3)."""
    rng = np.random.default_rng(seed)
    rejected = [
        rank_tests(distorted_ranks(rng, num_replicates, NUM_DRAWS, shift, scale), NUM_DRAWS).min_p
        < alpha / 3
        for _ in range(experiments)
    ]
    return float(np.mean(rejected))


DISTORTIONS = {
    "exact": (0.0, 1.0),
    "sd ×1.3": (0.0, 1.3),
    "sd ÷1.3": (0.0, 1 / 1.3),
    "var ×1.3": (0.0, 1.3**0.5),
    "var ÷1.3": (0.0, 1.3**-0.5),
    "sd ×1.15": (0.0, 1.15),
    "mean +0.2 sd": (0.2, 1.0),
    "mean +0.3 sd": (0.3, 1.0),
}


def experiment_keys(seed: int = 0) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The simulation key and one run key per sampler of :data:`RUNS` (test and script share
    them, so the test reproduces the printed numbers)."""
    key_sim, key_run = jax.random.split(jax.random.key(seed))
    return key_sim, {label: jax.random.fold_in(key_run, i) for i, label in enumerate(RUNS)}


def histogram(tests: RankTests, width: int = 40) -> str:
    """A text histogram of the rank counts with the uniform expectation marked ``|``."""
    counts = tests.counts
    expected = counts.sum() / counts.size
    scale = width / max(counts.max(), 2 * expected)
    lines = []
    for b, c in enumerate(counts):
        bar = "#" * int(round(c * scale))
        mark = int(round(expected * scale))
        bar = bar.ljust(mark) if len(bar) < mark else bar
        bar = bar[:mark] + "|" + bar[mark:] if len(bar) > mark else bar + "|"
        lines.append(f"  bin {b:2d} {c:4d} {bar}")
    return "\n".join(lines)


def report(result: SBCResult, alpha: float) -> str:
    t = result.tests
    verdict = "uniform" if t.min_p >= alpha / 3 else "NOT uniform"
    notes = "; ".join(f"{k}: {v}" for k, v in result.notes.items())
    return "\n".join(
        [
            f"{result.name}: {verdict} at α = {alpha:.4g} (per test {alpha / 3:.2g})   "
            f"[{result.seconds:.0f} s]",
            f"  χ² p = {t.chi2_p:.3g}   location z = {t.location_z:+.2f} (p = {t.location_p:.3g})"
            f"   dispersion z = {t.dispersion_z:+.2f} (p = {t.dispersion_p:.3g})",
            f"  bulk ESS of θ_r: min {result.ess.min():.0f}, 5 % {np.quantile(result.ess, 0.05):.0f}"
            f", median {np.median(result.ess):.0f} (L = {NUM_DRAWS})",
            f"  analytic check: mean z rms {np.sqrt(np.mean(result.z_mean**2)):.3f}, "
            f"sd ratio mean {result.sd_ratio.mean():.3f} (min {result.sd_ratio.min():.2f}, "
            f"max {result.sd_ratio.max():.2f})",
            *([f"  notes: {notes}"] if notes else []),
            histogram(t),
        ]
    )


def save_png(results: list[SBCResult], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(results))
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.2 * rows), squeeze=False)
    for ax in axes.flat[len(results) :]:
        ax.set_visible(False)
    for ax, result in zip(axes.flat, results, strict=False):
        counts = result.tests.counts
        ax.bar(np.arange(counts.size), counts, width=0.9, color="0.6")
        expected = counts.sum() / counts.size
        band = stats.binom.ppf([0.005, 0.995], counts.sum(), 1 / counts.size)  # 99 % per bin
        ax.axhspan(*band, color="C0", alpha=0.2, lw=0)
        ax.axhline(expected, color="C0", lw=1)
        ax.set_title(f"{result.name}\nχ² p = {result.tests.chi2_p:.2g}", fontsize=9)
        ax.set_xticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", default=list(RUNS), help=f"of {', '.join(RUNS)}")
    parser.add_argument("--replicates", type=int, default=NUM_REPLICATES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.01 / len(EXACT))
    parser.add_argument("--png", default=None, help="save the histograms there")
    args = parser.parse_args(argv)
    key_sim, run_keys = experiment_keys(args.seed)
    sim = simulate(key_sim, num_replicates=args.replicates)
    print(
        f"SBC: R = {args.replicates} replicates, N = {NUM_DATA}, s_a = {COVARIATE_SD}, "
        f"L = {NUM_DRAWS}, {BINS} bins, 2 chains; jax {jax.__version__}, "
        f"{jax.devices()[0].platform}"
    )
    results = []
    for name in args.runs:
        result = run_sbc(name, run_keys[name], sim, **RUNS[name])
        print(report(result, args.alpha), flush=True)
        results.append(result)
    if args.png:
        save_png(results, args.png)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
