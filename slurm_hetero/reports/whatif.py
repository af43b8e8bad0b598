"""The "What-if replay" section: a `replay run` result (or a `replay merge` of several
windows) as tables and plots in the report.

The replay package sits on this package's floor, so its results are read here as the
JSON documents they are (formats `slurm-hetero-replay` and `slurm-hetero-replay-merged`,
written by slurm_hetero/replay/report.py and merge.py): figures are taken as written;
the curves are drawn from the per-job records each arm saves (due, start, end, pool,
CPUs or devices) on the replay's clock (trace seconds).

- wait CDF per arm: the share of measured jobs that started within a wait (pooled over
  windows);
- utilisation over time, one plot per pool, one line per arm: resource-seconds in use per
  time bucket over the pool's size. A window's time axis is its own (trace hours after the
  window's start); merged windows are averaged bucket by bucket. The pool's size is saved
  with each arm; a file older than that gets it back from the arm's utilisation figure
  (used / (utilisation x window)), and a pool it cannot size is said in a note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.reports.model import Plot, Report, Section, Table
from slurm_hetero.reports.period import Period

SINGLE, MERGED = "slurm-hetero-replay", "slurm-hetero-replay-merged"
ALL = "all"
UTIL_BUCKETS = 60  # per window
CDF_POINTS = 400


@dataclass
class Arm:
    """One arm of one window, as saved."""

    name: str
    t0: float
    hours: float
    end_now: float
    figures: dict[str, dict[str, Any]]
    jobs: list[dict[str, Any]]
    capacity: dict[str, float]
    start: int = 0  # the window's start in the trace (epoch s of the trace's own clock)


@dataclass
class Replay:
    path: Path
    merged: bool
    arms: list[str]  # in the order run; the first is the baseline
    windows: list[dict[str, Arm]]  # per window: arm name → its result
    figures: dict[str, dict[str, dict[str, Any]]]  # arm → pool → figures (pooled when merged)
    comparison: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def period(self) -> Period:
        starts = [a.t0 for w in self.windows for a in w.values()]
        ends = [a.t0 + a.hours * 3600 for w in self.windows for a in w.values()]
        return Period(min(starts), max(ends), True, True)


def _arm(d: dict[str, Any]) -> Arm:
    return Arm(str(d["arm"]), float(d["t0"]), float(d["window"]["hours"]), float(d["end_now"]),
               dict(d["figures"]), list(d["jobs"]), {k: float(v) for k, v in d.get("capacity", {}).items()},
               int(d["window"]["start"]))


def load(path: Path) -> Replay:
    """A replay.json or a merged file; anything else is an InputError naming it."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"--replay {path}: cannot read it: {e}") from e
    fmt = d.get("format") if isinstance(d, dict) else None
    if fmt not in (SINGLE, MERGED):
        raise InputError(f"--replay {path}: not a replay result (give the replay.json `slurm-hetero replay "
                         "run` writes, or the output of `slurm-hetero replay merge`)")
    try:
        docs = d["windows"] if fmt == MERGED else [d]
        windows = [{a.name: a for a in map(_arm, doc["arms"])} for doc in docs]
        arms = [str(a["arm"]) for a in docs[0]["arms"]]
        figures = d["figures"] if fmt == MERGED else {a: windows[0][a].figures for a in arms}
        if not arms or any(set(w) != set(arms) for w in windows):
            raise ValueError("its windows do not hold the same arms")
        meta = {k: d.get(k) for k in ("trace", "site", "speed")}
        return Replay(path, fmt == MERGED, arms, windows, figures, list(d.get("comparison") or []), meta)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InputError(f"--replay {path}: damaged replay result: {e}") from e


def _wait(j: dict[str, Any]) -> float | None:
    return None if j.get("start") is None else max(0.0, float(j["start"]) - float(j["due"]))


def _use(j: dict[str, Any]) -> float:
    return float(j["accel"] or j["cpus"])


def used_in(jobs: list[dict[str, Any]], pool: str, lo: float, hi: float, end_now: float) -> float:
    """Resource-seconds the pool's jobs used inside [lo, hi) (as the replay's metrics count)."""
    total = 0.0
    for j in jobs:
        if j.get("pool") != pool or j.get("start") is None:
            continue
        end = float(j["end"]) if j.get("end") is not None else end_now
        total += max(0.0, min(end, hi) - max(float(j["start"]), lo)) * _use(j)
    return total


def capacity_of(arm: Arm, pool: str) -> float | None:
    """The pool's size: saved with the arm, or recovered from its utilisation figure."""
    if arm.capacity.get(pool):
        return arm.capacity[pool]
    util = arm.figures.get(pool, {}).get("utilisation")
    if not util:
        return None
    lo = arm.t0
    hi = lo + arm.hours * 3600
    return used_in(arm.jobs, pool, lo, hi, arm.end_now) / (float(util) * (hi - lo))


