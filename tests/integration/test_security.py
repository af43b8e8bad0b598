"""Security regressions on the real cluster: a user with nothing but sbatch tries to steer
the privileged parts (the bridge in slurmctld, the node agent and TaskProlog/container
wrapper as root, the bridge daemon's `scontrol update`, the accounting readers). Each test
asserts the safe outcome: the devices seen inside the job, the other job's device state,
the time limit after the daemon's rounds, the job's state and the error text.

The attacker is what it would be on a real cluster: an unprivileged local user
(`slurm_user`, conftest.py), whose own jobs must also just run (TaskProlog, bridge options,
containers). Every field a user writes is tried where it reaches privileged code:
--comment, the job name, the work dir and the output path, with and without an embedded
line break, and as bytes that are not UTF-8.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from slurm_hetero.bridge.daemon import BridgeDaemon, ExtendPolicy
from slurm_hetero.cli import main
from slurm_hetero.conf.render import Profile
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.monitor.cluster import ClusterExporter, snapshot_generated_at
from slurm_hetero.site import Site
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import SACCT_DELIMITER
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import FIELDS, epoch_runner, sacct_argv
from slurm_hetero.slurm.scontrol import parse_job_record, show_job_argv
from slurm_hetero.slurm.squeue import parse_squeue_json, squeue_json_argv
from tests.integration.conftest import SlurmUser
from tests.predict_fixture import export_model

pytestmark = pytest.mark.integration

NPU_ALL = "npu:910b:8(IDX:0-7)"
GPU_ALL = "gpu:h100:8(IDX:0-7)"


def fake_line(node: str, gres: str) -> str:
    """A line shaped exactly like slurmctld's detail line of `scontrol show job -d`."""
    return f"     Nodes={node} CPU_IDs=0 Mem=1 GRES={gres}"


def record(c: Cluster, jid: int, *keys: str) -> dict[str, str]:
    return parse_job_record(c.runner.out(show_job_argv(jid)), keys, optional=keys)


def with_env(runner: Runner, **env: str) -> Runner:
    """The runner with extra variables in the client's environment."""
    return dataclasses.replace(runner, extra_env={**runner.extra_env, **env})


def wait_running(c: Cluster, jid: int, timeout: float = 30) -> None:
    assert wait_until(lambda: c.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%t"]).strip() == "R",
                      timeout), c.runner.out(["squeue", "-j", str(jid)])


def fake_state(c: Cluster, node: str, i: int) -> dict[str, object]:
    return FakeDevices(c.dev / node / "fake-devices.json").state(i)


def user_fields(user: SlurmUser, tmp: Path, node: str, gres: str) -> dict[str, list[str]]:
    """sbatch options that plant a forged detail line in each user-writable field."""
    line = fake_line(node, gres)
    workdir = tmp / f"w\n{line}"
    workdir.mkdir()
    os.chown(workdir, user.uid, user.gid)
    return {
        "comment-newline": ["--comment", f"x\n{line}"],
        "comment-inline": ["--comment", f"x {line.strip()}"],
        "name-newline": ["-J", f"n\n{line}"],
        "workdir-newline": ["-D", str(workdir)],
        "output-newline": ["-o", f"{tmp}/o\n{line}"],
    }


# ---- an unprivileged user's own jobs run ---------------------------------------------------------

def test_unprivileged_plain_and_bridge_jobs_run(cluster: Cluster, slurm_user: SlurmUser) -> None:
    """The TaskProlog runs as the job's user for every job: its interpreter, its code and
    the cluster's files must be the user's to run and read."""
    u, d = slurm_user, slurm_user.folder("own")
    plain = submit(u.runner, ["-o", f"{d}/plain.out"], "id -un; echo PLAIN-RAN")
    accel = submit(u.runner, ["--accel=cann:1", "--energy=efficiency", "-o", f"{d}/accel.out"],
                   "id -un; env | grep -E '^(ASCEND_RT_VISIBLE_DEVICES|SLURM_JOB_NPUS)=' | sort")
    wait_done(cluster.runner, [plain, accel], timeout=90)
    rows = sacct_jobs(cluster.runner, [plain, accel], ["JobID", "User", "State", "ExitCode", "End", "Partition"])
    outputs = {j: (d / f"{name}.out").read_text() for j, name in ((plain, "plain"), (accel, "accel"))}
    for jid in (plain, accel):
        assert (rows[jid]["User"], rows[jid]["State"], rows[jid]["ExitCode"]) == (u.name, "COMPLETED", "0:0"), \
            (rows[jid], outputs[jid])
    assert outputs[plain] == f"{u.name}\nPLAIN-RAN\n"
    assert re.fullmatch(rf"{u.name}\nASCEND_RT_VISIBLE_DEVICES=(\d)\nSLURM_JOB_NPUS=\1\n", outputs[accel]), \
        outputs[accel]


