"""`slurm-hetero bridge run`: the bridge daemon beside slurmctld.

Every round (a few seconds) it
1. refreshes the capacity snapshot — whose generation time is also the daemon's heartbeat:
   job_submit.lua shortens no job while the snapshot is stale;
2. keeps the limits of partitions with predicted limits (backfill mode) true: extends the
   limits of running jobs the bridge shortened to a predicted quantile before they run out
   (doubling, finally the user's own limit, never past MaxTime), so that backfill plans with
   an end still ahead; and ends every running job there that reached its own limit. Slurm
   kills nobody there before that: OverTimeLimit is MaxTime (site/timelimits.py), so a job
   outlives its soft limit whatever is down, and without this daemon it may run past its own
   limit, by OverTimeLimit at most;
3. sets SiteFactor on pending jobs: shorter predicted runtime → higher, with aging so that
   nothing starves (formula in `site_factor`);
4. where the site enables `migration.pending`, moves pending --accel jobs whose own pool
   cannot start them to another pool of their request that can, and with
   `migration.running` requeues running --checkpoint --migratable jobs into a pool that
   frees up when that finishes them clearly sooner (bridge/migrate.py).
5. about every HISTORY_EVERY_S, reads the jobs that ended since the last time and publishes
   the users' fresh history for the bridge's model (bridge/history.py), when it has one;
6. where the site enables `power:`, lets the power keeper wake and put to sleep idle nodes
   from the forecast, about once a minute (slurm_hetero/power/keeper.py), and append what it
   saw and did to StateSaveLocation/hetero-power-history.jsonl (power/history.py). Without
   `--forecast` it takes a forecast another process publishes beside the snapshot
   (power/published.py), if there is a fresh one.
On start it does step 2 first (jobs may have passed a shortened limit, or their own, while
it was down). SIGTERM stops it cleanly; a slurmctld that does not answer costs a round, not the
daemon.
"""

from __future__ import annotations

import math
import resource
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slurm_hetero.bridge.history import OnlineHistory
from slurm_hetero.bridge.migrate import Move, Planner, Requeue, take_moves
from slurm_hetero.bridge.snapshot import Forecast, PoolCapacity, take_snapshot
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.jobs.sitefactor import FactorPolicy
from slurm_hetero.power.history import HISTORY_FILE, PowerHistory
from slurm_hetero.power.keeper import Keeper
from slurm_hetero.power.published import FORECAST_FILE
from slurm_hetero.power.published import reader as published_forecast
from slurm_hetero.site.model import Site
from slurm_hetero.site.timelimits import max_time_min
from slurm_hetero.slurm.commands import cancel_argv, requeue_argv
from slurm_hetero.slurm.comment import merge_comment, parse_comment
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.scontrol import admin_comment_argv, move_job_argv, update_job_argv, update_jobs_argv
from slurm_hetero.slurm.squeue import QueuedJob, parse_squeue_json, squeue_json_argv

Log = Callable[[str], None]


# EASY++'s correction (Tsafrir, Etsion, Feitelson 2007) when a job outlives its prediction:
# the prediction moves up to the next of these, in minutes, never past the user's limit.
TSAFRIR_STEPS_MIN = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 3000, 6000)


@dataclass(frozen=True)
class ExtendPolicy:
    """Extend a shortened job when less than `margin_s` (or `share` of its limit) is left, or
    it has run past it, never past its own limit (`user_min`): double the limit (the bridge's
    model), or with `correction="tsafrir"` (the model's choice, recorded with the decision as
    "ext") go up to the next of TSAFRIR_STEPS_MIN that covers the job's run so far and two
    margins. The margin keeps backfill's plan right, not the job alive (OverTimeLimit does
    that): backfill plans a job past its limit to end OverTimeLimit after it (UNLIMITED: a
    whole limit from now), far off. Two reads of the queue (at most MAX_QUEUE_GAP_S apart)
    fall within the default margin. The margin's cost: a job that would end inside it, within
    its limit, is extended all the same, and backfill plans with the longer limit until it ends
    (the replay's `*-tight` arms: 1.5 rounds and no share measured no better, README)."""

    margin_s: float = 120.0
    share: float = 0.1

    def new_limit_min(self, limit_min: int, elapsed_s: float, user_min: int,
                      correction: str = "double") -> int | None:
        left = limit_min * 60 - elapsed_s
        if limit_min >= user_min or left > max(self.margin_s, self.share * limit_min * 60):
            return None
        need = math.ceil((elapsed_s + 2 * self.margin_s) / 60)
        if correction == "tsafrir":
            grown = next((s for s in TSAFRIR_STEPS_MIN if s > limit_min and s >= need), user_min)
        else:
            grown = max(limit_min * 2, need)
        return min(user_min, grown)


