"""The Prolog's device cache: what the Prolog learned of a job's devices on this node.

Slurm's prolog guide asks node-side scripts not to call Slurm commands per job or task, yet
the TaskProlog (per task) and the container wrapper (per container) need the job's indices
of GRES without a plugin, which only `scontrol show job -d` gives. The Prolog (root, once
per job and node) has them already, so it leaves them here: `<state_dir>/<node>/
devices-<job>.json`, root's, 0644, in the root-owned 0755 folder of the node's agent
state; the Epilog removes it. containers/devcache.py reads it (the two packages share a
floor, so the format is written down in both; tests/unit/test_devcache.py holds them
together) and trusts it only as root's file with the job id slurmstepd gives.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from slurm_hetero.fileio import write_json_atomic

FORMAT = 1
PREFIX = "devices-"


def cache_file(node_dir: Path, job_id: str) -> Path:
    return node_dir / f"{PREFIX}{job_id}.json"


def write_cache(node_dir: Path, job_id: str, node: str, devices: Mapping[str, list[int]],
                identity: Mapping[str, str | None]) -> None:
    """The job's GRES indices per type on `node` and the identity each matched (None: refused
    or not matched, the device is still the job's: Slurm gave it)."""
    write_json_atomic(cache_file(node_dir, job_id),
                      {"format": FORMAT, "job": job_id, "node": node,
                       "devices": {k: [int(i) for i in v] for k, v in sorted(devices.items())},
                       "identity": dict(identity), "t": round(time.time(), 3)}, mode=0o644)


def remove_cache(node_dir: Path, job_id: str) -> None:
    cache_file(node_dir, job_id).unlink(missing_ok=True)


def folder_problem(node_dir: Path) -> str | None:
    """Why the readers will not trust a cache in this folder (None: they will)."""
    st = os.lstat(node_dir)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        return (f"{node_dir} must be a folder owned by root and writable by root only "
                f"(it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): chown root; chmod go-w")
    return None
