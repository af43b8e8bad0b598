"""`slurm-hetero why JOBID` on the demo site: Slurm's reasons in words, the pool a job waits
for and who holds it, both start estimates, each suggestion rule with its negative cases,
who may ask, and the command's exit codes. Jobs are crafted from a job of the captured
22.05 `squeue --json` (tests/data/captured/squeue-json-22.05.json), so they have its shape."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.errors import InputError
from slurm_hetero.reports import why as W
from slurm_hetero.site import Site, load_site
from slurm_hetero.site.load import load_site_text
from slurm_hetero.slurm.commands import (
    ASSOC_LIMIT_FIELDS,
    QOS_LIMIT_FIELDS,
    sacctmgr_qos_limits_argv,
    squeue_start_argv,
)
from slurm_hetero.slurm.runner import Runner
from tests.fakeslurm import FakeSlurm

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"
DEMO = ROOT / "site" / "demo" / "site.yaml"
SQUEUE_2205 = json.loads((CAPTURED / "squeue-json-22.05.json").read_text())
TEMPLATE = SQUEUE_2205["jobs"][5]  # job 6: a running 1-H100 job (its comment imitates scontrol text)
NOW = 1_796_200_000.0
GPU_NODES = {"a100-01": "gpu:a100-80gb:4", "a100-02": "gpu:a100-80gb:4", "h100-01": "gpu:h100:8",
             "gh200-01": "gpu:gh200:1", "v100-01": "gpu:v100:4,shard:16", "npu-01": "npu:910b:8",
             "npu-02": "npu:910b:8"}
ARCH = {"gh200-01": "aarch64", "npu-01": "aarch64", "npu-02": "aarch64"}


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(DEMO)


def job(job_id: int, *, state: str = "RUNNING", reason: str = "None", gres: str = "gpu:h100:1",
        nodes: str = "h100-01", node_count: int = 1, start: float = NOW - 600, limit_min: int = 60,
        user: str = "bob", uid: int = 1001, qos: str = "gold", comment: str = "", priority: int = 10000,
        features: str = "", account: str = "root", cpus: int = 1, submit: float | None = None) -> dict[str, Any]:
    """A job in the shape of the captured 22.05 answer."""
    j: dict[str, Any] = copy.deepcopy(TEMPLATE)
    parts = gres.split(":")
    name, gtype, n = (parts[0], parts[1], parts[2]) if len(parts) == 3 else (parts[0], "", parts[1])
    count = int(n) * node_count
    typed = f",gres/{name}:{gtype}={count}" if gtype else ""
    req = f"cpu={cpus},mem=1G,node={node_count},billing=1,gres/{name}={count}{typed}"
    j.update(job_id=job_id, job_state=state, state_reason=reason, tres_per_node=f"gres:{gres}",
             user_name=user, user_id=uid, qos=qos, admin_comment=comment, priority=priority,
             features=features, account=account, node_count=node_count, time_limit=limit_min,
             submit_time=submit or NOW - 900, eligible_time=submit or NOW - 900, tres_req_str=req,
             comment="", dependency="")
    if state == "RUNNING":
        j.update(nodes=nodes, start_time=start, tres_alloc_str=req,
                 gres_detail=[f"{name}:{gtype}:{n}(IDX:0-{int(n) - 1})" if gtype else f"{name}:{n}"]
                 * node_count)
    else:
        j.update(nodes="", start_time=0, tres_alloc_str="", gres_detail=[])
    return j


def queue(*jobs: dict[str, Any]) -> str:
    return json.dumps({"meta": SQUEUE_2205["meta"], "errors": [], "jobs": list(jobs)})


def sinfo(used: dict[str, int] | None = None, down: tuple[str, ...] = ()) -> str:
    """`sinfo -N -h -O` capacity lines of the demo's accelerator nodes, `used` devices each."""
    lines = []
    for node, gres in GPU_NODES.items():
        first = gres.split(",")[0]
        name_type = first.rsplit(":", 1)[0]
        n = (used or {}).get(node, 0)
        state = "drained" if node in down else ("mixed" if n else "idle")
        lines.append(f"{node}|{state}|{gres}|{name_type}:{n}(IDX:N/A)|{ARCH.get(node, 'x86_64')},x|")
    return "\n".join(lines) + "\n"


def inputs(target: dict[str, Any], others: list[dict[str, Any]], used: dict[str, int] | None = None,
           qos: str | None = None, assoc: str | None = None, start: str | None = None,
           down: tuple[str, ...] = ()) -> W.Inputs:
    jobs = W.parse_queue(queue(target, *others))
    me = next(j for j in jobs if j.job_id == target["job_id"])
    return W.Inputs(me, None, jobs, sinfo(used, down), W.parse_qos_limits(qos) if qos is not None else None,
                    W.parse_limit_rows(assoc, ASSOC_LIMIT_FIELDS) if assoc is not None else None, start)


