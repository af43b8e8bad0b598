"""Job table, SWF and sacct ingest (sacct parsing on output captured from Slurm 22.05)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import doctest
import gzip
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.predict import ingest_sacct, ingest_swf, jobtable
from slurm_hetero.slurm.parse import SACCT_DELIMITER as SEP
from slurm_hetero.slurm.runner import Runner, SlurmCommandError

DATA = Path(__file__).resolve().parents[1] / "data" / "predict"
TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"

SWF = """\
; Version: 2.2
; UnixStartTime: 1000000000
; MaxProcs: 100
    1     0    10   3477    4  -1  -1    4  53940  -1  1  12  12  -1 -1 -1 -1 -1
    2    60    -1     -1    8  -1  -1   -1   3600   2  5  13  13   7  2  3 -1 -1
    3   120     0     29    8  -1  -1    8     -1  -1  0  12  12  -1 -1 -1 -1 -1
"""


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_doctests() -> None:
    assert doctest.testmod(ingest_sacct).failed == 0


def test_swf_fields() -> None:
    df = ingest_swf.parse_swf(SWF, "swf:t")
    assert list(df.columns) == list(jobtable.COLUMNS)
    a, b, c = (df.iloc[i] for i in range(3))
    assert (a.submit, a.start, a.end, a.runtime_s) == (1_000_000_000, 1_000_000_010, 1_000_003_487, 3477)
    assert (a.user, a.account, a.req_time_s, a.req_cpus, a.status) == ("12", "12", 53940, 4, "completed")
    # unknown wait and runtime: no start or end; requested processors fall back to allocated
    assert (b.start, b.end, b.runtime_s, b.req_cpus, b.status) == (-1, -1, -1, 8, "cancelled")
    assert (b.qos, b.partition, b["name"], b.req_mem_mb) == ("2", "3", "7", 0)
    assert (c.req_time_s, c.status) == (-1, "failed")


def test_swf_from_pyss_drops_partition_column() -> None:
    text = "; Computer: Pyss Simulator\n" + SWF.replace("; UnixStartTime: 1000000000\n", "")
    df = ingest_swf.parse_swf(text, "swf:p")
    assert df["partition"].tolist() == ["", "", ""]
    assert df["submit"].tolist() == [0, 60, 120]  # no start epoch: times stay relative


def test_swf_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="expected 18"):
        ingest_swf.parse_swf("1 2 3\n", "swf:x", "bad.swf")
    with pytest.raises(InputError, match="not an SWF trace"):
        ingest_swf.parse_swf("1 2 x 4\n", "swf:x", "bad.swf")
    with pytest.raises(InputError, match=r"missing\.swf"):
        ingest_swf.read_swf(tmp_path / "missing.swf")


def test_swf_gz_and_limit(tmp_path: Path) -> None:
    p = tmp_path / "tiny-1.swf.gz"
    with gzip.open(p, "wt") as f:
        f.write(SWF)
    df = ingest_swf.read_swf(p, limit=2)
    assert len(df) == 2 and df["source"].iloc[0] == "swf:tiny-1"


@pytest.mark.skipif(not (TRACES / "KTH-SP2-1996-2.1-cln.swf.gz").exists(), reason="shared traces absent")
def test_real_trace_head() -> None:
    df = ingest_swf.read_swf(TRACES / "KTH-SP2-1996-2.1-cln.swf.gz", limit=40)
    assert len(df) == 40
    assert (df["submit"] > 840_000_000).all()  # UnixStartTime applied
    assert (df["req_time_s"] > 0).all() and set(df["status"]) <= {"completed", "failed"}


def test_jobtable_roundtrip_and_merge(tmp_path: Path) -> None:
    df = ingest_swf.parse_swf(SWF, "swf:t")
    path = tmp_path / "jobs.parquet"
    jobtable.write(df, path)
    back = jobtable.read(path)
    pd.testing.assert_frame_equal(back, df)
    newer = df.iloc[:1].copy()
    newer["runtime_s"] = 5
    merged = jobtable.merge(back, newer)
    assert len(merged) == 3 and merged.loc[merged["job_id"] == "1", "runtime_s"].item() == 5


def test_jobtable_read_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such job table"):
        jobtable.read(tmp_path / "none.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(InputError, match="not a Parquet job table"):
        jobtable.read(bad)
    other = tmp_path / "other.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(other)
    with pytest.raises(InputError, match="missing columns"):
        jobtable.read(other)


def test_sacct_captured_epoch_and_iso_agree(utc: None) -> None:
    epoch = ingest_sacct.parse_rows((DATA / "sacct-epoch-22.05.txt").read_text(), sep="|")
    iso = ingest_sacct.parse_rows((DATA / "sacct-iso-22.05.txt").read_text(), sep="|")
    assert len(epoch) == 86
    pd.testing.assert_frame_equal(epoch, iso)
    assert set(epoch["source"]) == {"sacct:demo"} and set(epoch["user"]) == {"root"}
    assert set(epoch["status"]) == {"completed", "failed", "cancelled"}
    never_ran = epoch[epoch["start"] < 0]
    assert len(never_ran) and set(never_ran["status"]) == {"cancelled"}
    job = epoch[epoch["job_id"] == "89"].iloc[0]  # COMPLETED, TimelimitRaw 5 min, gres/gpu:gh200=1
    assert (job.req_time_s, job.req_cpus, job.req_accel, job.req_mem_mb, job.partition) == (300, 1, 1, 1024, "gpu")
    assert (job.submit, job.start, job.end) == (1796034090, 1796034092, 1796034092)
    shard = epoch[epoch["job_id"] == "5"].iloc[0]  # gres/shard is no accelerator count
    assert shard.req_accel == 0


def test_sacct_captured_with_the_project_delimiter() -> None:
    df = ingest_sacct.parse_rows((DATA / "sacct-unitsep-22.05.txt").read_text())
    assert len(df) == 34 and set(df["status"]) == {"completed", "failed", "cancelled"}
    npu = df[df["job_id"] == "1"].iloc[0]
    assert (npu.partition, npu.req_accel, npu.runtime_s, npu.end - npu.start) == ("npu", 1, 2, 2)


def test_sacct_edge_lines() -> None:
    fields = ingest_sacct.FIELDS
    assert fields[-1] == "JobName"

    def line(**kw: str) -> str:
        row = {"JobIDRaw": "7", "Cluster": "c", "User": "ann", "Account": "a", "Partition": "p",
               "QOS": "normal", "State": "COMPLETED", "Submit": "100", "Start": "110", "End": "200",
               "ElapsedRaw": "90", "TimelimitRaw": "UNLIMITED", "ReqCPUS": "2",
               "ReqTRES": "cpu=2,gres/npu=4", "ReqMem": "4000Mc", "JobName": "a|b"}
        row.update(kw)
        return SEP.join(row[f] for f in fields)

    text = "\n".join([line(), line(JobIDRaw="8", State="RUNNING", End="Unknown"),
                      line(JobIDRaw="9", State="TIMEOUT", End="999"),
                      line(JobIDRaw="10", State="PENDING", Start="Unknown", End="Unknown")])
    df = ingest_sacct.parse_rows(text)
    assert df["job_id"].tolist() == ["7", "9"]
    a = df.iloc[0]
    assert (a["name"], a.req_time_s, a.req_accel, a.req_mem_mb, a.status) == ("a|b", -1, 4, 8000, "completed")
    assert df.iloc[1].status == "timeout"
    assert ingest_sacct.parse_rows(text, window=(150, 500))["job_id"].tolist() == ["7"]
    with pytest.raises(RuntimeFailure, match="unexpected line"):
        ingest_sacct.parse_rows(f"1{SEP}2{SEP}3\n")


@dataclasses.dataclass
class FakeSacct(Runner):
    """Answers sacct from a dict day → text; records every argv and environment."""

    days: dict[str, str] = dataclasses.field(default_factory=dict)
    calls: list[tuple[list[str], dict[str, str]]] = dataclasses.field(default_factory=list)
    fail: bool = False

    def out(self, argv: Sequence[str], **kw: Any) -> str:
        self.calls.append((list(argv), dict(self.extra_env)))
        if self.fail:
            raise SlurmCommandError(argv, 1, "sacct: error: Problem talking to the database")
        return self.days.get(argv[argv.index("-S") + 1][:10], "")


def test_fetch_days_records_and_resumes(tmp_path: Path, utc: None) -> None:
    d1, d3 = dt.date(2026, 1, 1), dt.date(2026, 1, 3)
    t1 = ingest_sacct.day_bounds(d1)[0]

    def job(i: int, end: int) -> str:
        return SEP.join([str(i), "c", "u", "a", "p", "q", "COMPLETED", str(end - 100), str(end - 50),
                         str(end), "50", "10", "1", "cpu=1", "1G", "j"])

    runner = FakeSacct(days={
        "2026-01-01": job(1, t1 + 100),
        # job 2 ran over midnight: sacct lists it on both days; it belongs to the day it ended
        "2026-01-02": job(2, t1 + 86400 + 60) + "\n" + job(3, t1 + 86400 + 7200),
        "2026-01-03": job(2, t1 + 86400 + 60) + "\n" + job(4, t1 + 2 * 86400 + 10),
    })
    parts = tmp_path / "jobs.parquet.parts"
    now = t1 + 2 * 86400 + 7200  # day 3 is still going: fetched, not recorded
    seen: list[str] = []
    df = ingest_sacct.fetch_days(runner, d1, d3 + dt.timedelta(days=1), parts, now=now,
                                 progress=lambda day, i, n, what: seen.append(f"{day} {i}/{n} {what}"))
    assert sorted(df["job_id"]) == ["1", "2", "3", "4"]
    assert sorted(p.name for p in parts.iterdir()) == ["sacct-default-2026-01-01.parquet",
                                                      "sacct-default-2026-01-02.parquet"]
    argv, env = runner.calls[0]
    assert argv[:6] == ["sacct", "-X", "-a", "-P", "-n", f"--delimiter={SEP}"] and env["SLURM_TIME_FORMAT"] == "%s"
    assert argv[argv.index("-S") + 1] == "2026-01-01T00:00:00" and argv[argv.index("-E") + 1] == "2026-01-02T00:00:00"
    assert seen[-1].endswith("not settled")
    runner.calls.clear()
    again = ingest_sacct.fetch_days(runner, d1, d3 + dt.timedelta(days=1), parts, now=now)
    assert len(runner.calls) == 1  # only the unsettled day is asked again
    pd.testing.assert_frame_equal(again.sort_values("job_id").reset_index(drop=True),
                                  df.sort_values("job_id").reset_index(drop=True))


def test_fetch_days_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--since"):
        ingest_sacct.fetch_days(FakeSacct(), dt.date(2026, 1, 2), dt.date(2026, 1, 1), tmp_path)
    with pytest.raises(RuntimeFailure, match="sacct exited 1"):
        ingest_sacct.fetch_days(FakeSacct(fail=True), dt.date(2026, 1, 1), dt.date(2026, 1, 2), tmp_path,
                                now=2e9)
    assert not any(tmp_path.iterdir())  # a failed day is not recorded
    with pytest.raises(InputError, match="2024-01-31"):
        ingest_sacct.parse_day("yesterday", "--since")
