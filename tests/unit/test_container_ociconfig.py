"""config.json generation: only the allocated devices, renumbered variables, the admin's
mounts, and nothing a user can smuggle in (mounts outside the allowlist, path tricks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.containers.ociconfig import (
    DeviceNode,
    DevicePlan,
    MountRefused,
    build_config,
    check_image_untouched,
    check_mounts,
    driver_mounts,
    env_dict,
    locate,
    plan_devices,
    slurm_mounts,
)
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.site.images import BindMount
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

EARLIER: list[dict[str, Any]] = [  # what runc mounts before the user's mounts (variant, Slurm, site)
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
    {"destination": "/tmp/slurm/startup", "type": "none", "source": "/spool/script", "options": ["bind", "ro"]},
    {"destination": "/usr/share/zoneinfo", "type": "bind", "source": "/usr/share/zoneinfo",
     "options": ["rbind", "ro"]},
]


@pytest.fixture
def allow(tmp_path: Path) -> list[BindMount]:
    (tmp_path / "scratch" / "me").mkdir(parents=True)
    (tmp_path / "sets" / "imagenet").mkdir(parents=True)
    (tmp_path / "scratch" / "escape").symlink_to("/etc")
    return [BindMount(str(tmp_path / "scratch"), "/scratch", "rw"),
            BindMount(str(tmp_path / "sets"), "/datasets", "ro")]


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    """An image's rootfs with the traps a shared image may hold: symlinks out of it, a
    symlink into a reserved folder, a loop, a file where a folder is expected."""
    root = tmp_path / "image" / "rootfs"
    for d in ("bin", "etc", "proc", "dev", "tmp", "work", "mnt", "datasets", "scratch", "usr/share/zoneinfo"):
        (root / d).mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0::/:/bin/sh\n")
    (root / "data").symlink_to("/mnt")                        # inside the image: fine
    (root / "out").symlink_to("../" * 12 + "var/lib")         # climbs out, if followed on the host
    (root / "abs").symlink_to("/var/lib")                      # absolute: the host's, if followed there
    (root / "devlink").symlink_to("/dev")
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    return root


def tree_of(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.lstat().st_mode) for p in root.rglob("*"))


def mounts(text: str, allow: list[BindMount], rootfs: Path) -> list[dict[str, Any]]:
    return check_mounts(text, allow, rootfs=str(rootfs), earlier=EARLIER)


def bind(source: str, destination: str, mode: str) -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": source,
            "options": ["rbind", mode, "nosuid", "nodev"]}


def test_allowed_mounts(allow: list[BindMount], tmp_path: Path, rootfs: Path) -> None:
    req = f"{tmp_path}/scratch/me:/work:rw,{tmp_path}/sets/imagenet,{tmp_path}/scratch/me:/tmp/in:ro"
    assert mounts(req, allow, rootfs) == [
        # /datasets is a folder of the image, /datasets/imagenet is not: a tmpfs of the
        # container's own holds the mount point.
        {"destination": "/datasets", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "noexec", "mode=755", "size=64k"]},
        bind(f"{tmp_path}/scratch/me", "/work", "rw"),
        bind(f"{tmp_path}/sets/imagenet", "/datasets/imagenet", "ro"),
        bind(f"{tmp_path}/scratch/me", "/tmp/in", "ro"),  # in the variant's /tmp tmpfs
    ]
    assert mounts("", allow, rootfs) == []


def test_destination_through_a_symlink_of_the_image(allow: list[BindMount], tmp_path: Path, rootfs: Path) -> None:
    """runc resolves the image's symlinks inside the rootfs; the config names where it lands."""
    assert mounts(f"{tmp_path}/scratch/me:/data", allow, rootfs) == [bind(f"{tmp_path}/scratch/me", "/mnt", "rw")]


def test_whole_entry_at_its_destination(allow: list[BindMount], tmp_path: Path, rootfs: Path) -> None:
    assert mounts(f"{tmp_path}/scratch", allow, rootfs) == [bind(f"{tmp_path}/scratch", "/scratch", "rw")]