def test_unprivileged_container_job_runs(cluster: Cluster, slurm_user: SlurmUser, images: Path) -> None:
    """runc runs as the job's user (rootless), its state in the user's own runtime folder."""
    u, d = slurm_user, slurm_user.folder("container")
    jid = submit(u.runner, ["--image=busybox:1.35", "-w", "cpu-x86-02", "-o", f"{d}/%j.out"],
                 "id -u; cat /etc/hetero-variant; echo USER-CODE-RAN")
    wait_done(cluster.runner, [jid], timeout=90)
    row = sacct_jobs(cluster.runner, [jid], ["JobID", "User", "State", "ExitCode", "End", "Partition"])[jid]
    output = (d / f"{jid}.out").read_text()
    assert (row["User"], row["State"], row["ExitCode"]) == (u.name, "COMPLETED", "0:0"), (row, output)
    # root inside: the user's own uid outside (a user namespace of one id).
    assert output.splitlines()[0] == "0" and output.splitlines()[1].startswith("busybox:1.35 "), output
    assert output.endswith("USER-CODE-RAN\n"), output
    for path in (cluster.runc_root(u.uid).parent, cluster.runc_root(u.uid)):
        st = path.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode) & 0o077) == (u.uid, 0), path  # the user's alone


def test_cluster_files_users_need_are_theirs_to_read_not_to_change(cluster: Cluster) -> None:
    """What jobs read is open to all and root's alone to change; the secrets stay root's."""
    c = cluster
    open_to_all = [c.workdir, c.etc, c.etc / "slurm.conf", c.etc / "plugstack.conf", c.lib,
                   c.lib / "slurm_hetero" / "containers" / "oci_run.py", c.run, c.run / "user"]
    for path in open_to_all:
        st = path.stat()
        assert (st.st_uid, st.st_mode & 0o005, st.st_mode & 0o022) == (0, 0o005 if path.is_dir() else 0o004, 0), \
            path
    for secret in (c.etc / "slurmdbd.conf", c.munge / "munge.key", c.db):
        st = secret.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode) & 0o077) == (0, 0), secret
    # Nothing root wrote in the cluster's folders is writable by others (the users' runtime
    # folders and their jobs' files in the spool are theirs).
    writable = [str(p) for top in (c.etc, c.lib, c.state, c.dev, c.log) for p in [top, *top.rglob("*")]
                if not p.is_symlink() and not p.is_char_device() and p.stat().st_mode & 0o002]
    assert writable == []


# ---- more devices than allocated: the TaskProlog (plain NPU jobs) -------------------------------

@pytest.mark.parametrize("field", ["comment-newline", "comment-inline", "name-newline",
                                   "workdir-newline", "output-newline"])
