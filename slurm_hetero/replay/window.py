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

import numpy as np
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
    fixed_gres: str | None = None  # plain arm: the typed GRES asked for (`gpu:t4`), None: untyped
    one_node: bool = False  # the job fits one node and asks for one (a pod, not an MPI job)

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
    carried: int = 0  # jobs in the system before the replay's first instant (`select`)

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
    node_cpus: int = 0  # the most CPUs / accelerators one node has (one-node jobs beyond: skipped)
    node_accel: int = 0

    @classmethod
    def of(cls, site: Site) -> Capacity:
        part = next((p for p in site.partitions if p.default), site.partitions[0])
        groups = site.groups_in(part.name)
        return cls(cpus=sum(g.cpus * g.node_count for g in groups),
                   accel=sum(a.count * g.node_count for g in site.node_groups for a in g.accelerators),
                   max_limit_min=max_time_minutes(part.max_time),
                   node_cpus=max((g.cpus for g in groups), default=0),
                   node_accel=max((sum(a.count for a in g.accelerators) for g in site.node_groups),
                                  default=0))


@dataclass(frozen=True)
class ModelPool:
    model: str  # catalog id
    gres: str  # `gpu:t4`: what a plain job asks for it
    devices: int  # the site's devices of this model
    node_devices: int  # the most one node of it has
    node_cpus: int  # CPUs of that node


class ModelMix:
    """Which model a plain-arm accelerator job asks for when the trace names none: a draw
    weighted by the site's devices of each model (its model mix), among the models with a
    node that holds the job (devices and CPUs), seeded by the job's trace id, so the same
    job asks for the same model in every window, run and arm."""

    def __init__(self, site: Site) -> None:
        devices: Counter[str] = Counter()
        biggest: dict[str, tuple[int, int]] = {}  # model -> (devices, CPUs) of its largest node
        gres: dict[str, str] = {}
        for g in site.node_groups:
            for a in g.accelerators:
                devices[a.model.id] += a.count * g.node_count
                biggest[a.model.id] = max(biggest.get(a.model.id, (0, 0)), (a.count, g.cpus))
                gres[a.model.id] = f"{a.model.gres_name}:{a.model.gres_type}"
        self.pools = {m: ModelPool(m, gres[m], devices[m], *biggest[m]) for m in sorted(devices)}
        self._by_trace_name = {m.lower(): m for m in self.pools}
        for m in site.catalog.values():
            self._by_trace_name.setdefault(m.gres_type.lower(), m.id)

    def named(self, spec: str) -> str | None:
        """The site's model a trace names (its id or GRES type, any case); None: not here."""
        mid = self._by_trace_name.get(spec.strip().lower())
        return mid if mid in self.pools else None

    def choose(self, trace_id: str, devices: int, cpus: int, spec: str = "") -> ModelPool | None:
        """The model the job asks for (None: no node of any model holds it)."""
        fit = [p for p in self.pools.values() if p.node_devices >= devices and p.node_cpus >= cpus]
        named = [self.named(s) for s in spec.split("|") if s.strip()]
        wanted = [p for p in fit if p.model in named]
        cands = wanted or fit
        if not cands:
            return None
        total = sum(p.devices for p in cands)
        draw = int.from_bytes(hashlib.sha256(f"replay-model:{trace_id}".encode()).digest()[:8], "big") / 2**64
        acc = 0.0
        for p in cands:
            acc += p.devices / total
            if draw < acc:
                return p
        return cands[-1]


