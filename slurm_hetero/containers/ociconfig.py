"""The runtime config.json of one container task (stdlib only).

It starts from the chosen variant's own config.json (the admin's: namespaces, capabilities,
the image's environment) and takes from the config slurmstepd wrote only what Slurm owns:
the command, the job's environment and Slurm's own mounts (batch script, stdio). Added:
device nodes of the job's allocated accelerators, their visible-device variables
renumbered from 0, the node's fabric settings, the admin's mounts and the user's requested
mounts that the admin's allowlist covers. Nothing else of the host appears.
"""

from __future__ import annotations

import copy
import os
import posixpath
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_hetero.containers.catalog import BindMount
from slurm_hetero.containers.nodeconf import GRES_ALIAS, NodeFacts
from slurm_hetero.errors import InputError, RuntimeFailure

CONTROL_DEVICES = {
    "cuda": ("nvidiactl", "nvidia-uvm"),
    "cann": ("davinci_manager", "devmm_svm", "hisi_hdc"),
    "rocm": ("kfd",),
}
VISIBLE_VARS = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "ROCR_VISIBLE_DEVICES",
                "cann": "ASCEND_RT_VISIBLE_DEVICES"}
# Host-numbered device variables: meaningless inside, replaced by the renumbered ones.
HOST_DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                    "GPU_DEVICE_ORDINAL", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")
MOUNTS_VAR = "SLURM_HETERO_MOUNTS"
# Where slurmstepd puts the batch script and stdio (22.05+) and its spool mount (23.02+).
SLURM_MOUNT_FILES = ("/tmp/slurm/startup", "/tmp/slurm/stdin", "/tmp/slurm/stdout",
                     "/tmp/slurm/stderr")
SLURM_SPOOL_MOUNT = "/var/run/slurm"
_FORBIDDEN_DESTINATIONS = ("/proc", "/sys", "/dev", "/tmp/slurm", SLURM_SPOOL_MOUNT)


class MountRefused(InputError):
    """A requested mount the admin's allowlist does not cover."""


@dataclass(frozen=True)
class DeviceNode:
    host: str
    path: str  # inside the container
    major: int
    minor: int


@dataclass(frozen=True)
class DevicePlan:
    nodes: tuple[DeviceNode, ...]
    visible: dict[str, str]  # renumbered visible-device variables
    stacks: tuple[str, ...]  # stacks of the allocated devices


def _device_node(host: str, path: str) -> DeviceNode:
    try:
        st = os.stat(host)
    except OSError as e:
        raise RuntimeFailure(f"device file {host} is missing on this node: {e.strerror}") from e
    if not stat.S_ISCHR(st.st_mode):
        raise RuntimeFailure(f"{host} is not a character device")
    return DeviceNode(host, path, os.major(st.st_rdev), os.minor(st.st_rdev))


def plan_devices(node: NodeFacts, allocation: Mapping[str, list[int]],
                 probe: Callable[[str, str], DeviceNode] = _device_node) -> DevicePlan:
    """Device nodes of the allocated indices (Slurm's IDX order = gres.conf file order),
    the stack's control devices, and the visible-device variables counted from 0.
    probe(host path, container path) reads a device's numbers (dry runs pass a fake)."""
    chosen: dict[str, list[str]] = {}  # stack → device files, in allocation order
    for gres, indices in allocation.items():
        files = node.devices.get(GRES_ALIAS.get(gres, gres), [])
        for i in indices:
            if i >= len(files):
                raise RuntimeFailure(f"allocated {gres} index {i} but node {node.name} has "
                                     f"{len(files)} device files for it")
            name, stack = files[i]
            if name not in chosen.setdefault(stack, []):
                chosen[stack].append(name)
    nodes: list[DeviceNode] = []
    visible: dict[str, str] = {}
    for stack, names in chosen.items():
        for name in [*names, *CONTROL_DEVICES.get(stack, ())]:
            nodes.append(probe(f"{node.dev_base}/{name}", f"/dev/{name}"))
        if stack in VISIBLE_VARS:
            visible[VISIBLE_VARS[stack]] = ",".join(str(i) for i in range(len(names)))
    return DevicePlan(tuple(nodes), visible, tuple(chosen))