def test_npu_job_sees_only_its_own_device(cluster: Cluster, slurm_user: SlurmUser, field: str) -> None:
    tmp = slurm_user.folder()
    opts = user_fields(slurm_user, tmp, "npu-02", NPU_ALL)[field]
    out = tmp / "seen.txt"
    # The submit environment also claims every device: it must not survive either.
    runner = with_env(slurm_user.runner, ASCEND_RT_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
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
def test_energy_prolog_touches_only_the_jobs_own_gpu(cluster: Cluster, slurm_user: SlurmUser,
                                                     field: str) -> None:
    c = cluster
    other = submit(c.runner, ["-p", "gpu", "-w", "h100-01", "--gres=gpu:h100:1", "-o", "/dev/null"], "sleep 60")
    try:
        wait_running(c, other)
        opts = user_fields(slurm_user, slurm_user.folder(), "h100-01", GPU_ALL)[field]
        if field != "output-newline":
            opts = [*opts, "-o", "/dev/null"]
        jid = submit(slurm_user.runner, ["--accel=h100:1", "--energy=efficiency", "-w", "h100-01", *opts],
                     "sleep 6")
        wait_running(c, jid)
        # The agent logs each prolog's end (or its failure) once it has touched the devices.
        assert wait_until(lambda: f"prolog job {jid} on h100-01" in (c.agent_dir / "agent.log").read_text(),
                          30), (c.agent_dir / "agent.log").read_text()[-2000:]
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
                                                                   slurm_user: SlurmUser, tmp_path: Path) -> None:
    c = cluster
    ids = {k: submit(slurm_user.runner, ["-p", "cpu", "-t", "3", *v, "-o", "/dev/null"], "sleep 30")
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
        queue = {j.job_id: j for j in parse_squeue_json(c.runner.out(squeue_json_argv()))[0]}
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
def test_bridge_enforces_the_grammar_without_the_plugin(cluster: Cluster, slurm_user: SlurmUser,
                                                        value: str) -> None:
    # --wrap only: sbatch's own plugin sees no --accel, the value arrives only in the environment.
    r = with_env(slurm_user.runner, _SLURM_SPANK_OPTION_hetero_accel=value).run(
        ["sbatch", "-H", "--wrap", "true", "-o", "/dev/null"], check=False)
    assert r.returncode != 0, (value, r.stdout)
    assert "hetero: --accel=" in r.stderr, r.stderr


def test_a_valid_value_without_the_plugin_still_works(cluster: Cluster, slurm_user: SlurmUser) -> None:
    r = with_env(slurm_user.runner, _SLURM_SPANK_OPTION_hetero_accel="h100:1").run(
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
            # A time, not a condition: the bridge in slurmctld re-reads the file only when a job
            # comes and at most every snapshot_check_s, and says nothing when it takes a new one.
            time.sleep(Profile().snapshot_check_s + 0.5)

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


# ---- text that is not UTF-8 -----------------------------------------------------------------------

MARGIN = 20  # seconds: the daemon extends a shortened limit when less than this is left
NOT_UTF8 = {"invalid": b"\xff\xfe", "surrogate": b"a\xed\xa0\x80b", "overlong": b"\xc0\xaf",
            "truncated": b"abc\xe2\x82"}


@pytest.fixture
def predicting(cluster: Cluster, demo_site: Site, tmp_path: Path) -> Iterator[Cluster]:
    """A runtime model compiled into the bridge (root's jobs are predicted to be short) and
    the cluster's daemon extending limits within MARGIN of their end."""
    c = cluster
    c.load_model(demo_site, export_model(tmp_path / "predict.lua"))
    c.stop_bridge()
    c.start_bridge(demo_site, margin=MARGIN)
    try:
        def predicted() -> bool:  # slurmctld reads the new job_submit.lua at a submission
            jid = submit(c.runner, ["-H", "-o", "/dev/null"], "true")
            comment = record(c, jid, "AdminComment").get("AdminComment", "")
            c.runner.run(["scancel", str(jid)], check=False)
            return "pred" in parse_comment(comment)

        assert wait_until(predicted, 20, 0.5)
        yield c
    finally:
        c.load_model(demo_site, None)
        c.stop_bridge()
        c.start_bridge(demo_site)


def _as_user(user: SlurmUser, argv: list[str | bytes], c: Cluster) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(user.command(argv), env=c.runner.env(), capture_output=True, timeout=30, check=False)


def test_text_that_is_not_utf8_costs_the_daemon_nothing(predicting: Cluster, demo_site: Site,
                                                        slurm_user: SlurmUser) -> None:
    """A user's jobs whose name, comment, work dir and output path are not UTF-8 (22.05's
    `squeue --json` passes them through raw) sit in the queue while root's job outlives the
    limit the model shortened: the daemon must go on (heartbeat, extension), and the job
    page and the cluster exporter must read the queue."""
    c, u = predicting, slurm_user
    tmp = os.fsencode(u.folder("bytes"))
    log_from = (c.log / "bridge.log").stat().st_size
    user_jobs: list[int] = []
    root: int | None = None
    problems: list[str] = []
    try:
        for key, bad in NOT_UTF8.items():
            workdir = tmp + b"/w-" + bad
            os.mkdir(workdir)
            os.chown(workdir, u.uid, u.gid)
            r = _as_user(u, ["sbatch", "--parsable", "-H", "-p", "cpu", "-J", bad, "--comment", b"c-" + bad,
                             "-D", workdir, "-o", tmp + b"/o-" + bad, "--wrap", "true"], c)
            assert r.returncode == 0, (key, r.stderr)
            user_jobs.append(int(r.stdout.split(b";")[0]))
        # A name set later, on the user's own pending job.
        r = _as_user(u, ["sbatch", "--parsable", "-H", "-p", "cpu", "-J", "plain", "-o", "/dev/null",
                         "--wrap", "true"], c)
        renamed = int(r.stdout.split(b";")[0])
        user_jobs.append(renamed)
        r = _as_user(u, ["scontrol", "update", f"jobid={renamed}", b"name=" + NOT_UTF8["surrogate"]], c)
        assert r.returncode == 0, r.stderr

        root = submit(c.runner, ["-t", "5", "-J", "outlive", "-o", "/dev/null"], "sleep 70")
        assert wait_until(lambda: record(c, root, "JobState").get("JobState") == "RUNNING", 30)
        rec = record(c, root, "TimeLimit", "AdminComment")
        decision = parse_comment(rec.get("AdminComment", ""))
        assert decision.get("shortened") is True and decision.get("user_limit_min") == 5, rec
        if rec["TimeLimit"] != "00:01:00":
            # After a session of longer root jobs the model's online history may predict 2
            # minutes: Slurm's 1-minute floor keeps the test short (the record still says
            # shortened, user limit 5: the daemon must extend it all the same).
            c.runner.run(["scontrol", "update", f"JobId={root}", "TimeLimit=1"])

        def check_readers(when: str) -> None:
            page = CliRunner().invoke(main, ["job", str(root), "--json"], env={"SLURM_CONF": str(c.conf)})
            if page.exit_code != 0:
                problems.append(f"{when}: `slurm-hetero job {root}` exited {page.exit_code}: "
                                f"{type(page.exception).__name__}: {page.exception}")
            try:
                ClusterExporter(demo_site, c.runner, c.state / "hetero-snapshot.lua").round()
            except Exception as e:
                problems.append(f"{when}: the cluster exporter's round failed: {type(e).__name__}: {e}")

        check_readers("while it runs")
        # Watch the heartbeat until the job ends: the snapshot must stay fresh throughout.
        snap = c.state / "hetero-snapshot.lua"
        oldest = 0.0
        deadline = time.monotonic() + 150
        while record(c, root, "JobState").get("JobState") in ("PENDING", "RUNNING", "COMPLETING"):
            assert time.monotonic() < deadline, "root's job did not end"
            oldest = max(oldest, time.time() - (snapshot_generated_at(snap) or 0.0))
            time.sleep(1)
        if oldest > 10:
            problems.append(f"the daemon's heartbeat went {oldest:.0f} s without a snapshot")
        row = sacct_jobs(c.runner, [root], ["JobID", "State", "Elapsed", "End", "Partition"])[root]
        if row["State"] != "COMPLETED":
            problems.append(f"root's job ended {row['State']} after {row['Elapsed']} (limit not extended)")
        check_readers("after it ended")
        log = (c.log / "bridge.log").read_bytes()[log_from:].decode(errors="replace")
        if f"job {root}: limit 1 -> " not in log:
            problems.append(f"the daemon did not extend job {root}")
        bad_rounds = [ln for ln in log.splitlines() if "round skipped" in ln or "round failed" in ln]
        if bad_rounds:
            problems.append(f"{len(bad_rounds)} rounds skipped or failed, e.g. {bad_rounds[0]}")
        assert problems == [], "\n".join(problems)
    finally:
        _make_readable(c, user_jobs)
        if root is not None:
            c.runner.run(["scancel", str(root)], check=False)


def _make_readable(c: Cluster, ids: list[int]) -> None:
    """The user's jobs with plain text again, then cancelled: an ended job stays in
    `squeue --json` for MinJobAge (300 s), where its bytes would reach every later test."""
    for jid in ids:
        c.runner.run(["scontrol", "update", f"jobid={jid}", "name=x", "comment=x", "workdir=/tmp",
                      "stdout=/dev/null"], check=False)
    if ids:
        c.runner.run(["scancel", *map(str, ids)], check=False)


# ---- accounting rows made of a job name -----------------------------------------------------------

def _forged_rows(c: Cluster, jid: int, since: float) -> dict[int, str]:
    """sacct rows exactly as the readers ask for them (`sacct_argv`), imitating root's job
    `jid` with 8 GPUs for an hour: one under its own id (a replacement), one under a new id."""
    text = epoch_runner(c.runner).out(sacct_argv(since - 60, time.time() + 60))
    line = next(ln for ln in text.split("\n") if ln.split(SACCT_DELIMITER)[0] == str(jid))
    real = dict(zip(FIELDS, line.split(SACCT_DELIMITER, len(FIELDS) - 1), strict=True))
    start = int(float(real["Start"]))
    fake = {**real, "ElapsedRaw": "3600", "End": str(start + 3600), "NCPUS": "8",
            "AllocTRES": re.sub(r"(gres/gpu(?::[\w-]+)?)=\d+", r"\1=8", real["AllocTRES"])}
    assert fake["AllocTRES"] != real["AllocTRES"], real
    new = jid + 100000
    return {jid: SACCT_DELIMITER.join(fake[f] for f in FIELDS),
            new: SACCT_DELIMITER.join({**fake, "JobIDRaw": str(new), "JobID": str(new)}[f] for f in FIELDS)}


def test_a_job_name_cannot_forge_accounting_rows(cluster: Cluster, slurm_user: SlurmUser, tmp_path: Path) -> None:
    c, u = cluster, slurm_user
    since = time.time() - 2
    real = submit(c.runner, ["-p", "gpu", "--gres=gpu:h100:1", "-J", "real", "-o", "/dev/null"], "sleep 2")
    wait_done(c.runner, [real], timeout=60)
    sacct_jobs(c.runner, [real], ["JobID", "State", "End", "Partition"])
    forged = _forged_rows(c, real, since)
    mine = [submit(u.runner, ["-p", "cpu", "-J", f"n\n{row}", "-o", "/dev/null"], "true") for row in forged.values()]
    wait_done(c.runner, mine, timeout=60)
    sacct_jobs(c.runner, mine, ["JobID", "State", "End", "Partition"])
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    env = {"SLURM_CONF": str(c.conf)}

    # The job table (model ingest): one row per real job, root's as it ran.
    table = tmp_path / "jobs.parquet"
    r = CliRunner().invoke(main, ["model", "ingest", "-o", str(table), "--sacct", "--since", when,
                                  "--slurm-conf", str(c.conf)], env=env)
    assert r.exit_code == 0, r.output
    jobs = pd.read_parquet(table)
    ids = [str(i) for i in jobs["job_id"]]
    assert ids.count(str(real)) == 1, jobs[jobs["job_id"].astype(str) == str(real)].to_dict("records")
    assert not set(map(str, forged)) - {str(real)} & set(ids), "a row made of a job name"
    assert {str(j) for j in mine} <= set(ids), "the user's own jobs are missing"
    row = jobs[jobs["job_id"].astype(str) == str(real)].iloc[0]
    assert row["user"] == "root" and float(row["runtime_s"]) < 600, row.to_dict()
    assert set(jobs[jobs["job_id"].astype(str).isin([str(j) for j in mine])]["user"]) == {u.name}

    # The report: root's GPU time in this window is its one job of seconds (jobs of earlier
    # tests may overlap it, none with GPUs); the user's two CPU jobs are there.
    until = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 7200))
    r = CliRunner().invoke(main, ["report", "--since", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)),
                                  "--until", until, "--csv", str(tmp_path / "csv"), "--no-cache"], env=env)
    assert r.exit_code == 0, r.output
    with (tmp_path / "csv" / "top_users.csv").open() as f:
        users = {r["user"]: r for r in csv.DictReader(f)}
    assert int(users["root"]["jobs"]) >= 1 and int(users[u.name]["jobs"]) == len(mine), users
    assert float(users["root"]["device_hours"]) < 0.1, users  # 8 GPUs for an hour would be 8


def test_cluster_still_healthy_after_the_attacks(cluster: Cluster) -> None:
    bad = {n: (i.state, i.reason) for n, i in cluster.nodes().items()
           if i.state not in ("idle", "mixed", "allocated", "completing")}
    assert bad == {}
    assert "UP" in cluster.runner.out(["scontrol", "ping"])
    assert json.loads(cluster.runner.out(["squeue", "--json"]))["jobs"] is not None