def qos_line(name: str, priority: int, grp: str = "", max_pu: str = "", max_tres: str = "") -> str:
    row = dict.fromkeys(QOS_LIMIT_FIELDS, "")
    row.update(Name=name, Priority=str(priority), GrpTRES=grp, MaxTRESPU=max_pu, MaxTRES=max_tres)
    return "|".join(row[f] for f in QOS_LIMIT_FIELDS)


def pred_comment(p50: int, p90: int, **more: Any) -> str:
    return json.dumps({"hetero": 1, "pred": {"p50": p50, "p90": p90}, **more}, separators=(",", ":"))


def kinds(w: W.Why) -> list[str]:
    return [s.kind for s in w.suggestions]


# ---- reasons ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "kind", "words"), [
    ("Resources", "wait", "in use by running jobs"),
    ("Priority", "wait", "higher priority"),
    ("Dependency", "dependency", "depends on"),
    ("JobHeldUser", "hold", "its owner"),
    ("JobHeldAdmin", "hold", "administrator"),
    ("BeginTime", "time", "earliest start time"),
    ("ReqNodeNotAvail", "nodes", "down, drained or reserved"),
    ("PartitionTimeLimit", "never", "longer than its partition allows"),
    ("QOSGrpGRES", "limit", "its QoS's running jobs together hold all the GPUs/NPUs"),
    ("QOSMaxGRESPerUser", "limit", "one user may hold in its QoS"),
    ("AssocGrpGRES", "limit", "its association (account/user)'s running jobs"),
    ("QOSGrpCpuLimit", "limit", "all the CPUs it allows"),
    ("AssocGrpCPUMinutesLimit", "limit", "budget of CPUs-minutes"),
    ("QOSMaxGRESPerJob", "never", "more GPUs/NPUs (GRES) than its QoS allows one job"),
    ("None", "wait", "has not looked at it yet"),
    ("SomethingNew", "other", "'SomethingNew'"),
])
def test_reasons_in_plain_words(code: str, kind: str, words: str) -> None:
    r = W.explain_reason(code)
    assert (r.code, r.kind) == (code, kind) and words in r.words, r


@pytest.mark.parametrize(("code", "field", "prefix"), [
    ("QOSGrpGRES", "GrpTRES", "gres/"), ("QOSMaxGRESPerUser", "MaxTRESPU", "gres/"),
    ("AssocGrpGRES", "GrpTRES", "gres/"), ("QOSGrpCpuLimit", "GrpTRES", "cpu"),
    ("AssocGrpCPUMinutesLimit", "GrpTRESMins", "cpu"), ("QOSGrpGRESRunMinutes", "GrpTRESRunMins", "gres/"),
    ("QOSMaxGRESPerNode", "MaxTRESPerNode", "gres/"), ("MaxGRESPerAccount", "MaxTRESPA", "gres/"),
    ("QOSMaxMemoryPerUser", "MaxTRESPU", "mem"), ("AssocGrpMemRunMinutes", "GrpTRESRunMins", "mem"),
    ("QOSMinCpuNotSatisfied", "MinTRES", "cpu"), ("QOSMaxJobsPerUserLimit", "MaxJobsPU", None),
    ("AssocMaxJobsLimit", "MaxJobs", None), ("QOSMaxSubmitJobPerUserLimit", "MaxSubmitPU", None),
    ("QOSGrpSubmitJobsLimit", "GrpSubmit", None), ("QOSMaxWallDurationPerJobLimit", "MaxWall", None),
    ("AssocGrpWallLimit", "GrpWall", None), ("AssocMaxCpuMinutesPerJobLimit", "MaxTRESMins", "cpu"),
    ("QOSGrpNodeLimit", "GrpTRES", "node"), ("AssocGrpBillingMinutes", "GrpTRESMins", "billing"),
])
def test_every_limit_family_names_its_sacctmgr_field(code: str, field: str, prefix: str | None) -> None:
    ref = W.limit_ref(code)
    assert ref is not None and ref.sacctmgr_field == field and ref.tres_prefix == prefix


# ---- reading ---------------------------------------------------------------------------------


