"""Replaying a window on a fresh cluster per arm, and the fidelity check.

One arm: boot a fresh cluster (accelerated clock; with or without the bridge), add one
Slurm account per trace user, map the cluster's clock, submit and release every job at
its time, wait for them to end (or for the drain limit), read sacct, stop the cluster.

Who submits (`users`):
- "root" (default): every job runs as root under its trace user's account. Nothing on
  the machine changes; fairshare is kept per association (root in account t_u12 is one
  association per trace user), but Slurm sees one user, so the bridge's runtime model,
  whose history is per user, sees every job as a user it knows nothing about.
- "local": every trace user is a local system user (`t_u12`, created with useradd when
  missing: no home, no shell, kept afterwards), its jobs submitted with `sbatch --uid`;
  the bridge's model is trained and exported under those names, so its per-user history
  applies. The workdir must then be reachable by other users (every folder above it
  world-searchable: not under /root or pytest's private tmp).
"""

from __future__ import annotations

import os
import pwd
import stat
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.fileio import write_atomic, write_json_atomic
from slurm_hetero.replay import sacct
from slurm_hetero.replay.backend import ClusterFactory
from slurm_hetero.replay.clockmap import ClockMap, calibrate, pause_words, wall_offset
from slurm_hetero.replay.fidelity import Fidelity, measure
from slurm_hetero.replay.metrics import (
    Outcome,
    PoolFigures,
    Pools,
    as_json,
    distribution,
    figures,
    outcomes,
    release_lags,
    runtime_errors,
)
from slurm_hetero.replay.submit import BODY, DRAIN_UNTIL, Progress, Request, Submitter, WorkSpec, work_body
from slurm_hetero.replay.window import Selection, Window, account_for, check_speed
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.commands import cancel_argv, sacctmgr_argv
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import squeue_json_argv

Say = Callable[[str], None]
# Something that looks at the cluster while an arm replays: started with the cluster's runner
# and clock map before the first submission; the function it returns stops it, called once
# the replay stops looking (before sacct is read and the cluster goes down), on failure too.
Watch = Callable[[Runner, ClockMap], Callable[[], None]]


@dataclass(frozen=True)
class Arm:
    name: str
    bridge: bool  # SPANK options + job_submit.lua + snapshot + bridge daemon
    model: bool  # the runtime model compiled into the bridge (predicted limits, priorities)
    migrate: bool = False  # the site's migration.pending on: the daemon moves pending --accel jobs
    # Accelerator jobs do work at their pool's speed, checkpoint and resume (submit.WorkSpec).
    work: bool = False
    migrate_running: bool = False  # migration.running on too: checkpointed jobs move while running
    float_pools: bool = False  # the site's placement.float on: a job may start in any equal pool
    # placement.node_fit ("starts now" counts a node's free CPUs and memory too): on, off, or
    # None: as the site says (on unless it says off)
    node_fit: bool | None = None
    # The model's limits in backfill (partitions with predicted_limits) as the site says; off:
    # the model only orders the queue (SiteFactor), every job keeps its user's limit.
    predicted_limits: bool = True
    # What predicts: "model" (the trained one, limits at its upper quantile), "model-central"
    # (the same model, limits at its central prediction), "easy++" (the last-two average) or
    # "clairvoyant" (each job's own runtime: a ceiling, replay/oracle.py; "clairvoyant-area"
    # ordered by its CPU time), or another of MODEL_EXPORTS.
    predictor: str = "model"
    # Slurm's SchedulerParameters for the arm (a slurm.extra_lines entry of its site); "": the
    # site's own. bf_job_part_count_reserve=1: backfill keeps a reservation for the first
    # pending job of each partition only (EASY), not for every pending job (Slurm's default).
    scheduler: str = ""
    # The bridge daemon extends a shortened limit this many of its rounds before it ends, and
    # not at 10% of it (None: as the product ships, 120 s or three rounds, and 10%): the
    # margin extends limits the job would have ended within, and backfill plans with them.
    margin_rounds: float | None = None


TIGHT_ROUNDS = 1.5  # the next read (one round) and half a round's lateness
EASY_RESERVE = "bf_job_part_count_reserve=1"

