"""The runtime config.json of one container task (stdlib only).

It starts from the chosen variant's own config.json (the admin's: namespaces, capabilities,
the image's environment) and takes from the config slurmstepd wrote only what Slurm owns:
the command, the job's environment and Slurm's own mounts (batch script, stdio). Added:
device nodes of the job's allocated accelerators, their visible-device variables
renumbered from 0 (every other variable that chooses devices is dropped), the node's
fabric settings, the admin's mounts and the user's requested mounts that the admin's
allowlist covers. Nothing else of the host appears.

The image's rootfs is shared by every job that runs it, so nothing of a job may change it:
the root is always read-only, and no mount may make runc create its mount point there (a
user's destination must exist in the image, resolved inside it, or lie in a tmpfs; see
`locate`).
"""

from __future__ import annotations

import copy
import os
import posixpath
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_hetero.conf.contract import CONTROL_DEVICES, GRES_ALIAS, MOUNTS_VAR, VISIBLE_VARS
from slurm_hetero.containers.nodeconf import NodeFacts
from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.site.images import BindMount

# Variables that choose devices: the runtimes' (host-numbered, meaningless inside) and the
# container hooks' (a hook in a variant's config.json adds the devices NVIDIA_/AMD_/
# ASCEND_VISIBLE_DEVICES name). Whoever set them (the job, the image, the site), none
# reaches the container: only the values the wrapper derives from the allocation do.
DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
               "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK", "ASCEND_RT_VISIBLE_DEVICES",
               "ASCEND_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "AMD_VISIBLE_DEVICES")
# NVIDIA's hook reads an unset NVIDIA_VISIBLE_DEVICES as "all" in an image that sets
# CUDA_VERSION (its "legacy" images), so it is set to "void" (add nothing): the wrapper
# mounts the allocated devices itself.
HOOK_VARS = {"NVIDIA_VISIBLE_DEVICES": "void"}
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
    """A user's path as written: absolute, normalized, printable; never silently rewritten."""
    if "\0" in path:
        raise MountRefused(f"{MOUNTS_VAR}: {what} contains a NUL byte")
    bad = next((c for c in path if c < " " or c == "\x7f"), None)
    if bad is not None:
        raise MountRefused(f"{MOUNTS_VAR}: {what} {path!r} contains a control character "
                           f"(U+{ord(bad):04X}); paths are printable text")
    if not path.startswith("/"):
        raise MountRefused(f"{MOUNTS_VAR}: {what} {path!r} must be an absolute path")
    parts = path.split("/")
    if ".." in parts:
        raise MountRefused(f"{MOUNTS_VAR}: {what} {path!r} must not contain '..'")
    if path != "/" and ("" in parts[1:] or "." in parts):
        raise MountRefused(f"{MOUNTS_VAR}: {what} {path!r} is not a normalized path (no '.', '//' "
                           f"or trailing '/'): write {posixpath.normpath(path)}")
    return path


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


# ---- where a mount lands in the image --------------------------------------------------------
# The image's rootfs on the host is shared by every job that runs the image. runc creates a
# missing mount point (mkdir, or an empty file) in it, on the host, before it makes the root
# read-only: a user's destination that the image lacks would change the shared image. So
# every destination is located the way runc will locate it, and only these are accepted:
# one that exists in the image, one on a mount point made earlier in the same config, and
# one inside a tmpfs of the config (created in that tmpfs: the container's own memory).

_MAX_LINKS = 40  # as the kernel's limit on symlinks in one lookup


@dataclass(frozen=True)
class Location:
    """Where a destination lands: `path`, the image's symlinks resolved inside the rootfs;
    `holder`: the earlier mount whose tree holds it (None: the image's own tree) and
    `holder_at` its path; `missing`: the first part of the path the image lacks (only
    when the image holds it)."""

    path: str
    holder: Mapping[str, Any] | None
    holder_at: str | None
    missing: str | None

    @property
    def in_tmpfs(self) -> bool:
        return self.holder is not None and self.holder.get("type") == "tmpfs"


def _holder(path: str, placed: Mapping[str, Mapping[str, Any]]
            ) -> tuple[str | None, Mapping[str, Any] | None]:
    at = path
    while at:
        if at in placed:
            return at, placed[at]
        at = at.rsplit("/", 1)[0]
    return None, None


