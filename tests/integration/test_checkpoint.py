"""Fenced checkpoints on the real cluster: a node is cut off from slurmctld (its slurmd
stopped) while its job keeps running; Slurm requeues the job on another node; the new
incarnation resumes from the last checkpoint, and the old one, still running, can never
commit again."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from slurm_hetero.checkpoint.fence import CheckpointDir
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done

pytestmark = pytest.mark.integration

NODE = "cpu-x86-01"
STEPS = 30

# The job: count to STEPS, one fenced checkpoint per step, resuming where the lineage ends.
BODY = r"""
import os, sys, time
from pathlib import Path
from slurm_hetero.checkpoint import Checkpointer, FencedOut
folder = sys.argv[1]
ck = Checkpointer(folder)
n = int(Path(ck.resume).read_text()) if ck.resume else 0
log = open(os.path.join(folder, "log-%s-%s" % (os.environ.get("SLURM_RESTART_COUNT") or "0",
                                                 os.environ["SLURMD_NODENAME"])), "a")
log.write("resume %d\n" % n); log.flush()
while n < STEPS_TOTAL:
    n += 1
    try:
        with ck.writing() as tmp:
            Path(tmp).write_text(str(n))
    except FencedOut:
        log.write("fenced %d\n" % n); log.flush()
        break
    log.write("commit %d\n" % n); log.flush()
    time.sleep(0.5)
"""


def slurmd_pid(c: Cluster, node: str) -> int:
    d = next(d for d in c.daemons() if d.name == f"slurmd {node}")
    pid = c.pid(d)
    assert pid, d
    return pid


def test_stale_incarnation_is_fenced_after_requeue(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    folder = tmp_path / "ckpt"
    folder.mkdir()
    script = tmp_path / "job.py"
    script.write_text(BODY.replace("STEPS_TOTAL", str(STEPS)))
    jid = submit(c.runner, ["-p", "cpu", "-w", NODE, "--requeue", "-o", str(tmp_path / "out-%j.txt")],
                 f"exec {sys.executable} {script} {folder}")
    first_log = folder / f"log-0-{NODE}"
    assert wait_until(lambda: first_log.exists() and first_log.read_text().count("commit") >= 3, 40), \
        (list(folder.iterdir()), c.runner.out(["scontrol", "show", "job", str(jid)]),
         [p.read_text() for p in tmp_path.glob("out-*")])
    pid = slurmd_pid(c, NODE)
    os.kill(pid, signal.SIGSTOP)  # the node loses contact; its job goes on
    try:
        c.runner.run(["scontrol", "update", f"NodeName={NODE}", "State=DOWN", "Reason=fence-test"])
        # slurmctld requeues the job; it restarts elsewhere as restart 1. (A requeued job
        # waits 120 s by Slurm's rule and this one was pinned to NODE: release it now.)
        assert wait_until(lambda: "Restarts=1" in c.runner.out(["scontrol", "show", "job", str(jid)]), 30)
        c.runner.run(["scontrol", "update", f"JobId={jid}", "ReqNodeList=cpu-x86-02", "StartTime=now"])
        assert wait_until(lambda: any(folder.glob("log-1-*")), 60), \
            c.runner.out(["scontrol", "show", "job", str(jid)])
        second_log = next(folder.glob("log-1-*"))
        assert second_log.name != f"log-1-{NODE}"
        # The old incarnation, still running on the cut-off node, is refused at its next commit.
        assert wait_until(lambda: "fenced" in first_log.read_text(), 20), first_log.read_text()
        wait_done(c.runner, [jid], timeout=120)
    finally:
        os.kill(pid, signal.SIGCONT)
        c.runner.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"], check=False)
    first, second = first_log.read_text().splitlines(), second_log.read_text().splitlines()
    committed_first = [int(x.split()[1]) for x in first if x.startswith("commit")]
    resumed = int(second[0].split()[1])
    # The new incarnation resumed from a checkpoint the first one had committed ...
    assert 3 <= resumed <= max(committed_first)
    # ... and the lineage ends with its own work, whatever the stale one did meanwhile.
    assert second[-1] == f"commit {STEPS}"
    latest = CheckpointDir(str(folder)).latest()
    assert latest and Path(latest).read_text() == str(STEPS) and "ckpt-00000001-" in latest
    row = sacct_jobs(c.runner, [jid], ["JobID", "State", "End", "Partition"])[jid]
    assert row["State"] == "COMPLETED", row
    assert wait_until(lambda: c.nodes()[NODE].state in ("idle", "mixed"), 60), c.nodes()[NODE]
    time.sleep(0.5)
