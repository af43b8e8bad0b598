"""Putting a report together from its sources: sacct (a live cluster) or a trace file."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table
from slurm_hetero.jobs.capacity import Capacity, site_capacity
from slurm_hetero.jobs.sacct import from_sacct
from slurm_hetero.jobs.traces import read_trace
from slurm_hetero.reports.bottlenecks import BottleneckSection, bottleneck_section
from slurm_hetero.reports.metrics import build_report
from slurm_hetero.reports.model import Report, Section
from slurm_hetero.reports.outages import fetch_outages
from slurm_hetero.reports.pending import parse_squeue_pending, pending_text
from slurm_hetero.reports.period import Period
from slurm_hetero.reports.power import power_section
from slurm_hetero.site.model import Site
from slurm_hetero.site.power import pool_idle_power
from slurm_hetero.slurm import hostlist
from slurm_hetero.slurm.parse import parse_duration_s, parse_tres
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import (
    Chunk,
    SacctDays,
    accounting_identity,
    parse_when,
    read_sacct,
    sacct_notes,
)


def parse_limit_s(text: str | None) -> float | None:
    """A partition's DefaultTime/MaxTime (`1:00:00`, `2-00:00:00`) in seconds; None for
    UNLIMITED or unreadable."""
    if not text or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    try:
        return parse_duration_s(text)
    except ValueError:
        return None


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


def site_mismatch(raw: pd.DataFrame, site: Site) -> str | None:
    """What in the accounting the site does not describe (nodes, GRES types), or None."""
    nodes = {n for g in site.node_groups for n in g.nodes}
    gres = {(m.gres_name, m.gres_type) for m in site.catalog.values()} | \
        {(m.gres_name, m.id) for m in site.catalog.values()}
    odd_nodes: set[str] = set()
    odd_gres: set[str] = set()
    for text in pd.unique(raw["NodeList"].astype(str)) if "NodeList" in raw else []:
        if text in ("", "None assigned", "(null)", "nan"):
            continue
        try:
            names = hostlist.expand(text, limit=100_000)
        except hostlist.HostlistError:
            names = [text]
        odd_nodes.update(n for n in names if n not in nodes)
    for text in pd.unique(raw["AllocTRES"].astype(str)) if "AllocTRES" in raw else []:
        for key in parse_tres(text):
            name, _, gtype = key.removeprefix("gres/").partition(":")
            if key.startswith("gres/") and gtype and (name, gtype) not in gres:
                odd_gres.add(f"{name}:{gtype}")
    if not odd_nodes and not odd_gres:
        return None
    parts = []
    if odd_nodes:
        shown = sorted(odd_nodes)
        more = f" and {len(shown) - 10} more" if len(shown) > 10 else ""
        parts.append(f"nodes {', '.join(shown[:10])}{more}"
                     + " (their jobs' arch is 'unknown')")
    if odd_gres:
        parts.append(f"GRES types {', '.join(sorted(odd_gres))} (no model, no normalized units)")
    return f"site {site.name} does not describe {' and '.join(parts)}: is --site the cluster's site file?"


def sacct_report(site: Site | None, runner: Runner, period: Period, partition: str | None = None,
                 cache_dir: Path | None = None, progress: bool = False, now: float | None = None,
                 strict: bool = False, warn: Callable[[str], None] | None = None,
                 power: bool = False, power_history: Path | None = None) -> Report:
    """The report of a cluster's accounting over `period` (sacct by day, squeue for waiters).
    `power`: add the "Power saving" section from the keeper's `power_history` (None: none).

    A site that does not describe the cluster's nodes or GRES is said through `warn` (and
    in the report's notes), or is an InputError with `strict`."""
    now = time.time() if now is None else now
    if site and partition and partition not in [p.name for p in site.partitions]:
        raise InputError(f"--partition {partition}: not a partition of site {site.name}; use one of "
                         + ", ".join(p.name for p in site.partitions))
    days = SacctDays(runner, cache_dir, now=now, names=True)
    with _day_bar(progress) as step:
        raw = read_sacct(days.texts(period.start, period.end, on_chunk=step))
    jobs = table.select(from_sacct(raw.frame, site),
                        period.start, period.end, partition)
    notes = []
    mismatch = site_mismatch(raw.frame, site) if site else None
    if mismatch and strict:
        raise InputError(f"--site: {mismatch}")
    if mismatch:
        notes.append(mismatch)
        if warn:
            warn(f"warning: {mismatch}")
    if raw.skipped:
        notes.append(f"{raw.skipped} sacct line(s) had too few fields and were skipped")
    for note in sacct_notes(raw, days):
        notes.append(note)
        if warn:
            warn(f"warning: {note}")
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
    lost = None
    limits: dict[str, float] = {}
    if site:
        lost, why = fetch_outages(runner, site, period.start, period.end, partition, now)
        if why:
            notes.append(why)
        elif lost and lost.unknown_nodes:
            notes.append("node events of nodes the site does not describe: "
                         + ", ".join(lost.unknown_nodes[:10]))
        for p in site.partitions:
            t = parse_limit_s(p.default_time or p.max_time)
            if t:
                limits[p.name] = t
    ident = accounting_identity(runner)
    cluster = f"cluster {ident['clustername']}" if "clustername" in ident else ident["conf"]
    label = f"sacct of {cluster} ({days.fetched} day(s) fetched, {days.hits} from cache)"
    rep = build_report(jobs, cap, period, label, pending, notes, partition, now, lost, limits)
    if not rep.empty:
        insert_after(rep, bottleneck_section(jobs, period, now), "waits")
    if power and not rep.empty:
        rep.sections.append(power_section(power_history, jobs, pool_idle_power(site) if site else None))
    return rep


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
                 partition: str | None = None, power_history: Path | None = None) -> Report:
    """The report of an SWF or Alibaba trace, as if it were a cluster's accounting (with the
    "Power saving" section when a keeper's history on the trace's clock is given: replay's)."""
    trace = read_trace(path)
    period = trace_period(trace.jobs, since, until)
    jobs = table.select(trace.jobs, period.start, period.end, partition)
    # "Still waiting" and wait-so-far are as of the trace's end, not of today.
    rep = build_report(jobs, trace.capacity, period, trace.label, None, trace.notes, partition,
                       now=period.end)
    if not rep.empty:
        insert_after(rep, bottleneck_section(jobs, period, period.end), "waits")
    if power_history is not None and not rep.empty:
        rep.sections.append(power_section(power_history, jobs))
    return rep


def insert_after(rep: Report, section: Section, key: str) -> None:
    """Put `section` right after the section `key` (at the end when there is none)."""
    keys = [s.key for s in rep.sections]
    rep.sections.insert(keys.index(key) + 1 if key in keys else len(keys), section)


def report_json(rep: Report) -> dict[str, Any]:
    """What `report --json` prints: source, period, summary and notes, and the bottleneck
    rules (`bottlenecks`; per replay arm `replay_bottlenecks`). Tables are --csv's."""
    doc: dict[str, Any] = {
        "title": rep.title, "source": rep.source,
        "period": {"start": rep.period.start, "end": rep.period.end, "label": rep.period.label()},
        "summary": dict(rep.summary), "notes": list(rep.notes), "empty": rep.empty, "bottlenecks": None}
    for s in rep.sections:
        if isinstance(s, BottleneckSection) and s.key == "bottlenecks":
            doc["bottlenecks"] = s.results[0][1].as_dict()
        elif isinstance(s, BottleneckSection):
            doc["replay_bottlenecks"] = {arm: r.as_dict() for arm, r in s.results}
    return doc