def locate(rootfs: str, dest: str, placed: Mapping[str, Mapping[str, Any]]) -> Location:
    """Resolve `dest` as runc does, never leaving the rootfs: a symlink's absolute target
    starts again at the rootfs, '..' stops at it. `placed`: earlier mounts by the path
    they landed on. Inside a mount nothing is looked up (a tmpfs starts empty; a bind
    holds a host folder, which is not the image)."""
    todo = [p for p in dest.split("/") if p not in ("", ".")]
    cur = ""  # the resolved path so far ("" is the root)
    at, holder = _holder(cur, placed)
    missing: str | None = None
    links = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            cur = cur.rsplit("/", 1)[0]
            at, holder = _holder(cur, placed)
            if missing is not None and not _under(cur or "/", missing):
                missing = None
            continue
        nxt = f"{cur}/{part}"
        if nxt in placed:
            cur, at, holder = nxt, nxt, placed[nxt]
            continue
        if holder is not None or missing is not None:
            cur = nxt
            continue
        try:
            st = os.lstat(rootfs + nxt)
        except (FileNotFoundError, NotADirectoryError):
            cur = missing = nxt
            continue
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise MountRefused(f"{MOUNTS_VAR}: destination {dest}: too many symlinks in the image")
            target = os.readlink(rootfs + nxt)
            todo[:0] = target.split("/")
            if target.startswith("/"):
                cur = ""
                at, holder = _holder(cur, placed)
            continue
        cur = nxt
        if todo and not stat.S_ISDIR(st.st_mode):
            missing = nxt  # a file where a folder should be
    return Location(cur or "/", holder, at, missing)


def place_mounts(rootfs: str, mounts: Iterable[Mapping[str, Any]],
                 placed: dict[str, Mapping[str, Any]] | None = None) -> list[Location]:
    """locate() every mount in order, each seeing the ones before it; `placed` is updated."""
    placed = {} if placed is None else placed
    out = []
    for m in mounts:
        loc = locate(rootfs, str(m.get("destination", "")), placed)
        placed[loc.path] = m
        out.append(loc)
    return out


def rootfs_path(variant_cfg: Mapping[str, Any], variant_dir: str) -> str:
    path = str((variant_cfg.get("root") or {}).get("path", "rootfs"))
    return path if path.startswith("/") else posixpath.join(variant_dir, path)


