"""The report as rich tables in a terminal (plots are in the HTML output)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from slurm_hetero.reports import fmt
from slurm_hetero.reports.model import Report, Table


def _table(t: Table) -> RichTable:
    frame = t.frame
    shown = frame.head(t.show)
    more = len(frame) - len(shown)
    caption = t.note
    if more > 0:
        caption = (caption + "; " if caption else "") + f"{more:,} more rows (--csv writes all)"
    rt = RichTable(title=Text(t.title, style="bold"), title_justify="left",
                   caption=Text(caption) if caption else None, caption_justify="left")
    first = shown.iloc[0] if len(shown) else None
    for col in frame.columns:
        numeric = first is not None and fmt.is_numeric(first[col])
        rt.add_column(Text(fmt.header(str(col))), justify="right" if numeric else "left", overflow="fold")
    for row in shown.itertuples(index=False):
        rt.add_row(*(Text(fmt.cell(str(c), v)) for c, v in zip(frame.columns, row, strict=True)))
    return rt


def _pair(key: str, value: str) -> Text:
    return Text.assemble(("  " + key, "bold"), ": ", value)


def print_report(report: Report, console: Console) -> None:
    """Print every section's tables (capped at each table's `show` rows) and notes."""
    console.rule(Text(report.title, style="bold"))
    if report.empty:
        for k, v in report.summary:
            console.print(_pair(k, v))
        console.print(Text(report.empty, style="yellow"))
        return
    for note in report.notes:
        console.print(Text("note: " + note, style="dim"))
    for sec in report.sections:
        console.print()
        console.rule(Text(sec.title), align="left")
        for t in sec.tables:
            if t.slug == "summary":
                for k, v in report.summary:
                    console.print(_pair(k, v))
            elif len(t.frame):
                console.print(_table(t))
        for note in sec.notes:
            console.print(Text(note, style="dim"))
