"""The time range of a report: --since/--until as a period, plot buckets.

Times are epoch seconds (floats) everywhere in the reports; sacct prints them that way
under SLURM_TIME_FORMAT=%s, so no timezone parsing happens on job data. Only the user's
--since/--until (`slurm.sacct.parse_when`) are local wall-clock times, as sacct reads them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurm_hetero.errors import InputError
from slurm_hetero.slurm.sacct import parse_when

# Plot buckets, smallest first: the first that keeps a series at most MAX_BUCKETS long wins.
BUCKET_STEPS = (10, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
MAX_BUCKETS = 240


@dataclass(frozen=True)
class Period:
    """[start, end) in epoch seconds; `explicit_*` say whether the user chose the bound,
    so a default bound may shrink to the data (a new cluster is not 7 days old)."""

    start: float
    end: float
    explicit_start: bool = False
    explicit_end: bool = False

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)

    def shrink_to(self, first: float, last: float) -> Period:
        """Replace the bounds the user did not give by the first/last activity of the data."""
        start = self.start if self.explicit_start else max(self.start, first)
        end = self.end if self.explicit_end else min(self.end, last) if last > start else self.end
        return Period(start, max(end, start), self.explicit_start, self.explicit_end)

    def label(self) -> str:
        return f"{fmt_time(self.start)} → {fmt_time(self.end)}"


def resolve_period(since: str | None, until: str | None, now: float | None = None,
                   default_days: int = 7) -> Period:
    """--since/--until as a Period; without --since, the last `default_days` local days."""
    now = time.time() if now is None else now
    end = parse_when(until, "--until", now) if until else now
    if since:
        start = parse_when(since, "--since", now)
    else:
        midnight = datetime.fromtimestamp(min(end, now)).replace(hour=0, minute=0, second=0, microsecond=0)
        start = (midnight - timedelta(days=default_days - 1)).timestamp()
    if start >= end:
        raise InputError(f"--since {since or fmt_time(start)!s} is not before --until "
                         f"{until or 'now'}: give an earlier --since or a later --until")
    return Period(start, end, explicit_start=since is not None, explicit_end=until is not None)


def bucket_step(span: float) -> int:
    """The plot bucket for a span of `span` seconds (at most MAX_BUCKETS buckets)."""
    for step in BUCKET_STEPS:
        if span / step <= MAX_BUCKETS:
            return step
    return BUCKET_STEPS[-1]


def bucket_edges(period: Period) -> tuple[int, list[float]]:
    """(step, edges) covering the period; day-sized steps start at local midnight."""
    step = bucket_step(period.seconds)
    # Align to the local clock so daily buckets are calendar days, not UTC days.
    offset = datetime.fromtimestamp(period.start).astimezone().utcoffset()
    tz = offset.total_seconds() if offset else 0.0
    first = ((period.start + tz) // step) * step - tz
    edges = [first]
    while edges[-1] < period.end:
        edges.append(edges[-1] + step)
    if len(edges) < 2:
        edges.append(first + step)
    return step, edges


def fmt_time(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def fmt_step(step: int) -> str:
    for unit, s in (("week", 7 * 86400), ("day", 86400), ("h", 3600), ("min", 60)):
        if step % s == 0 and step >= s:
            n = step // s
            return f"{n} {unit}" + ("s" if n > 1 and unit in ("week", "day") else "")
    return f"{step} s"
