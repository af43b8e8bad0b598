"""Moving pending jobs between the pools of their request: the bridge's record (Lua) and the
daemon's planner (pure), on the demo site."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.bridge.migrate import Planner, parse_cands, take_moves
from slurm_hetero.bridge.snapshot import PoolCapacity
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.site import Site, load_site, load_site_text
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.model import MigrationSettings
from slurm_hetero.site.pools import pools
from slurm_hetero.slurm.squeue import QueuedJob

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"
NOW = 1_000_000.0
ON = MigrationSettings(pending=True, pending_after_s=60, max_moves=2)


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(DEMO)


def idle(site: Site, **busy: int) -> dict[str, PoolCapacity]:
    """Every pool idle except model=free devices (one node's worth at most on a node)."""
    caps = {}
    for p in pools(site):
        f = busy.get(p.model.replace("-", "_"), p.devices)
        caps[p.key] = PoolCapacity(total=p.devices, free=f, free_max_node=min(f, p.per_node))
    return caps


def job(record: dict[str, Any] | str, jid: int = 7, reason: str = "Resources", submitted: float = NOW - 600,
        features: str = "x86_64&v100", tres: str = "gres:gpu:2", partition: str = "gpu",
        nodes: int = 1) -> QueuedJob:
    text = record if isinstance(record, str) else json.dumps(record)
    return QueuedJob(job_id=jid, state="PENDING", user="u", name="n", partition=partition,
                     time_limit_min=60, submit_time=submitted, start_time=None, admin_comment=text,
                     gres_detail=(), nodes="", tres_per_node=tres, features=features,
                     node_count=nodes, reason=reason)


NVIDIA2 = {"hetero": 1, "accel": "nvidia:2", "pool": "v100@x86_64", "model": "v100", "n": 2,
           "cands": "v100@x86_64:2,a100-80gb@x86_64:2,h100@x86_64:2", "movable": True}


def test_the_bridge_records_every_pool_of_the_request(site: Site, tmp_path: Path) -> None:
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path)))["job_submit.lua"])
    rc, desc = js.submit({"accel": "nvidia:2"})
    assert rc == 0
    rec = json.loads(desc["admin_comment"])
    assert parse_cands(rec["cands"]) == [("v100@x86_64", 2), ("a100-80gb@x86_64", 2), ("h100@x86_64", 2)]
    assert rec["candidates"] == 3 and rec["pool"] == "v100@x86_64"
    rc, desc = js.submit({"accel": "units=2"})  # n per model: 2 units = 3 910Bs, 2 A100s, 1 H100
    cands = parse_cands(json.loads(desc["admin_comment"])["cands"])
    assert cands == [("ascend-910b@aarch64", 3), ("a100-80gb@x86_64", 2), ("h100@x86_64", 1),
                     ("gh200@aarch64", 1)]  # 5 V100s do not fit a 4-GPU node


def test_where_the_daemon_may_move_jobs_the_bridge_places_them_movable(site: Site, tmp_path: Path) -> None:
    moving = load_site_text(DEMO.read_text() + "\nmigration: {pending: true}\n", "m.yaml")
    js = JobSubmit(render_site(moving, Profile(state_dir=str(tmp_path)))["job_submit.lua"])
    rc, desc = js.submit({"accel": "nvidia:2"}, features="ib")
    assert rc == 0, js.logs
    assert (desc["tres_per_node"], desc["features"]) == ("gres:gpu:2", "(ib)&x86_64&v100")
    assert json.loads(desc["admin_comment"])["movable"] is True
    # One pool only, or a pinned model: nothing to move between, the GRES stays typed.
    rc, desc = js.submit({"accel": "a100-80gb:2"})
    assert desc["tres_per_node"] == "gres:gpu:a100-80gb:2" and "movable" not in desc["admin_comment"]
    # A tier whose limits cap models keeps typed GRES: Slurm counts those caps only on typed
    # requests (two untyped diamond jobs held 4 V100s past diamond's gres/gpu:v100=2 on 22.05).
    for opts, fields in (({"accel": "nvidia:2", "tier": "diamond"}, {}), ({"accel": "nvidia:2"}, {"qos": "diamond"})):
        rc, desc = js.submit(opts, **cast(dict[str, Any], fields))  # mypy checks str values against srun too
        assert desc["tres_per_node"] == "gres:gpu:v100:2" and "movable" not in desc["admin_comment"], opts
    rc, desc = js.submit({"accel": "nvidia:2", "tier": "silver"})
    assert desc["tres_per_node"] == "gres:gpu:2"  # silver has no limits: movable
    # A site that does not move jobs: typed GRES as always.
    plain = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path)))["job_submit.lua"])
    rc, desc = plain.submit({"accel": "nvidia:2"})
    assert desc["tres_per_node"] == "gres:gpu:v100:2" and desc["features"] == "x86_64"
    assert "movable" not in desc["admin_comment"]


