"""The README stays short and the user-facing text stays inside the repository (no JAX work):
the README's length and links, no reference to a file outside the repository in the package,
the docs (links to folders followed, so the tutorials too) or the README, no machine path in
the notebooks' stored outputs, every tutorial stored executed with a figure, and the
changelog's ``Unreleased`` section.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 150
GENERATED = {"_build", "jupyter_execute", "generated", "_gallery_thumbs", "__pycache__"}

OUTSIDE = re.compile(
    r"DESIGN §|DESIGN\.md|\.\./shared|shared/papers|[a-z0-9]+-[a-z0-9-]+\.txt\b"
    r"|(?<![\w.:])/(?:work|tmp|home|root)/"
)
"""A reference to a file outside the repository: the design notes or paper texts the project
was started from, or an absolute path of one machine."""
MACHINE_PATH = re.compile(r"/(work|home|root|tmp|Users)/[A-Za-z0-9_.-]+/")
"""An absolute path of one machine (a user's home, a checkout, a temporary directory)."""


def _files(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Files under ``root`` with these suffixes, links to folders followed, generated output
    skipped, each file once."""
    found = {}
    for folder, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d not in GENERATED]
        for name in names:
            path = Path(folder) / name
            if path.suffix in suffixes:
                found.setdefault(path.resolve(), path)
    return sorted(found.values())


def _once(paths: list[Path]) -> list[Path]:
    """Each file once, however many links lead to it."""
    found: dict[Path, Path] = {}
    for path in paths:
        found.setdefault(path.resolve(), path)
    return list(found.values())


def _notebooks() -> list[Path]:
    """The tutorials (``docs/tutorials`` links to ``tutorials/``) and any other notebook of
    the docs."""
    return _once(_files(ROOT / "tutorials", (".ipynb",)) + _files(ROOT / "docs", (".ipynb",)))


def _output_text(output: dict) -> str:
    """The text of one stored cell output (streams, text data, tracebacks; not images)."""
    parts = [output.get("text", ""), output.get("evalue", ""), output.get("traceback", [])]
    data = output.get("data", {})
    parts += [v for k, v in data.items() if k.startswith("text/") or k.endswith("json")]
    return "\n".join(
        "".join(p) if isinstance(p, list) else p if isinstance(p, str) else json.dumps(p)
        for p in parts
    )


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move details to docs/"
    )


def test_readme_links_point_to_files_of_the_repository():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets, "README.md links to no page"
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t)]
    missing = [t for t in local if t and not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_nothing_refers_to_files_outside_the_repository():
    text = (".md", ".ipynb", ".py", ".rst", ".txt")
    files = _once(
        [README]
        + _files(ROOT / "docs", text)
        + _files(ROOT / "tutorials", (".ipynb",))
        + _files(ROOT / "pplsamplers", text)
    )
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if (match := OUTSIDE.search(line))
    ]
    assert not offenders, "references to files outside the repository: " + ", ".join(offenders[:20])


def test_stored_notebook_outputs_hold_no_machine_path():
    notebooks = _notebooks()
    assert notebooks, "no tutorial notebooks found"
    offenders = []
    for path in notebooks:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            for output in cell.get("outputs", []):
                if match := MACHINE_PATH.search(_output_text(output)):
                    offenders.append(f"{path.relative_to(ROOT)} cell {index}: {match.group(0)}")
    assert not offenders, (
        "stored outputs with an absolute path (clear them, or run the notebook so that the "
        "path is not printed): " + ", ".join(offenders[:20])
    )


def test_every_tutorial_is_stored_executed_with_a_figure():
    """The docs render the tutorials as stored (not executed), so each must be stored run in
    order from top to bottom, with no error output and at least one figure."""
    problems = []
    for path in _notebooks():
        code = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                if c["cell_type"] == "code"]  # fmt: skip
        outputs = [o for c in code for o in c.get("outputs", [])]
        if [c.get("execution_count") for c in code] != list(range(1, len(code) + 1)):
            problems.append(f"{path.name}: not stored executed in order")
        if any(o.get("output_type") == "error" for o in outputs):
            problems.append(f"{path.name}: an error output")
        if not any("image/png" in o.get("data", {}) for o in outputs):
            problems.append(f"{path.name}: no figure")
    assert not problems, "; ".join(problems)


def test_changelog_has_an_unreleased_section():
    changelog = ROOT / "CHANGELOG.md"
    assert changelog.is_file(), "CHANGELOG.md is missing"
    headings = [line.strip() for line in changelog.read_text(encoding="utf-8").splitlines()]
    assert "## [Unreleased]" in headings, "CHANGELOG.md has no '## [Unreleased]' section"
