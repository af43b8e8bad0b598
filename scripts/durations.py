"""Per-file time of a test run, from pytest's JUnit XML (`pytest --junitxml=FILE`).

    python scripts/durations.py FILE.xml [FILE.xml ...]

Prints, for each test file, the summed time of its tests and their count, longest first,
then the total over every file given. Exit 2, naming the file, when one is missing or is
not readable JUnit XML.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


class ReportError(Exception):
    """A JUnit XML file that cannot be read; the message names it."""


@dataclass
class FileTime:
    seconds: float = 0.0
    tests: int = 0


def file_of(classname: str, name: str, file: str | None = None) -> str:
    """The test file of one <testcase>: its `file` attribute (junit_family=xunit1), else the
    module of its classname (xunit2 has no `file`) without the test classes' names.

    >>> file_of("tests.integration.test_x", "test_a")
    'tests/integration/test_x.py'
    >>> file_of("tests.unit.test_y.TestGroup.TestInner", "test_b")
    'tests/unit/test_y.py'
    """
    if file:
        return file
    # A collection error has no classname: its name is the module.
    parts = (classname or name).split(".")
    while len(parts) > 1 and parts[-1].startswith("Test"):  # pytest's default python_classes
        parts.pop()
    return "/".join(parts) + ".py"


def read_report(path: Path) -> list[tuple[str, float]]:
    """(test file, seconds) of each <testcase> in one JUnit XML file; ReportError if unreadable."""
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError as e:
        raise ReportError(f"{path}: no such file") from e
    except OSError as e:
        raise ReportError(f"{path}: cannot read it: {e.strerror}") from e
    except ET.ParseError as e:
        raise ReportError(f"{path}: not XML ({e})") from e
    if root.tag not in ("testsuites", "testsuite"):
        raise ReportError(f"{path}: not JUnit XML (its root is <{root.tag}>, not <testsuites>)")
    out = []
    for case in root.iter("testcase"):
        try:
            seconds = float(case.get("time") or 0.0)
        except ValueError as e:
            raise ReportError(f"{path}: testcase {case.get('name')!r} has time={case.get('time')!r}") from e
        out.append((file_of(case.get("classname", ""), case.get("name", ""), case.get("file")), seconds))
    return out


def per_file(cases: Iterable[tuple[str, float]]) -> dict[str, FileTime]:
    totals: dict[str, FileTime] = {}
    for file, seconds in cases:
        t = totals.setdefault(file, FileTime())
        t.seconds += seconds
        t.tests += 1
    return totals


def render(totals: dict[str, FileTime]) -> str:
    """One line per file, longest first (then by name), and the total."""
    rows = sorted(totals.items(), key=lambda kv: (-kv[1].seconds, kv[0]))
    total = FileTime(sum(t.seconds for t in totals.values()), sum(t.tests for t in totals.values()))
    lines = [f"{t.seconds:10.2f} s {t.tests:6d}  {file}" for file, t in rows]
    lines.append(f"{total.seconds:10.2f} s {total.tests:6d}  total")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-file test time from pytest --junitxml files.")
    parser.add_argument("reports", nargs="+", type=Path, metavar="FILE.xml")
    args = parser.parse_args(argv)
    cases: list[tuple[str, float]] = []
    try:
        for path in args.reports:
            cases += read_report(path)
    except ReportError as e:
        print(f"durations: {e}", file=sys.stderr)
        return 2
    print(render(per_file(cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
