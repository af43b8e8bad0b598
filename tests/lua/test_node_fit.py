"""placement.node_fit (the default): "starts now" needs one node with the job's devices, CPUs
and memory free.

Without it the snapshot counts free devices per node only, and a 12-CPU pod was sent as
`starts-now` to a node with a device and 10 CPUs free, where it waited all window (the
Alibaba replay, window start 12551400)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.bridge.snapshot import FIT_MAX, PoolCapacity, build_snapshot, node_room, to_lua
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.site import Site, load_site_text
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.pools import pools

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"
# Slurm 22.05 on the demo site: a100-01 holds jobs on 3 of its 4 GPUs and all 64 CPUs;
# a100-02 is idle; h100-01 holds 3 GPUs, 40 CPUs and 100 GiB.
CAPTURED = (ROOT / "tests" / "data" / "captured" / "sinfo-capacity-fit-22.05.txt").read_text()


def site_with(text: str) -> Site:
    return load_site_text(DEMO.read_text() + text, "fit.yaml")


@pytest.fixture(scope="module")
def fit_site() -> Site:
    return site_with("\nplacement: {node_fit: true}\n")


def test_the_snapshot_keeps_each_pools_fit_from_captured_sinfo(fit_site: Site) -> None:
    caps = build_snapshot(fit_site, CAPTURED, [])
    a100 = caps["a100-80gb@x86_64"]
    assert (a100.free, a100.free_max_node) == (5, 4)
    # a100-01's free GPU comes with no CPU free: a one-GPU job fits a100-02 only
    assert a100.fit == [(64, 524288)] * 4
    assert caps["h100@x86_64"].fit == [(56, 1048576 - 102400)] * 5
    assert caps["gh200@aarch64"].fit == [(72, 491520)]
    assert caps["ascend-910b@aarch64"].fit == [(192, 1048576)] * 8
    text = to_lua(caps, 7.0)
    assert '["gh200@aarch64"] = { total = 1, free = 1, free_max_node = 1, pending = 0, fit = { { 72, 491520 } } },' in text


def test_on_by_default_and_off_leaves_the_snapshot_as_before() -> None:
    assert site_with("").placement.node_fit
    assert build_snapshot(site_with(""), CAPTURED, [])["a100-80gb@x86_64"].fit == [(64, 524288)] * 4
    site = site_with("\nplacement: {node_fit: false}\n")
    caps = build_snapshot(site, CAPTURED, [])
    assert all(c.fit is None for c in caps.values())
    assert "fit" not in to_lua(caps, 7.0)


def test_each_device_count_gets_the_roomiest_node_that_has_that_many(fit_site: Site) -> None:
    line = "{}|{}|gpu:h100:8|gpu:h100:{}(IDX:0)|x86_64,h100|{}|1000|{}|\n"
    text = (line.format("n1", "mixed", 2, "90/6/0/96", 100)  # 6 free: few CPUs
            + line.format("n2", "mixed", 7, "16/80/0/96", 0)  # 1 free: many CPUs
            + line.format("n3", "drained", 0, "0/0/96/96", 0)  # drained: nothing free
            + line.format("n4", "mixed", 6, "8/88/0/96", 900))  # 2 free: more CPUs, less memory
    fit = build_snapshot(fit_site, text, [])["h100@x86_64"].fit
    assert fit == [(88, 100), (88, 100), (6, 900), (6, 900), (6, 900), (6, 900)]


def test_at_most_fit_max_entries(fit_site: Site) -> None:
    text = "n1|idle|gpu:h100:64|gpu:h100:0(IDX:N/A)|x86_64|0/96/0/96|1000|0|\n"
    cap = build_snapshot(fit_site, text, [])["h100@x86_64"]
    assert cap.free_max_node == 64 and cap.fit == [(96, 1000)] * FIT_MAX


@pytest.mark.parametrize("room", ["", "96|1000|0|", "x/96/0/96|1000|0|", "0/96/0/96|1000|-1|"])
def test_a_node_whose_room_is_unread_leaves_its_pool_without_fit(fit_site: Site, room: str) -> None:
    text = ("n1|idle|gpu:h100:8|gpu:h100:0(IDX:N/A)|x86_64|0/96/0/96|1000|0|\n"
            f"n2|idle|gpu:h100:8|gpu:h100:0(IDX:N/A)|x86_64|{room}\n"
            "v1|idle|gpu:v100:4|gpu:v100:0(IDX:N/A)|x86_64|0/80/0/80|1000|0|\n")
    caps = build_snapshot(fit_site, text, [])
    assert caps["h100@x86_64"].fit is None and caps["h100@x86_64"].free_max_node == 8
    assert caps["v100@x86_64"].fit == [(80, 1000)] * 4


def test_node_room() -> None:
    assert node_room([" 40/56/0/96 ", "1048576", "102400"]) == (56, 946176)
    assert node_room(["0/64/0/64", "100", "200"]) == (64, 0)  # more allocated than said
    assert node_room(["0/64/0/64", "100"]) is None


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_the_site_setting_is_a_boolean(value: Any) -> None:
    with pytest.raises(SiteError, match="node_fit"):
        site_with(f"\nplacement: {{node_fit: {json.dumps(value)}}}\n")


# ---- the bridge's choice ------------------------------------------------------------------

@pytest.fixture
def js(fit_site: Site, tmp_path: Path) -> JobSubmit:
    js = JobSubmit(render_site(fit_site, Profile(state_dir=str(tmp_path)))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    return js


def snapshot(site: Site, at: int, rows: Mapping[str, tuple[int, list[tuple[int, int]] | None]],
             pending: Mapping[str, int] | None = None) -> str:
    """Every pool full but `rows`: pool -> (devices free on one node, fit); nothing pending
    there unless `pending` says."""
    caps = {}
    for p in pools(site):
        free, fit = rows.get(p.key, (0, None))
        waiting = (pending or {}).get(p.key, 0) if p.key in rows else p.devices
        caps[p.key] = PoolCapacity(total=p.devices, free=free, free_max_node=free, fit=fit,
                                   pending=waiting)
    return to_lua(caps, at)


def decide(js: JobSubmit, text: str, accel: str, **fields: Any) -> dict[str, Any]:
    """The bridge's decision on a fresh snapshot `text` (a new generation: nothing placed since)."""
    js.now += 3  # past the bridge's re-check interval
    gen = text.split("\n", 1)
    (js.state / "hetero-snapshot.lua").write_text(f"{gen[0]}{js.now}\n{gen[1]}")  # type: ignore[attr-defined]
    rc, desc = js.submit({"accel": accel}, max_nodes=1, min_nodes=1, **fields)
    assert rc == 0, js.logs
    out: dict[str, Any] = json.loads(desc["admin_comment"])
    out["gres"] = desc["tres_per_node"]
    return out


