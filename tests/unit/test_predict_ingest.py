"""Job table, SWF and sacct ingest (sacct parsing on output captured from Slurm 22.05)."""

from __future__ import annotations

import datetime as dt
import doctest
import gzip
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.jobs import sacct as jobs_sacct
from slurm_hetero.jobs import swf
from slurm_hetero.jobs import table as jobtable
from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.predict.ingest import sacct_jobs
from slurm_hetero.slurm import sacct
from slurm_hetero.slurm.parse import SACCT_DELIMITER as SEP
from slurm_hetero.slurm.runner import Runner
from tests.fakeslurm import FakeSlurm, sacct_by_day, sacct_names

DATA = Path(__file__).resolve().parents[1] / "data" / "predict"
# The field list the captured files were asked for (see DATA/README.md).
CAPTURED = ("JobIDRaw", "Cluster", "User", "Account", "Partition", "QOS", "State", "Submit", "Start", "End",
            "ElapsedRaw", "TimelimitRaw", "ReqCPUS", "ReqTRES", "ReqMem", "JobName")

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


def parse_captured(text: str, sep: str = "|") -> pd.DataFrame:
    jobs = jobs_sacct.from_sacct(sacct.read_sacct([text], CAPTURED, sep).frame)
    return jobs[jobtable.finished(jobs)].reset_index(drop=True)


def test_doctests() -> None:
    assert doctest.testmod(jobs_sacct).failed == 0
    assert doctest.testmod(sacct).failed == 0


def test_swf_fields() -> None:
    df = swf.parse_swf(SWF, "swf:t").jobs
    assert list(df.columns) == list(jobtable.COLUMNS)
    a, b, c = (df.iloc[i] for i in range(3))
    assert (a.submit, a.start, a.end, a.runtime_s) == (1_000_000_000, 1_000_000_010, 1_000_003_487, 3477)
    assert (a.user, a.account, a.req_time_s, a.req_cpus, a.state) == ("u12", "g12", 53940, 4, "COMPLETED")
    # unknown wait and runtime: no start or end; requested processors fall back to allocated
    assert math.isnan(b.start) and math.isnan(b.end) and math.isnan(b.runtime_s)
    assert (b.req_cpus, b.ncpus, b.state) == (8, 8, "CANCELLED")
    assert (b.qos, b.partition, b["name"], b.req_mem_mb) == ("q2", "p3", "e7", 0)
    assert math.isnan(c.req_time_s) and c.state == "FAILED"


def test_swf_from_pyss_drops_partition_column() -> None:
    text = "; Computer: Pyss Simulator\n" + SWF.replace("; UnixStartTime: 1000000000\n", "")
    df = swf.parse_swf(text, "swf:p").jobs
    assert df["partition"].tolist() == ["", "", ""]
    assert df["submit"].tolist() == [0, 60, 120]  # no start epoch: times stay relative


def test_swf_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"bad\.swf:1: expected 18"):
        swf.parse_swf("1 2 3\n", "swf:x", "bad.swf")
    with pytest.raises(InputError, match=r"bad\.swf:1: field 3 \(wait time\) is 'x', not a number"):
        swf.parse_swf(" ".join(["1", "2", "x"] + ["4"] * 15) + "\n", "swf:x", "bad.swf")
    with pytest.raises(InputError, match=r"missing\.swf"):
        swf.read_swf(tmp_path / "missing.swf")


def test_swf_gz_and_limit(tmp_path: Path) -> None:
    p = tmp_path / "tiny-1.swf.gz"
    with gzip.open(p, "wt") as f:
        f.write(SWF)
    df = swf.read_swf(p, limit=2).jobs
    assert len(df) == 2 and df["source"].iloc[0] == "swf:tiny-1"


def test_real_trace_head() -> None:
    df = swf.read_swf(KTH_SP2, limit=40).jobs
    assert len(df) == 40
    assert (df["submit"] > 840_000_000).all()  # UnixStartTime applied
    assert (df["req_time_s"] > 0).all() and set(df["state"]) <= {"COMPLETED", "FAILED"}


def test_jobtable_roundtrip_and_merge(tmp_path: Path) -> None:
    df = swf.parse_swf(SWF, "swf:t").jobs
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


