"""`slurm-hetero forecast` on committed trace cuts: the table, --json, and bad input (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.forecast.cli import forecast, parse_at
from slurm_hetero.slurm.runner import Runner

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "forecast"
KTH = str(DATA / "kth-10days.swf")
AT = "1996-10-08T12:00"  # Stockholm time: 8 days of the cut before it, 2 after


def test_table_from_a_trace() -> None:
    r = CliRunner().invoke(forecast, ["--trace", KTH, "--at", AT])
    assert r.exit_code == 0, r.output
    assert "2026" not in r.output and "1996-10-08 12:00 CEST" in r.output
    row = next(line for line in r.output.splitlines() if "cpu@unknown" in line)
    assert "lightgbm" in row  # 8 days of history: a model per horizon was trained


def test_json_from_a_trace() -> None:
    r = CliRunner().invoke(forecast, ["--trace", KTH, "--at", AT, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["at"] == parse_at(AT, "Europe/Stockholm") and doc["trained_boosters"] == 3
    pool = doc["pools"]["cpu@unknown"]
    f, actual = pool["forecast"], pool["actual"]
    assert set(f) == set(actual) == {"5", "15", "60"}
    assert pool["level"] == pool["running"] + pool["pending"]
    # peaks over longer windows hold the shorter ones
    assert actual["5"] <= actual["15"] <= actual["60"]
    assert all(v >= 0 for v in f.values())


def test_alibaba_pools() -> None:
    r = CliRunner().invoke(forecast, ["--trace", str(DATA / "alibaba-cut-pods.csv"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc["pools"]) == {"gpu@unknown", "cpu@unknown"} and doc["notes"]


def test_bad_input_exits_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(forecast, ["--trace", KTH, "--at", "next tuesday"])
    assert r.exit_code == 2 and "--at 'next tuesday'" in r.output
    r = CliRunner().invoke(forecast, ["--trace", str(tmp_path / "none.swf")])
    assert r.exit_code == 2 and "no such file" in r.output
    empty = tmp_path / "empty.swf"
    empty.write_text("; MaxProcs: 4\n")
    r = CliRunner().invoke(forecast, ["--trace", str(empty)])
    assert r.exit_code == 2 and "no jobs" in r.output


def test_parse_at() -> None:
    assert parse_at("1000", "Europe/Stockholm") == 1000.0
    assert parse_at("1996-10-08T12:00", "Europe/Stockholm") == parse_at("1996-10-08T10:00", None)


def test_from_sacct_through_the_runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without --trace: a day of sacct per call through the project's runner (patched here
    to print captured lines), the demo site's pools, the queue counted."""
    text = "".join((DATA / f).read_text() for f in ("sacct-22.05.psv", "sacct-handwritten.psv"))
    calls: list[list[str]] = []

    def out(self: Runner, argv: Sequence[str], **kw: float | None) -> str:
        calls.append(list(argv))
        assert self.extra_env.get("SLURM_TIME_FORMAT") == "%s"
        return text if argv[0] == "sacct" else ""

    monkeypatch.setattr(Runner, "out", out)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    r = CliRunner().invoke(forecast, ["--at", "1796034100", "--days", "2", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert "h100@x86_64" in doc["pools"] and "cpu@x86_64" in doc["pools"]
    assert doc["pools"]["v100@x86_64"]["pending"] > 0  # job 101 waits for two V100s
    assert calls and all(c[0] == "sacct" for c in calls)