def test_a_pool_whose_free_device_has_too_few_cpus_does_not_start_it_now(js: JobSubmit, fit_site: Site) -> None:
    # the cheaper A100 has a device free beside 10 free CPUs; the H100s have room for 12
    rows = {"a100-80gb@x86_64": (1, [(10, 10**6)]), "h100@x86_64": (2, [(64, 10**6), (64, 10**6)])}
    text = snapshot(fit_site, js.now, rows)
    small = decide(js, text, "nvidia:1", min_cpus=8)
    assert (small["pool"], small["why"]) == ("a100-80gb@x86_64", "starts-now")
    big = decide(js, text, "nvidia:1", min_cpus=12)
    assert (big["pool"], big["why"]) == ("h100@x86_64", "starts-now")
    # two GPUs on one node: only the H100 node has two free
    assert decide(js, text, "nvidia:2", min_cpus=4)["pool"] == "h100@x86_64"
    # 70 CPUs: the H100 nodes have 96, but not free now
    assert decide(js, text, "nvidia:1", min_cpus=70)["why"] == "least-backlog"


def test_memory_counts_too(js: JobSubmit, fit_site: Site) -> None:
    rows = {"a100-80gb@x86_64": (1, [(64, 4096)]), "h100@x86_64": (1, [(64, 65536)])}
    text = snapshot(fit_site, js.now, rows)
    assert decide(js, text, "nvidia:1", min_cpus=4, min_mem_per_node=2048)["pool"] == "a100-80gb@x86_64"
    got = decide(js, text, "nvidia:1", min_cpus=4, min_mem_per_node=8192)
    assert (got["pool"], got["why"]) == ("h100@x86_64", "starts-now")
    got = decide(js, text, "nvidia:1", min_cpus=4, min_mem_per_cpu=2048)  # 4 x 2 GiB
    assert (got["pool"], got["why"]) == ("h100@x86_64", "starts-now")


def test_mem_0_needs_a_node_with_all_its_memory_free(js: JobSubmit, fit_site: Site) -> None:
    """--mem=0 is the whole node's memory in Slurm (min_mem_per_node 0, not nil): the cheaper
    A100 node with 1 GiB of its 512 allocated cannot start it now; the idle H100 node can."""
    a100, h100 = 524288, 1048576  # the demo site's nodes' memory, MiB
    text = snapshot(fit_site, js.now, {"a100-80gb@x86_64": (1, [(64, a100 - 1024)]),
                                       "h100@x86_64": (1, [(64, h100)])})
    got = decide(js, text, "nvidia:1", min_cpus=4, min_mem_per_node=0)
    assert (got["pool"], got["why"], got["mem"]) == ("h100@x86_64", "starts-now", "node")  # for the daemon
    said = decide(js, text, "nvidia:1", min_cpus=4)  # nothing said
    assert said["pool"] == "a100-80gb@x86_64" and "mem" not in said
    assert "mem" not in decide(js, text, "nvidia:1", min_cpus=4, min_mem_per_node=1024)
    # the A100 node idle: it starts there, and takes the node's memory from the next job
    text = snapshot(fit_site, js.now, {"a100-80gb@x86_64": (2, [(64, a100), (64, a100)]),
                                       "h100@x86_64": (1, [(64, h100)])})
    got = decide(js, text, "nvidia:1", min_cpus=4, min_mem_per_node=0)
    assert (got["pool"], got["why"]) == ("a100-80gb@x86_64", "starts-now")
    assert burst(js, 1, min_cpus=4, min_mem_per_node=1024) == [("h100", "starts-now")]


