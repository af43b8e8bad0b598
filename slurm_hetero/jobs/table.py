"""THE job table: one row per job (allocation; steps dropped), from any source, the one
shape that runtime prediction and the reports read. Parquet on disk.

Column kinds
    text    Python str, "" where unknown; a reader may hold a repeating column as a pandas
            categorical (same values, a million jobs then cost tens of MB, not a GB);
            `job_id` and `name` are mostly unique and stay plain objects
    number  float64, NaN where unknown; times are epoch seconds (a trace without a start
            epoch counts from 0)
    flag    bool

Columns
    source, job_id                                     which trace or cluster; the job's id
        (sacct ids look like 1234, 1234_7 or 1234+0); (source, job_id) is the key
    name, user, account, partition, qos, state, reason identity; `state` is Slurm's name
        (COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, ..., UNKNOWN for traces that
        do not say), `reason` why a job waits
    submit, eligible, start, end                       seconds
    runtime_s, req_time_s                              run time; the user's estimate (limit)
    req_cpus, req_accel, req_mem_mb                    what the job asked for (accelerators:
        GPUs and NPUs of the whole job; what the runtime model sees at submit time)
    ncpus, cpu_time                                    CPUs allocated, CPU-seconds used
    arch, model, accel_class, devices, units           what was allocated (devices: the main
        accelerator model's count, fractional for shards; units: normalized units of the
        whole allocation, NaN when the model has none)
    hetero, accel_spec, accel_kind, pool, why, tier, policy    the bridge's decision
        (`accel_spec` the --accel value, `accel_kind` any / units / named)
    pred_p50, pred_p90, energy_j, accel_util           recorded by later stages
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.slurm.sacct import TERMINAL

TEXT = ("source", "job_id", "name", "user", "account", "partition", "qos", "state", "reason",
        "arch", "model", "accel_class", "accel_spec", "accel_kind", "pool", "why", "tier", "policy")
NUMBERS = ("submit", "eligible", "start", "end", "runtime_s", "req_time_s", "req_cpus", "req_accel",
           "req_mem_mb", "ncpus", "cpu_time", "devices", "units", "pred_p50", "pred_p90", "energy_j",
           "accel_util")
FLAGS = ("hetero",)
COLUMNS = (*TEXT, *NUMBERS, *FLAGS)
UNIQUE = ("job_id", "name")
KEY = ["source", "job_id"]
REQUIRED = ("source", "job_id", "submit", "start", "end")  # what makes a file a job table
CPU_CLASS = "cpu"  # accel_class of a job that holds no accelerator
UNKNOWN_STATE = "UNKNOWN"


def build(columns: Mapping[str, Any], n: int) -> pd.DataFrame:
    """A job table of n rows from column arrays; absent columns get their neutral value
    ("" / NaN / False). Categoricals stay categorical, other text becomes str objects."""
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise ValueError(f"not job table columns: {', '.join(unknown)}")
    data: dict[str, object] = {}
    for c in TEXT:
        v = columns.get(c)
        if v is None:
            data[c] = np.full(n, "", dtype=object) if c in UNIQUE else constant(n)
        elif isinstance(v, pd.Categorical | pd.Series) and isinstance(v.dtype, pd.CategoricalDtype):
            data[c] = _no_missing(pd.Categorical(v))
        else:
            data[c] = _strings(v, n)
    for c in NUMBERS:
        v = columns.get(c)
        data[c] = (pd.to_numeric(pd.Series(v), errors="coerce").to_numpy(dtype="float64")
                   if v is not None else np.full(n, np.nan))
    v = columns.get("hetero")
    data["hetero"] = (pd.Series(v).fillna(False).to_numpy(dtype=bool) if v is not None
                      else np.zeros(n, dtype=bool))
    return pd.DataFrame(data)


def _strings(values: Any, n: int) -> np.ndarray:
    s = pd.Series(values, dtype=object) if np.ndim(values) else pd.Series([values] * n, dtype=object)
    return s.where(s.notna(), "").astype(str).to_numpy(dtype=object)


def _no_missing(cat: pd.Categorical[Any]) -> pd.Categorical[Any]:
    """A missing value reads as "" everywhere downstream."""
    if not cat.isna().any():
        return cat
    if "" not in cat.categories:
        cat = cat.add_categories([""])
    return cat.fillna("")


def constant(n: int, value: str = "") -> pd.Categorical[Any]:
    """n copies of one value as a categorical, without building n strings."""
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int64), dtype=pd.CategoricalDtype([value]))


def categorical(values: Any) -> pd.Categorical[Any]:
    """Repeating text as a categorical."""
    return pd.Categorical(np.asarray(values, dtype=object))


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """The table in schema order and kinds; columns it lacks get their neutral value."""
    return build({c: df[c].to_numpy() if not isinstance(df[c].dtype, pd.CategoricalDtype) else df[c]
                  for c in COLUMNS if c in df.columns}, len(df))


def empty() -> pd.DataFrame:
    return build({}, 0)


def labels(col: pd.Series) -> np.ndarray:
    """A text column as an object array, cheaply (categories are indexed, not converted)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories, dtype=object)
        codes = col.cat.codes.to_numpy()
        return cats[codes] if len(cats) else np.full(len(col), "", dtype=object)
    return col.to_numpy(dtype=object)


def finished(df: pd.DataFrame) -> pd.Series:
    """Jobs in a terminal state with a known end."""
    return df["state"].isin(TERMINAL) & df["end"].notna()


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


def merge(*tables: pd.DataFrame) -> pd.DataFrame:
    """Union of tables; a job seen twice (same source and id) keeps its last version."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return empty()
    df = normalize(pd.concat([normalize(t) for t in frames], ignore_index=True))
    return df.drop_duplicates(KEY, keep="last").reset_index(drop=True)


# ---- Parquet ---------------------------------------------------------------------------------

def read(path: Path) -> pd.DataFrame:
    """Read a job table; InputError names the file when it is not one."""
    if not path.is_file():
        raise InputError(f"{path}: no such job table (create it with `slurm-hetero model ingest`)")
    try:
        df = pd.read_parquet(path)
    except (ValueError, OSError) as e:  # pyarrow's errors derive from these
        raise InputError(f"{path}: not a Parquet job table: {e}") from e
    if "status" in df.columns and "state" not in df.columns:
        df = _from_first_layout(df)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(f"{path}: not a job table, missing columns {', '.join(missing)}")
    return normalize(df)


def write(df: pd.DataFrame, path: Path) -> None:
    """Write atomically (a reader never sees half a file), sorted by submit time."""
    df = normalize(df).sort_values(["submit", "source", "job_id"], kind="stable")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        df.to_parquet(tmp, index=False, compression="zstd")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


# The first `model ingest` tables: integers with -1 for unknown, lower-case statuses.
_FIRST_STATUS = {"completed": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED",
                 "timeout": "TIMEOUT", "oom": "OUT_OF_MEMORY", "node_fail": "NODE_FAIL",
                 "preempted": "PREEMPTED"}


def _from_first_layout(df: pd.DataFrame) -> pd.DataFrame:
    out = df.drop(columns=["status"])
    out["state"] = df["status"].map(_FIRST_STATUS).fillna(UNKNOWN_STATE)
    for c in ("submit", "start", "end", "runtime_s", "req_time_s", "req_cpus", "req_mem_mb"):
        if c in out.columns:
            out[c] = out[c].where(out[c] >= 0)
    return out
