"""Executes tutorials/sgbd_robustness.ipynb at small size (PPLSAMPLERS_TUTORIAL_SMALL=1)."""

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "tutorials" / "sgbd_robustness.ipynb"


@pytest.mark.tutorial
def test_sgbd_tutorial_executes_at_small_size(monkeypatch):
    monkeypatch.setenv("PPLSAMPLERS_TUTORIAL_SMALL", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    started = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - started
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) >= 3  # samples vs density, bias vs step, scale heterogeneity
    text = "".join(out.get("text", "") for out in outputs)
    assert "adapted SGBD σ" in text and "flip_prob_mean" in text
    assert elapsed < 120, f"the small tutorial took {elapsed:.0f} s"
