"""The "A day under faults" section: a soak result (`benchmarks/soak.py --json`) as tables
and plots in the report.

The replay package sits on this package's floor, so the soak's JSON is read here as the
document it is: no format tag, but `faults` (the schedule and each fault's `records`) and
`runs` (`faulted`, `baseline` or both, each the run's figures, the alert meant for each
fault and what fired, and the timeline of reports/soak.py). Figures are taken as written;
times are trace seconds after the window's start (the replay's clock). `load` checks all
of it, so a damaged file is an InputError before anything else is asked.

- figures per run: jobs lost, killed before their user's limit, accounting records missing
  an end or wrong, waits and AVEbsld, the seed; faulted against the baseline where the file
  (or `--soak-baseline`) holds one;
- the faults: what, when, the evidence that it happened, the alert meant for it and when it
  fired and cleared (or why none is meant); every alert that fired;
- the timeline, drawn as the report's other plots are (reports/html.py `plot_svg`, from the
  rows reports/soak.py `span_rows` gives its own SVG): faults and alerts as spans, a timing
  diagram (a step line per row, resting at the row's number, raised while the fault lasts or
  the alert fires), and the queue (pending and running jobs) over the same hours.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.reports.model import Plot, Report, Section, Table
from slurm_hetero.reports.period import Period
from slurm_hetero.reports.soak import span_rows

FAULTED, BASELINE = "faulted", "baseline"
HOUR = 3600.0
GRID_POINTS = 241  # the timing diagram's evenly spaced points (besides every span's edges)
RAISE = 0.6  # how far a row's line rises while its fault lasts or its alert fires
NOT_A_SOAK = "not a soak result (give the JSON `benchmarks/soak.py --json OUT` writes)"


@dataclass
class Run:
    """One run of a soak (faulted or baseline), as written."""

    name: str
    source: Path
    seed: int
    figures: dict[str, Any]
    matches: list[dict[str, Any]] | None  # per fault record: its alert and what fired; None: unmonitored
    fired: list[dict[str, Any]]  # every alert span (alert, labels, start_s, end_s: None while firing)
    without_fault: list[str]  # names of the alerts that fired with no fault near
    timeline: dict[str, Any]  # reports/soak.py timeline()


@dataclass
class Soak:
    path: Path
    meta: dict[str, Any]  # trace, workload, window, jobs, speed, seed, arm
    records: list[dict[str, Any]]  # the faults, as injected and checked (the faulted run's)
    runs: dict[str, Run]  # the faulted run first where there is one
    broken: list[str]  # what failed the soak, by its own account
    baseline_from: Path | None = None  # --soak-baseline

    @property
    def main(self) -> Run:
        return self.runs.get(FAULTED) or self.runs[BASELINE]

    @property
    def baseline(self) -> Run | None:
        return self.runs.get(BASELINE) if FAULTED in self.runs else None

    @property
    def period(self) -> Period:
        """The window in the trace's own time, to the timeline's last second."""
        start = float(self.meta["window"]["start"])
        hi = max([float(self.meta["window"]["hours"]) * HOUR]
                 + [float(r.timeline["span_s"][1]) for r in self.runs.values()])
        return Period(start, start + hi, True, True)


def _num(v: Any) -> float | None:
    """A figure that may be missing (None) or NaN (JSON's NaN: no job measured)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"not a number: {v!r}")
    return None if math.isnan(v) else float(v)


def _count(d: dict[str, Any], key: str) -> int:
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{key} is {v!r}, not a count")
    return v


def _flag(d: dict[str, Any], key: str) -> bool:
    if not isinstance(d[key], bool):
        raise ValueError(f"{key} is {d[key]!r}, not true or false")
    return bool(d[key])


def _span(a: dict[str, Any]) -> dict[str, Any]:
    """An alert's firing: `end_s` None while it still fired when the run ended."""
    return {"alert": str(a["alert"]), "labels": dict(a.get("labels") or {}), "start_s": float(a["start_s"]),
            "end_s": _num(a.get("end_s"))}


def _timeline(tl: dict[str, Any]) -> dict[str, Any]:
    """The timeline with every field read (numbers as floats): what the plots draw."""
    faults = [{"kind": str(f["kind"]), "start_s": float(f["start_s"]), "end_s": float(f["end_s"])}
              for f in tl["faults"]]
    alerts = [_span(a) for a in tl["alerts"]]
    queue = []
    for p in tl["queue"]:
        t, pending, running = p  # three values a point
        queue.append([float(t), int(pending), int(running)])
    gaps = [{**g, "start_s": float(g["start_s"]), "end_s": _num(g.get("end_s"))}
            for g in tl.get("scrape_gaps", [])]
    lo, hi = (float(x) for x in tl["span_s"])
    return {"faults": faults, "alerts": alerts, "queue": queue, "scrape_gaps": gaps, "span_s": [lo, hi]}


def _record(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    out["kind"] = str(r["kind"])
    out["started_trace_s"] = float(r["started_trace_s"])
    end = r.get("ended_trace_s") or r.get("undone_trace_s")
    out["ended_trace_s"] = float(end) if end is not None else out["started_trace_s"]
    out["ok"] = _flag(r, "ok")
    out["skew_s"] = _num(r.get("skew_s"))
    out["evidence"] = dict(r.get("evidence") or {})
    return out


def _why(e: Exception) -> str:
    return f"no {e.args[0]!r} field" if isinstance(e, KeyError) else str(e)


def _run(name: str, d: dict[str, Any], path: Path, seed: int, faults: int) -> Run:
    figures = dict(d)
    for key in ("submitted", "lost", "killed_early", "records_missing_end", "records_wrong", "started",
                "measured"):
        _count(d, key)
    for key in ("ave_bsld", "wait_mean", "wait_p50", "wait_p90", "real_s"):
        figures[key] = _num(d.get(key))
    matches = d.get("alerts")
    if matches is not None:
        matches = [dict(m) for m in matches]
        if len(matches) != faults:
            raise ValueError(f"{len(matches)} alert matches for {faults} faults")
        for m in matches:
            for flag in ("fired", "cleared", "ok"):
                _flag(m, flag)
            for key in ("fired_s", "cleared_s", "fired_after_s", "cleared_after_end_s"):
                m[key] = _num(m.get(key))
    fired = [_span(a) for a in d.get("alerts_fired", [])]
    return Run(name, path, seed, figures, matches, fired, [str(a) for a in d.get("alerts_without_fault", [])],
               _timeline(d["timeline"]))


def load(path: Path, option: str = "--soak") -> Soak:
    """A soak result; anything else is an InputError naming `option` and the file."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{option} {path}: cannot read it: {e}") from e
    if not isinstance(d, dict) or "runs" not in d or "faults" not in d:
        raise InputError(f"{option} {path}: {NOT_A_SOAK}")
    try:
        runs_in = d["runs"]
        if not isinstance(runs_in, dict) or not runs_in or set(runs_in) - {FAULTED, BASELINE}:
            raise ValueError(f"its runs are {sorted(runs_in) if isinstance(runs_in, dict) else runs_in!r}, "
                             f"not {FAULTED} and/or {BASELINE}")
        seed = d["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed is {seed!r}")
        records = [_record(r) for r in d["faults"]["records"]]
        if FAULTED in runs_in and not records:
            raise ValueError("a faulted run with no fault records")
        runs = {}
        for name in (FAULTED, BASELINE):
            if name not in runs_in:
                continue
            try:
                runs[name] = _run(name, runs_in[name], path, seed, len(records) if name == FAULTED else 0)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ValueError(f"run {name}: {_why(e)}") from e
        meta = {k: d.get(k) for k in ("trace", "workload", "jobs", "speed", "seed", "arm", "command")}
        if _num(d["speed"]) is None:
            raise ValueError("no speed")
        window = d["window"]
        meta["window"] = {"start": int(window["start"]), "hours": float(window["hours"]),
                          "warmup_hours": float(window.get("warmup_hours") or 0.0),
                          "drain_hours": _num(window.get("drain_hours"))}
        broken = [str(b) for b in d.get("broken") or []]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InputError(f"{option} {path}: damaged soak result: {_why(e)}") from e
    return Soak(path, meta, records, runs, broken)


def load_with_baseline(path: Path, baseline: Path | None = None) -> Soak:
    """`--soak FILE` and, where given, `--soak-baseline FILE`: the baseline run of a soak of
    the same window without faults (`benchmarks/soak.py --faults none`)."""
    soak = load(path)
    if baseline is None:
        return soak
    other = load(baseline, "--soak-baseline")
    if BASELINE in soak.runs:
        raise InputError(f"--soak-baseline {baseline}: --soak {path} holds its own baseline run already")
    if BASELINE not in other.runs:
        raise InputError(f"--soak-baseline {baseline}: holds no baseline run (give a `benchmarks/soak.py "
                         "--faults none` result)")
    same = ("trace", "start", "hours")
    mine = (soak.meta["trace"], soak.meta["window"]["start"], soak.meta["window"]["hours"])
    theirs = (other.meta["trace"], other.meta["window"]["start"], other.meta["window"]["hours"])
    if mine != theirs:
        raise InputError(f"--soak-baseline {baseline}: not the window of --soak {path} "
                         f"({', '.join(same)}: {theirs} against {mine})")
    soak.runs[BASELINE] = other.runs[BASELINE]
    soak.baseline_from = baseline
    soak.broken += other.broken  # each line names its run
    return soak


def _evidence(r: dict[str, Any]) -> str:
    """The evidence as `key=value` pairs (a problem first)."""
    def text(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, list):
            return ",".join(map(str, v)) or "none"
        return str(v)

    parts = [f"{k}={text(v)}" for k, v in r["evidence"].items()]
    return "; ".join(([f"problem: {r['problem']}"] if r.get("problem") else []) + parts)


# (label, how to read it from a run's figures, compared against the baseline)
_FIGURES: tuple[tuple[str, Callable[[Run], Any], bool], ...] = (
    ("seed", lambda r: r.seed, False),
    ("jobs submitted", lambda r: r.figures["submitted"], False),
    ("jobs lost", lambda r: r.figures["lost"], False),
    ("killed before their user's limit", lambda r: r.figures["killed_early"], False),
    ("ended at their own limit", lambda r: r.figures.get("killed_at_limit"), False),
    ("records missing an end", lambda r: r.figures["records_missing_end"], False),
    ("records wrong", lambda r: r.figures["records_wrong"], False),
    ("records compared", lambda r: (r.figures.get("audit") or {}).get("compared_final"), False),
    ("measured jobs", lambda r: r.figures["measured"], False),
    ("measured jobs started", lambda r: r.figures["started"], False),
    ("AVEbsld", lambda r: r.figures["ave_bsld"], True),
    ("mean wait, trace s", lambda r: r.figures["wait_mean"], True),
    ("p50 wait, trace s", lambda r: r.figures["wait_p50"], True),
    ("p90 wait, trace s", lambda r: r.figures["wait_p90"], True),
    ("sbatch retries", lambda r: (r.figures.get("retries") or {}).get("sbatch"), False),
    ("DBD queue at the end", lambda r: r.figures.get("dbd_queue_at_end"), False),
    ("alerts fired", lambda r: len(r.fired), False),
    ("scrape gaps", lambda r: r.figures.get("scrape_gaps"), False),
    ("real seconds", lambda r: r.figures["real_s"], False),
)


def figures_table(soak: Soak) -> Table:
    """A row per figure, a column per run (and faulted ÷ baseline where both are)."""
    base = soak.baseline
    rows = []
    for label, read, compared in _FIGURES:
        row: dict[str, Any] = {"figure": label}
        for run in soak.runs.values():
            row[run.name] = read(run)
        if base is not None:
            fa, ba = read(soak.runs[FAULTED]), read(base)
            # NaN rather than None: a number column (the report right-aligns it), empty where not compared
            row["faulted ÷ baseline"] = fa / ba if compared and fa is not None and ba else math.nan
        rows.append(row)
    files = ", ".join(f"{r.name} from {r.source.name}" for r in soak.runs.values())
    # object columns: a count stays an int beside AVEbsld's float
    return Table("soak_figures", "Figures", pd.DataFrame(rows, dtype=object), show=len(_FIGURES),
                 note=f"{files}; lost: sbatch gave an id, accounting never heard of it; records compared: "
                      "final state, start, end and nodes against what slurmctld listed; waits and AVEbsld "
                      "of the measured jobs; real seconds: the run's wall time")


def _with_matches(soak: Soak) -> Iterator[tuple[int, dict[str, Any], dict[str, Any] | None]]:
    """Each fault record with what the faulted run matched to it (None: unmonitored)."""
    run = soak.runs.get(FAULTED)
    matches = run.matches if run is not None else None
    for i, r in enumerate(soak.records):
        yield i, r, (matches[i] if matches is not None else None)


def faults_table(soak: Soak) -> Table:
    """Per fault: when, whether it happened, the alert meant for it and when that fired and cleared."""
    rows = []
    for i, r, m in _with_matches(soak):
        what = r["kind"] + (f" on {r['node']}" if r.get("node") else "")
        if r.get("skew_s"):
            what += f" ({int(r['skew_s']):+d} s)"
        row: dict[str, Any] = {"#": i + 1, "fault": what, "start_s": r["started_trace_s"],
                               "end_s": r["ended_trace_s"], "happened": r["ok"]}
        if m is None:
            alert = "not monitored"
        elif not m.get("meant"):
            alert = "none meant"
        else:
            alert = str(m["meant"]) + ("" if m["cleared"] else " (did not clear)" if m["fired"]
                                       else " (did not fire)")
        row["alert"] = alert
        row["fired_after_start_s"] = m["fired_after_s"] if m is not None and m["fired"] else None
        row["cleared_after_end_s"] = m["cleared_after_end_s"] if m is not None and m["cleared"] else None
        row["also_fired"] = ", ".join(m.get("also") or []) if m is not None else ""
        rows.append(row)
    return Table("soak_faults", "Faults and the alert meant for each", pd.DataFrame(rows), show=100,
                 note="start, end: trace time after the window's start; happened: its evidence (below) shows "
                      "it took effect and was undone; also fired: other alerts that began meanwhile")


def evidence_table(soak: Soak) -> Table:
    """Per fault: what shows it happened, and why no alert is meant where none is."""
    rows = []
    for i, r, m in _with_matches(soak):
        why = (m.get("why_none") or "no reason given") if m and not m.get("meant") else ""
        rows.append({"#": i + 1, "fault": r["kind"], "evidence": _evidence(r), "why_no_alert": why})
    return Table("soak_evidence", "What shows each fault happened, and why no alert is meant",
                 pd.DataFrame(rows), show=100,
                 note="as the soak checked it while the fault lasted and after it was undone")


def _fault_at(soak: Soak, start: float) -> str:
    """The fault (`#k kind`) in progress when an alert began, or that had ended at most the
    soak's grace before (10 x speed trace s: an alert's `for:` and an evaluation or two)."""
    grace = 10.0 * float(soak.meta["speed"] or 0.0)
    for i, r in enumerate(soak.records):
        if r["started_trace_s"] <= start <= r["ended_trace_s"] + grace:
            return f"#{i + 1} {r['kind']}"
    return ""


def alerts_table(soak: Soak) -> Table:
    rows = []
    for run in soak.runs.values():
        for a in sorted(run.fired, key=lambda a: a["start_s"]):
            labels = a["labels"]
            rows.append({"run": run.name, "alert": a["alert"], "severity": labels.get("severity", ""),
                         "pool": labels.get("pool", ""), "start_s": a["start_s"], "end_s": a["end_s"],
                         "lasted_s": None if a["end_s"] is None else a["end_s"] - a["start_s"],
                         "during_fault": _fault_at(soak, a["start_s"]) if run.name == FAULTED else ""})
    return Table("soak_alerts", "Alerts fired", pd.DataFrame(rows), show=100,
                 note="trace time after the window's start; no end: still firing when the run ended; "
                      "during fault: the fault in progress when it began (or ended at most 10 x speed trace "
                      "s before)")


def spans_plot(run: Run) -> Plot:
    """Faults and alerts of one run as a timing diagram: a step line per row (a fault, an
    alert's name, the scrape gaps), resting at the row's number and raised by RAISE while the
    fault lasts or the alert fires, over the run's whole timeline (x: trace hours, as the
    queue's plot). Numbered top down in the legend, whose colours repeat past ten rows."""
    rows = span_rows(run.timeline)
    title = (f"Faults and alerts, {run.name} run (x: trace hours after the window's start; a row per "
             "fault and per alert, raised while the fault lasts or the alert fires; y: the row's number in "
             "the legend)")
    if not rows:  # nothing to draw: the report leaves an empty plot out
        return Plot(f"soak_spans_{run.name}", title, "lines", pd.DataFrame(), "row")
    lo, hi = run.timeline["span_s"]
    edges = [t for _, _, spans in rows for span in spans for t in span]
    # Evenly spaced points besides the edges: the steps are the same, and a row of many points
    # gets no markers from plot_svg (it marks rows of few points).
    grid = np.unique(np.concatenate([np.linspace(lo, max([hi, *edges]), GRID_POINTS), edges]))
    series: dict[str, np.ndarray] = {}
    for k, (label, _what, spans) in enumerate(rows):
        level = len(rows) - k
        on = np.zeros(len(grid), dtype=bool)
        for start, end in spans:  # one lasting to the timeline's end stays raised at its last point
            on |= (grid >= start) & ((grid < end) | ((grid == grid[-1]) & (end >= grid[-1])))
        series[f"{level}: {label}"] = np.where(on, level + RAISE, float(level))
    frame = pd.DataFrame(series, index=grid / HOUR)
    return Plot(f"soak_spans_{run.name}", title, "lines", frame, "row")


def _queue(run: Run, col: int) -> pd.Series:
    q = run.timeline["queue"]
    s = pd.Series([float(p[col]) for p in q], index=[p[0] / HOUR for p in q], dtype=float)
    return s[~s.index.duplicated(keep="last")]


def queue_plot(soak: Soak) -> Plot:
    """Pending and running jobs over the run (and the baseline's, on the same axis)."""
    named = len(soak.runs) > 1
    parts = {f"{what} ({run.name})" if named else what: _queue(run, col)
             for run in soak.runs.values() for what, col in (("pending", 1), ("running", 2))}
    parts = {k: v for k, v in parts.items() if len(v)}
    index = sorted({t for s in parts.values() for t in s.index})
    frame = pd.DataFrame(index=pd.Index(index, dtype=float))
    for name, s in parts.items():
        # Each series as sampled, held until its next sample, and not past its last one.
        col = s.reindex(frame.index, method="ffill")
        frame[name] = col.where(frame.index <= s.index.max())
    return Plot("soak_queue", "Queue (x: trace hours after the window's start; jobs pending and running, as "
                "listed every few trace minutes)", "lines", frame, "jobs")


def verdict(soak: Soak) -> str:
    """One line: what the soak is for (nothing lost, killed early or booked wrong) and AVEbsld."""
    run = soak.main
    f = run.figures
    line = (f"{run.name}: {f['lost']} lost, {f['killed_early']} killed before their limit, "
            f"{f['records_missing_end']} records missing an end, {f['records_wrong']} wrong")
    if f["ave_bsld"] is not None:
        line += f"; AVEbsld {f['ave_bsld']:.2f}"
        base = soak.baseline
        if base is not None and base.figures["ave_bsld"] is not None:
            line += f" (baseline {base.figures['ave_bsld']:.2f})"
    return line


def soak_section(soak: Soak) -> Section:
    sec = Section("soak", "A day under faults")
    sec.tables.append(figures_table(soak))
    if soak.records:
        sec.tables.append(faults_table(soak))
        sec.tables.append(evidence_table(soak))
    if any(r.fired for r in soak.runs.values()):
        sec.tables.append(alerts_table(soak))
    sec.plots.append(spans_plot(soak.main))
    sec.plots.append(queue_plot(soak))
    m, w = soak.meta, soak.meta["window"]
    drain = f", drain up to {w['drain_hours']:g} h" if w["drain_hours"] is not None else ""
    sec.notes.append(f"{soak.path.name}: {m['trace']} window {w['start']} ({w['hours']:g} trace hours "
                     f"after a {w['warmup_hours']:g} h warm-up{drain}), {m['jobs']} jobs, "
                     f"x{float(m['speed']):g}, arm {m['arm']}, seed {m['seed']}; times are trace seconds "
                     "after the window's start"
                     + (f"; the baseline from {soak.baseline_from.name}" if soak.baseline_from else ""))
    fine = ("nothing broke (every fault happened; nothing lost, killed early or booked wrong; every "
            "alert meant fired and cleared)")
    bad = "BROKEN: " + "; ".join(soak.broken)
    sec.notes.append("the soak's own verdict: " + (bad if soak.broken else fine))
    if FAULTED in soak.runs and soak.baseline is None:
        sec.notes.append("no baseline run in the file: `--soak-baseline FILE` (a `benchmarks/soak.py "
                         "--faults none` result of the same window) adds the comparison")
    for run in soak.runs.values():
        if run.matches is None and run.name == FAULTED:
            sec.notes.append(f"{run.name}: not monitored (--no-monitor): no alerts were read")
        if run.without_fault:
            sec.notes.append(f"{run.name}: alerts with no fault near: {', '.join(run.without_fault)}")
        gaps = run.figures.get("scrape_gaps")
        if gaps:
            sec.notes.append(f"{run.name}: {gaps} scrape gap(s) of the exporters")
    return sec


def add_to(rep: Report, soak: Soak) -> None:
    """The section at the end of another report (a trace's, a replay's), its verdict in the summary."""
    rep.sections.append(soak_section(soak))
    rep.summary.append(("soak", verdict(soak)))


def soak_report(soak: Soak) -> Report:
    """A report of the soak alone (`report --soak FILE` without --trace)."""
    m, w = soak.meta, soak.meta["window"]
    summary = [("source", str(soak.path)), ("trace", str(m["trace"])),
               ("window", f"{w['start']}, {w['hours']:g} trace hours"), ("jobs", str(m["jobs"])),
               ("speed", f"x{float(m['speed']):g}"), ("seed", str(m["seed"])), ("runs", ", ".join(soak.runs)),
               ("soak", verdict(soak))]
    if soak.baseline_from:
        summary.append(("baseline", str(soak.baseline_from)))
    frame = pd.DataFrame(summary, columns=["item", "value"])
    summ = Section("summary", "Summary", [Table("summary", "Summary", frame)])
    return Report("slurm-hetero: a day under faults", f"soak result {soak.path}", soak.period, summary,
                  [summ, soak_section(soak)])
