"""Default-partition routing of the generated job_submit.lua, under Lua 5.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.conf import render_site
from slurm_hetero.site import load_site

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"


@pytest.fixture(scope="module")
def js() -> JobSubmit:
    return JobSubmit(render_site(load_site(DEMO))["job_submit.lua"])


@pytest.mark.parametrize(("tres", "partition"), [
    ("gres:npu:1", "npu"),             # 22.05 spelling
    ("gres/npu:910b:2", "npu"),        # 23.02+ spelling
    ("gres:gpu:h100:1", "gpu"),
    ("gres:shard:1", "gpu"),
    ("gres:license_x:1,gres:gpu:1", "gpu"),
])
def test_gres_without_partition_is_routed(js: JobSubmit, tres: str, partition: str) -> None:
    rc, desc = js.submit(tres_per_node=tres)
    assert rc == 0 and desc["partition"] == partition


def test_explicit_partition_and_plain_jobs_untouched(js: JobSubmit) -> None:
    assert js.submit(tres_per_node="gres:gpu:1", partition="cpu")[1]["partition"] == "cpu"
    rc, desc = js.submit(features="x86_64")
    assert rc == 0 and "partition" not in desc
    assert js.logs == []


def test_internal_error_fails_open(js: JobSubmit) -> None:
    rc, desc = js.submit(tres_per_node=js.lua.table())  # not a string: gmatch raises
    assert rc == 0 and "partition" not in desc
    assert js.logs[-1][0] == "error" and "passed unchanged" in js.logs[-1][1]
