"""Demand tables from the one job table (`slurm_hetero.jobs`): workload traces (SWF, the
Alibaba GPU trace) and Slurm accounting (sacct), plus the pools of a site.

Pools: a job holding accelerators counts in "model@arch", in normalized units (devices
times the model's `units` from the site catalog); a job with none counts its cores in "cpu@arch".
Traces record neither a GPU model nor an architecture, so a trace has "cpu@unknown" (SWF:
processors) and, for Alibaba, "gpu@unknown" in devices (gpu_milli / 1000 each: the pods name
no model, so one device is one unit).

A started job's pool is what `jobs.sacct` says it was allocated (typed GRES, else the GRES
of its first node's group). A job without nodes yet (pending, or cancelled while pending)
has only its request: typed GRES name the model; an untyped `gres/gpu=N` is counted in the
model the bridge's static order would pick (the cheapest of that GRES); its arch is the
one with the most of that resource in the job's partitions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from slurm_hetero.forecast.demand import demand_table, empty_table
from slurm_hetero.jobs import table as jobtable
from slurm_hetero.jobs.alibaba import ANY_GPU
from slurm_hetero.jobs.sacct import from_sacct
from slurm_hetero.jobs.trace import ARCH as TRACE_ARCH
from slurm_hetero.jobs.trace import open_text
from slurm_hetero.site.catalog import AccelModel
from slurm_hetero.site.model import NodeGroup, Site
from slurm_hetero.site.pools import pools as site_pools
from slurm_hetero.slurm import hostlist
from slurm_hetero.slurm.parse import NO_NODES, parse_tres
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import SacctDays, read_sacct

UNKNOWN_ARCH = TRACE_ARCH  # "unknown": no trace records the architecture
TRACE_POOL_CPU = f"cpu@{UNKNOWN_ARCH}"
TRACE_POOL_GPU = f"gpu@{UNKNOWN_ARCH}"
# What the forecast needs of sacct: a subset of slurm.sacct.FIELDS.
SACCT_FIELDS = ("JobIDRaw", "State", "Partition", "Submit", "Start", "End", "TimelimitRaw", "ReqCPUS",
                "ReqTRES", "NCPUS", "AllocTRES", "NodeList")


@dataclass
class DemandSource:
    table: pd.DataFrame
    tz: str | None  # the time zone of the clock the times come from (None: UTC / unknown)
    name: str
    notes: list[str] = field(default_factory=list)
    capacity: dict[str, float] = field(default_factory=dict)  # pool → units/cores, where known


# ---- traces -----------------------------------------------------------------------------------

def read_trace(path: Path) -> DemandSource:
    """An SWF trace or the Alibaba GPU trace (pods file, nodes file beside it), through
    `jobs.traces.read_trace`."""
    from slurm_hetero.jobs.traces import read_trace as read_jobs

    trace = read_jobs(path)
    jobs = trace.jobs
    gpu = jobtable.labels(jobs["model"]) == ANY_GPU
    started = np.isfinite(jobs["start"].to_numpy())
    cpus = np.where(started, jobs["ncpus"].to_numpy(), jobs["req_cpus"].to_numpy())
    cpus = np.where(np.isfinite(cpus), cpus, jobs["req_cpus"].to_numpy())
    table = demand_table(job=jobtable.labels(jobs["job_id"]),
                         pool=np.where(gpu, TRACE_POOL_GPU, TRACE_POOL_CPU),
                         amount=np.where(gpu, jobs["devices"].to_numpy(), cpus),
                         submit=jobs["submit"], start=jobs["start"], end=jobs["end"],
                         limit=jobs["req_time_s"])
    cap = trace.capacity
    capacity = {TRACE_POOL_CPU: cap.cpus[UNKNOWN_ARCH]} if cap.cpus.get(UNKNOWN_ARCH) else {}
    if cap.devices.get((ANY_GPU, UNKNOWN_ARCH)):
        capacity[TRACE_POOL_GPU] = cap.devices[(ANY_GPU, UNKNOWN_ARCH)]
    tz = None
    notes = list(trace.notes)
    if path.name.lower().endswith((".swf", ".swf.gz")):
        header = swf_header(path)
        if "unixstarttime" in header:
            tz = header.get("timezonestring") or None
        else:
            notes.append("time of day and weekday are the trace's own (a fixed shift of the real ones)")
    if (gpu & np.isfinite(jobs["devices"].to_numpy())).any():
        notes.append("gpu@unknown is in devices: the pods name no GPU model, so no normalized units")
    return DemandSource(table, tz, trace.label, notes, capacity)


def swf_header(path: Path) -> dict[str, str]:
    """The `; Key: value` lines before the first job line (for TimeZoneString)."""
    out: dict[str, str] = {}
    with open_text(path) as f:
        for line in f:
            s = line.strip()
            if s and not s.startswith(";"):
                break
            key, sep, value = s[1:].partition(":")
            if sep:
                out.setdefault(key.strip().lower(), value.strip())
    return out


# ---- Slurm: sacct through the runner ----------------------------------------------------------

class PoolMap:
    """Which pool a job's resources count in, by the site: GRES (name, type) → model, node →
    its group, and for a job without nodes yet the largest pool that could run it."""

    def __init__(self, site: Site):
        self.site = site
        self.models: dict[tuple[str, str], AccelModel] = {}
        for m in site.catalog.values():
            self.models[(m.gres_name, m.gres_type)] = m
            self.models.setdefault((m.gres_name, m.id), m)
        self.cheapest: dict[str, AccelModel] = {}
        for p in site_pools(site):  # cheapest first
            m = site.catalog[p.model]
            self.cheapest.setdefault(m.gres_name, m)
        self.node: dict[str, NodeGroup] = {n: g for g in site.node_groups for n in g.nodes}

    def pools(self) -> list[str]:
        """Every pool of the site: accelerator pools cheapest first, then CPU pools."""
        archs = sorted({g.architecture for g in self.site.node_groups})
        return [p.key for p in site_pools(self.site)] + [f"cpu@{a}" for a in archs]

    def first_group(self, nodelist: str) -> NodeGroup | None:
        if nodelist.strip() in NO_NODES:
            return None
        try:
            first = hostlist.expand(nodelist, limit=100_000)[0]
        except (hostlist.HostlistError, IndexError):
            first = nodelist.split(",")[0]
        return self.node.get(first)

    def arch_for(self, model: AccelModel | None, partitions: str) -> str:
        """The arch with the most capacity for `model` (None: CPUs) in the job's partitions."""
        parts = {p for p in partitions.split(",") if p}
        best: dict[str, float] = {}
        for g in self.site.node_groups:
            if parts and not parts & set(g.partitions):
                continue
            if model is None:
                size = float(g.cpus * g.node_count) if not g.accelerators else 0.0
            else:
                size = float(sum(a.count for a in g.accelerators if a.model.id == model.id) * g.node_count)
            if size > 0:
                best[g.architecture] = best.get(g.architecture, 0.0) + size
        if not best and parts:
            return self.arch_for(model, "")
        return max(sorted(best), key=lambda a: best[a]) if best else UNKNOWN_ARCH

    def resources(self, tres_text: str, cpus: float, nodelist: str,
                  partition: str) -> list[tuple[str, float]]:
        """(pool, amount) of one allocation or request: accelerators in units, else cores."""
        group = self.first_group(nodelist)
        tres = parse_tres(tres_text)
        typed: dict[str, float] = {}
        plain: dict[str, float] = {}
        for key, value in tres.items():
            if not key.startswith("gres/"):
                continue
            try:
                count = float(value)
            except ValueError:
                continue
            name, _, gtype = key[5:].partition(":")
            if gtype:
                typed[f"{name}:{gtype}"] = typed.get(f"{name}:{gtype}", 0.0) + count
            else:
                plain[name] = plain.get(name, 0.0) + count
        found: dict[str, tuple[AccelModel, float]] = {}
        for key, count in typed.items():
            name, _, gtype = key.partition(":")
            m = self.models.get((name, gtype))
            if m is not None:
                prev = found.get(m.id, (m, 0.0))[1]
                found[m.id] = (m, prev + count)
        for name, count in plain.items():
            if any(m.gres_name == name for m, _ in found.values()) or count <= 0:
                continue  # the typed entries already say which models
            on_node = [a for a in (group.accelerators if group else ())
                       if a.model.gres_name == name or (name == "shard" and a.shards_per_device)]
            if on_node:
                a = on_node[0]
                devices = count / a.shards_per_device if name == "shard" else count
                found[a.model.id] = (a.model, found.get(a.model.id, (a.model, 0.0))[1] + devices)
            elif name in self.cheapest:  # pending: the bridge's static order would pick this one
                m = self.cheapest[name]
                found[m.id] = (m, found.get(m.id, (m, 0.0))[1] + count)
        out = []
        for mid, (m, devices) in found.items():
            arch = group.architecture if group else self.arch_for(m, partition)
            out.append((f"{mid}@{arch}", devices * m.units))
        if not out and cpus > 0:
            arch = group.architecture if group else self.arch_for(None, partition)
            out.append((f"cpu@{arch}", cpus))
        return out