def test_moves_a_job_whose_pool_is_full_to_the_cheapest_pool_with_room(site: Site) -> None:
    moves = Planner(site, ON).plan([job(NVIDIA2)], idle(site, v100=0), NOW)
    assert len(moves) == 1
    m = moves[0]
    assert (m.from_pool, m.to_pool, m.tres_per_node, m.partition, m.features) == \
        ("v100@x86_64", "a100-80gb@x86_64", "gres:gpu:2", "gpu", "x86_64&a100-80gb")
    rec = json.loads(m.comment)
    assert rec["pool"] == "a100-80gb@x86_64" and rec["model"] == "a100-80gb" and rec["moves"] == 1
    assert rec["moved_from"] == "v100@x86_64" and rec["moved_at"] == int(NOW)
    assert rec["accel"] == "nvidia:2" and rec["cands"] == NVIDIA2["cands"]  # the rest is kept
    # 24.11 spells GRES requests gres/...: the move keeps the job's own spelling.
    m2 = Planner(site, ON).plan([job(NVIDIA2, tres="gres/gpu:2")], idle(site, v100=0), NOW)[0]
    assert m2.tres_per_node == "gres/gpu:2"


@pytest.mark.parametrize(("why", "j", "caps_busy"), [
    ("its own pool has room", job(NVIDIA2), {}),
    ("held by its user", job(NVIDIA2, reason="JobHeldUser"), {"v100": 0}),
    ("waits for a dependency", job(NVIDIA2, reason="Dependency"), {"v100": 0}),
    ("waited less than pending_after", job(NVIDIA2, submitted=NOW - 30), {"v100": 0}),
    ("moved recently", job({**NVIDIA2, "moves": 1, "moved_at": NOW - 10}), {"v100": 0}),
    ("moved max_moves times", job({**NVIDIA2, "moves": 2, "moved_at": NOW - 999}), {"v100": 0}),
    ("not the bridge's record", job({**NVIDIA2, "hetero": 0}), {"v100": 0}),
    ("placed with a typed GRES (not movable)", job({**NVIDIA2, "movable": False}), {"v100": 0}),
    ("a constraint not in the bridge's shape", job(NVIDIA2, features="ib&x86_64&v100"), {"v100": 0}),
    ("a comment that is not JSON", job("give me 8 GPUs"), {"v100": 0}),
    ("malformed candidates", job({**NVIDIA2, "cands": "v100@x86_64:2,h100@x86_64:x"}), {"v100": 0}),
    ("a pool that is not the site's", job({**NVIDIA2, "cands": "v100@x86_64:2,b200@x86_64:2"}), {"v100": 0}),
    ("multi-node", job(NVIDIA2, nodes=2), {"v100": 0}),
    ("no other pool has room", job(NVIDIA2), {"v100": 0, "a100_80gb": 1, "h100": 0}),
])
def test_jobs_that_stay(site: Site, why: str, j: QueuedJob, caps_busy: dict[str, int]) -> None:
    assert Planner(site, ON).plan([j], idle(site, **caps_busy), NOW) == [], why


