"""Longest test files first, so that ``make test``'s two workers finish together.

``make test`` hands whole files to two workers (``-n 2 --dist loadfile``, so that a module's
shared runs stay in one process).  pytest-xdist's default queue is ordered by the number of
tests per file, which puts the long one-test files (the device, scale-out and tutorial
subprocesses, 50-105 s each) last; whichever worker takes the last of them runs alone while
the other idles.  Replayed on the junit report of a fresh-clone run of ``da6c354`` (xdist's
scheduler: a worker takes the next file when two of its tests are left), the count order
ends at 1038 s (the run's own: 1028.5 s) and the longest-first order at 992 s, with the
summed test time over two at 989 s.  ``make test`` therefore passes
``--no-loadscope-reorder`` and ``conftest.py`` sorts the collected files by
:data:`FILE_SECONDS`, stably, so the tests of a file keep their order.  A fresh clone of
``977228b`` then took 946.4 s, its summed test time over two being 937 s.

:data:`FILE_SECONDS` is measured, not guessed: refresh it from the junit report of a
fresh-clone ``make test`` with ``python -m tests.durations JUNIT.xml`` (it prints the JSON to
paste into ``tests/durations.json``).  A file missing from it (a new one) counts as the
median file; an out-of-date figure costs balance, never a test, but an entry for a file that
no longer exists fails ``tests/unit/test_durations.py``.

Examples
--------
>>> file_seconds("tests/test_tutorial_boomerang.py") > file_seconds("tests/unit/test_metric.py")
True
>>> file_seconds("tests/unit/a_new_file.py") == MEDIAN_SECONDS
True
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = Path(__file__).with_name("durations.json")
FILE_SECONDS: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
"""Summed test time per file (``tests/...py``, seconds, 2 workers on 2 cores)."""
MEDIAN_SECONDS = statistics.median(FILE_SECONDS.values()) if FILE_SECONDS else 0.0


def file_seconds(path: str) -> float:
    """The measured seconds of the test file ``path`` (relative to the repository root)."""
    return FILE_SECONDS.get(path, MEDIAN_SECONDS)


def relative_file(item: Any) -> str:
    """The file of a collected pytest item, as :data:`FILE_SECONDS` names it."""
    return Path(item.path).resolve().relative_to(ROOT).as_posix()


def from_junit(report: str | Path) -> dict[str, float]:
    """Summed test seconds per file from a pytest ``--junitxml`` report, longest first."""
    totals: collections.Counter = collections.Counter()
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        totals[path] += float(case.get("time", 0.0))
    return {path: round(seconds, 1) for path, seconds in totals.most_common()}


if __name__ == "__main__":
    print(json.dumps(from_junit(sys.argv[1]), indent=1))