def select(df: pd.DataFrame, window: Window, capacity: Capacity, *, mix: ModelMix | None = None,
           one_node: bool = False, carry_over: bool = False) -> Selection:
    """The window's jobs (and its warm-up's), in submit order; every skip counted by reason.

    `mix`: accelerator jobs get the typed GRES the plain arm asks (`ModelMix.choose`; the
    trace's `model` column where it names one). `one_node`: every job asks for one node
    (pods), and one larger than every node is skipped. `carry_over`: jobs submitted before
    the replay's first instant that were still in the system then (trace end after it) are
    submitted at that instant, unmeasured, with what was left of their runtime (all of it
    when the trace started them later) and of their limit: the cluster starts as loaded as
    the trace's was (a trace whose jobs run for weeks would otherwise start empty)."""
    rows = df[(df["submit"] >= window.first) & (df["submit"] < window.end)]
    rows = rows.sort_values(["submit", "job_id"], kind="stable")
    sel = Selection(jobs=[])
    names = ("job_id", "submit", "runtime_s", "req_time_s", "req_cpus", "req_accel", "user")

    def columns(frame: pd.DataFrame) -> list[list[object]]:
        cols = [frame[c].astype(object if c in ("job_id", "user") else float).tolist() for c in names]
        cols.append([str(m) for m in frame["model"]] if "model" in frame else [""] * len(frame))
        return cols

    def add(job_id: object, submit: float, runtime: float, req_time: float, req_cpus: float,
            req_accel: float, user: object, spec: str, carried: bool = False) -> None:
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
        elif one_node and (cpus > capacity.node_cpus or accel > capacity.node_accel):
            sel.skipped["larger than every node"] += 1
        else:
            fixed = None
            if mix is not None and accel > 0:
                pool = mix.choose(str(job_id), accel, max(cpus, 1), "" if spec == "nan" else spec)
                if pool is None:
                    sel.skipped["no model's node holds it"] += 1
                    return
                fixed = pool.gres
            sel.jobs.append(ReplayJob(
                trace_id=str(job_id), offset_s=round(submit) - window.start, runtime_s=round(runtime),
                limit_min=limit, cpus=max(cpus, 1), accel=accel, user=str(user),
                measured=submit >= window.start and not carried, fixed_gres=fixed, one_node=one_node))

    if carry_over:
        first = window.first
        old = df[(df["submit"] < first) & (df["end"] > first) & (df["runtime_s"] >= 0)]
        old = old.sort_values(["submit", "job_id"], kind="stable")
        begun = old["start"].to_numpy(dtype="float64") < first
        elapsed = np.where(begun, first - old["start"].to_numpy(dtype="float64"), 0.0)
        before = len(sel.jobs)
        for (job_id, _, runtime, req_time, req_cpus, req_accel, user, spec), gone in zip(
                zip(*columns(old), strict=True), elapsed.tolist(), strict=True):
            add(job_id, float(first), float(runtime) - gone,
                float(req_time) - gone, req_cpus, req_accel, user, str(spec), carried=True)
        sel.carried = len(sel.jobs) - before
    for row in zip(*columns(rows), strict=True):
        add(*row)
    return sel