def test_pending_demand_of_the_target_counts(site: Site) -> None:
    caps = idle(site, v100=0, h100=0)
    caps["a100-80gb@x86_64"] = replace(caps["a100-80gb@x86_64"], pending=7)  # 8 free, 7 asked
    assert Planner(site, ON).plan([job(NVIDIA2)], caps, NOW) == []


def test_two_jobs_never_get_the_same_free_devices(site: Site) -> None:
    caps = idle(site, v100=0, h100=0)
    caps["a100-80gb@x86_64"] = PoolCapacity(total=8, free=3, free_max_node=3)
    old, new = job(NVIDIA2, jid=8, submitted=NOW - 900), job(NVIDIA2, jid=9, submitted=NOW - 300)
    moves = Planner(site, ON).plan([new, old], caps, NOW)
    assert [m.job_id for m in moves] == [8]  # oldest first; 1 device left is not enough for 2
    assert caps["a100-80gb@x86_64"].free == 3  # the caller's capacity is not changed


def test_with_node_fit_cpus_and_memory_count_too(site: Site) -> None:
    """Where the snapshot keeps a pool's fit (placement.node_fit), a move needs one node with
    the job's CPUs and memory free beside its devices, and a job whose own pool has such a
    node stays."""
    cpu12 = replace(job(NVIDIA2), cpus_node=12, mem_node_mib=12 * 1024)
    caps = idle(site, v100=0)
    caps["a100-80gb@x86_64"] = replace(caps["a100-80gb@x86_64"], fit=[(10, 10**6)] * 4)  # 10 CPUs
    caps["h100@x86_64"] = replace(caps["h100@x86_64"], fit=[(64, 8192)] * 8)  # 8 GiB
    assert Planner(site, ON).plan([cpu12], caps, NOW) == []
    caps["h100@x86_64"] = replace(caps["h100@x86_64"], fit=[(64, 10**6)] * 8)
    (m,) = Planner(site, ON).plan([cpu12], caps, NOW)
    assert m.to_pool == "h100@x86_64"
    # its own pool has two V100s free on one node but not its CPUs: it still moves
    caps["v100@x86_64"] = replace(caps["v100@x86_64"], free=2, free_max_node=2, fit=[(4, 10**6)] * 2)
    assert [m.to_pool for m in Planner(site, ON).plan([cpu12], caps, NOW)] == ["h100@x86_64"]
    caps["v100@x86_64"] = replace(caps["v100@x86_64"], fit=[(16, 10**6)] * 2)  # now it has them
    assert Planner(site, ON).plan([cpu12], caps, NOW) == []
    # two 12-CPU jobs, one H100 node with room for one of them: the second is not sent there
    caps = idle(site, v100=0, a100_80gb=0)
    caps["h100@x86_64"] = replace(caps["h100@x86_64"], fit=[(20, 10**6)] * 8)
    old, new = replace(cpu12, job_id=8, submit_time=NOW - 900), replace(cpu12, job_id=9)
    assert [m.job_id for m in Planner(site, ON).plan([new, old], caps, NOW)] == [8]
    assert caps["h100@x86_64"].fit == [(20, 10**6)] * 8  # the caller's capacity is not changed


