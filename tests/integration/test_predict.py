"""Runtime predictions in Slurm: a real exported model compiled into the bridge, backfill
mode on the demo's `cpu` partition, the bridge daemon extending limits and setting
SiteFactor. The jobs here run as root, whose history the model was trained on."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.bridge.history import HISTORY_FILE
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.site import Site
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_duration_s, parse_kv_record
from tests.predict_fixture import export_model, history

pytestmark = pytest.mark.integration

MARGIN = 20  # seconds: the daemon extends a shortened limit when less than this is left


@pytest.fixture(scope="module")
def predicting(cluster: Cluster, demo_site: Site, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The model compiled in, its predictions as exported: these tests are about limits and
    priorities from a known prediction, not about the users' history moving it."""
    model = export_model(tmp_path_factory.mktemp("model") / "predict.lua")
    cluster.load_model(demo_site, model)
    cluster.stop_bridge()
    cluster.start_bridge(demo_site, margin=MARGIN, history=False)
    # slurmctld re-reads job_submit.lua when the next job comes: a probe job shows the model in.
    assert wait_until(lambda: "pred" in _probe(cluster), 15, 1.0)
    yield cluster
    cluster.load_model(demo_site, None)
    cluster.stop_bridge()
    cluster.start_bridge(demo_site)


def job(c: Cluster, jid: int) -> dict[str, str]:
    return parse_kv_record(c.runner.out(["scontrol", "show", "job", str(jid)]))


def wait_running(c: Cluster, jid: int) -> None:
    assert wait_until(lambda: job(c, jid)["JobState"] == "RUNNING", 30)


def elapsed_s(row: dict[str, str]) -> int:
    h, m, s = (int(x) for x in row["Elapsed"].split(":"))
    return h * 3600 + m * 60 + s


def test_job_outliving_its_prediction_is_extended_not_killed(predicting: Cluster) -> None:
    c = predicting
    jid = submit(c.runner, ["-t", "5", "-J", "outlive", "-o", "/dev/null"], "sleep 75")
    wait_running(c, jid)
    rec = job(c, jid)
    d = parse_comment(rec["AdminComment"])
    assert d["pred"]["p90"] < 60 and d["shortened"] and d["user_limit_min"] == 5
    assert rec["TimeLimit"] == "00:01:00"
    wait_done(c.runner, [jid], timeout=150)
    row = sacct_jobs(c.runner, [jid], ["JobID", "State", "Elapsed", "Timelimit", "End", "Partition"])[jid]
    assert row["State"] == "COMPLETED" and elapsed_s(row) >= 75  # its real runtime
    assert f"job {jid}: limit 1 -> 2 min" in (c.log / "bridge.log").read_text()


def test_stale_heartbeat_and_startup_repair(predicting: Cluster, demo_site: Site) -> None:
    c = predicting
    a = submit(c.runner, ["-t", "5", "-J", "repair", "-o", "/dev/null"], "sleep 80")
    wait_running(c, a)
    assert job(c, a)["TimeLimit"] == "00:01:00"
    c.stop_bridge()
    # Time itself is under test: the heartbeat is stale once older than the cluster's
    # snapshot_stale_s (10 s here), which the bridge judges only when the next job comes.
    time.sleep(12)
    b = submit(c.runner, ["-t", "5", "-J", "stale", "-o", "/dev/null", "-H"], "true")
    rec = job(c, b)
    c.runner.run(["scancel", str(b)])
    assert rec["TimeLimit"] == "00:05:00" and "shortened" not in parse_comment(rec["AdminComment"])
    assert "pred" in parse_comment(rec["AdminComment"])  # still predicted, only not shortened
    # A comes within the margin of its shortened limit while the daemon is down; the
    # daemon's first act on start is to extend it.
    assert wait_until(lambda: 60 - (parse_duration_s(job(c, a)["RunTime"]) or 0) < MARGIN, 60)
    c.start_bridge(demo_site, margin=MARGIN, history=False)
    assert wait_until(lambda: job(c, a)["TimeLimit"] != "00:01:00", 10)
    wait_done(c.runner, [a], timeout=120)
    row = sacct_jobs(c.runner, [a], ["JobID", "State", "Elapsed", "End", "Partition"])[a]
    assert row["State"] == "COMPLETED" and elapsed_s(row) >= 80


