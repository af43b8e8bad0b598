"""What a replayed arm delivered, per pool: bounded slowdown, waits, utilisation, kills.

Pure: submissions (what was asked, when it was due) and sacct records (what Slurm did)
in, figures out. All times are on the cluster's clock (trace seconds).

- wait = start - the job's due time (its trace submit time on the replay clock), so
  the submitter's own lag counts against the replay, never in its favour; a requeued job's
  wait ends at its first start, and its earlier incarnations count in utilisation;
- bounded slowdown = max(1, (wait + run) / max(run, 10 s)), AVEbsld its mean;
- utilisation = resource-seconds in use inside the window / (capacity x window);
- killed at limit: TIMEOUT, or, where limits are soft (predicted limits: OverTimeLimit),
  CANCELLED by the bridge daemon at the job's own limit (its admin comment says so);
  killed early: either before the user's own limit (with `LIMIT_SLACK_S` for the kill's
  latency) — the bridge must never cause one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from slurm_hetero.replay.sacct import JobRecord
from slurm_hetero.replay.window import ReplayJob
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.hostlist import expand

BSLD_BOUND_S = 10.0
LIMIT_SLACK_S = 30.0
BAD_STATES = ("FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE", "CANCELLED")
ALL = "all"


@dataclass(frozen=True)
class Outcome:
    """One replayed job: the trace's side and Slurm's."""

    trace_id: str
    job_id: str
    measured: bool
    due: float  # faked time it was due (released), t0 + trace offset
    released: float | None
    start: float | None
    end: float | None
    state: str  # sacct's, or NOT_IN_SACCT
    runtime_s: int
    expected_s: int  # runtime, or the user's limit when the trace ran longer
    user_limit_s: int | None
    cpus: int
    accel: int
    pool: str
    limit_final_s: int | None = None  # the job's limit when it ended (the bridge may set it)
    predicted_s: float | None = None  # the bridge's p90 prediction, when it made one
    # A requeued job: each earlier incarnation, oldest first, as (start, end, pool, devices
    # or CPUs held). `start`/`end` are the last incarnation's.
    earlier: tuple[tuple[float, float, str, int], ...] = ()
    work: bool = False  # its body did work at its pool's speed (it ran no fixed runtime)
    ended_at_own_limit: bool = False  # cancelled by the bridge daemon at its own limit
    partition: str = ""  # where Slurm ran it (sacct's)

    @property
    def at_limit(self) -> bool:
        """Ended by its limit: Slurm's TIMEOUT, or the daemon's end where limits are soft."""
        return self.state == "TIMEOUT" or self.ended_at_own_limit

    @property
    def restarts(self) -> int:
        return len(self.earlier)

    @property
    def wait(self) -> float | None:
        """Until its first start (a requeued job's first incarnation)."""
        first = self.earlier[0][0] if self.earlier else self.start
        return None if first is None else max(0.0, first - self.due)

    @property
    def run(self) -> float | None:
        return None if self.start is None or self.end is None else self.end - self.start

    @property
    def runtime_error(self) -> float | None:
        """Ran for (end - start) minus what it should have run."""
        run = self.run
        return None if run is None else run - self.expected_s

    @property
    def killed_early(self) -> bool:
        if not self.at_limit:
            return False
        run = self.run or 0.0
        return self.user_limit_s is None or run < self.user_limit_s - LIMIT_SLACK_S


def bsld(wait: float, run: float, bound: float = BSLD_BOUND_S) -> float:
    """
    >>> bsld(0, 5), bsld(90, 10), bsld(30, 3)
    (1.0, 10.0, 3.3)
    """
    return max(1.0, (wait + run) / max(run, bound))


class Pools:
    """Each node's pool: `cpu@ARCH` for CPU work, `MODEL@ARCH` for accelerator work."""

    def __init__(self, site: Site) -> None:
        self.arch: dict[str, str] = {}
        self.capacity: dict[str, float] = {}
        self.units: dict[str, float] = {}
        cpu_only = {g.architecture for g in site.node_groups if not g.accelerators}
        for g in site.node_groups:
            for n in g.nodes:
                self.arch[n] = g.architecture
            if not g.accelerators or g.architecture not in cpu_only:
                key = f"cpu@{g.architecture}"
                self.capacity[key] = self.capacity.get(key, 0.0) + g.cpus * g.node_count
            for a in g.accelerators:
                key = f"{a.model.id}@{g.architecture}"
                self.capacity[key] = self.capacity.get(key, 0.0) + a.count * g.node_count
                self.units[key] = a.model.units
        self._gres_model = {a.model.gres_type: a.model.id for g in site.node_groups for a in g.accelerators}

    def of(self, rec: JobRecord | None) -> str:
        if rec is None or not rec.nodes or rec.nodes in ("None assigned", "(null)"):
            return "unassigned"
        first = expand(rec.nodes, limit=4096)[0] if rec.nodes else ""
        arch = self.arch.get(first, "unknown")
        if rec.accel:
            gtype = rec.accel_model
            return f"{self._gres_model.get(gtype or '', gtype or 'accel')}@{arch}"
        return f"cpu@{arch}"


def outcomes(jobs: Iterable[tuple[ReplayJob, str, float, float | None]],
             records: Mapping[str, JobRecord], pools: Pools, work: bool = False) -> list[Outcome]:
    """(job, Slurm job id, due, released) of each submission, joined to sacct's records
    (`sacct.by_job`: a requeued job's earlier incarnations included); `work`: accelerator
    jobs ran work bodies (`replay/body.py`), whose run time is their pool's, not the trace's."""
    out = []
    for job, jid, due, released in jobs:
        rec = records.get(jid)
        earlier = tuple((float(r.start), float(r.end), pools.of(r), r.accel or r.cpus)
                        for r in (rec.earlier if rec else ()) if r.start and r.end)
        out.append(Outcome(
            trace_id=job.trace_id, job_id=jid, measured=job.measured, due=due, released=released,
            start=float(rec.start) if rec and rec.start else None,
            end=float(rec.end) if rec and rec.end else None,
            state=rec.state if rec else "NOT_IN_SACCT", runtime_s=job.runtime_s,
            expected_s=job.expected_s, user_limit_s=job.limit_s,
            cpus=rec.cpus if rec and rec.cpus else job.cpus,
            # what it was given, or (never started: sacct has no allocation) what it asked
            accel=rec.accel if rec and rec.accel else job.accel, pool=pools.of(rec),
            limit_final_s=rec.limit_min * 60 if rec and rec.limit_min is not None else None,
            predicted_s=rec.predicted_s if rec else None,
            earlier=earlier, work=work and bool(job.accel),
            ended_at_own_limit=bool(rec and rec.ended_at_own_limit),
            partition=rec.partition if rec else ""))
    return out


def _q(values: list[float], q: float) -> float | None:
    return float(np.quantile(np.asarray(values, dtype=np.float64), q)) if values else None


@dataclass
class PoolFigures:
    pool: str
    jobs: int = 0
    started: int = 0
    ave_bsld: float | None = None
    wait_mean: float | None = None
    wait_p50: float | None = None
    wait_p90: float | None = None
    utilisation: float | None = None
    killed_at_limit: int = 0
    killed_early: int = 0
    failed: int = 0
    unfinished: int = 0
    # Jobs the bridge gave a runtime prediction (those that had not ended when the replay
    # stopped: from slurmctld, sacct.with_live_comments).
    predicted: int = 0
    bad_states: dict[str, int] = field(default_factory=dict)
    # Accelerator work in normalized units (site catalog): unit-hours used inside the window
    # and what the pool holds in it; ALL sums every accelerator pool. None: no units known.
    units_used_h: float | None = None
    units_capacity_h: float | None = None
    accel_jobs: int = 0  # measured jobs that asked for accelerators
    # Their mean wait; one never started counts its wait until the replay stopped looking (a
    # lower bound), so an arm that leaves jobs pending is not credited with shorter waits.
    accel_wait_mean: float | None = None

    @property
    def units_utilisation(self) -> float | None:
        if self.units_used_h is None or not self.units_capacity_h:
            return None
        return self.units_used_h / self.units_capacity_h


def usage_in(o: Outcome, lo: float, hi: float, end_now: float) -> float:
    """Resource-seconds of `o`'s last incarnation inside [lo, hi): CPUs (or devices for
    accelerator work)."""
    if o.start is None:
        return 0.0
    end = o.end if o.end is not None else end_now
    span = max(0.0, min(end, hi) - max(o.start, lo))
    return span * (o.accel if o.accel else o.cpus)


def usage_by_pool(outs: Iterable[Outcome], lo: float, hi: float, end_now: float) -> dict[str, float]:
    """Resource-seconds inside [lo, hi) per pool, every incarnation of a requeued job in the
    pool it ran in."""
    used: dict[str, float] = {}
    for o in outs:
        used[o.pool] = used.get(o.pool, 0.0) + usage_in(o, lo, hi, end_now)
        for start, end, pool, held in o.earlier:
            used[pool] = used.get(pool, 0.0) + max(0.0, min(end, hi) - max(start, lo)) * held
    return used


def slowdown(o: Outcome, end_now: float) -> float:
    """A job's bounded slowdown when the replay stopped looking at `end_now`."""
    if o.start is not None:  # still running: it runs what the trace says (its body sleeps that)
        run = o.run if o.run is not None else float(o.expected_s)
        return bsld(o.wait or 0.0, run)
    # never started: its wait so far, its expected run (a lower bound)
    return bsld(max(0.0, end_now - o.due), float(o.expected_s))


def accel_wait_all(outs: Iterable[Outcome], end_now: float) -> float | None:
    """Every accelerator job's mean wait, carried-over ones included (due at the replay's first
    instant); one never started counts its wait until the replay stopped. A placement that
    starts the carried-over backlog sooner, and one that keeps holes for newcomers, move this
    and the measured jobs' wait in opposite directions."""
    waits = [o.wait if o.wait is not None else max(0.0, end_now - o.due) for o in outs if o.accel]
    return sum(waits) / len(waits) if waits else None


def figures(outs: list[Outcome], capacity: Mapping[str, float], t0: float, hours: float,
            end_now: float, units: Mapping[str, float] | None = None) -> dict[str, PoolFigures]:
    """Per pool and ALL: measured jobs' slowdown and waits, every job's use of the window;
    with `units` (normalized units per device of each accelerator pool) its use in units."""
    lo, hi = t0, t0 + hours * 3600
    by: dict[str, list[Outcome]] = {ALL: []}
    for o in outs:
        by.setdefault(o.pool, []).append(o)
        by[ALL].append(o)
        for _, _, pool, _ in o.earlier:
            by.setdefault(pool, [])
    used = usage_by_pool(outs, lo, hi, end_now)
    res: dict[str, PoolFigures] = {}
    for pool, group in sorted(by.items()):
        f = PoolFigures(pool)
        measured = [o for o in group if o.measured]
        f.jobs = len(measured)
        started = [o for o in measured if o.start is not None]
        f.started = len(started)
        waits = [o.wait for o in started if o.wait is not None]
        slow = [slowdown(o, end_now) for o in measured]
        f.ave_bsld = float(np.mean(slow)) if slow else None
        f.wait_mean = float(np.mean(waits)) if waits else None
        f.wait_p50, f.wait_p90 = _q(waits, 0.5), _q(waits, 0.9)
        f.killed_at_limit = sum(o.at_limit for o in measured)
        f.killed_early = sum(o.killed_early for o in measured)
        bad: dict[str, int] = {}
        for o in measured:
            if (o.state in BAD_STATES and not o.at_limit) or o.state == "NOT_IN_SACCT":
                bad[o.state] = bad.get(o.state, 0) + 1
        f.bad_states, f.failed = bad, sum(bad.values())
        f.unfinished = sum(o.end is None for o in measured)
        f.predicted = sum(o.predicted_s is not None for o in measured)
        accel_waits = [o.wait if o.wait is not None else max(0.0, end_now - o.due)
                       for o in measured if o.accel]
        f.accel_jobs = sum(1 for o in measured if o.accel)
        f.accel_wait_mean = float(np.mean(accel_waits)) if accel_waits else None
        if units:
            pools = [k for k in units if k in capacity] if pool == ALL else [pool] if pool in units else []
            if pools:
                f.units_capacity_h = sum(units[k] * capacity[k] for k in pools) * (hi - lo) / 3600
                f.units_used_h = sum(units[k] * used.get(k, 0.0) for k in pools) / 3600
        if pool == ALL:
            cpu_pools = [k for k in capacity if k.startswith("cpu@")]
            cpu_cap = sum(capacity[k] for k in cpu_pools)
            cpu_used = sum(used.get(k, 0.0) for k in cpu_pools)
            f.utilisation = cpu_used / (cpu_cap * (hi - lo)) if cpu_cap else None
        elif capacity.get(pool):
            f.utilisation = used.get(pool, 0.0) / (capacity[pool] * (hi - lo))
        res[pool] = f
    return res


def distribution(values: list[float]) -> dict[str, float | int | None]:
    """n, median, p90 and max of |values|, and the mean (signed)."""
    a = [abs(v) for v in values]
    return {"n": len(values), "mean": float(np.mean(values)) if values else None,
            "p50_abs": _q(a, 0.5), "p90_abs": _q(a, 0.9), "max_abs": max(a) if a else None}


def runtime_errors(outs: list[Outcome]) -> list[float]:
    """Per finished job: how much longer (or shorter) than its runtime it ran, trace s."""
    return [e for o in outs if (o.state == "COMPLETED" or o.at_limit) and not o.restarts and not o.work
            and (e := o.runtime_error) is not None]


def release_lags(outs: list[Outcome]) -> list[float]:
    """How late each release came after its due time (trace s)."""
    return [o.released - o.due for o in outs if o.released is not None]


def as_json(figs: Mapping[str, PoolFigures]) -> dict[str, Any]:
    return {k: {kk: (None if isinstance(vv, float) and math.isnan(vv) else vv)
                for kk, vv in asdict(v).items()} for k, v in figs.items()}