FORECAST_EVERY_S = 60.0
# A user's finished jobs reach the model within this (plus a round): one sacct of the jobs
# that ended meanwhile, slurmdbd's work, not slurmctld's.
HISTORY_EVERY_S = 20.0
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
    partition: str = ""
    end_s: float | None = None  # slurmctld's end of a running job by its current limit
    admin_comment: str = ""  # the whole field, foreign text included (our record is merged in)


def job_row(j: QueuedJob, now: float) -> JobRow:
    """The fields the daemon needs from one `squeue --json` job (every value structured:
    the comment, name and work dir a user writes can never pose as a time limit or as the
    admin comment)."""
    elapsed = now - j.start_time if j.state == "RUNNING" and j.start_time else 0.0
    return JobRow(job_id=str(j.job_id), state=j.state, limit_min=j.time_limit_min,
                  elapsed_s=max(0.0, elapsed),
                  waited_s=max(0.0, now - j.submit_time) if j.submit_time else 0.0,
                  decision=parse_comment(j.admin_comment), partition=j.partition,
                  end_s=j.end_time, admin_comment=j.admin_comment)


def user_limit(decision: dict[str, object]) -> int | None:
    """The user's own limit the bridge recorded, if it is a sane number of minutes."""
    v = decision.get("user_limit_min")
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_USER_LIMIT_MIN:
        return None
    return v


def own_limit_min(limit_min: int, decision: dict[str, object], max_min: int | None) -> int | None:
    """The limit a job holds by its user's wish, in minutes. A job the bridge shortened: the
    user's limit it recorded, at most MaxTime (`max_min`: plain Slurm never starts a longer
    one there), but not below its limit now (a user may raise a pending job's limit up to
    MaxTime, an operator any); a broken record counts as MaxTime. Any other job: its limit.
    None: not known (a broken record where MaxTime is UNLIMITED).

    >>> own_limit_min(1, {"shortened": True, "user_limit_min": 4320}, 2880)  # asked past MaxTime
    2880
    >>> own_limit_min(30, {"shortened": True, "user_limit_min": 20}, 2880)  # raised since
    30
    >>> own_limit_min(5, {"pred": {"p90": 900}}, 2880), own_limit_min(1, {"shortened": True}, None)
    (5, None)
    """
    if decision.get("shortened") is not True:
        return limit_min
    user = user_limit(decision)
    own = max_min if user is None else user if max_min is None else min(user, max_min)
    return None if own is None else max(limit_min, own)


