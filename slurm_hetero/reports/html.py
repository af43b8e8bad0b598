"""The report as one self-contained HTML file: CSS inline, every plot an SVG data URI.

Nothing is loaded from the network, so the file opens offline and can be mailed. Plots
are drawn with matplotlib's object API (no pyplot: no global state, no GUI backend).
Each plot is an <img> of its own SVG, which keeps matplotlib's element ids from
colliding between plots and lets the page check that every plot decoded.
"""

from __future__ import annotations

import base64
import io
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

from slurm_hetero.reports import fmt
from slurm_hetero.reports.bottlenecks import BottleneckSection
from slurm_hetero.reports.files import write_atomic
from slurm_hetero.reports.model import Plot, Report, Table
from slurm_hetero.templating import environment

_RC: dict[Any, Any] = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                       "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
                       "svg.hashsalt": "slurm-hetero"}


# Tick positions people read as round durations (seconds).
_DURATIONS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600,
              12 * 3600, 86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400)
_LOG_DURATIONS = (1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)


def _duration_axis(ax: Axes, vmax: float, log: bool) -> None:
    if log:
        ticks = [0.0, *[float(t) for t in _LOG_DURATIONS if t <= vmax * 1.5]]
    else:
        step = next((t for t in _DURATIONS if vmax / t <= 6), _DURATIONS[-1])
        ticks = [float(step * k) for k in range(int(vmax // step) + 2)]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    # Plain-text labels: also keeps matplotlib's slow mathtext parser out of log axes.
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt.duration(v) if v > 0 else "0"))


def plot_svg(p: Plot) -> str:
    """One plot as SVG text."""
    frame = p.frame
    values = frame.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    with matplotlib.rc_context(_RC):
        height = 3.3 if p.kind != "hbars" else max(1.4, 0.3 * len(frame) + 0.9)
        fig = Figure(figsize=(9.0, height))
        ax = fig.add_subplot()
        if p.kind == "lines":
            x: Any = [datetime.fromtimestamp(float(v)) for v in frame.index] if p.time_x else frame.index
            for col in frame.columns:
                y = frame[col].to_numpy(dtype=float)
                # Markers where points are few or isolated between gaps, so none is invisible.
                sparse = int(np.isfinite(y).sum()) <= 60
                ax.plot(x, y, drawstyle="steps-post", label=str(col), marker="o" if sparse else None,
                        markersize=3)
            if p.time_x:
                loc = AutoDateLocator()  # type: ignore[no-untyped-call]
                ax.xaxis.set_major_locator(loc)
                ax.xaxis.set_major_formatter(ConciseDateFormatter(loc))  # type: ignore[no-untyped-call]
        elif p.kind == "bars":
            n, k = len(frame), max(len(frame.columns), 1)
            pos = np.arange(n)
            if p.stacked:
                bottom = np.zeros(n)
                for col in frame.columns:
                    y = np.nan_to_num(frame[col].to_numpy(dtype=float))
                    ax.bar(pos, y, 0.6, bottom=bottom, label=str(col))
                    bottom += y
                finite = bottom
            else:
                width = 0.8 / k
                for i, col in enumerate(frame.columns):
                    ax.bar(pos + (i - (k - 1) / 2) * width, frame[col].to_numpy(dtype=float), width,
                           label=str(col))
            ax.set_xticks(pos, [str(v) for v in frame.index], rotation=30 if n > 6 else 0,
                          ha="right" if n > 6 else "center")
        else:
            ax.barh([str(v) for v in frame.index], frame[frame.columns[0]].to_numpy(dtype=float), height=0.6)
            ax.grid(axis="y", visible=False)
        if p.logy:
            ax.set_yscale("symlog", linthresh=1.0)
            ax.set_ylim(bottom=0)
        if p.seconds and len(finite):
            _duration_axis(ax, float(finite.max()), p.logy)
        elif len(finite) and np.all(finite == np.round(finite)):
            # Counts: no 0.25-job ticks.
            (ax.xaxis if p.kind == "hbars" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))
        if p.kind == "hbars":
            ax.set_xlabel(p.ylabel)
        else:
            ax.set_ylabel(p.ylabel)
        if (p.kind != "hbars" and len(frame.columns) > 1) or p.kind == "lines":
            ax.legend(fontsize=8, frameon=False, ncols=min(len(frame.columns), 4), loc="lower left",
                      bbox_to_anchor=(0, 1.0))
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def _table_ctx(t: Table) -> dict[str, Any]:
    shown = t.frame.head(t.show)
    cols = [str(c) for c in t.frame.columns]
    first = shown.iloc[0] if len(shown) else None
    return {
        "slug": t.slug, "title": t.title, "note": t.note, "more": len(t.frame) - len(shown),
        "headers": [fmt.header(c) for c in cols],
        "numeric": [first is not None and fmt.is_numeric(first[c]) for c in cols],
        "rows": [[fmt.cell(c, v) for c, v in zip(cols, row, strict=True)]
                 for row in shown.itertuples(index=False)],
    }


def render_html(report: Report) -> str:
    env = environment(autoescape=True)
    sections = []
    for s in report.sections:
        sections.append({
            "key": s.key, "title": s.title, "notes": s.notes,
            "tables": [_table_ctx(t) for t in s.tables if t.slug != "summary" and len(t.frame)],
            "plots": [{"slug": p.slug, "title": p.title,
                       "src": "data:image/svg+xml;base64," + base64.b64encode(plot_svg(p).encode()).decode()}
                      for p in s.plots if len(p.frame)],
            # Bottleneck rules read as sentences; their numbers are also in the section's tables.
            "rules": [{"title": f"Arm {arm}" if arm else "", "sentences": r.sentences()}
                      for arm, r in (s.results if isinstance(s, BottleneckSection) else []) if r.sentences()],
        })
    return env.get_template("report.html.j2").render(
        title=report.title, source=report.source, period=report.period.label(),
        summary=report.summary, notes=report.notes, empty=report.empty,
        sections=[s for s in sections if s["key"] != "summary"])


def write_html(report: Report, path: Path) -> Path:
    """Render and write the report atomically; returns the path written."""
    return write_atomic(path, render_html(report))
