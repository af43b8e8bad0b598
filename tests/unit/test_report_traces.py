"""Trace readers on a few dozen lines cut at test time from committed traces (the KTH log
the package ships, the small cuts in tests/data/traces), and their errors."""

from __future__ import annotations

import gzip
import itertools
import math
from pathlib import Path

import pytest

from slurm_hetero.errors import InputError
from slurm_hetero.jobs.alibaba import ANY_GPU
from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.jobs.traces import read_trace
from slurm_hetero.reports import trace_report

CUTS = Path(__file__).resolve().parents[1] / "data" / "traces"
TRACES = {KTH_SP2.name: KTH_SP2, **{p.name: p for p in CUTS.iterdir() if p.name != "README.md"}}


def cut(name: str, dest: Path, lines: int, gz: bool | None = None) -> Path:
    """The first `lines` lines of a committed trace, written to dest (gzipped like the original)."""
    src = TRACES[name]
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as f:
        text = "".join(itertools.islice(f, lines))
    gz = src.suffix == ".gz" if gz is None else gz
    if gz:
        dest.write_bytes(gzip.compress(text.encode()))
    else:
        dest.write_text(text)
    return dest


def test_swf_fields_become_jobs(tmp_path: Path) -> None:
    path = cut(KTH_SP2.name, tmp_path / "kth.swf.gz", 60)  # 24 header lines, 36 jobs
    trace = read_trace(path)
    jobs = trace.jobs
    assert len(jobs) == 36
    first = jobs.iloc[0]  # "15 599850 192180 3477 4 -1 -1 4 53940 -1 1 12 12 -1 -1 -1 -1 -1"
    origin = 843480031.0  # the header's UnixStartTime
    assert (first["job_id"], first["user"], first["account"], first["state"]) == ("15", "u12", "g12", "COMPLETED")
    assert first["submit"] == origin + 599850 and first["start"] == origin + 599850 + 192180
    assert (first["runtime_s"], first["ncpus"], first["req_time_s"]) == (3477.0, 4.0, 53940.0)
    assert math.isnan(first["cpu_time"]) and first["partition"] == "" and first["source"] == "swf:kth"
    assert jobs.iloc[2]["state"] == "FAILED"
    assert trace.capacity.cpus == {"unknown": 100.0}  # MaxProcs: 100


def test_swf_without_start_time_is_relative(tmp_path: Path) -> None:
    trace = read_trace(cut("CTC-SP2-pyss-easy-head.swf", tmp_path / "ctc.swf", 40, gz=False))
    assert trace.jobs["submit"].min() == 0.0 and len(trace.jobs) == 30  # 40 lines, 10 of header
    assert any("UnixStartTime" in n for n in trace.notes)
    assert trace.capacity.cpus == {"unknown": 338.0}
    # pyss wrote its "was backfilled" flag into the partition column: no partition
    assert set(trace.jobs["partition"]) == {""} and set(trace.jobs["state"]) == {"UNKNOWN"}


def test_the_sdsc_cut_reads_whole() -> None:
    trace = read_trace(CUTS / "SDSC-BLUE-pyss-easy-head.swf")
    assert len(trace.jobs) == 300 and trace.capacity.cpus == {"unknown": 1152.0}
    assert trace.jobs["source"].iloc[0] == "swf:SDSC-BLUE-pyss-easy-head"
    assert (trace.jobs["req_time_s"] > 0).all() and (trace.jobs["runtime_s"] >= 0).all()


