"""The capacity snapshot: free and pending accelerators per pool, for job_submit.lua.

`slurm-hetero bridge snapshot` reads sinfo and squeue every few seconds and writes a small
Lua data file atomically (temp file + rename). Its first line carries a generation number;
the bridge re-reads the file only when that number changes, and treats a snapshot older
than its staleness limit as absent (then the static order applies).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from slurm_hetero.fileio import write_atomic
from slurm_hetero.site.model import Site
from slurm_hetero.site.pools import pools
from slurm_hetero.slurm.commands import sinfo_capacity_argv
from slurm_hetero.slurm.parse import parse_gres
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import QueuedJob, parse_squeue_json, squeue_json_argv

_UNAVAILABLE = ("drain", "down", "fail", "maint", "reserved", "unknown", "not_responding",
                "future", "power")
ARCHES = ("x86_64", "aarch64")
_FEATURE_WORD = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass
class PoolCapacity:
    total: int = 0
    free: int = 0
    free_max_node: int = 0  # the most devices free on one node: can an N-device job start?
    pending: int = 0
    # placement.node_fit: entry k-1 is (CPUs, memory MiB) free on the node with at least k
    # devices free that has the most CPUs free (then memory), for k up to free_max_node and
    # FIT_MAX: a job fits there when both cover it. None: not kept, or a node's CPUs unread.
    fit: list[tuple[int, int]] | None = None


# Fit entries per pool: a job asking more devices on one node is never taken to start now
# where fit is kept. Bounds the snapshot at the schema's largest site (64 devices a node).
FIT_MAX = 16


def room_for(cap: PoolCapacity, n: int, cpus: int = 0, mem_mib: int = 0) -> bool:
    """Has one node of the pool `n` devices free, and (where the pool keeps its fit) the CPUs
    and memory too?

    >>> cap = PoolCapacity(total=8, free=3, free_max_node=2, fit=[(16, 4096), (4, 4096)])
    >>> room_for(cap, 2, 4), room_for(cap, 2, 8), room_for(cap, 1, 8), room_for(cap, 3)
    (True, False, True, False)
    """
    if cap.free_max_node < n:
        return False
    if cap.fit is None:
        return True
    return n <= len(cap.fit) and cap.fit[n - 1][0] >= cpus and cap.fit[n - 1][1] >= mem_mib


def node_room(fields: list[str]) -> tuple[int, int] | None:
    """(CPUs idle, memory MiB unallocated) from a capacity line's last three fields, or None.

    >>> node_room(["64/0/0/64", "524288", "131072"]), node_room(["0/64/0/64", "1", "x"])
    ((0, 393216), None)
    """
    if len(fields) < 3:
        return None
    cpus, mem, alloc = (f.strip() for f in fields[:3])
    parts = cpus.split("/")
    if len(parts) != 4 or not all(x.isascii() and x.isdigit() for x in (*parts, mem, alloc)):
        return None
    return int(parts[1]), max(0, int(mem) - int(alloc))


def _model_of(site: Site) -> dict[tuple[str, str], str]:
    return {(m.gres_name, m.gres_type): m.id for m in site.models_in_use}


def build_snapshot(site: Site, sinfo_text: str, jobs: Iterable[QueuedJob]) -> dict[str, PoolCapacity]:
    """Pure: capacity per pool key from `sinfo_capacity_argv()` output and the queue (`squeue --json`:
    a feature expression may hold `|`, so no text format of squeue is safe to split)."""
    model_of = _model_of(site)
    caps = {p.key: PoolCapacity() for p in pools(site)}
    fit = site.placement.node_fit
    rooms: dict[str, list[tuple[int, int, int]] | None] = {k: [] for k in caps}
    seen: set[str] = set()
    for line in sinfo_text.splitlines():
        fields = line.split("|")
        if len(fields) < 5:
            continue
        node, state, gres, used, features = (f.strip() for f in fields[:5])
        # `sinfo -N` prints a node once per partition it is in: count its devices once.
        if node in seen:
            continue
        seen.add(node)
        arch = "aarch64" if "aarch64" in features.split(",") else "x86_64"
        usable = not any(word in state.lower() for word in _UNAVAILABLE)
        used_by = parse_gres(used)
        room = node_room(fields[5:]) if fit else None
        for name_type, count in parse_gres(gres).items():
            name, _, gtype = name_type.partition(":")
            mid = model_of.get((name, gtype))
            cap = caps.get(f"{mid}@{arch}")
            if cap is None:
                continue  # shards and GRES the bridge does not place
            free = max(0, count - used_by.get(name_type, 0)) if usable else 0
            cap.total += count
            cap.free += free
            cap.free_max_node = max(cap.free_max_node, free)
            kept = rooms[f"{mid}@{arch}"]
            if fit and free and kept is not None:
                if room is None:  # a node whose CPUs cannot be read: the pool keeps no fit
                    rooms[f"{mid}@{arch}"] = None
                else:
                    kept.append((free, *room))
    for job in jobs:
        if job.state != "PENDING":
            continue
        tres, features, nodes = job.tres_per_node, job.features, max(1, job.node_count)
        arches = [a for a in ARCHES if a in features] or list(ARCHES)
        # An untyped request pinned to a model by its node feature (the bridge's movable
        # jobs) counts in that model's pool only.
        pinned = set(_FEATURE_WORD.findall(features)) & set(model_of.values())
        for item in tres.split(","):
            parts = item.replace("gres/", "gres:").split(":")
            if len(parts) < 3 or parts[0] != "gres" or not parts[-1].isdigit():
                continue
            name, count = parts[1], int(parts[-1]) * nodes
            gtype = parts[2] if len(parts) == 4 else ""
            for (gname, t), mid in model_of.items():
                if gname == name and gtype in ("", t) and (gtype or not pinned or mid in pinned):
                    for arch in arches:
                        if f"{mid}@{arch}" in caps:
                            caps[f"{mid}@{arch}"].pending += count
    if fit:
        for key, cap in caps.items():
            kept_rooms = rooms[key]
            if kept_rooms is not None:
                cap.fit = [max(((c, m) for d, c, m in kept_rooms if d >= k), default=(0, 0))
                           for k in range(1, min(cap.free_max_node, FIT_MAX) + 1)]
    return caps


Forecast = dict[str, dict[int, float]]  # pool -> {minutes ahead: units}
_POOL_KEY = re.compile(r"[A-Za-z0-9@._-]{1,128}")
HORIZONS = (5, 15, 60)


def _fit_lua(fit: list[tuple[int, int]] | None) -> str:
    """
    >>> _fit_lua([(12, 4096), (4, 0)]), _fit_lua([]), _fit_lua(None)
    (', fit = { { 12, 4096 }, { 4, 0 } }', ', fit = { }', '')
    """
    if fit is None:
        return ""
    return ", fit = { " + "".join(f"{{ {c}, {m} }}, " for c, m in fit)[:-2] + " }" if fit else ", fit = { }"


def to_lua(caps: dict[str, PoolCapacity], generated_at: float, forecast: Forecast | None = None) -> str:
    """The snapshot as a Lua 5.1 chunk that only returns data. The demand forecast (when the
    daemon keeps one) comes after the pools, so `generated_at` stays on the second line."""
    gen = int(generated_at)
    rows = "\n".join(
        f'  ["{k}"] = {{ total = {c.total}, free = {c.free}, free_max_node = {c.free_max_node}, '
        f"pending = {c.pending}{_fit_lua(c.fit)} }}," for k, c in sorted(caps.items()))
    fc = "".join(f'  ["{k}"] = {{ m5 = {v[5]:.3f}, m15 = {v[15]:.3f}, m60 = {v[60]:.3f} }},\n'
                 for k, v in sorted((forecast or {}).items())
                 if _POOL_KEY.fullmatch(k) and all(math.isfinite(v.get(h, math.nan)) for h in HORIZONS))
    tail = f", forecast = {{\n{fc}}}" if fc else ""
    return (f"-- hetero-snapshot {time.time_ns()}\n"
            f"return {{ generated_at = {gen}, pools = {{\n{rows}\n}}{tail} }}\n")


_FORECAST_ROW = re.compile(r'^  \["([A-Za-z0-9@._-]+)"\] = \{ m5 = ([0-9.]+), m15 = ([0-9.]+), '
                           r"m60 = ([0-9.]+) \},$", re.MULTILINE)


def read_forecast(path: Path) -> Forecast:
    """The forecast rows of a written snapshot ({} when it holds none or cannot be read)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    return {m.group(1): {5: float(m.group(2)), 15: float(m.group(3)), 60: float(m.group(4))}
            for m in _FORECAST_ROW.finditer(text)}


def take_snapshot(site: Site, runner: Runner, path: Path, jobs: Iterable[QueuedJob] | None = None,
                  forecast: Forecast | None = None) -> dict[str, PoolCapacity]:
    """Write the snapshot; `jobs`: the queue when the caller has just read it."""
    if jobs is None:
        jobs, _ = parse_squeue_json(runner.out(squeue_json_argv()))
    caps = build_snapshot(site, runner.out(sinfo_capacity_argv()), jobs)
    write_atomic(path, to_lua(caps, time.time(), forecast))
    return caps


def pool_free(path: Path, key: str) -> int | None:
    """Free devices of one pool in a written snapshot (None if absent or unreadable)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    m = re.search(rf'\["{re.escape(key)}"\] = {{ total = \d+, free = (\d+),', text)
    return int(m.group(1)) if m else None


def wait_for_pool(path: Path, key: str, free: int, timeout: float = 20.0) -> bool:
    """Wait until the snapshot shows `free` devices free in the pool `key`."""
    deadline = time.monotonic() + timeout
    while pool_free(path, key) != free:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True
