"""The job table: one row per finished (or known) job, from any source, stored as Parquet.

Times are integer epoch seconds (SWF traces without a start epoch count from 0), -1 where
unknown; counts are -1 where unknown. Every source maps into these columns, so features,
training and evaluation never look at where a job came from.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from slurm_hetero.errors import InputError

SCHEMA: tuple[tuple[str, type], ...] = (
    ("source", str),      # "swf:KTH-SP2-1996-2.1-cln", "sacct:mycluster"
    ("job_id", str),      # strings: sacct ids look like 1234, 1234_7 or 1234+0
    ("user", str),
    ("account", str),
    ("submit", int),
    ("start", int),
    ("end", int),
    ("runtime_s", int),
    ("req_time_s", int),  # the user's estimate (time limit); -1 when none was given
    ("req_cpus", int),
    ("req_accel", int),   # accelerator devices asked for (GPUs, NPUs), whole job
    ("req_mem_mb", int),
    ("partition", str),
    ("qos", str),
    ("name", str),
    ("status", str),      # completed, failed, cancelled, timeout, node_fail, oom, preempted, unknown
)
COLUMNS = tuple(name for name, _ in SCHEMA)
INT_COLUMNS = tuple(name for name, kind in SCHEMA if kind is int)
STR_COLUMNS = tuple(name for name, kind in SCHEMA if kind is str)
KEY = ["source", "job_id"]


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """Columns in schema order and dtype: ints as int64 (-1 unknown), strings ("" unknown)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"job table: missing columns {', '.join(missing)}")
    out = pd.DataFrame(index=range(len(df)))
    for c in INT_COLUMNS:
        out[c] = pd.to_numeric(df[c], errors="coerce").fillna(-1).astype("int64").to_numpy()
    for c in STR_COLUMNS:
        out[c] = df[c].fillna("").astype(str).to_numpy()
    return out[list(COLUMNS)]


def empty() -> pd.DataFrame:
    return normalize(pd.DataFrame({c: [] for c in COLUMNS}))


def read(path: Path) -> pd.DataFrame:
    """Read a job table; InputError names the file when it is not one."""
    if not path.is_file():
        raise InputError(f"{path}: no such job table (create it with `slurm-hetero model ingest`)")
    try:
        df = pd.read_parquet(path)
    except (ValueError, OSError) as e:  # pyarrow's errors derive from these
        raise InputError(f"{path}: not a Parquet job table: {e}") from e
    missing = [c for c in COLUMNS if c not in df.columns]
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


def merge(*tables: pd.DataFrame) -> pd.DataFrame:
    """Union of tables; a job seen twice (same source and id) keeps its last version."""
    frames = [normalize(t) for t in tables if len(t)]
    if not frames:
        return empty()
    df = pd.concat(frames, ignore_index=True)
    return df.drop_duplicates(KEY, keep="last").reset_index(drop=True)
