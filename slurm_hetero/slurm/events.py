"""When nodes could not run jobs: `sacctmgr show event` (down, drain, fail) and maintenance
reservations, as intervals. Pure parsers of the `-P -n` output the builders in
commands.py ask for (EVENT_FIELDS / RESERVATION_FIELDS, epoch times under
SLURM_TIME_FORMAT=%s), tested on captured output of the dev cluster.

The Reason an admin writes is the last field, so a `|` in it cannot shift the others; an
open event (End `Unknown`) lasts until the caller's `now`. Cluster-wide rows (no node name:
"Cluster Registered TRES") are not node outages and are dropped.

>>> ev = parse_events("h100-01|100|400|DRAIN|cpu=96,gres/gpu:h100=8,gres/gpu=8|fan | swap\\n")
>>> ev[0].node, ev[0].state, ev[0].reason, ev[0].devices()
('h100-01', 'DRAIN', 'fan | swap', {'gpu:h100': 8})
>>> unusable_seconds(ev, 0, 300, now=1000)
{'h100-01': 200.0}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_hetero.slurm.commands import EVENT_FIELDS, RESERVATION_FIELDS
from slurm_hetero.slurm.parse import parse_slurm_time, parse_tres

_OPEN = ("Unknown", "", "None")


def _time(text: str) -> float | None:
    """Epoch seconds, or a Slurm time text (a capture without SLURM_TIME_FORMAT=%s)."""
    t = text.strip()
    if t in _OPEN:
        return None
    if t.isdigit():
        return float(t)
    return parse_slurm_time(t)


@dataclass(frozen=True)
class NodeEvent:
    node: str
    start: float
    end: float | None  # None: still open
    state: str  # DOWN, DRAIN, FAIL, ... (sacctmgr's State, upper case)
    tres: str  # what the node holds (cpu=96,gres/gpu:h100=8,...)
    reason: str

    def devices(self) -> dict[str, int]:
        """Typed GRES the node holds (`gpu:h100` → 8), from the event's TRES."""
        out: dict[str, int] = {}
        for key, value in parse_tres(self.tres).items():
            name = key.removeprefix("gres/")
            if key.startswith("gres/") and ":" in name and value.isdigit():
                out[name] = int(value)
        return out


@dataclass(frozen=True)
class Reservation:
    name: str
    start: float
    end: float | None
    flags: tuple[str, ...]
    nodes: str  # a hostlist

    @property
    def maintenance(self) -> bool:
        return "MAINT" in self.flags


def _rows(text: str, fields: tuple[str, ...]) -> Iterable[list[str]]:
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|", len(fields) - 1)
        if len(values) != len(fields):
            raise ValueError(
                f"sacctmgr line has {len(values)} fields, expected {len(fields)}: {line[:200]!r}"
            )
        yield values


def parse_events(text: str) -> list[NodeEvent]:
    """`sacctmgr -n -P show event format=EVENT_FIELDS` → node events (cluster rows dropped)."""
    out = []
    for node, start, end, state, tres, reason in _rows(text, EVENT_FIELDS):
        t0 = _time(start)
        if not node.strip() or t0 is None:
            continue
        out.append(NodeEvent(node.strip(), t0, _time(end), state.strip().upper(), tres.strip(), reason))
    return out


def parse_reservations(text: str) -> list[Reservation]:
    """`sacctmgr -n -P show reservation format=RESERVATION_FIELDS` → reservations."""
    out = []
    for name, start, end, flags, nodes in _rows(text, RESERVATION_FIELDS):
        t0 = _time(start)
        if t0 is None:
            continue
        out.append(
            Reservation(name, t0, _time(end), tuple(f for f in flags.upper().split(",") if f), nodes.strip())
        )
    return out


def union_length(spans: list[tuple[float, float]]) -> float:
    """Length of the union of intervals (a node both drained and reserved counts once).

    >>> union_length([(0, 10), (5, 20), (30, 40)])
    30.0
    """
    total = 0.0
    cur: tuple[float, float] | None = None
    for s, e in sorted(spans):
        if cur is None or s > cur[1]:
            total += 0.0 if cur is None else cur[1] - cur[0]
            cur = (s, e)
        else:
            cur = (cur[0], max(cur[1], e))
    return float(total + (0.0 if cur is None else cur[1] - cur[0]))


def unusable_spans(
    events: Iterable[NodeEvent],
    start: float,
    end: float,
    now: float,
    extra: Iterable[tuple[str, float, float | None]] = (),
) -> dict[str, list[tuple[float, float]]]:
    """Per node, the parts of [start, end) it was down/drained (or in `extra` spans,
    e.g. maintenance reservations), open spans lasting until `now`."""
    spans: dict[str, list[tuple[float, float]]] = {}
    items = [(e.node, e.start, e.end) for e in events] + list(extra)
    for node, s, e in items:
        lo, hi = max(s, start), min(now if e is None else e, end)
        if hi > lo:
            spans.setdefault(node, []).append((lo, hi))
    return spans


def unusable_seconds(
    events: Iterable[NodeEvent],
    start: float,
    end: float,
    now: float,
    extra: Iterable[tuple[str, float, float | None]] = (),
) -> dict[str, float]:
    """Per node, seconds of [start, end) it could not run jobs (overlaps counted once)."""
    return {n: union_length(s) for n, s in unusable_spans(events, start, end, now, extra).items()}
