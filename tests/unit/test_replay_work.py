"""Work bodies and requeued jobs in the replay: the body process itself (real signals and
checkpoints, no Slurm) and the accounting of a requeued job, on sacct output captured from
a replay whose daemon moved a running job (tests/data/replay/sacct-requeued.psv)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_hetero.replay.body import Work, read_progress
from slurm_hetero.replay.metrics import ALL, Pools, figures, outcomes, runtime_errors
from slurm_hetero.replay.sacct import by_job, parse_rows
from slurm_hetero.replay.submit import WorkSpec
from slurm_hetero.replay.window import ReplayJob
from slurm_hetero.site import load_site

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"


def body(tmp: Path, work: float, restart: int, devices: str = "0,1", units: str = "0.5") -> subprocess.Popen[str]:
    (tmp / "units").write_text(f"other 9.0\nn1 {units}\n")
    env = {**os.environ, "SLURMD_NODENAME": "n1", "CUDA_VISIBLE_DEVICES": devices,
           "SLURM_RESTART_COUNT": str(restart), "SLURM_JOB_ID": "7", "SLURM_HETERO_CHECKPOINT": str(tmp / "ck")}
    return subprocess.Popen([sys.executable, "-m", "slurm_hetero.replay.body", str(work), "1", str(tmp / "units")],
                            env=env, stderr=subprocess.PIPE, text=True)


def test_body_checkpoints_on_sigterm_and_the_next_incarnation_resumes(tmp_path: Path) -> None:
    # 2 devices x 0.5 units: 1 unit-second per second; 100 units would take 100 s.
    p = body(tmp_path, 100.0, 0)
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == 0, p.stderr.read() if p.stderr else ""
    ckpts = sorted((tmp_path / "ck").glob("ckpt-00000000-*"))
    assert len(ckpts) == 1
    done = read_progress(str(ckpts[0]))
    assert 0.5 < done < 10.0, done  # about the 1.5 s it ran, at 1 unit/s (startup included)
    # The next incarnation has only what is left: done + 1 unit at 1 unit/s, about 1 s.
    t = time.monotonic()
    q = body(tmp_path, done + 1.0, 1)
    assert q.wait(timeout=20) == 0, q.stderr.read() if q.stderr else ""
    assert time.monotonic() - t < 5.0
    # A stale incarnation (restart 0 again) is fenced out before it does anything.
    stale = body(tmp_path, 1.0, 0)
    assert stale.wait(timeout=20) == 3


def test_body_speed_is_the_units_it_holds(tmp_path: Path) -> None:
    # 4 units of work: 4 devices x 1.0 units take about 1 s; the count is CUDA_VISIBLE_DEVICES's.
    t = time.monotonic()
    p = body(tmp_path, 4.0, 0, devices="0,1,2,3", units="1.0")
    assert p.wait(timeout=20) == 0
    assert 0.9 < time.monotonic() - t < 5.0


def test_body_refuses_a_node_without_units(tmp_path: Path) -> None:
    (tmp_path / "units").write_text("n2 0.5\n")
    env = {**os.environ, "SLURMD_NODENAME": "n1"}
    r = subprocess.run([sys.executable, "-m", "slurm_hetero.replay.body", "1", "1", str(tmp_path / "units")],
                       env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "node 'n1' has no units" in r.stderr


def test_work_progress_is_capped_and_rate_must_be_positive() -> None:
    w = Work(10.0, 2.0, 4.0, now=100.0)
    assert w.progress(101.0) == 6.0 and w.left_s(101.0) == 2.0 and w.progress(1000.0) == 10.0
    with pytest.raises(ValueError):
        Work(1.0, 0.0, 0.0, 0.0)


def test_workspec_keeps_the_trace_load_and_a_limit_for_the_slowest_model() -> None:
    ws = WorkSpec(0.36, 0.15, Path("/w/u"), Path("/w/ck"))
    job = ReplayJob("job/1", 0, 600, 30, 1, 2, "u", True)
    assert ws.work(job) == pytest.approx(600 * 2 * 0.36)
    assert ws.limit_min(job) == 72  # 30 min x 0.36 / 0.15
    assert ws.folder(job) == Path("/w/ck/rjob_1")  # trace text never makes a path of its own


def test_a_requeued_job_waits_until_its_first_start_and_each_incarnation_counts() -> None:
    site = load_site(DATA / "alibaba-site-small.yaml")
    rows = parse_rows((DATA / "sacct-requeued.psv").read_text())
    assert [r.state for r in rows] == ["REQUEUED", "COMPLETED"]
    rec = by_job(rows)["1"]
    assert (rec.state, rec.nodes, len(rec.earlier), rec.earlier[0].start) == ("COMPLETED", "a10-01", 1, 1796238157)
    due = 1796238156.0
    job = ReplayJob("1", 0, 600, 30, 1, 1, "u1", True, None, True)
    [o] = outcomes([(job, "1", due, due)], {"1": rec}, Pools(site), work=True)
    assert (o.pool, o.restarts, o.wait, o.work) == ("a10@x86_64", 1, 1.0, True)
    assert o.earlier == ((1796238157.0, 1796238288.0, "p100@x86_64", 1),)
    assert runtime_errors([o]) == []  # its run time is its pools', not the trace's
    figs = figures([o], Pools(site).capacity, due, 1.0, 1796238861.0, units=Pools(site).units)
    # Each incarnation in the pool it ran in: 131 s on the P100, 550 s on the A10.
    assert figs["p100@x86_64"].jobs == 0 and figs["p100@x86_64"].utilisation == pytest.approx(131 / 3600)
    assert figs["a10@x86_64"].jobs == 1 and figs["a10@x86_64"].utilisation == pytest.approx(550 / 3600)
    assert figs[ALL].units_used_h == pytest.approx((131 * 0.15 + 550 * 0.36) / 3600)