def test_captured_queues_parse_and_devices_come_from_structure(site: Site) -> None:
    view = W.site_view(site)
    jobs = {j.job_id: j for j in W.parse_queue((CAPTURED / "squeue-json-22.05.json").read_text())}
    assert jobs[8].pending and jobs[8].reason == "JobHeldUser" and jobs[6].holding
    # Job 6's comment imitates `scontrol show job -d` with 8 H100: its gres_detail says 1.
    assert W.held_devices(jobs[6], view) == [("h100-01", "h100@x86_64", 1)]
    assert W.held_devices(jobs[3], view) == []  # completed: holds nothing
    need = W.job_need(jobs[7], view)
    assert need is not None and need.pools == ("v100@x86_64",)
    later = {j.job_id: j for j in W.parse_queue((CAPTURED / "squeue-json-24.11.json").read_text())}
    assert later[3].pending and later[3].tres_per_node == "gres/gpu:h100:1"
    n = W.job_need(later[3], view)
    assert n is not None and n.pools == ("h100@x86_64",) and n.per_node == 1
    # A floating job (placement.float): untyped GRES, its pools ORed in its features.
    floating = W.parse_queue(queue(job(41, state="PENDING", reason="Resources", gres="gpu:2",
                                       features="x86_64&(v100|h100)")))[0]
    n = W.job_need(floating, view)
    assert n is not None and set(n.pools) == {"v100@x86_64", "h100@x86_64"} and n.per_node == 2
    # 24.11 prints a GRES without File= as `npu:910b(CNT:2)`.
    raw = job(40, gres="npu:910b:2", nodes="npu-01")
    raw["gres_detail"] = ["npu:910b(CNT:2)"]
    assert W.held_devices(W.parse_queue(queue(raw))[0], view) == [("npu-01", "ascend-910b@aarch64", 2)]


def test_node_capacity_agrees_with_the_bridge_snapshot(site: Site) -> None:
    from slurm_hetero.bridge.snapshot import build_snapshot

    text = sinfo({"h100-01": 6, "a100-01": 1}, down=("a100-02",))
    caps = build_snapshot(site, text, [])
    per_node = W.node_capacity(W.site_view(site), text)
    for key, c in caps.items():
        assert sum(n.free for n in per_node if n.pool == key) == c.free, key
    assert caps["a100-80gb@x86_64"].free == 3  # the drained node's devices are not free


def test_the_bridge_tables_match(site: Site) -> None:
    from slurm_hetero.conf.bridge import bridge_context
    from slurm_hetero.reports.jobid import check_job_id
    from slurm_hetero.reports.jobpage import WHY

    groups = cast(dict[str, list[str]], bridge_context(site)["model_groups"])
    assert {k: tuple(v) for k, v in groups.items()} == W.site_view(site).groups
    # why.py's own imports, not its API (mypy wants them re-exported): checked as it binds them
    why_module: Any = W
    assert why_module.BRIDGE_WHY is WHY  # one table for both commands (reports/jobid.py)
    # ...with words for every reason bridge.lua's pool choice returns
    from slurm_hetero.conf.bridge import bridge_source
    returned = re.findall(r'return best, (?:best\.now and )?"([a-z-]+)"(?: or "([a-z-]+)")?', bridge_source())
    assert {w for pair in returned for w in pair if w} == set(WHY)
    for bad in ("12x", "", "0", "-1", "1_2"):
        with pytest.raises(InputError):
            why_module.check_job_id(bad)
        with pytest.raises(InputError):
            check_job_id(bad)


def test_sacctmgr_and_squeue_lines() -> None:
    text = qos_line("gold", 500, grp="gres/gpu:h100=4,cpu=64") + "\nshort|line\n"
    rows = W.parse_qos_limits(text)
    assert list(rows) == ["gold"] and rows["gold"]["GrpTRES"] == "gres/gpu:h100=4,cpu=64"
    assert sacctmgr_qos_limits_argv()[:6] == ["sacctmgr", "-i", "-n", "-P", "show", "qos"]
    assert squeue_start_argv(12) == ["squeue", "--start", "-h", "-j", "12", "-o", "%i %S"]
    with pytest.raises(ValueError):
        squeue_start_argv("12 -u x")
    assert W.parse_start("12 N/A\n", 12) is None and W.parse_start("12 1796200300\n", 12) == 1796200300.0
    assert W.parse_slurm_user_uid("SlurmUser               = slurm(64030)\n") == 64030
    assert W.parse_slurm_user_uid("SlurmUser = x\n") is None
    for bad in ("{}", "[]", '{"jobs": 3}'):
        with pytest.raises(ValueError, match="no jobs list"):
            W.parse_queue(bad)


# ---- the pool and the estimates --------------------------------------------------------------