def figures_table(rep: Replay) -> Table:
    rows = []
    for arm in rep.arms:
        for pool, f in rep.figures[arm].items():
            util = f.get("utilisation")
            rows.append({"arm": arm, "pool": pool, "jobs": int(f.get("jobs", 0)),
                         "started": int(f.get("started", 0)), "AVEbsld": f.get("ave_bsld"),
                         "wait_mean_s": f.get("wait_mean"), "wait_p50_s": f.get("wait_p50"),
                         "wait_p90_s": f.get("wait_p90"),
                         "util_pct": None if util is None else 100 * float(util),
                         "killed_at_limit": int(f.get("killed_at_limit", 0)),
                         "killed_before_limit": int(f.get("killed_early", 0)),
                         "failed": int(f.get("failed", 0)), "unfinished": int(f.get("unfinished", 0))})
    note = ("pooled over every window: AVEbsld and waits over all measured jobs, utilisation over all "
            "window time" if rep.merged else "measured jobs; waits in trace time")
    return Table("replay_arms", "Per arm and pool", pd.DataFrame(rows), show=200,
                 note=note + "; utilisation of the 'all' row: CPUs of CPU jobs")


def comparison_table(rep: Replay) -> Table:
    rows = []
    for top in rep.comparison:
        # A merged file also compares each pool (an accelerator model's jobs, say).
        for pool, c in [(ALL, top), *sorted((top.get("pools") or {}).items())]:
            row: dict[str, Any] = {"arm": top.get("arm"), "against": top.get("against"), "pool": pool,
                                   "comparable": bool(c.get("comparable"))}
            for key, label in (("ave_bsld", "AVEbsld"), ("wait_mean", "mean_wait")):
                row[f"{label}_ratio"] = c.get(f"{key}_ratio")
                if rep.merged:
                    ci = c.get(f"{key}_ci95")
                    row[f"{label}_ci95"] = f"{ci[0]:.2f} to {ci[1]:.2f}" if ci else None
                    row[f"{label}_pooled_ratio"] = c.get(f"{key}_pooled_ratio")
            row["why"] = c.get("why", "")
            rows.append(row)
    interval = next((c["interval"] for c in rep.comparison if c.get("interval")), None)
    note = "each arm ÷ the baseline; a comparison whose difference is within the replay's fidelity " \
           "error is not comparable and has no ratio"
    if rep.merged:
        note += f"; ratio: mean of the per-window ratios; interval: {interval or 'none'}"
    return Table("replay_comparison", "Arms against the baseline", pd.DataFrame(rows), show=50, note=note)


def windows_table(rep: Replay) -> Table:
    rows = []
    for w in rep.windows:
        first = w[rep.arms[0]]
        row: dict[str, Any] = {"trace_start": _utc(first.start), "hours": first.hours,
                               "jobs": int(first.figures.get(ALL, {}).get("jobs", 0))}
        for arm in rep.arms:
            row[f"{arm} AVEbsld"] = w[arm].figures.get(ALL, {}).get("ave_bsld")
        rows.append(row)
    return Table("replay_windows", "Windows merged", pd.DataFrame(rows), show=200,
                 note="each window's start in the trace (UTC); AVEbsld of each arm in each window")


