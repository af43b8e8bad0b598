"""The "Power saving" section: what the keeper did (its history, power/history.py) against
the demand that materialised (the accounting the report already read).

Per pool:
- forecast vs actual demand over time: at each keeper record, the forecast it was given
  for the next `horizon` minutes against the actual peak of the pool's in-system amount
  (running + pending, the forecast's own definition) over those minutes, sampled each
  minute from the report's jobs (accelerator pools in normalized units, CPU pools in
  cores);
- nodes asleep over time;
- energy saved: asleep node-hours x the idle draw of one of the pool's nodes (the site's
  measured `idle_watts`, else the estimate of site/power.py, said as such; IDLE_WATTS when
  the report has no site). Each record's counts hold until the next record, at most
  `max_gap_s` (the daemon was down beyond that: not counted).

Without a history file (power saving off, or never run) the section says so and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.conf.profile import Profile
from slurm_hetero.conf.slurmconf import effective_profile
from slurm_hetero.jobs import table
from slurm_hetero.power.history import HISTORY_FILE, read_history
from slurm_hetero.reports.model import Plot, Section, Table
from slurm_hetero.site.model import Site
from slurm_hetero.site.power import ESTIMATE_RULE, IdlePower

KEY, TITLE = "power", "Power saving"
HORIZON = 15  # minutes: the keeper's default horizon (power.horizon)
MAX_GAP_S = 300.0
# Without a site (a trace's report): the assumed draw of one idle, awake node.
IDLE_WATTS = 150.0


def default_history(site: Site) -> Path | None:
    """Where the bridge daemon of a site with power saving on keeps the history (beside
    the snapshot, in StateSaveLocation); None when the site's power saving is off."""
    if not site.power.enabled:
        return None
    return Path(effective_profile(site, Profile()).state_dir) / HISTORY_FILE


def demand_rows(jobs: pd.DataFrame) -> pd.DataFrame:
    """(pool, amount, submit, end) per job, pools as the forecast names them."""
    if not len(jobs):
        return pd.DataFrame({"pool": [], "amount": [], "submit": [], "end": []})
    arch = table.labels(jobs["arch"]).astype(str)
    arch = np.where(arch == "", "unknown", arch)
    model = table.labels(jobs["model"]).astype(str)
    units = jobs["units"].to_numpy(dtype="float64")
    started = np.isfinite(jobs["start"].to_numpy(dtype="float64"))
    cpus = np.where(started, jobs["ncpus"].to_numpy(dtype="float64"),
                    jobs["req_cpus"].to_numpy(dtype="float64"))
    accel = (model != "") & (units > 0)
    pool = np.where(accel, np.char.add(np.char.add(model, "@"), arch), np.char.add("cpu@", arch))
    amount = np.where(accel, units, cpus)
    out = pd.DataFrame({"pool": pool, "amount": amount, "submit": jobs["submit"].to_numpy(dtype="float64"),
                        "end": jobs["end"].to_numpy(dtype="float64")})
    keep = np.isfinite(amount) & (amount > 0) & np.isfinite(out["submit"].to_numpy())
    kept: pd.DataFrame = out.loc[keep].reset_index(drop=True)
    return kept


def level(rows: pd.DataFrame, at: np.ndarray) -> np.ndarray:
    """In-system amount (submitted, not ended) at each time of `at`."""
    if not len(rows):
        return np.zeros(len(at))
    a = rows["amount"].to_numpy()
    s_order = np.argsort(rows["submit"].to_numpy())
    subs, sa = rows["submit"].to_numpy()[s_order], np.concatenate([[0.0], np.cumsum(a[s_order])])
    end = rows["end"].to_numpy()
    ended = np.isfinite(end)
    e_order = np.argsort(end[ended])
    ends, ea = end[ended][e_order], np.concatenate([[0.0], np.cumsum(a[ended][e_order])])
    return np.asarray(sa[np.searchsorted(subs, at, side="right")]
                      - ea[np.searchsorted(ends, at, side="right")])


def actual_peak(rows: pd.DataFrame, t: np.ndarray, horizon_min: int) -> np.ndarray:
    """Peak in-system amount over [t, t + horizon], sampled each minute (both ends included)."""
    grid = t[:, None] + 60.0 * np.arange(horizon_min + 1)[None, :]
    return np.asarray(level(rows, grid.ravel()).reshape(grid.shape).max(axis=1))


def held_s(t: np.ndarray, max_gap_s: float) -> np.ndarray:
    """How long each record's counts hold: to the next record, at most max_gap_s; the last 0."""
    if not len(t):
        return t
    return np.asarray(np.concatenate([np.minimum(np.diff(t), max_gap_s), [0.0]]))


def _finite(v: object, default: float) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else default  # type: ignore[arg-type]


