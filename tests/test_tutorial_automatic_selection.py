"""Executes tutorials/automatic_selection.ipynb at its small size."""

import pytest

from tests.tutorials import execute_tutorial


@pytest.mark.tutorial
def test_automatic_selection_tutorial_runs_small(monkeypatch):
    run = execute_tutorial("automatic_selection.ipynb", monkeypatch)
    assert not run.errors, run.errors
    # the same call on three models, each explained, plus the pilot's table
    assert run.text.count("AutoSampler (rules) chose:") == 3
    assert "AutoSampler (pilot) chose:" in run.text and "ESS/epoch" in run.text
    assert "against NUTS: max |mean - ref|" in run.text
    assert run.num_images >= 4  # two trace plots, the reference comparison, the pilot bars
