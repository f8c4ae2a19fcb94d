"""Executes tutorials/boomerang_bnn.ipynb at its small size."""

import pytest

from tests.tutorials import execute_tutorial

# its small BNN samples long enough for -O1 to pay (tests/xla_flags.py): 40 s, 47 s without
pytestmark = pytest.mark.runtime_bound


@pytest.mark.tutorial
def test_boomerang_bnn_tutorial_runs(monkeypatch):
    run = execute_tutorial("boomerang_bnn.ipynb", monkeypatch)
    assert not run.errors, run.errors
    assert "small run" in run.text
    assert "Boomerang" in run.text and "accuracy" in run.text
    assert "num_bounces" in run.text
