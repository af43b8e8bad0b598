"""A pending --accel job moves to a pool that frees up, on the real cluster: with
`migration.pending` on, the bridge places it movable in the V100 pool (the cheapest with
room: untyped GRES, the model pinned by its node feature), the V100 node is drained before
it starts, and the bridge daemon moves it to the A100 pool, where it runs and is accounted
as A100 work."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.commands import release_argv
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.squeue import QueuedJob, parse_squeue_json, squeue_json_argv

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def queued(c: Cluster, jid: int) -> QueuedJob | None:
    jobs, _ = parse_squeue_json(c.runner.out(squeue_json_argv()))
    return next((j for j in jobs if j.job_id == jid), None)


@contextmanager
def moving(c: Cluster, demo_site: Site, tmp_path: Path, migration: str, section: str = "migration") -> Iterator[None]:
    """The cluster's bridge (job_submit.lua and daemon) on the demo site plus `migration`
    (or another `section`), with a fresh snapshot; the demo's own afterwards."""
    variant = tmp_path / "site.yaml"
    variant.write_text((ROOT / "site" / "demo" / "site.yaml").read_text() + f"\n{section}: {migration}\n")
    site = load_site(variant)
    c.load_model(site, None)  # job_submit.lua of the variant (slurmctld re-reads it)
    c.stop_bridge()
    c.start_bridge(site, every=1.0)
    try:
        assert wait_until(lambda: "v100@x86_64" in (c.state / "hetero-snapshot.lua").read_text(), 20)
        yield
    finally:
        c.load_model(demo_site, None)
        c.stop_bridge()
        c.start_bridge(demo_site)


def test_pending_job_moves_to_a_pool_with_room(cluster: Cluster, demo_site: Site, tmp_path: Path) -> None:
    c = cluster
    jid = 0
    with moving(c, demo_site, tmp_path, "{pending: true, pending_after: 3s}"):
        # Snapshot fresh, everything idle: nvidia:2 goes to the cheapest pool with room.
        jid = submit(c.runner, ["-H", "--accel=nvidia:2", "-o", "/dev/null"], "sleep 3")
        first = queued(c, jid)
        assert first is not None, jid
        rec = parse_comment(first.admin_comment)
        assert (rec["pool"], rec["movable"], first.tres_per_node, first.features) == \
            ("v100@x86_64", True, ("gres:" if c.runner.version() < (23, 2) else "gres/") + "gpu:2",
             "x86_64&v100"), first
        c.runner.run(["scontrol", "update", "NodeName=v100-01", "State=DRAIN", "Reason=maintenance"])
        try:
            c.runner.run(release_argv([jid]))
            wait_done(c.runner, [jid], timeout=90)
        finally:
            c.runner.run(["scontrol", "update", "NodeName=v100-01", "State=RESUME"], check=False)
    row = sacct_jobs(c.runner, [jid], ["JobID", "State", "NodeList", "AllocTRES", "AdminComment"],
                     require=["AdminComment"])[jid]
    assert row["State"] == "COMPLETED" and row["NodeList"].startswith("a100-"), row
    assert "gres/gpu:a100-80gb=2" in row["AllocTRES"], row
    rec = parse_comment(row["AdminComment"])
    assert (rec["pool"], rec["moved_from"], rec["moves"], rec["model"]) == \
        ("a100-80gb@x86_64", "v100@x86_64", 1, "a100-80gb"), json.dumps(rec)
    log = (c.log / "bridge.log").read_text()
    assert f"job {jid}: moved v100@x86_64 -> a100-80gb@x86_64" in log, log[-2000:]


def test_floating_jobs_start_in_the_pool_that_has_room_without_a_move(
        cluster: Cluster, demo_site: Site, tmp_path: Path) -> None:
    """With `placement.float` on (and the daemon's moves too, so that a move could happen),
    nvidia:2 asks Slurm for any of the three NVIDIA x86 pools: untyped GRES, the models ORed
    (a plain OR for one task, a matching OR for tasks that might span nodes). Their guessed
    pool (V100) is drained before they start, and Slurm itself starts them on the A100s: no
    daemon move, A100 work in accounting."""
    c = cluster
    spell = "gres:" if c.runner.version() < (23, 2) else "gres/"
    shapes = {(): "x86_64&(v100|a100-80gb|h100)", ("-n", "2"): "x86_64&[v100|a100-80gb|h100]"}
    jids: list[int] = []
    with moving(c, demo_site, tmp_path, "{float: true}\nmigration: {pending: true, pending_after: 1s}",
                section="placement"):
        for extra, features in shapes.items():
            jid = submit(c.runner, ["-H", "--accel=nvidia:2", *extra, "-o", "/dev/null"], "sleep 3")
            jids.append(jid)
            first = queued(c, jid)
            assert first is not None, jid
            rec = parse_comment(first.admin_comment)
            assert (rec["pool"], rec["float"], first.tres_per_node, first.features) == \
                ("v100@x86_64", "v100@x86_64,a100-80gb@x86_64,h100@x86_64", spell + "gpu:2", features), first
            assert "movable" not in rec
        c.runner.run(["scontrol", "update", "NodeName=v100-01", "State=DRAIN", "Reason=maintenance"])
        try:
            c.runner.run(release_argv(jids))
            wait_done(c.runner, jids, timeout=60)
        finally:
            c.runner.run(["scontrol", "update", "NodeName=v100-01", "State=RESUME"], check=False)
    rows = sacct_jobs(c.runner, jids, ["JobID", "State", "NodeList", "AllocTRES", "AdminComment"],
                      require=["AdminComment"])
    log = (c.log / "bridge.log").read_text()
    for jid in jids:
        row = rows[jid]
        assert row["State"] == "COMPLETED" and row["NodeList"].startswith("a100-"), row
        assert "gres/gpu:a100-80gb=2" in row["AllocTRES"], row
        assert "moved_from" not in parse_comment(row["AdminComment"])
        assert f"job {jid}: moved" not in log


