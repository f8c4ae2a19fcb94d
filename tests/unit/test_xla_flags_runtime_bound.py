"""A module marked ``runtime_bound`` keeps the suite's base optimisation level (-O1)."""

import os

import jax
import pytest

pytestmark = pytest.mark.runtime_bound


def test_a_runtime_bound_module_keeps_the_optimisations_and_exports_them():
    assert jax.config.read("jax_disable_most_optimizations") is False
    assert os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "0"
    # conftest's -O1, or the level a developer set in XLA_FLAGS (kept)
    assert "--xla_backend_optimization_level=" in os.environ["XLA_FLAGS"]
