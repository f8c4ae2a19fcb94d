"""Robustness (a): linear regression on raw, correlated covariates, flat prior, N = 10⁵.

``models/robust_linear.py``: intercept, a ~ N(100, 15²), a 0/1 t rising with a, and a·t;
``ImproperUniform`` prior, known σ.  Reference: the exact Gaussian posterior
N(β̂_OLS, σ²(XᵀX)⁻¹) (intercept–slope correlation −0.99, sds from 6e-4 to 0.09).

Each sampler runs once per model (``common.cell``) with its defaults and 2 vectorised chains;
three tests read the run:

* ``test_defaults_within_tolerance``: the strict target, max |Δmean|/sd_ref ≤ 0.25 and
  max |sd ratio − 1| ≤ 0.30 on every coordinate of every latent site;
* ``test_miss_is_flagged_by_self_check``: a run that misses the target (biased samplers at
  their fixed step included) must have warned through ``pplsamplers.diagnostics.self_check``;
* ``test_no_divergence_or_freeze``: no non-finite draw and no chain with zero variance.

    .venv/bin/pytest -q tests/robustness/test_linear.py -p no:cacheprovider
"""

import pytest

from tests.robustness.common import (  # noqa: F401 - collected here, parametrized below
    generate_cells,
    test_defaults_within_tolerance,
    test_miss_is_flagged_by_self_check,
    test_no_divergence_or_freeze,
)

pytestmark = pytest.mark.robustness

MODEL_NAMES = ["linear"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    generate_cells(metafunc, MODEL_NAMES)
