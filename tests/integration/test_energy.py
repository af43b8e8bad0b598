"""Energy policies on the real cluster: the node agent as Slurm's Prolog/Epilog, with the
file-backed fake device layer selected for the emulated GPU/NPU nodes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import cmdline, command_name, wait_until
from slurm_hetero.energy import agent
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.scontrol import parse_job_devices, parse_job_record, show_job_argv

pytestmark = pytest.mark.integration

DEFAULTS = {"clock_level": "default", "npu_mode": "normal"}


def devices_of(c: Cluster, jid: int) -> tuple[str, str, list[int]]:
    """(node, gres name, indices) of a running job, once the prolog has run."""
    deadline = time.monotonic() + 20
    while True:
        out = c.runner.out(show_job_argv(jid, detail=True))
        rec = parse_job_record(out, ["NodeList", "JobState"])
        node = rec["NodeList"]
        if rec["JobState"] == "RUNNING" and (c.agent_dir / node / f"job-{jid}.json").exists():
            idx = parse_job_devices(out, node)
            kind = next(iter(idx))
            return node, kind, idx[kind]
        assert time.monotonic() < deadline, out
        time.sleep(0.3)


def batch_runs(c: Cluster, jid: int, command: str) -> bool:
    """Whether a process named `command` runs under the job's batch step."""
    todo = [p for p in c.stepds(jid) if f"[{jid}.batch]" in cmdline(p)]
    while todo:
        pid = todo.pop()
        if command_name(pid) == command:
            return True
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
        todo += [int(k) for k in kids.split()]
    return False


def fake_state(c: Cluster, node: str, i: int) -> dict[str, Any]:
    return FakeDevices(c.dev / node / "fake-devices.json").state(i)


