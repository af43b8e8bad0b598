"""The submitter against a fake Slurm on a fast clock: held ahead of time, released at it,
a burst in one release; and the dev cluster's slurm.conf for an accelerated clock."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_hetero.devcluster.clock import (
    REMOVED_KEYS,
    ClockSpec,
    accelerate_conf,
    from_meta,
    join_env,
    remove_stale_segments,
    to_meta,
)
from slurm_hetero.devcluster.cluster import without_bridge
from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.replay.clockmap import ClockMap, calibrate
from slurm_hetero.replay.submit import Request, Submitter
from slurm_hetero.replay.window import ReplayJob
from slurm_hetero.slurm.runner import Runner

SPEED = 100.0


@dataclass
class FakeSlurm(Runner):
    clock: ClockMap | None = None
    calls: list[tuple[float, list[str]]] = field(default_factory=list)
    ids: int = 0
    held: set[str] = field(default_factory=set)

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        assert self.clock is not None
        argv = list(argv)
        self.calls.append((self.clock.now(), argv))
        out = ""
        if argv[0] == "sbatch":
            assert "--hold" in argv
            self.ids += 1
            self.held.add(str(self.ids))
            out = f"{self.ids}\n"
        elif argv[:2] == ["scontrol", "release"]:
            self.held -= set(argv[2].split(","))
        elif argv[0] == "squeue":
            out = "".join(f"{i} PENDING\n" for i in sorted(self.held))
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_jobs_are_held_ahead_and_released_at_their_time_a_burst_in_one_call(tmp_path: Path) -> None:
    clock = ClockMap(time.time(), 0.0, SPEED)
    slurm = FakeSlurm(clock=clock)
    t0 = clock.now() + 1.0 * SPEED  # the window starts in a real second
    offsets = [0, 0, 0, 0, 0, 50, 120, 121, 200]
    jobs = [ReplayJob(str(i), off, 60, 5, 1, 0, "1", True) for i, off in enumerate(offsets)]
    sub = Submitter(slurm, jobs, clock, t0, Request(False), tmp_path / "job.sh", tmp_path, lead_s=0.5)
    sub.run()
    assert len(sub.subs) == len(jobs) and not sub.failed and not slurm.held
    by_id = {s.job_id: s for s in sub.subs}
    submitted = {line[1][0] for line in slurm.calls}
    assert submitted >= {"sbatch", "scontrol"}
    sbatch_at = {str(i + 1): t for i, (t, argv) in enumerate([c for c in slurm.calls if c[1][0] == "sbatch"])}
    for jid, s in by_id.items():
        assert s.released is not None and s.released >= s.target  # never early
        assert s.released - s.target < 0.5 * SPEED  # and late by under half a real second
        assert sbatch_at[jid] < s.target  # submitted (held) before it was due
    releases = [argv[2] for _, argv in slurm.calls if argv[:2] == ["scontrol", "release"]]
    assert "1,2,3,4,5" in releases  # the burst of five: one call


def test_a_refused_submission_is_recorded_not_fatal(tmp_path: Path) -> None:
    class Refusing(FakeSlurm):
        def run(self, argv: Sequence[str], **kw: object) -> subprocess.CompletedProcess[str]:
            if argv[0] == "sbatch" and "--job-name=r1" in argv:
                return subprocess.CompletedProcess(list(argv), 1, "", "sbatch: error: Invalid account\n")
            return super().run(argv)

    clock = ClockMap(time.time(), 0.0, SPEED)
    sub = Submitter(Refusing(clock=clock), [ReplayJob(str(i), 10, 1, 1, 1, 0, "1", True) for i in range(3)],
                    clock, clock.now() + 50, Request(False), tmp_path / "j", tmp_path, lead_s=0.2)
    sub.run()
    assert [j.trace_id for j, _ in sub.failed] == ["1"] and "Invalid account" in sub.failed[0][1]
    assert len(sub.subs) == 2


def test_drain_until_started_stops_once_every_measured_job_has_left_the_queue(tmp_path: Path) -> None:
    """`until="started"` returns when no measured job pends (its wait is known), not when every
    job has ended; a pending warm-up job does not hold it, a pending measured one does."""
    @dataclass
    class Queue(FakeSlurm):
        states: dict[str, str] = field(default_factory=dict)

        def run(self, argv: Sequence[str], **kw: object) -> subprocess.CompletedProcess[str]:
            if argv[0] == "squeue":
                out = "".join(f"{i} {st}\n" for i, st in self.states.items())
                return subprocess.CompletedProcess(list(argv), 0, out, "")
            return super().run(argv)

    clock = ClockMap(time.time(), 0.0, SPEED)
    slurm = Queue(clock=clock)
    jobs = [ReplayJob("w", -100, 60, 5, 1, 0, "1", False), ReplayJob("m", 10, 60, 5, 1, 0, "1", True)]
    sub = Submitter(slurm, jobs, clock, clock.now() + 20, Request(False), tmp_path / "j", tmp_path, lead_s=0.1)
    sub.run()
    warm, measured = (s.job_id for s in sub.subs)
    slurm.states = {warm: "PENDING", measured: "RUNNING"}
    assert sub.drain(None, poll_s=0.01, until="started") is False  # stopped: nothing ended
    slurm.states = {warm: "RUNNING", measured: "PENDING"}
    assert sub.drain(clock.now() + 0.05 * SPEED, poll_s=0.01, until="started") is False  # deadline
    assert sub.progress().measured_pending == 1
    slurm.states = {}
    assert sub.drain(None, poll_s=0.01) is True
    with pytest.raises(InputError, match="--drain-until never"):
        sub.drain(None, until="never")


def test_calibration_refuses_a_client_off_the_shared_clock() -> None:
    class Date(Runner):
        def __init__(self, speed: float) -> None:
            super().__init__()
            self.base, self.speed = time.time(), speed

        def run(self, argv: Sequence[str], **kw: object) -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(list(argv), 0, f"{self.base + (time.time() - self.base) * self.speed}\n", "")

    c = calibrate(Date(20.0), 20.0, check_after=0.2)
    assert abs(c.now() - (c.faked0 + (time.time() - c.real0) * 20)) < 1.0
    with pytest.raises(RuntimeFailure, match="runs x1"):
        calibrate(Date(1.0), 20.0, check_after=0.2)


def test_accelerated_slurm_conf_drops_the_hooks_and_scales_timeouts() -> None:
    conf = ("ClusterName=x\nProlog=/p\nEpilog=/e\nPrologFlags=Alloc\nHealthCheckProgram=/h\n"
            "HealthCheckInterval=20\nHealthCheckNodeState=ANY\nTaskProlog=/t\n# Prolog=/kept-comment\n"
            "JobAcctGatherFrequency=30\nJobSubmitPlugins=lua\n")
    out = accelerate_conf(conf, ClockSpec(20))
    keys = {ln.split("=", 1)[0]: ln.split("=", 1)[1] for ln in out.splitlines() if "=" in ln and ln[0] != "#"}
    assert not set(REMOVED_KEYS) & set(keys)
    assert "# Prolog=/kept-comment" in out
    assert (keys["MessageTimeout"], keys["BatchStartTimeout"], keys["JobAcctGatherFrequency"]) == ("200", "200", "600")
    assert keys["SlurmdTimeout"] == "6000" and keys["JobSubmitPlugins"] == "lua"
    assert accelerate_conf(conf, ClockSpec(1000)).count("SlurmdTimeout=65533") == 1  # a uint16 in Slurm
    assert "JobSubmitPlugins" not in {ln.split("=")[0] for ln in without_bridge(conf).splitlines()}
    with pytest.raises(InputError, match="--speed"):
        ClockSpec(0.5)


def test_a_clock_with_hooks_keeps_the_agents_prolog_and_epilog_only() -> None:
    conf = ("Prolog=/p\nEpilog=/e\nPrologFlags=Alloc\nHealthCheckProgram=/h\nHealthCheckInterval=20\n"
            "TaskProlog=/t\nPrologEpilogTimeout=60\n")
    keys = [ln.split("=", 1) for ln in accelerate_conf(conf, ClockSpec(50, hooks=True)).splitlines()
            if "=" in ln and ln[0] != "#"]
    kept = dict(keys)
    assert (kept["Prolog"], kept["Epilog"], kept["PrologFlags"]) == ("/p", "/e", "Alloc")
    assert not {"HealthCheckProgram", "HealthCheckInterval", "TaskProlog"} & set(kept)
    assert kept["PrologEpilogTimeout"] == "3000"  # lasts as long in real time: the hooks run at real speed
    plain = accelerate_conf(conf, ClockSpec(50))
    assert "Prolog=/p" not in plain.splitlines() and "PrologEpilogTimeout=60" in plain.splitlines()
    assert from_meta(to_meta(ClockSpec(50, hooks=True))) == ClockSpec(50, hooks=True)
    assert to_meta(ClockSpec(50)) == {"speed": 50.0, "offset_s": 0}  # a plain replay's cluster.json as before


def test_join_env_needs_the_holders_shared_clock() -> None:
    env = join_env({"FAKETIME": "+0 x20", "FAKETIME_SHARED": "/sem /shm", "OTHER": "x"}, "/lib.so")
    assert env == {"LD_PRELOAD": "/lib.so", "FAKETIME": "+0 x20", "FAKETIME_SHARED": "/sem /shm",
                   "FAKETIME_DONT_RESET": "1"}
    with pytest.raises(RuntimeFailure, match="FAKETIME_SHARED"):
        join_env({"FAKETIME": "+0 x20"}, "/lib.so")


def test_stale_faketime_clocks_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = 2**22 + 7  # above any pid_max Linux allows: no such process
    names = [f"faketime_shm_{os.getpid()}", f"sem.faketime_sem_{os.getpid()}",  # this process: kept
             f"faketime_shm_{dead}", f"sem.faketime_sem_{dead}",  # gone: removed
             f"faketime_shm_{dead}x", "sem.other_7", "faketime_shm_"]  # not libfaketime's: kept
    for n in names:
        (tmp_path / n).write_text("")
    assert remove_stale_segments(str(tmp_path)) == 2
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(names[:2] + names[4:])
    assert remove_stale_segments(str(tmp_path / "missing")) == 0


@dataclass
class PoweredDownPartition(FakeSlurm):
    """scontrol release as slurmctld answered in the Alibaba day with nodes powered down: it
    goes through the whole list, releases every held job, and fails when one answered
    "Requested partition configuration not available now"; releasing a job that is no
    longer held fails too. Only the ids in `stuck` stay held (a real failure)."""

    unavailable: set[str] = field(default_factory=set)
    stuck: set[str] = field(default_factory=set)

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        assert self.clock is not None
        argv = list(argv)
        self.calls.append((self.clock.now(), argv))
        if argv[:2] == ["scontrol", "release"]:
            ids = argv[2].split(",")
            fail = [i for i in ids if i not in self.held or i in self.unavailable or i in self.stuck]
            self.held -= set(ids) - self.stuck
            err = "".join(f"Job {i}: Requested partition configuration not available now\n" for i in fail)
            return subprocess.CompletedProcess(argv, 1 if fail else 0, "", err)
        if argv[0] == "squeue":
            every = range(1, self.ids + 1)
            if argv[-1] == "%i %r":
                out = "".join(f"{i} {'JobHeldUser' if str(i) in self.held else 'None'}\n" for i in every)
            else:
                out = "".join(f"{i} {'PENDING' if str(i) in self.held else 'RUNNING'}\n" for i in every)
            return subprocess.CompletedProcess(argv, 0, out, "")
        return super().run(argv)


def release_on_powered_down(kind: type[Submitter], tmp_path: Path) -> tuple[PoweredDownPartition, Submitter]:
    """Five jobs submitted by `kind` and released as one list: job 2's partition is powered
    down (released, yet the list fails), job 4 stays held."""
    clock = ClockMap(time.time(), 0.0, SPEED)
    slurm = PoweredDownPartition(clock=clock, unavailable={"2"}, stuck={"4"})
    jobs = [ReplayJob(str(i), 0, 60, 5, 1, 0, "1", True) for i in range(5)]
    sub = kind(slurm, jobs, clock, clock.now(), Request(False), tmp_path / "j", tmp_path, lead_s=0.2)
    for j in jobs:
        sub._submit(j)
    sub._release(sub.subs)
    return slurm, sub


def test_a_release_that_fails_for_one_job_counts_every_job_it_released(tmp_path: Path) -> None:
    slurm, sub = release_on_powered_down(Submitter, tmp_path)
    released = {s.job_id for s in sub.subs if s.released is not None}
    assert released == {"1", "2", "3", "5"} and slurm.held == {"4"}
    # The still-held job was tried alone; the ones already released were not asked again.
    alone = [argv[2] for _, argv in slurm.calls if argv[:2] == ["scontrol", "release"]][1:]
    assert alone == ["4"]


def test_the_soaks_submitter_after_a_refused_list_asks_only_for_the_jobs_still_held(tmp_path: Path) -> None:
    """PatientSubmitter (the soak's): a refusal that is not an outage is not retried as a
    list; the queue says which jobs were released anyway, only the held one is asked again."""
    from slurm_hetero.replay.faults import PatientSubmitter

    slurm, sub = release_on_powered_down(PatientSubmitter, tmp_path)
    assert isinstance(sub, PatientSubmitter)
    released = {s.job_id for s in sub.subs if s.released is not None}
    assert released == {"1", "2", "3", "5"} and slurm.held == {"4"} and sub.unreleased == ["4"]
    lists = [argv[2] for _, argv in slurm.calls if argv[:2] == ["scontrol", "release"]]
    assert lists == ["1,2,3,4,5", "4"]