def test_alibaba_pods_and_nodes(tmp_path: Path) -> None:
    pods = cut("alibaba-gpu-2023-head-pods.csv", tmp_path / "alibaba-gpu-2023-pods.csv", 41)
    nodes = cut("alibaba-gpu-2023-head-nodes.csv", tmp_path / "alibaba-gpu-2023-nodes.csv", 31)
    trace = read_trace(nodes)  # either file finds the other
    assert len(trace.jobs) == 40
    pod1 = trace.jobs.iloc[1]  # openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
    assert (pod1["job_id"], pod1["qos"], pod1["state"], pod1["model"]) == ("openb-pod-0001", "LS", "RUNNING", ANY_GPU)
    assert (pod1["ncpus"], pod1["devices"], pod1["accel_class"], pod1["req_accel"]) == (6.0, 0.46, "gpu/shared", 1)
    assert pod1["runtime_s"] == 12902960 - 427061 and pod1["source"] == "alibaba:alibaba-gpu-2023"
    # The first 30 nodes: 22 with 2 P100, one with 4 V100M16, 4+1 with 8 G2/G3, 2 with 8 V100M32.
    assert trace.capacity.inventory == {"P100": 44.0, "V100M16": 4.0, "G2": 32.0, "G3": 8.0, "V100M32": 16.0}
    assert trace.capacity.devices[(ANY_GPU, "unknown")] == 104.0
    assert read_trace(pods).label == trace.label


@pytest.mark.parametrize(("line", "message"), [
    ("16 600022 11940 2488 25 -1 -1 25 3600 -1 1 13 13 -1 -1 -1\n", "expected 18 whitespace-separated SWF fields, found 16"),
    ("16 600022 11940 2488 twenty -1 -1 25 3600 -1 1 13 13 -1 -1 -1 -1 -1\n",
     "field 5 (allocated processors) is 'twenty', not a number"),
])
def test_malformed_swf_line_is_named_with_its_number(tmp_path: Path, line: str, message: str) -> None:
    path = cut(KTH_SP2.name, tmp_path / "kth.swf", 30, gz=False)
    path.write_text(path.read_text() + line + "17 600476 364560 215337 5 -1 -1 5 215400 -1 0 14 14 -1 -1 -1 -1 -1\n")
    with pytest.raises(InputError) as e:
        read_trace(path)
    assert str(e.value) == f"{path}:31: {message}"


def test_malformed_alibaba_line(tmp_path: Path) -> None:
    pods = cut("alibaba-gpu-2023-head-pods.csv", tmp_path / "x-pods.csv", 10)
    pods.write_text(pods.read_text() + "openb-pod-9,12000,1024,1,1000,,LS,Running,soon,12902960,0\n")
    with pytest.raises(InputError, match=r"x-pods.csv:11: field creation_time is 'soon', not a number"):
        read_trace(pods)
    pods.write_text("name,cpu_milli\nx,1\n")
    with pytest.raises(InputError, match=r"x-pods.csv:1: header lacks column\(s\) num_gpu"):
        read_trace(pods)


def test_unknown_and_missing_traces(tmp_path: Path) -> None:
    other = tmp_path / "jobs.txt"
    other.write_text("hello\n")
    with pytest.raises(InputError, match="unknown trace format; give an SWF file"):
        read_trace(other)
    with pytest.raises(InputError, match="no such file"):
        read_trace(tmp_path / "nope.swf")
    broken = tmp_path / "broken.swf.gz"
    broken.write_bytes(b"1 2 3\n")  # named .gz, not gzip
    with pytest.raises(InputError, match="cannot read"):
        read_trace(broken)


def test_trace_report_with_a_range(tmp_path: Path) -> None:
    path = cut(KTH_SP2.name, tmp_path / "kth.swf.gz", 200)
    rep = trace_report(path)
    assert rep.empty is None and dict(rep.summary)["jobs in range"] == "176"
    empty = trace_report(path, since="2001-01-01", until="2001-02-01")
    assert empty.empty is not None and empty.empty.startswith("no jobs in range 2001-01-01 00:00:00")


def test_kth_user_estimate_accuracy_matches_the_published_figure() -> None:
    """The README's figure for KTH: user estimate accuracy 0.47 (whole trace, 28k jobs)."""
    rep = trace_report(KTH_SP2)
    acc = next(t.frame for t in rep.tables() if t.slug == "prediction_accuracy")
    assert round(float(acc["accuracy"].iloc[0]), 2) == 0.47