def wait_restored(c: Cluster, node: str, idx: list[int], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = [fake_state(c, node, i) for i in idx]
        if all(s["limit_w"] == s["default_w"] and all(s[k] == v for k, v in DEFAULTS.items())
               for s in states):
            return
        assert time.monotonic() < deadline, states
        time.sleep(0.3)


@pytest.mark.parametrize(("options", "applied"), [
    (["--accel=h100:2", "--energy=efficiency"], {"limit_w": 420.0, "clock_level": "medium"}),
    (["--accel=h100:1", "--energy=performance"], {"limit_w": 700.0, "clock_level": "high"}),
    (["--accel=a100-80gb:1", "--energy=balanced"], {"limit_w": 340.0, "clock_level": "default"}),
    # no history yet: balanced
    (["--accel=h100:1", "--energy=auto"], {"limit_w": 595.0, "clock_level": "default"}),
    # npu-smi stand-in: no energy counter; `node sample` meters it
    (["--accel=cann:2", "--energy=efficiency"], {"npu_mode": "low"}),
])
def test_policy_applied_metered_and_restored(cluster: Cluster, options: list[str],
                                             applied: dict[str, Any]) -> None:
    name = "policy-" + options[1].split("=")[1] + options[0].split("=")[1].replace(":", "-")
    jid = submit(cluster.runner, [*options, "-J", name, "-o", "/dev/null"], "sleep 4")
    node, _, idx = devices_of(cluster, jid)
    for i in idx:
        state = fake_state(cluster, node, i)
        assert {k: state[k] for k in applied} == applied, (node, i, state)
    wait_done(cluster.runner, [jid])
    wait_restored(cluster, node, idx)
    row = sacct_jobs(cluster.runner, [jid], ["JobID", "State", "AdminComment", "End", "Partition"],
                     require=["AdminComment"])[jid]
    comment = parse_comment(row["AdminComment"])
    # The health check ships the epilog's figures (every node within its 20 s cycle here).
    deadline = time.monotonic() + 60
    while "node_energy" not in comment and time.monotonic() < deadline:
        time.sleep(0.5)
        comment = parse_comment(sacct_jobs(cluster.runner, [jid], ["JobID", "AdminComment", "End",
                                                                   "Partition"])[jid]["AdminComment"])
    assert comment["hetero"] == 1 and comment["energy"] == options[1].split("=")[1]
    mine = comment["node_energy"][node]
    assert [d["idx"] for d in mine["devices"]] == idx
    assert mine["energy_j"] > 0 and mine["power_w"] > 0 and 0 <= mine["util"] <= 1
    if "cann" in options[0]:
        # The fake NPU draws 400 W x 0.8 load; the sampler's counters saw most of the run.
        assert not fake_state(cluster, node, idx[0])["counter"]
        assert all(d["coverage"] > 0.8 and d["util"] == pytest.approx(0.8, abs=0.01) and
                   d["power_w"] == pytest.approx(320, rel=0.1) for d in mine["devices"]), mine
    if "auto" in options[1]:
        assert mine["policy"] == "balanced" and mine["auto_rule"] == "0 past runs < 2: balanced"


def test_auto_picks_efficiency_for_a_job_that_kept_its_gpus_idle(cluster: Cluster) -> None:
    """Two runs of `prep` at 20% GPU use (the fake's load), then `auto` chooses efficiency."""
    for node in ("a100-01", "a100-02"):
        fake = FakeDevices(cluster.dev / node / "fake-devices.json")
        for i in range(4):
            fake._update(i, load=0.2)
    try:
        for _ in range(2):
            jid = submit(cluster.runner, ["--accel=a100-80gb:1", "--energy=balanced", "-J", "prep",
                                          "-o", "/dev/null"], "sleep 1")
            wait_done(cluster.runner, [jid])
        jid = submit(cluster.runner, ["--accel=a100-80gb:1", "--energy=auto", "-J", "prep",
                                      "-o", "/dev/null"], "sleep 3")
        node, _, idx = devices_of(cluster, jid)
        state = fake_state(cluster, node, idx[0])
        assert (state["clock_level"], state["limit_w"]) == ("medium", 240.0)  # efficiency
        wait_done(cluster.runner, [jid])
        wait_restored(cluster, node, idx)
    finally:
        for node in ("a100-01", "a100-02"):
            fake = FakeDevices(cluster.dev / node / "fake-devices.json")
            for i in range(4):
                fake._update(i, load=0.8)


def test_the_cap_follows_the_device_file_not_the_number(cluster: Cluster) -> None:
    """Issue 35 on the real Slurm: h100-01's fake NVML lists its GPUs in reverse minor order,
    and the GPU gres.conf calls /dev/nvidia7 is missing (that NVML entry has minor 99). The
    job gets all 8 GRES indices from slurmd; 0-6 are capped on the GPUs with those minors,
    7 is refused and reported, NVML device 0 is nobody's, and the job completes."""
    node = "h100-01"
    fake = FakeDevices(cluster.dev / node / "fake-devices.json")
    minors = [99, 6, 5, 4, 3, 2, 1, 0]  # NVML device b has minor minors[b]
    for b, m in enumerate(minors):
        fake._update(b, minor=m)
    try:
        jid = submit(cluster.runner, ["--accel=h100:8", "--energy=efficiency", "-w", node, "-o", "/dev/null"],
                     "sleep 2")
        got, _, idx = devices_of(cluster, jid)
        assert (got, idx) == (node, list(range(8)))
        # By number this would read [420] * 7 + [700].
        assert [fake.state(b)["limit_w"] for b in range(8)] == [700.0] + [420.0] * 7
        wait_done(cluster.runner, [jid])
        wait_restored(cluster, node, list(range(8)))
        assert sacct_jobs(cluster.runner, [jid], ["JobID", "State"])[jid]["State"] == "COMPLETED"
        log = (cluster.agent_dir / "agent.log").read_text()
        assert (f"WARNING job {jid}: gpu7 not matched to a fake device: {cluster.dev}/{node}/nvidia7 is "
                "minor:7, which no fake device is") in log, log[-2000:]
        refused = json.loads((cluster.agent_dir / node / "refused.json").read_text())
        assert refused["gpu7"]["job"] == str(jid)
    finally:
        for b in range(8):
            fake._update(b, minor=b)


def test_every_node_of_a_multinode_job_keeps_its_figures(cluster: Cluster) -> None:
    """Both nodes ship their figures, each rewriting the whole admin comment; an entry the
    other node's write dropped is written again at the next round."""
    jids = [submit(cluster.runner, ["--accel=a100-80gb:1", "-N", "2", "--energy=balanced",
                                    "-o", "/dev/null"], "sleep 2") for _ in range(3)]
    wait_done(cluster.runner, jids)
    deadline = time.monotonic() + 90
    while True:
        rows = sacct_jobs(cluster.runner, jids, ["JobID", "AdminComment", "NodeList", "End"],
                          require=["AdminComment"])
        entries = {j: sorted(parse_comment(rows[j]["AdminComment"]).get("node_energy", {})) for j in jids}
        if all(e == ["a100-01", "a100-02"] for e in entries.values()):
            break
        assert time.monotonic() < deadline, entries
        time.sleep(1)
    assert all(parse_comment(rows[j]["AdminComment"])["energy"] == "balanced" for j in jids)


def test_restored_after_scancel(cluster: Cluster) -> None:
    jid = submit(cluster.runner, ["--accel=h100:1", "--energy=efficiency", "-o", "/dev/null"], "sleep 120")
    node, _, idx = devices_of(cluster, jid)
    assert fake_state(cluster, node, idx[0])["limit_w"] == 420.0
    # A cancel landing while the batch shell starts can wait out KillWait (30 s): once its
    # `sleep` runs, the shell has started.
    assert wait_until(lambda: batch_runs(cluster, jid, "sleep"), 30), cluster.stepds(jid)
    cluster.runner.run(["scancel", str(jid)])
    wait_restored(cluster, node, idx, timeout=45)


def test_restored_after_slurmstepd_is_killed(cluster: Cluster) -> None:
    jid = submit(cluster.runner, ["--accel=a100-80gb:2", "--energy=efficiency", "-o", "/dev/null"],
                 "sleep 300")
    try:
        node, _, idx = devices_of(cluster, jid)
        assert fake_state(cluster, node, idx[0])["limit_w"] == 240.0
        def stepds() -> list[int]:
            return cluster.stepds(jid)

        # The prolog runs at allocation; the batch step's slurmstepd follows (later on a busy machine).
        assert wait_until(lambda: bool(stepds()), 30), "no slurmstepd for the job"
        pids = stepds()
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)
        # slurmctld learns of the loss only at the node's next full registration (minutes), and
        # still calls the job RUNNING. Slurm's HealthCheckProgram (the rendered hetero-healthcheck,
        # every node in turn within 20 s here) runs the agent's restore: the batch host of a job
        # past its launch grace has no slurmstepd, so its devices get their defaults back.
        wait_restored(cluster, node, idx, timeout=agent.LAUNCH_GRACE_S + 45)
        assert cluster.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%T"]).strip() == "RUNNING"
        # the agent logs the restore after it has set the devices (CI once read the log between)
        line = f"restore on {node}: gpu{idx[0]} (job {jid}), gpu{idx[1]} (job {jid})"
        assert wait_until(lambda: line in (cluster.agent_dir / "agent.log").read_text(), 10), line
        r = CliRunner().invoke(main, ["node", "restore", "--node", node],
                               env={"SLURM_CONF": str(cluster.conf)})
        assert r.exit_code == 0 and r.output.startswith(f"restored 0 device(s) on {node}: none needed"), r.output
    finally:  # a 300 s job left behind holds a100-01 from the tests after this one
        cluster.runner.run(["scancel", str(jid)], check=False)