def test_a_whole_node_memory_job_moves_only_to_a_node_with_none_allocated(site: Site) -> None:
    """`--mem=0`: squeue shows memory 0, the bridge's record says "mem": "node". The job
    moves only where a node has all its memory free, and takes that memory from the next
    move; read as squeue shows it, it would go to a node with memory in use and wait there."""
    mem = {p.key: p.mem_mib for p in pools(site)}
    whole = replace(job({**NVIDIA2, "mem": "node"}), cpus_node=2, mem_node_mib=0)
    caps = idle(site, v100=0)
    caps["a100-80gb@x86_64"] = replace(caps["a100-80gb@x86_64"], fit=[(64, mem["a100-80gb@x86_64"] - 1024)] * 4)
    caps["h100@x86_64"] = replace(caps["h100@x86_64"], fit=[(64, mem["h100@x86_64"])] * 8)
    (m,) = Planner(site, ON).plan([whole], caps, NOW)
    assert (m.to_pool, m.mem_mib) == ("h100@x86_64", mem["h100@x86_64"])
    said_nothing = replace(job(NVIDIA2), cpus_node=2, mem_node_mib=0)
    assert [m.to_pool for m in Planner(site, ON).plan([said_nothing], caps, NOW)] == ["a100-80gb@x86_64"]
    # two such jobs, one idle H100 node: the second does not count on the memory the first took
    second = replace(whole, job_id=9, submit_time=NOW - 500)
    assert [(m.job_id, m.to_pool) for m in Planner(site, ON).plan([whole, second], caps, NOW)] == [
        (7, "h100@x86_64")]
    # its own pool's node with all its memory free: it stays; with 1 GiB taken there: it moves
    v100 = mem["v100@x86_64"]
    caps["v100@x86_64"] = replace(caps["v100@x86_64"], free=2, free_max_node=2, fit=[(16, v100)] * 2)
    assert Planner(site, ON).plan([whole], caps, NOW) == []
    caps["v100@x86_64"] = replace(caps["v100@x86_64"], fit=[(16, v100 - 1024)] * 2)
    (m,) = Planner(site, ON).plan([whole], caps, NOW)
    assert m.to_pool == "h100@x86_64" and f"with 2 CPUs and {v100} MiB" in m.why, m.why


def test_a_move_leaves_a_lower_bound_whichever_node_it_takes(site: Site) -> None:
    """H100 node A: 2 free, 64 CPUs; node B: 4 free, 4 CPUs. A one-GPU 12-CPU job can only go
    to A; after it, no node has two GPUs and 12 CPUs free, so a second job asking that stays."""
    caps = idle(site, v100=0, a100_80gb=0, gh200=0)
    caps["h100@x86_64"] = replace(caps["h100@x86_64"], free=6, free_max_node=4,
                                  fit=[(64, 10**6), (64, 10**6), (4, 10**6), (4, 10**6)])
    one = replace(job(ANY1, jid=8, tres="gres:gpu:1", submitted=NOW - 900), cpus_node=12)
    two = replace(job(NVIDIA2, jid=9), cpus_node=12)
    assert [(m.job_id, m.to_pool) for m in Planner(site, ON).plan([two, one], caps, NOW)] == [
        (8, "h100@x86_64")]


def test_a_move_says_when_cpus_not_devices_were_missing(site: Site) -> None:
    caps = idle(site)
    caps["v100@x86_64"] = replace(caps["v100@x86_64"], fit=[(4, 10**6)] * 4)
    (m,) = Planner(site, ON).plan([replace(job(NVIDIA2), cpus_node=12, mem_node_mib=2048)], caps, NOW)
    assert m.why.startswith("moved: v100@x86_64 cannot start it now (2 free on one node, but not "
                            "with 12 CPUs and 2048 MiB), a100-80gb@x86_64 can"), m.why


ANY1 = {"hetero": 1, "accel": "nvidia:1", "pool": "v100@x86_64", "model": "v100", "n": 1,
        "cands": "v100@x86_64:1,a100-80gb@x86_64:1,gh200@aarch64:1,h100@x86_64:1", "movable": True}


