"""A replay under faults (the soak, `benchmarks/soak.py`): the seeded fault schedule, a
submitter that rides out outages as users do, what slurmctld showed while it ran, and the
audit of accounting against it. Injecting the faults needs the cluster's processes:
`devcluster/faults.py`.

Times of the schedule are trace seconds after the window's start (the cluster's clock reads
`t0 + at_s` then). Each fault lasts `for_s` trace seconds (0: a single blow, such as a kill
its supervisor answers), and no two overlap: one fault's harm is over before the next.

The audit compares three records of the same jobs: what the replay submitted (job ids
sbatch printed), what slurmctld listed while the replay ran (`squeue` every couple of real
seconds: states, start and end times, nodes), and what accounting (sacct, read once
slurmdbd has caught up) says. A job is *lost* when sbatch gave it an id and accounting
never heard of it; a record is *missing* its end when slurmctld showed the job ended (or no
longer lists it) and accounting still has it pending or running; *wrong* when a final
state, a start or end time or the node list differs from what slurmctld showed.
"""

from __future__ import annotations

import dataclasses
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.replay.sacct import NOT_ENDED, JobRecord
from slurm_hetero.replay.submit import ACTIVE, Submission, Submitter, parse_job_id
from slurm_hetero.replay.window import ReplayJob
from slurm_hetero.slurm.commands import release_argv, squeue_observe_argv
from slurm_hetero.slurm.runner import Runner

# What each fault does (devcluster/faults.py injects and undoes it).
KINDS: dict[str, str] = {
    "bridge-kill": "the bridge daemon SIGKILLed (its supervisor starts it again)",
    "bridge-stop": "the bridge daemon SIGSTOPped, then SIGCONT",
    "slurmctld-restart": "slurmctld stopped (SIGTERM) and started again",
    "slurmctld-kill": "slurmctld SIGKILLed, started again later",
    "slurmdbd-stop": "slurmdbd stopped (SIGTERM), started again later",
    "slurmd-kill": "one node's slurmd SIGKILLed, started again later (the node returns)",
    "state-readonly": "StateSaveLocation (the snapshot's folder) read-only (a bind mount), then writable",
    "state-full": "StateSaveLocation (a tmpfs of its own) full: a filler file takes every free byte, "
                  "writes fail with ENOSPC; then removed",
    "clock-skew": "one node's slurmd restarted with its clock behind the cluster's, later restarted on it",
    "agent-fail": "one node's devices fail partway through a policy: the node agent's Prolog stops midway "
                  "(the fake backend's switch file), then they answer again",
}
# How long each lasts (trace seconds): a day's soak, and the short one (2 trace hours; clock-skew
# 10 minutes there, not 15, so that nine fit with 300 s between two: all ten do not).
DURATIONS: dict[str, float] = {
    "bridge-kill": 0, "bridge-stop": 3600, "slurmctld-restart": 0, "slurmctld-kill": 600,
    "slurmdbd-stop": 3600, "slurmd-kill": 1800, "state-readonly": 1800, "state-full": 1800,
    "clock-skew": 3600, "agent-fail": 1800,
}
SHORT_DURATIONS: dict[str, float] = {
    "bridge-kill": 0, "bridge-stop": 900, "slurmctld-restart": 0, "slurmctld-kill": 300,
    "slurmdbd-stop": 600, "slurmd-kill": 600, "state-readonly": 600, "state-full": 600,
    "clock-skew": 600, "agent-fail": 300,
}
SHORT_KINDS = ("bridge-stop", "slurmctld-restart", "slurmdbd-stop")
# The day's default: every kind but state-readonly (the snapshot's folder full stands for a
# state that cannot be written; `all` or its name asks for read-only too).
DAY_KINDS = tuple(k for k in KINDS if k != "state-readonly")
# Faults that stop submissions (sbatch fails while they last): the submitter waits them out.
BLOCKING = ("slurmctld-kill", "state-readonly", "state-full")
# A node's clock is put behind the cluster's by this much (trace seconds; the seed picks):
# not ahead, where a launch credential (valid 120 s from slurmctld's clock) would meet a
# node that reads it as expired once real latency times the replay's speed eats the rest.
SKEW_RANGE_S = (60, 120)


