"""A soak's timeline (`benchmarks/soak.py`): when each fault began and ended, when each alert
fired and cleared, and the queue (pending and running jobs) over time, all in trace seconds
after the window's start; and its plot, drawn like the HTML report's (matplotlib's object
API, SVG), written beside the soak's JSON.

>>> tl = timeline([{"kind": "bridge-stop", "started_trace_s": 100.0, "ended_trace_s": 1000.0}],
...               [{"alert": "HeteroBridgeHeartbeatLost", "labels": {}, "start_s": 400.0, "end_s": 1100.0}],
...               [(0.0, 5, 2), (50.0, 4, 3)], [])
>>> tl["faults"], tl["queue"][-1]
([{'kind': 'bridge-stop', 'start_s': 100.0, 'end_s': 1000.0}], [50.0, 4, 3])
>>> [(a["alert"], a["start_s"], a["end_s"]) for a in tl["alerts"]]
[('HeteroBridgeHeartbeatLost', 400.0, 1100.0)]
>>> tl["span_s"]
[0.0, 1100.0]
>>> timeline_svg(tl).startswith("<?xml")
True
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from slurm_hetero.reports.html import _RC

MAX_QUEUE_POINTS = 2000


def _thin(points: Sequence[tuple[float, int, int]], most: int) -> list[list[float | int]]:
    """At most `most` points, evenly picked (first and last kept)."""
    if len(points) <= most:
        return [list(p) for p in points]
    step = (len(points) - 1) / (most - 1)
    return [list(points[round(i * step)]) for i in range(most)]


def timeline(records: Iterable[Mapping[str, Any]], alerts: Iterable[Mapping[str, Any]],
             queue: Sequence[tuple[float, int, int]], gaps: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The timeline of one run: `records` the faults' records (`kind`, `started_trace_s`,
    `ended_trace_s`), `alerts` the spans each alert fired (`alert`, `labels`, `start_s`,
    `end_s`: None while still firing), `queue` (trace s, pending, running) per observation,
    `gaps` the exporters' scrape gaps (`job`, `instance`, `start_s`, `end_s`)."""
    faults: list[dict[str, Any]] = [{"kind": str(r["kind"]), "start_s": float(r["started_trace_s"]),
               "end_s": float(r.get("ended_trace_s") or r.get("undone_trace_s") or r["started_trace_s"])}
              for r in records]
    spans: list[dict[str, Any]] = [
        {"alert": str(a["alert"]), "labels": dict(a.get("labels", {})), "start_s": float(a["start_s"]),
         "end_s": None if a.get("end_s") is None else float(a["end_s"])} for a in alerts]
    q = _thin(sorted(queue), MAX_QUEUE_POINTS)
    gap_list = [dict(g) for g in gaps]
    times: list[float] = [f["start_s"] for f in faults] + [f["end_s"] for f in faults]
    times += [float(s["start_s"]) for s in spans] + [float(p[0]) for p in q]
    times += [float(s["end_s"]) for s in spans if s["end_s"] is not None]
    return {"faults": faults, "alerts": spans, "queue": q, "scrape_gaps": gap_list,
            "span_s": [min(times, default=0.0), max(times, default=0.0)]}


def span_rows(tl: Mapping[str, Any]) -> list[tuple[str, str, list[tuple[float, float]]]]:
    """The timeline's rows, top to bottom, as (label, what, spans): a row per fault (`fault`),
    per alert name (`alert`, each time it fired; one still firing ends at the timeline's end)
    and the exporters' scrape gaps (`gap`) if any; each span (start, end) in trace seconds,
    widened to 1/400 of the timeline where shorter, so an instant still shows.

    >>> span_rows(timeline([{"kind": "bridge-kill", "started_trace_s": 100.0}],
    ...                    [{"alert": "A", "start_s": 50.0, "end_s": None}],
    ...                    [(0.0, 1, 0), (500.0, 0, 1)], []))
    [('fault bridge-kill', 'fault', [(100.0, 101.25)]), ('alert A', 'alert', [(50.0, 500.0)])]
    """
    lo, hi = tl["span_s"]
    hi = max(hi, lo + 1.0)
    least = (hi - lo) / 400

    def span(start: float, end: float | None) -> tuple[float, float]:
        return start, max(hi if end is None else end, start + least)

    rows: list[tuple[str, str, list[tuple[float, float]]]] = [
        (f"fault {f['kind']}", "fault", [span(f["start_s"], f["end_s"])]) for f in tl["faults"]]
    by_alert: dict[str, list[tuple[float, float]]] = {}
    for a in tl["alerts"]:
        by_alert.setdefault(a["alert"], []).append(span(a["start_s"], a["end_s"]))
    rows += [(f"alert {name}", "alert", spans) for name, spans in sorted(by_alert.items())]
    gaps = [span(g["start_s"], g["end_s"]) for g in tl["scrape_gaps"]]
    if gaps:
        rows.append(("scrape gaps", "gap", gaps))
    return rows


_COLOURS = {"fault": "tab:red", "alert": "tab:orange", "gap": "tab:gray"}


def timeline_svg(tl: Mapping[str, Any], title: str = "") -> str:
    """The timeline as SVG: a row per fault and per alert (when each lasted: a fault's bar, an
    alert's firing), the exporters' scrape gaps, and below the queue, hours on the x axis."""
    lo, hi = tl["span_s"]
    hi = max(hi, lo + 1.0)
    rows = [(label, [(s, e - s) for s, e in spans], _COLOURS[what]) for label, what, spans in span_rows(tl)]
    h = 3600.0
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(9.0, 2.4 + 0.28 * max(len(rows), 1)))
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[max(len(rows), 1) * 0.28 + 0.4, 2.0])
        for i, (_, bars, color) in enumerate(rows):
            top.broken_barh([(s / h, w / h) for s, w in bars], (i - 0.35, 0.7), facecolors=color)
        top.set_yticks(range(len(rows)), [r[0] for r in rows])
        top.set_ylim(max(len(rows), 1) - 0.5, -0.5)
        top.grid(axis="y", visible=False)
        if title:
            top.set_title(title, fontsize=9, loc="left")
        q = tl["queue"]
        if q:
            xs = [p[0] / h for p in q]
            bottom.plot(xs, [p[1] for p in q], drawstyle="steps-post", label="pending")
            bottom.plot(xs, [p[2] for p in q], drawstyle="steps-post", label="running")
            bottom.legend(fontsize=8, frameon=False, ncols=2, loc="upper right")
        for f in tl["faults"]:
            bottom.axvspan(f["start_s"] / h, max(f["end_s"], f["start_s"] + (hi - lo) / 400) / h,
                           color="tab:red", alpha=0.12, linewidth=0)
        bottom.set_ylabel("jobs")
        bottom.set_xlabel("trace hours after the window's start")
        bottom.set_xlim(lo / h, hi / h)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()
