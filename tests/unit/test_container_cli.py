"""`slurm-hetero container ...` (the group slurm_hetero.cli registers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.containers.cli import container


def invoke(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(container, list(args))
    return r.exit_code, r.output


def test_images_lists_every_variant() -> None:
    code, out = invoke("images")
    assert code == 0, out
    assert out.count("pytorch:24.05") == 5 and "aarch64/cann8.0.RC1" in out and "550.54.14" in out


def test_resolve_shows_variant_devices_and_variables() -> None:
    code, out = invoke("resolve", "pytorch:24.05", "--node", "a100-02", "--gres", "gpu=1,3")
    assert code == 0, out
    assert "x86_64/cuda12.4" in out and "device /dev/nvidia1" in out and "device /dev/nvidia3" in out
    assert "CUDA_VISIBLE_DEVICES=0,1" in out and "NCCL_IB_HCA=mlx5" in out


def test_resolve_refusals_exit_2() -> None:
    code, out = invoke("resolve", "pytorch:24.05", "--node", "v100-01", "--gres", "gpu=0")
    assert code == 2 and "supports CUDA <= 12.2" in out
    code, out = invoke("resolve", "nope:1", "--node", "v100-01")
    assert code == 2 and "IMAGE 'nope:1': not in the catalog; known: busybox:1.35, pytorch:24.05" in out
    code, out = invoke("resolve", "pytorch:24.05", "--node", "a100-01", "--gres", "gpu=x")
    assert code == 2 and "use NAME=IDX" in out


def test_stubs_and_busybox_bundles(tmp_path: Path) -> None:
    code, out = invoke("stubs", "--root", str(tmp_path))
    assert code == 0, out
    stub = json.loads((tmp_path / "pytorch" / "24.05" / "config.json").read_text())
    assert stub["mounts"] == [] and stub["root"]["path"] == "rootfs"
    code, out = invoke("busybox", "--root", str(tmp_path))
    assert code == 0 and "built 7 busybox bundles" in out
    variant = tmp_path / "pytorch" / "24.05" / "aarch64-cann8.0.RC1"
    assert (variant / "rootfs" / "etc" / "hetero-variant").read_text() == "pytorch:24.05 aarch64/cann8.0.RC1\n"
    assert (variant / "rootfs" / "bin" / "sh").is_symlink()
    # The mount points the wrapper needs are folders of the image (it never lets runc add them).
    for d in ("scratch", "usr/share/zoneinfo", "var/run/slurm", "usr/local/Ascend/driver"):
        assert (variant / "rootfs" / d).is_dir(), d
    cpu = tmp_path / "pytorch" / "24.05" / "x86_64-cpu" / "rootfs"
    assert (cpu / "scratch").is_dir() and not (cpu / "usr" / "local").exists()


def test_busybox_mount_points_stay_inside(tmp_path: Path) -> None:
    from slurm_hetero.containers.bundle import busybox_bundle
    from slurm_hetero.errors import RuntimeFailure

    for bad in ("../../outside", "/a/../../b", "relative", "/"):
        with pytest.raises(RuntimeFailure, match="mount point"):
            busybox_bundle(tmp_path / "b", "x", mount_points=[bad])
    assert not (tmp_path / "outside").exists()
