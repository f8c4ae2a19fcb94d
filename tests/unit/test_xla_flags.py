"""The test suite's per-module optimisation level (``tests/xla_flags.py``, ``conftest.py``)."""

import os

import jax

from tests.xla_flags import subprocess_flags


def test_a_compile_bound_module_runs_with_most_optimisations_off_and_exports_it():
    """This module carries no ``runtime_bound`` marker, so conftest turned XLA's expensive
    optimisations off for it, here and in the subprocesses it would start."""
    assert jax.config.read("jax_disable_most_optimizations") is True
    assert os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "1"


def test_subprocess_flags_keep_the_suites_flags_and_add_the_device_count(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1")
    assert subprocess_flags() == "--xla_backend_optimization_level=1"
    assert subprocess_flags(4) == (
        "--xla_backend_optimization_level=1 --xla_force_host_platform_device_count=4"
    )