def _utc(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


def wait_cdf(rep: Replay) -> Plot:
    """Share of measured jobs started within x minutes of their due time, per arm."""
    waits = {arm: np.sort(np.asarray([w for win in rep.windows for j in win[arm].jobs
                                      if j.get("measured") and (w := _wait(j)) is not None], dtype=float))
             for arm in rep.arms}
    every = np.concatenate([v for v in waits.values() if len(v)] or [np.zeros(0)])
    if not len(every):
        return Plot("replay_wait_cdf", "Wait CDF per arm", "lines", pd.DataFrame(), "share of jobs")
    grid = np.unique(np.quantile(every, np.linspace(0, 1, CDF_POINTS)))
    grid = np.unique(np.concatenate([[0.0], grid]))
    frame = pd.DataFrame({arm: (np.searchsorted(v, grid, side="right") / len(v) if len(v) else np.nan)
                          for arm, v in waits.items()}, index=grid / 60.0)
    return Plot("replay_wait_cdf", "Wait CDF per arm (x: wait, trace minutes; y: share of measured jobs "
                "started within it)", "lines", frame, "share of jobs")


def window_ratios(rep: Replay) -> Plot:
    """Per window (in trace order), each arm's AVEbsld ÷ the baseline's, beside the mean of
    those ratios and its 95% interval (flat lines, from the merged comparison): how much the
    windows agree, which one number hides."""
    order = sorted(range(len(rep.windows)), key=lambda i: rep.windows[i][rep.arms[0]].start)
    base = rep.arms[0]
    series: dict[str, list[float]] = {}
    for top in rep.comparison:
        arm = top.get("arm")
        if arm not in rep.arms or arm == base:
            continue
        per = []
        for i in order:
            a = rep.windows[i][base].figures.get(ALL, {}).get("ave_bsld")
            b = rep.windows[i][arm].figures.get(ALL, {}).get("ave_bsld")
            per.append(b / a if a and b is not None else np.nan)
        series[f"{arm} ÷ {base}"] = per
        ci = top.get("ave_bsld_ci95")
        if top.get("ave_bsld_ratio") is not None:
            series[f"{arm} mean"] = [float(top["ave_bsld_ratio"])] * len(order)
        if ci:
            series[f"{arm} 95% low"] = [float(ci[0])] * len(order)
            series[f"{arm} 95% high"] = [float(ci[1])] * len(order)
    frame = pd.DataFrame(series, index=np.arange(1, len(order) + 1))
    return Plot("replay_window_ratios", f"AVEbsld ÷ {base} per window (x: window, in trace order; "
                "flat lines: the mean ratio and its 95% interval over windows)", "lines", frame, "ratio")


def _buckets(hours: float) -> np.ndarray:
    step = max(60.0, hours * 3600 / UTIL_BUCKETS)
    return np.arange(0.0, hours * 3600 + 1e-9, step)


def utilisation_curve(arm: Arm, pool: str, cap: float, edges: np.ndarray) -> np.ndarray:
    """Per bucket [edges[i], edges[i+1]) after the window's start: the pool's use / its size."""
    out = np.zeros(len(edges) - 1)
    for i in range(len(edges) - 1):
        lo, hi = arm.t0 + edges[i], arm.t0 + edges[i + 1]
        out[i] = used_in(arm.jobs, pool, lo, hi, arm.end_now) / (cap * (hi - lo))
    return out


def utilisation_plots(rep: Replay) -> tuple[list[Plot], list[str]]:
    pools = sorted({p for arm in rep.arms for p in rep.figures[arm]} - {ALL, "unassigned"})
    plots, notes = [], []
    hours = max(a.hours for w in rep.windows for a in w.values())
    edges = _buckets(hours)
    for pool in pools:
        series: dict[str, np.ndarray] = {}
        unsized = False
        for arm in rep.arms:
            curves = []
            for w in rep.windows:
                a = w[arm]
                cap = next((c for c in (capacity_of(x, pool) for x in w.values()) if c), None)
                if cap is None:
                    unsized = unsized or any(j.get("pool") == pool for j in a.jobs)
                    continue
                mine = edges[edges <= a.hours * 3600 + 1e-9]
                curve = np.full(len(edges) - 1, np.nan)
                curve[: len(mine) - 1] = utilisation_curve(a, pool, cap, mine)
                curves.append(curve)
            if curves:
                stack = np.vstack(curves)
                with np.errstate(all="ignore"):  # a bucket no window reaches stays NaN
                    series[arm] = 100 * np.nanmean(stack, axis=0) if len(curves) > 1 else 100 * stack[0]
        if unsized:
            notes.append(f"pool {pool}: its size is not in the results (an older file whose utilisation "
                         "figure is empty): no utilisation curve for the windows concerned")
        if series:
            frame = pd.DataFrame(series, index=edges[:-1] / 3600.0)
            mean = f", mean of {len(rep.windows)} windows" if rep.merged else ""
            plots.append(Plot(f"replay_util_{_slug(pool)}", f"Utilisation over time: {pool} (x: trace hours "
                              f"after the window's start{mean})", "lines", frame, "utilisation %"))
    return plots, notes


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)


def replay_section(rep: Replay) -> Section:
    sec = Section("replay", "What-if replay")
    sec.tables.append(figures_table(rep))
    if rep.comparison:
        sec.tables.append(comparison_table(rep))
    if rep.merged:
        sec.tables.append(windows_table(rep))
    sec.plots.append(wait_cdf(rep))
    if rep.merged and rep.comparison:
        sec.plots.append(window_ratios(rep))
    plots, notes = utilisation_plots(rep)
    sec.plots.extend(plots)
    speed = rep.meta.get("speed")
    sec.notes.append(f"{rep.path.name}: {len(rep.windows)} window(s), arms {', '.join(rep.arms)} (baseline "
                     f"{rep.arms[0]})" + (f", replayed at x{float(speed):g}" if speed else "")
                     + "; times are the replay clock's (trace seconds)")
    sec.notes.extend(notes)
    sec.notes.append("energy: not in replay results (the replayed dev cluster meters no energy)")
    return sec


def replay_report(rep: Replay) -> Report:
    """A report of the replay alone (`report --replay FILE` without --trace)."""
    total = sum(int(w[rep.arms[0]].figures.get(ALL, {}).get("jobs", 0)) for w in rep.windows)
    summary = [("source", str(rep.path)), ("windows", str(len(rep.windows))), ("arms", ", ".join(rep.arms)),
               ("measured jobs per arm", f"{total:,}")]
    if rep.meta.get("trace"):
        summary.append(("trace", str(rep.meta["trace"])))
    if rep.meta.get("site"):
        summary.append(("site", str(rep.meta["site"])))
    frame = pd.DataFrame(summary, columns=["item", "value"])
    summ = Section("summary", "Summary", [Table("summary", "Summary", frame)])
    return Report("slurm-hetero what-if replay", f"replay results {rep.path}", rep.period, summary,
                  [summ, replay_section(rep)])