ARMS = {
    "plain": Arm("plain", bridge=False, model=False),
    "bridge": Arm("bridge", bridge=True, model=True),
    "bridge-nomodel": Arm("bridge-nomodel", bridge=True, model=False),
    # The model's priorities without its limits: which of the two a bridge arm's change is.
    "bridge-nolimits": Arm("bridge-nolimits", bridge=True, model=True, predicted_limits=False),
    # The classic reference on the same Slurm: EASY++'s predictions as the limits backfill
    # plans with (extended by the daemon as it extends the model's), shortest predicted first.
    "easy++": Arm("easy++", bridge=True, model=True, predictor="easy++"),
    # The model's central prediction as the limit (`model export --limit central`).
    "bridge-central": Arm("bridge-central", bridge=True, model=True, predictor="model-central"),
    # bridge-order90 with limits shortened only where the p90 is at most 0.9 of the user's
    # (`--shorten-when-sure 0.9 --order upper`): a job the model is unsure of keeps its limit.
    "bridge-cautious": Arm("bridge-cautious", bridge=True, model=True, predictor="model-cautious"),
    # bridge-central with the queue ordered by the upper quantile (`model export --order upper`).
    "bridge-order90": Arm("bridge-order90", bridge=True, model=True, predictor="model-order90"),
    # A ceiling, not a product arm: each job's own trace runtime as its prediction
    # (replay/oracle.py), through the same bridge, limits, SiteFactor and extensions.
    "clairvoyant": Arm("clairvoyant", bridge=True, model=True, predictor="clairvoyant"),
    # EASY backfill (one reservation per partition) on plain Slurm, with the central limits,
    # and with the ceiling's: which part of a gain is the setting's and which the predictions'.
    "plain-easy": Arm("plain-easy", bridge=False, model=False, scheduler=EASY_RESERVE),
    "central-easy": Arm("central-easy", bridge=True, model=True, predictor="model-central",
                        scheduler=EASY_RESERVE),
    "clairvoyant-easy": Arm("clairvoyant-easy", bridge=True, model=True, predictor="clairvoyant",
                            scheduler=EASY_RESERVE),
    # Limits extended only TIGHT_ROUNDS daemon rounds before they end (at x50: 75 trace s,
    # not 150 and 10%): what the margin costs the central limits, and the ceiling.
    "central-tight": Arm("central-tight", bridge=True, model=True, predictor="model-central",
                         margin_rounds=TIGHT_ROUNDS),
    "clairvoyant-tight": Arm("clairvoyant-tight", bridge=True, model=True, predictor="clairvoyant",
                             margin_rounds=TIGHT_ROUNDS),
    # The central limits with the queue ordered by CPU time, p50 x the job's CPUs
    # (`model export --order area`), and the ceiling ordered by its own CPU time.
    "bridge-area": Arm("bridge-area", bridge=True, model=True, predictor="model-area"),
    "clairvoyant-area": Arm("clairvoyant-area", bridge=True, model=True, predictor="clairvoyant-area"),
    # bridge-nomodel with floating placement (placement.float): compare it with bridge-nomodel
    "bridge-float": Arm("bridge-float", bridge=True, model=False, float_pools=True),
    # bridge-nomodel with placement.node_fit on, and off (free devices alone, as before fit;
    # bridge-nomodel's results before 2026-12-07 are that)
    "bridge-fit": Arm("bridge-fit", bridge=True, model=False, node_fit=True),
    "bridge-nofit": Arm("bridge-nofit", bridge=True, model=False, node_fit=False),
    # bridge-nomodel with pending-job migration: compare it with bridge-nomodel
    "bridge-migrate": Arm("bridge-migrate", bridge=True, model=False, migrate=True),
    # With work bodies (a job on a faster pool ends sooner; a requeued one resumes): without
    # migration, with pending-job migration, and with running jobs moved too.
    "bridge-work": Arm("bridge-work", bridge=True, model=False, work=True),
    "bridge-migrate-work": Arm("bridge-migrate-work", bridge=True, model=False, migrate=True, work=True),
    "bridge-migrate-running": Arm("bridge-migrate-running", bridge=True, model=False, migrate=True,
                                  work=True, migrate_running=True),
}


