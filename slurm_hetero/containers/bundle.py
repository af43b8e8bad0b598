"""OCI bundles on disk: the per-image stubs Slurm is pointed at, and busybox test bundles.

A stub (<images_root>/<name>/<tag>/config.json) is what --container names: slurmstepd
needs a config.json there to start the step, and the wrapper replaces the config it
derives from it. It has no mounts, so every mount in slurmstepd's copy is Slurm's own.

busybox bundles stand in for real images in tests, the demo and the benchmark: one static
busybox, its applets as symlinks, and /etc/hetero-variant naming the variant, so a job can
print which variant it runs in. Like any image of a site they hold, as empty folders, the
mount points containers need (the site's mount destinations, the stack's driver folders,
Slurm's spool mount): the wrapper refuses to let runc create one in a shared image.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.fileio import write_json_atomic
from slurm_hetero.site.images import Image
from slurm_hetero.site.model import Site

BUSYBOX = "/bin/busybox"
# Slurm 23.02+ mounts the step's spool folder here.
SLURM_MOUNT_POINTS = ("/var/run/slurm",)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data, indent=1)


def stub_config(image: Image) -> dict[str, Any]:
    return {
        "ociVersion": "1.0.2",
        "process": {"cwd": "/", "args": ["/bin/sh"], "env": [], "terminal": False},
        "root": {"path": "rootfs", "readonly": True},
        "mounts": [],
        "annotations": {"org.slurm-hetero.image": image.ref,
                        "org.slurm-hetero.note": "a stub: slurm-hetero's wrapper runs the "
                                                 "variant for the node (see oci.conf)"},
    }


def write_stubs(site: Site, images_root: str) -> list[Path]:
    """A stub per catalog image under images_root (run on every node, or shared storage)."""
    out = []
    for img in site.images.values():
        path = Path(img.logical_path(images_root)) / "config.json"
        _write_json(path, stub_config(img))
        out.append(path)
    return out


def runtime_spec(env: Mapping[str, str], readonly: bool = True) -> dict[str, Any]:
    """A minimal OCI runtime spec for runc as root. No network namespace: HPC jobs use the
    host's network (MPI, NCCL/HCCL); mount, pid, ipc and uts are private."""
    caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["/bin/sh"],
            "env": [f"{k}={v}" for k, v in env.items()], "cwd": "/",
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted", "ambient")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": readonly},
        "hostname": "container",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777"]},
        ],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def _applets(busybox: str) -> list[str]:
    try:
        r = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeFailure(f"{busybox}: cannot list its applets (install busybox-static): {e}") from e
    return [a for a in r.stdout.split() if a and "/" not in a and a != "busybox"]


def busybox_bundle(dest: str | Path, label: str, env: Mapping[str, str] | None = None,
                   busybox: str = BUSYBOX, mount_points: Iterable[str] = ()) -> Path:
    """A runnable bundle at dest: rootfs/bin/busybox (+ applets), /etc/hetero-variant = label,
    and empty folders at `mount_points` (absolute paths inside the image)."""
    dest = Path(dest)
    rootfs = dest / "rootfs"
    if rootfs.exists():
        shutil.rmtree(rootfs)
    for d in ("bin", "etc", "proc", "sys", "dev", "tmp"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    for p in mount_points:
        parts = [x for x in p.split("/") if x]
        if not p.startswith("/") or not parts or any(x in (".", "..") for x in parts):
            raise RuntimeFailure(f"mount point {p!r}: an absolute path without '.' or '..' is needed")
        (rootfs.joinpath(*parts)).mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, rootfs / "bin" / "busybox")
    for applet in _applets(busybox):
        link = rootfs / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    (rootfs / "etc" / "hetero-variant").write_text(label + "\n")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
    spec_env = {"PATH": "/bin", "HETERO_VARIANT": label, **(env or {})}
    _write_json(dest / "config.json", runtime_spec(spec_env))
    return dest


def busybox_variants(site: Site, images_root: str, busybox: str = BUSYBOX) -> list[Path]:
    """A busybox bundle for every variant of every catalog image, where the wrapper looks
    (the aarch64 ones hold the host's busybox: the dev cluster emulates aarch64 nodes)."""
    out = []
    site_points = [*SLURM_MOUNT_POINTS, *(m.destination for m in site.containers.mounts)]
    for img in site.images.values():
        for v in img.variants:
            points = [*site_points, *site.containers.driver_dirs.get(v.stack, ())]
            out.append(busybox_bundle(img.bundle_path(v, images_root), f"{img.ref} {v.label}",
                                      busybox=busybox, mount_points=points))
    return out
