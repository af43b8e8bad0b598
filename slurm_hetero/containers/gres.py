"""The job's allocated device indices on one node (stdlib only: runs on every task start).

Slurm sets CUDA_VISIBLE_DEVICES for gres/gpu, but nothing for a GRES without a plugin
(npu), and the variables in a task's environment are the user's to change. The Prolog
(root, once per job and node) leaves the job's indices in its device cache, read here
with the checks of containers/devcache.py; only without a trusted cache (no Prolog ran,
an older agent) is slurmctld asked: the detail lines of `scontrol show job -d` come from
slurmctld and name every node's indices; they are read with
`slurm.scontrol.parse_job_devices`, which refuses a record where user text (a comment, name
or work dir) imitates such a line.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from slurm_hetero.conf.nodefiles import slurm_conf_dir
from slurm_hetero.containers.devcache import ROOT_UID, CacheUnusable, cache_folder, read_cache
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.site.gresconf import GresConfError, read_gres_conf
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.scontrol import AmbiguousRecord, parse_job_devices, show_one_job


def parse_ranges(text: str) -> list[int]:
    """'0-2,5' → [0, 1, 2, 5].

    >>> parse_ranges("0-2,5")
    [0, 1, 2, 5]
    """
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def job_allocation(job_id: str, node: str, slurm_conf: str | None = None,
                   timeout: float = 20.0) -> dict[str, list[int]]:
    """Indices per GRES name that job `job_id` holds on `node` ({} when none).

    RuntimeFailure (AmbiguousRecord included) when slurmctld's answer cannot be had or
    cannot be told apart from user text: callers refuse rather than guess."""
    if not job_id.isdigit():
        raise RuntimeFailure(f"job id {job_id!r} is not a number")
    runner = Runner(slurm_conf=slurm_conf, timeout=timeout)
    try:
        return parse_job_devices(show_one_job(runner.out, job_id, detail=True), node)
    except AmbiguousRecord as e:
        raise RuntimeFailure(f"job {job_id}: its record is ambiguous ({e}); "
                             "no devices are given to it") from e
    except RuntimeFailure as e:
        raise RuntimeFailure(f"job {job_id}: slurmctld's record of its devices on {node} cannot be "
                             f"read ({e}); no devices are given to it") from e


def cached_allocation(job_id: str, node: str, containers_conf: str, slurm_conf: str | None,
                      say: Callable[[str], None], owner: int = ROOT_UID) -> tuple[dict[str, list[int]], str]:
    """(indices per GRES name, "cache" or "slurmctld"): the Prolog's cache when it can be
    trusted, else `job_allocation` after telling `say` why (the caller's log)."""
    try:
        return read_cache(cache_folder(containers_conf, node), job_id, node, owner), "cache"
    except CacheUnusable as e:
        say(f"job {job_id}: no usable device cache from the Prolog ({e}); asking slurmctld")
    return job_allocation(job_id, node, slurm_conf), "slurmctld"


def autodetect_of(slurm_conf: str | None, node: str) -> str:
    """The node's AutoDetect in gres.conf (beside slurm.conf; None: the one this node's Slurm
    reads, configless included); "off" where it cannot be read (then the rendered device table
    is all there is)."""
    folder = os.path.dirname(slurm_conf) if slurm_conf else str(slurm_conf_dir())
    try:
        return read_gres_conf(os.path.join(folder, "gres.conf"), node).autodetect
    except GresConfError:
        return "off"
