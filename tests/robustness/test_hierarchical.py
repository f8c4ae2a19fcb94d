"""Robustness (c): non-centred random intercepts, 300 groups of 1 to ~900 rows, N ≈ 10⁴.

``models/robust_hierarchical.py`` (D = 304, HalfNormal group scale); reference: NumPyro NUTS
stored in ``tests/data/robust_hierarchical_nuts.json``.

Each sampler runs once (``common.cell``) with its defaults and 2 vectorised chains; three
tests read the run:

* ``test_defaults_within_tolerance``: the strict target, max |Δmean|/sd_ref ≤ 0.25 and
  max |sd ratio − 1| ≤ 0.30 on every coordinate of every latent site;
* ``test_miss_is_flagged_by_self_check``: a run that misses the target (biased samplers at
  their fixed step included) must have warned through ``pplsamplers.diagnostics.self_check``;
* ``test_no_divergence_or_freeze``: no non-finite draw and no chain with zero variance.

Every cell of this model is in this one file (the cells were split over three files before;
the package cached the set-up then, and each file's worker paid it again; it caches none now,
so every cell computes its own).

**The step-size kernels** (SGLD, pSGLD, cSGLD, SGRLD, SGBD, HAMCMC).  Their automatic step
keeps the bias summed over the D = 304 coordinates within 0.1 sd
(``pplsamplers.infer.spec.COHERENT_BIAS``): SGBD 0.14, SGLD 0.18, cSGLD and SGRLD 0.17, pSGLD
0.20, HAMCMC 0.15 (0.70, 0.24, 0.55, 0.33 and 0.47 at the former fixed steps).

**The bouncy particles with straight flows** (SBPS, pSBPS, BPS, σBPS).  With exact gradients
(the automatic batch is the full data here) their radial direction, which the group scale τ
follows, moves only at refreshments and relaxes in O(D) events.  With a cost per draw that did
not grow with D they missed in 2 × 500 draws (SBPS 0.45 sd, pSBPS 0.55, BPS and σBPS 0.19-0.5
depending on the seed; all warned).  Their events per draw now grow with D above 30 latents
(``pplsamplers.infer.pdmp.radial_events``: 100 proposals and 200 rate evaluations at D = 304),
and BPS and σBPS refresh at √(D / 30) per unit time, at most √10 (``radial_refresh_rate``: only
refreshments move the radial direction).  Worst mean error at the suite's seed and seeds 1-4
(``benchmarks/robustness.py --samplers bps sigmabps --models hierarchical --seed S``): BPS
0.164, 0.146, 0.119, 0.273, 0.114 and σBPS 0.129, 0.139, 0.274, 0.156, 0.127, every miss warned
(refreshing at rate 1, BPS read 0.187, 0.263, 0.339, 0.252, 0.317); SBPS 0.207, 0.139, 0.160 at
the first three.  So each of BPS and σBPS still misses, just, at one seed of five: the radial
direction still mixes slowly (on a 300-d Gaussian the bulk ESS of |z|² is 100 in 2 × 1000 BPS
draws, ``benchmarks/radial_mixing.py``).  Those figures are float64; the suite runs this model
in float32 (``common.MODELS``).  In 2 × 500 draws τ's bulk ESS is a few dozen at best (12 in
σBPS's run at the suite's seed below, whose self-check read R-hat 1.12 on τ), so the Monte
Carlo sd of τ's mean is 0.15-0.3 sd_ref and one seed cannot hold them to 0.25: float32 on an
AVX-512 machine (2026-11-27) read BPS 0.148, 0.137, 0.214, 0.173, 0.117 and σBPS 0.264, 0.146,
0.122, 0.258, 0.169 at the suite's seed and seeds 1-4 (σBPS 0.234 at the suite's seed on the
machine of the day before, and a pass at -O1, as the suite compiles: the last bits of the
arithmetic move the path), every miss warned; refreshing at 6 instead of √10 read BPS 0.334 and
σBPS 0.257 at their worst seeds, no better.  Run longer, they are right: 2 × 6000 draws read
BPS 0.055 (``--draws 6000``); at the length of issue 14's measurements, 2 × (1000 + 2000) draws
(``--warmup 1000 --draws 2000``, 2026-11-28), the four read 0.065-0.130 at the seeds where 2 ×
500 draws had missed (the suite's, 3 and 4); and the τ error is Monte Carlo noise, not a bias.
A randomised bounce (the orthogonal velocity redrawn at each reflection, Wu & Robert's
generalised BPS) does not help: on a Gaussian the gradient is along x, so the redrawn part is
orthogonal to x and |x|² still moves only at refreshments (a trial implementation, not kept: on
``benchmarks/radial_mixing.py``'s D = 300 Gaussian the radial ESS fell from 119 to 48, the
smallest coordinate ESS from 1011 to 215).  So their tolerance cells are ``slow_mixing``
(``common.generate_cells``): strict on the sd tolerance, and on every mean within the tolerance
or 4 Monte Carlo standard errors of NUTS (√(MCSE_run² + MCSE_ref²), ArviZ; a miss of 0.26 sd at
ESS 12 is about 1 MCSE).  The must-warn and no-divergence cells stay as they are.

SBPS and pSBPS were held to the tolerance itself until five seeds showed SBPS missing too:
with each warmup window's metric refinement weighted per coordinate
(``pplsamplers/infer/metric.py``), at the suite's settings and the suite's seed and seeds 1-4
(``common.run_cell("sbps", "hierarchical", seed=S)``, 2026-11-27), SBPS read 0.200, 0.162,
0.201, 0.141 and 0.289 (warned; τ's bulk ESS 42), BPS 0.141, 0.122, 0.149, 0.171, 0.203 and
σBPS 0.152, 0.131, 0.177, 0.343 (warned, 2.6 MCSE), 0.236; the benchmark at XLA's default
read SBPS 0.25 and pSBPS 0.198 at the suite's seed (τ's bulk ESS 74 and 76).  Their τ mixes
as slowly, for the same reason, so all four tolerance cells are ``slow_mixing``: one seed is
a draw from that spread, and the Monte Carlo bound is what a bias would fail.

    .venv/bin/pytest -q tests/robustness/test_hierarchical.py -p no:cacheprovider
"""