def _bind(source: str, destination: str, mode: str,
          extra: Iterable[str] = ("nosuid", "nodev")) -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": source,
            "options": ["rbind", mode, *extra]}


def driver_mounts(node: NodeFacts, stacks: Iterable[str],
                  driver_dirs: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """The stacks' driver folders, read-only (their host copy must exist on the node)."""
    out = []
    for stack in stacks:
        for d in driver_dirs.get(stack, []):
            host = node.fs_base + d
            if not os.path.isdir(host):
                raise RuntimeFailure(f"driver folder {host} for {stack} is missing on {node.name}")
            out.append(_bind(host, d, "ro"))
    return out


def _clean_abs(path: str, what: str) -> str:
    if "\0" in path:
        raise MountRefused(f"{MOUNTS_VAR}: {what} contains a NUL byte")
    if not path.startswith("/"):
        raise MountRefused(f"{MOUNTS_VAR}: {what} {path!r} must be an absolute path")
    if ".." in path.split("/"):
        raise MountRefused(f"{MOUNTS_VAR}: {what} {path!r} must not contain '..'")
    return posixpath.normpath(path)


def _under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def parse_mount_requests(text: str) -> list[tuple[str, str | None, str | None]]:
    """'SRC[:DST][:ro|rw],...' → [(src, dst or None, mode or None)]."""
    out: list[tuple[str, str | None, str | None]] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        parts = item.split(":")
        mode = parts.pop() if len(parts) > 1 and parts[-1] in ("ro", "rw") else None
        if len(parts) > 2 or not parts[0]:
            raise MountRefused(f"{MOUNTS_VAR}: {item!r}: use SRC[:DST][:ro|rw], comma-separated")
        out.append((parts[0], parts[1] if len(parts) == 2 else None, mode))
    return out


def check_mounts(text: str, allowlist: list[BindMount], host_root: str = "") -> list[dict[str, Any]]:
    """OCI mounts for the user's requests; MountRefused for anything outside the allowlist.

    A source must lie in an allowed folder both as written and after resolving symlinks;
    rw needs an rw entry. host_root prefixes host paths (the dev cluster's emulated root)."""
    allowed = ", ".join(f"{m.source} ({m.mode})" for m in allowlist) or "none"
    mounts: list[dict[str, Any]] = []
    for src, dst, mode in parse_mount_requests(text):
        src = _clean_abs(src, "source")
        entry = next((m for m in sorted(allowlist, key=lambda m: -len(m.source))
                      if _under(src, m.source)), None)
        if entry is None:
            raise MountRefused(f"{MOUNTS_VAR}: {src} is not in the site's mount allowlist "
                               f"(allowed: {allowed})")
        real = os.path.realpath(host_root + src)
        if not _under(real, os.path.realpath(host_root + entry.source)):
            raise MountRefused(f"{MOUNTS_VAR}: {src} resolves to {real}, outside the allowed "
                               f"{entry.source}")
        if not os.path.exists(real):
            raise MountRefused(f"{MOUNTS_VAR}: {src} does not exist on this node")
        if mode == "rw" and entry.mode != "rw":
            raise MountRefused(f"{MOUNTS_VAR}: {src} may only be mounted read-only ({entry.source} is ro)")
        if dst is None:
            dst = entry.destination.rstrip("/") + src[len(entry.source.rstrip("/")):] or "/"
        dst = _clean_abs(dst, "destination")
        if dst == "/" or any(_under(dst, f) for f in _FORBIDDEN_DESTINATIONS):
            raise MountRefused(f"{MOUNTS_VAR}: destination {dst} is reserved "
                               f"(not /, {', '.join(_FORBIDDEN_DESTINATIONS)})")
        mounts.append(_bind(real, dst, mode or entry.mode))
    return mounts


def always_mounts(allowlist: list[BindMount], host_root: str = "") -> list[dict[str, Any]]:
    out = []
    for m in allowlist:
        if m.always:
            if not os.path.exists(host_root + m.source):
                raise RuntimeFailure(f"site mount {m.source} is missing on this node")
            out.append(_bind(host_root + m.source, m.destination, m.mode))
    return out


def slurm_mounts(slurm_cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The mounts slurmstepd added (batch script, stdio, spool); nothing else passes."""
    out = []
    for m in slurm_cfg.get("mounts") or []:
        dst = str(m.get("destination", ""))
        opts = set(m.get("options") or [])
        if (dst in SLURM_MOUNT_FILES or _under(dst, SLURM_SPOOL_MOUNT)) and \
                m.get("type") in ("none", "bind") and opts <= {"bind", "rbind", "ro", "rw"}:
            out.append(dict(m))
    return out


def env_dict(entries: Iterable[str]) -> dict[str, str]:
    """OCI env list → dict; a later entry wins (slurmstepd's list may repeat PATH)."""
    out: dict[str, str] = {}
    for e in entries:
        k, sep, v = e.partition("=")
        if sep:
            out[k] = v
    return out


def build_config(variant_cfg: Mapping[str, Any], variant_dir: str, slurm_cfg: Mapping[str, Any], *,
                 devices: DevicePlan, fabric_env: Mapping[str, str], mounts: list[dict[str, Any]],
                 hostname: str | None, annotations: Mapping[str, str],
                 rootless: bool = False, uid: int = 0, gid: int = 0) -> dict[str, Any]:
    cfg: dict[str, Any] = copy.deepcopy(dict(variant_cfg))
    root = dict(cfg.get("root") or {"path": "rootfs"})
    if not str(root["path"]).startswith("/"):
        root["path"] = posixpath.join(variant_dir, root["path"])
    cfg["root"] = root
    sproc = slurm_cfg.get("process") or {}
    proc = cfg.setdefault("process", {})
    proc["args"] = list(sproc.get("args") or ["/bin/sh"])
    proc["terminal"] = bool(sproc.get("terminal", False))
    # The job's environment, then the image's own (PATH, LD_LIBRARY_PATH belong to the
    # image, not to the submit host), the site's fabric settings, the renumbered devices.
    env = env_dict(sproc.get("env") or [])
    env.update(env_dict(proc.get("env") or []))
    env.update(fabric_env)
    for var in HOST_DEVICE_VARS:
        env.pop(var, None)
    env.update(devices.visible)
    proc["env"] = [f"{k}={v}" for k, v in env.items()]
    cfg["mounts"] = [*(cfg.get("mounts") or []), *slurm_mounts(slurm_cfg), *mounts,
                     *(_bind(d.host, d.path, "rw", ("nosuid", "noexec")) for d in devices.nodes)]
    linux = cfg.setdefault("linux", {})
    namespaces = linux.setdefault("namespaces", [])
    if hostname and any(ns.get("type") == "uts" for ns in namespaces):
        cfg["hostname"] = hostname
    if rootless:
        # runc as the job's user (rootless): a user namespace whose root is that user, as
        # runc requires; no cgroup device rules (an unprivileged runtime cannot set them).
        if not any(ns.get("type") == "user" for ns in namespaces):
            namespaces.append({"type": "user"})
        linux["uidMappings"] = [{"containerID": 0, "hostID": uid, "size": 1}]
        linux["gidMappings"] = [{"containerID": 0, "hostID": gid, "size": 1}]
        proc["user"] = {"uid": 0, "gid": 0}
        linux.pop("resources", None)
        # Mounting sysfs needs the network namespace's owner: bind the host's, read-only.
        cfg["mounts"] = [m if m.get("type") != "sysfs" else
                         {"destination": m["destination"], "type": "none", "source": "/sys",
                          "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]}
                         for m in cfg["mounts"]]
    else:
        rules = linux.setdefault("resources", {}).setdefault("devices", [])
        rules += [{"allow": True, "type": "c", "major": d.major, "minor": d.minor, "access": "rwm"}
                  for d in devices.nodes]
    cfg["annotations"] = {**(cfg.get("annotations") or {}), **annotations}
    return cfg
