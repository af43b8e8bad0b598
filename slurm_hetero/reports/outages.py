"""Capacity a cluster really had: installed devices minus the time their nodes were down,
drained or in a maintenance reservation (`sacctmgr show event` / `show reservation`,
slurm.events). Per pool (model, arch) and per arch for CPUs, from the site's nodes; nodes
the site does not describe are named, not guessed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import pandas as pd

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.site.model import Site
from slurm_hetero.slurm import hostlist
from slurm_hetero.slurm.commands import sacctmgr_events_argv, sacctmgr_reservations_argv
from slurm_hetero.slurm.events import (
    NodeEvent,
    Reservation,
    parse_events,
    parse_reservations,
    union_length,
    unusable_spans,
)
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import epoch_runner

_SACCTMGR_TIME = "%Y-%m-%dT%H:%M:%S"


@dataclass
class Outages:
    """Seconds of capacity lost in a period: device-seconds per (model, arch), CPU-seconds
    per arch; `rows` one line per node and cause."""

    device_s: dict[tuple[str, str], float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    unknown_nodes: list[str] = field(default_factory=list)
    source: str = "sacctmgr show event / reservation"


def _cause(state: str) -> str:
    s = state.upper()
    return (
        "drain" if "DRAIN" in s else "down" if any(w in s for w in ("DOWN", "FAIL", "NO_RESP")) else s.lower()
    )


def outages(
    site: Site,
    events: list[NodeEvent],
    reservations: list[Reservation],
    start: float,
    end: float,
    now: float,
    partition: str | None = None,
) -> Outages:
    """Pure: what `events` and maintenance `reservations` cost the site's nodes in [start, end)."""
    nodes: dict[str, tuple[str, float, list[tuple[str, int]]]] = {}
    for g in site.node_groups:
        if partition and partition not in g.partitions:
            continue
        for n in g.nodes:
            nodes[n] = (g.architecture, float(g.cpus), [(a.model.id, a.count) for a in g.accelerators])
    maint: list[tuple[str, float, float | None]] = []
    for r in reservations:
        if not r.maintenance or not r.nodes:
            continue
        try:
            names = hostlist.expand(r.nodes, limit=100_000)
        except hostlist.HostlistError:
            continue
        maint += [(n, r.start, r.end) for n in names]
    out = Outages()
    unknown: set[str] = set()
    rows = []
    for cause, spans in (
        ("event", unusable_spans(events, start, end, now)),
        ("maintenance", unusable_spans([], start, end, now, maint)),
    ):
        for node, parts in spans.items():
            if node not in nodes:
                unknown.add(node)
                continue
            arch, cpus, accels = nodes[node]
            for s, e in parts:
                ev = (
                    next((x for x in events if x.node == node and x.start <= s + 1), None)
                    if cause == "event"
                    else None
                )
                rows.append(
                    {
                        "node": node,
                        "arch": arch,
                        "cause": _cause(ev.state) if ev else "maintenance",
                        "accelerators": ", ".join(f"{c} x {m}" for m, c in accels) or "none",
                        "from": s,
                        "to": e,
                        "lost_s": e - s,
                        "reason": ev.reason if ev else "maintenance reservation",
                    }
                )
    # Union per node: a node drained during its own maintenance loses the time once.
    union = unusable_spans(events, start, end, now, maint)
    for node, parts in union.items():
        if node not in nodes:
            continue
        arch, cpus, accels = nodes[node]
        secs = union_length(parts)
        out.cpu_s[arch] = out.cpu_s.get(arch, 0.0) + cpus * secs
        for model, count in accels:
            out.device_s[(model, arch)] = out.device_s.get((model, arch), 0.0) + count * secs
    out.rows = pd.DataFrame(
        rows, columns=["node", "arch", "cause", "accelerators", "from", "to", "lost_s", "reason"]
    )
    out.unknown_nodes = sorted(unknown)
    return out


def lost_by_pool(o: Outages, installed: dict[tuple[str, str], float], seconds: float) -> pd.DataFrame:
    """Per pool: installed, lost and usable device-hours (lost split by cause)."""
    by_cause: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    for accels, arch, cause, lost_s in zip(
        o.rows["accelerators"], o.rows["arch"], o.rows["cause"], o.rows["lost_s"], strict=True
    ):
        for part in str(accels).split(", "):
            if " x " in part:
                count, model = part.split(" x ", 1)
                by_cause[(model, str(arch), str(cause))] += int(count) * float(lost_s)
    rows = []
    for key, devs in installed.items():
        model, arch = key
        cap_h = devs * seconds / 3600.0
        lost_h = o.device_s.get(key, 0.0) / 3600.0
        rows.append(
            {
                "pool": f"{model}@{arch}",
                "devices": devs,
                "installed_device_hours": cap_h,
                "lost_down_hours": by_cause.get((model, arch, "down"), 0.0) / 3600.0,
                "lost_drain_hours": by_cause.get((model, arch, "drain"), 0.0) / 3600.0,
                "lost_maintenance_hours": by_cause.get((model, arch, "maintenance"), 0.0) / 3600.0,
                "lost_device_hours": lost_h,
                "lost_pct": 100.0 * lost_h / cap_h if cap_h > 0 else float("nan"),
                "usable_device_hours": max(cap_h - lost_h, 0.0),
            }
        )
    return (
        pd.DataFrame(rows)
        .sort_values("lost_device_hours", ascending=False, kind="stable")
        .reset_index(drop=True)
        if rows
        else pd.DataFrame(rows)
    )


def fetch_outages(
    runner: Runner,
    site: Site,
    start: float,
    end: float,
    partition: str | None = None,
    now: float | None = None,
) -> tuple[Outages | None, str | None]:
    """(outages, None), or (None, why) when sacctmgr cannot say (the report then counts
    installed capacity and says so)."""
    now = time.time() if now is None else now
    since = time.strftime(_SACCTMGR_TIME, time.localtime(start))
    until = time.strftime(_SACCTMGR_TIME, time.localtime(end))
    r = epoch_runner(runner)
    try:
        events = parse_events(r.out(sacctmgr_events_argv(since, until), timeout=60))
        resv = parse_reservations(r.out(sacctmgr_reservations_argv(since, until), timeout=60))
    except (RuntimeFailure, ValueError) as e:
        return None, f"node events unreadable ({e}): capacity is installed capacity, outages not subtracted"
    return outages(site, events, resv, start, end, now, partition), None
