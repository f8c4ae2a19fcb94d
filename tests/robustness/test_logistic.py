"""Robustness (b): logistic regression with interactions of raw covariates, flat prior, N = 10⁵.

``models/robust_logistic.py``; reference: NumPyro NUTS stored in
``tests/data/robust_logistic_nuts.json`` (``tests/data/make_references.py``).

Each sampler runs once per model (``common.cell``) with its defaults and 2 vectorised chains;
three tests read the run:

* ``test_defaults_within_tolerance``: the strict target, max |Δmean|/sd_ref ≤ 0.25 and
  max |sd ratio − 1| ≤ 0.30 on every coordinate of every latent site;
* ``test_miss_is_flagged_by_self_check``: a run that misses the target (biased samplers at
  their fixed step included) must have warned through ``pplsamplers.diagnostics.self_check``;
* ``test_no_divergence_or_freeze``: no non-finite draw and no chain with zero variance.

    .venv/bin/pytest -q tests/robustness/test_logistic.py -p no:cacheprovider
"""

import pytest

from tests.robustness.common import cell, sampler_names, tolerance_cells

pytestmark = pytest.mark.robustness

MODEL_NAMES = ["logistic"]
CELLS = [(sampler, model) for model in MODEL_NAMES for sampler in sampler_names()]


@pytest.mark.parametrize(("sampler", "model"), tolerance_cells(CELLS))
def test_defaults_within_tolerance(sampler, model):
    result = cell(sampler, model)
    assert result.ok, "defaults are wrong: " + result.describe()


@pytest.mark.parametrize(("sampler", "model"), CELLS)
def test_miss_is_flagged_by_self_check(sampler, model):
    result = cell(sampler, model)
    # a run that raises a clear error is not silent either
    assert result.ok or result.warned or result.error is not None, (
        "a wrong run went without a warning: " + result.describe()
    )


@pytest.mark.parametrize(("sampler", "model"), tolerance_cells(CELLS))
def test_no_divergence_or_freeze(sampler, model):
    result = cell(sampler, model)
    if result.error is not None:
        pytest.fail(result.describe())
    assert result.nonfinite == 0 and not result.frozen, result.describe()