def test_a_burst_within_one_snapshot_takes_the_cpus_it_was_given(js: JobSubmit, fit_site: Site) -> None:
    """Two 12-CPU jobs before the next snapshot: the first takes the A100 node's 16 free CPUs
    down to 4 in the bridge's count, so the second goes to the H100s."""
    rows = {"a100-80gb@x86_64": (4, [(16, 10**6)] * 4), "h100@x86_64": (2, [(64, 10**6)] * 2)}
    text = snapshot(fit_site, js.now, rows)
    first = decide(js, text, "nvidia:1", min_cpus=12)
    assert (first["pool"], first["why"]) == ("a100-80gb@x86_64", "starts-now")
    rc, desc = js.submit({"accel": "nvidia:1"}, max_nodes=1, min_nodes=1, min_cpus=12)  # same generation
    second = json.loads(desc["admin_comment"])
    assert rc == 0 and (second["pool"], second["why"]) == ("h100@x86_64", "starts-now")
    rc, desc = js.submit({"accel": "nvidia:1"}, max_nodes=1, min_nodes=1, min_cpus=4)  # 4 still fit
    assert json.loads(desc["admin_comment"])["pool"] == "a100-80gb@x86_64"
    # a new snapshot counts what was placed: the bridge's own count starts again
    assert decide(js, text, "nvidia:1", min_cpus=12)["pool"] == "a100-80gb@x86_64"


def test_devices_beside_busy_cores_do_not_shorten_a_backlog(js: JobSubmit, fit_site: Site) -> None:
    """Nothing starts a 12-CPU job now. The A100s' four free devices sit beside 4 free CPUs,
    so for it the A100s' backlog is their 2 pending jobs plus its own (3 of 8), longer than
    the H100s' (2 of 8). Counted as free, those devices made the A100s look shortest; the
    run-3 Alibaba window 12551400 sent a 12-CPU pod to such a pool, where it blocked the
    newcomers the pool could have started."""
    rows = {"a100-80gb@x86_64": (4, [(4, 10**6)] * 4), "h100@x86_64": (0, None)}
    text = snapshot(fit_site, js.now, rows, {"a100-80gb@x86_64": 2, "h100@x86_64": 1})
    got = decide(js, text, "nvidia:1", min_cpus=12)
    assert (got["pool"], got["why"]) == ("h100@x86_64", "least-backlog")
    # a job the free devices can take starts there now
    got = decide(js, text, "nvidia:1", min_cpus=4)
    assert got["pool"] == "a100-80gb@x86_64"
    # the same devices over two nodes (2 each), the roomiest with 4 CPUs: none of them either
    caps = {p.key: PoolCapacity(total=p.devices, free=0, free_max_node=0, pending=p.devices)
            for p in pools(fit_site)}
    caps["a100-80gb@x86_64"] = PoolCapacity(total=8, free=4, free_max_node=2, pending=2,
                                            fit=[(4, 10**6)] * 2)
    caps["h100@x86_64"] = PoolCapacity(total=8, free=0, free_max_node=0, pending=1)
    got = decide(js, to_lua(caps, js.now), "nvidia:1", min_cpus=12)
    assert (got["pool"], got["why"]) == ("h100@x86_64", "least-backlog")


def test_a_queued_job_takes_no_cpus_from_the_room_for_the_next(js: JobSubmit, fit_site: Site) -> None:
    """A 20-CPU job queues on the A100s (no node has 20 CPUs free, every other pool is
    busier); a 4-CPU job right after it still starts there now, on a device and CPUs the
    queued one does not hold."""
    rows = {"a100-80gb@x86_64": (4, [(16, 10**6)] * 4)}
    first = decide(js, snapshot(fit_site, js.now, rows), "nvidia:1", min_cpus=20)
    assert (first["pool"], first["why"]) == ("a100-80gb@x86_64", "least-backlog")
    assert burst(js, 1, min_cpus=4) == [("a100-80gb", "starts-now")]


