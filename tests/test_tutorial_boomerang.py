"""Executes tutorials/boomerang_bnn.ipynb at its small size."""

import pytest

from tests.tutorials import execute_tutorial


@pytest.mark.tutorial
def test_boomerang_bnn_tutorial_runs(monkeypatch):
    run = execute_tutorial("boomerang_bnn.ipynb", monkeypatch)
    assert not run.errors, run.errors
    assert "small run" in run.text
    assert "Boomerang" in run.text and "accuracy" in run.text
    assert "num_bounces" in run.text