import numpy as np
import pytest

from tests.robustness.common import (  # noqa: F401 - collected here, parametrized below
    STRAIGHT_FLOW_KERNELS,
    Cell,
    compare,
    generate_cells,
    run_cell,
    test_defaults_within_tolerance,
    test_miss_is_flagged_by_self_check,
    test_no_divergence_or_freeze,
)

pytestmark = [pytest.mark.robustness, pytest.mark.runtime_bound]


SLOW_CELLS: dict[tuple[str, str], str] = {
    (name, "hierarchical"): (
        "τ mixes slowly (radial direction; bulk ESS 10-93 in 2 x 500 draws), so its mean's "
        "Monte Carlo sd is 0.1-0.3 sd_ref: 1 seed of 5 read 0.27-0.34, every miss warned"
    )
    for name in STRAIGHT_FLOW_KERNELS
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    generate_cells(metafunc, ["hierarchical"], slow_cells=SLOW_CELLS)


@pytest.mark.parametrize("sampler, step_size", [("sgbd", 0.5), ("csgld", 0.1)])
def test_long_biased_run_is_flagged(sampler: str, step_size: float) -> None:
    """At 2 × (3000 + 5000) draws the chains converge (R-hat, ESS and every per-coordinate
    Stein value pass), but SGBD at σ = 0.5 and cSGLD at ε = 0.1, which use exact gradients
    here (the automatic batch is the full data) at a fixed step, widen the z sds by 5–6% on
    average and end 0.7 and 0.6 sd from NUTS on τ.  Before the coherent-scale check these
    runs were silent; now the self-check must flag them (averaged scale errors +0.074 and
    +0.056 against 0.016 + 3 MCSE; ``pplsamplers.diagnostics.checks``, module docstring).
    Those steps were both kernels' defaults; the automatic ones now keep this bias within
    0.1 sd (``pplsamplers.infer.spec.COHERENT_BIAS``), so the test gives them explicitly.
    Those figures are float64; in float32, as the suite now runs this model, the runs end
    0.79 and 0.56 sd away with averaged scale errors +0.08 and +0.06 (both flagged)."""
    # one step per draw, as when these figures were measured: the test is about the check
    result = run_cell(
        sampler,
        "hierarchical",
        warmup=3000,
        draws=5000,
        options={"steps_per_sample": 1, "step_size": step_size},
    )
    assert result.error is None, result.describe()
    assert not result.ok, "the fixed step's bias is gone: " + result.describe()
    flagged = any("Stein scale error averages" in w for w in result.warnings)
    assert flagged, "a wrong run went without a warning: " + result.describe()


def _ar1_draws(shift: float, rho: float, scale: float = 1.0) -> dict[str, np.ndarray]:
    """2 chains × 1000 draws of an AR(1) with unit stationary sd times ``scale``, centred
    and moved to mean ``shift`` exactly: ESS ≈ 2000 (1 − ρ) / (1 + ρ)."""
    rng = np.random.default_rng(7)
    noise = rng.standard_normal((2, 1000))
    x = np.empty_like(noise)
    x[:, 0] = noise[:, 0]
    for t in range(1, 1000):  # a test fixture of 2000 numbers, not a sampler
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * noise[:, t]
    return {"tau": (shift + scale * (x - x.mean()))[..., None]}


@pytest.mark.parametrize(
    "shift, rho, scale, within",
    [
        (0.3, 0.98, 1.0, True),  # ESS ≈ 20: MCSE ≈ 0.22, 0.3 sd is noise
        (0.3, 0.0, 1.0, False),  # ESS ≈ 2000: MCSE ≈ 0.02, 0.3 sd is a bias
        (1.5, 0.98, 1.0, False),  # beyond 4 MCSE even at ESS ≈ 20
        (0.0, 0.98, 1.5, False),  # the sd tolerance stays strict
    ],
)
def test_slow_cell_bound_tells_noise_from_bias(
    shift: float, rho: float, scale: float, within: bool
) -> None:
    """The bound of the slow cells can fail: a mean beyond the tolerance passes only where the
    run's own Monte Carlo error explains it, and never with a wrong sd."""
    ref = {"tau": {"mean": np.zeros(1), "sd": np.ones(1), "mcse_mean": np.zeros(1)}}
    result = Cell("bps", "synthetic")
    compare(result, _ar1_draws(shift, rho, scale), ref)
    assert not result.ok
    assert result.within_monte_carlo_error is within, result.describe()