@dataclass(frozen=True)
class Fault:
    kind: str
    at_s: float  # trace seconds after the window's start
    for_s: float = 0.0  # how long it lasts (trace seconds)
    node: str = ""  # slurmd-kill and clock-skew: whose slurmd; agent-fail: whose devices
    skew_s: int = 0  # clock-skew: the node's clock minus the cluster's (trace seconds)

    @property
    def until_s(self) -> float:
        return self.at_s + self.for_s

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_kinds(text: str, short: bool = False) -> list[str]:
    """`--faults`: `all`, `none`, `default` (DAY_KINDS: all but state-readonly; the short soak's
    three with --short), or names separated by commas.

    >>> parse_kinds("bridge-stop, slurmctld-restart")
    ['bridge-stop', 'slurmctld-restart']
    >>> parse_kinds("default", short=True)
    ['bridge-stop', 'slurmctld-restart', 'slurmdbd-stop']
    >>> parse_kinds("none"), len(parse_kinds("all")), "state-readonly" in parse_kinds("default")
    ([], 10, False)
    """
    t = text.strip()
    if t == "none":
        return []
    if t == "all":
        return list(KINDS)
    if t == "default":
        return list(SHORT_KINDS if short else DAY_KINDS)
    names = [n.strip() for n in t.split(",") if n.strip()]
    bad = [n for n in names if n not in KINDS]
    if bad or not names or len(set(names)) != len(names):
        raise InputError(f"--faults {text!r}: give all, none, default or distinct names from "
                         f"{', '.join(KINDS)} (comma-separated)")
    return names


def plan(kinds: Sequence[str], span_s: float, seed: int, nodes: Sequence[str],
         durations: Mapping[str, float] | None = None, gap_s: float = 900.0,
         edge: float = 0.05, device_nodes: Sequence[str] | None = None) -> list[Fault]:
    """The seeded schedule: `kinds` in a seeded order, each lasting its duration, spread
    over [edge, 1 - edge] of the window's `span_s` trace seconds with seeded gaps of at
    least `gap_s` between one's end and the next's start (time to recover). The node of a
    slurmd fault and the skew are seeded too, and agent-fail's node among `device_nodes`
    (nodes with devices a policy changes; default `nodes`). Same arguments, same schedule.

    >>> fs = plan(["bridge-stop", "slurmctld-restart", "slurmdbd-stop"], 7200, 36, ["n1", "n2"],
    ...           SHORT_DURATIONS, gap_s=300)
    >>> [f.kind for f in fs] == sorted(["bridge-stop", "slurmctld-restart", "slurmdbd-stop"],
    ...                                key=[f.kind for f in fs].index)
    True
    >>> fs == plan(["bridge-stop", "slurmctld-restart", "slurmdbd-stop"], 7200, 36, ["n1", "n2"],
    ...            SHORT_DURATIONS, gap_s=300)
    True
    >>> all(b.at_s >= a.until_s + 300 for a, b in zip(fs, fs[1:])), 360 <= fs[0].at_s, fs[-1].until_s <= 6840
    (True, True, True)
    >>> plan(["bridge-stop"], 600, 1, ["n1"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    slurm_hetero.errors.InputError: the faults (3600 trace s, and 900 s between two) do not fit in 540 ...
    """
    durations = durations or DURATIONS
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    lo, hi = edge * span_s, (1.0 - edge) * span_s
    busy = sum(float(durations[k]) for k in order) + gap_s * max(0, len(order) - 1)
    free = hi - lo - busy
    if free < 0:
        lasting = busy - gap_s * max(0, len(order) - 1)
        raise InputError(f"the faults ({lasting:.0f} trace s, and {gap_s:.0f} s "
                         f"between two) do not fit in {hi - lo:.0f} trace s of the window: fewer faults "
                         "(--faults) or a longer window (--hours)")
    cuts = sorted(rng.uniform(0.0, free) for _ in order)
    out, t = [], lo
    prev_cut = 0.0
    for kind, cut in zip(order, cuts, strict=True):
        t += cut - prev_cut
        prev_cut = cut
        node = rng.choice(list(nodes)) if kind in ("slurmd-kill", "clock-skew") and nodes else ""
        if kind == "agent-fail":
            node = rng.choice(list(nodes if device_nodes is None else device_nodes) or [""])
        skew = -rng.randint(*SKEW_RANGE_S) if kind == "clock-skew" else 0
        f = Fault(kind, round(t, 1), float(durations[kind]), node, skew)
        out.append(f)
        t = f.until_s + gap_s
    return out


# ---- submitting through outages --------------------------------------------------------
# What sbatch, scontrol and squeue print while slurmctld is down or cannot write its state:
# worth trying again. Anything else (a bad option, an unknown account) is not.
TRANSIENT = ("unable to contact slurm controller", "socket timed out", "zero bytes were transmitted",
             "connection refused", "i/o error writing", "temporarily unable",
             "communication connection failure", "transport endpoint", "connection reset", "no answer in",
             "slurm backup controller in standby", "error writing to file", "read-only file system",
             "no space left on device")


def transient(message: str) -> bool:
    """
    >>> transient("Batch job submission failed: Unable to contact slurm controller (connect failure)")
    True
    >>> transient("Batch job submission failed: Invalid account or account/partition combination")
    False
    """
    m = message.lower()
    return any(t in m for t in TRANSIENT)


