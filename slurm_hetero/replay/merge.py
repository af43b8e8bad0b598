"""Replay results of several windows as one: pooled figures, and ratios with an interval.

Windows are independent replays of the same arms on the same site at the same speed
(`replay run` once per window, by hand or one per array task). Pooling is exact, not an
average of averages:
- AVEbsld: the mean over every measured job of every window (window figures weighted by
  their measured jobs); mean wait likewise over started jobs; p50/p90 wait from the
  windows' per-job waits;
- utilisation: resource-seconds over capacity x window time summed over windows (window
  figures weighted by window hours; a pool a window never used counts 0 there);
- counts (jobs, kills, failures, ...) summed.

Each arm against the baseline (the first arm), over all jobs and per pool: the per-window
ratio of AVEbsld and of mean wait, their mean, and a 95% Student t-interval of those
per-window ratios (windows are the independent samples; with one window there is no
interval). The pooled ratio is given too.
The fidelity refusal holds: the pooled figures must differ by more than every window's
measured fidelity error (fidelity.compare), or the comparison is "not comparable".
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from slurm_hetero.errors import InputError
from slurm_hetero.replay import report
from slurm_hetero.replay.fidelity import Fidelity, Verdict, compare
from slurm_hetero.replay.metrics import ALL, PoolFigures, as_json
from slurm_hetero.replay.run import ArmResult

FORMAT = "slurm-hetero-replay-merged"
INTERVAL = "95% Student t-interval of the per-window ratios (windows as independent samples)"
_SUMMED = ("jobs", "started", "killed_at_limit", "killed_early", "failed", "unfinished", "predicted")


def site_digest(path: Path) -> str:
    """What `replay run` records of its site file, so merge can tell two sites apart."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Source:
    """One window's replay.json."""

    path: Path
    doc: dict[str, Any]
    results: list[ArmResult]
    fid: Fidelity | None

    @property
    def arms(self) -> list[str]:
        return [r.arm for r in self.results]

    @property
    def speed(self) -> float:
        return float(self.doc.get("speed") or self.results[0].speed)

    @property
    def window(self) -> tuple[int, float]:
        w = self.results[0].window
        return w.start, w.hours


def load(paths: list[Path]) -> list[Source]:
    """Read and check the windows: same arms (in order), same site, same speed, no window twice."""
    if not paths:
        raise InputError("replay merge: give at least one replay.json")
    out = []
    for p in paths:
        doc = report.read_document(p)
        results, _, fid = report.parse(doc, p)
        if not results:
            raise InputError(f"{p}: holds no arm")
        out.append(Source(p, doc, results, fid))
    first = out[0]
    seen: dict[tuple[int, float], Path] = {}
    for s in out:
        if s.arms != first.arms:
            raise InputError(f"{s.path}: arms {','.join(s.arms)} differ from {first.path}'s "
                             f"{','.join(first.arms)}: merge only windows replayed with the same --arms")
        speeds = {r.speed for r in s.results}
        if speeds != {first.speed} or s.speed != first.speed:
            raise InputError(f"{s.path}: speed x{s.speed:g} differs from {first.path}'s x{first.speed:g}")
        why = _site_differs(first.doc, s.doc)
        if why:
            raise InputError(f"{s.path}: site {why} differs from {first.path}'s: merge only windows "
                             "replayed on the same site file")
        if s.window in seen:
            raise InputError(f"{s.path}: window {s.window[0]} (+{s.window[1]:g} h) is already in "
                             f"{seen[s.window]}: each window may count once")
        seen[s.window] = s.path
    return out


