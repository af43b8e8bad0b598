"""config.json generation: only the allocated devices, renumbered variables, the admin's
mounts, and nothing a user can smuggle in (mounts outside the allowlist, path tricks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.containers.catalog import BindMount
from slurm_hetero.containers.ociconfig import (
    DeviceNode,
    DevicePlan,
    MountRefused,
    build_config,
    check_mounts,
    driver_mounts,
    env_dict,
    plan_devices,
    slurm_mounts,
)
from slurm_hetero.errors import RuntimeFailure
from tests.unit.container_fixtures import DevTree, dev_tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> DevTree:
    return dev_tree(tmp_path_factory.mktemp("tree"))


def test_allocated_gpus_only_renumbered_from_zero(tree: DevTree) -> None:
    facts = tree.conf.node("a100-02")
    plan = plan_devices(facts, {"gpu": [2, 3]})
    base = f"{tree.tmp}/dev/a100-02"
    assert [(d.host, d.path) for d in plan.nodes] == [
        (f"{base}/nvidia2", "/dev/nvidia2"), (f"{base}/nvidia3", "/dev/nvidia3"),
        (f"{base}/nvidiactl", "/dev/nvidiactl"), (f"{base}/nvidia-uvm", "/dev/nvidia-uvm")]
    assert (plan.nodes[0].major, plan.nodes[0].minor) == (1, 3)  # the emulated device
    assert plan.visible == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert plan.stacks == ("cuda",)


def test_npus_get_ascend_control_devices(tree: DevTree) -> None:
    plan = plan_devices(tree.conf.node("npu-01"), {"npu": [5]})
    assert [d.path for d in plan.nodes] == ["/dev/davinci5", "/dev/davinci_manager", "/dev/devmm_svm",
                                            "/dev/hisi_hdc"]
    assert plan.visible == {"ASCEND_RT_VISIBLE_DEVICES": "0"}


def test_a_shard_gets_its_gpu(tree: DevTree) -> None:
    plan = plan_devices(tree.conf.node("v100-01"), {"shard": [1]})
    assert plan.nodes[0].path == "/dev/nvidia1"
    assert plan.visible == {"CUDA_VISIBLE_DEVICES": "0"}


def test_no_allocation_no_devices(tree: DevTree) -> None:
    plan = plan_devices(tree.conf.node("a100-01"), {})
    assert plan.nodes == () and plan.visible == {} and plan.stacks == ()


def test_index_beyond_the_node_and_missing_files_fail(tree: DevTree, tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match="allocated gpu index 4 but node a100-01 has 4 device files"):
        plan_devices(tree.conf.node("a100-01"), {"gpu": [4]})
    other = dev_tree(tmp_path)
    os.unlink(tmp_path / "dev" / "a100-01" / "nvidiactl")
    with pytest.raises(RuntimeFailure, match="nvidiactl is missing on this node"):
        plan_devices(other.conf.node("a100-01"), {"gpu": [0]})


def test_driver_folder_read_only_and_required(tree: DevTree, tmp_path: Path) -> None:
    facts = tree.conf.node("npu-02")
    [m] = driver_mounts(facts, ["cann"], tree.conf.driver_dirs)
    assert m == {"destination": "/usr/local/Ascend/driver", "type": "bind",
                 "source": f"{tree.tmp}/dev/npu-02/fs/usr/local/Ascend/driver",
                 "options": ["rbind", "ro", "nosuid", "nodev"]}
    assert driver_mounts(facts, ["cuda"], tree.conf.driver_dirs) == []
    with pytest.raises(RuntimeFailure, match=r"driver folder \S+ for cann is missing on npu-02"):
        driver_mounts(facts, ["cann"], {"cann": ["/nonexistent/driver"]})


# ---- mounts ------------------------------------------------------------------------------

@pytest.fixture
def allow(tmp_path: Path) -> list[BindMount]:
    (tmp_path / "scratch" / "me").mkdir(parents=True)
    (tmp_path / "sets" / "imagenet").mkdir(parents=True)
    (tmp_path / "scratch" / "escape").symlink_to("/etc")
    return [BindMount(str(tmp_path / "scratch"), "/scratch", "rw"),
            BindMount(str(tmp_path / "sets"), "/datasets", "ro")]


def test_allowed_mounts(allow: list[BindMount], tmp_path: Path) -> None:
    req = f"{tmp_path}/scratch/me:/work:rw,{tmp_path}/sets/imagenet"
    assert check_mounts(req, allow) == [
        {"destination": "/work", "type": "bind", "source": f"{tmp_path}/scratch/me",
         "options": ["rbind", "rw", "nosuid", "nodev"]},
        {"destination": "/datasets/imagenet", "type": "bind", "source": f"{tmp_path}/sets/imagenet",
         "options": ["rbind", "ro", "nosuid", "nodev"]}]
    assert check_mounts("", allow) == []


@pytest.mark.parametrize(("request_", "message"), [
    ("/etc", "/etc is not in the site's mount allowlist (allowed: {t}/scratch (rw), {t}/sets (ro))"),
    ("{t}/scratch/../../etc", "must not contain '..'"),
    ("scratch/me", "must be an absolute path"),
    ("{t}/scratch/me\0x", "contains a NUL byte"),
    ("{t}/scratch/escape", "resolves to /etc, outside the allowed {t}/scratch"),
    ("{t}/sets/imagenet:/d:rw", "may only be mounted read-only"),
    ("{t}/scratch/me:/proc/x", "destination /proc/x is reserved"),
    ("{t}/scratch/me:/", "destination / is reserved"),
    ("{t}/scratch/me:/tmp/slurm/startup", "is reserved"),
    ("{t}/scratch/nothere", "does not exist on this node"),
    ("{t}/scratch/me:a:b:c", "use SRC[:DST][:ro|rw]"),
    ("{t}/scratchy", "is not in the site's mount allowlist"),
])
def test_refused_mounts(allow: list[BindMount], tmp_path: Path, request_: str, message: str) -> None:
    with pytest.raises(MountRefused) as e:
        check_mounts(request_.format(t=tmp_path), allow)
    assert message.format(t=tmp_path) in str(e.value)
    assert str(e.value).startswith("SLURM_HETERO_MOUNTS: ") and e.value.exit_code == 2


def test_only_slurms_own_mounts_pass() -> None:
    cfg = {"mounts": [
        {"destination": "/tmp/slurm/stdout", "type": "none", "source": "/o/1.out", "options": ["bind"]},
        {"destination": "/tmp/slurm/startup", "type": "none", "source": "/s/script", "options": ["bind", "ro"]},
        {"destination": "/var/run/slurm", "type": "none", "source": "/spool", "options": ["bind"]},
        {"destination": "/etc/shadow", "type": "bind", "source": "/etc/shadow", "options": ["bind"]},
        {"destination": "/tmp/slurm/stderr", "type": "bind", "source": "/x", "options": ["rbind", "rshared"]},
        {"destination": "/proc", "type": "proc", "source": "proc"},
    ]}
    assert [m["destination"] for m in slurm_mounts(cfg)] == ["/tmp/slurm/stdout", "/tmp/slurm/startup",
                                                             "/var/run/slurm"]


# ---- the whole config --------------------------------------------------------------------

VARIANT: dict[str, Any] = {
    "ociVersion": "1.0.2",
    "process": {"args": ["/bin/sh"], "env": ["PATH=/usr/local/cuda/bin:/bin", "CUDA_VERSION=12.4"],
                "cwd": "/", "user": {"uid": 0, "gid": 0}},
    "root": {"path": "rootfs", "readonly": True},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    "linux": {"namespaces": [{"type": "pid"}, {"type": "uts"}, {"type": "mount"}],
              "resources": {"devices": [{"allow": False, "access": "rwm"}]}},
}
SLURM: dict[str, Any] = {
    "process": {"args": ["/tmp/slurm/startup"], "terminal": False,
                "env": ["PATH=/usr/bin", "HOME=/root", "CUDA_VISIBLE_DEVICES=2,3", "GPU_DEVICE_ORDINAL=2,3",
                        "NCCL_IB_HCA=user-value", "PATH=/host/bin:/usr/bin", "SLURM_JOB_ID=7"]},
    "root": {"path": "/images/pytorch/24.05/rootfs"},
    "mounts": [{"destination": "/tmp/slurm/startup", "type": "none", "source": "/spool/script",
                "options": ["bind", "ro"]},
               {"destination": "/etc", "type": "none", "source": "/etc", "options": ["bind"]}],
}
PLAN = DevicePlan((DeviceNode("/dev/nvidia2", "/dev/nvidia2", 195, 2),
                   DeviceNode("/dev/nvidiactl", "/dev/nvidiactl", 195, 255)),
                  {"CUDA_VISIBLE_DEVICES": "0"}, ("cuda",))


def config(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"devices": PLAN, "fabric_env": {"NCCL_IB_HCA": "mlx5"}, "mounts": [],
                            "hostname": "a100-01", "annotations": {"org.slurm-hetero.image": "pytorch:24.05"}}
    return build_config(VARIANT, "/images/pytorch/24.05/x86_64-cuda12.4", SLURM, **{**args, **kw})


def test_config_layers() -> None:
    cfg = config()
    env = env_dict(cfg["process"]["env"])
    assert env["PATH"] == "/usr/local/cuda/bin:/bin"      # the image's, not the submit host's
    assert env["CUDA_VERSION"] == "12.4" and env["SLURM_JOB_ID"] == "7" and env["HOME"] == "/root"
    assert env["NCCL_IB_HCA"] == "mlx5"                   # the site's fabric setting
    assert env["CUDA_VISIBLE_DEVICES"] == "0"             # renumbered
    assert "GPU_DEVICE_ORDINAL" not in env                # host numbering dropped
    assert cfg["process"]["args"] == ["/tmp/slurm/startup"]
    assert cfg["root"] == {"path": "/images/pytorch/24.05/x86_64-cuda12.4/rootfs", "readonly": True}
    assert cfg["hostname"] == "a100-01"
    assert [m["destination"] for m in cfg["mounts"]] == ["/proc", "/tmp/slurm/startup", "/dev/nvidia2",
                                                         "/dev/nvidiactl"]
    assert "nodev" not in cfg["mounts"][2]["options"]
    assert cfg["linux"]["resources"]["devices"] == [
        {"allow": False, "access": "rwm"},
        {"allow": True, "type": "c", "major": 195, "minor": 2, "access": "rwm"},
        {"allow": True, "type": "c", "major": 195, "minor": 255, "access": "rwm"}]
    assert cfg["annotations"] == {"org.slurm-hetero.image": "pytorch:24.05"}
    assert VARIANT["mounts"] == [{"destination": "/proc", "type": "proc", "source": "proc"}]  # not mutated


def test_rootless_config_maps_the_user() -> None:
    cfg = config(rootless=True, uid=1000, gid=100)
    assert {"type": "user"} in cfg["linux"]["namespaces"]
    assert cfg["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 1000, "size": 1}]
    assert cfg["linux"]["gidMappings"] == [{"containerID": 0, "hostID": 100, "size": 1}]
    assert cfg["process"]["user"] == {"uid": 0, "gid": 0}  # root inside is the user outside
    assert "resources" not in cfg["linux"]


def test_rootless_binds_sys_instead_of_mounting_sysfs() -> None:
    variant = {**VARIANT, "mounts": [{"destination": "/sys", "type": "sysfs", "source": "sysfs",
                                      "options": ["nosuid", "noexec", "nodev", "ro"]}]}
    cfg = build_config(variant, "/v", SLURM, devices=PLAN, fabric_env={}, mounts=[], hostname=None,
                       annotations={}, rootless=True, uid=1000, gid=100)
    assert cfg["mounts"][0] == {"destination": "/sys", "type": "none", "source": "/sys",
                                "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]}