def wants_energy(trace_id: str, share: float, seed: int) -> bool:
    """Does this job ask for an energy policy? Seeded per job (the same job, the same answer,
    whatever the order of submission).

    >>> sum(wants_energy(str(i), 0.3, 36) for i in range(1000)) in range(250, 350)
    True
    >>> wants_energy("7", 0.0, 36), wants_energy("7", 1.0, 36)
    (False, True)
    """
    return share > 0 and random.Random(f"{seed}:{trace_id}").random() < share


def wants_container(trace_id: str, share: float, seed: int) -> bool:
    """Does this job run in a container (`--image=`)? Seeded per job like `wants_energy`,
    drawn apart from it (a job's energy and container choices are independent).

    >>> sum(wants_container(str(i), 0.1, 36) for i in range(1000)) in range(70, 130)
    True
    >>> [wants_container(str(i), 0.5, 1) for i in range(6)]
    [True, True, False, False, True, True]
    >>> wants_container("7", 0.0, 36), wants_container("7", 1.0, 36)
    (False, True)
    """
    return share > 0 and random.Random(f"{seed}:container:{trace_id}").random() < share


# A container job's body (the soak's --container-share): it runs inside the image, where
# libfaketime is not (the image's busybox is static, and the preload library is not in its
# root), so its sleep runs at real speed: it sleeps the trace runtime ÷ the clock's speed
# ("$2", real seconds), as long on the cluster's clock as the plain body's `sleep "$1"`. Its
# first line, read from the image's own /etc/hetero-variant, says it ran in the container.
CONTAINER_MARK = "soak-container:"
CONTAINER_BODY = ("#!/bin/sh\n# slurm-hetero soak: a trace job's body in a container; $1 its runtime "
                  "(trace s), $2 that in real seconds\n"
                  f"echo \"{CONTAINER_MARK} $(cat /etc/hetero-variant)\"\n"
                  "exec sleep \"$2\"\n")


def container_figures(outcomes: Iterable[Any], chosen: Iterable[str],
                      outputs: Mapping[str, str]) -> dict[str, Any]:
    """The container jobs' figures: `chosen` their trace ids, `outputs` each job id's output.
    `ran_in_container`: jobs whose output has the line their body printed inside the image;
    `unfinished`: jobs still pending or running when the replay stopped (its drain ends once
    every measured job has started); `ended`: the others, of which `ended_as_expected` ran in
    the image and ended COMPLETED, or ended at their own limit (TIMEOUT, or the bridge's end)
    and not before it, as the audit has it: `limit_before_body` of those never printed the
    line (the limit came while the Prolog and the container's start, real time x speed, still
    held the body back: slurmd says "already killed, do not launch"); `examples`: the ended
    ones that did not end as expected (job id, state, evidence).

    >>> from types import SimpleNamespace as O
    >>> outs = [O(trace_id="1", job_id="11", state="COMPLETED", killed_early=False, at_limit=False),
    ...         O(trace_id="2", job_id="12", state="TIMEOUT", killed_early=False, at_limit=True),
    ...         O(trace_id="3", job_id="13", state="FAILED", killed_early=False, at_limit=False),
    ...         O(trace_id="4", job_id="14", state="RUNNING", killed_early=False, at_limit=False)]
    >>> line = "soak-container: soak:1 x86_64/cpu\\n"
    >>> f = container_figures(outs, ["1", "2", "3", "4"], {"11": line, "12": line, "14": line})
    >>> f["asked"], f["ran_in_container"], f["unfinished"], f["ended"], f["ended_as_expected"], f["examples"]
    (4, 3, 1, 3, 2, [{'job_id': '13', 'state': 'FAILED', 'in_container': False}])
    >>> container_figures(outs[1:2], ["2"], {})["limit_before_body"]
    1
    """
    by_trace = {o.trace_id: o for o in outcomes}
    asked = ran = fine = unfinished = early_limit = 0
    bad: list[dict[str, Any]] = []
    variants: dict[str, int] = {}
    for t in chosen:
        o = by_trace.get(t)
        if o is None:
            continue
        asked += 1
        text = outputs.get(o.job_id, "")
        line = next((ln for ln in text.splitlines() if ln.startswith(CONTAINER_MARK)), None)
        if line is not None:
            ran += 1
            v = line[len(CONTAINER_MARK):].strip()
            variants[v] = variants.get(v, 0) + 1
        if o.state in ACTIVE:
            unfinished += 1
            continue
        at_limit = o.at_limit and not o.killed_early
        ok = (o.state == "COMPLETED" and line is not None) or at_limit
        early_limit += at_limit and line is None
        fine += ok
        if not ok:
            bad.append({"job_id": o.job_id, "state": o.state, "in_container": line is not None})
    return {"asked": asked, "ran_in_container": ran, "unfinished": unfinished, "ended": asked - unfinished,
            "ended_as_expected": fine, "limit_before_body": early_limit, "variants": variants,
            "examples": bad[:10]}


