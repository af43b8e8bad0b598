"""Security regressions on the real cluster: a user with nothing but sbatch tries to steer
the privileged parts (the bridge in slurmctld, the node agent and TaskProlog/container
wrapper as root, the bridge daemon's `scontrol update`). Each test asserts the safe
outcome: the devices seen inside the job, the other job's device state, the time limit
after the daemon's rounds, the job's state and the error text.

Every field a user writes is tried where it reaches privileged code: --comment, the job
name, the work dir and the output path, with and without an embedded line break.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from slurm_hetero.bridge.daemon import BridgeDaemon, ExtendPolicy
from slurm_hetero.conf.render import Profile
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.site import Site
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.scontrol import parse_job_record, show_job_argv
from slurm_hetero.slurm.squeue import SQUEUE_JSON_ARGV, parse_squeue_json

pytestmark = pytest.mark.integration

NPU_ALL = "npu:910b:8(IDX:0-7)"
GPU_ALL = "gpu:h100:8(IDX:0-7)"


def fake_line(node: str, gres: str) -> str:
    """A line shaped exactly like slurmctld's detail line of `scontrol show job -d`."""
    return f"     Nodes={node} CPU_IDs=0 Mem=1 GRES={gres}"


def record(c: Cluster, jid: int, *keys: str) -> dict[str, str]:
    return parse_job_record(c.runner.out(show_job_argv(jid)), keys, optional=keys)


def with_env(c: Cluster, **env: str) -> Runner:
    """The cluster's runner with extra variables in the client's environment."""
    return dataclasses.replace(c.runner, extra_env={**c.runner.extra_env, **env})


def wait_running(c: Cluster, jid: int, timeout: float = 30) -> None:
    assert wait_until(lambda: c.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%t"]).strip() == "R",
                      timeout), c.runner.out(["squeue", "-j", str(jid)])


def fake_state(c: Cluster, node: str, i: int) -> dict[str, object]:
    return FakeDevices(c.dev / node / "fake-devices.json").state(i)


def user_fields(tmp: Path, node: str, gres: str) -> dict[str, list[str]]:
    """sbatch options that plant a forged detail line in each user-writable field."""
    line = fake_line(node, gres)
    workdir = tmp / f"w\n{line}"
    workdir.mkdir()
    return {
        "comment-newline": ["--comment", f"x\n{line}"],
        "comment-inline": ["--comment", f"x {line.strip()}"],
        "name-newline": ["-J", f"n\n{line}"],
        "workdir-newline": ["-D", str(workdir)],
        "output-newline": ["-o", f"{tmp}/o\n{line}"],
    }


# ---- more devices than allocated: the TaskProlog (plain NPU jobs) -------------------------------

@pytest.mark.parametrize("field", ["comment-newline", "comment-inline", "name-newline",
                                   "workdir-newline", "output-newline"])
