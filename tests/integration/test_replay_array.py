"""`replay run --windows N --via-slurm` on a real Slurm: the session's demo cluster is the
outer cluster, and each task of the array boots its own private dev cluster (munged,
MariaDB, slurmdbd, slurmctld, slurmd on its own clock) inside its job to replay one window
of the shipped KTH trace; then `replay merge` pools them. Both tasks run on one node with
--exclusive, so they run one after the other (two replays at x20 on this machine's two
cores would blur each other's timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hetero.devcluster import Cluster
from slurm_hetero.replay.array import task_scratch
from slurm_hetero.replay.fidelity import runtime_bound_s
from slurm_hetero.replay.metrics import ALL, release_lags, runtime_errors
from slurm_hetero.replay.run import ArmResult

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
START = 850956401  # tests/data/replay/README.md: the shipped window
HOURS = 0.25
SPEED = 20.0
NODE = "cpu-x86-01"


def test_windows_replay_as_array_tasks_each_on_its_own_cluster(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "via"
    argv = [sys.executable, "-m", "slurm_hetero.cli", "replay", "run", "--trace", str(DATA / "kth-window.swf"),
            "--site", str(DATA / "kth-site.yaml"), "--start", str(START), "--hours", str(HOURS),
            "--speed", str(SPEED), "--arms", "plain,bridge", "--model", "auto", "--drain-hours", "0.1",
            "--windows", "2", "--via-slurm", "-o", str(out),
            f"--sbatch-arg=--nodelist={NODE}", "--sbatch-arg=--exclusive"]
    env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, check=False)
    logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(out.glob("window-*.log")))
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n{logs}"
    assert "submitted array job" in r.stdout

    merged = json.loads((out / "merged.json").read_text())
    assert merged["arms"] == ["plain", "bridge"] and merged["speed"] == SPEED
    starts = []
    for w in merged["windows"]:
        results = {a["arm"]: ArmResult.from_json(a) for a in w["arms"]}
        starts.append(results["plain"].window.start)
        for name, res in results.items():
            jobs = w["selection"]["jobs"]
            assert jobs > 0 and res.submit_failed == [] and len(res.outcomes) == jobs, (name, jobs)
            f = res.figures[ALL]
            assert f.killed_early == 0 and f.failed == 0, (name, f)
            errors = runtime_errors(res.outcomes)
            assert errors and max(abs(e) for e in errors) <= runtime_bound_s(SPEED), (name, sorted(errors))
            lags = release_lags(res.outcomes)
            assert len(lags) == jobs and min(lags) >= 0 and max(lags) <= SPEED, (name, sorted(lags))
        # The bridge ran inside the task's cluster with the model trained there: it predicted every job.
        assert results["plain"].figures[ALL].predicted == 0
        assert results["bridge"].figures[ALL].predicted == len(results["bridge"].outcomes)
    assert starts == [START, START + round(HOURS * 3600)]
    assert merged["figures"]["plain"][ALL]["jobs"] == sum(w["selection"]["measured"] for w in merged["windows"])

    # On the outer cluster: one array of two tasks, both on NODE, one after the other, exit 0.
    job = r.stdout.split("submitted array job ", 1)[1].split(":", 1)[0]
    rows = [cluster.runner.out(["sacct", "-X", "-n", "-P", "-j", f"{job}_{i}",
                                "--format=State,ExitCode,NodeList,Start,End"]).strip().split("|") for i in (0, 1)]
    assert [row[:3] for row in rows] == [["COMPLETED", "0:0", NODE]] * 2, rows
    assert rows[1][3] >= rows[0][4], rows  # ISO times: task 1 started once task 0 had ended
    # Each task removed its scratch (its clusters, under the job's TMPDIR) once it succeeded.
    assert not [i for i in (0, 1) if task_scratch(dict(os.environ), job, str(i)).exists()]