def parse_arms(text: str) -> list[Arm]:
    """
    >>> [a.name for a in parse_arms("plain, bridge")]
    ['plain', 'bridge']
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in ARMS]
    if bad or not names:
        raise InputError(f"--arms {text!r}: choose from {', '.join(ARMS)} (comma-separated)")
    return [ARMS[n] for n in names]


@dataclass
class ArmResult:
    arm: str
    speed: float
    window: Window
    t0: float  # faked time of the window's start
    end_now: float  # faked time the replay stopped looking
    outcomes: list[Outcome]
    figures: dict[str, PoolFigures]
    all_ended: bool
    submit_failed: list[tuple[str, str]] = field(default_factory=list)
    # Real seconds: boot, replay, total, and paused (the machine stopped during the replay:
    # clockmap.wall_offset; absent in files older than it).
    seconds: dict[str, float] = field(default_factory=dict)
    # Each pool's size (CPUs or devices), for utilisation over time; {} in files older than it.
    capacity: dict[str, float] = field(default_factory=dict)

    @property
    def real_s_per_trace_hour(self) -> float:
        span_h = (self.window.hours + self.window.warmup_hours)
        return self.seconds.get("total", 0.0) / span_h if span_h else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "speed": self.speed,
            "window": {"start": self.window.start, "hours": self.window.hours,
                       "warmup_hours": self.window.warmup_hours},
            "t0": self.t0, "end_now": self.end_now, "all_ended": self.all_ended,
            "figures": as_json(self.figures),
            "runtime_error": distribution(runtime_errors(self.outcomes)),
            "release_lag": distribution(release_lags(self.outcomes)),
            "submit_failed": [{"trace_id": t, "error": e} for t, e in self.submit_failed],
            "seconds": self.seconds, "real_s_per_trace_hour": self.real_s_per_trace_hour,
            "jobs": [o.__dict__ for o in self.outcomes],
            "capacity": self.capacity,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArmResult:
        w = d["window"]
        # "first_start": files of this format's first version, where it was stored, not derived.
        outs = [Outcome(**{**{k: v for k, v in o.items() if k != "first_start"},
                           "earlier": tuple(tuple(e) for e in o.get("earlier", ()))}) for o in d["jobs"]]
        figs = {k: PoolFigures(**v) for k, v in d["figures"].items()}
        return cls(d["arm"], float(d["speed"]), Window(int(w["start"]), float(w["hours"]),
                   float(w["warmup_hours"])), float(d["t0"]), float(d["end_now"]), outs, figs,
                   bool(d["all_ended"]), [(f["trace_id"], f["error"]) for f in d["submit_failed"]],
                   dict(d["seconds"]), {k: float(v) for k, v in d.get("capacity", {}).items()})


USERS = ("root", "local")


def add_accounts(runner: Runner, cluster: str, accounts: list[str], users: str = "root",
                 chunk: int = 100) -> None:
    """One account per trace user; in it root, or the local user of the same name."""
    for i in range(0, len(accounts), chunk):
        names = ",".join(accounts[i:i + chunk])
        runner.run(sacctmgr_argv("add", "account", names, f"cluster={cluster}",
                                 "description=replayed trace user", "organization=replay"), timeout=120)
        if users == "root":
            runner.run(sacctmgr_argv("add", "user", "root", f"account={names}", f"cluster={cluster}"),
                       timeout=120)
    if users == "local":
        for name in accounts:  # one each: a list of users and accounts would pair them all
            runner.run(sacctmgr_argv("add", "user", name, f"account={name}", f"defaultaccount={name}",
                                     f"cluster={cluster}"), timeout=120)


def ensure_local_users(names: list[str], runner: Runner | None = None) -> list[str]:
    """Create the system users replay submits as (no home, no login); returns those created."""
    made = []
    for name in names:
        try:
            pwd.getpwnam(name)
            continue
        except KeyError:
            pass
        r = (runner or Runner()).run(["useradd", "--system", "--no-create-home", "--shell",
                                      "/usr/sbin/nologin", "--gid", "nogroup", name], check=False)
        if r.returncode != 0:
            raise RuntimeFailure(f"useradd {name} failed ({r.stderr.strip()[-200:]}); --users local "
                                 "needs root, or use --users root")
        made.append(name)
    return made


def check_reachable(path: Path) -> None:
    """--users local: jobs of other users run the body script and cd into the workdir."""
    p = path.absolute()
    for d in [p, *p.parents]:
        try:
            mode = d.stat().st_mode
        except OSError:
            continue
        if not mode & stat.S_IXOTH:
            raise InputError(f"--workdir {path}: {d} is not searchable by other users, so jobs "
                             "submitted as local users cannot run there; choose a workdir under "
                             "e.g. /var/tmp (or use --users root)")


def request_for(site: Site, arm: Arm, users: str = "root") -> Request:
    """How accelerator jobs ask: the bridge's `--accel=VENDOR:N` (`any` when the site mixes
    vendors), or the plain GRES (typed where the job fixed a model) in the first partition
    that has it (no job_submit.lua routes them in the plain arm)."""
    vendors = {a.model.vendor for g in site.node_groups for a in g.accelerators}
    spec = vendors.pop() if len(vendors) == 1 else "any"
    for g in site.node_groups:
        if g.accelerators and g.partitions:
            return Request(arm.bridge, g.accelerators[0].model.gres_name, g.partitions[0],
                           as_users=users == "local", accel_spec=spec)
    return Request(arm.bridge, as_users=users == "local", accel_spec=spec)


def migrating_site(site: Site, where: Path, running: bool = False) -> Site:
    """The site with `migration.pending` (and with `running`, `migration.running`) on,
    written beside the arm's cluster (the bridge daemon and job_submit.lua read the site
    from its file)."""
    if site.migration.pending and (site.migration.running or not running):
        return site
    on = {"pending": True, **({"running": True} if running else {})}

    def change(data: dict[str, Any]) -> None:
        data["migration"] = {**(data.get("migration") or {}), **on}

    return rewritten_site(site, where, f"migration {', '.join(on)} on", change)


def placement_site(site: Site, where: Path, setting: str, on: bool = True) -> Site:
    """The site with `placement.SETTING` (float, node_fit) on, or off."""
    if getattr(site.placement, setting) == on:
        return site

    def change(data: dict[str, Any]) -> None:
        data["placement"] = {**(data.get("placement") or {}), setting: on}

    return rewritten_site(site, where, f"placement.{setting} {'on' if on else 'off'}", change)


def unlimited_site(site: Site, where: Path) -> Site:
    """The site with predicted_limits off on every partition: jobs keep their users' limits."""
    if not any(p.predicted_limits for p in site.partitions):
        return site

    def change(data: dict[str, Any]) -> None:
        for part in data.get("partitions") or []:
            if isinstance(part, dict):
                part["predicted_limits"] = False

    return rewritten_site(site, where, "predicted_limits off", change)