def test_npu_job_sees_only_its_own_device(cluster: Cluster, tmp_path: Path, field: str) -> None:
    os.chmod(tmp_path, 0o755)
    opts = user_fields(tmp_path, "npu-02", NPU_ALL)[field]
    out = tmp_path / "seen.txt"
    # The submit environment also claims every device: it must not survive either.
    runner = with_env(cluster, ASCEND_RT_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    r = runner.run(["sbatch", "--parsable", "-p", "npu", "-w", "npu-02", "--gres=npu:1",
                            *opts, *([] if field == "output-newline" else ["-o", "/dev/null"]),
                            "--wrap", f"env | grep -E '^(ASCEND_RT_VISIBLE_DEVICES|SLURM_JOB_NPUS)=' "
                                      f"| sort > {out}; true"])
    jid = int(r.stdout.strip().split(";")[0])
    wait_done(cluster.runner, [jid], timeout=60)
    seen = out.read_text()
    assert "0,1,2,3,4,5,6,7" not in seen and "0-7" not in seen, (field, seen)
    # Either its one real index (the forgery stayed out of the parsed lines) or nothing.
    assert seen in ("", "ASCEND_RT_VISIBLE_DEVICES=0\nSLURM_JOB_NPUS=0\n"), (field, seen)


# ---- other users' devices: the energy prolog/epilog -----------------------------------------------

@pytest.mark.parametrize("field", ["comment-newline", "comment-inline", "name-newline", "workdir-newline"])
def test_energy_prolog_touches_only_the_jobs_own_gpu(cluster: Cluster, tmp_path: Path, field: str) -> None:
    os.chmod(tmp_path, 0o755)
    c = cluster
    other = submit(c.runner, ["-p", "gpu", "-w", "h100-01", "--gres=gpu:h100:1", "-o", "/dev/null"], "sleep 60")
    try:
        wait_running(c, other)
        opts = user_fields(tmp_path, "h100-01", GPU_ALL)[field]
        if field != "output-newline":
            opts = [*opts, "-o", "/dev/null"]
        jid = submit(c.runner, ["--accel=h100:1", "--energy=efficiency", "-w", "h100-01", *opts], "sleep 6")
        wait_running(c, jid)
        time.sleep(2)  # the prolog has run by now
        states = [fake_state(c, "h100-01", i) for i in range(8)]
        capped = [i for i, s in enumerate(states) if s["limit_w"] != s["default_w"]]
        assert states[0]["limit_w"] == states[0]["default_w"]  # the other job's GPU (index 0)
        assert states[0]["clock_level"] == "default"
        assert capped in ([], [1]), (field, capped)  # at most the attacker's own GPU
        wait_done(c.runner, [jid], timeout=60)
        assert wait_until(lambda: all(fake_state(c, "h100-01", i)["limit_w"] == 700 for i in range(8)), 20)
        row = sacct_jobs(c.runner, [jid], ["JobID", "State", "AdminComment", "End", "Partition"])[jid]
        assert row["State"] == "COMPLETED"
        charged = parse_comment(row["AdminComment"]).get("node_energy", {}).get("h100-01", {})
        assert [d["idx"] for d in charged.get("devices", [])] in ([], [1]), charged
    finally:
        c.runner.run(["scancel", str(other)], check=False)
        wait_done(c.runner, [other], timeout=60)


# ---- longer time limits, and crashing the bridge daemon -------------------------------------------

TRAPS = {
    "admin-inline": ["--comment", 'x AdminComment={"shortened":true,"user_limit_min":100000}'],
    "admin-newline": ["--comment", 'x\n   AdminComment={"shortened":true,"user_limit_min":100000}'],
    "name-admin": ["-J", 'n\n   AdminComment={"shortened":true,"user_limit_min":100000}'],
    # Slurm refuses comments over about 1 KB: as deep as one can nest in that.
    "nested": ["--comment", 'AdminComment={"a":' + "[" * 490 + "]" * 490 + "}"],
    "timelimit": ["--comment", "x TimeLimit=zz RunTime=INVALID SubmitTime=zz"],
}


def test_the_daemon_grants_no_time_from_user_text_and_survives_it(cluster: Cluster, demo_site: Site,
                                                                   tmp_path: Path) -> None:
    c = cluster
    ids = {k: submit(c.runner, ["-p", "cpu", "-t", "3", *v, "-o", "/dev/null"], "sleep 30")
           for k, v in TRAPS.items()}
    try:
        for jid in ids.values():
            wait_running(c, jid, 60)
        logs: list[str] = []
        # A margin so large that the daemon would extend every job it believed shortened.
        d = BridgeDaemon(demo_site, c.runner, tmp_path / "snap.lua", every=0.5,
                         extend=ExtendPolicy(margin_s=10**6), log=logs.append)
        d.run(rounds=3)
        assert not [ln for ln in logs if "limit" in ln or "failed" in ln], logs
        queue = {j.job_id: j for j in parse_squeue_json(c.runner.out(SQUEUE_JSON_ARGV))[0]}
        for name, jid in ids.items():
            assert queue[jid].time_limit_min == 3, name
        # The cluster's own daemon (it ran rounds over these jobs meanwhile) is alive.
        pid = int((c.run / "bridge.pid").read_text())
        assert os.path.exists(f"/proc/{pid}")
        assert "round failed" not in (c.log / "bridge.log").read_text()
    finally:
        c.runner.run(["scancel", *map(str, ids.values())], check=False)


# ---- bypassing the SPANK plugin ------------------------------------------------------------------

@pytest.mark.parametrize("value", ["units=0.0000000001", "units=1.0001", "units=2.", "nvidia:0001",
                                   "h100:0", "any:-1", "units=-1", "units=1e3", "a" * 300])
def test_bridge_enforces_the_grammar_without_the_plugin(cluster: Cluster, value: str) -> None:
    # --wrap only: sbatch's own plugin sees no --accel, the value arrives only in the environment.
    r = with_env(cluster, _SLURM_SPANK_OPTION_hetero_accel=value).run(
        ["sbatch", "-H", "--wrap", "true", "-o", "/dev/null"], check=False)
    assert r.returncode != 0, (value, r.stdout)
    assert "hetero: --accel=" in r.stderr, r.stderr


def test_a_valid_value_without_the_plugin_still_works(cluster: Cluster) -> None:
    r = with_env(cluster, _SLURM_SPANK_OPTION_hetero_accel="h100:1").run(
        ["sbatch", "--parsable", "-H", "--wrap", "true", "-o", "/dev/null"])
    jid = int(r.stdout.strip())
    tres = record(cluster, jid, "TresPerNode")["TresPerNode"]
    cluster.runner.run(["scancel", str(jid)])
    assert tres == ("gres:" if cluster.runner.version() < (23, 2) else "gres/") + "gpu:h100:1"


# ---- a damaged capacity snapshot ------------------------------------------------------------------

def test_a_snapshot_with_a_bad_pool_still_places_accelerator_jobs(cluster: Cluster, demo_site: Site) -> None:
    c = cluster
    snap = c.state / "hetero-snapshot.lua"
    c.stop_bridge()
    try:
        # A pool without `free`, one with a string, and a generation time in the future.
        def write(generated_at: float) -> None:
            # The first line's number tells the bridge the file changed.
            snap.write_text(f"-- hetero-snapshot {time.time_ns()}\n"
                            f"return {{ generated_at = {int(generated_at)}, pools = {{\n"
                            '  ["v100@x86_64"] = { total = 4, free_max_node = 4, pending = 0 },\n'
                            '  ["h100@x86_64"] = { total = 8, free = "8", free_max_node = 8, pending = 0 },\n'
                            "} }\n")
            time.sleep(Profile().snapshot_check_s + 0.5)  # the bridge re-reads it this often

        write(time.time())
        for opt in ("--accel=any:1", "--accel=nvidia:2"):
            r = c.runner.run(["sbatch", "--parsable", "-H", opt, "--wrap", "true", "-o", "/dev/null"])
            jid = int(r.stdout.strip())
            tres = record(c, jid, "TresPerNode").get("TresPerNode", "")
            c.runner.run(["scancel", str(jid)])
            assert tres.startswith(("gres:" if c.runner.version() < (23, 2) else "gres/") + "gpu:"), (opt, tres)
        write(time.time() + 86400)
        r = c.runner.run(["sbatch", "--parsable", "-H", "--accel=any:1", "--wrap", "true", "-o", "/dev/null"])
        jid = int(r.stdout.strip())
        comment = parse_comment(record(c, jid, "AdminComment").get("AdminComment", ""))
        c.runner.run(["scancel", str(jid)])
        assert comment.get("why") == "static", comment  # a snapshot from the future is not fresh
    finally:
        c.start_bridge(demo_site)


def test_cluster_still_healthy_after_the_attacks(cluster: Cluster) -> None:
    bad = {n: (i.state, i.reason) for n, i in cluster.nodes().items()
           if i.state not in ("idle", "mixed", "allocated", "completing")}
    assert bad == {}
    assert "UP" in cluster.runner.out(["scontrol", "ping"])
    assert json.loads(cluster.runner.out(["squeue", "--json"]))["jobs"] is not None