def test_limits_hold_with_the_daemon_stopped_and_slurmctld_restarted(predicting: Cluster) -> None:
    """Backfill mode without the daemon: OverTimeLimit (cpu's MaxTime) keeps jobs past their
    predicted limits alive, through a slurmctld restart too; once the daemon runs again it
    extends the limits still short of their users' and ends each job at its own limit."""
    c = predicting
    assert parse_kv_record(c.runner.out(["scontrol", "show", "partition", "cpu"]))["OverTimeLimit"] == "2880"
    a = submit(c.runner, ["-t", "2", "-J", "own-limit", "-o", "/dev/null"], "sleep 600")  # ends at 2 min
    # Completes, 35 s after the daemon runs again: time for its round to extend the limit
    # (with `sleep 100` a busy CI machine once let it complete first, its limit still 1 min).
    b = submit(c.runner, ["-t", "3", "-J", "outlive", "-o", "/dev/null"], "sleep 130")
    u = submit(c.runner, ["-t", "1", "-J", "unshortened", "-o", "/dev/null"], "sleep 600")  # p90 is its limit
    # A limit past cpu's MaxTime (2 days): plain Slurm never starts it (PartitionTimeLimit);
    # shortened, it runs, and the daemon would extend it to MaxTime at most (test_soft_limits).
    x = submit(c.runner, ["-t", "3-00:00:00", "-J", "past-maxtime", "-o", "/dev/null"], "true")
    for jid in (a, b, u):
        wait_running(c, jid)

    def in_accounting() -> bool:
        # slurmctld refuses `scontrol update` of a job slurmdbd has not indexed yet ("the DB
        # index is being set"), for minutes after a restart that came first: a busy CI
        # machine left the daemon unable to extend anything (the jobs were safe all the same,
        # by OverTimeLimit). The restart below is meant to find the jobs recorded.
        out = c.runner.out(["sacct", "-X", "-n", "-P", "-j", f"{a},{b},{u}", "-o", "JobIDRaw"])
        return {str(a), str(b), str(u)} <= set(out.split())

    assert wait_until(in_accounting, 30)
    daemon_pid = int((c.run / "bridge.pid").read_text())
    os.kill(daemon_pid, signal.SIGSTOP)  # before the 20 s margin of the 1-minute limits
    try:
        recs = {j: job(c, j) for j in (a, b, u)}
        assert [recs[j]["TimeLimit"] for j in (a, b, u)] == ["00:01:00"] * 3
        da, db = parse_comment(recs[a]["AdminComment"]), parse_comment(recs[b]["AdminComment"])
        assert (da["shortened"], da["user_limit_min"], db["user_limit_min"]) == (True, 2, 3)
        assert "shortened" not in parse_comment(recs[u]["AdminComment"])
        c.restart_slurmctld()
        assert parse_kv_record(c.runner.out(["scontrol", "show", "partition", "cpu"]))["OverTimeLimit"] == "2880"
        assert parse_comment(job(c, a)["AdminComment"]) == da  # the record survived the restart
        # Past their 1-minute limits and Slurm's 30 s limit check: all still running.
        assert wait_until(lambda: (parse_duration_s(job(c, a)["RunTime"]) or 0) >= 95, 120)
        assert [job(c, j)["JobState"] for j in (a, b, u)] == ["RUNNING"] * 3
    finally:
        os.kill(daemon_pid, signal.SIGCONT)
    resumed = time.monotonic()
    try:
        wait_done(c.runner, [u], timeout=20)  # ended at once: past its own limit (the trade-off)
        wait_done(c.runner, [a, b, x], timeout=60)
    finally:
        c.runner.run(["scancel", str(a), str(b), str(u)], check=False)
    assert time.monotonic() - resumed < 60
    fields = ["JobID", "State", "Elapsed", "Timelimit", "AdminComment", "End", "Partition"]
    rows = sacct_jobs(c.runner, [a, b, u, x], fields, require=["AdminComment"])
    ra, rb, ru, rx = (rows[j] for j in (a, b, u, x))
    assert rb["State"] == "COMPLETED" and elapsed_s(rb) >= 130 and rb["Timelimit"] == "00:03:00", rb
    assert ra["State"].startswith("CANCELLED") and 120 <= elapsed_s(ra) <= 135, ra
    assert ra["Timelimit"] == "00:02:00"
    ended = parse_comment(ra["AdminComment"])
    assert ended.items() >= {**da, "ended": "own_limit", "own_limit_min": 2}.items(), ended
    assert ru["State"].startswith("CANCELLED") and elapsed_s(ru) >= 95, ru
    assert parse_comment(ru["AdminComment"])["ended"] == "own_limit"
    assert rx["State"] == "COMPLETED" and parse_comment(rx["AdminComment"])["user_limit_min"] == 3 * 1440
    log = (c.log / "bridge.log").read_text()
    assert f"job {a}: limit 1 -> 2 min" in log and f"job {b}: limit 1 -> 3 min" in log
    assert f"job {a}: ended at its own limit of 2 min" in log and f"job {u}: ended at its own limit of 1 min" in log


