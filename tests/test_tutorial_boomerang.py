"""Execute tutorials/boomerang_bnn.ipynb at its small size (PPLSAMPLERS_TUTORIAL_SMALL=1)."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "tutorials" / "boomerang_bnn.ipynb"


@pytest.mark.tutorial
def test_boomerang_bnn_tutorial_runs(monkeypatch):
    monkeypatch.setenv("PPLSAMPLERS_TUTORIAL_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the kernel must import the repository's models/ and pplsamplers/ and run in float64
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    outputs = "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    assert "small run" in outputs
    assert "Boomerang" in outputs and "accuracy" in outputs
    assert "num_bounces" in outputs
