"""Robustness on a mixed model written centred, with a funnel: 200 barely informed groups.

``models/gaussian_mixed.py`` with ``centred=True`` and noise sd 3: u_g ~ N(0, τ²) per group,
y ~ N(α + xᵀβ + u_g, 3²) on raw covariates, 200 groups of 1 row to a few percent of
N = 2000, float32.  A row tells a group's effect a ninth of what its prior does, so most
groups are barely informed and, written centred, form a funnel with τ: the arrowhead Gaussian
of the model as written has a Laplace log-weight sd of about 2, and each kernel at its
defaults read τ with a bulk ESS of 4–100 and missed by 0.25–0.54 sd.  The set-up samples each
group centred or non-centred by its data (``pplsamplers.warmup.centring``).  The posterior is
the non-centred model's (z = u / τ, recorded by the model), so the reference is exact (τ
integrated on a grid).  Each cell: the global latents at max |Δmean| / sd ≤ 0.25 and
max |sd ratio − 1| ≤ 0.30, the group effects z at root mean square |Δmean| / sd ≤ 0.15 and
|sd ratio − 1| ≤ 0.30, no non-finite or frozen draw.

    .venv/bin/pytest -q tests/robustness/test_centred.py -p no:cacheprovider
"""

import pytest

from tests.robustness.common import cell, group_verdict

pytestmark = [pytest.mark.robustness, pytest.mark.runtime_bound]

CELLS = [(name, "mixed_centred") for name in ("boomerang", "sgld", "sbps")]


@pytest.mark.parametrize("sampler, model", CELLS)
def test_centred_model_defaults_within_tolerance(sampler: str, model: str) -> None:
    note = cell(sampler, model).notes.get("centring", "")
    assert note.startswith("'u' sampled as 'u_decentered'"), f"kept the funnel: {note!r}"
    ok, line = group_verdict(sampler, model)
    assert ok, "defaults are wrong: " + line


@pytest.mark.parametrize("sampler, model", CELLS)
def test_centred_model_no_divergence_or_freeze(sampler: str, model: str) -> None:
    result = cell(sampler, model)
    assert result.error is None, result.describe()
    assert result.nonfinite == 0 and not result.frozen, result.describe()
