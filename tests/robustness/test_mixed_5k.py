"""Robustness at D = 5004: a Gaussian random-intercept model with 5000 groups, float32.

``models/gaussian_mixed.py``: y ~ N(α + xᵀβ + τ z_g, 1) on raw covariates, 5000 groups of
1 row to a few percent of N = 2·10⁴ (most with 1–4 rows), non-centred group effects.  Given
τ the posterior is Gaussian with an arrowhead precision, so the reference is exact: τ is
integrated on a grid (``gaussian_mixed.reference``), no NUTS run is needed at this D.

Each cell runs a sampler at its defaults, 2 vectorised chains × (300 + 500) draws, and reads
the global latents (α, β, τ) at max |Δmean| / sd ≤ 0.25 and max |sd ratio − 1| ≤ 0.30, the
group effects at root mean square |Δmean| / sd ≤ 0.15 and |sd ratio − 1| ≤ 0.30; a run
outside must have warned, and no draw may be non-finite or frozen.  The cells: the Boomerang
(the exact kernel on the arrowhead Gaussian), SGLD (the step-size family), SGBD (which reads
the per-example gradient variance, from k + p forward products here) and AutoSampler.

    .venv/bin/pytest -q tests/robustness/test_mixed_5k.py -p no:cacheprovider
"""

import pytest

from tests.robustness.common import cell, group_verdict

pytestmark = [pytest.mark.robustness, pytest.mark.runtime_bound]

CELLS = [(name, "mixed_5k") for name in ("boomerang", "sgld", "sgbd", "auto")]


@pytest.mark.parametrize("sampler, model", CELLS)
def test_5k_groups_defaults_within_tolerance(sampler: str, model: str) -> None:
    ok, line = group_verdict(sampler, model)
    assert ok, "defaults are wrong: " + line


@pytest.mark.parametrize("sampler, model", CELLS)
def test_5k_groups_miss_is_flagged(sampler: str, model: str) -> None:
    ok, line = group_verdict(sampler, model)
    assert ok or cell(sampler, model).warned, "a wrong run went without a warning: " + line


@pytest.mark.parametrize("sampler, model", CELLS)
def test_5k_groups_no_divergence_or_freeze(sampler: str, model: str) -> None:
    result = cell(sampler, model)
    assert result.error is None, result.describe()
    assert result.nonfinite == 0 and not result.frozen, result.describe()
