"""The cluster exporter on captured 22.05 output (squeue --json, sinfo) and the demo site,
through a runner that answers from those files."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurm_hetero.bridge.snapshot import PoolCapacity, to_lua
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.monitor.cluster import (
    ACCOUNTING_TIMEOUT_S,
    ClusterExporter,
    QueueEntry,
    SiteView,
    lost_device_seconds,
    node_state,
    parse_queue,
    policy_energy,
    prediction,
    snapshot_generated_at,
    summarize,
)
from slurm_hetero.site import Site, load_site
from slurm_hetero.site.pools import pools
from slurm_hetero.slurm.commands import sacctmgr_ping_argv, sinfo_capacity_argv, sinfo_nodes_argv
from slurm_hetero.slurm.events import parse_events
from slurm_hetero.slurm.parse import parse_sinfo_nodes
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import parse_job, parse_squeue_json, squeue_json_argv

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"
SQUEUE = (CAPTURED / "squeue-json-22.05.json").read_text()
SINFO = (CAPTURED / "sinfo-22.05.txt").read_text()
# The free devices per node (sinfo -O ... GresUsed) of the same idle nodes: all free.
CAPACITY = "".join(f"{n.name}|{n.state}|{n.gres or '(null)'}|gpu:0,npu:0,shard:0|{','.join(n.features)}|\n"
                   for n in parse_sinfo_nodes(SINFO).values())


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(ROOT / "site" / "demo" / "site.yaml")


class CapturedSlurm(Runner):
    """Answers squeue --json and both sinfo formats from captured output; counts what was run."""

    def __init__(self, squeue: str = SQUEUE, sinfo: str = SINFO, sacct: str = "", sacctmgr: str = "",
                 capacity: str = CAPACITY) -> None:
        super().__init__()
        self.answers = {"squeue": squeue, "sinfo": sinfo, "sacct": sacct, "sacctmgr": sacctmgr,
                        "sinfo -O": capacity}
        self.argvs: list[list[str]] = []

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        self.argvs.append(list(argv))
        key = "sinfo -O" if list(argv) == sinfo_capacity_argv() else argv[0]
        return subprocess.CompletedProcess(list(argv), 0, self.answers[key], "")


def scrape(exp: ClusterExporter) -> dict[str, list[tuple[dict[str, str], float]]]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exp)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_parse_queue_agrees_with_the_projects_parser() -> None:
    entries, problems = parse_queue(SQUEUE)
    jobs, _ = parse_squeue_json(SQUEUE)
    assert problems == [] and [e.job for e in entries] == jobs
    raw = json.loads(SQUEUE)["jobs"]
    assert [e.qos for e in entries] == [j["qos"] for j in raw]
    assert [e.tres_alloc for e in entries] == [j["tres_alloc_str"] for j in raw]


def test_bad_entries_are_skipped_and_named() -> None:
    doc = json.loads(SQUEUE)
    doc["jobs"].insert(1, {"job_id": "x"})
    entries, problems = parse_queue(json.dumps(doc))
    assert len(entries) == len(doc["jobs"]) - 1 and problems and "job entry 1" in problems[0]
    with pytest.raises(ValueError):
        parse_queue('{"nojobs": 1}')


def test_round_on_captured_output(site: Site) -> None:
    entries, _ = parse_queue(SQUEUE)
    nodes = parse_sinfo_nodes(SINFO)
    r = summarize(SiteView.of(site), entries, nodes, now=1796108800.0)
    units = {m.id: m.units for m in site.models_in_use}
    raw = {j["job_id"]: j for j in json.loads(SQUEUE)["jobs"]}
    running = {k for k, j in raw.items() if j["job_state"] == "RUNNING"}
    pending = {k for k, j in raw.items() if j["job_state"] == "PENDING"}
    assert sum(n for (state, _, _), n in r.jobs.items() if state == "running") == len(running)
    assert sum(n for (state, _, _), n in r.jobs.items() if state == "pending") == len(pending)
    # job 6 holds one H100, job 7 one V100 (the bridge chose it: "static"), both x86_64, QoS gold
    assert r.units_allocated[("h100@x86_64", "gold")] == pytest.approx(units["h100"])
    assert r.units_allocated[("v100@x86_64", "gold")] == pytest.approx(units["v100"])
    assert r.units_requested[("running", "v100@x86_64", "gold")] == pytest.approx(units["v100"])
    assert r.devices_allocated["h100@x86_64"] == 1
    assert r.jobs[("pending", "cpu@any", "gold")] == 1
    assert r.oldest_pending_s["cpu@any"] == pytest.approx(1796108800.0 - raw[8]["submit_time"])
    # every decision the bridge recorded, by its reason
    whys = [json.loads(j["admin_comment"])["why"] for j in raw.values() if j["admin_comment"]]
    assert dict(r.decisions) == {w: whys.count(w) for w in whys}
    # devices and nodes per pool: the captured nodes are all idle
    for p in pools(site):
        assert r.devices[(p.key, "total")] == p.devices, p.key
        assert r.devices[(p.key, "usable")] == p.devices
    assert sum(n for (pool, state), n in r.nodes.items() if state == "idle") >= len(nodes)
    assert r.nodes[("cpu@aarch64", "idle")] == 2 and r.nodes[("ascend-910b@aarch64", "idle")] >= 1


def test_drained_and_down_nodes_leave_the_usable_count(site: Site) -> None:
    lines = SINFO.splitlines()
    lines = [ln.replace("|idle|", "|drained|", 1) if ln.startswith("a100-01") else
             ln.replace("|idle|", "|down*|", 1) if ln.startswith("a100-02") else ln for ln in lines]
    r = summarize(SiteView.of(site), [], parse_sinfo_nodes("\n".join(lines)), now=0)
    pool = "a100-80gb@x86_64"
    assert r.devices[(pool, "usable")] == 0 and r.devices[(pool, "total")] == 8
    assert r.nodes[(pool, "drain")] == 1 and r.nodes[(pool, "down")] == 1


@pytest.mark.parametrize(("state", "want"), [
    ("idle", "idle"), ("mixed", "mix"), ("allocated", "alloc"), ("completing", "alloc"),
    ("draining", "drain"), ("drained", "drain"), ("idle+drain", "drain"), ("down*", "down"),
    ("down", "down"), ("idle*", "down"), ("future", "other")])
def test_node_states(state: str, want: str) -> None:
    assert node_state(state) == want


def test_exporter_asks_slurm_once_per_round(site: Site, tmp_path: Path) -> None:
    snap = tmp_path / "hetero-snapshot.lua"
    snap.write_text(to_lua({"h100@x86_64": PoolCapacity(total=8, free=7)}, time.time() - 42))
    slurm = CapturedSlurm()
    exp = ClusterExporter(site, slurm, snap, every=60)
    exp.round()
    exp.round()
    assert slurm.argvs == [squeue_json_argv(), sinfo_nodes_argv(), sinfo_capacity_argv()] * 2
    m = scrape(exp)
    assert m["hetero_bridge_snapshot_up"][0][1] == 1
    assert m["hetero_bridge_snapshot_age_seconds"][0][1] == pytest.approx(42, abs=2)
    running = {(lb["pool"], lb["tier"]): v for lb, v in m["hetero_jobs"] if lb["state"] == "running"}
    assert running == {("h100@x86_64", "gold"): 1, ("v100@x86_64", "gold"): 1}
    # a decision is counted once, however many rounds see the job
    assert [(lb["why"], v) for lb, v in m["hetero_bridge_decisions_total"]] == [("static", 1)]
    assert {lb["command"]: v for lb, v in m["hetero_exporter_slurm_calls_total"]} == {"squeue": 2, "sinfo": 4}
    devs = {(lb["pool"], lb["status"]): v for lb, v in m["hetero_pool_devices"]}
    assert devs[("h100@x86_64", "allocated")] == 1 and devs[("h100@x86_64", "total")] == 8
    snap.unlink()
    m = scrape(exp)  # the snapshot is read at every scrape, not once a round
    assert m["hetero_bridge_snapshot_up"][0][1] == 0 and "hetero_bridge_snapshot_age_seconds" not in m


def test_snapshot_generated_at(tmp_path: Path) -> None:
    p = tmp_path / "s.lua"
    p.write_text(to_lua({}, 1700000000.7))
    assert snapshot_generated_at(p) == 1700000000
    p.write_text("-- garbage\n")
    assert snapshot_generated_at(p) is None and snapshot_generated_at(tmp_path / "none") is None


def entry(job_id: int, state: str, start: float, end: float, comment: dict[str, Any]) -> QueueEntry:
    job = parse_job({"job_id": job_id, "job_state": state, "start_time": start, "admin_comment": json.dumps(comment)})
    return QueueEntry(job=job, qos="gold", tres_alloc="", end_time=end)


def test_prediction_error_of_completed_jobs(site: Site) -> None:
    e1 = entry(1, "COMPLETED", 100, 200, {"hetero": 1, "pred": {"p50": 50, "p90": 150}})  # 100 s: under p90
    e2 = entry(2, "COMPLETED", 100, 400, {"hetero": 1, "pred": {"p50": 300, "p90": 250}})  # 300 s: past p90
    assert prediction(e1) == (50.0, 150.0, 100.0)
    assert prediction(entry(3, "TIMEOUT", 0, 10, {"pred": {"p50": 5, "p90": 9}})) is None
    assert prediction(entry(4, "COMPLETED", 0, 10, {"pred": {"p50": "x", "p90": 9}})) is None
    doc = {"jobs": [{"job_id": e.job.job_id, "job_state": e.job.state, "start_time": e.job.start_time,
                     "end_time": e.end_time, "admin_comment": e.job.admin_comment} for e in (e1, e2)]}
    exp = ClusterExporter(site, CapturedSlurm(squeue=json.dumps(doc)), None)
    exp.round()
    m = scrape(exp)
    assert m["hetero_prediction_jobs"][0][1] == 2
    assert m["hetero_prediction_accuracy"][0][1] == pytest.approx((0.5 + 1.0) / 2)
    assert m["hetero_prediction_under_p90_ratio"][0][1] == pytest.approx(0.5)


def test_energy_per_policy_from_sacct(site: Site) -> None:
    # sacctmgr stores the epilog's comment with backquotes for double quotes
    c1 = ('{`hetero`:1,`energy`:`auto`,`node_energy`:{`g1`:{`energy_j`:100.5,`policy`:`efficiency`},'
          '`g2`:{`energy_j`:50,`policy`:`efficiency`}}}')
    c2 = json.dumps({"hetero": 1, "energy": "balanced", "node_energy": {"n": {"energy_j": 10}}})
    rows = [{"JobID": "1", "AdminComment": c1}, {"JobID": "2", "AdminComment": c2},
            {"JobID": "3", "AdminComment": "user text"}]
    assert policy_energy(rows) == {"1": ("efficiency", 150.5), "2": ("balanced", 10.0)}
    sep = "\x1f"
    text = "".join(sep.join([r["JobID"], "COMPLETED", "2024-01-01T00:00:00", r["AdminComment"]]) + "\n"
                   for r in rows)
    slurm = CapturedSlurm(sacct=text)
    exp = ClusterExporter(site, slurm, None, sacct_every=1, sacct_delay_s=0)
    exp.round()
    exp.poll_sacct(time.time() + 10)  # the same jobs again: counted once
    m = scrape(exp)
    assert {lb["policy"]: v for lb, v in m["hetero_policy_energy_joules_total"]} == \
        {"efficiency": 150.5, "balanced": 10.0}
    sacct = [a for a in slurm.argvs if a[0] == "sacct"]
    assert len(sacct) == 2 and "-S" in sacct[0] and "-a" in sacct[0]


def test_pool_devices_lost_to_drained_and_down_nodes(site: Site) -> None:
    """Captured `sacctmgr show event` (h100-01 drained 108 s, npu-02 drained and still open,
    cpu-arm-01 down 11 s): device-seconds per pool; the CPU node and the cluster row cost
    no devices; an open event lasts until now."""
    events = (CAPTURED / "sacctmgr-event-22.05.txt").read_text()
    now = 1796166442 + 100
    lost = lost_device_seconds(SiteView.of(site), parse_events(events), {}, now - 86400, now, now)
    assert lost == {"h100@any": 8 * (1796166440 - 1796166332), "ascend-910b@any": 8 * 100}
    slurm = CapturedSlurm(sacctmgr=events)
    exp = ClusterExporter(site, slurm, None, sacct_every=1, sacct_delay_s=0, clock=lambda: now)
    exp.round()  # sinfo first: the arch of each node comes from its features
    m = {lb["pool"]: v for lb, v in scrape(exp)["hetero_pool_lost_device_seconds"]}
    assert m["h100@x86_64"] == 8 * 108 and m["ascend-910b@aarch64"] == 800 and m["a100-80gb@x86_64"] == 0
    assert any(a[:6] == ["sacctmgr", "-i", "-n", "-P", "show", "event"] for a in slurm.argvs)


@pytest.mark.parametrize(("state", "usable"), [("maint", False), ("reserved", True), ("drained", False)])
def test_maintenance_nodes_are_not_usable(site: Site, state: str, usable: bool) -> None:
    nodes = parse_sinfo_nodes("h100-01|" + state + "|96|1024000|gpu:h100:8|x86_64,nvidia|gpu|none\n")
    r = summarize(SiteView.of(site), [], nodes, 0.0)
    assert r.devices[("h100@x86_64", "usable")] == (8 if usable else 0)
    assert r.devices[("h100@x86_64", "total")] == 8


class AccountingAway(CapturedSlurm):
    """slurmdbd stopped: sacctmgr fails as it does (exit 1, "Connection refused")."""

    ping_timeout: float | None = None

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        if argv[0] == "sacctmgr":
            self.argvs.append(list(argv))
            self.ping_timeout = timeout
            raise RuntimeFailure("sacctmgr: error: Sending PersistInit msg: Connection refused")
        return super().run(argv, check=check, timeout=timeout, input=input)


def test_accounting_check_says_whether_slurmdbd_answers_apart_from_the_round(site: Site) -> None:
    t = [1000.0]
    up = ClusterExporter(site, CapturedSlurm(), None, clock=lambda: t[0])
    assert "hetero_accounting_up" not in scrape(up)  # not asked yet: no sample, no alert
    assert up.check_accounting()
    assert scrape(up)["hetero_accounting_up"] == [({}, 1.0)]
    assert scrape(up)["hetero_accounting_answer_timestamp_seconds"] == [({}, 1000.0)]
    away = AccountingAway()
    up.runner = away
    t[0] = 1060.0
    assert not up.check_accounting()
    got = scrape(up)
    assert got["hetero_accounting_up"] == [({}, 0.0)]
    # when it last answered stays: how long accounting has been away
    assert got["hetero_accounting_answer_timestamp_seconds"] == [({}, 1000.0)]
    # the round still reads the queue: slurmctld answers while slurmdbd does not
    assert up.round().t == 1060.0 and away.argvs[0] == sacctmgr_ping_argv()
    # asked with a short timeout of its own, not the round's: a hung slurmdbd holds no round long
    assert away.ping_timeout == ACCOUNTING_TIMEOUT_S < up.every
    # On a replay clock K times faster the caller gives it K x the time (the soak: x50).
    dbd = AccountingAway()
    slow = ClusterExporter(site, dbd, None, clock=lambda: t[0], accounting_timeout=500.0)
    assert not slow.check_accounting() and dbd.ping_timeout == 500.0
