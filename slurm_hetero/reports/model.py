"""What a report is, independent of how it is shown: sections of tables and plots.

Metrics build a Report; terminal.py, html.py and csv (files.py) only render it. A Table
keeps every row (CSV gets them all); `show` caps what the terminal and HTML print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from slurm_hetero.reports.period import Period

PlotKind = Literal["lines", "bars", "hbars"]


@dataclass
class Table:
    slug: str  # CSV file stem, unique within a report
    title: str
    frame: pd.DataFrame
    show: int = 20
    note: str = ""


@dataclass
class Plot:
    """frame.index is x (epoch seconds when time_x), each column one series."""

    slug: str
    title: str
    kind: PlotKind
    frame: pd.DataFrame
    ylabel: str
    time_x: bool = False
    logy: bool = False
    seconds: bool = False  # y values are durations: ticks read 30 s, 5m00s, 2h00m
    stacked: bool = False  # bars: columns stacked (parts of one whole) rather than side by side


@dataclass
class Section:
    key: str
    title: str
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    title: str
    source: str
    period: Period
    summary: list[tuple[str, str]]
    sections: list[Section]
    notes: list[str] = field(default_factory=list)
    empty: str | None = None  # set when no job was in range: the one thing to say

    def tables(self) -> list[Table]:
        return [t for s in self.sections for t in s.tables]