def test_pool_occupancy_with_limit_and_predicted_ends(site: Site) -> None:
    a = job(10, gres="gpu:h100:6", start=NOW - 600, limit_min=60, comment=pred_comment(1200, 1800))
    b = job(11, gres="gpu:h100:2", start=NOW - 300, limit_min=30, user="carol", uid=1002)
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:4", user="alice", uid=1000)
    w = W.build_why(inputs(mine, [a, b], used={"h100-01": 8}), site, now=NOW)
    pool = w.pool
    assert pool is not None and pool["key"] == "h100@x86_64"
    assert (pool["free"], pool["total"], pool["per_node"]) == (0, 8, 4)
    running = {h["job"]: h for h in pool["running"]}
    assert running[10]["devices"] == 6 and running[10]["ends_by_limit"] == NOW - 600 + 3600
    assert running[10]["ends_p50"] == NOW - 600 + 1200 and running[10]["ends_p90"] == NOW - 600 + 1800
    assert running[11]["ends_p50"] is None and running[11]["ends_by_limit"] == NOW - 300 + 1800
    # Ours, likely: job 10's p90 end (NOW+1200) frees 6: with 2 of job 11 still held, 6 >= 4. At
    # the earliest its p50 end (NOW+600); at the latest its limit's (job 11's 2 are not enough).
    assert w.estimates["ours"] == NOW + 1200 and running[10]["likely_end"] == NOW + 1200
    assert (w.estimates["ours_earliest"], w.estimates["ours_latest"]) == (NOW + 600, NOW - 600 + 3600)
    assert w.reason is not None and w.reason.code == "Resources"


def test_our_estimate_counts_the_jobs_ahead(site: Site) -> None:
    a = job(10, gres="gpu:h100:8", start=NOW - 600, limit_min=60, comment=pred_comment(1200, 1800))
    ahead = job(13, state="PENDING", reason="Resources", gres="gpu:h100:8", priority=20000, limit_min=20)
    mine = job(12, state="PENDING", reason="Priority", gres="gpu:h100:4", user="alice", uid=1000)
    held = job(14, state="PENDING", reason="JobHeldUser", gres="gpu:h100:8", priority=30000)
    w = W.build_why(inputs(mine, [a, ahead, held], used={"h100-01": 8}), site, now=NOW)
    # Job 13 goes first at job 10's p90 end (NOW+1200; at the earliest its p50's, NOW+600) for its
    # 20-minute limit; the held job takes nothing.
    assert w.estimates["ours"] == NOW + 1200 + 1200 and w.estimates["ours_earliest"] == NOW + 600 + 1200
    assert w.estimates["ahead"] == 1
    assert "the 1 job(s) ahead" in w.estimates["ours_basis"]


def test_jobs_ahead_go_in_priority_order_not_queue_order(site: Site) -> None:
    a = job(10, gres="gpu:h100:8", start=NOW - 600, limit_min=20)  # frees all 8 at NOW+600
    low = job(13, state="PENDING", reason="Priority", gres="gpu:h100:8", priority=15000, limit_min=30)
    high = job(14, state="PENDING", reason="Resources", gres="gpu:h100:4", priority=20000, limit_min=10)
    mine = job(12, state="PENDING", reason="Priority", gres="gpu:h100:4", user="alice", uid=1000)
    w = W.build_why(inputs(mine, [a, low, high], used={"h100-01": 8}), site, now=NOW)
    # 14 (4 devices) then 13 (8: waits for 14's end at NOW+1200) then this job after 13's 30 minutes.
    assert w.estimates["ours"] == NOW + 1200 + 1800


def test_without_sinfo_nothing_is_guessed(site: Site) -> None:
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", user="alice", uid=1000)
    jobs = W.parse_queue(queue(job(10, gres="gpu:h100:8"), mine))
    w = W.build_why(W.Inputs(jobs[1], None, jobs), site, now=NOW)
    assert w.suggestions == [] and w.estimates["ours"] is None
    assert any("sinfo did not answer" in n for n in w.notes)


def test_simulation_without_ends_says_never() -> None:
    assert W.simulate_starts({"n": 0}, [], [(1, 1, None)], 0.0) == [None]
    assert W.simulate_starts({"n": 2}, [], [(1, 1, None), (1, 1, None), (1, 1, None)], 5.0) == [5.0, 5.0, None]


def test_slurm_estimate_from_json_or_squeue_start(site: Site) -> None:
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:4", user="alice", uid=1000)
    w = W.build_why(inputs(mine, [], used={"h100-01": 8}, start="12 1796203600\n"), site, now=NOW)
    assert w.estimates["slurm"] == 1796203600.0 and w.estimates["slurm_source"] == "squeue --start"
    mine["start_time"] = NOW + 100
    w = W.build_why(inputs(mine, [], used={"h100-01": 8}), site, now=NOW)
    assert w.estimates["slurm"] == NOW + 100 and "start_time" in w.estimates["slurm_source"]


# ---- suggestions: another model or arch ------------------------------------------------------


def test_a_pinned_job_is_shown_the_free_models_of_its_vendor(site: Site) -> None:
    filler = job(10, gres="gpu:h100:8")
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", user="alice", uid=1000)
    w = W.build_why(inputs(mine, [filler], used={"h100-01": 8}), site, now=NOW)
    models = [s for s in w.suggestions if s.kind == "model"]
    # Cheapest first (normalized units, as the bridge orders pools that start now); the GH200
    # has one device per node and the Ascend 910B is not an NVIDIA model: neither is offered.
    assert [s.options for s in models] == [("--accel=v100:2",), ("--accel=a100-80gb:2",)]
    assert "--accel=nvidia:2 lets the bridge choose" in models[0].what
    assert "in place of --gres=gpu:h100:2" in models[0].what
    assert any("live capacity" in c for c in models[0].checked_against)
    assert any("the --accel=nvidia group" in c for c in models[0].checked_against)