def cpu_seconds() -> float:
    """CPU time of this process and of the commands it ran and waited for (squeue, sinfo,
    scontrol): what the duty limits below count, whatever else the machine is doing."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


MAX_DUTY = 0.25  # share of one CPU the daemon's rounds may take
MAX_GAP_S = 10.0
QUEUE_DUTY = 0.1  # share of one CPU reading the whole queue may take (squeue's own CPU too)
MAX_QUEUE_GAP_S = 60.0


class BridgeDaemon:
    def __init__(self, site: Site, runner: Runner, snapshot: Path, every: float = 5.0,
                 factor: FactorPolicy | None = None, extend: ExtendPolicy | None = None,
                 log: Log = print, forecaster: Callable[[], Forecast] | None = None,
                 power_history: Path | None = None, online: OnlineHistory | None = None):
        self.site, self.runner, self.snapshot, self.every = site, runner, snapshot, every
        self.stretched = self.queue_stretched = False
        self.last_queue: list[QueuedJob] | None = None
        self.queue_due = -math.inf
        self.factor = factor or FactorPolicy()
        self.extend = extend or ExtendPolicy()
        self.log = log
        self.stopping = False
        # What we set last (22.05's scontrol does not show SiteFactor): one RPC per change.
        self.factors: dict[str, int] = {}
        # The demand forecast (forecast/ passes a refresher in from the CLI): once a minute.
        # Without one, a forecast another process publishes beside the snapshot (replay's).
        self.forecaster = forecaster
        if forecaster is None and site.power.enabled:
            self.forecaster = published_forecast(snapshot.parent / FORECAST_FILE)
        self.forecast: Forecast = {}
        self.forecast_t = -math.inf
        # Power saving (site power:): the keeper wakes and sleeps nodes from the forecast.
        # Its history (one JSON line per pool and round) feeds the report's power section.
        history = PowerHistory(power_history or snapshot.parent / HISTORY_FILE)
        self.keeper = Keeper(site, runner, log=log, history=history) if site.power.enabled else None
        self.planner = Planner(site) if site.migration.pending else None
        # Limits: each partition's MaxTime (caps every extension), and the partitions whose
        # limits Slurm treats as soft (OverTimeLimit): there this daemon ends jobs at their own.
        self.max_min = {p.name: max_time_min(p) for p in site.partitions}
        self.soft = frozenset(p.name for p in site.partitions if p.predicted_limits)
        self.online = online
        self.online_t = -math.inf

    def queue(self) -> list[QueuedJob]:
        """Every job (one `squeue --json`); malformed entries are logged and skipped."""
        try:
            jobs, problems = parse_squeue_json(self.runner.out(squeue_json_argv(), timeout=30))
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

    def keep_limits(self, jobs: list[JobRow]) -> None:
        """End the jobs that reached their own limit, then extend shortened ones."""
        ended = self.end_at_own_limits(jobs)
        self.extend_limits([j for j in jobs if j.job_id not in ended])

    def end_at_own_limits(self, jobs: list[JobRow]) -> set[str]:
        """End each running job of a partition with soft limits (predicted_limits) that has
        reached its own limit (`own_limit_min`), counted from slurmctld's end time for its
        current limit, which includes time suspended. Returns the ids ended.

        Why scancel: with OverTimeLimit at MaxTime, slurmctld cannot be made to time the job
        out now (an update sets its end no earlier than now, and it kills only OverTimeLimit
        after that end), so the job ends CANCELLED, not TIMEOUT. The record says why first,
        `"ended":"own_limit"` in its admin comment (sacct -o State,AdminComment shows it), so
        that tools tell it from a user's own scancel. Slurm's grace is the same: SIGTERM, then
        SIGKILL after KillWait."""
        now, done = time.time(), set()
        for j in jobs:
            if j.state != "RUNNING" or j.partition not in self.soft or j.limit_min is None:
                continue
            own = own_limit_min(j.limit_min, j.decision, self.max_min.get(j.partition))
            # slurmctld's end counts time suspended and node boot (later than start + limit);
            # a job being preempted has its end moved to the grace's (earlier), and is Slurm's to
            # requeue or cancel: never earlier than start + limit, then.
            nominal = now - j.elapsed_s + j.limit_min * 60
            end = nominal if j.end_s is None else max(j.end_s, nominal)
            if own is None or now < end + (own - j.limit_min) * 60:
                continue
            try:  # the record is advice: a job whose comment cannot take it still ends
                record = merge_comment(j.admin_comment, {"ended": "own_limit", "own_limit_min": own})
                self.runner.run(admin_comment_argv(j.job_id, record), check=False)
            except (RuntimeFailure, ValueError) as e:
                self.log(f"job {j.job_id}: end at its own limit not recorded: {e}")
            try:
                self.runner.run(cancel_argv([j.job_id]))
            except RuntimeFailure as e:  # it may have ended meanwhile; next round retries
                self.log(f"job {j.job_id}: not ended at its own limit: {e}")
                continue
            self.log(f"job {j.job_id}: ended at its own limit of {own} min "
                     f"(ran {j.elapsed_s / 60:.1f} min, limit {j.limit_min})")
            done.add(j.job_id)
        return done

    def extend_limits(self, jobs: list[JobRow]) -> int:
        done = 0
        for j in jobs:
            if j.state != "RUNNING" or j.decision.get("shortened") is not True or j.limit_min is None:
                continue
            user_min = own_limit_min(j.limit_min, j.decision, self.max_min.get(j.partition))
            if user_min is None:
                continue
            new = self.extend.new_limit_min(j.limit_min, j.elapsed_s, user_min,
                                            "tsafrir" if j.decision.get("ext") == "tsafrir" else "double")
            if new is None:
                continue
            try:
                self.runner.run(update_job_argv(j.job_id, TimeLimit=new))
            except RuntimeFailure as e:  # the job may have ended meanwhile; next round retries
                self.log(f"job {j.job_id}: limit not extended: {e}")
                continue
            self.log(f"job {j.job_id}: limit {j.limit_min} -> {new} min "
                     f"(ran {j.elapsed_s / 60:.1f} min, own limit {user_min})")
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
            # What the bridge ordered the job by: "sf_s" where not its p50 (`model export
            # --order upper`: the p90; `--order area`: CPU seconds), else the p50, else the
            # job's limit.
            tried = (j.decision.get("sf_s"), pred.get("p50") if isinstance(pred, dict) else None)
            seconds = [float(v) for v in tried
                       if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
            estimate = seconds[0] if seconds else (j.limit_min or 60) * 60.0
            value = self.factor.site_factor(estimate, j.waited_s)
            sf = j.decision.get("sf")  # what the bridge set at submit (bridge.lua)
            if j.job_id not in self.factors and isinstance(sf, int) and not isinstance(sf, bool):
                self.factors[j.job_id] = sf
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

    def refresh_history(self) -> None:
        if self.online is None or time.monotonic() - self.online_t < HISTORY_EVERY_S:
            return
        self.online_t = time.monotonic()
        try:
            self.online.refresh()
        except Exception as e:  # advice for predictions: the heartbeat goes on without it
            self.log(f"history skipped: {type(e).__name__}: {e}")

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
        # The whole queue only when due (see queue_gap); the heartbeat and the nodes' state
        # (sinfo) every round. In between, the snapshot counts the last read's pending jobs.
        t0 = time.monotonic()
        full = self.last_queue is None or t0 >= self.queue_due
        if full:
            c0 = cpu_seconds()
            self.last_queue = self.queue()
            self.queue_due = t0 + self.queue_gap(cpu_seconds() - c0)
        queue = self.last_queue or []
        self.refresh_forecast()
        caps: dict[str, PoolCapacity] | None = None
        try:
            caps = take_snapshot(self.site, self.runner, self.snapshot, queue, self.forecast)
        except OSError as e:
            # The state folder full or read-only: no heartbeat, so the bridge shortens no new
            # job; the limits of running jobs are still kept below (they need no file).
            self.log(f"snapshot not written: {type(e).__name__}: {e}")
        self.refresh_history()
        if self.keeper is not None:
            self.keeper.round(self.forecast)  # throttles itself (once a minute), never raises
        if not full:
            return
        jobs = self.jobs(queue)
        self.keep_limits(jobs)
        self.set_factors(jobs)
        if caps is None:  # moves are planned on a capacity the snapshot was built from
            return
        take_moves(caps, self.move_pending(queue, caps))
        self.requeue_running(queue, caps)

    def queue_gap(self, took: float) -> float:
        """Seconds until the next read of the whole queue (`took`: its CPU seconds, squeue's
        included): every round on a small queue; on a
        large one (20,000 jobs: `squeue --json` ~3 s of CPU, our parse ~1.3 s) at most
        QUEUE_DUTY of a CPU, and never more than MAX_QUEUE_GAP_S apart: shortened limits are
        extended `margin` (120 s) before they run out, so two reads fall within it, and a job
        that reached its own limit is ended within one gap."""
        gap, self.queue_stretched = self._stretch(
            took, QUEUE_DUTY, MAX_QUEUE_GAP_S, self.queue_stretched,
            "reading the queue took {took:.1f} s: read every {gap:.0f} s while it is this large")
        return gap

    def gap(self, took: float) -> float:
        """Seconds from one round's start to the next (`took`: the round's CPU seconds,
        `cpu_seconds`): `every`, stretched on a large queue so the daemon spends at most
        MAX_DUTY of a CPU (a 20,000-job `squeue --json` takes
        ~1.7 s to read), never past MAX_GAP_S: the snapshot must stay fresh (the bridge
        reads it as stale after 30 s) and shortened limits are extended in time."""
        gap, self.stretched = self._stretch(took, MAX_DUTY, MAX_GAP_S, self.stretched,
                                            "a round took {took:.1f} s: rounds {gap:.1f} s apart while the "
                                            "queue is this large")
        return gap

    def _stretch(self, took: float, duty: float, cap: float, was: bool, say: str) -> tuple[float, bool]:
        """`every`, or `took / duty` when longer, at most `cap`; said once when it starts to
        make a difference (over a second more). Returns (gap, stretched)."""
        gap = min(max(self.every, took / duty), max(self.every, cap))
        stretched = gap > self.every + 1.0
        if stretched and not was:
            self.log(say.format(took=took, gap=gap))
        return gap, stretched

    def run(self, rounds: int | None = None) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        try:  # repair first: jobs may be past a shortened limit, or their own, after a pause
            self.keep_limits(self.jobs())
        except Exception as e:
            self.log(f"startup repair skipped: {type(e).__name__}: {e}")
        n = 0
        while not self.stopping and (rounds is None or n < rounds):
            t0, c0 = time.monotonic(), cpu_seconds()
            try:
                self.round()
            except RuntimeFailure as e:
                self.log(f"round skipped: {e}")
            except Exception as e:  # a bug must cost a round, not the heartbeat of every job
                self.log(f"round failed: {type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}")
            n += 1
            gap = self.gap(cpu_seconds() - c0)
            while not self.stopping and time.monotonic() - t0 < gap and (rounds is None or n < rounds):
                time.sleep(0.1)
        self.log("bridge daemon stopped")