def test_with_node_fit_a_free_gpu_beside_busy_cpus_does_not_start_a_job_now(
        cluster: Cluster, demo_site: Site, tmp_path: Path) -> None:
    """With `placement.node_fit` on, a job holding one V100, 76 of v100-01's 80 CPUs and 1 GiB
    leaves three V100s free with 4 CPUs beside them. The daemon's snapshot says so (sinfo's
    CPUs and memory per node). An 8-CPU nvidia:1 job goes to the next cheapest pool that has
    room (A100) as `starts-now`, and runs there; so does a 2-CPU one with `--mem=0` (Slurm
    gives it the whole node's memory, and 1 GiB of v100-01's is taken). Without node_fit the
    V100s would be taken to start both now and they would wait (tests/lua/test_node_fit.py
    decides both ways)."""
    c = cluster
    blocker, ids = 0, []
    with moving(c, demo_site, tmp_path, "{node_fit: true}", section="placement"):
        blocker = submit(c.runner, ["-p", "gpu", "-w", "v100-01", "--gres=gpu:v100:1", "-c", "76",
                                    "--mem=1G", "-t", "5", "-o", "/dev/null"], "sleep 300")
        try:
            snap = c.state / "hetero-snapshot.lua"
            assert wait_until(lambda: '["v100@x86_64"] = { total = 4, free = 3, free_max_node = 3, '
                              "pending = 0, fit = { { 4, " in snap.read_text(), 30), snap.read_text()
            for argv in (["-c", "8"], ["-c", "2", "--mem=0"]):
                jid = submit(c.runner, ["--accel=nvidia:1", *argv, "-t", "5", "-o", "/dev/null"], "sleep 1")
                ids.append(jid)
                first = queued(c, jid)
                assert first is not None, jid
                rec = parse_comment(first.admin_comment)
                assert (rec["pool"], rec["why"]) == ("a100-80gb@x86_64", "starts-now"), (argv, rec)
                # squeue shows 0 for --mem=0: the record tells the daemon's moves the node's
                if "--mem=0" in argv:
                    assert (rec.get("mem"), first.mem_node_mib) == ("node", 0), (rec, first)
                else:
                    assert "mem" not in rec, rec
            wait_done(c.runner, ids, timeout=60)
        finally:
            c.runner.run(["scancel", str(blocker)], check=False)
    rows = sacct_jobs(c.runner, ids, ["JobID", "State", "NodeList"])
    for jid in ids:
        assert rows[jid]["State"] == "COMPLETED" and rows[jid]["NodeList"].startswith("a100-"), rows[jid]


def test_running_migratable_job_is_requeued_into_a_faster_pool_and_resumes(
        cluster: Cluster, demo_site: Site, tmp_path: Path) -> None:
    """With `migration.running` on, a --checkpoint --migratable job placed on the V100s while
    the A100s are free is requeued into them (the daemon finds it finishes there sooner,
    restart included), resumes from its checkpoint there, and finishes."""
    import sys

    from tests.integration.test_checkpoint import BODY

    c = cluster
    folder = tmp_path / "ckpt"
    folder.mkdir()
    script = tmp_path / "job.py"
    script.write_text(BODY.replace("STEPS_TOTAL", "60"))
    jid = 0
    with moving(c, demo_site, tmp_path, "{pending: true, pending_after: 3s, running: true, running_gain: 0.2,"
                                        " restart_cost: 5s}"):
        jid = submit(c.runner, ["--accel=nvidia:1", f"--checkpoint={folder}", "--migratable", "-t", "10",
                                "-o", str(tmp_path / "out-%j.txt")], f"exec {sys.executable} {script} {folder}")
        wait_done(c.runner, [jid], timeout=240)
    row = sacct_jobs(c.runner, [jid], ["JobID", "State", "NodeList", "AllocTRES", "AdminComment"],
                     require=["AdminComment"])[jid]
    assert row["State"] == "COMPLETED" and row["NodeList"].startswith("a100-"), row
    assert "gres/gpu:a100-80gb=1" in row["AllocTRES"], row
    rec = parse_comment(row["AdminComment"])
    assert (rec["pool"], rec["moved_from"], rec["moves"], rec["checkpoint"]) == \
        ("a100-80gb@x86_64", "v100@x86_64", 1, str(folder)), json.dumps(rec)
    assert "migrate_to" not in rec and rec["migrated"] is True  # once: not on to the H100s
    log = (c.log / "bridge.log").read_text()
    assert f"job {jid}: requeued v100@x86_64 -> a100-80gb@x86_64" in log, log[-2000:]
    first = (folder / "log-0-v100-01").read_text().splitlines()
    second = (folder / f"log-1-{row['NodeList']}").read_text().splitlines()
    committed = [int(x.split()[1]) for x in first if x.startswith("commit")]
    assert int(second[0].split()[1]) in (max(committed), max(committed) + 1)  # resumed, not restarted
    assert second[-1] == "commit 60"