def test_no_model_suggestion_when_nothing_fits(site: Site) -> None:
    full = {n: 8 if "npu" in n or "h100" in n else 4 for n in GPU_NODES} | {"gh200-01": 1}
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", user="alice", uid=1000)
    w = W.build_why(inputs(mine, [], used=full), site, now=NOW)
    assert kinds(w) == []
    # Free devices on a drained node are not free.
    w = W.build_why(inputs(mine, [], used=full | {"v100-01": 0}, down=("v100-01",)), site, now=NOW)
    assert kinds(w) == []
    assert "--accel=v100:2" in str(W.build_why(inputs(mine, [], used=full | {"v100-01": 0}), site, now=NOW))


def test_no_model_the_site_lacks(site: Site) -> None:
    """A site without V100s is never told to use the V100 node sinfo still lists."""
    text = DEMO.read_text()
    start = text.index("  - names: v100-01")
    end = text.index("  - names: npu-[01-02]")
    no_v100 = load_site_text(text[:start] + text[end:], "no-v100", DEMO)
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", user="alice", uid=1000)
    w = W.build_why(inputs(mine, [], used={"h100-01": 8}), no_v100, now=NOW)
    models = [s.options[0] for s in w.suggestions if s.kind == "model"]
    assert models == ["--accel=a100-80gb:2"]


def test_the_users_arch_and_memory_floor_hold(site: Site) -> None:
    # --accel=nvidia:1 --arch=aarch64 waits on the GH200: the free x86 pools are not its arch.
    rec = {"hetero": 1, "accel": "nvidia:1", "arch": "aarch64", "pool": "gh200@aarch64", "model": "gh200"}
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:gh200:1", features="aarch64",
               comment=json.dumps(rec), user="alice", uid=1000)
    w = W.build_why(inputs(mine, [], used={"gh200-01": 1}), site, now=NOW)
    assert kinds(w) == []
    # --accel=nvidia:2,mem>=80G: the 32 GB V100 is not offered, the 80 GB A100 is.
    rec = {"hetero": 1, "accel": "nvidia:2,mem>=80G", "pool": "h100@x86_64", "model": "h100"}
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", features="x86_64",
               comment=json.dumps(rec), user="alice", uid=1000)
    w = W.build_why(inputs(mine, [], used={"h100-01": 8}), site, now=NOW)
    models = [s for s in w.suggestions if s.kind == "model"]
    assert [s.options for s in models] == [("--accel=a100-80gb:2",)]
    assert "within" not in models[0].what and "your request" in models[0].checked_against[1]


def test_a_job_too_big_for_the_other_nodes_is_not_moved(site: Site) -> None:
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", cpus=70, user="alice", uid=1000)
    w = W.build_why(inputs(mine, [], used={"h100-01": 8}), site, now=NOW)
    # 70 CPUs: a V100 node has 80, an A100 node 64.
    assert [s.options for s in w.suggestions if s.kind == "model"] == [("--accel=v100:2",)]


# ---- suggestions: fewer devices, a shorter limit, another tier --------------------------------


def test_fewer_devices_when_some_are_free(site: Site) -> None:
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:4", user="alice", uid=1000)
    busy = {n: 8 if "npu" in n else 4 for n in GPU_NODES} | {"gh200-01": 1, "h100-01": 6}
    w = W.build_why(inputs(mine, [], used=busy), site, now=NOW)
    fewer = [s for s in w.suggestions if s.kind == "fewer"]
    assert [s.options for s in fewer] == [("--gres=gpu:h100:2",)]
    w = W.build_why(inputs(mine, [], used=busy | {"h100-01": 8}), site, now=NOW)
    assert "fewer" not in kinds(w)  # none free: no smaller count starts either