def scheduler_site(site: Site, where: Path, parameters: str) -> Site:
    """The site with slurm.conf's SchedulerParameters set to `parameters` (a site that sets
    them already is refused: the arm would measure a mix of both)."""
    from slurm_hetero.site.slurmlines import check_extra_line

    if any(check_extra_line(line)[0] == "schedulerparameters" for line in site.slurm.extra_lines):
        raise InputError(f"an arm with SchedulerParameters={parameters}: the site sets SchedulerParameters "
                         "already (slurm.extra_lines)")

    def change(data: dict[str, Any]) -> None:
        slurm = data.setdefault("slurm", {})  # the site was checked: a mapping or absent
        slurm["extra_lines"] = [*(slurm.get("extra_lines") or []), f"SchedulerParameters={parameters}"]

    return rewritten_site(site, where, f"SchedulerParameters={parameters}", change)


def rewritten_site(site: Site, where: Path, what: str, change: Callable[[dict[str, Any]], None]) -> Site:
    """The site's file with `change` made, written at `where` and loaded from there."""
    if site.path is None:
        raise InputError(f"an arm with {what} needs a site loaded from a file")
    from slurm_hetero.site import load_site

    data = yaml.safe_load(site.path.read_text(encoding="utf-8")) or {}
    change(data)
    where.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(str(where), f"# the replayed site with {what}\n" + yaml.safe_dump(data, sort_keys=False))
    return load_site(where)


def reference_units(site: Site) -> tuple[float, float]:
    """The site's mean units per accelerator device (capacity-weighted) and its slowest
    model's: what `WorkSpec` scales work and limits by."""
    pools = Pools(site)
    accel = [k for k in pools.units if pools.capacity.get(k)]
    if not accel:
        raise InputError("work bodies need a site with accelerators")
    cap = sum(pools.capacity[k] for k in accel)
    return sum(pools.units[k] * pools.capacity[k] for k in accel) / cap, min(pools.units[k] for k in accel)


