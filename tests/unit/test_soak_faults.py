"""The soak's pieces that need no cluster: the submitter that waits out a controller outage
(against a fake Slurm that is down for a while), the observer's bookkeeping, the schedule's
seeding and the audit's verdicts."""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_hetero.errors import InputError
from slurm_hetero.replay.clockmap import ClockMap
from slurm_hetero.replay.faults import KINDS, Observer, PatientSubmitter, Seen, audit, parse_kinds, plan
from slurm_hetero.replay.sacct import JobRecord
from slurm_hetero.replay.submit import Request
from slurm_hetero.replay.window import ReplayJob
from slurm_hetero.slurm.runner import Runner

DOWN = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"


@dataclass
class FlakySlurm(Runner):
    """slurmctld down for the first `down_calls` commands; `refuse`: sbatch's answer to
    every submission (a permanent error)."""

    down_calls: int = 0
    refuse: str = ""
    calls: list[list[str]] = field(default_factory=list)
    ids: int = 0
    held: set[str] = field(default_factory=set)

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        if len(self.calls) <= self.down_calls:
            return subprocess.CompletedProcess(argv, 1, "", DOWN + "\n")
        if argv[0] == "sbatch":
            if self.refuse:
                return subprocess.CompletedProcess(argv, 1, "", self.refuse + "\n")
            self.ids += 1
            self.held.add(str(self.ids))
            return subprocess.CompletedProcess(argv, 0, f"{self.ids}\n", "")
        if argv[:2] == ["scontrol", "release"]:
            self.held -= set(argv[2].split(","))
        return subprocess.CompletedProcess(argv, 0, "", "")


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def submitter(slurm: FlakySlurm, tmp_path: Path, retry_s: float = 60.0) -> PatientSubmitter:
    clock = ClockMap(time.time(), 0.0, 50.0)
    jobs = [ReplayJob("1", 0, 60, 5, 1, 0, "u1", True)]
    return PatientSubmitter(slurm, jobs, clock, clock.now(), Request(False), tmp_path / "job.sh", tmp_path,
                            retry_s=retry_s)


def test_a_submission_and_its_release_wait_out_a_controller_outage(tmp_path: Path) -> None:
    slurm = FlakySlurm(down_calls=3)
    sub = submitter(slurm, tmp_path)
    sub._submit(sub.jobs[0])
    assert [s.job_id for s in sub.subs] == ["1"] and sub.failed == [] and sub.retries["sbatch"] == 3
    slurm.down_calls = len(slurm.calls) + 2
    sub._release(sub.subs)
    assert sub.subs[0].released is not None and slurm.held == set() and sub.retries["release"] == 2


def test_a_permanent_refusal_is_not_retried_and_an_endless_outage_gives_up(tmp_path: Path) -> None:
    slurm = FlakySlurm(refuse="sbatch: error: Batch job submission failed: Invalid account")
    sub = submitter(slurm, tmp_path)
    sub._submit(sub.jobs[0])
    assert len(slurm.calls) == 1 and sub.subs == [] and "Invalid account" in sub.failed[0][1]
    down = FlakySlurm(down_calls=10**9)
    sub = submitter(down, tmp_path, retry_s=0.0)
    sub._submit(sub.jobs[0])
    assert sub.subs == [] and sub.failed and "Unable to contact" in sub.failed[0][1]


def test_the_observer_keeps_each_jobs_states_times_and_nodes() -> None:
    obs = Observer(Runner())
    obs.record("7|PENDING|N/A|N/A||Priority\n")
    obs.record("7|RUNNING|100|160|n1|None\n8|PENDING|N/A|N/A||Resources\n")
    obs.record("7|COMPLETED|100|150|n1|None\n")
    s = obs.seen["7"]
    assert (s.states, s.start, s.end, s.nodes, s.final) == (["PENDING", "RUNNING", "COMPLETED"], 100, 150, "n1",
                                                              "COMPLETED")
    assert obs.listed_last == {"7"} and obs.seen["8"].final is None


def test_the_schedule_is_seeded_spread_and_within_the_window() -> None:
    kinds = list(KINDS)
    day = plan(kinds, 24 * 3600, 36, ["a", "b"])
    assert day == plan(kinds, 24 * 3600, 36, ["a", "b"]) and day != plan(kinds, 24 * 3600, 37, ["a", "b"])
    assert sorted(f.kind for f in day) == sorted(kinds)
    assert all(b.at_s >= a.until_s + 900 for a, b in itertools.pairwise(day))
    assert day[0].at_s >= 0.05 * 86400 and day[-1].until_s <= 0.95 * 86400
    skew = next(f for f in day if f.kind == "clock-skew")
    assert skew.node in ("a", "b") and -120 <= skew.skew_s <= -60
    with pytest.raises(InputError, match="--faults"):
        parse_kinds("bridge-stop,nonsense")


def test_the_audit_tells_lost_missing_and_wrong_records() -> None:
    def rec(jid: str, state: str, nodes: str = "n1") -> JobRecord:
        return JobRecord(jid, "batch", 1, {}, nodes, 1, 1, 10, 20 if state != "RUNNING" else None, 10, 5, state)

    seen = {"1": Seen("1", ["RUNNING", "COMPLETED"], 10, 20, "n1"),
            "2": Seen("2", ["RUNNING", "TIMEOUT"], 10, 20, "n1"),
            "3": Seen("3", ["RUNNING", "COMPLETED"], 10, 20, "n2")}
    a = audit(["1", "2", "3", "5"], {"1": rec("1", "COMPLETED"), "2": rec("2", "COMPLETED"),
                                     "3": rec("3", "COMPLETED"), "5": rec("5", "RUNNING")}, seen, set())
    assert a.lost == [] and a.missing_end == ["5"]  # accounting runs it, slurmctld no longer holds it
    assert [(w["job_id"], w["field"]) for w in a.wrong] == [("2", "state"), ("3", "nodes")]