def test_across_arch_rewrites_only_the_bridge_arch(site: Site) -> None:
    caps = idle(site, v100=0, a100_80gb=0, h100=0)
    m = Planner(site, ON).plan([job(ANY1, tres="gres:gpu:1")], caps, NOW)[0]
    assert (m.to_pool, m.tres_per_node, m.features) == ("gh200@aarch64", "gres:gpu:1", "aarch64&gh200")
    m = Planner(site, ON).plan([job(ANY1, features="(ib|opa)&x86_64&v100")], caps, NOW)[0]
    assert m.features == "(ib|opa)&aarch64&gh200"
    # A user constraint not in the bridge's shape, or an image whose variants chose the arch: stays.
    assert Planner(site, ON).plan([job(ANY1, features="ib&x86_64&v100")], caps, NOW) == []
    assert Planner(site, ON).plan([job({**ANY1, "image": "pytorch:1"})], caps, NOW) == []


ANY2 = {"hetero": 1, "accel": "any:2", "pool": "v100@x86_64", "model": "v100", "n": 2,
        "cands": "v100@x86_64:2,ascend-910b@aarch64:2,a100-80gb@x86_64:2,h100@x86_64:2", "movable": True}


def test_gres_kind_is_kept_unless_the_site_allows(site: Site) -> None:
    caps = idle(site, v100=0, a100_80gb=0, h100=0)
    assert Planner(site, ON).plan([job(ANY2)], caps, NOW) == []
    across = replace(ON, across_gres=True)
    m = Planner(site, across).plan([job(ANY2)], caps, NOW)[0]
    assert (m.to_pool, m.tres_per_node, m.partition, m.features) == \
        ("ascend-910b@aarch64", "gres:npu:2", "npu", "aarch64&ascend-910b")
    # A GPU clock policy has no meaning on an NPU.
    assert Planner(site, across).plan([job({**ANY2, "energy": "efficiency"})], caps, NOW) == []


def test_site_section(site: Site) -> None:
    assert site.migration == MigrationSettings()  # off unless the site says
    text = DEMO.read_text()
    s = load_site_text(text + "\nmigration: {pending: true, pending_after: 2min, max_moves: 1}\n", "m.yaml")
    assert s.migration == MigrationSettings(pending=True, pending_after_s=120, max_moves=1)
    with pytest.raises(SiteError) as e:
        load_site_text(text + "\nmigration: {pending: true, pending_after: soon}\n", "m.yaml")
    assert "migration.pending_after" in str(e.value)


RUNNING_ON = MigrationSettings(pending=True, pending_after_s=60, max_moves=2, running=True,
                               running_gain=0.25, restart_cost_s=60)
MIGRATABLE = {**NVIDIA2, "checkpoint": "/scratch/ck", "migratable": True}


def running(record: dict[str, Any], limit_min: int = 60, ran_s: float = 600) -> QueuedJob:
    return replace(job(record, reason="None"), state="RUNNING", start_time=NOW - ran_s, time_limit_min=limit_min)


def test_a_running_migratable_job_is_requeued_into_a_pool_that_frees_up(site: Site) -> None:
    caps = idle(site, v100=0)  # it runs on the V100s; the A100s and H100 are free
    (r,) = Planner(site, RUNNING_ON).plan_running([running(MIGRATABLE)], caps, NOW)
    # 50 min left on 2 V100s (0.82 units); on 2 A100s (2 units): 60 s + 50 x 0.41 min = 21.5 min.
    assert (r.from_pool, r.to_pool) == ("v100@x86_64", "a100-80gb@x86_64")
    rec = json.loads(r.comment)
    assert rec["migrate_to"] == "a100-80gb@x86_64" and rec["moves"] == 1 and rec["pool"] == "v100@x86_64"
    assert rec["migrated"] is True
    assert "22 min left there instead of 50 min" in r.why
    # Once it is pending again (the requeue's begin-time hold), it moves there at once.
    back = replace(job(rec, reason="BeginTime", submitted=NOW - 5))
    (m,) = Planner(site, RUNNING_ON).plan([back], caps, NOW)
    assert (m.to_pool, m.features, m.release) == ("a100-80gb@x86_64", "x86_64&a100-80gb", True)
    moved = json.loads(m.comment)
    assert "migrate_to" not in moved and moved["moves"] == 1 and moved["pool"] == "a100-80gb@x86_64"


