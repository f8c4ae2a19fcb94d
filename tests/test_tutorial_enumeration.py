"""Executes tutorials/mixture_enumeration.ipynb at its small size."""

import pytest

from tests.tutorials import execute_tutorial


@pytest.mark.tutorial
def test_enumeration_tutorial_executes_at_small_size(monkeypatch):
    run = execute_tutorial("mixture_enumeration.ipynb", monkeypatch)
    assert not run.errors, run.errors
    assert run.num_images >= 2  # the assigned data with the fitted components; the traces
    assert "most probable component is the simulated one" in run.text
    assert run.text.count("self-check: passed") == 2  # the ordered and the unordered runs
    assert "SelfCheckWarning" not in run.text