def test_a_shorter_limit_only_where_backfill_has_a_window(site: Site) -> None:
    a = job(10, gres="gpu:h100:4", start=NOW - 600, limit_min=40)  # its limit ends at NOW+1800
    big = job(13, state="PENDING", reason="Resources", gres="gpu:h100:8", priority=20000)
    mine = job(12, state="PENDING", reason="Priority", gres="gpu:h100:2", limit_min=120, user="alice",
               uid=1000)
    busy = {n: 8 if "npu" in n else 4 for n in GPU_NODES} | {"gh200-01": 1, "h100-01": 4}
    w = W.build_why(inputs(mine, [a, big], used=busy), site, now=NOW)
    time_s = [s for s in w.suggestions if s.kind == "time"]
    # Backfill plans in whole minutes (NOW+1800 is 40 s into one) and starts jobs at its next
    # pass, up to 30 s away: the limit ends by NOW+1730.
    assert [s.options for s in time_s] == [("--time=28",)]
    assert "may start sooner with --time=28" in time_s[0].what and "Slurm's decision" in time_s[0].what
    assert time_s[0].command_hint == "scontrol update jobid=12 TimeLimit=28"
    # The job ahead has a planned start from Slurm: that is the window's end.
    big["start_time"] = NOW + 900
    w = W.build_why(inputs(mine, [a, big], used=busy), site, now=NOW)
    assert [s.options for s in w.suggestions if s.kind == "time"] == [("--time=13",)]
    big["start_time"] = 0
    # Negative cases: its limit already fits; its own p50 is longer than the window; nothing is free.
    short = dict(mine, time_limit=20)
    assert "time" not in kinds(W.build_why(inputs(short, [a, big], used=busy), site, now=NOW))
    slow = dict(mine, admin_comment=pred_comment(2400, 3600))
    assert "time" not in kinds(W.build_why(inputs(slow, [a, big], used=busy), site, now=NOW))
    full = busy | {"h100-01": 8}
    assert "time" not in kinds(W.build_why(inputs(mine, [a, big], used=full), site, now=NOW))
    # No job ahead of it in its pool: the free devices are kept for nobody.
    assert "time" not in kinds(W.build_why(inputs(mine, [a], used=busy), site, now=NOW))


def test_partition_time_limit_names_the_partitions_maximum(site: Site) -> None:
    mine = job(12, state="PENDING", reason="PartitionTimeLimit", gres="gpu:h100:2", limit_min=3 * 1440,
               user="alice", uid=1000)
    w = W.build_why(inputs(mine, [], used={"h100-01": 8}), site, now=NOW)
    assert [s.options for s in w.suggestions] == [("--time=48:00:00",)]
    assert w.suggestions[0].checked_against == ("site: partition gpu max_time 2-00:00:00",)
    assert w.estimates["ours"] is None and "PartitionTimeLimit" in w.estimates["ours_basis"]


QOS = "\n".join([qos_line("diamond", 1000, grp="gres/gpu:h100=4"), qos_line("gold", 500, grp="gres/gpu:h100=4"),
                 qos_line("silver", 100, grp="gres/gpu:h100=8"), qos_line("normal", 0)]) + "\n"


def test_qos_limit_reason_names_its_limit_and_other_tiers_with_room(site: Site) -> None:
    holders = [job(10, gres="gpu:h100:4", qos="gold"), job(11, gres="gpu:h100:2", qos="silver"),
               job(15, gres="gpu:h100:2", qos="diamond", nodes="h100-01")]
    mine = job(12, state="PENDING", reason="QOSGrpGRES", gres="gpu:h100:2", user="alice", uid=1000)
    w = W.build_why(inputs(mine, holders, used={"h100-01": 8}, qos=QOS), site, now=NOW)
    (fact,) = w.limits
    assert (fact.where, fact.field, fact.binding) == ("QoS gold", "GrpTRES", ("gres/gpu:h100",))
    assert fact.use == {"gres/gpu:h100": 4.0} and fact.need == {"gres/gpu:h100": 2.0}
    assert "gres/gpu:h100=4 (4 in use, this job asks 2) ← full" in fact.text()
    tiers = [s for s in w.suggestions if s.kind == "tier"]
    # silver: 2 of 8 in use; diamond: 2 of 4 in use leaves room for 2 too; "normal" is no tier of the site.
    assert [s.options for s in tiers] == [("--tier=diamond",), ("--tier=silver",)]
    assert w.as_dict()["reason"]["limit"][0]["field"] == "GrpTRES"
    # Ours: devices are free, the cap frees when gold's job 10 ends (its limit: no prediction).
    assert fact.frees_at == NOW - 600 + 3600 and w.estimates["ours"] == NOW - 600 + 3600


def test_another_model_only_where_the_gres_limit_has_room(site: Site) -> None:
    q = qos_line("gold", 500, grp="gres/gpu:h100=4,gres/gpu:v100=2") + "\n"
    holders = [job(10, gres="gpu:h100:4"), job(11, gres="gpu:v100:1", nodes="v100-01")]
    mine = job(12, state="PENDING", reason="QOSGrpGRES", gres="gpu:h100:2", user="alice", uid=1000)
    w = W.build_why(inputs(mine, holders, used={"h100-01": 4, "v100-01": 1}, qos=q), site, now=NOW)
    models = [s for s in w.suggestions if s.kind == "model"]
    # The V100s are free but gold may hold 2 of them and holds 1: the A100s (no cap) are offered.
    assert [s.options for s in models] == [("--accel=a100-80gb:2",)]
    q = qos_line("gold", 500, grp="gres/gpu:h100=4,gres/gpu:v100=4") + "\n"
    w = W.build_why(inputs(mine, holders, used={"h100-01": 4, "v100-01": 1}, qos=q), site, now=NOW)
    v100 = next(s for s in w.suggestions if s.options == ("--accel=v100:2",))
    assert any("gres/gpu:v100=4 (1 in use, this job asks 2)" in c for c in v100.checked_against)


