"""Variant resolution: arch, the stack of the job's devices, driver limits, newest fit."""

from __future__ import annotations

import pytest

from slurm_hetero.containers.nodeconf import NodeFacts
from slurm_hetero.containers.resolve import NoVariant, resolve
from slurm_hetero.site.images import DriverInfo, Image, ImageVariant


def v(arch: str, stack: str, version: str | None = None, min_driver: str | None = None) -> ImageVariant:
    return ImageVariant(arch, stack, version, f"{arch}-{stack}{version or ''}", min_driver)


PYTORCH = Image("pytorch", "24.05", (
    v("x86_64", "cuda", "12.4", "550.54.14"),
    v("x86_64", "cuda", "12.1", "530.30.02"),
    v("aarch64", "cuda", "12.4", "550.54.14"),
    v("aarch64", "cann", "8.0.RC1", "23.0.3"),
    v("x86_64", "cpu"),
    v("aarch64", "cpu"),
))


def node(arch: str, stacks: dict[str, DriverInfo], name: str = "n1") -> NodeFacts:
    devices = {"gpu" if s != "cann" else "npu": [(f"dev{i}", s) for i in range(2)] for s in stacks}
    return NodeFacts(name, arch, stacks, {}, devices, "/dev", "")


NEW_CUDA = {"cuda": DriverInfo("550.54.14", "12.4")}
OLD_CUDA = {"cuda": DriverInfo("535.104.05", "12.2")}
CANN = {"cann": DriverInfo("24.1.rc1", "8.0")}


@pytest.mark.parametrize(("arch", "drivers", "stack", "label"), [
    ("x86_64", NEW_CUDA, "cuda", "x86_64/cuda12.4"),     # newest that fits
    ("x86_64", OLD_CUDA, "cuda", "x86_64/cuda12.1"),     # 12.4 is too new for this driver
    ("aarch64", NEW_CUDA, "cuda", "aarch64/cuda12.4"),   # GH200
    ("aarch64", CANN, "cann", "aarch64/cann8.0.RC1"),    # Ascend
    ("x86_64", NEW_CUDA, None, "x86_64/cpu"),            # no devices allocated: the cpu build
    ("aarch64", {}, None, "aarch64/cpu"),                # CPU-only node
    ("x86_64", {}, "cuda", "x86_64/cuda12.4"),           # no driver declared: nothing to check
])
def test_resolution(arch: str, drivers: dict[str, DriverInfo], stack: str | None, label: str) -> None:
    assert resolve(PYTORCH, node(arch, drivers), stack).label == label


def test_cuda_12_4_on_a_driver_for_12_2_is_refused_with_the_reason() -> None:
    only_124 = Image("pytorch", "24.05", (v("x86_64", "cuda", "12.4", "550.54.14"), v("x86_64", "cpu")))
    with pytest.raises(NoVariant) as e:
        resolve(only_124, node("x86_64", OLD_CUDA, "v100-01"), "cuda")
    assert str(e.value) == (
        "image pytorch:24.05: no variant fits the driver of v100-01: x86_64/cuda12.4 needs CUDA 12.4, "
        "but the driver of v100-01 (535.104.05) supports CUDA <= 12.2")
    assert e.value.exit_code == 2


def test_minimum_driver_is_checked() -> None:
    img = Image("x", "1", (v("x86_64", "cuda", "12.2", "540.0"),))
    with pytest.raises(NoVariant, match=r"needs driver >= 540.0, but n1 has 535.104.05"):
        resolve(img, node("x86_64", OLD_CUDA), "cuda")


def test_no_variant_for_the_stack_or_arch() -> None:
    cpu_only = Image("busybox", "1.35", (v("x86_64", "cpu"),))
    with pytest.raises(NoVariant, match=r"^image busybox:1.35 has no x86_64/cuda variant for node n1; "
                                        r"it has: x86_64/cpu$"):
        resolve(cpu_only, node("x86_64", NEW_CUDA), "cuda")
    with pytest.raises(NoVariant, match=r"has no aarch64/cpu variant"):
        resolve(cpu_only, node("aarch64", {}), None)


def test_accelerator_build_serves_a_job_without_devices_when_no_cpu_build() -> None:
    img = Image("cuda-only", "1", (v("x86_64", "cuda", "12.1"),))
    assert resolve(img, node("x86_64", NEW_CUDA), None).label == "x86_64/cuda12.1"