@dataclass
class PatientSubmitter(Submitter):
    """A Submitter that waits out outages as a user would: an sbatch, release or queue read
    that fails for a reason in TRANSIENT is tried again each second for up to `retry_s` real
    seconds (a release comes late then, and the job's wait counts it). `before_drain` and
    `after_drain` run around the drain (the soak waits for its last fault to be undone before,
    and for accounting to catch up after)."""

    retry_s: float = 120.0
    before_drain: Callable[[], None] | None = None
    after_drain: Callable[[], None] | None = None
    retries: dict[str, int] = field(default_factory=lambda: {"sbatch": 0, "release": 0, "squeue": 0})
    unreleased: list[str] = field(default_factory=list)  # given up on after retry_s
    # A seeded share of the accelerator jobs asks for an energy policy (`--energy=`), as a
    # user would through the bridge (a trace such as Alibaba's has none of its own).
    energy_share: float = 0.0
    energy_policy: str = "efficiency"
    energy_seed: int = 0
    with_energy: list[str] = field(default_factory=list)  # trace ids of the jobs that asked
    # A seeded share of the jobs runs its body in a container (`--image=container_image`,
    # through the bridge): `container_script` (CONTAINER_BODY) in place of the replay's, its
    # output in `container_out`/JOBID.out (the evidence that it ran inside the image).
    container_share: float = 0.0
    container_image: str = ""
    container_script: str = ""
    container_out: str = ""
    container_seed: int = 0
    with_container: list[str] = field(default_factory=list)  # trace ids of the jobs that asked
    # With the bridge, accelerator jobs name these partitions (the trace site's), so that the
    # bridge chooses among the trace's pools only, never a node the soak added (its probe).
    accel_partitions: str = ""

    def sbatch(self, job: ReplayJob) -> list[str]:
        argv = super().sbatch(job)
        if job.accel and self.req.bridge and self.accel_partitions:
            argv.insert(argv.index("--hold") + 1, f"--partition={self.accel_partitions}")
        if job.accel and self.req.bridge and wants_energy(job.trace_id, self.energy_share, self.energy_seed):
            argv.insert(argv.index("--hold") + 1, f"--energy={self.energy_policy}")
            if job.trace_id not in self.with_energy:
                self.with_energy.append(job.trace_id)
        if (self.container_script and self.req.bridge and self.req.work is None
                and wants_container(job.trace_id, self.container_share, self.container_seed)):
            argv = self.in_container(argv, job)
            if job.trace_id not in self.with_container:
                self.with_container.append(job.trace_id)
        return argv

    def in_container(self, argv: list[str], job: ReplayJob) -> list[str]:
        """`argv` with the image asked, the container body and its real-time argument, and
        an output file of its own.

        >>> from pathlib import Path
        >>> from types import SimpleNamespace as O
        >>> s = PatientSubmitter.__new__(PatientSubmitter)
        >>> s.script, s.clock = Path("/w/job.sh"), O(speed=50.0)
        >>> s.container_image, s.container_script, s.container_out = "soak:1", "/w/c.sh", "/w/c"
        >>> s.in_container(["sbatch", "--hold", "--ntasks=1", "--output=/dev/null", "/w/job.sh", "600"],
        ...                O(runtime_s=600))  # doctest: +NORMALIZE_WHITESPACE
        ['sbatch', '--hold', '--image=soak:1', '--ntasks=1', '--output=/w/c/%j.out', '/w/c.sh', '600',
         '12.000']
        """
        at = argv.index(str(self.script))
        out = f"--output={self.container_out}/%j.out"
        head = [a if a != "--output=/dev/null" else out for a in argv[:at]]
        head.insert(head.index("--hold") + 1, f"--image={self.container_image}")
        return [*head, self.container_script, str(job.runtime_s), f"{job.runtime_s / self.clock.speed:.3f}"]

    def _run(self, argv: list[str]) -> tuple[bool, str, str]:
        """(ok, stdout, the error's last line)."""
        try:
            r = self.runner.run(argv, check=False, timeout=60)
        except RuntimeFailure as e:
            return False, "", str(e)
        err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "no message"
        return r.returncode == 0, r.stdout, err

    def _submit(self, job: ReplayJob) -> None:
        deadline = time.monotonic() + self.retry_s
        while True:
            ok, out, err = self._run(self.sbatch(job))
            if ok:
                self.subs.append(Submission(job, parse_job_id(out), self.t0 + job.offset_s))
                return
            if not transient(err) or time.monotonic() >= deadline:
                self.failed.append((job, err))
                return
            self.retries["sbatch"] += 1
            time.sleep(1.0)

    def _release(self, due: list[Submission], chunk: int = 500) -> None:
        deadline = time.monotonic() + self.retry_s
        left = list(due)
        while left:
            ok, _, err = self._run(release_argv([s.job_id for s in left[:chunk]]))
            if ok:
                now = self.clock.now()
                for s in left[:chunk]:
                    s.released = now
                left = left[chunk:]
                continue
            if not transient(err):
                self.release_each(left[:chunk], self.clock.now())  # some were released all the same
                self.unreleased += [s.job_id for s in left[:chunk] if s.released is None]
                left = left[chunk:]
                continue
            if time.monotonic() >= deadline:
                self.unreleased += [s.job_id for s in left]
                return
            self.retries["release"] += 1
            time.sleep(1.0)

    def queue_counts(self) -> tuple[int, int, int, int]:
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                return super().queue_counts()
            except RuntimeFailure:
                if time.monotonic() >= deadline:
                    raise
                self.retries["squeue"] += 1
                time.sleep(1.0)

    def drain(self, deadline: float | None, poll_s: float = 1.0, until: str = "ended") -> bool:
        if self.before_drain is not None:
            self.before_drain()
        done = super().drain(deadline, poll_s, until)
        if self.after_drain is not None:
            self.after_drain()
        return done


