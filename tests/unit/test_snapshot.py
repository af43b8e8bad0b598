"""The capacity snapshot from sinfo and the queue (`squeue --json`), on Slurm 22.05 and
24.11 output: a feature expression with `|` or a `gres/` prefix changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetero.bridge.snapshot import build_snapshot, to_lua
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.squeue import QueuedJob, parse_squeue_json

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(ROOT / "site" / "demo" / "site.yaml")


def pending(tres: str, features: str = "", nodes: int = 1) -> QueuedJob:
    return QueuedJob(job_id=1, state="PENDING", user="u", name="n", partition="gpu",
                     time_limit_min=5, submit_time=None, start_time=None, admin_comment="",
                     gres_detail=(), nodes="", tres_per_node=tres, features=features, node_count=nodes)


def test_24_11_sinfo_and_queue(site: Site) -> None:
    jobs, _ = parse_squeue_json((CAPTURED / "squeue-json-24.11.json").read_text())
    caps = build_snapshot(site, (CAPTURED / "sinfo-snapshot-24.11.txt").read_text(), jobs)
    h100 = caps["h100@x86_64"]
    # g01: 4 H100, 2 in use; job 3 waits for one (`gres/gpu:h100:1`).
    assert (h100.total, h100.free, h100.free_max_node, h100.pending) == (4, 2, 2, 1)
    assert caps["ascend-910b@aarch64"].total == 8 and caps["ascend-910b@aarch64"].free == 6


def test_pending_counts_per_arch_and_node(site: Site) -> None:
    jobs = [pending("gres:gpu:gh200:1", "aarch64|x86_64", nodes=2), pending("gres/gpu:v100:2"),
            pending("gres:gpu:1", "x86_64")]
    caps = build_snapshot(site, "", jobs)
    assert caps["gh200@aarch64"].pending == 2
    assert caps["v100@x86_64"].pending == 2 + 1  # an untyped gpu request counts for every model
    assert caps["gh200@aarch64"].free == 0
    assert "return { generated_at = 7, pools = {" in to_lua(caps, 7.0)


def test_an_untyped_request_pinned_by_model_feature_counts_in_that_pool_only(site: Site) -> None:
    caps = build_snapshot(site, "", [pending("gres:gpu:2", "(ib)&x86_64&a100-80gb")])
    assert caps["a100-80gb@x86_64"].pending == 2
    assert caps["v100@x86_64"].pending == caps["h100@x86_64"].pending == 0


def test_forecast_travels_in_the_snapshot_and_lua_still_reads_it(site: Site, tmp_path: Path) -> None:
    import lupa.lua51 as lupa

    from slurm_hetero.bridge.snapshot import read_forecast

    caps = build_snapshot(site, "", [])
    fc = {"h100@x86_64": {5: 1.5, 15: 2.25, 60: 4.0}, "cpu@aarch64": {5: 10.0, 15: 12.0, 60: 16.0},
          'bad"key': {5: 1.0, 15: 1.0, 60: 1.0}, "nan@x86_64": {5: float("nan"), 15: 1.0, 60: 1.0}}
    text = to_lua(caps, 7.0, fc)
    assert text.splitlines()[1].startswith("return { generated_at = 7, pools = {")
    path = tmp_path / "snap.lua"
    path.write_text(text)
    assert read_forecast(path) == {k: v for k, v in fc.items() if k in ("h100@x86_64", "cpu@aarch64")}
    data = lupa.LuaRuntime().execute(text)
    assert data["generated_at"] == 7 and data["forecast"]["h100@x86_64"]["m60"] == 4.0
    assert read_forecast(tmp_path / "missing.lua") == {}


def test_a_node_in_several_partitions_counts_once(site: Site) -> None:
    """`sinfo -N` prints a node once per partition: an H100 node in `gpu` and `gpu-long` holds
    its 8 devices once, in the snapshot and in `why`'s per-node view alike."""
    from slurm_hetero.reports.why import node_capacity, site_view

    line = "h100-01|mixed|gpu:h100:8|gpu:h100:3(IDX:0-2)|x86_64,nvidia|"
    caps = build_snapshot(site, f"{line}\n{line}\n", [])
    assert (caps["h100@x86_64"].total, caps["h100@x86_64"].free) == (8, 5)
    per_node = [n for n in node_capacity(site_view(site), f"{line}\n{line}\n") if n.pool == "h100@x86_64"]
    assert [(n.node, n.total, n.free) for n in per_node] == [("h100-01", 8, 5)]