def work_spec(site: Site, workdir: Path) -> WorkSpec:
    """Work bodies on this cluster: each accelerator node's units per device in a file the
    bodies read, a checkpoint folder every job's user can write in."""
    ref, slow = reference_units(site)
    lines = [f"{n} {g.accelerators[0].model.units!r}" for g in site.node_groups if g.accelerators
             for n in g.nodes]
    units_file = workdir / "node-units.txt"
    write_atomic(str(units_file), "\n".join(lines) + "\n")
    checkpoints = workdir / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    os.chmod(checkpoints, 0o1777)  # jobs of local users make their folders here
    return WorkSpec(ref, slow, units_file, checkpoints)


def progress_line(arm: str, window: Window, p: Progress, total: int) -> str:
    """Trace time from the window's start: negative in the warm-up, past its end in the drain.

    >>> progress_line("plain", Window(0, 0.5), Progress(10, 9, 2, 3, 4, 754.0), 52)
    '[plain] trace +00:12:34 of 00:30:00  submitted 10/52  released 9  pending 2  running 3  ended 4'
    >>> progress_line("plain", Window(0, 0.5, 1.0), Progress(1, 1, 0, 1, 0, -2700.0), 52)[:45]
    '[plain] trace -00:45:00 of 00:30:00 (warm-up)'
    >>> progress_line("plain", Window(0, 0.5), Progress(52, 52, 0, 1, 51, 1900.0), 52)[:43]
    '[plain] trace +00:31:40 of 00:30:00 (drain)'
    """
    def hms(s: float) -> str:
        s = int(abs(s))
        return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"

    span = window.hours * 3600
    phase = " (warm-up)" if p.trace_s < 0 else " (drain)" if p.trace_s > span else ""
    return (f"[{arm}] trace {'-' if p.trace_s < 0 else '+'}{hms(p.trace_s)} of {hms(span)}{phase}"
            f"  submitted {p.submitted}/{total}  released {p.released}  pending {p.pending}"
            f"  running {p.running}  ended {p.ended}")