def test_tables_of_the_first_layout_still_read(tmp_path: Path) -> None:
    """`model ingest` first wrote integers with -1 for unknown and lower-case statuses."""
    old = pd.DataFrame({"source": ["swf:t"] * 2, "job_id": ["1", "2"], "user": ["12", "13"], "account": "",
                        "submit": [100, 160], "start": [110, -1], "end": [3587, -1], "runtime_s": [3477, -1],
                        "req_time_s": [53940, -1], "req_cpus": [4, 8], "req_accel": 0, "req_mem_mb": -1,
                        "partition": "", "qos": "", "name": "", "status": ["completed", "oom"]})
    old.to_parquet(tmp_path / "old.parquet")
    df = jobtable.read(tmp_path / "old.parquet")
    assert df["state"].tolist() == ["COMPLETED", "OUT_OF_MEMORY"]
    assert df["start"].iloc[0] == 110 and math.isnan(df["start"].iloc[1]) and math.isnan(df["req_time_s"].iloc[1])


def test_sacct_captured_epoch_and_iso_agree(utc: None) -> None:
    epoch = parse_captured((DATA / "sacct-epoch-22.05.txt").read_text())
    iso = parse_captured((DATA / "sacct-iso-22.05.txt").read_text())
    assert len(epoch) == 86
    pd.testing.assert_frame_equal(epoch, iso)
    assert set(epoch["source"]) == {"sacct:demo"} and set(epoch["user"]) == {"root"}
    assert set(epoch["state"]) == {"COMPLETED", "FAILED", "CANCELLED"}
    never_ran = epoch[epoch["start"].isna()]
    assert len(never_ran) and set(never_ran["state"]) == {"CANCELLED"}
    job = epoch[epoch["job_id"] == "89"].iloc[0]  # COMPLETED, TimelimitRaw 5 min, gres/gpu:gh200=1
    assert (job.req_time_s, job.req_cpus, job.req_accel, job.req_mem_mb, job.partition) == (300, 1, 1, 1024, "gpu")
    assert (job.submit, job.start, job.end) == (1796034090, 1796034092, 1796034092)
    shard = epoch[epoch["job_id"] == "5"].iloc[0]  # gres/shard is no accelerator count
    assert shard.req_accel == 0


def test_sacct_captured_with_the_project_delimiter() -> None:
    df = parse_captured((DATA / "sacct-unitsep-22.05.txt").read_text(), SEP)
    assert len(df) == 34 and set(df["state"]) == {"COMPLETED", "FAILED", "CANCELLED"}
    npu = df[df["job_id"] == "1"].iloc[0]
    assert (npu.partition, npu.req_accel, npu.runtime_s, npu.end - npu.start) == ("npu", 1, 2, 2)


def line(**kw: str) -> str:
    """One sacct line of slurm.sacct.FIELDS: a finished job unless told otherwise."""
    row = {f: "" for f in sacct.FIELDS}
    row.update({"JobIDRaw": "7", "JobID": "7", "Cluster": "c", "User": "ann", "Account": "a", "Partition": "p",
                "QOS": "normal", "State": "COMPLETED", "Submit": "100", "Eligible": "100", "Start": "110",
                "End": "200", "ElapsedRaw": "90", "TimelimitRaw": "UNLIMITED", "ReqCPUS": "2",
                "ReqTRES": "cpu=2,gres/npu=4", "ReqMem": "4000Mc", "NCPUS": "2", "TotalCPU": "00:01:30",
                "AllocTRES": "cpu=2,gres/npu=4", "NodeList": "n1", "JobName": "a|b"})
    row.update(kw)
    return SEP.join(row[f] for f in sacct.FIELDS)


