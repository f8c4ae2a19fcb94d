"""Seconds per test file, which ``conftest.py`` uses to hand the slowest files out first.

``make test`` runs the files on two workers (``pytest-xdist --dist loadfile``), each file on
one worker.  Handed out in collection order, or largest-count-first as xdist does by default,
files of one long test (a tutorial, the two-device subprocess) came last and one worker ran
them alone for a minute or two at the end.  Longest first (the LPT rule) leaves only short
files for the end.  The figures only order the files; a file that is not listed counts as 0 s.

Regenerate after a change that moves the times a lot (from a fresh clone, so that the
compilation caches are cold as on CI)::

    make test PYTEST_ADDOPTS=--junitxml=/tmp/junit.xml
    .venv/bin/python -m tests.file_seconds /tmp/junit.xml

Examples
--------
>>> seconds_by_file()["tests/unit/test_sgld.py"] > 0
True
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.json")


def seconds_by_file() -> dict[str, float]:
    """``{"tests/unit/test_x.py": seconds}`` from :data:`TABLE` (empty if it is missing)."""
    if not TABLE.exists():
        return {}
    return json.loads(TABLE.read_text())


def from_junit(path: str) -> dict[str, float]:
    """The summed test times of each file in a JUnit XML report."""
    root = Path(__file__).resolve().parents[1]
    seconds: Counter[str] = Counter()
    for case in ElementTree.parse(path).iter("testcase"):
        parts = case.get("classname", "").split(".")  # module, then a class if any
        while parts and not (root / ("/".join(parts) + ".py")).exists():
            parts.pop()
        if parts:
            seconds["/".join(parts) + ".py"] += float(case.get("time", 0.0))
    return {file: round(value, 1) for file, value in sorted(seconds.items())}


if __name__ == "__main__":
    TABLE.write_text(json.dumps(from_junit(sys.argv[1]), indent=1) + "\n")
    print(f"wrote {TABLE}")
