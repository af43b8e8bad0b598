"""Queue time and fragmentation in the cluster exporter: the pure pieces on crafted states,
the reduction on output captured from the dev cluster's Slurm 22.05
(capture-monitor-22.05.sh: 3 of 4 A100s busy on each A100 node, a 2-A100 job pending for
Resources, 5 of 8 NPUs busy on npu-01, one H100 the bridge placed, a held job, a dependent
one, a finished one and one cancelled before it started), and the exporter's whole output
checked by Prometheus's own `promtool check metrics`."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from slurm_hetero.monitor.cluster import (
    ClusterExporter,
    SiteView,
    node_free,
    parse_queue,
    request_pools,
    started_wait,
    summarize,
    waiting_requests,
)
from slurm_hetero.monitor.fragmentation import Fragmentation, by_pool, fragmentation
from slurm_hetero.monitor.waits import REASONS, WAIT_BUCKETS_S, WaitHistograms, reason_label
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.commands import sinfo_capacity_argv
from slurm_hetero.slurm.parse import parse_sinfo_nodes
from slurm_hetero.slurm.squeue import parse_job, squeue_json_argv
from tests import benchmark
from tests.unit.test_monitor_cluster import CapturedSlurm, scrape

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"
SQUEUE = (CAPTURED / "squeue-json-frag-22.05.json").read_text()
SINFO = (CAPTURED / "sinfo-frag-22.05.txt").read_text()
CAPACITY = (CAPTURED / "sinfo-capacity-frag-22.05.txt").read_text()
NOW = 1796530350.0  # shortly after the capture
A100, H100, NPU = "a100-80gb@x86_64", "h100@x86_64", "ascend-910b@aarch64"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(ROOT / "site" / "demo" / "site.yaml")


@pytest.fixture(scope="module")
def view(site: Site) -> SiteView:
    return SiteView.of(site)


# ---- the definition, on crafted states ---------------------------------------------------------

@pytest.mark.parametrize(("free", "requests", "want"), [
    # two nodes with 1 free, one with 4: a 2-device job fits only the third
    ([1, 1, 4], [2, 8], Fragmentation(free=6, fragmented=2, smallest_request=2)),
    # exactly the smallest request free: usable, not fragmented
    ([2, 2], [2], Fragmentation(free=4, fragmented=0, smallest_request=2)),
    # every node too small: everything free is fragmented
    ([3, 3, 1], [4], Fragmentation(free=7, fragmented=7, smallest_request=4)),
    # one 1-device job waiting makes every free device usable
    ([1, 1, 1], [8, 1], Fragmentation(free=3, fragmented=0, smallest_request=1)),
    # no job waits: nothing free is lost
    ([1, 1, 4], [], Fragmentation(free=6, fragmented=0, smallest_request=None)),
    # nothing free
    ([0, 0], [2], Fragmentation(free=0, fragmented=0, smallest_request=2)),
    # a request for 0 devices asks for none of this pool
    ([1], [0, 2], Fragmentation(free=1, fragmented=1, smallest_request=2)),
])
def test_fragmentation_of_crafted_pools(free: list[int], requests: list[int], want: Fragmentation) -> None:
    got = fragmentation(free, requests)
    assert got == want
    assert got.ratio == (want.fragmented / want.free if want.free else 0.0)


def test_fragmentation_against_a_brute_force_count_on_random_states() -> None:
    """Per node and device: a free device is lost when no waiting job fits its node."""
    rng = random.Random(37)
    for _ in range(2000):
        free = [rng.randint(0, 8) for _ in range(rng.randint(0, 6))]
        requests = [rng.randint(1, 8) for _ in range(rng.randint(0, 4))]
        lost = 0
        for f in free:
            for _device in range(f):
                lost += 1 if requests and not any(r <= f for r in requests) else 0
        got = fragmentation(free, requests)
        assert (got.free, got.fragmented) == (sum(free), lost), (free, requests)
        assert 0.0 <= got.ratio <= 1.0


def test_every_pool_is_reported() -> None:
    got = by_pool(["a@x", "b@x"], {"a@x": [1, 1]}, {"a@x": [2], "z@x": [1]})
    assert got == {"a@x": Fragmentation(2, 2, 2), "b@x": Fragmentation(0, 0, None)}


# ---- reasons and waits --------------------------------------------------------------------------

@pytest.mark.parametrize(("reason", "label"), [
    ("Resources", "Resources"), ("Priority", "Priority"), ("None", "None"), ("", "None"),
    ("Dependency", "Dependency"), ("JobHeldUser", "JobHeldUser"), ("BeginTime", "BeginTime"),
    ("QOSGrpGRES", "QOSLimit"), ("QOSMaxGRESPerUser", "QOSLimit"), ("QOSJobLimit", "QOSLimit"),
    ("AssocGrpGRESMinutes", "AssocLimit"), ("AssociationJobLimit", "AssocLimit"),
    ("DependencyNeverSatisfied", "other"), ("other", "other"), ("QOS", "other"),
    ("Resources\nfake", "other"), ("x" * 10_000, "other")])
def test_reason_labels(reason: str, label: str) -> None:
    assert reason_label(reason) == label


def test_reason_labels_stay_a_fixed_set() -> None:
    rng = random.Random(1)
    words = ["QOS", "Assoc", "Grp", "Max", "Limit", "Resources", "Job", "Held", "\n", "{", "é"]
    for _ in range(5000):
        assert reason_label("".join(rng.choices(words, k=rng.randint(0, 6)))) in REASONS


def test_wait_histogram_buckets_are_cumulative_and_bounds_inclusive() -> None:
    h = WaitHistograms()
    for w in (0.0, 1.0, 1.5, 10.0, 86400.0, 10 * 86400.0):
        h.observe("p@x", "gold", w)
    fam = h.family("hetero_job_wait_seconds", "doc")
    buckets = {s.labels["le"]: s.value for s in fam.samples if s.name.endswith("_bucket")}
    assert len(buckets) == len(WAIT_BUCKETS_S) + 1
    assert buckets["1.0"] == 2 and buckets["10.0"] == 4 and buckets["30.0"] == 4
    assert buckets["86400.0"] == 5 and buckets["604800.0"] == 5 and buckets["+Inf"] == 6
    values = [buckets[k] for k in [*(f"{b:.1f}" for b in WAIT_BUCKETS_S), "+Inf"]]
    assert values == sorted(values)
    other = {s.name: s.value for s in fam.samples if not s.name.endswith("_bucket")}
    assert other == {"hetero_job_wait_seconds_count": 6, "hetero_job_wait_seconds_sum": 11 * 86400.0 + 12.5}


def job(**fields: Any) -> Any:
    return parse_job({"job_id": 1, **fields})


def test_started_wait() -> None:
    entries = {e.job.job_id: e for e in parse_queue(SQUEUE)[0]}
    raw = {j["job_id"]: j for j in json.loads(SQUEUE)["jobs"]}
    # running and finished jobs: start - eligible
    for jid in (1, 2, 3, 4, 5):
        assert started_wait(entries[jid]) == raw[jid]["start_time"] - raw[jid]["eligible_time"], jid
    # job 6 pends with Slurm's estimated start; 9 was cancelled while held: a start time, no nodes
    assert raw[6]["start_time"] > 0 and started_wait(entries[6]) is None
    assert raw[9]["job_state"] == "CANCELLED" and raw[9]["start_time"] > 0 and started_wait(entries[9]) is None
    # no eligible time: from submission
    e = entries[1]
    assert started_wait(type(e)(job=e.job, qos="", tres_alloc="", end_time=None)) == \
        raw[1]["start_time"] - raw[1]["submit_time"]


# ---- from Slurm's output to the figures -----------------------------------------------------------

def test_free_devices_per_node_from_captured_sinfo(view: SiteView) -> None:
    free = node_free(view, CAPACITY)
    assert free == {A100: {"a100-01": 1, "a100-02": 1}, H100: {"h100-01": 7}, NPU: {"npu-01": 3, "npu-02": 8},
                    "v100@x86_64": {"v100-01": 4}, "gh200@aarch64": {"gh200-01": 1}}
    # a node listed once per partition counts once; a drained or down node has nothing free
    lines = CAPACITY.splitlines()
    a1 = next(ln for ln in lines if ln.startswith("a100-01|"))
    odd = [a1, a1, *(ln.replace("|idle|", "|drained|") if ln.startswith("npu-02|") else
                     ln.replace("|mixed|", "|mixed*|") if ln.startswith("h100-01|") else ln
                     for ln in lines if not ln.startswith("a100-01|"))]
    odd = [ln.replace("|mixed|", "|down*|") if ln.startswith("npu-01|") else ln for ln in odd]
    free = node_free(view, "\n".join(odd))
    assert free[A100] == {"a100-01": 1, "a100-02": 1}
    assert free[NPU] == {"npu-01": 0, "npu-02": 0} and free[H100] == {"h100-01": 0}


def test_waiting_requests_from_the_captured_queue(view: SiteView) -> None:
    entries, _ = parse_queue(SQUEUE)
    # job 6 waits for Resources; 7 (held) and 8 (dependency) could not use a free H100 anyway
    assert waiting_requests(view, entries) == {A100: [2]}


@pytest.mark.parametrize(("tres", "features", "pools"), [
    ("gres:gpu:a100-80gb:2", "", [(A100, 2)]),
    ("gres/gpu:h100:1", "", [(H100, 1)]),  # 24.11's spelling
    ("gres:npu:4", "", [(NPU, 4)]),
    # untyped: every GPU model and arch it may land on, cheapest first
    ("gres:gpu:1", "", [("v100@x86_64", 1), (A100, 1), (H100, 1), ("gh200@aarch64", 1)]),
    ("gres:gpu:1", "aarch64", [("gh200@aarch64", 1)]),
    ("gres:gpu:1", "x86_64&h100", [(H100, 1)]),  # the bridge pins a model by its feature
    ("gres:gpu:1", "a100-80gb|h100", [(A100, 1), (H100, 1)]),
    ("gres:shard:v100:2", "", []), ("", "", []), ("gres:gpu:x:y", "", []),
])
def test_the_pools_a_request_could_run_in(view: SiteView, tres: str, features: str,
                                          pools: list[tuple[str, int]]) -> None:
    assert request_pools(view, job(tres_per_node=tres, features=features)) == pools


def test_round_counts_reasons_and_starts(view: SiteView) -> None:
    entries, _ = parse_queue(SQUEUE)
    r = summarize(view, entries, parse_sinfo_nodes(SINFO), NOW)
    assert r.pending_reasons == {(A100, "Resources"): 1, (H100, "JobHeldUser"): 1, (H100, "Dependency"): 1}
    assert {s.key[0]: (s.pool, s.tier) for s in r.started} == {
        1: (A100, "gold"), 2: (A100, "gold"), 3: (NPU, "gold"), 4: ("cpu@any", "gold"), 5: (H100, "gold")}
    assert r.requests == {A100: [2]}


def _later(queue: str, job_id: int, start: float) -> str:
    """The captured queue after job `job_id` started at `start` on a100-01."""
    doc = json.loads(queue)
    for j in doc["jobs"]:
        if j["job_id"] == job_id:
            j.update(job_state="RUNNING", state_reason="None", start_time=start, nodes="a100-01",
                     tres_alloc_str="cpu=1,gres/gpu=2,gres/gpu:a100-80gb=2")
    return json.dumps(doc)


def test_exporter_figures_on_the_captured_state(site: Site) -> None:
    raw = {j["job_id"]: j for j in json.loads(SQUEUE)["jobs"]}
    slurm = CapturedSlurm(squeue=SQUEUE, sinfo=SINFO, capacity=CAPACITY)
    exp = ClusterExporter(site, slurm, None, clock=lambda: NOW)
    exp.round()
    m = scrape(exp)
    frag = {n: {lb["pool"]: v for lb, v in m[n]} for n in (
        "hetero_pool_free_devices", "hetero_pool_fragmented_devices", "hetero_pool_fragmentation_ratio",
        "hetero_pool_smallest_waiting_request_devices")}
    # A100: 1 free on each node, the waiting job needs 2 on one: both free devices are lost
    assert frag["hetero_pool_free_devices"] == {A100: 2, H100: 7, NPU: 11, "v100@x86_64": 4, "gh200@aarch64": 1}
    assert frag["hetero_pool_fragmented_devices"] == {A100: 2, H100: 0, NPU: 0, "v100@x86_64": 0,
                                                      "gh200@aarch64": 0}
    assert frag["hetero_pool_fragmentation_ratio"][A100] == 1.0 and frag["hetero_pool_fragmentation_ratio"][H100] == 0
    assert frag["hetero_pool_smallest_waiting_request_devices"] == {A100: 2}
    assert m["hetero_pool_fragmentation_timestamp_seconds"] == [({}, NOW)]
    pending = {(lb["pool"], lb["reason"]): v for lb, v in m["hetero_pending_jobs"]}
    assert pending == {(A100, "Resources"): 1, (H100, "JobHeldUser"): 1, (H100, "Dependency"): 1}
    # the first round only learns which jobs had started: a restart counts no wait twice
    assert "hetero_job_wait_seconds_count" not in m
    # job 6 starts 100 s after it became eligible: one wait, counted once however many rounds see it
    slurm.answers["squeue"] = _later(SQUEUE, 6, raw[6]["eligible_time"] + 100)
    exp.round()
    exp.round()
    m = scrape(exp)
    assert m["hetero_job_wait_seconds_count"] == [({"pool": A100, "tier": "gold"}, 1)]
    assert m["hetero_job_wait_seconds_sum"] == [({"pool": A100, "tier": "gold"}, 100)]
    buckets = {lb["le"]: v for lb, v in m["hetero_job_wait_seconds_bucket"]}
    assert buckets["60.0"] == 0 and buckets["120.0"] == 1 and buckets["+Inf"] == 1
    # it waits no more: nothing of the A100 pool is fragmented now
    assert {lb["pool"]: v for lb, v in m["hetero_pool_fragmented_devices"]}[A100] == 0
    assert "hetero_pool_smallest_waiting_request_devices" not in m


def test_the_fast_tier_reads_free_devices_between_rounds(site: Site) -> None:
    """Between two rounds the run loop reads only the cheap sinfo, against the last queue."""
    slurm = CapturedSlurm(squeue=SQUEUE, sinfo=SINFO, capacity=CAPACITY)

    def stop() -> bool:
        return sum(a == squeue_json_argv() for a in slurm.argvs) >= 2

    exp = ClusterExporter(site, slurm, None, every=1.0, fast_every=0.05)
    t0 = time.monotonic()
    exp.run(stop)
    assert time.monotonic() - t0 < 30
    kinds = ["squeue" if a == squeue_json_argv() else "-O" if a == sinfo_capacity_argv() else a[0]
             for a in slurm.argvs]
    # a round: slurmdbd's check (sacctmgr), the queue, the nodes, the free devices
    full = ["sacctmgr", "squeue", "sinfo", "-O"]
    assert kinds[:4] == full and kinds[-4:] == full, kinds
    between = kinds[4:-4]
    assert between and set(between) == {"-O"}, kinds
    assert exp.frag[A100].fragmented == 2  # measured against the queue of the round before
    # without a fast tier the round alone reads the free devices
    slurm.argvs.clear()
    ClusterExporter(site, slurm, None, every=0.2, fast_every=0).run(stop)
    assert [a[0] for a in slurm.argvs] == ["sacctmgr", "squeue", "sinfo", "sinfo"] * 2


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus package not installed")
def test_promtool_accepts_the_exporters_output(site: Site, tmp_path: Path) -> None:
    raw = {j["job_id"]: j for j in json.loads(SQUEUE)["jobs"]}
    slurm = CapturedSlurm(squeue=SQUEUE, sinfo=SINFO, capacity=CAPACITY)
    exp = ClusterExporter(site, slurm, None, clock=lambda: NOW)
    exp.round()
    slurm.answers["squeue"] = _later(SQUEUE, 6, raw[6]["eligible_time"] + 100)
    exp.round()  # every new family has samples: a histogram, pending reasons, fragmentation
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exp)
    text = generate_latest(reg)
    for name in ("hetero_job_wait_seconds_bucket", "hetero_pending_jobs", "hetero_pool_fragmented_devices",
                 "hetero_pool_fragmentation_ratio", "hetero_pool_free_devices"):
        assert f"\n{name}{{".encode() in text, name
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, check=False)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr
    # promtool's checker is not blind: a counter without _total is a problem it names
    bad = text + b"# HELP x_bytes doc\n# TYPE x_bytes counter\nx_bytes 1\n"
    r = subprocess.run(["promtool", "check", "metrics"], input=bad, capture_output=True, check=False)
    assert r.returncode != 0


# ---- the benchmark's brute-force recount ---------------------------------------------------------

SINFO_JSON = (CAPTURED / "sinfo-json-frag-22.05.json").read_text()


def bench() -> ModuleType:
    return benchmark.load("fragmentation_check")


def exporter_view(view: SiteView, capacity: str, queue: str) -> dict[str, tuple[int, int]]:
    frag = by_pool(view.pools, {p: list(n.values()) for p, n in node_free(view, capacity).items()},
                   waiting_requests(view, parse_queue(queue)[0]))
    return {p: (f.free, f.fragmented) for p, f in frag.items()}


def test_the_recount_from_sinfo_json_agrees_with_the_exporter(site: Site, view: SiteView) -> None:
    """Two Slurm outputs of one instant (sinfo --json, sinfo -O GresUsed), two ways to count."""
    brute = bench().brute_force(site, SINFO_JSON, SQUEUE)
    assert brute == {A100: (2, 2), H100: (7, 0), NPU: (11, 0), "v100@x86_64": (4, 0), "gh200@aarch64": (1, 0)}
    assert exporter_view(view, CAPACITY, SQUEUE) == brute
    # one A100 node drained (22.05: a flag beside the state), the other with 2 free: 1 waiting
    # 2-A100 job fits there, so nothing of the pool is fragmented; the drained node's free
    # device is not free at all
    doc = json.loads(SINFO_JSON)
    for n in doc["nodes"]:
        if n["name"] == "a100-01":
            n["state_flags"] = ["DRAIN"]
        if n["name"] == "a100-02":
            n["gres_used"] = "gpu:a100-80gb:2(IDX:1,3),npu:0,shard:0"
    cap = CAPACITY.replace("a100-01|mixed|", "a100-01|draining|").replace(
        "a100-02|mixed|gpu:a100-80gb:4|gpu:a100-80gb:3(IDX:0-2)", "a100-02|mixed|gpu:a100-80gb:4|gpu:a100-80gb:2(IDX:1,3)")
    assert bench().brute_force(site, json.dumps(doc), SQUEUE)[A100] == (2, 0) == exporter_view(view, cap, SQUEUE)[A100]


@pytest.mark.parametrize(("node", "usable"), [
    ({"state": "mixed", "state_flags": []}, True), ({"state": "idle", "state_flags": ["DRAIN"]}, False),
    ({"state": "idle", "state_flags": ["POWERED_DOWN"]}, True), ({"state": "down", "state_flags": []}, False),
    ({"state": ["MIXED", "DRAIN"]}, False), ({"state": ["IDLE", "MAINTENANCE", "RESERVED"]}, False),
    ({"state": ["IDLE", "RESERVED"]}, True), ({"state": "future"}, False)])
def test_the_recounts_node_states(node: dict[str, Any], usable: bool) -> None:
    assert bench().node_usable(node) is usable


def test_the_benchmark_compares_what_the_exporter_serves(site: Site) -> None:
    exp = ClusterExporter(site, CapturedSlurm(squeue=SQUEUE, sinfo=SINFO, capacity=CAPACITY), None,
                          clock=lambda: NOW)
    exp.round()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exp)
    figures, at = bench().exporter_figures(generate_latest(reg).decode())
    assert at == NOW and figures[A100] == (2.0, 2.0)
    diff = bench().compare(figures, bench().brute_force(site, SINFO_JSON, SQUEUE))
    assert all(d == {"free": 0.0, "fragmented": 0.0, "ratio": 0.0} for d in diff.values()), diff
    # a difference is seen
    wrong = bench().compare({**figures, A100: (2.0, 0.0)}, bench().brute_force(site, SINFO_JSON, SQUEUE))
    assert wrong[A100] == {"free": 0.0, "fragmented": 2.0, "ratio": 1.0}
