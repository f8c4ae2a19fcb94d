"""Executes tutorials/sbps_logistic_regression.ipynb at its small size."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "tutorials" / "sbps_logistic_regression.ipynb"


@pytest.mark.tutorial
def test_sbps_tutorial_runs_small(monkeypatch):
    monkeypatch.setenv("PPLSAMPLERS_TUTORIAL_SMALL", "1")  # inherited by the kernel
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    outputs = [
        out
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    ]
    assert not [out for out in outputs if out.output_type == "error"]
    text = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    assert "small run" in text and "bounces" in text and "continuous" in text