def demand_from_sacct(raw: pd.DataFrame, site: Site) -> pd.DataFrame:
    """Pure: parsed sacct allocation lines (`slurm.sacct.read_sacct`, SACCT_FIELDS or more) →
    demand rows: the job table's allocation for started jobs, the request for the others."""
    if not len(raw):
        return empty_table()
    jobs = from_sacct(raw, site)
    job_id = jobtable.labels(jobs["job_id"]).astype(str)
    arch, model = jobtable.labels(jobs["arch"]).astype(str), jobtable.labels(jobs["model"]).astype(str)
    units, ncpus = jobs["units"].to_numpy(), jobs["ncpus"].to_numpy()
    started = np.isfinite(jobs["start"].to_numpy())
    accel = started & (units > 0)
    # started without accelerators (model ""): cores; a GRES the site does not know (units NaN): skipped
    cpu = started & (model == "") & (ncpus > 0)
    pools = np.where(accel, np.char.add(np.char.add(model, "@"), arch),
                     np.char.add("cpu@", np.where(arch == "", UNKNOWN_ARCH, arch)))
    rows = np.flatnonzero(accel | cpu)
    idx, pool, amount = list(rows), list(pools[rows]), list(np.where(accel, units, ncpus)[rows])
    waiting = np.flatnonzero(~started)
    if len(waiting):
        pm = PoolMap(site)

        def column(name: str) -> list[str]:
            return [str(v) for v in raw[name].to_numpy()[waiting]] if name in raw else [""] * len(waiting)

        req_cpus = raw["ReqCPUS"].to_numpy(dtype="float64")[waiting] if "ReqCPUS" in raw else \
            np.zeros(len(waiting))
        for i, tres, cpus, part in zip(waiting, column("ReqTRES"), req_cpus, column("Partition"),
                                       strict=True):
            for p, a in pm.resources(tres, float(cpus) if math.isfinite(cpus) else 0.0, "", part):
                idx.append(i)
                pool.append(p)
                amount.append(a)
    if not idx:
        return empty_table()
    at = np.asarray(idx, dtype=np.int64)

    def times(name: str) -> np.ndarray:
        v = jobs[name].to_numpy(dtype="float64")[at]
        return np.where(v > 0, v, np.nan)

    return demand_table(job=job_id[at], pool=pool, amount=amount, submit=times("submit"),
                        start=times("start"), end=times("end"), limit=times("req_time_s"))


