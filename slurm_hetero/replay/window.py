"""Which trace jobs a replay submits, and how: the window, the scaling, the requests.

Pure: a job table (the project's schema, `jobs/table.py`) in, `ReplayJob`s out.
Times: *trace* seconds are the trace's own (epoch seconds where the trace says when it
started); the replay's clock runs `speed` times real time, so a trace second lasts
1/speed real seconds, and the cluster's (faked) clock reads trace offsets from the
replay's start, `t0`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.site.model import Site

_DURATION = re.compile(r"^\+(\d+(?:\.\d+)?)([dhm])$")
_ACCOUNT_OK = re.compile(r"^[a-z0-9_]{1,24}$")


@dataclass(frozen=True)
class Window:
    """Jobs submitted in [start, end) are measured; those of the warm-up before it are
    replayed too (the cluster is not empty at `start`) but not measured."""

    start: int  # trace epoch seconds
    hours: float
    warmup_hours: float = 0.0

    def __post_init__(self) -> None:
        if self.hours <= 0:
            raise InputError(f"--hours {self.hours:g}: give a positive number of trace hours")
        if self.warmup_hours < 0:
            raise InputError(f"--warmup-hours {self.warmup_hours:g}: give 0 or more")

    @property
    def end(self) -> int:
        return self.start + round(self.hours * 3600)

    @property
    def first(self) -> int:
        """The first submit time replayed (the warm-up's start)."""
        return self.start - round(self.warmup_hours * 3600)

    def shorter(self, hours: float) -> Window:
        """The same start, `hours` long, no warm-up (the fidelity check's window)."""
        return Window(self.start, min(hours, self.hours), 0.0)


def parse_start(text: str, first_submit: int) -> int:
    """--start: epoch seconds, an ISO date/time (UTC), or `+N[dhm]` after the trace's first job.

    >>> parse_start("+1.5h", 1000), parse_start("850956401", 0), parse_start("1996-12-19T00:46:41", 0)
    (6400, 850956401, 850956401)
    """
    text = text.strip()
    m = _DURATION.match(text)
    if m:
        unit = {"d": 86400, "h": 3600, "m": 60}[m.group(2)]
        return first_submit + round(float(m.group(1)) * unit)
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as e:
        raise InputError(f"--start {text!r}: give epoch seconds, an ISO date/time (UTC, e.g. "
                         "1996-12-19T00:46:41) or +N[dhm] after the trace's first job") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp())


