"""Read the Prolog's device cache (energy/devcache.py writes it) instead of asking slurmctld.

The TaskProlog and the container wrapper run as the job's user, once per task or container;
the Prolog ran as root once per job on this node and left the job's GRES indices in
`<state_dir>/<node>/devices-<job>.json`. The file decides which devices a job gets, so it is
believed only when nobody but root can have written it:

- the folder comes from hetero-agent.json beside the containers config that slurm.conf's
  TaskProlog / oci.conf names (--conf): never from the job's environment;
- the folder (opened without following a symlink) is root's and not group/other-writable;
- the file is a regular file (not a symlink, FIFO or device), root's, not group/other-
  writable, at most MAX_BYTES;
- its job id is the one slurmstepd gave (SLURM_JOB_ID / the wrapper's --job) and its node
  this node; its indices are lists of small non-negative integers.
Anything else is `CacheUnusable`: the caller asks slurmctld as before and says so. Standard
library only (runs at every task start).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from typing import Any

from slurm_hetero.conf.nodefiles import AGENT_CONFIG
from slurm_hetero.errors import RuntimeFailure

FORMAT = 1  # energy/devcache.py's
PREFIX = "devices-"
MAX_BYTES = 64 * 1024
MAX_INDEX = 4096
ROOT_UID = 0
_GRES_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


class CacheUnusable(RuntimeFailure):
    """No trusted cache: missing, or not provably root's and this job's (the reason says)."""


def cache_folder(containers_conf: str, node: str) -> str:
    """<state_dir>/<node> of the agent config beside the containers config."""
    path = os.path.join(os.path.dirname(os.path.abspath(containers_conf)), AGENT_CONFIG)
    try:
        with open(path, encoding="utf-8") as f:
            state_dir = json.load(f).get("state_dir")
    except (OSError, ValueError, AttributeError) as e:
        raise CacheUnusable(f"no agent config to find the cache by ({path}: {e})") from e
    if not isinstance(state_dir, str) or not state_dir.startswith("/") or \
            "/" in node or node in ("", ".", ".."):
        raise CacheUnusable(f"{path}: no usable state_dir for node {node!r}")
    return os.path.join(state_dir, node)


def _owner_problem(st: os.stat_result, what: str, owner: int) -> str | None:
    if st.st_uid != owner:
        return f"{what} is owned by uid {st.st_uid}, not {owner}"
    if st.st_mode & 0o022:
        return f"{what} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def read_cache(folder: str, job_id: str, node: str, owner: int = ROOT_UID) -> dict[str, list[int]]:
    """The job's indices per GRES name on `node`, from a cache only root can have written
    (`owner`: the uid it must belong to; tests name their own)."""
    if not job_id.isdigit():
        raise CacheUnusable(f"job id {job_id!r} is not a number")
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise CacheUnusable(f"{folder}: {os.strerror(e.errno or errno.EIO)}") from e
    try:
        problem = _owner_problem(os.fstat(dfd), f"folder {folder}", owner)
        if problem:
            raise CacheUnusable(problem)
        name = f"{PREFIX}{job_id}.json"
        try:  # O_NONBLOCK: a FIFO in its place must not hang the task
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as e:
            raise CacheUnusable(f"{folder}/{name}: {os.strerror(e.errno or errno.EIO)}") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise CacheUnusable(f"{folder}/{name} is not a regular file")
            problem = _owner_problem(st, f"{folder}/{name}", owner)
            if problem:
                raise CacheUnusable(problem)
            raw = os.read(fd, MAX_BYTES + 1)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)
    if len(raw) > MAX_BYTES:
        raise CacheUnusable(f"{folder}/{name} is over {MAX_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError included
        raise CacheUnusable(f"{folder}/{name}: not valid JSON ({e})") from e
    return parse_cache(doc, job_id, node)


def parse_cache(doc: Any, job_id: str, node: str) -> dict[str, list[int]]:
    """The indices of a cache document, checked field by field (data, never structure).

    >>> parse_cache({"format": 1, "job": "7", "node": "n1", "devices": {"npu": [3, 4]}}, "7", "n1")
    {'npu': [3, 4]}
    """
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CacheUnusable("the cache is not a format-1 object")
    if doc.get("job") != job_id or doc.get("node") != node:
        raise CacheUnusable(f"the cache is for job {doc.get('job')!r} on {doc.get('node')!r}, "
                            f"not job {job_id} on {node}")
    devices = doc.get("devices")
    if not isinstance(devices, dict):
        raise CacheUnusable("the cache has no devices object")
    out: dict[str, list[int]] = {}
    for gres, indices in devices.items():
        if not (isinstance(gres, str) and _GRES_NAME.fullmatch(gres) and isinstance(indices, list)
                and all(type(i) is int and 0 <= i < MAX_INDEX for i in indices)):
            raise CacheUnusable(f"the cache's devices are malformed at {str(gres)[:40]!r}")
        if indices:
            out[gres] = list(indices)
    return out
