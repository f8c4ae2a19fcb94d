"""Executes tutorials/hamcmc_correlated_posteriors.ipynb at its small size."""

import pytest

from tests.tutorials import execute_tutorial


@pytest.mark.tutorial
def test_hamcmc_tutorial_runs_small(monkeypatch):
    run = execute_tutorial("hamcmc_correlated_posteriors.ipynb", monkeypatch)
    assert not run.errors, run.errors
    assert "small run" in run.text and "skipped pairs" in run.text
