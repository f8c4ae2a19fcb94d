"""Robustness (d): constrained scales (Student-t σ and ν) and ordered cutpoints, N = 10⁴.

``models/robust_student_t.py`` (wide normal β on raw covariates, HalfNormal σ, Gamma ν) and
``models/robust_ordinal.py`` (flat β, flat ``ordered_vector`` cutpoints, OrderedLogistic);
references: NumPyro NUTS stored in ``tests/data/robust_{student_t,ordinal}_nuts.json``.

Each sampler runs once per model (``common.cell``) with its defaults and 2 vectorised chains;
three tests read the run:

* ``test_defaults_within_tolerance``: the strict target, max |Δmean|/sd_ref ≤ 0.25 and
  max |sd ratio − 1| ≤ 0.30 on every coordinate of every latent site;
* ``test_miss_is_flagged_by_self_check``: a run that misses the target (biased samplers at
  their fixed step included) must have warned through ``pplsamplers.diagnostics.self_check``;
* ``test_no_divergence_or_freeze``: no non-finite draw and no chain with zero variance.

    .venv/bin/pytest -q tests/robustness/test_constrained.py -p no:cacheprovider
"""

import pytest

from tests.robustness.common import (  # noqa: F401 - collected here, parametrized below
    generate_cells,
    test_defaults_within_tolerance,
    test_miss_is_flagged_by_self_check,
    test_no_divergence_or_freeze,
)

pytestmark = [pytest.mark.robustness, pytest.mark.runtime_bound]

MODEL_NAMES = ["student_t", "ordinal"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    generate_cells(metafunc, MODEL_NAMES)