def test_array_tasks_and_het_jobs_get_their_policy(cluster: Cluster) -> None:
    """An array task's record starts `JobId=N ArrayJobId=A ArrayTaskId=T`, and `scontrol
    show job` of an array's id or a het job's leader prints several records (CI once: every
    array task's Prolog failed; the leader's would have read as forged)."""
    arr = submit(cluster.runner, ["--array=0-1", "--accel=a100-80gb:1", "--energy=efficiency",
                                  "-o", "/dev/null"], "sleep 3")
    # SPANK options are the whole submission's (each component would get --accel): plain GRES.
    het = submit(cluster.runner, ["-p", "gpu", "--gres=gpu:a100-80gb:1", "-o", "/dev/null",
                                  ":", "-p", "cpu"], "sleep 3")
    wait_done(cluster.runner, [arr, het])
    ids: dict[str, str] = {}
    tasks: list[str] = []

    def both_tasks_booked() -> bool:  # slurmdbd books each task's own record after it starts
        raw = cluster.runner.out(["sacct", "-X", "-n", "-P", "-j", f"{arr},{het}", "-o", "JobIDRaw,JobID"])
        ids.clear()
        ids.update((a, b) for a, b in (line.split("|", 1) for line in raw.split()))
        tasks[:] = [j for j, shown in ids.items() if shown.startswith(f"{arr}_")]
        return len(tasks) == 2

    assert wait_until(both_tasks_booked, 30, 0.5), ids
    assert str(arr) in tasks, ids  # the last task to start keeps the array's id
    log = (cluster.agent_dir / "agent.log").read_text()
    for j in tasks:
        assert re.search(rf"INFO prolog job {j} on a100-0\d: policy efficiency, 1 devices", log), (j, log)
    assert re.search(rf"INFO prolog job {het} on a100-0\d: policy \w+, 1 devices", log), log
    assert not [line for line in log.splitlines()
                if "ERROR" in line and any(f"job {j} " in line for j in ids)], log


