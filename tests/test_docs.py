"""The docs site builds with warnings as errors (what ``make docs`` runs), with its math
rendered by a MathJax copied into the site (no CDN).

The docs are copied to a temporary directory (the ``tutorials`` link resolved) and built there,
so the test leaves no generated files in the repository.  The tutorials are rendered, not
executed (``nb_execution_mode = "off"``); ``tests/test_tutorial_*.py`` execute them.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pplsamplers

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ("_build", "jupyter_execute", "_gallery_thumbs", "generated")


def test_docs_build_without_warnings(tmp_path):
    source = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", source, ignore=shutil.ignore_patterns(*GENERATED))
    out = tmp_path / "html"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(source),
            str(out),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    for page in ("index", "getting_started", "troubleshooting", "scaling_out", "selection",
                 "samplers/sbps", "samplers/bps_boomerang", "samplers/sgbd", "samplers/hamcmc",
                 "samplers/sgld", "benchmarks/index", "tutorials/sbps_logistic_regression"):  # fmt: skip
        assert (out / f"{page}.html").is_file(), page
    # every public name has its API page
    missing = [
        n for n in pplsamplers.__all__ if not (out / f"api/generated/pplsamplers.{n}.html").exists()
    ]
    assert not missing, f"add these names to docs/api/index.md: {missing}"
    # math renders offline: MathJax is in the site, and no page loads it from elsewhere
    assert (out / "_static" / "mathjax" / "tex-chtml.js").is_file()
    page = (out / "samplers" / "sbps.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in page and "cdn.jsdelivr" not in page
    # a stored tutorial figure is shown
    assert "<img" in (out / "tutorials" / "sbps_logistic_regression.html").read_text()