# ---- what slurmctld showed ---------------------------------------------------------------
# squeue_observe_argv's lines: commands.OBSERVE_FORMAT (id, state, start, end, nodes, reason).
FINAL = frozenset({"COMPLETED", "CANCELLED", "TIMEOUT", "FAILED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                   "DEADLINE", "OUT_OF_MEMORY"})
STARTED = FINAL | {"RUNNING", "COMPLETING", "SUSPENDED"}


@dataclass
class Seen:
    """One job as slurmctld listed it, poll after poll."""

    job_id: str
    states: list[str] = field(default_factory=list)  # each state seen, in order, once per change
    start: int | None = None
    end: int | None = None
    nodes: str = ""
    reason: str = ""

    @property
    def final(self) -> str | None:
        last = self.states[-1] if self.states else ""
        return last if last in FINAL else None


def _epoch(text: str) -> int | None:
    t = text.strip()
    return int(t) if t.isdigit() and int(t) > 0 else None


def parse_observation(text: str) -> list[tuple[str, str, int | None, int | None, str, str]]:
    """`squeue -o OBSERVE_FORMAT` lines → (id, state, start, end, nodes, reason).

    >>> parse_observation("12|RUNNING|1796000100|1796003700|kth-n1|None\\n13|PENDING|N/A|N/A||Priority\\n")
    ... # doctest: +NORMALIZE_WHITESPACE
    [('12', 'RUNNING', 1796000100, 1796003700, 'kth-n1', 'None'),
     ('13', 'PENDING', None, None, '', 'Priority')]
    """
    out = []
    for line in text.splitlines():
        f = line.split("|", 5)
        if len(f) != 6 or not f[0].strip().isdigit():
            continue
        out.append((f[0].strip(), f[1].strip(), _epoch(f[2]), _epoch(f[3]), f[4].strip(), f[5].strip()))
    return out


class Observer:
    """Lists every job slurmctld holds every `every` real seconds (in a thread, from `start`
    until `stop`); a poll slurmctld does not answer is counted and skipped."""

    def __init__(self, runner: Runner, every: float = 2.0) -> None:
        self.runner = dataclasses.replace(runner, extra_env={**runner.extra_env, "SLURM_TIME_FORMAT": "%s"})
        self.every = every
        self.seen: dict[str, Seen] = {}
        self.listed_last: set[str] = set()
        self.polls = self.failed_polls = 0
        # (real epoch, pending, running) per answered poll: the queue over time (the timeline)
        self.counts: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="soak-observer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poll(self) -> bool:
        try:
            r = self.runner.run(squeue_observe_argv(), check=False, timeout=20)
        except RuntimeFailure:
            r = None
        if r is None or r.returncode != 0:
            with self._lock:
                self.failed_polls += 1
            return False
        self.record(r.stdout)
        return True

    def record(self, text: str) -> None:
        rows = parse_observation(text)
        pending = sum(1 for r in rows if r[1] == "PENDING")
        running = sum(1 for r in rows if r[1] in ("RUNNING", "COMPLETING"))
        with self._lock:
            self.counts.append((round(time.time(), 2), pending, running))
            self.polls += 1
            self.listed_last = {r[0] for r in rows}
            for jid, state, start, end, nodes, reason in rows:
                s = self.seen.setdefault(jid, Seen(jid))
                if not s.states or s.states[-1] != state:
                    s.states.append(state)
                if state in STARTED and start is not None:
                    s.start = start
                if state in FINAL and end is not None:
                    s.end = end
                if state in STARTED and nodes:
                    s.nodes = nodes
                s.reason = reason

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.poll()

    def close(self) -> None:
        """Stop polling (no last poll)."""
        self._stop.set()

    def stop(self, final_within_s: float = 60.0) -> bool:
        """Stop polling after one last poll that slurmctld answers (tried for up to
        `final_within_s` real seconds); False: it never did."""
        self._stop.set()
        self._thread.join(timeout=30)
        deadline = time.monotonic() + final_within_s
        while not self.poll():
            if time.monotonic() >= deadline:
                return False
            time.sleep(1.0)
        return True


# ---- accounting against it --------------------------------------------------------------
def dbd_queue(sdiag_text: str) -> int | None:
    """Messages slurmctld holds for slurmdbd (`sdiag`'s "DBD Agent queue size").

    >>> dbd_queue("Server thread count:  3\\nAgent queue size:     0\\nDBD Agent queue size: 12\\n")
    12
    >>> dbd_queue("nothing") is None
    True
    """
    m = re.search(r"^\s*DBD Agent queue size:\s*(\d+)", sdiag_text, re.MULTILINE)
    return int(m.group(1)) if m else None


@dataclass
class Audit:
    submitted: int = 0
    in_accounting: int = 0
    lost: list[str] = field(default_factory=list)
    missing_end: list[str] = field(default_factory=list)
    wrong: list[dict[str, Any]] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)  # jobs slurmctld held that the replay never got an id for
    observed: int = 0  # submitted jobs slurmctld listed at least once
    compared_final: int = 0  # jobs with a final state seen by both sides

    def to_json(self, examples: int = 20) -> dict[str, Any]:
        return {"submitted": self.submitted, "in_accounting": self.in_accounting,
                "observed": self.observed, "compared_final": self.compared_final,
                "lost": len(self.lost), "missing_end": len(self.missing_end), "wrong": len(self.wrong),
                "strays": len(self.strays),
                "examples": {"lost": self.lost[:examples], "missing_end": self.missing_end[:examples],
                             "wrong": self.wrong[:examples], "strays": self.strays[:examples]}}


def audit(submitted: Iterable[str], records: Mapping[str, JobRecord], seen: Mapping[str, Seen],
          listed_last: set[str], tolerance_s: int = 1) -> Audit:
    """Accounting (`records`: sacct.by_job) against what the replay submitted and what
    slurmctld showed (`seen`; `listed_last`: the ids its last listing held).

    >>> from slurm_hetero.replay.sacct import JobRecord
    >>> rec = lambda j, st, s, e: JobRecord(j, "batch", 1, {}, "n1", 1, 1, s, e, 0, 5, st)
    >>> seen = {"1": Seen("1", ["RUNNING", "COMPLETED"], 10, 20, "n1"),
    ...         "2": Seen("2", ["RUNNING"], 11, None, "n1"),
    ...         "3": Seen("3", ["RUNNING", "COMPLETED"], 12, 30, "n1"), "9": Seen("9", ["PENDING"])}
    >>> acct = {"1": rec("1", "COMPLETED", 10, 20), "2": rec("2", "RUNNING", 11, None),
    ...         "3": rec("3", "RUNNING", 12, None)}
    >>> a = audit(["1", "2", "3", "4"], acct, seen, {"2", "9"})
    >>> a.lost, a.missing_end, a.wrong, a.strays, a.compared_final
    (['4'], ['3'], [], ['9'], 1)
    >>> audit(["1"], {"1": rec("1", "COMPLETED", 10, 25)}, seen, set()).wrong
    [{'job_id': '1', 'field': 'end', 'slurmctld': 20, 'accounting': 25}]
    """
    ids = list(dict.fromkeys(submitted))
    a = Audit(submitted=len(ids))
    known = set(ids)
    a.strays = sorted((j for j in seen if j not in known), key=int)
    for jid in ids:
        rec = records.get(jid)
        s = seen.get(jid)
        a.observed += s is not None
        if rec is None:
            a.lost.append(jid)
            continue
        a.in_accounting += 1
        if rec.state in NOT_ENDED:
            # Accounting says it has not ended: slurmctld must still hold it, not ended.
            if (s is not None and s.final) or jid not in listed_last:
                a.missing_end.append(jid)
            continue
        if s is None:
            continue

        def differs(name: str, mine: object, theirs: object, jid: str = jid) -> None:
            a.wrong.append({"job_id": jid, "field": name, "slurmctld": mine, "accounting": theirs})

        if s.final:
            a.compared_final += 1
            if s.final != rec.state:
                differs("state", s.final, rec.state)
            if s.end is not None and (rec.end is None or abs(rec.end - s.end) > tolerance_s):
                differs("end", s.end, rec.end)
        if s.start is not None and (rec.start is None or abs(rec.start - s.start) > tolerance_s):
            differs("start", s.start, rec.start)
        if s.nodes and rec.nodes != s.nodes:
            differs("nodes", s.nodes, rec.nodes)
    return a


# ---- the alerts meant for each fault ------------------------------------------------------
# The shipped alert (templates/hetero-rules.yml.j2) meant to fire while each fault lasts and
# to clear once it is over; None where no shipped alert is meant for it, with the reason.
ALERT_FOR: dict[str, str | None] = {
    # The snapshot is the daemon's heartbeat: stopped, it writes none.
    "bridge-stop": "HeteroBridgeHeartbeatLost",
    # slurmctld down for minutes: the cluster exporter finishes no round.
    "slurmctld-kill": "HeteroClusterExporterStale",
    # The bridge daemon cannot write the snapshot into a read-only StateSaveLocation,
    # nor into a full one.
    "state-readonly": "HeteroSnapshotStale",
    "state-full": "HeteroSnapshotStale",
    "bridge-kill": None,
    "slurmctld-restart": None,
    # slurmdbd stopped: the cluster exporter's sacctmgr check gets no answer.
    "slurmdbd-stop": "HeteroAccountingDown",
    # The Prolog that stops midway logs an ERROR line: the node exporter counts it.
    "agent-fail": "HeteroNodeAgentErrors",
    "slurmd-kill": None,
    "clock-skew": None,
}
WHY_NO_ALERT: dict[str, str] = {
    "bridge-kill": "its supervisor starts a new daemon within a round or two: the heartbeat gap is "
                   "shorter than the heartbeat limit, and a daemon that stays away is bridge-stop's case",
    "slurmctld-restart": "a restart of seconds; a slurmctld that stays away is slurmctld-kill's case",
    "slurmd-kill": "one node not responding is Slurm's own node state (sinfo, slurmctld's log); "
                   "HeteroPoolNoCapacity fires only when a pool has no usable device left",
    "clock-skew": "no exporter publishes a node's clock offset",
}
# Alerts may also fire as a consequence (slurmctld down: the bridge daemon's rounds fail too,
# so its heartbeat goes stale): recorded as `also`, never a failure.


@dataclass(frozen=True)
class AlertSpan:
    """One alert firing from `start_s` to `end_s` (trace seconds; `end_s` None: still firing
    at the last sample)."""

    alert: str
    labels: dict[str, str]
    start_s: float
    end_s: float | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def spans_of(samples: Sequence[tuple[float, float]], step_s: float, last_s: float,
             active: Callable[[float], bool] = lambda v: v == 1.0) -> list[tuple[float, float | None]]:
    """Runs of consecutive samples (time, value) where `active(value)` holds, as (from, to): a
    run ends at its last sample + `step_s`, or None when it reaches `last_s` (the range's end).
    A gap of more than 1.5 steps between samples ends a run.

    >>> spans_of([(0, 1), (1, 1), (2, 1), (6, 1), (7, 1)], 1, 7)
    [(0, 3), (6, None)]
    >>> spans_of([(0, 1), (1, 0), (2, 0), (3, 1)], 1, 9, active=lambda v: v == 0)
    [(1, 3)]
    """
    out: list[tuple[float, float | None]] = []
    start = prev = None
    for t, v in samples:
        if active(v) and start is not None and prev is not None and t - prev <= 1.5 * step_s:
            prev = t
            continue
        if start is not None and prev is not None:
            out.append((start, prev + step_s))
            start = prev = None
        if active(v):
            start = prev = t
    if start is not None and prev is not None:
        out.append((start, None if prev + 1.5 * step_s >= last_s else prev + step_s))
    return out


def alert_spans(matrix: Sequence[Mapping[str, Any]], step_s: float, last_real: float,
                to_trace: Callable[[float], float]) -> list[AlertSpan]:
    """Prometheus's `ALERTS{alertstate="firing"}` over a range (`/api/v1/query_range`'s
    result: series with `metric` and `values` [[real epoch, "1"], ...]) → the spans each
    alert fired, in trace seconds (`to_trace`), by start.

    >>> m = [{"metric": {"__name__": "ALERTS", "alertname": "A", "alertstate": "firing", "pool": "p"},
    ...       "values": [[100, "1"], [101, "1"], [105, "1"]]}]
    >>> [(s.alert, s.labels, s.start_s, s.end_s) for s in alert_spans(m, 1, 105, lambda t: (t - 100) * 50)]
    [('A', {'pool': 'p'}, 0.0, 100.0), ('A', {'pool': 'p'}, 250.0, None)]
    """
    out = []
    for series in matrix:
        metric = dict(series.get("metric", {}))
        name = metric.pop("alertname", "")
        for k in ("__name__", "alertstate"):
            metric.pop(k, None)
        samples = [(float(t), float(v)) for t, v in series.get("values", [])]
        for a, b in spans_of(samples, step_s, last_real):
            out.append(AlertSpan(name, metric, round(to_trace(a), 1),
                                 None if b is None else round(to_trace(b), 1)))
    return sorted(out, key=lambda s: (s.start_s, s.alert))


def scrape_gaps(matrix: Sequence[Mapping[str, Any]], step_s: float, last_real: float,
                to_trace: Callable[[float], float]) -> list[dict[str, Any]]:
    """`up{job=~"hetero-.*"}` over a range → the spans each target did not answer (up == 0),
    in trace seconds.

    >>> m = [{"metric": {"job": "hetero-node", "instance": "127.0.0.1:9"},
    ...       "values": [[0, "1"], [1, "0"], [2, "0"], [3, "1"]]}]
    >>> scrape_gaps(m, 1, 3, lambda t: t * 10)
    [{'job': 'hetero-node', 'instance': '127.0.0.1:9', 'start_s': 10.0, 'end_s': 30.0}]
    """
    out = []
    for series in matrix:
        metric = series.get("metric", {})
        samples = [(float(t), float(v)) for t, v in series.get("values", [])]
        for a, b in spans_of(samples, step_s, last_real, active=lambda v: v == 0.0):
            out.append({"job": metric.get("job", ""), "instance": metric.get("instance", ""),
                        "start_s": round(to_trace(a), 1),
                        "end_s": None if b is None else round(to_trace(b), 1)})
    return out


def match_alerts(records: Sequence[Mapping[str, Any]], spans: Sequence[AlertSpan], end_s: float,
                 grace_s: float, meant: Mapping[str, str | None] = ALERT_FOR) -> list[dict[str, Any]]:
    """Per fault record (`kind`, `started_trace_s`, `ended_trace_s`), the alert meant for it
    and what Prometheus did: `fired` (a span of that alert began between the fault's start and
    `grace_s` trace seconds after its end), `cleared` (that span ended before the next fault
    began, or before `end_s`, the last trace second looked at), when, and every other alert that
    began in the same stretch (`also`). `ok`: the alert fired and cleared, or none is meant.

    >>> recs = [{"kind": "bridge-stop", "started_trace_s": 100.0, "ended_trace_s": 1000.0},
    ...         {"kind": "slurmdbd-stop", "started_trace_s": 2000.0, "ended_trace_s": 2600.0}]
    >>> spans = [AlertSpan("HeteroBridgeHeartbeatLost", {}, 400.0, 1100.0),
    ...          AlertSpan("HeteroSnapshotStale", {}, 380.0, 1090.0)]
    >>> got = match_alerts(recs, spans, 5000.0, 300.0)
    >>> [(g["kind"], g["meant"], g["fired"], g["cleared"], g["ok"], g["also"]) for g in got]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('bridge-stop', 'HeteroBridgeHeartbeatLost', True, True, True, ['HeteroSnapshotStale']),
     ('slurmdbd-stop', 'HeteroAccountingDown', False, False, False, [])]
    >>> match_alerts(recs[:1], [AlertSpan("HeteroBridgeHeartbeatLost", {}, 400.0, None)], 5000, 300)[0]["ok"]
    False
    """
    out = []
    for i, r in enumerate(records):
        lo = float(r["started_trace_s"])
        hi = float(r.get("ended_trace_s") or r.get("undone_trace_s") or lo + float(r.get("for_s", 0)))
        nxt = float(records[i + 1]["started_trace_s"]) if i + 1 < len(records) else end_s
        want = meant.get(str(r["kind"]))
        near = [s for s in spans if lo <= s.start_s <= min(hi + grace_s, nxt)]
        mine = [s for s in near if s.alert == want]
        first = mine[0] if mine else None
        cleared = first is not None and first.end_s is not None and first.end_s <= nxt
        out.append({
            "kind": r["kind"], "meant": want,
            "why_none": WHY_NO_ALERT.get(str(r["kind"])) if want is None else None,
            "fired": first is not None, "fired_s": first.start_s if first else None,
            "cleared": cleared, "cleared_s": first.end_s if first else None,
            "fired_after_s": round(first.start_s - lo, 1) if first else None,
            "cleared_after_end_s": round(first.end_s - hi, 1) if first and first.end_s is not None else None,
            "also": sorted({s.alert for s in near if s.alert != want}),
            "ok": want is None or cleared,
        })
    return out
