"""`slurm-hetero bridge run`: the bridge daemon beside slurmctld.

Every round (a few seconds) it
1. refreshes the capacity snapshot — whose generation time is also the daemon's heartbeat:
   job_submit.lua shortens no job while the snapshot is stale;
2. extends the limits of running jobs whose limit the bridge shortened to a predicted
   quantile (backfill mode), before they run out: doubling, finally the user's own limit —
   so no job is ever killed before the limit its user asked for;
3. sets SiteFactor on pending jobs: shorter predicted runtime → higher, with aging so that
   nothing starves (formula in `site_factor`);
4. where the site enables `migration.pending`, moves pending --accel jobs whose own pool
   cannot start them to another pool of their request that can, and with
   `migration.running` requeues running --checkpoint --migratable jobs into a pool that
   frees up when that finishes them clearly sooner (bridge/migrate.py).
5. where the site enables `power:`, lets the power keeper wake and put to sleep idle nodes
   from the forecast, about once a minute (slurm_hetero/power/keeper.py).
On start it does step 2 first (jobs may have come close to a shortened limit while it was
down). SIGTERM stops it cleanly; a slurmctld that does not answer costs a round, not the
daemon.
"""

from __future__ import annotations

import math
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slurm_hetero.bridge.migrate import Move, Planner, Requeue, take
from slurm_hetero.bridge.snapshot import Forecast, PoolCapacity, take_snapshot
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.power.keeper import Keeper
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.commands import requeue_argv
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.scontrol import admin_comment_argv, move_job_argv, update_job_argv, update_jobs_argv
from slurm_hetero.slurm.squeue import SQUEUE_JSON_ARGV, QueuedJob, parse_squeue_json

Log = Callable[[str], None]


@dataclass(frozen=True)
class FactorPolicy:
    """SiteFactor = round(cap * max(short, age)), where

    short = 1 - ln(1 + p50_min) / ln(1 + horizon_min), clamped to [0, 1]: a 1-minute job
            gets nearly the cap, a job predicted at the horizon (7 days) or longer gets 0;
    age   = min(1, waited_s / age_full_s): after age_full_s (1 day) of waiting any job has
            the cap, so long jobs are never starved by a stream of short ones.
    p50 is the bridge's central prediction (from the admin comment), else the job's limit.
    The value is rounded to `step` (1% of the cap): the age term grows every second, and
    without steps every pending job would need an update RPC every round (20,000 pending
    jobs, 20,000 RPCs each round); with them a job changes about every age_full_s/100.
    """

    cap: int = 10_000
    horizon_min: float = 7 * 24 * 60
    age_full_s: float = 24 * 3600
    step: int = 100

    def site_factor(self, p50_s: float, waited_s: float) -> int:
        short = 1 - math.log1p(max(p50_s, 0) / 60) / math.log1p(self.horizon_min)
        age = min(1.0, max(waited_s, 0) / self.age_full_s)
        raw = self.cap * max(0.0, min(1.0, max(short, age)))
        return min(self.cap, self.step * round(raw / self.step))


@dataclass(frozen=True)
class ExtendPolicy:
    """Extend a shortened job when less than `margin_s` (or 10% of its limit) is left:
    double the limit, never past the user's own limit."""

    margin_s: float = 120.0

    def new_limit_min(self, limit_min: int, elapsed_s: float, user_min: int) -> int | None:
        left = limit_min * 60 - elapsed_s
        if limit_min >= user_min or left > max(self.margin_s, 0.1 * limit_min * 60):
            return None
        grown = max(limit_min * 2, math.ceil((elapsed_s + 2 * self.margin_s) / 60))
        return min(user_min, grown)


FORECAST_EVERY_S = 60.0
FACTOR_BATCH = 500  # job ids per scontrol command (a few KB of argv)
# A user limit the bridge recorded beyond a year is not a limit anyone asked for.
MAX_USER_LIMIT_MIN = 366 * 24 * 60


@dataclass
class JobRow:
    job_id: str
    state: str
    limit_min: int | None
    elapsed_s: float
    waited_s: float
    decision: dict[str, object] = field(default_factory=dict)