def run_arm(factory: ClusterFactory, workdir: Path, site: Site, sel: Selection, window: Window,
            arm: Arm, speed: float, model: Path | None = None, say: Say | None = None,
            drain_hours: float | None = None, lead_s: float = 2.0, users: str = "root",
            save: Path | None = None, on_start: Callable[[float], None] | None = None,
            drain_until: str = "ended", submitter: Callable[..., Submitter] = Submitter,
            watch: Watch | None = None) -> ArmResult:
    """Replay `sel` (the window's jobs) on a fresh cluster; `model`: for bridge arms with a
    model. `save`: write the arm's result there as soon as it is known (JSON). `on_start`:
    called with t0 (the faked time of the window's start) before the first submission.
    `drain_until`: "started" stops once every measured job has started (submit.DRAIN_UNTIL).
    `submitter`: what submits and drains (a Submitter; the soak's rides out outages).
    `watch`: see `Watch` (e.g. a sampler of the queue while the jobs wait)."""
    if arm.model and model is None:
        raise InputError(f"arm {arm.name} needs a runtime model (--model)")
    if not sel.jobs:
        raise InputError("no job of the trace falls in this window (see --start, --hours)")
    speed = check_speed(speed)
    if drain_until not in DRAIN_UNTIL:
        raise InputError(f"--drain-until {drain_until}: choose {' or '.join(DRAIN_UNTIL)}")
    if users not in USERS:
        raise InputError(f"--users {users}: choose {' or '.join(USERS)}")
    if users == "local":
        check_reachable(workdir)
        made = ensure_local_users(sel.accounts)
        if say and made:
            say(f"created {len(made)} local users for the trace's users ({made[0]}, ...)")
    if arm.migrate:
        site = migrating_site(site, workdir.with_name(f"{workdir.name}.site.yaml"), arm.migrate_running)
    if arm.float_pools:
        site = placement_site(site, workdir.with_name(f"{workdir.name}.site.yaml"), "float")
    if arm.node_fit is not None:
        site = placement_site(site, workdir.with_name(f"{workdir.name}.site.yaml"), "node_fit", arm.node_fit)
    if arm.scheduler:
        site = scheduler_site(site, workdir.with_name(f"{workdir.name}.site.yaml"), arm.scheduler)
    # Without a model no limit is shortened: no OverTimeLimit either, so Slurm times jobs
    # out itself, as in the arms' earlier results.
    if not arm.predicted_limits or not arm.model:
        site = unlimited_site(site, workdir.with_name(f"{workdir.name}.site.yaml"))
    t_start = time.monotonic()
    cluster = factory(workdir)
    try:
        boot = cluster.up(site, speed=speed, bridge=arm.bridge, model=model if arm.model else None,
                          margin_rounds=arm.margin_rounds)
        if say:
            say(f"[{arm.name}] cluster up in {boot:.1f} s (x{speed:g}) in {cluster.workdir}")
        runner = cluster.runner
        add_accounts(runner, site.name, sel.accounts, users)
        if users == "local":  # their container jobs keep runc's state in their runtime folder
            for name in sel.accounts:
                cluster.user_ready(name)
        script = cluster.workdir / "replay-job.sh"
        req = request_for(site, arm, users)
        if arm.work:
            req = replace(req, work=work_spec(site, cluster.workdir))
        script.write_text(work_body(sys.executable) if arm.work else BODY)
        os.chmod(script, 0o755)
        clock = calibrate(runner, speed)
        first = min(j.offset_s for j in sel.jobs)
        t0 = clock.now() + (lead_s + 1.0) * speed - first
        if on_start is not None:
            on_start(t0)
        show = (lambda p: say(progress_line(arm.name, window, p, len(sel.jobs)))) if say else None
        sub = submitter(runner, sel.jobs, clock, t0, req, script, cluster.workdir,
                        lead_s=lead_s, say=show, every_s=max(5.0, 120.0 / speed))
        t_replay = time.monotonic()
        stop = watch(runner, clock) if watch is not None else None
        wall0 = wall_offset()
        try:
            sub.run()
            deadline = None if drain_hours is None else t0 + (window.hours + drain_hours) * 3600
            all_ended = sub.drain(deadline, until=drain_until)
            end_now = clock.now()
        finally:
            if stop is not None:
                stop()
        paused = max(0.0, wall_offset() - wall0)
        if say and pause_words(paused, speed):
            say(f"[{arm.name}] {pause_words(paused, speed)}")
        since, until = t0 + first - 3600, end_now + 3600
        text = (sacct.fetch_settled(runner, since, until) if all_ended
                else sacct.fetch_text(runner, since, until))
        (cluster.workdir / "sacct.psv").write_text(text)
        records = sacct.by_job(sacct.parse_rows(text))
        replay_s = time.monotonic() - t_replay
        if not all_ended:
            live = runner.out(squeue_json_argv(), timeout=120)
            (cluster.workdir / "squeue.json").write_text(live)
            records = sacct.with_live_comments(records, live)
            ids = [s.job_id for s in sub.subs]
            for i in range(0, len(ids), 500):
                runner.run(cancel_argv(ids[i:i + 500]), check=False, timeout=60)
        outs = outcomes(((s.job, s.job_id, s.target, s.released) for s in sub.subs), records, Pools(site),
                        work=arm.work)
        pools = Pools(site)
        figs = figures(outs, pools.capacity, t0, window.hours, end_now, units=pools.units)
    except RuntimeFailure as e:
        raise RuntimeFailure(f"[{arm.name}] {e}\n{cluster.explain()}") from e
    finally:
        cluster.down()
    result = ArmResult(arm.name, speed, window, t0, end_now, outs, figs, all_ended,
                       [(j.trace_id, msg) for j, msg in sub.failed],
                       {"boot": round(boot, 1), "replay": round(replay_s, 1),
                        "total": round(time.monotonic() - t_start, 1), "paused": round(paused, 1)},
                       capacity=dict(Pools(site).capacity))
    if save is not None:
        save.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(str(save), result.to_json(), indent=1)
    return result