def test_agent_log_shows_prolog_and_epilog(cluster: Cluster) -> None:
    text = (cluster.agent_dir / "agent.log").read_text()
    assert "INFO prolog job" in text and "INFO epilog job" in text
    assert "ERROR" not in text, text


def test_with_a_shared_spool_a_multinode_job_has_one_writer(cluster: Cluster) -> None:
    """node_agent.shared_spool: both nodes leave their figures in the shared folder, the
    job's first node writes them in one go; nothing goes through the nodes' own spools."""
    conf = cluster.etc / "hetero-agent.json"
    original = conf.read_text()
    cluster.shared_spool.mkdir(mode=0o755, exist_ok=True)
    conf.write_text(json.dumps({**json.loads(original), "shared_spool": str(cluster.shared_spool)}))
    try:
        jids = [submit(cluster.runner, ["--accel=a100-80gb:1", "-N", "2", "--energy=balanced",
                                        "-o", "/dev/null"], "sleep 1") for _ in range(2)]
        wait_done(cluster.runner, jids)
        # Both nodes' epilogs leave a file; the writer waits for both.
        assert wait_until(lambda: all(len(list((cluster.shared_spool / str(j)).glob("*.json"))) == 2
                                      for j in jids), 30)
        local = [p.name for p in cluster.agent_dir.glob("*/spool/*.json")]
        assert not any(p.removesuffix(".json") in map(str, jids) for p in local), local
        deadline = time.monotonic() + 60
        while True:
            cluster.ship_energy()
            rows = sacct_jobs(cluster.runner, jids, ["JobID", "AdminComment", "End"], require=["AdminComment"])
            got = {j: sorted(parse_comment(rows[j]["AdminComment"]).get("node_energy", {})) for j in jids}
            if all(g == ["a100-01", "a100-02"] for g in got.values()):
                break
            assert time.monotonic() < deadline, got
            time.sleep(1)
        cluster.ship_energy()  # reads them back: the jobs' folders go
        assert not any((cluster.shared_spool / str(j)).exists() for j in jids)
        assert all(parse_comment(rows[j]["AdminComment"])["energy"] == "balanced" for j in jids)
    finally:
        conf.write_text(original)
