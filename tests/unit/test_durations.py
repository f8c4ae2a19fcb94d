"""The longest-first order of the test files (``tests/durations.py``, ``conftest.py``)."""

import pytest

from tests.durations import (
    FILE_SECONDS,
    MEDIAN_SECONDS,
    ROOT,
    file_seconds,
    from_junit,
    relative_file,
)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.unit.test_a" name="test_one" time="1.5"/>
<testcase classname="tests.unit.test_a" name="test_two[x]" time="2.0"/>
<testcase classname="tests.test_b" name="test_three" time="7.3"/>
</testsuite></testsuites>
"""


def test_junit_report_gives_seconds_per_file_longest_first(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)
    assert list(from_junit(report).items()) == [
        ("tests/test_b.py", 7.3),
        ("tests/unit/test_a.py", 3.5),
    ]


def test_every_measured_file_exists_and_new_files_count_as_the_median():
    missing = [path for path in FILE_SECONDS if not (ROOT / path).exists()]
    assert not missing, f"stale entries in tests/durations.json: {missing}"
    assert file_seconds("tests/unit/not_a_test_file.py") == MEDIAN_SECONDS > 0


def test_collected_files_run_longest_first(request: pytest.FixtureRequest):
    paths = [relative_file(item) for item in request.session.items]
    seconds = [file_seconds(path) for path in paths]
    assert seconds == sorted(seconds, reverse=True)
    # a file's tests stay together and in their own order
    firsts = {path: paths.index(path) for path in paths}
    assert all(
        paths[firsts[p] : firsts[p] + paths.count(p)] == [p] * paths.count(p) for p in firsts
    )
