"""The bridge's --image handling (generated job_submit.lua under Lua 5.1, as slurmctld runs it)."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_hetero.bridge.luarun import OPTION_PREFIX, JobSubmit
from slurm_hetero.conf.render import Profile, render_site
from slurm_hetero.site import load_site, load_site_text
from tests.unit.container_fixtures import DEMO

ROOT = "/var/lib/slurm-hetero/images"
PYTORCH = f"{ROOT}/pytorch/24.05"
SCRIPT = "#!/bin/sh\ntrue\n"


@pytest.fixture(scope="module")
def js() -> JobSubmit:
    return JobSubmit(render_site(load_site(DEMO), Profile(state_dir="/nonexistent"))["job_submit.lua"])


def submit(js: JobSubmit, options: dict[str, str] | None = None, env: dict[str, str] | None = None,
           **fields: Any) -> tuple[int, dict[str, Any], list[str]]:
    js.logs.clear()
    environment = {OPTION_PREFIX + k: v for k, v in (options or {}).items()} | (env or {})
    desc = js.lua.table_from({**fields, "environment": js.lua.table_from(environment)})
    rc = js.lua.globals().slurm_job_submit(desc, js.lua.table(), 0)
    out = {k: v for k, v in dict(desc).items() if k != "environment"}
    return int(rc), out, js.user_lines()


@pytest.mark.parametrize(("options", "fields", "features", "partition"), [
    ({"image": "pytorch:24.05"}, {}, None, None),
    ({"image": "pytorch"}, {}, None, None),                                   # its only tag
    ({"image": "pytorch:24.05", "accel": "cann:1"}, {}, "aarch64", "npu"),     # Ascend: aarch64 only
    ({"image": "pytorch:24.05"}, {"tres_per_node": "gres:npu:1"}, "aarch64", "npu"),  # routed too
    ({"image": "pytorch:24.05", "arch": "x86_64"}, {}, "x86_64", None),
    ({"image": "pytorch:24.05"}, {"tres_per_node": "gres:gpu:a100-80gb:1", "features": "ib"}, None, "gpu"),
])
def test_image_sets_the_stub_bundle(js: JobSubmit, options: dict[str, str], fields: dict[str, Any],
                                    features: str | None, partition: str | None) -> None:
    rc, desc, lines = submit(js, options, script=SCRIPT, **fields)
    assert (rc, lines) == (0, [])
    assert desc["container"] == PYTORCH
    assert desc.get("features") == (features or fields.get("features"))
    assert desc.get("partition") == partition
    assert '"image":"pytorch:24.05"' in desc["admin_comment"]


def test_single_arch_image_narrows_the_job() -> None:
    text = DEMO.read_text()
    assert text.endswith("      - {arch: x86_64, stack: cpu}\n      - {arch: aarch64, stack: cpu}\n")
    text = text[: -len("      - {arch: x86_64, stack: cpu}\n      - {arch: aarch64, stack: cpu}\n")]
    text += "      - {arch: aarch64, stack: cpu}\n"  # busybox for ARM only
    js = JobSubmit(render_site(load_site_text(text), Profile())["job_submit.lua"])
    rc, desc, _ = submit(js, {"image": "busybox:1.35"}, script=SCRIPT, features="bigmem")
    assert (rc, desc["features"]) == (0, "(bigmem)&aarch64")


@pytest.mark.parametrize(("options", "env", "fields", "message"), [
    ({"image": "nope:1"}, {}, {}, "hetero: --image=nope:1: unknown image; this site has: busybox:1.35, pytorch:24.05"),
    ({"image": "pytorch:23.10"}, {}, {}, "hetero: --image=pytorch:23.10: unknown image"),
    ({"image": "busybox:1.35", "accel": "a100-80gb:1"}, {}, {},
     "hetero: --image=busybox:1.35: image busybox:1.35 has no x86_64/cuda variant; it has: aarch64/cpu, x86_64/cpu"),
    ({"image": "pytorch:24.05", "arch": "x86_64"}, {}, {"tres_per_node": "gres:npu:2"},
     "hetero: --image=pytorch:24.05: image pytorch:24.05 has no x86_64/cann variant"),
    ({"image": "busybox:1.35"}, {}, {"tres_per_node": "gres:shard:1"}, "has no cuda variant"),
    ({"image": "pytorch:24.05"}, {}, {"container": "/home/me/bundle"}, "conflicts with --container"),
    ({"image": "pytorch:24.05"}, {"SLURM_HETERO_MOUNTS": "/etc:/x"}, {},
     "hetero: SLURM_HETERO_MOUNTS=/etc:/x: /etc:/x is outside the site's mount allowlist "
     "(allowed: /tmp (rw), /usr/share/zoneinfo (ro))"),
    ({"image": "pytorch:24.05"}, {"SLURM_HETERO_MOUNTS": "/tmp/../etc"}, {}, "outside the site's mount allowlist"),
    ({"image": "pytorch:24.05"}, {"SLURM_HETERO_MOUNTS": "/usr/share/zoneinfo:/z:rw"}, {}, "outside the site's"),
    ({"image": "pytorch:24.05"}, {"SLURM_HETERO_MOUNTS": "tmp/x"}, {}, "outside the site's"),
    ({}, {}, {"container": "/home/me/bundle"},
     "hetero: --container=/home/me/bundle: not an image of this site; use --image=NAME:TAG "
     "(this site has: busybox:1.35, pytorch:24.05)"),
    ({}, {}, {"container": f"{ROOT}/pytorch/24.05/../../../../etc"}, "not an image of this site"),
    ({}, {}, {"container": f"{ROOT}/busybox/1.35", "tres_per_node": "gres:gpu:1"},
     "image busybox:1.35 has no cuda variant"),
])
def test_rejections_are_one_line(js: JobSubmit, options: dict[str, str], env: dict[str, str],
                                 fields: dict[str, Any], message: str) -> None:
    rc, _, lines = submit(js, options, env, script=SCRIPT, **fields)
    assert rc == -1
    assert len(lines) == 1 and message in lines[0], lines


def test_allowed_mount_request_passes(js: JobSubmit) -> None:
    rc, desc, lines = submit(js, {"image": "busybox"}, {"SLURM_HETERO_MOUNTS": "/tmp/me:/data,/usr/share/zoneinfo"},
                             script=SCRIPT)
    assert (rc, lines, desc["container"]) == (0, [], f"{ROOT}/busybox/1.35")


def test_srun_takes_container_not_image(js: JobSubmit) -> None:
    rc, _, lines = submit(js, {"image": "pytorch:24.05"})  # no batch script: srun or salloc
    assert rc == -1 and lines == [f"hetero: --image=pytorch:24.05: srun and salloc start containers per step: "
                                  f"use --container={PYTORCH} (or sbatch --image)"]
    rc, desc, lines = submit(js, {"image": "pytorch:24.05"}, container=PYTORCH)
    assert (rc, lines, desc["container"]) == (0, [], PYTORCH)


def test_plain_container_of_the_catalog(js: JobSubmit) -> None:
    rc, desc, lines = submit(js, container=f"{ROOT}/pytorch/24.05/", script=SCRIPT, tres_per_node="gres:npu:1")
    assert (rc, lines) == (0, [])
    assert (desc["container"], desc["features"], desc["partition"]) == (PYTORCH, "aarch64", "npu")
    assert "admin_comment" not in desc


def test_site_without_catalog_leaves_containers_to_slurm() -> None:
    site = load_site_text(DEMO.read_text().split("\nimages:\n")[0])
    js = JobSubmit(render_site(site, Profile())["job_submit.lua"])
    rc, desc, lines = submit(js, container="/home/me/bundle", script=SCRIPT)
    assert (rc, lines, desc["container"]) == (0, [], "/home/me/bundle")
    rc, _, lines = submit(js, {"image": "pytorch:24.05"}, script=SCRIPT)
    assert rc == -1 and lines == ["hetero: --image=pytorch:24.05: this site has no image catalog"]