def test_priority_with_free_devices_explains_backfill(site: Site) -> None:
    ahead = job(13, state="PENDING", reason="Resources", gres="gpu:h100:8", priority=20000)
    mine = job(12, state="PENDING", reason="Priority", gres="gpu:v100:2", user="alice", uid=1000)
    w = W.build_why(inputs(mine, [job(10, gres="gpu:h100:8"), ahead], used={"h100-01": 8}), site, now=NOW)
    assert any("job(s) 13 ahead of it in partition gpu" in n for n in w.notes)
    assert "model" not in kinds(w)  # its own pool has the devices: no other pool is offered
    assert w.estimates["ours"] == NOW


def test_no_tier_at_its_cap_and_none_the_association_refuses(site: Site) -> None:
    holders = [job(10, gres="gpu:h100:4", qos="gold"), job(11, gres="gpu:h100:8", qos="silver"),
               job(15, gres="gpu:h100:4", qos="diamond")]
    mine = job(12, state="PENDING", reason="QOSGrpGRES", gres="gpu:h100:2", user="alice", uid=1000)
    w = W.build_why(inputs(mine, holders, used={"h100-01": 8}, qos=QOS), site, now=NOW)
    assert "tier" not in kinds(w)
    assoc = "root|alice||gold,silver||||||||||||\n"
    w = W.build_why(inputs(mine, holders[:1], used={"h100-01": 8}, qos=QOS, assoc=assoc), site, now=NOW)
    assert [s.options for s in w.suggestions if s.kind == "tier"] == [("--tier=silver",)]


def test_a_per_user_limit_counts_only_the_users_jobs(site: Site) -> None:
    q = qos_line("gold", 500, max_pu="gres/gpu:h100=2") + "\n"
    holders = [job(10, gres="gpu:h100:2", user="alice", uid=1000), job(11, gres="gpu:h100:4")]
    mine = job(12, state="PENDING", reason="QOSMaxGRESPerUser", gres="gpu:h100:1", user="alice", uid=1000)
    w = W.build_why(inputs(mine, holders, used={"h100-01": 6}, qos=q), site, now=NOW)
    (fact,) = w.limits
    assert fact.field == "MaxTRESPU" and fact.use == {"gres/gpu:h100": 2.0} and fact.binding


def test_held_and_dependent_jobs(site: Site) -> None:
    mine = job(12, state="PENDING", reason="JobHeldUser", gres="gpu:h100:2", user="alice", uid=1000)
    w = W.build_why(inputs(mine, [], used={}), site, now=NOW)
    assert [s.command_hint for s in w.suggestions] == ["scontrol release 12"]
    dep = dict(mine, state_reason="Dependency", dependency="afterok:11(unfulfilled)")
    w = W.build_why(inputs(dep, [], used={}), site, now=NOW)
    assert w.suggestions == [] and "depends on: afterok:11(unfulfilled)" in w.notes


# ---- running and ended jobs ------------------------------------------------------------------


def test_a_running_job_says_how_long_it_waited_and_what_the_bridge_chose(site: Site) -> None:
    rec = {"hetero": 1, "accel": "any:1", "pool": "v100@x86_64", "model": "v100", "n": 1, "why": "starts-now",
           "pred": {"p50": 300, "p90": 600}}
    run = job(12, gres="gpu:v100:1", nodes="v100-01", start=NOW - 100, submit=NOW - 160,
              comment=json.dumps(rec))
    w = W.build_why(inputs(run, []), site, now=NOW)
    assert w.waited_s == 60 and w.bridge is not None and w.bridge["model"] == "v100"
    assert w.bridge["why_words"].startswith("a pool could start it at once")
    assert w.estimates["ends_p50"] == NOW + 200 and w.reason is None