def demand_ratios(df: pd.DataFrame, capacity: Capacity, hours: float, step_s: int | None = None,
                  carry_over: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(candidate window starts, demand ÷ capacity of each): the work of the jobs submitted in
    [s, s + hours), each counted from its submit time to its end or the window's end, plus
    (`carry_over`) what jobs still in the system at s ran inside the window by the trace's
    own start and end, over what the site holds in the window; the larger of the
    accelerator and the CPU ratio. From the trace alone (no replay). Candidates every
    `step_s` (a quarter window, at most an hour) from the first submission."""
    span = round(hours * 3600)
    if span <= 0:
        raise InputError(f"--hours {hours:g}: give a positive number of trace hours")
    ok = df["submit"].notna() & (df["runtime_s"] >= 0)
    submit = df.loc[ok, "submit"].to_numpy(dtype="float64")
    if not len(submit):
        raise InputError("the trace has no job with a submit time and a runtime")
    order = np.argsort(submit, kind="stable")
    submit = submit[order]
    runtime = df.loc[ok, "runtime_s"].to_numpy(dtype="float64")[order]
    accel = np.nan_to_num(df.loc[ok, "req_accel"].to_numpy(dtype="float64")[order]).clip(min=0)
    accel = np.ceil(accel)
    cpus = np.ceil(np.nan_to_num(df.loc[ok, "req_cpus"].to_numpy(dtype="float64")[order]).clip(min=0))
    t_start = df.loc[ok, "start"].to_numpy(dtype="float64")[order]
    t_end = df.loc[ok, "end"].to_numpy(dtype="float64")[order]
    step = step_s or max(60, min(3600, span // 4))
    starts = np.arange(math.floor(submit[0]), math.floor(submit[-1]) + 1, step, dtype="float64")
    lo = np.searchsorted(submit, starts, side="left")
    hi = np.searchsorted(submit, starts + span, side="left")
    ratio = np.zeros(len(starts))
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        s0 = starts[i]
        run = np.minimum(runtime[a:b], s0 + span - submit[a:b])
        used_accel, used_cpus = float((accel[a:b] * run).sum()), float((cpus[a:b] * run).sum())
        if carry_over and a:
            inside = np.nan_to_num(np.minimum(t_end[:a], s0 + span) - np.maximum(t_start[:a], s0)).clip(min=0)
            used_accel += float((accel[:a] * inside).sum())
            used_cpus += float((cpus[:a] * inside).sum())
        parts = []
        if capacity.accel:
            parts.append(used_accel / (capacity.accel * span))
        if capacity.cpus:
            parts.append(used_cpus / (capacity.cpus * span))
        ratio[i] = max(parts, default=0.0)
    return starts, ratio


def busiest(df: pd.DataFrame, capacity: Capacity, hours: float, count: int,
            step_s: int | None = None, carry_over: bool = False, min_jobs: int = 0,
            not_before: float | None = None) -> list[tuple[int, float]]:
    """The `count` non-overlapping windows of `hours` with the highest demand ÷ capacity
    (`demand_ratios`), busiest first: (start, ratio). Only windows with at least `min_jobs`
    submissions (demand alone picks hours of a few huge jobs, where no scheduler has a
    choice) and none starting before `not_before` (the model's history)."""
    if count < 1:
        raise InputError(f"--count {count}: give 1 or more")
    if min_jobs < 0:
        raise InputError(f"--min-jobs {min_jobs}: give 0 or more")
    starts, ratio = demand_ratios(df, capacity, hours, step_s, carry_over)
    span = round(hours * 3600)
    submit = np.sort(df.loc[df["submit"].notna(), "submit"].to_numpy(dtype="float64"))
    jobs = np.searchsorted(submit, starts + span, side="left") - np.searchsorted(submit, starts, side="left")
    chosen: list[tuple[int, float]] = []
    for i in np.argsort(-ratio, kind="stable"):
        s = int(starts[i])
        if ratio[i] <= 0 or len(chosen) == count:
            break
        if jobs[i] < min_jobs or (not_before is not None and s < not_before):
            continue
        if all(abs(s - c) >= span for c, _ in chosen):
            chosen.append((s, float(ratio[i])))
    return chosen


def in_band(df: pd.DataFrame, capacity: Capacity, hours: float, count: int, band: tuple[float, float],
            min_jobs: int = 0, not_before: float | None = None, warmup_hours: float = 0.0,
            gap_s: float = 0.0) -> list[tuple[int, float]]:
    """`count` windows of `hours`, evenly spread in time over every window whose replayed load
    lies within `band` — a queue forms and can drain, so the scheduler's choices matter — with at
    least `min_jobs` submissions, none before `not_before`, none within `gap_s` of the previous
    one's end. The load is demand ÷ capacity over the span the replay submits (the warm-up and the
    window: `demand_ratios` of warm-up + hours, from the warm-up's start, without carry-over): a
    job the trace ran from before the warm-up is not replayed, so it must not count. A rule fixed
    before any replay, so the windows cannot be the ones that came out well. (start of the
    measured window, ratio), in time order."""
    lo, hi = band
    if not 0 < lo <= hi:
        raise InputError(f"--band {lo:g},{hi:g}: give 0 < LOW <= HIGH")
    if count < 1:
        raise InputError(f"--windows {count}: give 1 or more")
    lead = round(warmup_hours * 3600)
    starts, ratio = demand_ratios(df, capacity, hours + warmup_hours)
    starts = starts + lead  # each span's measured window starts after its warm-up
    span = round(hours * 3600)
    submit = np.sort(df.loc[df["submit"].notna(), "submit"].to_numpy(dtype="float64"))
    jobs = np.searchsorted(submit, starts + span, side="left") - np.searchsorted(submit, starts, side="left")
    fits: list[tuple[int, float]] = []
    for s, r, n in zip(starts, ratio, jobs, strict=True):
        if lo <= r <= hi and n >= min_jobs and (not_before is None or s >= not_before) \
                and (not fits or s >= fits[-1][0] + span + gap_s):
            fits.append((int(s), float(r)))
    if len(fits) <= count:
        return fits
    return [fits[round(i * (len(fits) - 1) / (count - 1))] for i in range(count)] if count > 1 \
        else [fits[len(fits) // 2]]


_BUSIEST = re.compile(r"^busiest(?::(\d{1,4}))?$")


def busiest_rank(text: str) -> int | None:
    """`--start busiest[:K]`: K (1: the busiest); None: not that form.

    >>> busiest_rank("busiest"), busiest_rank("busiest:3"), busiest_rank("+1h")
    (1, 3, None)
    """
    m = _BUSIEST.match(text.strip())
    if not m:
        return None
    k = int(m.group(1) or 1)
    if k < 1:
        raise InputError(f"--start {text!r}: busiest:K counts from 1")
    return k


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