def parse_sacct_demand(text: str, site: Site, fields: Sequence[str] = SACCT_FIELDS) -> pd.DataFrame:
    """Pure: `sacct -P -n --delimiter=US -o FIELDS` text (SLURM_TIME_FORMAT=%s) → demand rows."""
    return demand_from_sacct(read_sacct([text], fields).frame, site)


def fetch_sacct(runner: Runner, site: Site, start: float, end: float, cache_root: Path | None = None,
                now: float | None = None) -> pd.DataFrame:
    """Demand rows of every job active in [start, end), a local day per sacct call (days
    that can no longer change are kept under `cache_root` when given)."""
    days = SacctDays(runner, cache_root, fields=SACCT_FIELDS, now=now)
    return demand_from_sacct(read_sacct(days.texts(start, end), SACCT_FIELDS).frame, site)


def local_zone() -> str | None:
    """This machine's IANA time zone name ($TZ, else the /etc/localtime link), None if unknown."""
    import os

    tz = os.environ.get("TZ", "").lstrip(":")
    if re.fullmatch(r"[A-Za-z_]+(/[A-Za-z0-9_+-]+)*", tz or ""):
        return tz
    target = os.path.realpath("/etc/localtime")
    m = re.search(r"zoneinfo/(.+)$", target)
    return m.group(1) if m else None
