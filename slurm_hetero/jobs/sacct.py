"""sacct rows (`slurm.sacct.read_sacct`) → the job table.

Works with any subset of `slurm.sacct.FIELDS` (older captures asked for fewer): what a
field would give is left unknown when it was not asked for. Every string parser (TRES,
node lists, TotalCPU, ReqMem, admin comments) runs once per distinct value: a history
repeats most of them. The admin comment is read by `decisions.parse_admin_comment`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_hetero.jobs import table
from slurm_hetero.jobs.decisions import parse_admin_comment
from slurm_hetero.site.catalog import AccelModel
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.parse import NO_NODES, parse_duration_s, parse_tres
from slurm_hetero.slurm.sacct import base_state

ACCEL_GRES = ("gpu", "npu")  # GRES counted as accelerators in req_accel (the Lua export agrees)
DECISION_TEXT = ("accel_spec", "accel_kind", "pool", "why", "tier", "policy")
DECISION_NUMBERS = ("pred_p50", "pred_p90", "energy_j", "accel_util")
# Slurm prints NO_VAL64-like sentinels for energy it did not measure.
_ENERGY_MAX = 1e15
_MEM = re.compile(r"([\d.]+)([KMGTP]?)([nc]?)")
_MEM_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024 ** 3}


def cpu_seconds(text: str) -> float:
    """sacct's TotalCPU ([D-][HH:]MM:SS[.mmm]) in seconds; NaN when unreadable.

    >>> cpu_seconds("1-02:03:04"), cpu_seconds("00:00.997"), cpu_seconds("")
    (93784.0, 0.997, nan)
    """
    try:
        s = parse_duration_s(text) if ":" in text else None
    except ValueError:
        s = None
    return math.nan if s is None else s


def mem_mb(text: str) -> tuple[float, bool]:
    """ReqMem → (MB, per CPU): `32G` → (32768, False); the old suffix `c` is per CPU.

    >>> mem_mb("32G"), mem_mb("1000Mc"), mem_mb("")
    ((32768.0, False), (1000.0, True), (nan, False))
    """
    m = _MEM.fullmatch(text.strip())
    if not m:
        return math.nan, False
    return float(m.group(1)) * _MEM_MB[m.group(2) or "M"], m.group(3) == "c"


def accel_count(req_tres: str) -> float:
    """Accelerators a job asked for, from ReqTRES (totals for the whole job). The untyped
    `gres/gpu=N` is the total; typed entries are summed only when it is absent.

    >>> accel_count("billing=41,cpu=1,gres/gpu:h100=1,gres/gpu=1,mem=1G,node=1")
    1.0
    >>> accel_count("cpu=2,gres/npu:910b=2,gres/gpu:a100=1")
    3.0
    """
    tres = parse_tres(req_tres)
    total = 0
    for name in ACCEL_GRES:
        plain, typed = 0, 0
        for key, value in tres.items():
            if not value.isdigit():
                continue
            if key == f"gres/{name}":
                plain += int(value)
            elif key.startswith(f"gres/{name}:"):
                typed += int(value)
        total += plain or typed
    return float(total)


@dataclass(frozen=True)
class Alloc:
    arch: str
    model: str
    accel_class: str
    devices: float
    units: float


class SiteIndex:
    """Site lookups the allocation needs: GRES (name, type) → model, node → arch and devices."""

    def __init__(self, site: Site | None):
        self.gres: dict[tuple[str, str], AccelModel] = {}
        self.nodes: dict[str, tuple[str, tuple[Any, ...]]] = {}
        if site is None:
            return
        for m in site.catalog.values():
            self.gres[(m.gres_name, m.gres_type)] = m
            self.gres.setdefault((m.gres_name, m.id), m)
        for g in site.node_groups:
            for n in g.nodes:
                self.nodes[n] = (g.architecture, g.accelerators)

    def first_node(self, nodelist: str) -> tuple[str, tuple[Any, ...]] | None:
        if nodelist in NO_NODES:
            return None
        try:
            first = next(iter(NodeSet(nodelist)))
        except (NodeSetParseError, StopIteration, ValueError):
            first = nodelist.split(",")[0]
        return self.nodes.get(first, ("unknown", ()))

    def alloc(self, tres_text: str, nodelist: str) -> Alloc:
        """What an allocation held: its main accelerator model, device count and units."""
        node = self.first_node(nodelist)
        arch = node[0] if node else ""
        tres = parse_tres(tres_text)
        typed: dict[str, float] = {}
        units = 0.0
        for key, value in tres.items():
            if not key.startswith("gres/") or ":" not in key:
                continue
            name, gtype = key[5:].split(":", 1)
            count = _float(value)
            model = self.gres.get((name, gtype))
            mid = model.id if model else gtype
            typed[mid] = typed.get(mid, 0.0) + count
            units += count * (model.units if model and model.units else math.nan)
        if typed:
            mid = max(typed, key=lambda k: typed[k])
            return Alloc(arch, mid, mid, typed[mid], units)
        # Untyped GRES (shards, or a gres/gpu=N whose type was not tracked): the node says which.
        for key, value in tres.items():
            if not key.startswith("gres/"):
                continue
            name, count = key[5:], _float(value)
            for a in node[1] if node else ():
                if name == "shard" and a.shards_per_device:
                    devices = count / a.shards_per_device
                    return Alloc(arch, a.model.id, f"{a.model.id}/shard", devices, devices * a.model.units)
                if name == a.model.gres_name:
                    return Alloc(arch, a.model.id, a.model.id, count, count * a.model.units)
            if name != "shard":
                return Alloc(arch, name, name, count, math.nan)
        return Alloc(arch, "", table.CPU_CLASS, 0.0, 0.0)


def _float(v: str) -> float:
    try:
        return float(v)
    except ValueError:
        return math.nan


def _categories(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """(codes, category strings) of a column: parsers then run once per distinct value."""
    cat = col.astype("category")
    codes = cat.cat.codes.to_numpy()
    cats = [str(c) for c in cat.cat.categories]
    if (codes < 0).any():  # a missing value reads as ""
        codes = np.where(codes < 0, len(cats), codes)
        cats.append("")
    return codes, cats


def _map_text(codes: np.ndarray, values: list[str]) -> pd.Categorical[Any]:
    """values[codes] as a categorical, built from codes (no million-string detour)."""
    cats = list(dict.fromkeys(values)) or [""]
    pos = {c: i for i, c in enumerate(cats)}
    idx = np.asarray([pos[v] for v in values] or [0], dtype=np.int64)
    return pd.Categorical.from_codes(idx[codes], dtype=pd.CategoricalDtype(cats))


def _map(codes: np.ndarray, values: list[Any], dtype: str | type) -> np.ndarray:
    return np.asarray(values, dtype=dtype)[codes] if values else np.zeros(len(codes), dtype=dtype)


def _text_of(raw: pd.DataFrame, field: str, fn: Callable[[str], str]) -> pd.Categorical[Any]:
    codes, values = _categories(raw[field])
    return _map_text(codes, [fn(v) for v in values])


def from_sacct(raw: pd.DataFrame, site: Site | None = None, *, cluster: str = "") -> pd.DataFrame:
    """The job table of parsed sacct allocation lines (every job, whatever its state)."""
    n = len(raw)
    if n == 0:
        return table.empty()
    has = set(raw.columns).__contains__
    cols: dict[str, object] = {}
    default = f"sacct:{cluster or 'cluster'}"
    cols["source"] = (_text_of(raw, "Cluster", lambda c: f"sacct:{c}" if c else default) if has("Cluster")
                      else table.constant(n, default))
    cols["job_id"] = raw["JobID" if has("JobID") else "JobIDRaw"].to_numpy(dtype=object)
    for field, col in (("JobName", "name"), ("User", "user"), ("Account", "account"),
                       ("Partition", "partition"), ("QOS", "qos"), ("Reason", "reason")):
        if has(field):
            cols[col] = raw[field] if col == "name" else raw[field].astype("category")
    if has("State"):
        cols["state"] = _text_of(raw, "State", base_state)
    for field, col in (("Submit", "submit"), ("Eligible", "eligible"), ("Start", "start"), ("End", "end"),
                       ("ElapsedRaw", "runtime_s"), ("ReqCPUS", "req_cpus"), ("NCPUS", "ncpus")):
        if has(field):
            cols[col] = raw[field].to_numpy(dtype="float64").copy()
    if has("TimelimitRaw"):
        cols["req_time_s"] = raw["TimelimitRaw"].to_numpy(dtype="float64") * 60.0
    if has("ReqTRES"):
        codes, texts = _categories(raw["ReqTRES"])
        cols["req_accel"] = _map(codes, [accel_count(t) for t in texts], "float64")
    if has("ReqMem"):
        codes, texts = _categories(raw["ReqMem"])
        parsed = [mem_mb(t) for t in texts]
        mb = _map(codes, [p[0] for p in parsed], "float64")
        per_cpu = _map(codes, [p[1] for p in parsed], bool)
        cpus = np.fmax(np.asarray(cols.get("req_cpus", np.ones(n)), dtype="float64"), 1.0)
        cols["req_mem_mb"] = np.where(per_cpu, mb * cpus, mb)
    if has("TotalCPU"):
        codes, texts = _categories(raw["TotalCPU"])
        cols["cpu_time"] = _map(codes, [cpu_seconds(t) for t in texts], "float64")
    if has("NodeList"):
        node_codes, nodes = _categories(raw["NodeList"])
        if "start" in cols:  # a job cancelled while pending gets Start = End: it never ran
            no_nodes = np.asarray([v in NO_NODES for v in nodes] or [True])[node_codes]
            np.asarray(cols["start"])[no_nodes] = np.nan
        if has("AllocTRES"):
            cols.update(_allocations(raw["AllocTRES"], node_codes, nodes, SiteIndex(site)))
    if has("AdminComment"):
        cols.update(_decisions(raw["AdminComment"]))
    if has("ConsumedEnergyRaw"):
        # Slurm's own energy accounting (acct_gather_energy) when nothing else recorded any.
        slurm_energy = raw["ConsumedEnergyRaw"].to_numpy(dtype="float64").copy()
        slurm_energy[(slurm_energy <= 0) | (slurm_energy > _ENERGY_MAX)] = np.nan
        energy = np.asarray(cols.get("energy_j", np.full(n, np.nan)), dtype="float64")
        cols["energy_j"] = np.where(np.isnan(energy), slurm_energy, energy)
    return table.build(cols, n)


def _allocations(tres_col: pd.Series, node_codes: np.ndarray, nodes: list[str],
                 idx: SiteIndex) -> dict[str, object]:
    tres_codes, tres = _categories(tres_col)
    width = len(nodes) + 1
    pair, inverse = np.unique(tres_codes.astype(np.int64) * width + node_codes, return_inverse=True)
    allocs = [idx.alloc(tres[int(p) // width], nodes[int(p) % width]) for p in pair]
    inverse = inverse.reshape(-1)
    cols: dict[str, object] = {f: _map_text(inverse, [getattr(a, f) for a in allocs])
                               for f in ("arch", "model", "accel_class")}
    cols.update({f: _map(inverse, [getattr(a, f) for a in allocs], "float64") for f in ("devices", "units")})
    return cols


def _decisions(comments: pd.Series) -> dict[str, object]:
    codes, texts = _categories(comments)
    decided = [parse_admin_comment(c) for c in texts]
    cols: dict[str, object] = {"hetero": _map(codes, [bool(d.get("hetero")) for d in decided], bool)}
    for f in DECISION_TEXT:
        cols[f] = _map_text(codes, [str(d.get(f, "")) for d in decided])
    for f in DECISION_NUMBERS:
        cols[f] = _map(codes, [d.get(f, math.nan) for d in decided], "float64")
    return cols
