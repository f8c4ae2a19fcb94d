"""Run a tutorial notebook at its small size (PPLSAMPLERS_TUTORIAL_SMALL=1) for the tests."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


class ExecutedNotebook(NamedTuple):
    """What a tutorial printed and drew."""

    text: str
    """All stream and plain-text outputs, concatenated."""
    num_images: int
    """PNG outputs (plots)."""
    errors: list
    """Error outputs (should be empty)."""
    seconds: float


def execute_tutorial(name: str, monkeypatch, timeout: int = 600) -> ExecutedNotebook:
    """Execute ``tutorials/<name>`` with the small-size switch and the repository importable."""
    monkeypatch.setenv("PPLSAMPLERS_TUTORIAL_SMALL", "1")  # inherited by the kernel
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    path = ROOT / "tutorials" / name
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    started = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - started
    outputs = [
        out
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    ]
    text = "".join(
        out.get("text", "") + out.get("data", {}).get("text/plain", "") for out in outputs
    )
    images = sum("image/png" in out.get("data", {}) for out in outputs)
    errors = [out for out in outputs if out.output_type == "error"]
    return ExecutedNotebook(text, images, errors, seconds)
