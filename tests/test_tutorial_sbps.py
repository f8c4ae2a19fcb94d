"""Executes tutorials/sbps_logistic_regression.ipynb at its small size."""

import pytest

from tests.tutorials import execute_tutorial


@pytest.mark.tutorial
def test_sbps_tutorial_runs_small(monkeypatch):
    run = execute_tutorial("sbps_logistic_regression.ipynb", monkeypatch)
    assert not run.errors, run.errors
    assert "small run" in run.text and "bounces" in run.text and "continuous" in run.text