def account_for(user: str) -> str:
    """The Slurm account (and, with `--users local`, the local user) that stands for a trace
    user: one each, so fairshare and the bridge's per-user history stay per user. A valid
    account and Unix user name (lowercase, digits, `_`; at most 27 characters).

    >>> account_for("12"), account_for(""), account_for("Bob.Smith")[:3]
    ('t_12', 't_unknown', 't_h')
    """
    u = user.strip().lower()
    if not u:
        return "t_unknown"
    if _ACCOUNT_OK.match(u):
        return f"t_{u}"
    return "t_h" + hashlib.sha256(user.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ReplayJob:
    trace_id: str
    offset_s: int  # submit time, trace seconds after the window's start (< 0: warm-up)
    runtime_s: int  # what the trace says it ran: the body sleeps this long (trace seconds)
    limit_min: int | None  # the user's limit (minutes, rounded up); None: none given
    cpus: int
    accel: int  # accelerator devices asked for (whole job)
    user: str  # the trace's user
    measured: bool

    @property
    def account(self) -> str:
        return account_for(self.user)

    @property
    def limit_s(self) -> int | None:
        return None if self.limit_min is None else self.limit_min * 60

    @property
    def expected_s(self) -> int:
        """How long it should run: its runtime, or its limit when the trace ran longer."""
        return self.runtime_s if self.limit_s is None else min(self.runtime_s, self.limit_s)


@dataclass
class Selection:
    jobs: list[ReplayJob]
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def accounts(self) -> list[str]:
        return sorted({j.account for j in self.jobs})


def limit_minutes(req_time_s: float) -> int | None:
    """The user's limit in Slurm's whole minutes (rounded up; at least 1).

    >>> limit_minutes(60), limit_minutes(61), limit_minutes(float("nan")), limit_minutes(5)
    (1, 2, None, 1)
    """
    return max(1, math.ceil(req_time_s / 60)) if req_time_s > 0 else None


def _count(x: float) -> int:
    """A request count from the table (NaN unknown; fractions of a device or CPU round up).

    >>> _count(float("nan")), _count(0.5), _count(4.0)
    (0, 1, 4)
    """
    return 0 if not x > 0 else math.ceil(x)


def max_time_minutes(text: str) -> int | None:
    """A Slurm time ("3-00:00:00", "1:00:00", "90", "UNLIMITED") in minutes (None: unlimited).

    >>> [max_time_minutes(t) for t in ("3-00:00:00", "1:30:00", "90", "2-12", "5:30", "UNLIMITED")]
    [4320, 90, 90, 3600, 6, None]
    """
    t = text.strip().upper()
    if t in ("UNLIMITED", "INFINITE", ""):
        return None
    days, _, rest = t.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        h, m, s = [*parts, 0, 0][:3]
    elif len(parts) == 1:  # minutes
        h, m, s = 0, parts[0], 0
    elif len(parts) == 2:  # minutes:seconds
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts[:3]
    return (int(days) if days else 0) * 1440 + h * 60 + m + math.ceil(s / 60)


@dataclass(frozen=True)
class Capacity:
    """What the default partition of the site can hold: jobs beyond it are skipped
    (Slurm would keep them pending forever)."""

    cpus: int
    accel: int
    max_limit_min: int | None

    @classmethod
    def of(cls, site: Site) -> Capacity:
        part = next((p for p in site.partitions if p.default), site.partitions[0])
        groups = site.groups_in(part.name)
        return cls(cpus=sum(g.cpus * g.node_count for g in groups),
                   accel=sum(a.count * g.node_count for g in site.node_groups for a in g.accelerators),
                   max_limit_min=max_time_minutes(part.max_time))


def select(df: pd.DataFrame, window: Window, capacity: Capacity) -> Selection:
    """The window's jobs (and its warm-up's), in submit order; every skip counted by reason."""
    rows = df[(df["submit"] >= window.first) & (df["submit"] < window.end)]
    rows = rows.sort_values(["submit", "job_id"], kind="stable")
    sel = Selection(jobs=[])
    cols = {c: rows[c].astype(object if c in ("job_id", "user") else float).tolist()
            for c in ("job_id", "submit", "runtime_s", "req_time_s", "req_cpus", "req_accel", "user")}
    for job_id, submit, runtime, req_time, req_cpus, req_accel, user in zip(*cols.values(), strict=True):
        cpus, accel = _count(req_cpus), _count(req_accel)
        # A job whose trace gives no limit asks for the partition's MaxTime (its DefaultTime
        # would kill jobs the trace ran for longer).
        limit = limit_minutes(req_time) or capacity.max_limit_min
        if not runtime >= 0:
            sel.skipped["runtime unknown"] += 1
        elif cpus <= 0 and accel <= 0:
            sel.skipped["no processors requested"] += 1
        elif cpus > capacity.cpus:
            sel.skipped[f"more than the default partition's {capacity.cpus} CPUs"] += 1
        elif accel > capacity.accel:
            sel.skipped[f"more than the site's {capacity.accel} accelerators"] += 1
        elif limit is not None and capacity.max_limit_min is not None and limit > capacity.max_limit_min:
            sel.skipped["limit above the partition's MaxTime"] += 1
        else:
            sel.jobs.append(ReplayJob(
                trace_id=str(job_id), offset_s=round(submit) - window.start, runtime_s=round(runtime),
                limit_min=limit, cpus=max(cpus, 1), accel=accel, user=str(user),
                measured=submit >= window.start))
    return sel


MAX_SPEED = 1000.0


def check_speed(speed: float) -> float:
    """
    >>> check_speed(20)
    20.0
    """
    if not 1.0 <= speed <= MAX_SPEED:
        raise InputError(f"--speed {speed:g}: use a value from 1 (real time) to {MAX_SPEED:g}")
    return float(speed)


def real_seconds(trace_seconds: float, speed: float) -> float:
    """How long `trace_seconds` last on a clock running `speed` times real time.

    >>> real_seconds(3600, 20)
    180.0
    """
    return trace_seconds / speed
