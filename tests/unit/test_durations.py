"""scripts/durations.py on small JUnit XML files in pytest's own format."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

import scripts.durations as durations
from scripts.durations import main

# As pytest --junitxml writes it (junit_family=xunit2: no `file` attribute).
RUN = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="0" tests="5" time="9.9">
<testcase classname="tests.integration.test_x" name="test_a" time="1.5"/>
<testcase classname="tests.integration.test_x" name="test_b[h100:2]" time="2.25">
<failure message="assert 1 == 2">...</failure></testcase>
<testcase classname="tests.integration.test_y.TestGroup" name="test_c" time="4.0"/>
<testcase classname="tests.unit.test_z" name="test_d" time="0.125"/>
<testcase classname="tests.unit.test_z" name="test_e" time="0.125"><skipped message="no GPU"/></testcase>
</testsuite></testsuites>
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_per_file_longest_first_with_the_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([write(tmp_path, "run.xml", RUN)]) == 0
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines()]
    assert lines == [["4.00", "s", "1", "tests/integration/test_y.py"],
                     ["3.75", "s", "2", "tests/integration/test_x.py"],
                     ["0.25", "s", "2", "tests/unit/test_z.py"],
                     ["8.00", "s", "5", "total"]]


def test_several_files_add_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A single <testsuite> root, and xunit1's `file` attribute, are read too.
    other = ('<testsuite><testcase classname="tests.integration.test_x" name="test_f" time="10"/>'
             '<testcase classname="x.y" file="tests/lua/test_w.py" name="test_g" time="0.5"/></testsuite>')
    assert main([write(tmp_path, "a.xml", RUN), write(tmp_path, "b.xml", other)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["13.75", "s", "3", "tests/integration/test_x.py"]
    assert out[-3].split() == ["0.50", "s", "1", "tests/lua/test_w.py"]
    assert out[-1].split() == ["18.50", "s", "7", "total"]


@pytest.mark.parametrize(("text", "why"), [
    (None, "no such file"),
    ("<testsuites><testcase", "not XML"),
    ("<html></html>", "not JUnit XML"),
    ('<testsuite><testcase classname="a" name="b" time="soon"/></testsuite>', "time='soon'"),
])
def test_a_missing_or_unreadable_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        text: str | None, why: str) -> None:
    good = write(tmp_path, "good.xml", RUN)
    bad = str(tmp_path / "bad.xml") if text is None else write(tmp_path, "bad.xml", text)
    assert main([good, bad]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"durations: {bad}: " in captured.err and why in captured.err, captured.err


def test_doctests() -> None:
    assert doctest.testmod(durations).failed == 0
