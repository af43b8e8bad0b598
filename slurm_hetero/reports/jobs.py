"""The job table every source produces and every metric reads, and cluster capacity.

One row per job allocation (steps dropped). Times are epoch seconds, NaN when unknown.
Repeated strings are categoricals: a million jobs then cost tens of MB, not a GB.

Columns
    job, name, user, account, partition, qos, state, reason        identity
    submit, eligible, start, end, elapsed, limit                      seconds
    ncpus, cpu_time                                                   CPUs, CPU-seconds used
    arch, model, accel_class, devices, units                         what was allocated
        (devices: accelerator count, fractional for shards; units: normalized units of
        the whole allocation, NaN when the model has none)
    hetero, req, req_kind, pool, why, tier, policy                    bridge decision
    pred_p50, pred_p90, energy_j, accel_util                          recorded by later stages
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.site.model import Site

TEXT = ("job", "name", "user", "account", "partition", "qos", "state", "reason", "arch",
        "model", "accel_class", "req", "req_kind", "pool", "why", "tier", "policy")
NUMBERS = ("submit", "eligible", "start", "end", "elapsed", "limit", "ncpus", "cpu_time",
           "devices", "units", "pred_p50", "pred_p90", "energy_j", "accel_util")
COLUMNS = (*TEXT, *NUMBERS, "hetero")
# Identity columns hold mostly-unique values; the rest repeat and become categoricals.
_UNIQUE = ("job", "name")
CPU_CLASS = "cpu"
# States after which a job changes no more (sacct prints e.g. "CANCELLED by 0": first word).
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                      "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"})


def finish(columns: dict[str, object], n: int) -> pd.DataFrame:
    """A job table from column arrays; absent columns get their neutral value."""
    data: dict[str, object] = {}
    for c in TEXT:
        v = columns.get(c)
        if v is None:
            data[c] = np.full(n, "", dtype=object) if c in _UNIQUE else _constant(n)
        elif c in _UNIQUE:
            data[c] = np.asarray(v, dtype=object)
        elif isinstance(v, pd.Categorical):
            data[c] = v
        elif isinstance(v, pd.Series) and isinstance(v.dtype, pd.CategoricalDtype):
            data[c] = v.array
        else:
            data[c] = pd.Categorical(np.asarray(v, dtype=object))
    for c in NUMBERS:
        v = columns.get(c)
        data[c] = np.asarray(v, dtype="float64") if v is not None else np.full(n, np.nan)
    v = columns.get("hetero")
    data["hetero"] = np.asarray(v, dtype=bool) if v is not None else np.zeros(n, dtype=bool)
    frame = pd.DataFrame(data)
    for c in TEXT:  # a missing value reads as "" everywhere downstream
        col = frame[c]
        if isinstance(col.dtype, pd.CategoricalDtype) and col.isna().any():
            if "" not in col.cat.categories:
                col = col.cat.add_categories([""])
            frame[c] = col.fillna("")
    return frame


def _constant(n: int, value: str = "") -> pd.Categorical[Any]:
    """n copies of one value as a categorical, without building n strings."""
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int64), dtype=pd.CategoricalDtype([value]))


def labels(col: pd.Series) -> np.ndarray:
    """A text column as an object array, cheaply (categories are indexed, not converted)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories, dtype=object)
        codes = col.cat.codes.to_numpy()
        return cats[codes] if len(cats) else np.full(len(col), "", dtype=object)
    return col.to_numpy(dtype=object)


def empty_jobs() -> pd.DataFrame:
    return finish({}, 0)


def select(jobs: pd.DataFrame, start: float, end: float, partition: str | None = None) -> pd.DataFrame:
    """Jobs active during [start, end): submitted before its end, not ended before its start."""
    keep = (jobs["submit"] < end) & ~(jobs["end"] < start)
    if partition:
        # A job submitted to several partitions lists them comma-separated until it starts.
        parts = jobs["partition"].astype("category")
        hit = {c: partition in str(c).split(",") for c in parts.cat.categories}
        keep &= parts.map(hit).astype(bool)
    out = jobs.loc[keep].reset_index(drop=True)
    for c in TEXT:
        if isinstance(out[c].dtype, pd.CategoricalDtype):
            out[c] = out[c].cat.remove_unused_categories()
    return out


@dataclass
class Capacity:
    """What the cluster could deliver: devices per (model, arch), CPUs per arch."""

    devices: dict[tuple[str, str], float] = field(default_factory=dict)
    units_per_device: dict[str, float] = field(default_factory=dict)
    cpus: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    source: str = ""
    # Devices per model that jobs cannot be attributed to (a trace naming no model per job).
    inventory: dict[str, float] = field(default_factory=dict)

    def units(self, model: str, arch: str) -> float:
        return self.devices.get((model, arch), 0.0) * self.units_per_device.get(model, float("nan"))


def site_capacity(site: Site, partition: str | None = None) -> Capacity:
    """Capacity of the site's node groups (those in `partition` when given)."""
    cap = Capacity(source=f"site {site.name}")
    for g in site.node_groups:
        if partition and partition not in g.partitions:
            continue
        n = g.node_count
        cap.cpus[g.architecture] = cap.cpus.get(g.architecture, 0.0) + g.cpus * n
        cap.nodes[g.architecture] = cap.nodes.get(g.architecture, 0) + n
        for a in g.accelerators:
            key = (a.model.id, g.architecture)
            cap.devices[key] = cap.devices.get(key, 0.0) + a.count * n
            cap.units_per_device[a.model.id] = a.model.units
    return cap