def _history_before(trace: pd.DataFrame, window: Window, users: str) -> pd.DataFrame:
    """The trace's jobs that ended before the replay's first submission; with
    `users="local"` under the local users' names the replayed jobs carry."""
    from slurm_hetero.jobs import table

    before = trace[(trace["end"] >= 0) & (trace["end"] < window.first)].copy()
    if users == "local":
        before["user"] = [account_for(str(u)) for u in table.labels(before["user"])]
    return before


# How each trained-model predictor is exported: (limit, sure, order) of `model export`.
MODEL_EXPORTS: dict[str, tuple[str, float | None, str]] = {
    "model": ("upper", None, "central"), "model-central": ("central", None, "central"),
    "model-order90": ("central", None, "upper"), "model-cautious": ("central", 0.9, "upper"),
    "model-area": ("central", None, "area"),
}


# Predictors that train no model: EASY++'s last-two average, and the replay's ceiling.
UNTRAINED = ("easy++", "clairvoyant", "clairvoyant-area")


def train_model(trace: pd.DataFrame, window: Window, out: Path, say: Say | None = None,
                users: str = "root", limit: str = "upper") -> Path:
    """A runtime model trained only on jobs that ended before the replay's first
    submission, with the users' history as of then, exported for job_submit.lua (its tail
    beside it: the daemon's online history goes on from there)."""
    kind = next(k for k, v in MODEL_EXPORTS.items() if v == (limit, None, "central"))
    return predictor_files(trace, window, out.parent, [kind], say, users, {kind: out.name})[kind]


def predictor_files(trace: pd.DataFrame, window: Window, out: Path, predictors: Iterable[str],
                    say: Say | None = None, users: str = "root",
                    names: dict[str, str] | None = None) -> dict[str, Path]:
    """Each predictor in `predictors` (MODEL_EXPORTS', or UNTRAINED's) as a chunk in
    `out`: the model trained once, on the jobs that ended before the window, exported once per
    kind."""
    from slurm_hetero.predict import export_lua
    from slurm_hetero.predict.train import train
    from slurm_hetero.replay import oracle

    wanted = sorted(set(predictors))
    unknown = [p for p in wanted if p not in MODEL_EXPORTS and p not in UNTRAINED]
    if unknown:
        raise ValueError(f"unknown predictors {unknown}")
    before = _history_before(trace, window, users)
    files: dict[str, Path] = {}
    model = None
    for kind in wanted:
        path = out / ((names or {}).get(kind) or f"{kind}.lua")
        if kind == "easy++":
            files[kind] = _export(export_lua.export_easy(before, until=window.first), before, window, path)
            continue
        if kind.startswith("clairvoyant"):
            text = oracle.export_clairvoyant(oracle.runtimes(trace, window),
                                             order="area" if kind == "clairvoyant-area" else "central")
            files[kind] = _export(text, before, window, path)
            continue
        if model is None:
            if say:
                say(f"training the runtime model on {len(before)} jobs that ended before the window")
            try:
                model = train(before, until=window.first)
            except InputError as e:
                raise InputError(f"--model auto: {e} before the window; start it later or give "
                                 "--model none") from e
        limit, sure, order = MODEL_EXPORTS[kind]
        text = export_lua.export_text(model, before, until=window.first, limit=limit, sure=sure, order=order)
        files[kind] = _export(text, before, window, path)
    return files


def _export(text: str, before: pd.DataFrame, window: Window, out: Path) -> Path:
    from slurm_hetero.predict import export_lua
    from slurm_hetero.predict.tail import tail_path, write_tail

    export_lua.write(text, out)
    write_tail(before, window.first, tail_path(out))
    return out


def check_fidelity(factory: ClusterFactory, workdir: Path, site: Site, sel: Selection, window: Window,
                   arm: Arm, speed: float, model: Path | None, say: Say | None = None,
                   drain_hours: float | None = None, users: str = "root", out: Path | None = None,
                   ) -> tuple[Fidelity, ArmResult, ArmResult]:
    """The same (short) window at x1 and at `speed` (each saved in `out` when given)."""
    runs = []
    for k in (1.0, speed):
        save = out / f"fidelity-{arm.name}-x{k:g}.json" if out else None
        runs.append(run_arm(factory, workdir, site, sel, window, arm, k, model, say, drain_hours,
                            users=users, save=save))
    x1, xk = runs
    return measure(x1.outcomes, xk.outcomes, x1.figures, xk.figures, speed), x1, xk
