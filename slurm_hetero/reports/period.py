"""The time range of a report: parsing --since/--until, day chunks, plot buckets.

Times are epoch seconds (floats) everywhere in the reports; sacct prints them that way
under SLURM_TIME_FORMAT=%s, so no timezone parsing happens on job data. Only the user's
--since/--until and the day boundaries are local wall-clock times, as sacct reads them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurm_hetero.errors import InputError

DATE_FORMS = ("YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], now, today, yesterday, "
              "or -Nd / -Nh (N days / hours ago)")
_RELATIVE = re.compile(r"^-?(\d+(?:\.\d+)?)\s*([dh])$")
# Plot buckets, smallest first: the first that keeps a series at most MAX_BUCKETS long wins.
BUCKET_STEPS = (10, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
MAX_BUCKETS = 240


def parse_when(text: str, option: str, now: float | None = None) -> float:
    """A --since/--until value as epoch seconds (local time).

    >>> parse_when("1970-01-02", "--since") == datetime(1970, 1, 2).timestamp()
    True
    """
    now = time.time() if now is None else now
    t = text.strip().lower()
    midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if t == "now":
        return now
    if t == "today":
        return midnight.timestamp()
    if t == "yesterday":
        return (midnight - timedelta(days=1)).timestamp()
    m = _RELATIVE.match(t)
    if m:
        hours = float(m.group(1)) * (24 if m.group(2) == "d" else 1)
        return now - hours * 3600
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise InputError(f"{option} {text!r}: not a date or time; use {DATE_FORMS}") from None


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


def day_chunks(start: float, end: float) -> Iterator[tuple[float, float]]:
    """[start, end) cut at local midnights: the unit of fetching and of caching."""
    t = start
    while t < end:
        day = datetime.fromtimestamp(t).replace(hour=0, minute=0, second=0, microsecond=0)
        nxt = min((day + timedelta(days=1)).timestamp(), end)
        yield t, nxt
        t = nxt


def is_whole_day(start: float, end: float) -> bool:
    d = datetime.fromtimestamp(start)
    return (d.hour, d.minute, d.second) == (0, 0, 0) and \
        datetime.fromtimestamp(end) == d + timedelta(days=1)


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