def job_row(j: QueuedJob, now: float) -> JobRow:
    """The fields the daemon needs from one `squeue --json` job (every value structured:
    the comment, name and work dir a user writes can never pose as a time limit or as the
    admin comment)."""
    elapsed = now - j.start_time if j.state == "RUNNING" and j.start_time else 0.0
    return JobRow(job_id=str(j.job_id), state=j.state, limit_min=j.time_limit_min,
                  elapsed_s=max(0.0, elapsed),
                  waited_s=max(0.0, now - j.submit_time) if j.submit_time else 0.0,
                  decision=parse_comment(j.admin_comment))


def user_limit(decision: dict[str, object]) -> int | None:
    """The user's own limit the bridge recorded, if it is a sane number of minutes."""
    v = decision.get("user_limit_min")
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_USER_LIMIT_MIN:
        return None
    return v


class BridgeDaemon:
    def __init__(self, site: Site, runner: Runner, snapshot: Path, every: float = 5.0,
                 factor: FactorPolicy | None = None, extend: ExtendPolicy | None = None,
                 log: Log = print, forecaster: Callable[[], Forecast] | None = None):
        self.site, self.runner, self.snapshot, self.every = site, runner, snapshot, every
        self.factor = factor or FactorPolicy()
        self.extend = extend or ExtendPolicy()
        self.log = log
        self.stopping = False
        # What we set last (22.05's scontrol does not show SiteFactor): one RPC per change.
        self.factors: dict[str, int] = {}
        # The demand forecast (forecast/ passes a refresher in from the CLI): once a minute.
        self.forecaster = forecaster
        self.forecast: Forecast = {}
        self.forecast_t = -math.inf
        # Power saving (site power:): the keeper wakes and sleeps nodes from the forecast.
        self.keeper = Keeper(site, runner, log=log) if site.power.enabled else None
        self.planner = Planner(site) if site.migration.pending else None

    def queue(self) -> list[QueuedJob]:
        """Every job (one `squeue --json`); malformed entries are logged and skipped."""
        try:
            jobs, problems = parse_squeue_json(self.runner.out(SQUEUE_JSON_ARGV, timeout=30))
        except ValueError as e:
            raise RuntimeFailure(f"squeue --json: unreadable answer: {e}") from e
        for p in problems[:5]:
            self.log(f"squeue --json: skipped {p}")
        return jobs

    def jobs(self, queue: list[QueuedJob] | None = None) -> list[JobRow]:
        now, rows = time.time(), []
        for j in self.queue() if queue is None else queue:
            try:
                rows.append(job_row(j, now))
            except Exception as e:  # one bad job costs itself, never the round
                self.log(f"job {j.job_id}: skipped: {type(e).__name__}: {e}")
        return rows

    def extend_limits(self, jobs: list[JobRow]) -> int:
        done = 0
        for j in jobs:
            user_min = user_limit(j.decision)
            if j.state != "RUNNING" or j.decision.get("shortened") is not True \
                    or j.limit_min is None or user_min is None:
                continue
            new = self.extend.new_limit_min(j.limit_min, j.elapsed_s, user_min)
            if new is None:
                continue
            try:
                self.runner.run(update_job_argv(j.job_id, TimeLimit=new))
            except RuntimeFailure as e:  # the job may have ended meanwhile; next round retries
                self.log(f"job {j.job_id}: limit not extended: {e}")
                continue
            self.log(f"job {j.job_id}: limit {j.limit_min} -> {new} min "
                     f"(ran {j.elapsed_s / 60:.1f} min, user limit {user_min})")
            done += 1
        return done

    def set_factors(self, jobs: list[JobRow]) -> int:
        """SiteFactor of every pending job whose value changed; jobs of one value share one
        scontrol command (one process; scontrol still sends slurmctld an RPC per job)."""
        pending = {j.job_id for j in jobs if j.state == "PENDING"}
        self.factors = {k: v for k, v in self.factors.items() if k in pending}
        changed: dict[int, list[str]] = {}
        for j in jobs:
            if j.state != "PENDING":
                continue
            pred = j.decision.get("pred")
            p50 = pred.get("p50") if isinstance(pred, dict) else None
            estimate = (float(p50) if isinstance(p50, int | float) and not isinstance(p50, bool)
                        and math.isfinite(p50) else (j.limit_min or 60) * 60.0)
            value = self.factor.site_factor(estimate, j.waited_s)
            if value != self.factors.get(j.job_id):
                changed.setdefault(value, []).append(j.job_id)
        for value, ids in sorted(changed.items()):
            for k in range(0, len(ids), FACTOR_BATCH):
                batch = ids[k:k + FACTOR_BATCH]
                # check=False: a job may have started meanwhile (scontrol goes on with the rest)
                self.runner.run(update_jobs_argv(batch, SiteFactor=value), check=False)
                self.factors.update(dict.fromkeys(batch, value))
        return sum(len(ids) for ids in changed.values())

    def refresh_forecast(self) -> None:
        if self.forecaster is None or time.monotonic() - self.forecast_t < FORECAST_EVERY_S:
            return
        self.forecast_t = time.monotonic()
        try:
            self.forecast = self.forecaster()
        except Exception as e:  # a forecast is advice: the heartbeat goes on without it
            self.log(f"forecast skipped: {type(e).__name__}: {e}")

    def move_pending(self, queue: list[QueuedJob], caps: dict[str, PoolCapacity]) -> list[Move]:
        """Apply this round's moves; a move Slurm refuses is logged and costs only itself."""
        if self.planner is None:
            return []
        done = []
        for m in self.planner.plan(queue, caps, time.time()):
            try:
                self.runner.run(move_job_argv(m.job_id, m.tres_per_node, m.partition, m.features))
            except (RuntimeFailure, ValueError) as e:  # it may have started meanwhile
                self.log(f"job {m.job_id}: not moved to {m.to_pool}: {e}")
                continue
            # The record follows the job; if this fails the job still runs where it now is.
            self.runner.run(admin_comment_argv(m.job_id, m.comment), check=False)
            if m.release:  # requeued to move: its checkpoint is written, no 120 s hold
                self.runner.run(update_job_argv(m.job_id, StartTime="now"), check=False)
            self.log(f"job {m.job_id}: moved {m.from_pool} -> {m.to_pool} ({m.tres_per_node}): {m.why}")
            done.append(m)
        return done

    def requeue_running(self, queue: list[QueuedJob], caps: dict[str, PoolCapacity]) -> list[Requeue]:
        """Requeue the running jobs the planner sends to a freed pool; the record names the
        pool first, so the move happens even if the daemon restarts meanwhile."""
        if self.planner is None or not self.site.migration.running:
            return []
        done = []
        for r in self.planner.plan_running(queue, caps, time.time()):
            try:
                self.runner.run(admin_comment_argv(r.job_id, r.comment))
                self.runner.run(requeue_argv([r.job_id]))
            except (RuntimeFailure, ValueError) as e:  # ended meanwhile, or not requeueable
                self.log(f"job {r.job_id}: not requeued for {r.to_pool}: {e}")
                continue
            self.log(f"job {r.job_id}: requeued {r.from_pool} -> {r.to_pool}: {r.why}")
            done.append(r)
        return done

    def round(self) -> None:
        queue = self.queue()
        self.refresh_forecast()
        caps = take_snapshot(self.site, self.runner, self.snapshot, queue, self.forecast)
        jobs = self.jobs(queue)
        self.extend_limits(jobs)
        self.set_factors(jobs)
        if self.keeper is not None:
            self.keeper.round(self.forecast)  # throttles itself (once a minute), never raises
        moved = self.move_pending(queue, caps)
        for m in moved:  # the devices those moves take are not free for a requeue
            if m.to_pool in caps:
                take(caps[m.to_pool], m.n)
        self.requeue_running(queue, caps)

    def run(self, rounds: int | None = None) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        try:  # repair first: jobs may be close to a shortened limit after a pause
            self.extend_limits(self.jobs())
        except Exception as e:
            self.log(f"startup repair skipped: {type(e).__name__}: {e}")
        n = 0
        while not self.stopping and (rounds is None or n < rounds):
            t0 = time.monotonic()
            try:
                self.round()
            except RuntimeFailure as e:
                self.log(f"round skipped: {e}")
            except Exception as e:  # a bug must cost a round, not the heartbeat of every job
                self.log(f"round failed: {type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}")
            n += 1
            while not self.stopping and time.monotonic() - t0 < self.every and (rounds is None or n < rounds):
                time.sleep(0.1)
        self.log("bridge daemon stopped")