def _site_differs(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The site's digest where both files have one, its path otherwise; None when the same."""
    if a.get("site_sha256") and b.get("site_sha256"):
        if a["site_sha256"] != b["site_sha256"]:
            return f"{b.get('site')} (sha256 {str(b['site_sha256'])[:12]})"
        return None
    if a.get("site") != b.get("site"):
        return str(b.get("site"))
    return None


def _weighted(pairs: list[tuple[float | None, float]]) -> float | None:
    num = sum(v * w for v, w in pairs if v is not None)
    den = sum(w for v, w in pairs if v is not None)
    return num / den if den else None


def pool_figures(sources: list[Source], arm_index: int) -> dict[str, PoolFigures]:
    """One arm's figures per pool (and ALL) over every window."""
    arms = [s.results[arm_index] for s in sources]
    pools = sorted({p for r in arms for p in r.figures})
    out: dict[str, PoolFigures] = {}
    for pool in pools:
        here = [(r, r.figures.get(pool)) for r in arms]
        present = [f for _, f in here if f is not None]
        f = PoolFigures(pool)
        for name in _SUMMED:
            setattr(f, name, sum(getattr(x, name) for x in present))
        f.ave_bsld = _weighted([(x.ave_bsld, x.jobs) for x in present])
        f.wait_mean = _weighted([(x.wait_mean, x.started) for x in present])
        waits = [o.wait for r in arms for o in r.outcomes
                 if o.measured and o.wait is not None and (pool == ALL or o.pool == pool)]
        if waits:
            f.wait_p50 = float(np.quantile(np.asarray(waits, dtype=np.float64), 0.5))
            f.wait_p90 = float(np.quantile(np.asarray(waits, dtype=np.float64), 0.9))
        if any(x.utilisation is not None for x in present):  # a pool with a capacity
            f.utilisation = _weighted([(x.utilisation if x is not None else 0.0, r.window.hours)
                                       for r, x in here
                                       if x is None or x.utilisation is not None])
        bad: dict[str, int] = {}
        for x in present:
            for k, v in x.bad_states.items():
                bad[k] = bad.get(k, 0) + v
        f.bad_states = bad
        out[pool] = f
    return out


# Student t's 97.5% quantile for 1..30 degrees of freedom (printed tables, 3 decimals).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """t's 97.5% quantile: the table, then the Cornish-Fisher expansion around the normal's
    (error < 1e-4 beyond 30 df). numpy has no t distribution and scipy is no dependency.

    >>> t975(4), round(t975(60), 3), round(t975(10_000), 3)
    (2.776, 2.0, 1.96)
    """
    if df < 1:
        raise ValueError("t975 needs at least one degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959963985
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def t_interval(values: list[float]) -> tuple[float, float] | None:
    """The 95% Student t-interval of the mean of `values`; None with fewer than two.

    >>> t_interval([1.0])
    >>> lo, hi = t_interval([0.8, 1.0, 0.9]); round(lo, 3), round(hi, 3)
    (0.652, 1.148)
    """
    n = len(values)
    if n < 2:
        return None
    a = np.asarray(values, dtype=np.float64)
    half = t975(n - 1) * float(a.std(ddof=1)) / math.sqrt(n)
    m = float(a.mean())
    return m - half, m + half


def _ratios(sources: list[Source], i: int, attr: str, pool: str = ALL) -> tuple[list[float], int]:
    """Per window: arm i's figure of `pool` over the baseline's; and how many windows had none."""
    out, skipped = [], 0
    for s in sources:
        a, b = s.results[0].figures.get(pool), s.results[i].figures.get(pool)
        va = getattr(a, attr) if a else None
        vb = getattr(b, attr) if b else None
        if va and vb is not None:
            out.append(vb / va)
        else:
            skipped += 1
    return out, skipped


def _compare(sources: list[Source], i: int, pool: str, base: PoolFigures | None,
             other: PoolFigures | None) -> dict[str, Any]:
    """Arm i against the baseline on `pool`: the ratios and their interval, or why not."""
    if base is None or other is None:
        return {"comparable": False, "why": "an arm has no measured job"}
    fids = [(s.path, s.fid) for s in sources if s.fid is not None]
    verdicts: list[tuple[Path | None, Verdict]] = [(p, compare(base, other, f)) for p, f in fids]
    verdicts = verdicts or [(None, compare(base, other, None))]
    refused = [(p, v) for p, v in verdicts if not v.comparable]
    if refused:
        p, v = refused[0]
        return {"comparable": False, "why": v.why + (f" (fidelity of {p})" if p else "")}
    checked = f"fidelity checked in {len(fids)} of {len(sources)} windows" if fids else verdicts[0][1].why
    row: dict[str, Any] = {"comparable": True, "why": checked,
                           "interval": INTERVAL if len(sources) > 1 else "one window: no interval"}
    for key in ("ave_bsld", "wait_mean"):
        per, skipped = _ratios(sources, i, key, pool)
        a, b = getattr(base, key), getattr(other, key)
        row[f"{key}_pooled_ratio"] = b / a if a and b is not None else None
        row[f"{key}_per_window"] = per
        row[f"{key}_ratio"] = float(np.mean(per)) if per else None
        ci = t_interval(per)
        row[f"{key}_ci95"] = list(ci) if ci else None
        if skipped:
            row[f"{key}_windows_without"] = skipped  # the baseline had 0 (or no) figure there
    return row


def comparison(sources: list[Source], figs: dict[str, dict[str, PoolFigures]]) -> list[dict[str, Any]]:
    """Each arm against the first over every window (all jobs, and per pool), or why not."""
    names = sources[0].arms
    rows: list[dict[str, Any]] = []
    for i, name in enumerate(names[1:], start=1):
        row = {"arm": name, "against": names[0], "windows": len(sources),
               **_compare(sources, i, ALL, figs[names[0]].get(ALL), figs[name].get(ALL))}
        pools = sorted((set(figs[names[0]]) & set(figs[name])) - {ALL, "unassigned"})
        row["pools"] = {p: _compare(sources, i, p, figs[names[0]][p], figs[name][p]) for p in pools}
        rows.append(row)
    return rows


def merge(paths: list[Path]) -> dict[str, Any]:
    """The merged document of the windows' replay.json files."""
    sources = load(paths)
    names = sources[0].arms
    figs = {name: pool_figures(sources, i) for i, name in enumerate(names)}
    first = sources[0].doc
    return {
        "format": FORMAT, "version": 1, "arms": names, "baseline": names[0],
        "site": first.get("site"), "site_sha256": first.get("site_sha256"), "speed": sources[0].speed,
        "figures": {name: as_json(f) for name, f in figs.items()},
        "comparison": comparison(sources, figs),
        "windows": [{"file": str(s.path), **s.doc} for s in sources],
    }


def write(doc: dict[str, Any], path: Path) -> None:
    report.write(doc, path)


def read(path: Path) -> dict[str, Any]:
    """A merged document, checked enough that printing or plotting it cannot fail half-way."""
    d = report.read_format(path, FORMAT, "merged replay results", "slurm-hetero replay merge")
    try:
        for w in d["windows"]:
            report.parse(w, path)
        figures_of(d)
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{path}: damaged merged replay result: {e}") from e
    return d


def figures_of(doc: dict[str, Any]) -> dict[str, dict[str, PoolFigures]]:
    return {arm: {pool: PoolFigures(**v) for pool, v in figs.items()} for arm, figs in doc["figures"].items()}


def _ratio_text(row: dict[str, Any], key: str, label: str) -> str:
    r = row.get(f"{key}_ratio")
    if r is None:
        return f"{label} -"
    ci = row.get(f"{key}_ci95")
    n = len(row.get(f"{key}_per_window", []))
    ci_text = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " (no interval)"
    pooled = row.get(f"{key}_pooled_ratio")
    return (f"{label} {r:.2f}{ci_text} over {n} window(s)"
            + (f", pooled {pooled:.2f}" if pooled is not None else ""))


def windows_table(doc: dict[str, Any]) -> Table:
    t = Table(title="merged windows (AVEbsld per arm; measured jobs)")
    for col in ("file", "window start", "hours", "jobs", *doc["arms"], "fidelity checked"):
        t.add_column(col, justify="left" if col == "file" else "right")
    for w in doc["windows"]:
        arms = {a["arm"]: a for a in w["arms"]}
        first = w["arms"][0]
        all_ = first["figures"].get(ALL, {})
        f = Path(w["file"])
        name = f"{f.parent.name}/{f.name}" if f.parent.name else f.name  # every window's file is replay.json
        t.add_row(name, str(first["window"]["start"]), f"{first['window']['hours']:g}",
                  str(all_.get("jobs", 0)),
                  *(report.n(arms[a]["figures"].get(ALL, {}).get("ave_bsld"), 2) for a in doc["arms"]),
                  "yes" if w.get("fidelity") else "no")
    return t


def print_merged(console: Console, doc: dict[str, Any]) -> None:
    figs = figures_of(doc)
    console.print(f"{len(doc['windows'])} window(s) merged; site {doc.get('site')}, x{float(doc['speed']):g}")
    console.print(windows_table(doc))
    title = "replay over all windows: per arm and pool (pooled; waits in trace s)"
    console.print(report.figures_table([(a, figs[a]) for a in doc["arms"]], title))
    for row in doc["comparison"]:
        if row.get("comparable"):
            console.print(f"{row['arm']} ÷ {row['against']}: "
                          + _ratio_text(row, "ave_bsld", "AVEbsld") + "; "
                          + _ratio_text(row, "wait_mean", "mean wait") + f" ({row['why']})",
                          markup=False, highlight=False)
        else:
            console.print(f"{row['arm']} vs {row['against']}: not comparable: {row['why']}",
                          markup=False, highlight=False)
        for pool, pr in row.get("pools", {}).items():
            text = (_ratio_text(pr, "ave_bsld", "AVEbsld") + "; " + _ratio_text(pr, "wait_mean", "mean wait")
                    if pr.get("comparable") else f"not comparable: {pr['why']}")
            console.print(f"  {pool}: {text}", markup=False, highlight=False)
    if any(row.get("comparable") for row in doc["comparison"]):
        interval = next(row["interval"] for row in doc["comparison"] if row.get("comparable"))
        console.print(f"interval: {interval}", markup=False, highlight=False)