def test_a_moves_cpus_are_not_free_for_a_requeue_in_the_same_round(site: Site) -> None:
    """The daemon takes each move from the capacity before it plans requeues (its round): the
    move's CPUs and memory too, or a running job is requeued into the node the move took."""
    caps = idle(site, v100=0, a100_80gb=0, gh200=0)  # the H100s' nodes: 20 CPUs free
    caps["h100@x86_64"] = replace(caps["h100@x86_64"], fit=[(20, 10**6)] * 8)
    waiting = replace(job(NVIDIA2, jid=8), cpus_node=12, mem_node_mib=4096)
    (m,) = Planner(site, RUNNING_ON).plan([waiting], caps, NOW)
    assert (m.to_pool, m.cpus, m.mem_mib) == ("h100@x86_64", 12, 4096)
    on_v100 = replace(running(MIGRATABLE), job_id=9, cpus_node=12)
    assert Planner(site, RUNNING_ON).plan_running([on_v100], caps, NOW)  # room before the move
    take_moves(caps, [m])  # as the daemon's round does, between the two
    assert caps["h100@x86_64"].fit == [(8, 10**6 - 4096)] * 6
    assert Planner(site, RUNNING_ON).plan_running([on_v100], caps, NOW) == []


@pytest.mark.parametrize(("why", "j", "policy"), [
    ("running migration off", running(MIGRATABLE), ON),
    ("not migratable", running({**MIGRATABLE, "migratable": False}), RUNNING_ON),
    ("no checkpoint", running({k: v for k, v in MIGRATABLE.items() if k != "checkpoint"}), RUNNING_ON),
    ("just started", running(MIGRATABLE, ran_s=30), RUNNING_ON),
    # 1 min left: the 60 s restart alone eats it, even on the H100s (4.86 units)
    ("too little left to gain", running(MIGRATABLE, limit_min=11, ran_s=600), RUNNING_ON),
    ("moved max_moves times", running({**MIGRATABLE, "moves": 2}), RUNNING_ON),
    ("migrated once already", running({**MIGRATABLE, "migrated": True}), RUNNING_ON),
    ("pending, not running", job(MIGRATABLE), RUNNING_ON),
])
def test_running_jobs_that_stay(site: Site, why: str, j: QueuedJob, policy: MigrationSettings) -> None:
    assert Planner(site, policy).plan_running([j], idle(site, v100=0), NOW) == [], why


def test_the_prediction_says_how_much_is_left(site: Site) -> None:
    # Predicted to end in a minute although its limit is 50 min away: not worth a restart.
    j = running({**MIGRATABLE, "pred": {"p50": 660, "p90": 900}}, limit_min=60, ran_s=600)
    assert Planner(site, RUNNING_ON).plan_running([j], idle(site, v100=0), NOW) == []
    j = running({**MIGRATABLE, "pred": {"p50": 3600, "p90": 4000}}, limit_min=60, ran_s=600)
    assert len(Planner(site, RUNNING_ON).plan_running([j], idle(site, v100=0), NOW)) == 1


def test_a_faster_pool_can_pay_for_a_restart_a_slower_one_cannot(site: Site) -> None:
    # 2 min left: 2 A100s (60 s + 49 s) save 11 s, under a quarter; the H100s (60 s + 20 s) save 40 s.
    (r,) = Planner(site, RUNNING_ON).plan_running([running(MIGRATABLE, limit_min=12)], idle(site, v100=0), NOW)
    assert r.to_pool == "h100@x86_64"


def test_running_migration_needs_pending(site: Site) -> None:
    with pytest.raises(SiteError) as e:
        load_site_text(DEMO.read_text() + "\nmigration: {running: true}\n", "m.yaml")
    assert "migration.running" in str(e.value)
