"""Submitting a window: each job held a moment before its (scaled) submit time, released
at it; Slurm — and only Slurm — decides when it starts.

Why held, then released: a burst of trace submissions (dozens in one trace second) is one
`scontrol release` here, not dozens of sbatch calls that would smear it over real seconds
(each sbatch takes a few real ms, i.e. K times as many trace ms). Every job is submitted
`lead_s` real seconds or more before its time, so sbatch's cost never delays a release.

The body is `sleep RUNTIME` (trace seconds): the job inherits the shared clock from the
submitting environment, so it sleeps RUNTIME on the cluster's clock, RUNTIME/K real
seconds. Everything passed to sbatch is an argv element; the only trace data in it are
numbers this module formatted and the account name from `window.account_for`.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.replay.clockmap import ClockMap
from slurm_hetero.replay.window import ReplayJob
from slurm_hetero.slurm.commands import (
    release_argv,
    sbatch_script_argv,
    squeue_reasons_argv,
    squeue_states_argv,
)
from slurm_hetero.slurm.runner import Runner

BODY = ("#!/bin/sh\n# slurm-hetero replay: a trace job's body, its runtime on the cluster's clock\n"
        "exec sleep \"$1\"\n")
# How long a replay drains after its last submission: until every job has ended, or until
# every measured job has started (its wait, and so its slowdown, is known then).
DRAIN_UNTIL = ("ended", "started")


def held_ids(out: str) -> set[str]:
    """The ids `squeue -o "%i %r"` (squeue_reasons_argv) shows held by a user or an admin.

    >>> sorted(held_ids("7 JobHeldUser\\n8 Priority\\n9 JobHeldAdmin\\n"))
    ['7', '9']
    """
    rows = (ln.split() for ln in out.splitlines())
    return {r[0] for r in rows if len(r) == 2 and r[1] in ("JobHeldUser", "JobHeldAdmin")}


ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")


def work_body(python: str) -> str:
    """The body of arms with work bodies: `sleep RUNTIME` for a job given one argument, else
    `replay/body.py` (WORK DEVICES UNITS_FILE) under `python` (this interpreter's path)."""
    return ("#!/bin/sh\n# slurm-hetero replay: a trace job's body; accelerator jobs do work at their "
            "pool's speed\n"
            "if [ \"$#\" -eq 1 ]; then exec sleep \"$1\"; fi\n"
            f"exec {shlex.quote(python)} -m slurm_hetero.replay.body \"$@\"\n")


@dataclass(frozen=True)
class WorkSpec:
    """Accelerator jobs as work (`replay/body.py`): a trace job that ran R seconds on N
    devices is R x N x `ref_units` unit-seconds of work, done at the units it holds. The trace
    does not say which model a pod ran on: `ref_units` is the site's mean units per device
    (capacity-weighted), so on average a job runs as long as the trace says. Its limit is
    stretched by ref_units / `slow_units` (the slowest model): an `--accel=VENDOR:N` user's
    limit covers the slowest device the request allows, so no job is killed for the model
    it got. Bridge arms also ask for `--checkpoint` (a folder per job under `checkpoints`)
    and `--migratable`."""

    ref_units: float
    slow_units: float
    units_file: Path
    checkpoints: Path

    def work(self, job: ReplayJob) -> float:
        return job.runtime_s * job.accel * self.ref_units

    def limit_min(self, job: ReplayJob) -> int | None:
        if job.limit_min is None:
            return None
        return math.ceil(job.limit_min * self.ref_units / self.slow_units)

    def folder(self, job: ReplayJob) -> Path:
        return self.checkpoints / ("r" + re.sub(r"[^A-Za-z0-9._-]", "_", job.trace_id))


@dataclass(frozen=True)
class Request:
    """How an arm asks for a job's hardware."""

    bridge: bool  # the bridge's options (SPANK) instead of plain Slurm ones
    accel_gres: str = "gpu"  # plain arm: the GRES name accelerator jobs ask for
    accel_partition: str | None = None  # plain arm: where that GRES is (no job_submit routing)
    as_users: bool = False  # submit as the local user named like the job's account (--uid)
    accel_spec: str = "any"  # bridge arms: `--accel=SPEC:N` (any, or a vendor/stack: nvidia)
    work: WorkSpec | None = None  # accelerator jobs do work at their pool's speed


def sbatch_argv(job: ReplayJob, req: Request, script: Path, workdir: Path) -> list[str]:
    """
    >>> from slurm_hetero.replay.window import ReplayJob
    >>> j = ReplayJob("7", 30, 600, 15, 4, 0, "12", True)
    >>> sbatch_argv(j, Request(False), Path("/w/job.sh"), Path("/w"))[2:]  # doctest: +NORMALIZE_WHITESPACE
    ['--job-name=r7', '--account=t_12', '--ntasks=4', '--time=15', '--output=/dev/null',
     '--chdir=/w', '/w/job.sh', '600']
    >>> sbatch_argv(ReplayJob("8", 0, 60, None, 1, 2, "3", True), Request(True), Path("/j"), Path("/w"))[5:8]
    ['--arch=any', '--accel=any:2', '--output=/dev/null']
    >>> ws = WorkSpec(0.4, 0.2, Path("/w/units"), Path("/w/ckpt"))
    >>> job = ReplayJob("9", 0, 600, 20, 1, 2, "3", True)
    >>> argv = sbatch_argv(job, Request(True, work=ws), Path("/j"), Path("/w"))
    >>> argv[5:]  # doctest: +NORMALIZE_WHITESPACE
    ['--time=40', '--arch=any', '--accel=any:2', '--checkpoint=/w/ckpt/r9', '--migratable',
     '--output=/dev/null', '--chdir=/w', '/j', '480.000', '2', '/w/units']
    """
    work = req.work if job.accel else None
    argv = [f"--job-name=r{job.trace_id}", f"--account={job.account}", f"--ntasks={job.cpus}"]
    if job.one_node:
        argv.append("--nodes=1")
    if req.as_users:
        argv.append(f"--uid={job.account}")
    limit = work.limit_min(job) if work else job.limit_min
    if limit is not None:
        argv.append(f"--time={limit}")
    if req.bridge:
        # The hardware-agnostic request: any arch, any accelerator model.
        argv.append("--arch=any")
        if job.accel:
            argv.append(f"--accel={req.accel_spec}:{job.accel}")
        if work:
            argv += [f"--checkpoint={work.folder(job)}", "--migratable"]
    elif job.accel:
        # The model the job asks for (`gpu:t4:1`), or any device of the GRES when none is fixed.
        argv.append(f"--gres={job.fixed_gres or req.accel_gres}:{job.accel}")
        if req.accel_partition:
            argv.append(f"--partition={req.accel_partition}")
    args = [f"{work.work(job):.3f}", str(job.accel), str(work.units_file)] if work else [str(job.runtime_s)]
    return sbatch_script_argv([*argv, "--output=/dev/null", f"--chdir={workdir}"], str(script), args)


def parse_job_id(out: str) -> str:
    """sbatch --parsable prints `ID` or `ID;CLUSTER`.

    >>> parse_job_id("42;kth\\n"), parse_job_id("7\\n")
    ('42', '7')
    """
    jid = out.strip().split(";", 1)[0]
    if not jid.isdigit():
        raise RuntimeFailure(f"sbatch printed no job id: {out.strip()[:80]!r}")
    return jid


@dataclass
class Submission:
    job: ReplayJob
    job_id: str
    target: float  # the faked time it is due (t0 + offset)
    released: float | None = None  # faked time the release returned


@dataclass
class Progress:
    submitted: int = 0
    released: int = 0
    pending: int = 0
    running: int = 0
    ended: int = 0
    trace_s: float = 0.0  # trace seconds since the window's start
    measured_pending: int = 0  # measured jobs not started yet


@dataclass
class Submitter:
    runner: Runner
    jobs: list[ReplayJob]
    clock: ClockMap
    t0: float  # faked time of the window's start
    req: Request
    script: Path
    workdir: Path
    lead_s: float = 2.0  # real seconds ahead a job is submitted (held)
    say: Callable[[Progress], None] | None = None
    every_s: float = 5.0  # real seconds between progress lines
    subs: list[Submission] = field(default_factory=list)
    failed: list[tuple[ReplayJob, str]] = field(default_factory=list)

    def _submit(self, job: ReplayJob) -> None:
        argv = self.sbatch(job)
        r = self.runner.run(argv, check=False, timeout=60)
        if r.returncode != 0:
            self.failed.append((job, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "no message"))
            return
        self.subs.append(Submission(job, parse_job_id(r.stdout), self.t0 + job.offset_s))

    def sbatch(self, job: ReplayJob) -> list[str]:
        argv = sbatch_argv(job, self.req, self.script, self.workdir)
        return [argv[0], "--hold", *argv[1:]]

    def _release(self, due: list[Submission], chunk: int = 500) -> None:
        if len(due) > chunk:
            for i in range(0, len(due), chunk):
                self._release(due[i:i + chunk], chunk)
            return
        r = self.runner.run(release_argv([s.job_id for s in due]), check=False, timeout=60)
        now = self.clock.now()
        if r.returncode != 0:
            self.release_each(due, now)
            return
        for s in due:
            s.released = now

    def release_each(self, tried: list[Submission], at: float) -> None:
        """After the release of `tried` failed `at`: each job still held is tried alone (the
        list's failure may have come before it), the others are released."""
        for s in self.mark_released(tried, at):
            if self.runner.run(release_argv([s.job_id]), check=False, timeout=60).returncode == 0:
                s.released = self.clock.now()

    def mark_released(self, tried: list[Submission], at: float) -> list[Submission]:
        """After a release that failed: the jobs Slurm lists and no longer holds were
        released `at`. scontrol goes through the whole list and fails if any one failed, and
        some failures release the job all the same: "Requested partition configuration not
        available now" while the partition's nodes are powered down. Asking it again would
        fail for the ones already released; the queue says which are. Returns those
        still held."""
        listed = self.runner.out(squeue_reasons_argv(), timeout=60)
        known = {ln.split(None, 1)[0] for ln in listed.splitlines() if ln.strip()}
        held = held_ids(listed)
        for s in tried:
            if s.released is None and s.job_id in known and s.job_id not in held:
                s.released = at
        return [s for s in tried if s.released is None and s.job_id in held]

    def queue_counts(self) -> tuple[int, int, int, int]:
        """(pending, running, ended, measured jobs pending) of the jobs submitted here
        (squeue keeps ended jobs for MinJobAge; a job it no longer lists has ended)."""
        out = self.runner.out(squeue_states_argv(), timeout=30)
        state = dict(ln.split(None, 1) for ln in out.splitlines() if " " in ln)
        pending = running = measured_pending = 0
        for s in self.subs:
            st = state.get(s.job_id, "").strip()
            if st == "PENDING":
                pending += 1
                measured_pending += s.job.measured
            elif st in ACTIVE:
                running += 1
        return pending, running, len(self.subs) - pending - running, measured_pending

    def progress(self) -> Progress:
        pending, running, ended, measured_pending = self.queue_counts()
        return Progress(len(self.subs), sum(s.released is not None for s in self.subs),
                        pending, running, ended, self.clock.now() - self.t0, measured_pending)

    def run(self) -> None:
        """Submit and release every job at its time; returns when the last is released."""
        todo = sorted(self.jobs, key=lambda j: (j.offset_s, j.trace_id))
        nxt = 0
        held: list[Submission] = []
        last_say = time.monotonic()
        while nxt < len(todo) or held:
            now = self.clock.now()
            horizon = now + self.lead_s * self.clock.speed
            while nxt < len(todo) and self.t0 + todo[nxt].offset_s <= horizon:
                n_before = len(self.subs)
                self._submit(todo[nxt])
                if len(self.subs) > n_before:
                    held.append(self.subs[-1])
                nxt += 1
                if held and self.clock.now() >= min(s.target for s in held):
                    break  # something is due: release it first
            now = self.clock.now()
            due = [s for s in held if s.target <= now]
            if due:
                self._release(due)
                held = [s for s in held if s.released is None and s not in due]
            if self.say and time.monotonic() - last_say >= self.every_s:
                self.say(self.progress())
                last_say = time.monotonic()
            upcoming = [s.target for s in held]
            if nxt < len(todo):
                upcoming.append(self.t0 + todo[nxt].offset_s - self.lead_s * self.clock.speed)
            if upcoming:
                wait = self.clock.real(min(upcoming)) - time.time()
                time.sleep(min(max(wait, 0.0), 0.5))

    def drain(self, deadline: float | None, poll_s: float = 1.0, until: str = "ended") -> bool:
        """Wait until every submitted job has ended (`until="started"`: until every measured
        job has started, which fixes its wait and so its slowdown: the rest need not end),
        or the faked `deadline`; True: all ended."""
        if until not in DRAIN_UNTIL:
            raise InputError(f"--drain-until {until}: choose {' or '.join(DRAIN_UNTIL)}")
        last_say = time.monotonic()
        while True:
            p = self.progress()
            if p.pending + p.running == 0 or (until == "started" and p.measured_pending == 0):
                if self.say:
                    self.say(p)
                return p.pending + p.running == 0
            if deadline is not None and self.clock.now() >= deadline:
                return False
            if self.say and time.monotonic() - last_say >= self.every_s:
                self.say(p)
                last_say = time.monotonic()
            time.sleep(poll_s)