def burst(js: JobSubmit, count: int, **fields: Any) -> list[tuple[str, str]]:
    """(pool, why) of `count` more one-GPU jobs in the current snapshot generation."""
    out = []
    for _ in range(count):
        rc, desc = js.submit({"accel": "nvidia:1"}, max_nodes=1, min_nodes=1, **fields)
        assert rc == 0, js.logs
        rec = json.loads(desc["admin_comment"])
        out.append((rec["pool"].split("@")[0], rec["why"]))
    return out


def test_a_burst_of_cpu_heavy_jobs_spreads_by_backlog(js: JobSubmit, fit_site: Site) -> None:
    """One H100 node has a device and 16 CPUs free; the A100s' four devices sit beside 4 CPUs,
    with 2 jobs pending. Ten 12-CPU jobs in one snapshot generation: the first starts on the
    H100; then each placed job adds to its pool's backlog, so they alternate instead of all
    queueing on the pool the first one emptied."""
    rows = {"a100-80gb@x86_64": (4, [(4, 10**6)] * 4), "h100@x86_64": (1, [(16, 10**6)])}
    text = snapshot(fit_site, js.now, rows, {"a100-80gb@x86_64": 2})
    first = decide(js, text, "nvidia:1", min_cpus=12)
    assert (first["pool"], first["why"]) == ("h100@x86_64", "starts-now")
    got = burst(js, 9, min_cpus=12)
    assert got[0] == ("h100", "least-backlog")  # its backlog: 1 of 8; the A100s': 3 of 8
    assert all(why == "least-backlog" for _, why in got)
    assert 3 <= sum(pool == "a100-80gb" for pool, _ in got) <= 5, got
    # the same burst on that snapshot gone stale: nothing starts now, and it spreads too
    js.now += 40
    got = burst(js, 10, min_cpus=12)
    assert all(why == "stale-backlog" for _, why in got)
    assert 3 <= sum(pool == "a100-80gb" for pool, _ in got) <= 7, got


def test_the_room_left_after_a_start_is_a_lower_bound(js: JobSubmit, fit_site: Site) -> None:
    """After a job is sent to start on a pool, a node that had k + 1 devices free still has k,
    with at least its CPUs and memory less the job's."""
    # the A100s: node X with 2 devices, 64 CPUs and 8 GiB free; node Y with 1 device and 8 CPUs
    caps = {p.key: PoolCapacity(total=p.devices, free=0, free_max_node=0, pending=p.devices)
            for p in pools(fit_site)}
    caps["a100-80gb@x86_64"] = PoolCapacity(total=8, free=3, free_max_node=2, pending=0,
                                            fit=[(64, 8192), (64, 8192)])
    caps["h100@x86_64"] = PoolCapacity(total=8, free=2, free_max_node=2, pending=0, fit=[(64, 10**6)] * 2)
    first = decide(js, to_lua(caps, js.now), "nvidia:1", min_cpus=4, min_mem_per_node=6144)
    assert (first["pool"], first["why"]) == ("a100-80gb@x86_64", "starts-now")
    # 2 GiB left where it may have gone: a second 6 GiB job is not taken to start there now
    assert burst(js, 1, min_cpus=4, min_mem_per_node=6144) == [("h100", "starts-now")]
    assert burst(js, 1, min_cpus=4, min_mem_per_node=2048) == [("a100-80gb", "starts-now")]
    # two sent there: one device is still free, but no node is known to have it (Y's may be
    # gone), so the third is not taken to start there now
    assert burst(js, 1, min_cpus=1) == [("h100", "starts-now")]


def test_without_fit_free_devices_alone_decide(js: JobSubmit, fit_site: Site) -> None:
    """A snapshot from a daemon without node_fit (or a pool whose nodes' room it could not
    read): as before, the device count alone."""
    rows: dict[str, tuple[int, list[tuple[int, int]] | None]] = {
        "a100-80gb@x86_64": (1, None), "h100@x86_64": (2, [(64, 10**6)] * 2)}
    got = decide(js, snapshot(fit_site, js.now, rows), "nvidia:1", min_cpus=12)
    assert (got["pool"], got["why"]) == ("a100-80gb@x86_64", "starts-now")



def test_the_replay_arms_turn_it_on_and_off(tmp_path: Path) -> None:
    from slurm_hetero.replay.run import ARMS, placement_site
    from slurm_hetero.site import load_site

    demo = load_site(DEMO)
    off = placement_site(demo, tmp_path / "off.yaml", "node_fit", ARMS["bridge-nofit"].node_fit is True)
    assert not off.placement.node_fit and off.path == tmp_path / "off.yaml"
    assert placement_site(off, tmp_path / "on.yaml", "node_fit", True).placement.node_fit
    assert placement_site(demo, tmp_path / "same.yaml", "node_fit").path == demo.path  # already on
    assert ARMS["bridge-nomodel"].node_fit is None and ARMS["bridge-fit"].node_fit is True
