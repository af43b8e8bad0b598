"""Putting a report together from its sources: sacct (a live cluster) or a trace file."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table
from slurm_hetero.jobs.capacity import Capacity, site_capacity
from slurm_hetero.jobs.sacct import from_sacct
from slurm_hetero.jobs.traces import read_trace
from slurm_hetero.reports.metrics import build_report
from slurm_hetero.reports.model import Report
from slurm_hetero.reports.pending import parse_squeue_pending, pending_text
from slurm_hetero.reports.period import Period
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import Chunk, SacctDays, accounting_identity, parse_when, read_sacct

# squeue tells who waits now: only worth asking when the report reaches the present.
_PRESENT_S = 300.0


@contextmanager
def _day_bar(show: bool) -> Iterator[Callable[[Chunk], None]]:
    """A progress bar over sacct's days on a terminal (stderr); nothing otherwise."""
    console = Console(stderr=True)
    with Progress(TextColumn("sacct {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=console, transient=True,
                  disable=not (show and console.is_terminal)) as bar:
        task = bar.add_task("days", total=None)

        def step(c: Chunk) -> None:
            bar.update(task, total=c.total, completed=c.index,
                       description=time.strftime("%Y-%m-%d", time.localtime(c.start)))

        yield step


def sacct_report(site: Site | None, runner: Runner, period: Period, partition: str | None = None,
                 cache_dir: Path | None = None, progress: bool = False, now: float | None = None) -> Report:
    """The report of a cluster's accounting over `period` (sacct by day, squeue for waiters)."""
    now = time.time() if now is None else now
    if site and partition and partition not in [p.name for p in site.partitions]:
        raise InputError(f"--partition {partition}: not a partition of site {site.name}; use one of "
                         + ", ".join(p.name for p in site.partitions))
    days = SacctDays(runner, cache_dir, now=now)
    with _day_bar(progress) as step:
        raw = read_sacct(days.texts(period.start, period.end, on_chunk=step))
    jobs = table.select(from_sacct(raw.frame, site),
                        period.start, period.end, partition)
    notes = []
    if raw.skipped:
        notes.append(f"{raw.skipped} sacct line(s) had too few fields and were skipped")
    pending = None
    if period.end >= now - _PRESENT_S:
        text = pending_text(days.runner)
        if text is None:
            notes.append("squeue did not answer (slurmctld down?): pending reasons are sacct's")
        else:
            pending = parse_squeue_pending(text)
            if partition:
                pending = pending[pending["partition"].str.split(",").apply(lambda ps: partition in ps)]
    if site is None:
        notes.append("no site file: capacity and normalized units are unknown")
    cap = site_capacity(site, partition) if site else Capacity(source="no site file")
    if len(jobs):
        period = period.shrink_to(float(np.nanmin(jobs["submit"].to_numpy())), period.end)
    ident = accounting_identity(runner)
    cluster = f"cluster {ident['clustername']}" if "clustername" in ident else ident["conf"]
    label = f"sacct of {cluster} ({days.fetched} day(s) fetched, {days.hits} from cache)"
    return build_report(jobs, cap, period, label, pending, notes, partition, now)


def trace_period(jobs: pd.DataFrame, since: str | None, until: str | None) -> Period:
    """The trace's own span, narrowed by --since/--until (absolute dates in trace time)."""
    submit = jobs["submit"].to_numpy()
    last = np.fmax(np.fmax(jobs["end"].to_numpy(), submit), jobs["start"].to_numpy())
    first_t = float(np.nanmin(submit)) if len(jobs) else 0.0
    last_t = float(np.nanmax(last)) if len(jobs) else first_t + 1
    start = parse_when(since, "--since", now=last_t) if since else first_t
    end = parse_when(until, "--until", now=last_t) if until else max(last_t, first_t + 1)
    if start >= end:
        raise InputError(f"--since {since} is not before --until {until or 'the trace end'}")
    return Period(start, end, since is not None, until is not None)


def trace_report(path: Path, since: str | None = None, until: str | None = None,
                 partition: str | None = None) -> Report:
    """The report of an SWF or Alibaba trace, as if it were a cluster's accounting."""
    trace = read_trace(path)
    period = trace_period(trace.jobs, since, until)
    jobs = table.select(trace.jobs, period.start, period.end, partition)
    # "Still waiting" and wait-so-far are as of the trace's end, not of today.
    return build_report(jobs, trace.capacity, period, trace.label, None, trace.notes, partition,
                        now=period.end)
