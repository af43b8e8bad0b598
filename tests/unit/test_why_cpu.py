"""`slurm-hetero why JOBID` for a job that asks no GPUs/NPUs: its pool is the CPU-only nodes
of its partition, counted in CPUs, and our estimate replays the running jobs' expected ends
and the jobs ahead of it over them. Jobs are crafted from the CPU job of the captured 22.05
`squeue --json` (tests/data/captured/squeue-json-22.05.json, job 2), on the KTH replay's site
(tests/data/replay/kth-site.yaml: sp2-[01-04], 25 CPUs each, partition batch)."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from slurm_hetero.reports import why as W
from slurm_hetero.site import Site, load_site

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"
SQUEUE_2205 = json.loads((CAPTURED / "squeue-json-22.05.json").read_text())
TEMPLATE = SQUEUE_2205["jobs"][1]  # job 2: a 1-CPU job on cpu-arm-01, no GRES
NOW = 1_796_200_000.0
NODES = ("sp2-01", "sp2-02", "sp2-03", "sp2-04")


@pytest.fixture(scope="module")
def kth() -> Site:
    return load_site(ROOT / "tests" / "data" / "replay" / "kth-site.yaml")


@pytest.fixture(scope="module")
def demo() -> Site:
    return load_site(ROOT / "site" / "demo" / "site.yaml")


def cpu_job(job_id: int, *, state: str = "RUNNING", reason: str = "None", cpus: int = 1,
            on: dict[str, int] | None = None, start: float = NOW - 600, limit_min: int = 60,
            comment: str = "", priority: int = 10000, max_nodes: int = 0, node_count: int = 1,
            partition: str = "batch", features: str = "", per_node_cores: bool = True) -> dict[str, Any]:
    """A job in the shape of the captured 22.05 answer; `on`: a running job's CPUs per node,
    written as 22.05 writes them (each allocated core in `job_resources.allocated_nodes`)."""
    j: dict[str, Any] = copy.deepcopy(TEMPLATE)
    on = on or {}
    n_nodes = len(on) if state == "RUNNING" else node_count
    req = f"cpu={cpus},mem=1G,node={n_nodes},billing={cpus}"
    j.update(job_id=job_id, job_state=state, state_reason=reason, tres_per_node="", partition=partition,
             user_name="bob", user_id=1001, qos="normal", admin_comment=comment, priority=priority,
             features=features, account="root", node_count=n_nodes, time_limit=limit_min, cpus=cpus,
             submit_time=NOW - 900, eligible_time=NOW - 900, tres_req_str=req, comment="", dependency="",
             max_nodes=max_nodes, gres_detail=[])
    if state == "RUNNING":
        nodes = list(on)
        j.update(nodes=nodes[0] if len(nodes) == 1 else f"sp2-[{','.join(n[4:] for n in nodes)}]",
                 start_time=start, tres_alloc_str=req)
        j["job_resources"] = {
            "nodes": j["nodes"], "allocated_cores": cpus, "allocated_hosts": len(nodes),
            "allocated_nodes": [{"sockets": {"0": {"cores": {str(c): "allocated" for c in range(k)}}},
                                 "nodename": n, "cpus_used": 0, "memory_used": 0, "memory_allocated": 1024}
                                for n, k in on.items()]} if per_node_cores else None
    else:
        j.update(nodes="", start_time=0, tres_alloc_str="", job_resources=None)
    return j


def pred(p50: int, p90: int) -> str:
    return json.dumps({"hetero": 1, "pred": {"p50": p50, "p90": p90}}, separators=(",", ":"))


def sinfo(states: dict[str, str] | None = None, nodes: tuple[str, ...] = NODES) -> str:
    """`sinfo -N -h -O` capacity lines (NodeList|StateLong|Gres|GresUsed|Features)."""
    return "".join(f"{n}|{(states or {}).get(n, 'mixed')}|(null)|(null)|x86_64|\n" for n in nodes)


def inputs(target: dict[str, Any], others: list[dict[str, Any]], states: dict[str, str] | None = None,
           sinfo_text: str | None = None) -> W.Inputs:
    text = json.dumps({"meta": SQUEUE_2205["meta"], "errors": [], "jobs": [target, *others]})
    jobs = W.parse_queue(text)
    me = next(j for j in jobs if j.job_id == target["job_id"])
    return W.Inputs(me, None, jobs, sinfo_text if sinfo_text is not None else sinfo(states))


def busy() -> list[dict[str, Any]]:
    """sp2-01 full until NOW+600 (p50; its limit is later), sp2-02 full until NOW+1200 (its limit,
    no prediction), sp2-03 with 20 of 25 until NOW+3000; sp2-04 idle."""
    return [cpu_job(10, cpus=25, on={"sp2-01": 25}, limit_min=60, comment=pred(1200, 2400)),
            cpu_job(11, cpus=25, on={"sp2-02": 25}, limit_min=30),
            cpu_job(12, cpus=20, on={"sp2-03": 20}, limit_min=60)]


# ---- reading ---------------------------------------------------------------------------------


def test_cpus_per_node_come_from_the_allocation() -> None:
    two = cpu_job(20, cpus=30, on={"sp2-01": 25, "sp2-02": 5})
    even = cpu_job(21, cpus=30, on={"sp2-01": 25, "sp2-02": 5}, per_node_cores=False)
    q = {j.job_id: j for j in W.parse_queue(json.dumps({"jobs": [two, even]}))}
    assert q[20].cpus_by_node == (("sp2-01", 25), ("sp2-02", 5))
    assert q[21].cpus_by_node == (("sp2-01", 15), ("sp2-02", 15))  # no per-node data: an even split
    # The captured answers: 22.05 counts cores (2 CPUs each on the demo's GPU nodes), 24.11 CPUs.
    old = {j.job_id: j for j in W.parse_queue((CAPTURED / "squeue-json-22.05.json").read_text())}
    assert old[6].cpus_by_node == (("h100-01", 2),) and old[8].cpus_by_node == ()
    new = {j.job_id: j for j in W.parse_queue((CAPTURED / "squeue-json-24.11.json").read_text())}
    assert new[1].cpus_by_node == (("n01", 1),) and new[3].max_nodes == 1


def test_cpu_need_reads_the_node_count(kth: Site, demo: Site) -> None:
    groups = W.cpu_groups(W.site_view(kth))
    q = {j.job_id: j for j in W.parse_queue(json.dumps({"jobs": [
        cpu_job(1, state="PENDING", cpus=64), cpu_job(2, state="PENDING", cpus=20, max_nodes=1),
        cpu_job(3, state="PENDING", cpus=30, max_nodes=2, node_count=2),
        cpu_job(4, state="PENDING", cpus=1, partition="other")]}))}
    assert W.cpu_need(q[1], groups) == W.CpuNeed(("cpu@x86_64",), 64, 64, 0)  # -n 64 alone: spread
    assert W.cpu_need(q[2], groups) == W.CpuNeed(("cpu@x86_64",), 20, 20, 1)  # -N 1
    assert W.cpu_need(q[3], groups) == W.CpuNeed(("cpu@x86_64",), 30, 15, 2)  # -N 2: split evenly
    assert W.cpu_need(q[4], groups) is None  # a partition without CPU-only nodes
    # The demo site: its cpu partition has both arches, its gpu partition no CPU-only node.
    dg = W.cpu_groups(W.site_view(demo))
    pend = W.parse_queue(json.dumps({"jobs": [
        cpu_job(5, state="PENDING", partition="cpu"), cpu_job(6, state="PENDING", partition="cpu",
                                                              features="aarch64"),
        cpu_job(7, state="PENDING", partition="gpu")]}))
    assert [None if (n := W.cpu_need(j, dg)) is None else n.pools for j in pend] == [
        ("cpu@x86_64", "cpu@aarch64"), ("cpu@aarch64",), None]


# ---- the estimate --------------------------------------------------------------------------------


def test_a_cpu_job_starts_when_enough_cpus_come_free(kth: Site) -> None:
    mine = cpu_job(30, state="PENDING", reason="Resources", cpus=30)
    # sp2-04 idle: 5 + 25 = 30 free now, over two nodes.
    assert W.build_why(inputs(mine, busy()), kth, now=NOW).estimates["ours"] == NOW
    jobs = [*busy(), cpu_job(13, cpus=25, on={"sp2-04": 25}, limit_min=120)]
    w = W.build_why(inputs(mine, jobs), kth, now=NOW)
    # 5 free on sp2-03; job 11's limit end (NOW+1200) brings 25 more: 30, over two nodes (before
    # job 10's p90 end, NOW+1800). At the earliest, job 10's p50 end (NOW+600).
    assert w.estimates["ours"] == NOW + 1200 and w.estimates["ours_earliest"] == NOW + 600
    assert "CPUs only" in w.estimates["ours_basis"] and "no job ahead" in w.estimates["ours_basis"]
    p = w.pool
    assert p is not None and p["key"] == "cpu@x86_64" and p["unit"] == "CPUs"
    assert (p["free"], p["total"], p["free_max_node"], p["cpus"], p["spread"]) == (5, 100, 5, 30, True)
    assert (p["per_node"], p["nodes"]) == (25, 2)  # as packed onto whole nodes
    running = {h["job"]: h for h in p["running"]}
    assert running[10]["devices"] == 25 and running[10]["ends_p50"] == NOW + 600
    assert running[11]["ends_p50"] is None and running[11]["expected_end"] == NOW + 1200
    assert [h["job"] for h in p["running"]] == [10, 11, 12, 13]  # earliest expected end first
    json.dumps(w.as_dict())
    # Slurm's estimate is its own, from squeue.
    assert w.estimates["slurm"] is None


def test_in_priority_order_behind_a_job_ahead(kth: Site) -> None:
    jobs = [*busy(), cpu_job(13, cpus=25, on={"sp2-04": 25}, limit_min=120)]
    ahead = cpu_job(40, state="PENDING", reason="Resources", cpus=25, limit_min=20, priority=20000)
    lower = cpu_job(41, state="PENDING", reason="Priority", cpus=25, limit_min=20, priority=5000)
    held = cpu_job(42, state="PENDING", reason="JobHeldUser", cpus=100, priority=30000)
    mine = cpu_job(30, state="PENDING", reason="Priority", cpus=30)
    w = W.build_why(inputs(mine, [*jobs, ahead, lower, held]), kth, now=NOW)
    # At the earliest: job 40 takes sp2-01's 25 at NOW+600 (job 10's p50 end, for 20 minutes);
    # job 11's end at NOW+1200 gives sp2-02's 25: with sp2-03's 5, this job's 30. Likely: job 40
    # takes job 11's 25 at NOW+1200, this job job 10's at its p90 end, NOW+1800. The held and
    # the lower job take nothing.
    assert w.estimates["ours_earliest"] == NOW + 1200 and w.estimates["ours"] == NOW + 1800
    assert "the 1 job(s) ahead" in w.estimates["ours_basis"]
    assert w.pool is not None and w.pool["pending"] == 30 + 25 + 25 + 100


def test_a_down_or_drained_node_gives_nothing(kth: Site) -> None:
    mine = cpu_job(30, state="PENDING", reason="Resources", cpus=30)
    # sp2-04 idle: 25 + sp2-03's 5 start it now; down, it waits for job 10's end.
    assert W.build_why(inputs(mine, busy()), kth, now=NOW).estimates["ours"] == NOW
    w = W.build_why(inputs(mine, busy(), states={"sp2-04": "down*"}), kth, now=NOW)
    assert w.estimates["ours_earliest"] == NOW + 600 and w.estimates["ours"] == NOW + 1200
    assert w.pool is not None and (w.pool["free"], w.pool["total"]) == (5, 100)
    # sp2-01 draining: job 10's end there gives nothing; job 11's on sp2-02 (NOW+1200) does.
    w = W.build_why(inputs(mine, busy(), states={"sp2-04": "down*", "sp2-01": "draining"}), kth, now=NOW)
    assert w.estimates["ours"] == NOW + 1200
    # Every node down: nothing frees.
    w = W.build_why(inputs(mine, busy(), states=dict.fromkeys(NODES, "down")), kth, now=NOW)
    assert w.estimates["ours"] is None and w.estimates["ours_basis"].startswith("none")


def test_one_node_jobs_wait_for_one_node(kth: Site) -> None:
    jobs = [cpu_job(10, cpus=25, on={"sp2-01": 25}, limit_min=60, comment=pred(600, 900)),
            cpu_job(11, cpus=25, on={"sp2-02": 25}, limit_min=30),
            cpu_job(12, cpus=15, on={"sp2-03": 15}, limit_min=60),
            cpu_job(13, cpus=15, on={"sp2-04": 15}, limit_min=60)]
    spread = cpu_job(30, state="PENDING", reason="Resources", cpus=20)
    assert W.build_why(inputs(spread, jobs), kth, now=NOW).estimates["ours"] == NOW  # 10 + 10
    one = cpu_job(30, state="PENDING", reason="Resources", cpus=20, max_nodes=1)
    w = W.build_why(inputs(one, jobs), kth, now=NOW)
    assert w.estimates["ours"] == NOW + 300  # job 10's p50 end has passed: its p90 end is ahead
    jobs[0] = cpu_job(10, cpus=25, on={"sp2-01": 25}, limit_min=60, comment=pred(1200, 1800))
    w = W.build_why(inputs(one, jobs), kth, now=NOW)
    assert w.estimates["ours_earliest"] == NOW + 600 and w.estimates["ours"] == NOW + 1200
    assert w.pool is not None and (w.pool["per_node"], w.pool["nodes"], w.pool["spread"]) == (20, 1, False)


def test_blocked_and_unknown(kth: Site, demo: Site) -> None:
    held = cpu_job(30, state="PENDING", reason="JobHeldUser", cpus=4)
    w = W.build_why(inputs(held, busy()), kth, now=NOW)
    assert w.estimates["ours"] is None and "JobHeldUser" in w.estimates["ours_basis"]
    assert [s.kind for s in w.suggestions] == ["release"]
    mine = cpu_job(30, state="PENDING", reason="Resources", cpus=4)
    jobs = W.parse_queue(json.dumps({"jobs": [mine, *busy()]}))
    w = W.build_why(W.Inputs(jobs[0], None, jobs), kth, now=NOW)  # sinfo did not answer
    assert w.estimates["ours"] is None and any("sinfo did not answer" in n for n in w.notes)
    gpu_part = cpu_job(31, state="PENDING", reason="Resources", partition="gpu")
    w = W.build_why(inputs(gpu_part, []), demo, now=NOW)
    assert w.pool is None and any("no CPU-only nodes" in n for n in w.notes)


def test_the_earliest_arch_is_shown(demo: Site) -> None:
    nodes = ("cpu-x86-01", "cpu-x86-02", "cpu-arm-01", "cpu-arm-02")
    full = [cpu_job(10 + i, cpus=128, on={n: 128}, partition="cpu", limit_min=30 + 30 * i)
            for i, n in enumerate(nodes[:2])]
    arm = [cpu_job(20, cpus=1, on={"cpu-arm-01": 1}, partition="cpu")]
    mine = cpu_job(30, state="PENDING", reason="Resources", cpus=64, partition="cpu")
    w = W.build_why(inputs(mine, full + arm, sinfo_text=sinfo(nodes=nodes)), demo, now=NOW)
    assert w.pool is not None and w.pool["key"] == "cpu@aarch64" and w.estimates["ours"] == NOW
    assert w.pool["candidates"] == ["cpu@x86_64", "cpu@aarch64"]


# ---- suggestions and the screen ---------------------------------------------------------------


def test_a_backfill_window_in_cpus(kth: Site) -> None:
    jobs = [*busy(), cpu_job(13, cpus=20, on={"sp2-04": 20}, limit_min=120)]  # 5 + 5 free
    ahead = cpu_job(40, state="PENDING", reason="Resources", cpus=50, priority=20000, limit_min=60)
    mine = cpu_job(30, state="PENDING", reason="Priority", cpus=8, limit_min=120)
    w = W.build_why(inputs(mine, [*jobs, ahead]), kth, now=NOW)
    times = [s for s in w.suggestions if s.kind == "time"]
    # 10 CPUs free now (two nodes: a spread job fits); the next limit ends at NOW+1200 (job 11).
    assert len(times) == 1 and "CPUs it needs are free now" in times[0].what
    assert times[0].options == (f"--time={W._minutes_text((NOW + 1200) // 60 * 60 - 30 - NOW)}",)
    assert any("the CPUs it needs are free now" in n for n in w.notes)
    # -N 1: 8 on one node are not free, so no shorter limit starts it.
    one = cpu_job(30, state="PENDING", reason="Priority", cpus=8, limit_min=120, max_nodes=1)
    w = W.build_why(inputs(one, [*jobs, ahead]), kth, now=NOW)
    assert [s for s in w.suggestions if s.kind == "time"] == []
    assert {s.kind for s in w.suggestions} <= {"tier"}  # no device suggestion for a CPU job


def test_the_screen_says_cpus(kth: Site) -> None:
    mine = cpu_job(30, state="PENDING", reason="Resources", cpus=30)
    w = W.build_why(inputs(mine, busy(), states={"sp2-04": "down"}), kth, now=NOW)
    out = io.StringIO()
    W.print_why(w, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "pool: cpu@x86_64: it asks 30 CPU(s) on any nodes" in text and "5 of 100 free now" in text
    assert "CPUs" in text.split("held by")[1] and "ours " in text and "no pool to look at" not in text


def test_captured_kth_replay(kth: Site) -> None:
    """Real answers of the dev cluster replaying KTH-SP2 (bridge arm, 22.05): job 16 holds 80
    CPUs unevenly over the four nodes; job 25 (-n 42, no node count: squeue guesses 2 nodes,
    max_nodes 0) waits first in line."""
    jobs = W.parse_queue((CAPTURED / "squeue-json-kth-22.05.json").read_text())
    by_id = {j.job_id: j for j in jobs}
    assert by_id[16].cpus_by_node == (("sp2-01", 16), ("sp2-02", 24), ("sp2-03", 25), ("sp2-04", 15))
    me = by_id[25]
    assert (me.node_count, me.max_nodes) == (2, 0)
    groups = W.cpu_groups(W.site_view(kth))
    assert W.cpu_need(me, groups) == W.CpuNeed(("cpu@x86_64",), 42, 42, 0)
    now = (by_id[16].start or 0.0) + 600
    sinfo_text = (CAPTURED / "sinfo-capacity-kth-22.05.txt").read_text()
    start_text = (CAPTURED / "squeue-start-kth-22.05.txt").read_text()
    w = W.build_why(W.Inputs(me, None, jobs, sinfo_text, None, None, start_text), kth, now=now)
    p = w.pool
    # sp2-01: 25 - 8 (job 5) - 16 (job 16); sp2-02 and sp2-03 full; sp2-04: 25 - 15: as sinfo's
    # mixed/allocated states say.
    assert p is not None and (p["free"], p["total"], p["free_max_node"]) == (11, 100, 10)
    assert [h["job"] for h in p["running"]] == [21, 16, 5]  # job 5's p50 has passed: its p90
    # 11 free, job 21's 1 CPU, then job 16's 80 at its end: 42 for this job. Job 16 ran 14,017 s
    # (its p50 1,444, p90 11,991; the bridge shortened its 240-minute limit to 200 minutes).
    start = by_id[16].start
    assert start is not None
    assert w.estimates["ours_earliest"] == W.expected_end(by_id[16], now) == start + 1444
    assert w.estimates["ours"] == W.end_by(by_id[16], now, "likely") == start + 11991
    assert w.estimates["ours_latest"] == W.end_by(by_id[16], now, "latest") == start + 240 * 60
    assert w.estimates["slurm"] == 1796567761.0


def test_a_job_slurm_has_looked_at_is_not_said_unseen(kth: Site) -> None:
    """Slurm clears a job's reason while a pass looks at it: with last_sched_evaluation past its
    eligible time, `why` says so instead of "has not looked at it yet"."""
    seen = cpu_job(30, state="PENDING", reason="None")
    seen["last_sched_evaluation"] = NOW - 5
    w = W.build_why(inputs(seen, busy()), kth, now=NOW)
    assert w.reason is not None and w.reason.code == "None" and "has looked at it" in w.reason.words
    for never in (0, NOW - 1000):  # never, or before it became eligible (NOW - 900)
        fresh = cpu_job(30, state="PENDING", reason="None")
        fresh["last_sched_evaluation"] = never
        w = W.build_why(inputs(fresh, busy()), kth, now=NOW)
        assert w.reason is not None and "has not looked at it yet" in w.reason.words
