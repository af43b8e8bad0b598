"""Fenced checkpoints on the real cluster: a node is cut off from slurmctld (its slurmd
stopped) while its job keeps running; Slurm requeues the job on another node; the new
incarnation resumes from the last checkpoint, and the old one, still running, can never
commit again."""

from __future__ import annotations

import os
import signal
import sys
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
    # Idle is not gone: the next tests and the session's leftover check expect no slurmstepd
    # of the job, the stale incarnation's included.
    assert wait_until(lambda: not c.stepds(jid), 30), c.stepds(jid)


def test_node_failure_requeues_resumes_elsewhere_and_the_node_gets_its_defaults_back(
        cluster: Cluster, tmp_path: Path) -> None:
    """A GPU job with an energy policy dies with its node (slurmd, slurmstepd and the job's
    processes killed); Slurm requeues it and it resumes from its checkpoint on the pool's other
    node; the failed node comes back while the job still runs there, and its devices (left
    capped by the dead incarnation) get their defaults back: slurmctld has the returning slurmd
    end the job it no longer runs there, which runs the agent's epilog (the health check's
    restore covers a node whose slurmd lost its spool; tests/unit/test_energy.py)."""
    from tests.integration.test_energy import devices_of, fake_state, wait_restored

    c = cluster
    steps = 200  # ~100 s of work: the job still runs elsewhere when the failed node is back
    folder = tmp_path / "ckpt"
    folder.mkdir()
    script = tmp_path / "job.py"
    script.write_text(BODY.replace("STEPS_TOTAL", str(steps)))
    jid = submit(c.runner, ["--accel=a100-80gb:1", "--energy=efficiency", "--requeue",
                            "-o", str(tmp_path / "out-%j.txt")], f"exec {sys.executable} {script} {folder}")
    node, _, idx = devices_of(c, jid)
    assert fake_state(c, node, idx[0])["limit_w"] == 240.0  # efficiency's cap on an A100
    first_log = folder / f"log-0-{node}"
    assert wait_until(lambda: first_log.exists() and first_log.read_text().count("commit") >= 3, 40)
    # The node dies: its slurmd, and everything the job runs there (no epilog will come).
    os.kill(slurmd_pid(c, node), signal.SIGKILL)
    for pid in procs_of_job(c, jid):
        os.kill(pid, signal.SIGKILL)
    try:
        # What slurmctld does once SlurmdTimeout has passed without an answer.
        c.runner.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=node-failure-test"])
        assert wait_until(lambda: c.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%T"]).strip()
                          == "PENDING" and "Restarts=1" in c.runner.out(["scontrol", "show", "job", str(jid)]),
                          60), c.runner.out(["scontrol", "show", "job", str(jid)])
        c.runner.run(["scontrol", "update", f"JobId={jid}", "StartTime=now"])  # not the 120 s hold
        assert wait_until(lambda: any(folder.glob("log-1-*")), 60), c.runner.out(["scontrol", "show", "job",
                                                                                  str(jid)])
        assert fake_state(c, node, idx[0])["limit_w"] == 240.0  # the dead job's cap is still there
    finally:
        c.start_slurmd(node, rebooted=True)
        c.runner.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
    wait_restored(c, node, idx, timeout=60)
    # ... while the job runs on: "RUNNING elsewhere" does not hold this node's devices.
    assert c.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%T"]).strip() == "RUNNING"
    assert wait_until(lambda: f"epilog job {jid} on {node}:" in (c.agent_dir / "agent.log").read_text(), 10)
    wait_done(c.runner, [jid], timeout=180)
    row = sacct_jobs(c.runner, [jid], ["JobID", "State", "NodeList"])[jid]
    assert row["State"] == "COMPLETED" and row["NodeList"] != node, row
    second = (folder / f"log-1-{row['NodeList']}").read_text().splitlines()
    committed = [int(x.split()[1]) for x in first_log.read_text().splitlines() if x.startswith("commit")]
    # Nothing lost, nothing done twice (the kill may land between a commit and its log line).
    assert int(second[0].split()[1]) in (max(committed), max(committed) + 1)
    assert second[-1] == f"commit {steps}"
    assert wait_until(lambda: c.nodes()[node].state == "idle", 30), c.nodes()[node]


def procs_of_job(c: Cluster, jid: int) -> list[int]:
    """The job's slurmstepds and everything under them."""
    import subprocess

    out = c.stepds(jid)
    for p in list(out):
        kids = subprocess.run(["pgrep", "-P", str(p)], capture_output=True, text=True, check=False).stdout
        out += [int(k) for k in kids.split()]
    return out
