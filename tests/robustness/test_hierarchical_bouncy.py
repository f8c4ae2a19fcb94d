"""Robustness (c) for the bouncy particles with straight flows: the hierarchical model's cells
of SBPS, pSBPS, BPS and σBPS (``test_hierarchical.py`` holds the model's description).

With exact gradients (the automatic batch is the full data here) their radial direction, which
the group scale τ follows, moves only at refreshments and relaxes in O(D) events.  With a cost
per draw that did not grow with D they missed in 2 × 500 draws (SBPS 0.45 sd, pSBPS 0.55, BPS
and σBPS 0.19-0.5 depending on the seed; all warned).  Their events per draw now grow with D
above 30 latents (``pplsamplers.infer.pdmp.radial_events``: 100 proposals and 200 rate
evaluations at D = 304), and BPS and σBPS refresh at √(D / 30) per unit time, at most √10
(``radial_refresh_rate``: only refreshments move the radial direction).  Worst mean error at
the suite's seed and seeds 1-4 (``benchmarks/robustness.py --samplers bps sigmabps --models
hierarchical --seed S``): BPS 0.164, 0.146, 0.119, 0.273, 0.114 and σBPS 0.129, 0.139, 0.274,
0.156, 0.127, every miss warned (refreshing at rate 1, BPS read 0.187, 0.263, 0.339, 0.252,
0.317); SBPS 0.207, 0.139, 0.160 at the first three.  So each of BPS and σBPS still misses,
just, at one seed of five: the radial direction still mixes slowly (on a 300-d Gaussian the
bulk ESS of |z|² is 100 in 2 × 1000 BPS draws, ``benchmarks/radial_mixing.py``).  The cells
are strict at the suite's seed (a regression fails them); the spread is in the docs.  Those
figures are float64; the suite runs this model in float32 (``common.MODELS``), where the
suite's seed reads SBPS 0.228, pSBPS 0.223, BPS 0.146 and σBPS 0.234 (all warned; the last
bits of BPS's and σBPS's draws moved twice: when their set-up's time-scale probe was jitted,
and when the whitened potential stopped transposing L, 26e545c).

    .venv/bin/pytest -q tests/robustness/test_hierarchical_bouncy.py -p no:cacheprovider
"""

import pytest

from tests.robustness.common import (  # noqa: F401 - collected here, parametrized below
    STRAIGHT_FLOW_KERNELS,
    generate_cells,
    test_defaults_within_tolerance,
    test_miss_is_flagged_by_self_check,
    test_no_divergence_or_freeze,
)

pytestmark = pytest.mark.robustness


KNOWN_MISSES: dict[tuple[str, str], str] = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    generate_cells(metafunc, ["hierarchical"], STRAIGHT_FLOW_KERNELS, KNOWN_MISSES)