@pytest.mark.parametrize(("request_", "message"), [
    ("/etc", "/etc is not in the site's mount allowlist (allowed: {t}/scratch (rw), {t}/sets (ro))"),
    ("{t}/scratch/../../etc", "must not contain '..'"),
    ("scratch/me", "must be an absolute path"),
    ("{t}/scratch/me\0x", "contains a NUL byte"),
    ("{t}/scratch/me\nx", "source '{t}/scratch/me\\nx' contains a control character (U+000A)"),
    ("{t}/scratch/me:/work\x1b[2J", "contains a control character (U+001B)"),
    ("{t}/scratch/me\x7f", "contains a control character (U+007F)"),
    ("{t}/scratch/escape", "resolves to /etc, outside the allowed {t}/scratch"),
    ("{t}/sets/imagenet:/d:rw", "may only be mounted read-only"),
    ("{t}/scratch/me:/proc/x", "destination /proc/x is reserved"),
    ("{t}/scratch/me:/", "destination / is reserved"),
    ("{t}/scratch/me:/tmp/slurm/startup", "is reserved"),
    ("{t}/scratch/me:/tmp", "destination /tmp is reserved (it would hide /tmp/slurm"),
    ("{t}/scratch/me:/var", "it would hide /var/run/slurm"),
    ("{t}/scratch/nothere", "does not exist on this node"),
    ("{t}/scratch/me:a:b:c", "use SRC[:DST][:ro|rw]"),
    ("{t}/scratchy", "is not in the site's mount allowlist"),
    # non-normalized paths are refused, not silently rewritten
    ("{t}/scratch/me/", "source '{t}/scratch/me/' is not a normalized path"),
    ("{t}/scratch//me", "write {t}/scratch/me"),
    ("{t}/scratch/./me", "is not a normalized path"),
    ("{t}/scratch/me:/work/", "destination '/work/' is not a normalized path (no '.', '//' or trailing '/')"),
    ("{t}/scratch/me://work", "destination '//work' is not a normalized path"),
    # the shared image is never changed: a destination it lacks is refused ...
    ("{t}/scratch/me:/newdir", "destination /newdir does not exist in the image (it lacks /newdir)"),
    ("{t}/scratch/me:/work/deeper/still", "(it lacks /work/deeper)"),
    ("{t}/scratch/me:/etc/passwd/x", "(it lacks /etc/passwd)"),  # a file where a folder should be
    # ... symlinks of the image never lead out of it (here: to folders that exist on the host)
    ("{t}/scratch/me:/out/x", "destination /out/x (in the image: /var/lib/x) does not exist in the image "
                              "(it lacks /var)"),
    ("{t}/scratch/me:/abs", "destination /abs (in the image: /var/lib) does not exist in the image"),
    ("{t}/scratch/me:/devlink/nvidia0", "destination /devlink/nvidia0 (in the image: /dev/nvidia0) is reserved"),
    ("{t}/scratch/me:/loop1/x", "destination /loop1/x: too many symlinks in the image"),
    # ... and so is a destination inside a host folder mounted before it
    ("{t}/scratch/me:/usr/share/zoneinfo/x", "destination /usr/share/zoneinfo/x lies inside the mount at "
                                             "/usr/share/zoneinfo; mount it at a folder of the image, or under "),
    ("{t}/scratch:/scratch,{t}/scratch/me", "destination /scratch/me lies inside the mount at /scratch"),
])
def test_refused_mounts(allow: list[BindMount], tmp_path: Path, rootfs: Path, request_: str, message: str) -> None:
    before = tree_of(rootfs)
    assert os.path.isdir("/var/lib")  # the host has what the image's links point at
    with pytest.raises(MountRefused) as e:
        mounts(request_.format(t=tmp_path), allow, rootfs)
    assert message.format(t=tmp_path) in str(e.value)
    assert str(e.value).startswith("SLURM_HETERO_MOUNTS: ") and e.value.exit_code == 2
    assert tree_of(rootfs) == before


def test_refusal_says_where_mounts_may_go(allow: list[BindMount], tmp_path: Path, rootfs: Path) -> None:
    with pytest.raises(MountRefused) as e:
        mounts(f"{tmp_path}/scratch/me:/newdir", allow, rootfs)
    assert str(e.value) == ("SLURM_HETERO_MOUNTS: destination /newdir does not exist in the image (it lacks "
                            "/newdir) and jobs cannot add folders to a shared image: use a folder the image "
                            "has, or under /tmp")


def test_no_tmpfs_where_the_image_lacks_the_entry_folder(allow: list[BindMount], tmp_path: Path,
                                                         rootfs: Path) -> None:
    (rootfs / "datasets").rmdir()
    with pytest.raises(MountRefused, match=r"destination /datasets/imagenet does not exist in the image "
                                           r"\(it lacks /datasets\)"):
        mounts(f"{tmp_path}/sets/imagenet", allow, rootfs)


def test_locate_stays_inside_the_rootfs(rootfs: Path) -> None:
    loc = locate(str(rootfs), "/out/x", {})
    assert (loc.path, loc.missing, loc.holder) == ("/var/lib/x", "/var", None)
    # '..' below a missing part comes back into the image
    assert locate(str(rootfs), "/var/../etc", {}).missing is None
    assert locate(str(rootfs), "/data", {}).path == "/mnt"
    tmpfs = {"destination": "/mnt", "type": "tmpfs"}
    loc = locate(str(rootfs), "/data/a/b", {"/mnt": tmpfs})
    assert (loc.path, loc.holder, loc.holder_at, loc.missing, loc.in_tmpfs) == ("/mnt/a/b", tmpfs, "/mnt", None, True)


def test_last_guard_before_runc(rootfs: Path) -> None:
    cfg: dict[str, Any] = {"root": {"path": str(rootfs)}, "mounts": [*EARLIER, {
        "destination": "/dev/nvidia0", "type": "bind", "source": "/dev/null"}]}
    check_image_untouched(cfg, "image x:1 x86_64/cpu")  # all in the image or in a tmpfs
    cfg["mounts"].append({"destination": "/usr/local/Ascend/driver", "type": "bind", "source": "/x"})
    with pytest.raises(RuntimeFailure) as e:
        check_image_untouched(cfg, "image x:1 aarch64/cann8.0")
    assert str(e.value) == (f"image x:1 aarch64/cann8.0: mount point /usr/local/Ascend/driver is missing in "
                            f"{rootfs} (it lacks /usr/local); runc would create it in the shared image: add it "
                            "to the image, or a tmpfs over its folder in the variant's config.json")


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


def test_the_image_is_always_read_only() -> None:
    """The rootfs is shared by every job running the variant: its config cannot open it."""
    writable = {**VARIANT, "root": {"path": "rootfs", "readonly": False}}
    cfg = build_config(writable, "/v", SLURM, devices=PLAN, fabric_env={}, mounts=[], hostname=None,
                       annotations={})
    assert cfg["root"] == {"path": "/v/rootfs", "readonly": True}
    assert writable["root"] == {"path": "rootfs", "readonly": False}  # not mutated
    no_root = {k: v for k, v in VARIANT.items() if k != "root"}
    assert build_config(no_root, "/v", SLURM, devices=PLAN, fabric_env={}, mounts=[], hostname=None,
                        annotations={})["root"] == {"path": "/v/rootfs", "readonly": True}
