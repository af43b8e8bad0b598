"""Job rows → per-pool demand series on a one-minute grid.

The demand table has one row per job and pool (a job asking for two kinds of devices has
two rows):

    job     str    the job's id (dedupe key between accounting and the live queue)
    pool    str    "model@arch" (normalized units) or "cpu@arch" (cores)
    amount  float  units or cores the job holds, or waits for, in that pool
    submit  float  epoch seconds
    start   float  epoch seconds; NaN: not started (yet, or ever)
    end     float  epoch seconds; NaN: not ended yet (in the system until further notice)
    limit   float  the job's time limit in seconds; NaN: unknown

A job is *in the system* from submit to end: pending before start, running after. The
grid has boundaries t0 + 60·k (k = 0..M) and minute bins [t0 + 60·k, t0 + 60·(k+1)). A
forecast made at boundary k sees bins < k and boundary values at k; it predicts bins ≥ k.

>>> t = demand_table(job=["1"], pool=["cpu@x86_64"], amount=[4.0], submit=[0.0],
...                  start=[60.0], end=[150.0], limit=[float("nan")])
>>> s = build_series(t, t0=0.0, t1=240.0)
>>> s.pools["cpu@x86_64"].mean.tolist()          # 4 cores for 60 s + 60 s + 30 s
[4.0, 4.0, 2.0, 0.0]
>>> s.pools["cpu@x86_64"].pending.tolist(), s.pools["cpu@x86_64"].running.tolist()
([4.0, 0.0, 0.0, 0.0, 0.0], [0.0, 4.0, 4.0, 0.0, 0.0])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.forecast import HORIZONS

COLUMNS = ("job", "pool", "amount", "submit", "start", "end", "limit")
_FLOATS = ("amount", "submit", "start", "end", "limit")
MINUTE = 60.0


def demand_table(**columns: Sequence[object] | np.ndarray | pd.Series) -> pd.DataFrame:
    """A demand table from columns (all of COLUMNS); rows without a submit time or with no
    amount are dropped, starts before submit are moved to submit, ends before start to start."""
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise InputError(f"demand table: missing columns {', '.join(missing)}")
    df = pd.DataFrame({c: columns[c] for c in COLUMNS})
    return normalize(df)


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(index=range(len(df)))
    out["job"] = df["job"].astype(str).to_numpy()
    out["pool"] = df["pool"].astype(str).to_numpy()
    for c in _FLOATS:
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype="float64")
        out[c] = np.where(np.isfinite(v), v, np.nan)
    keep = out["submit"].notna() & (out["amount"] > 0)
    out = out.loc[keep].reset_index(drop=True)
    out["start"] = np.where(out["start"] < out["submit"], out["submit"], out["start"])
    floor = out["start"].fillna(out["submit"])
    out["end"] = np.where(out["end"] < floor, floor, out["end"])
    return out[list(COLUMNS)]


def empty_table() -> pd.DataFrame:
    return demand_table(**{c: [] for c in COLUMNS})


def concat(tables: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Union of tables; a (job, pool) seen twice keeps its last row (the live queue after
    accounting: its view of a running job is the newer one)."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return empty_table()
    df = pd.concat(frames, ignore_index=True)
    return df.drop_duplicates(["job", "pool"], keep="last").reset_index(drop=True)


def as_of(table: pd.DataFrame, at: float) -> pd.DataFrame:
    """What was known at `at`: jobs submitted by then; a start or end after `at` is not
    known yet (NaN). A forecast made at `at` from this table cannot see the future."""
    t = table.loc[table["submit"] <= at].copy()
    t.loc[t["start"] > at, "start"] = np.nan
    t.loc[t["end"] > at, "end"] = np.nan
    return t.reset_index(drop=True)


@dataclass
class PoolSeries:
    """One pool on the grid: `mean` per minute bin (M values, in-system amount averaged over
    the minute), `running`/`pending` at each boundary (M+1), `arrivals` per bin (amount
    submitted in it), `ending[h]` at each boundary: running amount whose time limit ends it
    within h minutes (a departure known in advance)."""

    mean: np.ndarray
    running: np.ndarray
    pending: np.ndarray
    arrivals: np.ndarray
    ending: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def level(self) -> np.ndarray:
        """In-system amount at each boundary (running + pending): the persistence forecast."""
        return np.asarray(self.running + self.pending, dtype="float64")


@dataclass
class Series:
    t0: float  # epoch seconds of boundary 0, a whole minute
    minutes: int  # M: bins in the grid
    pools: dict[str, PoolSeries]

    def time(self, k: np.ndarray | int) -> np.ndarray:
        return self.t0 + MINUTE * np.asarray(k, dtype="float64")

    def boundary(self, t: float) -> int:
        """The last boundary at or before `t`."""
        return math.floor((t - self.t0) / MINUTE)


def _grid_bounds(table: pd.DataFrame, t0: float | None, t1: float | None) -> tuple[float, int]:
    if t0 is None:
        t0 = float(table["submit"].min()) if len(table) else 0.0
    t0 = math.floor(t0 / MINUTE) * MINUTE
    if t1 is None:
        known = np.concatenate([table["submit"].to_numpy(), table["end"].dropna().to_numpy()])
        t1 = float(known.max()) if len(known) else t0
    minutes = max(0, math.ceil((t1 - t0) / MINUTE))
    return t0, minutes


def _bc(idx: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """Weighted counts of idx in 0..n-1 as floats (bincount of nothing is integer)."""
    return np.bincount(idx, weights=weights, minlength=n).astype("float64")[:n]


def _bin_means(s: np.ndarray, e: np.ndarray, a: np.ndarray, m: int) -> np.ndarray:
    """Amount in [s, e) averaged over each minute bin; s, e in minutes from t0 (e may be inf)."""
    s = np.clip(s, 0.0, float(m))
    e = np.clip(e, 0.0, float(m))
    keep = e > s
    s, e, a = s[keep], e[keep], a[keep]
    bs = np.floor(s).astype(np.int64)
    be = np.floor(e).astype(np.int64)
    same = bs == be
    d = ~same
    out = _bc(bs[same], a[same] * (e[same] - s[same]), m + 1)
    out += _bc(bs[d], a[d] * (bs[d] + 1 - s[d]), m + 1)
    out += _bc(be[d], a[d] * (e[d] - be[d]), m + 1)
    full = _bc(bs[d] + 1, a[d], m + 1) - _bc(be[d], a[d], m + 1)
    out += np.cumsum(full)
    return out[:m]


def _boundary_levels(s: np.ndarray, e: np.ndarray, a: np.ndarray, m: int) -> np.ndarray:
    """Amount with s <= boundary < e at each boundary 0..m; s, e in minutes from t0."""
    first = np.clip(np.ceil(s), 0, m + 1).astype(np.int64)
    stop = np.clip(np.ceil(np.where(np.isinf(e), m + 1, e)), 0, m + 1).astype(np.int64)
    keep = stop > first
    d = _bc(first[keep], a[keep], m + 2) - _bc(stop[keep], a[keep], m + 2)
    return np.cumsum(d)[: m + 1]


def _pool_series(rows: pd.DataFrame, t0: float, m: int, horizons: Sequence[int]) -> PoolSeries:
    a = rows["amount"].to_numpy()
    sub = (rows["submit"].to_numpy() - t0) / MINUTE
    end = (rows["end"].to_numpy() - t0) / MINUTE
    end = np.where(np.isnan(end), np.inf, end)
    start = (rows["start"].to_numpy() - t0) / MINUTE
    started = ~np.isnan(start)
    pend_end = np.where(started, start, end)
    run_s = np.where(started, start, np.inf)
    limit = rows["limit"].to_numpy() / MINUTE
    arrivals_idx = np.floor(sub).astype(np.int64)
    inside = (arrivals_idx >= 0) & (arrivals_idx < m)
    ending = {}
    for h in horizons:
        # running at b and start + limit <= b + h  ⇔  b >= max(start, start + limit - h)
        from_b = np.where(np.isnan(limit), np.inf, np.maximum(run_s, run_s + limit - h))
        ending[h] = _boundary_levels(from_b, end, a, m)
    return PoolSeries(
        mean=_bin_means(sub, end, a, m),
        running=_boundary_levels(run_s, end, a, m),
        pending=_boundary_levels(sub, pend_end, a, m),
        arrivals=_bc(arrivals_idx[inside], a[inside], m),
        ending=ending,
    )


def build_series(table: pd.DataFrame, t0: float | None = None, t1: float | None = None,
                 pools: Iterable[str] | None = None,
                 horizons: Sequence[int] = HORIZONS) -> Series:
    """The minute grid from t0 (default: the first submit) to t1 (default: the last known
    time) for the pools of `pools` (in that order; they may have no jobs), then any other
    pool of the table."""
    t0, m = _grid_bounds(table, t0, t1)
    names = list(dict.fromkeys([*(pools or []), *sorted(set(table["pool"].tolist()))]))
    groups = dict(tuple(table.groupby("pool", sort=True))) if len(table) else {}
    out = {}
    for name in names:
        rows = groups.get(name, table.iloc[0:0])
        out[name] = _pool_series(rows, t0, m, horizons)
    return Series(t0=t0, minutes=m, pools=out)
