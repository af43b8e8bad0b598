"""Floating placement (`placement: {float: true}`): a one-node --accel job asks Slurm for any
of the equal pools of its request (untyped GRES, the models' features ORed), on
the demo site. The real sbatch and slurmctld side is in tests/integration/test_migrate.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.bridge.snapshot import build_snapshot
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.site import Site, load_site, load_site_text
from slurm_hetero.site.load import SiteError
from slurm_hetero.slurm.squeue import QueuedJob

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"
NVIDIA = "x86_64&(v100|a100-80gb|h100)"  # one node: a plain OR


def bridge(tmp_path: Path, extra: str) -> JobSubmit:
    site = load_site_text(DEMO.read_text() + extra, "f.yaml")
    return JobSubmit(render_site(site, Profile(state_dir=str(tmp_path)))["job_submit.lua"])


@pytest.fixture
def floating(tmp_path: Path) -> JobSubmit:
    return bridge(tmp_path, "\nplacement: {float: true}\n")


def record(desc: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(desc["admin_comment"]))


def test_a_job_that_several_pools_satisfy_asks_for_any_of_them(floating: JobSubmit) -> None:
    rc, desc = floating.submit({"accel": "nvidia:2"})
    assert rc == 0, floating.logs
    assert (desc["tres_per_node"], desc["features"]) == ("gres:gpu:2", NVIDIA)
    rec = record(desc)
    assert rec["float"] == "v100@x86_64,a100-80gb@x86_64,h100@x86_64"  # best first
    assert rec["pool"] == "v100@x86_64" and "movable" not in rec  # the guess, and nothing to move
    # One node asked for explicitly: a plain OR too, whatever its tasks.
    rc, desc = floating.submit({"accel": "nvidia:1"}, min_nodes=1, max_nodes=1, num_tasks=8)
    assert (desc["tres_per_node"], desc["features"]) == ("gres:gpu:1", NVIDIA)
    # Tasks that might spread over nodes, or a node list (-w: the job gets every node named):
    # a matching OR keeps every node on one model.
    for fields in ({"num_tasks": 8}, {"req_nodes": "v100-01,a100-01"}):
        rc, desc = floating.submit({"accel": "nvidia:1"}, **fields)
        assert (desc["tres_per_node"], desc["features"]) == ("gres:gpu:1", "x86_64&[v100|a100-80gb|h100]"), fields


@pytest.mark.parametrize(("why", "options", "fields", "tres", "features"), [
    ("one model asked for", {"accel": "a100-80gb:2"}, {}, "gres:gpu:a100-80gb:2", "x86_64"),
    ("the user's own constraint", {"accel": "nvidia:2"}, {"features": "ib"}, "gres:gpu:v100:2", "(ib)&x86_64"),
    ("several nodes", {"accel": "nvidia:2"}, {"min_nodes": 2, "max_nodes": 2}, "gres:gpu:v100:2", "x86_64"),
    ("up to several nodes", {"accel": "nvidia:2"}, {"max_nodes": 3}, "gres:gpu:v100:2", "x86_64"),
    ("at least two nodes", {"accel": "nvidia:2"}, {"min_nodes": 2}, "gres:gpu:v100:2", "x86_64"),
    ("--migratable (the daemon may move it running)", {"accel": "nvidia:2", "checkpoint": "/tmp/ck",
                                                        "migratable": ""}, {}, "gres:gpu:v100:2", "x86_64"),
    # units=2 on x86: 2 A100s or 1 H100 (5 V100s fit no node); the pools differ in count.
    ("no other pool with its device count", {"accel": "units=2", "arch": "x86_64"}, {},
     "gres:gpu:a100-80gb:2", "x86_64"),
    ("a tier whose limits cap models", {"accel": "nvidia:2", "tier": "diamond"}, {}, "gres:gpu:v100:2", "x86_64"),
    ("the default tier by --qos", {"accel": "nvidia:2"}, {"qos": "diamond"}, "gres:gpu:v100:2", "x86_64"),
    # units=2: 3 910Bs (aarch64, npu), 2 A100s, 1 H100, 1 GH200; the chosen 910B has no equal.
    ("no other pool of its arch, kind and count", {"accel": "units=2"}, {}, "gres:npu:910b:3", "aarch64"),
])
def test_jobs_that_stay_pinned(floating: JobSubmit, why: str, options: dict[str, str],
                               fields: dict[str, Any], tres: str, features: str) -> None:
    rc, desc = floating.submit(options, **fields)
    assert rc == 0, (why, floating.logs)
    assert (desc["tres_per_node"], desc["features"]) == (tres, features), why
    assert "float" not in record(desc), why


def test_only_the_pools_of_the_chosen_arch_kind_and_count_join(floating: JobSubmit) -> None:
    # any:1 is satisfied by NVIDIA pools on both arches and by the 910Bs (npu): the x86 GPUs float.
    rc, desc = floating.submit({"accel": "any:1"})
    assert rc == 0
    rec = record(desc)
    assert desc["features"] == NVIDIA and desc["tres_per_node"] == "gres:gpu:1"
    assert set(rec["float"].split(",")) == {"v100@x86_64", "a100-80gb@x86_64", "h100@x86_64"}
    assert len(rec["cands"].split(",")) == 5  # gh200 and the 910B stay offers of the record only


def test_off_by_default_and_with_migration_the_floating_job_is_not_moved(tmp_path: Path) -> None:
    rc, desc = bridge(tmp_path / "a", "").submit({"accel": "nvidia:2"})
    assert (desc["tres_per_node"], desc["features"]) == ("gres:gpu:v100:2", "x86_64")
    both = bridge(tmp_path / "b", "\nplacement: {float: true}\nmigration: {pending: true}\n")
    rc, desc = both.submit({"accel": "nvidia:2"})
    assert rc == 0 and desc["features"] == NVIDIA and "movable" not in record(desc)


def test_a_pending_floating_job_counts_in_each_of_its_pools(tmp_path: Path) -> None:
    site: Site = load_site(DEMO)
    job = QueuedJob(job_id=7, state="PENDING", user="u", name="n", partition="gpu", time_limit_min=60,
                    submit_time=0.0, start_time=None, admin_comment="", gres_detail=(), nodes="",
                    tres_per_node="gres:gpu:2", features="", node_count=1,
                    reason="Resources")
    # It takes the first of them that frees: each one's queue holds it.
    for features in ("x86_64&[v100|h100]", "x86_64&(v100|h100)"):
        caps = build_snapshot(site, "", [replace(job, features=features)])
        assert (caps["v100@x86_64"].pending, caps["h100@x86_64"].pending) == (2, 2), features
        assert caps["a100-80gb@x86_64"].pending == 0 and caps["gh200@aarch64"].pending == 0


@pytest.mark.parametrize("value", ["yes", 1, {"on": True}])
def test_the_setting_is_a_boolean(value: object) -> None:
    with pytest.raises(SiteError, match="placement"):
        load_site_text(DEMO.read_text() + f"\nplacement: {{float: {json.dumps(value)}}}\n", "bad.yaml")
    with pytest.raises(SiteError, match="placement"):
        load_site_text(DEMO.read_text() + "\nplacement: {floats: true}\n", "bad.yaml")