def _forecast(rec: dict[str, Any], horizon: int) -> float:
    fc = rec.get("forecast")
    return _finite(fc.get(str(horizon)) if isinstance(fc, dict) else None, math.nan)


def _num(rec: dict[str, Any], key: str) -> float:
    return _finite(rec.get(key), 0.0)


def pool_frames(records: Sequence[dict[str, Any]], jobs: pd.DataFrame, horizon: int = HORIZON,
                max_gap_s: float = MAX_GAP_S) -> dict[str, pd.DataFrame]:
    """Per pool, one row per record: t, forecast, actual, asleep, held_s, wake, sleep counts."""
    rows = demand_rows(jobs)
    out = {}
    for pool in sorted({str(r["pool"]) for r in records}):
        recs = [r for r in records if r["pool"] == pool]
        t = np.array([float(r["t"]) for r in recs])
        mine = rows[rows["pool"] == pool]
        out[pool] = pd.DataFrame({
            "t": t,
            "forecast": [_forecast(r, horizon) for r in recs],
            "actual": actual_peak(mine, t, horizon),
            "asleep": [_num(r, "asleep") for r in recs],
            "held_s": held_s(t, max_gap_s),
            "woken": [len(r.get("wake") or []) for r in recs],
            "slept": [len(r.get("sleep") or []) for r in recs],
        })
    return out


def power_section(history: Path | None, jobs: pd.DataFrame, idle: Mapping[str, IdlePower] | None = None,
                  horizon: int = HORIZON, max_gap_s: float = MAX_GAP_S,
                  default_watts: float = IDLE_WATTS) -> Section:
    """`idle`: pool → idle draw per node (site.power.pool_idle_power); pools it
    lacks are counted at `default_watts`, as an assumption."""
    sec = Section(KEY, TITLE)
    records = read_history(history) if history is not None else []
    if not records:
        where = f" at {history}" if history is not None else ""
        sec.notes.append(f"no power-saving history{where}: power saving is off, or the bridge daemon's "
                         "keeper has not run (it writes hetero-power-history.jsonl beside the snapshot)")
        return sec
    frames = pool_frames(records, jobs, horizon, max_gap_s)
    summary: list[dict[str, Any]] = []
    asleep_plot: dict[str, pd.Series] = {}
    assumed: list[str] = []
    for pool, f in frames.items():
        node_h = float((f["asleep"] * f["held_s"]).sum()) / 3600
        draw = (idle or {}).get(pool) or IdlePower(default_watts, True)
        if draw.estimated:
            assumed.append(pool)
        ok = f["forecast"].notna()
        err = (f["forecast"] - f["actual"])[ok]
        summary.append({
            "pool": pool, "records": len(f), "asleep node-hours": round(node_h, 2),
            "idle W per node": draw.watts, "measured": not draw.estimated,
            "energy saved kWh": round(node_h * draw.watts / 1000, 2),
            "mean nodes asleep": round(float((f["asleep"] * f["held_s"]).sum() / f["held_s"].sum()), 2)
            if f["held_s"].sum() > 0 else 0.0,
            f"forecast MAE {horizon} min": round(float(err.abs().mean()), 2) if len(err) else math.nan,
            "under-forecast share": round(float((err < 0).mean()), 3) if len(err) else math.nan,
            "wake-ups": int(f["woken"].sum()), "power-downs": int(f["slept"].sum()),
        })
        sec.plots.append(Plot(f"power_demand_{_slug(pool)}", f"{pool}: forecast vs actual demand "
                              f"(peak of the next {horizon} min)", "lines",
                              f.set_index("t")[["forecast", "actual"]].rename(
                                  columns={"forecast": "forecast", "actual": "actual (accounting)"}),
                              "units" if not pool.startswith("cpu@") else "cores", time_x=True))
        asleep_plot[pool] = f.set_index("t")["asleep"]
    sec.tables.append(Table("power_pools", "Power saving per pool", pd.DataFrame(summary)))
    sec.plots.append(Plot("power_asleep", "Nodes asleep", "lines",
                          pd.DataFrame(asleep_plot).sort_index().ffill(), "nodes", time_x=True))
    total = sum(s["energy saved kWh"] for s in summary)
    if not assumed:
        how = "each pool's idle draw per node as the site measured it (node_groups[].idle_watts)"
    elif idle is None:
        how = f"{default_watts:g} W per idle node (assumed: no site given)"
    else:
        how = (f"each pool's idle draw per node, estimated for {', '.join(assumed)} (no idle_watts in the "
               f"site file: {ESTIMATE_RULE})")
    sec.notes.append(f"energy saved {total:.2f} kWh = asleep node-hours x {how}; a record's counts hold "
                     f"until the next one, at most {max_gap_s:g} s")
    return sec


def _slug(pool: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in pool)
