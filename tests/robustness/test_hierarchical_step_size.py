"""Robustness (c) for the step-size kernels: the hierarchical model's cells of SGLD, pSGLD,
cSGLD, SGRLD, SGBD and HAMCMC (``test_hierarchical.py`` holds the other samplers' cells and
the model's description).  Their automatic step keeps the bias summed over the D = 304
coordinates within 0.1 sd (``pplsamplers.infer.spec.COHERENT_BIAS``): SGBD 0.14, SGLD 0.18,
cSGLD and SGRLD 0.17, pSGLD 0.20, HAMCMC 0.15 (0.70, 0.24, 0.55, 0.33 and 0.47 at the former
fixed steps).

    .venv/bin/pytest -q tests/robustness/test_hierarchical_step_size.py -p no:cacheprovider
"""

import pytest

from tests.robustness.common import (  # noqa: F401 - collected here, parametrized below
    STEP_SIZE_KERNELS,
    generate_cells,
    test_defaults_within_tolerance,
    test_miss_is_flagged_by_self_check,
    test_no_divergence_or_freeze,
)

pytestmark = [pytest.mark.robustness, pytest.mark.runtime_bound]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    generate_cells(metafunc, ["hierarchical"], STEP_SIZE_KERNELS)