def test_an_ended_job_is_read_from_accounting(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_hetero.slurm.jobrecord import parse_sacct_job_json

    rec = parse_sacct_job_json((CAPTURED / "sacct-json-job1-22.05.json").read_text(), 1)
    w = W.build_why(W.Inputs(None, rec, []), site, now=NOW)
    assert w.state == "COMPLETED" and w.bridge is not None and w.bridge["pool"] == "a100-80gb@x86_64"
    assert w.waited_s is not None and w.waited_s >= 0


# ---- who may ask, and the command ------------------------------------------------------------


ALICE = W.Caller(1000, "alice")


def fake(monkeypatch: pytest.MonkeyPatch, text: str, level: str = "None") -> FakeSlurm:
    missing = (CAPTURED / "sacct-json-missing-22.05.json").read_text()
    return (FakeSlurm(monkeypatch).on("squeue", lambda argv, env: text if "--json" in argv else "")
            .on("sinfo", sinfo({"h100-01": 8})).on("sacct", missing)
            .on("scontrol", "SlurmUser = slurm(64030)\n")
            .on("sacctmgr", lambda argv, env: f"{level}\n" if "user" in argv else ""))


def test_own_job_ok_anothers_refused(monkeypatch: pytest.MonkeyPatch, site: Site) -> None:
    text = queue(job(10, gres="gpu:h100:8"),
                 job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", user="alice", uid=1000))
    slurm = fake(monkeypatch, text)
    w = W.why_job(Runner(), "12", site, now=NOW, caller=ALICE)
    assert w.reason is not None and w.reason.code == "Resources"
    with pytest.raises(InputError, match="another user's job"):
        W.why_job(Runner(), "10", site, now=NOW, caller=ALICE)
    assert slurm.argvs("sacctmgr")[-1][-3:] == ["user", "alice", "format=AdminLevel"]
    assert W.why_job(Runner(), "10", site, now=NOW, caller=W.Caller(0, "root")).job_id == 10
    assert W.why_job(Runner(), "10", site, now=NOW, caller=W.Caller(64030, "slurm")).job_id == 10
    fake(monkeypatch, text, level="Operator")
    assert W.why_job(Runner(), "10", site, now=NOW, caller=ALICE).job_id == 10


def test_identity_is_the_process_uid_not_a_name(monkeypatch: pytest.MonkeyPatch, site: Site) -> None:
    """A job whose user_name reads "alice" but whose uid is another's stays another's."""
    text = queue(job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", user="alice", uid=1001))
    fake(monkeypatch, text)
    with pytest.raises(InputError, match="another user's job"):
        W.why_job(Runner(), "12", site, now=NOW, caller=ALICE)


def test_cli_exit_codes_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    text = queue(job(10, gres="gpu:h100:8"),
                 job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", user="alice", uid=1000))
    slurm = fake(monkeypatch, text)
    monkeypatch.setattr(W, "current_caller", lambda: ALICE)
    run = CliRunner()
    bad = run.invoke(main, ["why", "12x"])
    assert bad.exit_code == 2 and "JOBID '12x': not a job id" in bad.output and slurm.calls == []
    gone = run.invoke(main, ["why", "999"])
    assert gone.exit_code == 2 and "JOBID 999: no such job" in gone.output
    other = run.invoke(main, ["why", "10"])
    assert other.exit_code == 2 and "another user's job" in other.output
    ok = run.invoke(main, ["why", "12"])
    assert ok.exit_code == 0, ok.output
    assert "why: Resources" in ok.output and "h100@x86_64" in ok.output and "--accel=v100:2" in ok.output
    doc = json.loads(run.invoke(main, ["why", "12", "--json"]).output)
    assert set(doc) >= {"job", "state", "reason", "pool", "estimates", "suggestions", "waited_s"}
    assert doc["reason"]["code"] == "Resources" and doc["pool"]["running"][0]["job"] == 10
    assert set(doc["suggestions"][0]) == {"kind", "what", "command_hint", "options", "checked_against"}
    assert set(doc["estimates"]) == {"slurm", "slurm_source", "ours", "ours_basis", "ours_earliest",
                                     "ours_latest", "ahead"}
    # A job slurmctld no longer lists comes from sacct (job 1 of the captures, root's: root asks).
    by_id = {"1": (CAPTURED / "sacct-json-job1-22.05.json").read_text()}
    slurm.on("sacct", lambda argv, env: by_id.get(argv[-1], ""))
    monkeypatch.setattr(W, "current_caller", lambda: W.Caller(0, "root"))
    done = run.invoke(main, ["why", "1"])
    assert done.exit_code == 0, done.output
    assert "completed" in done.output and "chose 2 x a100-80gb in a100-80gb@x86_64" in done.output
    # Slurm's own estimate was asked of `squeue --start`, times as epoch seconds.
    starts = [c for c in slurm.calls if c.argv[:2] == ["squeue", "--start"]]
    assert starts and starts[0].env.get("SLURM_TIME_FORMAT") == "%s"


def test_user_text_stays_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job name that is rich markup prints as itself."""
    mine = job(12, state="PENDING", reason="Resources", gres="gpu:h100:2", user="alice", uid=1000)
    mine["name"] = "[red]x[/red] JobState=RUNNING"
    fake(monkeypatch, queue(job(10, gres="gpu:h100:8"), mine))
    monkeypatch.setattr(W, "current_caller", lambda: ALICE)
    out = CliRunner().invoke(main, ["why", "12"]).output
    assert "[red]x[/red] JobState=RUNNING" in out
