"""Putting a report together from its sources: sacct (a live cluster) or a trace file."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.reports import jobs as J
from slurm_hetero.reports.accounting import jobs_from_sacct, parse_squeue_pending, read_sacct
from slurm_hetero.reports.data import SacctSource, accounting_identity
from slurm_hetero.reports.metrics import build_report
from slurm_hetero.reports.model import Report
from slurm_hetero.reports.period import Period, parse_when
from slurm_hetero.reports.traces import read_trace
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.runner import Runner

# squeue tells who waits now: only worth asking when the report reaches the present.
_PRESENT_S = 300.0


def sacct_report(site: Site | None, runner: Runner, period: Period, partition: str | None = None,
                 cache_dir: Path | None = None, progress: bool = False, now: float | None = None) -> Report:
    """The report of a cluster's accounting over `period` (sacct by day, squeue for waiters)."""
    now = time.time() if now is None else now
    if site and partition and partition not in [p.name for p in site.partitions]:
        raise InputError(f"--partition {partition}: not a partition of site {site.name}; use one of "
                         + ", ".join(p.name for p in site.partitions))
    source = SacctSource(runner, cache_dir, now)
    raw = read_sacct(source.texts(period.start, period.end, progress=progress))
    jobs = J.select(jobs_from_sacct(raw.frame, site), period.start, period.end, partition)
    notes = []
    if raw.skipped:
        notes.append(f"{raw.skipped} sacct line(s) had too few fields and were skipped")
    pending = None
    if period.end >= now - _PRESENT_S:
        text = source.pending()
        if text is None:
            notes.append("squeue did not answer (slurmctld down?): pending reasons are sacct's")
        else:
            pending = parse_squeue_pending(text)
            if partition:
                pending = pending[pending["partition"].str.split(",").apply(lambda ps: partition in ps)]
    if site is None:
        notes.append("no site file: capacity and normalized units are unknown")
    cap = J.site_capacity(site, partition) if site else J.Capacity(source="no site file")
    if len(jobs):
        period = period.shrink_to(float(np.nanmin(jobs["submit"].to_numpy())), period.end)
    ident = accounting_identity(runner)
    cluster = f"cluster {ident['clustername']}" if "clustername" in ident else ident["conf"]
    label = f"sacct of {cluster} ({source.fetched} day(s) fetched, {source.hits} from cache)"
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
    jobs = J.select(trace.jobs, period.start, period.end, partition)
    # "Still waiting" and wait-so-far are as of the trace's end, not of today.
    return build_report(jobs, trace.capacity, period, trace.source, None, trace.notes, partition,
                        now=period.end)