def test_sacct_edge_lines() -> None:
    assert sacct.FIELDS[-1] == "AdminComment"  # the one free-text field that may hold anything
    text = "\n".join([line(), line(JobIDRaw="8", JobID="8", State="RUNNING", End="Unknown"),
                      line(JobIDRaw="9", JobID="9", State="TIMEOUT", End="999"),
                      line(JobIDRaw="10", JobID="10", State="PENDING", Start="Unknown", End="Unknown",
                           NodeList="None assigned"),
                      line(JobIDRaw="9.batch", JobID="9.batch", State="CANCELLED by 0")])
    every = jobs_sacct.from_sacct(sacct.read_sacct([sacct.ChunkText(text, {"7": "a|b"})]).frame)
    assert every["job_id"].tolist() == ["7", "8", "9", "10"]  # the step line is no job
    df = every[jobtable.finished(every)]
    assert df["job_id"].tolist() == ["7", "9"]
    a = df.iloc[0]
    assert (a["name"], a.req_accel, a.req_mem_mb, a.state, a.cpu_time) == ("a|b", 4, 8000, "COMPLETED", 90)
    assert math.isnan(a.req_time_s) and df.iloc[1].state == "TIMEOUT"
    assert math.isnan(every.iloc[3].start)
    raw = sacct.read_sacct([f"1{SEP}2{SEP}3\n"])
    assert (len(raw.frame), raw.skipped) == (0, 1)  # a short line is counted, never a job


def test_sacct_jobs_records_settled_days_and_resumes(tmp_path: Path, utc: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    t1 = dt.datetime(2026, 1, 1).timestamp()

    def job(i: int, end: float) -> str:
        return line(JobIDRaw=str(i), JobID=str(i), Submit=str(int(end) - 100), Eligible=str(int(end) - 100),
                    Start=str(int(end) - 50), End=str(int(end)), ElapsedRaw="50")

    slurm = FakeSlurm(monkeypatch).on("sacct", sacct_names(sacct_by_day({
        "2026-01-01": job(1, t1 + 100),
        # job 2 ran over midnight: sacct lists it on both days; it belongs to the day it ended
        "2026-01-02": job(2, t1 + 86400 + 60) + "\n" + job(3, t1 + 86400 + 7200),
        "2026-01-03": job(2, t1 + 86400 + 60) + "\n" + job(4, t1 + 2 * 86400 + 10),
    }), {"3": "three"}))
    parts = tmp_path / "jobs.parquet.parts"
    now = t1 + 2 * 86400 + 7200  # day 3 is still going: fetched, not recorded
    seen: list[sacct.Chunk] = []
    df = sacct_jobs(Runner(), t1, t1 + 3 * 86400, parts, now=now, on_chunk=seen.append)
    assert sorted(df["job_id"]) == ["1", "2", "3", "4"]
    assert dict(zip(df["job_id"], df["name"], strict=True)) == {"1": "job1", "2": "job2", "3": "three", "4": "job4"}
    assert len(list(parts.glob("*/*.psv.gz"))) == 2
    call = slurm.calls[0]
    assert call.argv[:5] == ["sacct", "-a", "-n", "-P", f"--delimiter={SEP}"]
    assert call.env["SLURM_TIME_FORMAT"] == "%s"
    assert call.argv[call.argv.index("-S") + 1] == "2026-01-01T00:00:00"
    assert call.argv[call.argv.index("-E") + 1] == "2026-01-02T00:00:00"
    assert [(c.index, c.cached, c.settled) for c in seen] == [(1, False, True), (2, False, True), (3, False, False)]
    slurm.calls.clear()
    again = sacct_jobs(Runner(), t1, t1 + 3 * 86400, parts, now=now)
    assert len(slurm.calls) == 2  # only the unsettled day is asked again (its rows, its names)
    pd.testing.assert_frame_equal(again.sort_values("job_id").reset_index(drop=True),
                                  df.sort_values("job_id").reset_index(drop=True))
    assert len(sacct_jobs(Runner(), t1, t1 + 86400, parts, now=now)) == 1  # only what ended in range


def test_sacct_jobs_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="--since"):
        sacct_jobs(Runner(), 2e9, 1e9, tmp_path)
    FakeSlurm(monkeypatch).fail("sacct", "sacct: error: Problem talking to the database")
    with pytest.raises(RuntimeFailure, match="sacct exited 1"):
        sacct_jobs(Runner(), 1e9, 1e9 + 86400, tmp_path, now=2e9)
    assert not any(tmp_path.rglob("*.psv.gz"))  # a failed day is not recorded
    with pytest.raises(InputError, match="not a date or time"):
        sacct.parse_when("someday", "--since")
