"""Executes tutorials/sgbd_robustness.ipynb at its small size."""

import pytest

from tests.tutorials import execute_tutorial


@pytest.mark.tutorial
def test_sgbd_tutorial_executes_at_small_size(monkeypatch):
    run = execute_tutorial("sgbd_robustness.ipynb", monkeypatch)
    assert not run.errors, run.errors
    assert run.num_images >= 3  # samples vs density, bias vs step, scale heterogeneity
    assert "adapted SGBD σ" in run.text and "flip_prob_mean" in run.text