def test_site_factor_on_pending_jobs(predicting: Cluster) -> None:
    c = predicting
    filler = submit(c.runner, ["--gres=gpu:gh200:1", "-o", "/dev/null"], "sleep 60")
    wait_running(c, filler)
    short = submit(c.runner, ["--accel=gh200:1", "-t", "10", "-o", "/dev/null"], "true")
    long = submit(c.runner, ["--accel=gh200:1", "-t", "2-00:00:00", "-o", "/dev/null"], "true")
    try:
        def site_column() -> dict[str, int]:
            # Every pending job, not `-j short,long`: 24.11's sprio refuses a list there
            # ("Invalid job id: <first>", exit 1; one id alone works), 22.05's takes it.
            out = c.runner.out(["sprio", "-h", "-o", "%i %S"])
            last[:] = [out]
            rows = [ln.split() for ln in out.splitlines() if ln.strip()]
            return {r[0]: int(r[1]) for r in rows if r[0] in (str(short), str(long))}

        last: list[str] = []
        assert wait_until(lambda: len(site_column()) == 2 and min(site_column().values()) > 0, 20), (
            last, c.runner.out(["squeue", "-h", "-o", "%i %T %r %Q", "-j", f"{filler},{short},{long}"]))
        values = site_column()
        assert values[str(short)] > values[str(long)] > 0, values
        prio = c.runner.out(["squeue", "-h", "-j", f"{short},{long}", "-o", "%i %Q"])
        assert all(int(p.split()[1]) > 0 for p in prio.splitlines())
    finally:
        c.runner.run(["scancel", str(filler), str(short), str(long)])


def test_demo_cpu_jobs_record_predictions(predicting: Cluster) -> None:
    jid = submit(predicting.runner, ["-c", "2", "-o", "/dev/null"], "true")
    wait_done(predicting.runner, [jid])
    row = sacct_jobs(predicting.runner, [jid], ["JobID", "AdminComment", "End", "Partition"],
                     require=["AdminComment"])[jid]
    assert parse_comment(row["AdminComment"])["pred"]["p50"] >= 1


def _probe(c: Cluster) -> dict[str, Any]:
    """The bridge's decision record for a held 10-minute job of root's (then cancelled)."""
    jid = submit(c.runner, ["-H", "-t", "10", "-J", "probe", "-o", "/dev/null"], "true")
    c.runner.run(["scancel", str(jid)])
    return parse_comment(job(c, jid).get("AdminComment", ""))


def _p50(c: Cluster) -> int:
    """The bridge's central prediction for a probe job."""
    return int(_probe(c)["pred"]["p50"])


def test_a_users_burst_of_short_jobs_reaches_the_model_within_a_round(
        cluster: Cluster, demo_site: Site, tmp_path: Path) -> None:
    """Exported, root's jobs ran about 4 minutes; now they run a second. Once two of them
    have ended, the daemon's history file carries that and the bridge predicts from it."""
    table = history()
    root = table["user"] == "root"
    table.loc[root, "runtime_s"] = 240 + (table.loc[root, "runtime_s"] % 20)
    table.loc[root, "end"] = table.loc[root, "start"] + table.loc[root, "runtime_s"]
    # Exported now: root's jobs of earlier tests on this cluster are history the export has
    # (by its time), not jobs that ended since.
    shift = int(time.time()) - int(table["end"].max()) - 1
    table[["submit", "start", "end"]] += shift
    model = export_model(tmp_path / "predict.lua", table)
    cluster.load_model(demo_site, model)
    cluster.stop_bridge()
    cluster.start_bridge(demo_site, margin=MARGIN)
    try:
        first = [_p50(cluster) for _ in range(2)]
        assert wait_until(lambda: _p50(cluster) == first[0], 15)  # slurmctld reads the new bridge
        before = _p50(cluster)
        assert before >= 120, before
        short = [submit(cluster.runner, ["-t", "10", "-J", "burst", "-o", "/dev/null"], "true") for _ in range(3)]
        wait_done(cluster.runner, short, timeout=60)
        published = cluster.state / HISTORY_FILE
        # The daemon reads the ends within HISTORY_EVERY_S (20 s), the bridge looks every 10 s.
        assert wait_until(lambda: published.is_file() and '["root"]' in published.read_text(), 45)
        after: list[int] = []

        def fell() -> bool:  # each p50 seen, kept for the message
            after.append(_p50(cluster))
            return after[-1] < before / 4

        assert wait_until(fell, 30), (before, after)
        assert "history skipped" not in (cluster.log / "bridge.log").read_text()
    finally:
        cluster.load_model(demo_site, None)
        cluster.stop_bridge()
        cluster.start_bridge(demo_site)