def _reserved(dst: str) -> str | None:
    """Why a (resolved) destination is Slurm's or the kernel's, or would hide one."""
    if dst == "/":
        return "/ is the image itself"
    for f in _FORBIDDEN_DESTINATIONS:
        if _under(dst, f):
            return f"{f} is reserved"
        if _under(f, dst):
            return f"it would hide {f}"
    return None


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _tmpfs(destination: str) -> dict[str, Any]:
    """A per-container tmpfs: mount points below it are created in memory, not in the image."""
    return {"destination": destination, "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "nodev", "noexec", "mode=755", "size=64k"]}


def check_mounts(text: str, allowlist: list[BindMount], *, rootfs: str,
                 earlier: Iterable[Mapping[str, Any]] = (), host_root: str = "") -> list[dict[str, Any]]:
    """OCI mounts for the user's requests; MountRefused for anything outside the allowlist
    or anything that would change the image.

    A source must lie in an allowed folder both as written and after resolving symlinks;
    rw needs an rw entry. A destination (default: the entry's destination plus the
    source's path below the entry's source) must exist in the image at `rootfs`, resolved
    inside it, or lie in a tmpfs mounted before it; `earlier`: the mounts of the config
    that come before the user's. When the image has an entry's destination folder but not
    the sub-folder asked for below it, a per-container tmpfs goes over that folder first
    and the sub-folder is made in it. host_root prefixes host paths (the dev cluster's
    emulated root)."""
    allowed = ", ".join(f"{m.source} ({m.mode})" for m in allowlist) or "none"
    by_length = sorted(allowlist, key=lambda m: -len(m.source))
    requests: list[tuple[str, str, str, BindMount]] = []  # (real source, destination, mode, entry)
    for src, dst, mode in parse_mount_requests(text):
        src = _clean_abs(src, "source")
        entry = next((m for m in by_length if _under(src, m.source)), None)
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
        why = _reserved(dst)
        if why:
            raise MountRefused(f"{MOUNTS_VAR}: destination {dst} is reserved ({why}; not /, "
                               f"{', '.join(_FORBIDDEN_DESTINATIONS)} or a folder above them)")
        requests.append((real, dst, mode or entry.mode, entry))

    placed: dict[str, Mapping[str, Any]] = {}
    place_mounts(rootfs, earlier, placed)
    mounts: list[dict[str, Any]] = []
    # A per-container tmpfs over an allowlisted destination folder of the image where a
    # request needs a mount point below it that the image lacks (the deepest such folder).
    tops = sorted({m.destination.rstrip("/") for m in allowlist} - {""}, key=len, reverse=True)
    for _, dst, _, _ in requests:
        loc = locate(rootfs, dst, placed)
        if loc.holder is not None or loc.missing is None:
            continue
        for top in (t for t in tops if _under(dst, t) and dst != t):
            base = locate(rootfs, top, placed)
            if base.holder is None and base.missing is None and _reserved(base.path) is None \
                    and _is_dir(rootfs + base.path):
                mounts.append(_tmpfs(base.path))
                placed[base.path] = mounts[-1]
                break
    tmpfs_dirs = sorted(at for at, m in placed.items() if m.get("type") == "tmpfs"
                        and not any(_under(at, f) for f in _FORBIDDEN_DESTINATIONS))
    room = ", or under " + ", ".join(tmpfs_dirs) if tmpfs_dirs else ""
    for real, dst, mode, _ in requests:
        loc = locate(rootfs, dst, placed)
        shown = dst if loc.path == dst else f"{dst} (in the image: {loc.path})"
        why = _reserved(loc.path)
        if why:
            raise MountRefused(f"{MOUNTS_VAR}: destination {shown} is reserved ({why})")
        if loc.holder is not None and not loc.in_tmpfs and loc.path != loc.holder_at:
            raise MountRefused(f"{MOUNTS_VAR}: destination {shown} lies inside the mount at "
                               f"{loc.holder_at}; mount it at a folder of the image{room}")
        if loc.holder is None and loc.missing is not None:
            raise MountRefused(f"{MOUNTS_VAR}: destination {shown} does not exist in the image "
                               f"(it lacks {loc.missing}) and jobs cannot add folders to a shared "
                               f"image: use a folder the image has{room}")
        mounts.append(_bind(real, loc.path, mode))
        placed[loc.path] = mounts[-1]
    return mounts


def check_image_untouched(cfg: Mapping[str, Any], what: str) -> None:
    """The last guard before runc: no mount of the config may make runc create its mount
    point in the image's rootfs (user mounts were refused earlier; this catches the
    admin's, Slurm's, the drivers' and the devices')."""
    rootfs = str(cfg["root"]["path"])
    mounts = list(cfg.get("mounts") or [])
    for m, loc in zip(mounts, place_mounts(rootfs, mounts), strict=True):
        if loc.holder is None and loc.missing is not None:
            raise RuntimeFailure(f"{what}: mount point {m.get('destination')} is missing in "
                                 f"{rootfs} (it lacks {loc.missing}); runc would create it in the "
                                 "shared image: add it to the image, or a tmpfs over its folder in "
                                 "the variant's config.json")


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
    # The rootfs is shared by every job running the variant: read-only, whatever the
    # variant's config says (a job writes to its mounts and tmpfs, never to the image).
    cfg["root"] = {**(cfg.get("root") or {}), "path": rootfs_path(variant_cfg, variant_dir),
                   "readonly": True}
    sproc = slurm_cfg.get("process") or {}
    proc = cfg.setdefault("process", {})
    proc["args"] = list(sproc.get("args") or ["/bin/sh"])
    proc["terminal"] = bool(sproc.get("terminal", False))
    # The job's environment, then the image's own (PATH, LD_LIBRARY_PATH belong to the
    # image, not to the submit host), the site's fabric settings, the renumbered devices.
    env = env_dict(sproc.get("env") or [])
    env.update(env_dict(proc.get("env") or []))
    env.update(fabric_env)
    for var in DEVICE_VARS:
        env.pop(var, None)
    env.update(HOOK_VARS)
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
