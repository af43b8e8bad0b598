"""Array tasks and heterogeneous jobs through the strict `scontrol show job` parser, on
records captured from Slurm 22.05 (CI: every array task's Prolog failed on a first line
`JobId=N ArrayJobId=A ArrayTaskId=T ... JobName=`, and a het job's leader prints every
component's record, which read as user text imitating keys)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.energy import agent
from slurm_hetero.slurm.scontrol import (
    AmbiguousRecord,
    parse_array_task,
    parse_job_devices,
    parse_job_record,
    show_job_argv,
    show_one_job,
)

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured"


def _read(name: str) -> str:
    return (CAPTURED / name).read_text()


def test_array_task_record_parses() -> None:
    text = _read("scontrol-job-d-array-task-22.05.txt")
    rec = parse_job_record(text, ["JobId", "JobName", "UserId", "JobState"])
    assert rec == {"JobId": "12", "JobName": "wrap", "UserId": "root(0)", "JobState": "RUNNING"}
    assert parse_job_devices(text, "a100-01") == {"gpu": [0]}


def test_an_arrays_id_prints_every_task_and_is_asked_again_as_one_task() -> None:
    every = _read("scontrol-job-array-pending-22.05.txt")  # `scontrol show job 9`: 9_[2-3], 13, 12
    assert every.count("\nJobId=") == 2
    with pytest.raises(AmbiguousRecord):
        parse_job_record(every, ["JobState"])
    # Asked for 9 while 9 is the array's pending rest: no single task, the text stays.
    asked: list[str] = []
    squeue = "12 0\n13 1\n9 2-3%2\n"

    def out(argv: list[str]) -> str:
        asked.append(" ".join(argv[:1] + argv[-1:]))
        return squeue if argv[0] == "squeue" else every

    assert show_one_job(out, 9) == every and asked == ["scontrol 9", "squeue %A %K"]
    # Once 9 is task 3 and runs, it is asked as 9_3.
    asked.clear()
    squeue = "12 0\n9 3\n"
    show_one_job(out, 9)
    assert asked == ["scontrol 9", "squeue %A %K", "scontrol 9_3"]
    assert parse_array_task("9 2-3%2\n", 9) is None and parse_array_task("19 3\n", 9) is None


def test_het_leader_is_asked_again_for_component_zero() -> None:
    both = _read("scontrol-job-d-het-leader-22.05.txt")
    # Two records in one answer: every key twice, so the strict parser refuses it ...
    with pytest.raises(AmbiguousRecord):
        parse_job_record(both, ["UserId"])
    # ... and the leader's first line says which component to ask for instead.
    answers = {"10": both, "10+0": _read("scontrol-job-d-het-0-22.05.txt")}
    asked: list[str] = []

    def out(argv: list[str]) -> str:
        asked.append(argv[-1])
        return answers[argv[-1]]

    text = show_one_job(out, "10", detail=True)
    assert asked == ["10", "10+0"]
    assert parse_job_record(text, ["JobId", "NumNodes"]) == {"JobId": "10", "NumNodes": "1"}
    assert parse_job_devices(text, "a100-02") == {"gpu": [0, 1]}


def test_het_other_component_is_its_own_record() -> None:
    text = _read("scontrol-job-d-het-1-22.05.txt")
    assert show_one_job(lambda argv: text, 11, detail=True) == text
    assert parse_job_record(text, ["JobId", "NumNodes"]) == {"JobId": "11", "NumNodes": "1"}
    assert parse_job_devices(text, "cpu-arm-01") == {}


def test_a_job_name_cannot_pose_as_a_het_leader() -> None:
    # JobName is printed last on line 1: text in it comes after slurmctld's ids.
    text = "JobId=5 JobName=x HetJobId=5 HetJobOffset=0 JobName=y\n   UserId=u(1)\n"
    assert show_one_job(lambda argv: text, 5) == text
    assert parse_job_record(text, ["JobName"]) == {"JobName": "x HetJobId=5 HetJobOffset=0 JobName=y"}


@pytest.mark.parametrize("bad", ["10+", "+0", "1_", "1_0_1", "10 11", "-1", "1+0_2"])
def test_show_job_argv_takes_only_ids(bad: str) -> None:
    with pytest.raises(ValueError):
        show_job_argv(bad)


class Scontrol:
    """Answers `scontrol show job -d ID` from captured records by ID (unit-test fake)."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers
        self.asked: list[str] = []

    def out(self, argv: list[str], **_: Any) -> str:
        self.asked.append(argv[-1])
        return self.answers[argv[-1]]

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, self.out(argv), "")


def test_agent_reads_array_tasks_and_het_leaders(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Scontrol({"12": _read("scontrol-job-d-array-task-22.05.txt"),
                     "10": _read("scontrol-job-d-het-leader-22.05.txt"),
                     "10+0": _read("scontrol-job-d-het-0-22.05.txt")})
    monkeypatch.setattr(agent, "SLURM", fake)
    assert agent.job_view("12", "a100-01", {}).devices == {"gpu": [0]}
    assert agent.job_view("10", "a100-02", {}).devices == {"gpu": [0, 1]}
    assert fake.asked == ["12", "10", "10+0"]
    rec = agent.job_record("10")
    assert rec is not None and rec["JobState"] == "RUNNING"


def test_a_running_arrays_own_id_reads_its_own_task_only() -> None:
    """`scontrol show job 9` while 9 is task 3 and runs: four records (captured); 9 is
    asked again as 9_3 straight from line 1, and squeue's %A/%K pairs find the same."""
    every = _read("scontrol-job-d-array-master-running-22.05.txt")
    one = _read("scontrol-job-d-array-9_3-22.05.txt")
    answers = {"9": every, "9_3": one}
    with pytest.raises(AmbiguousRecord):
        parse_job_devices(every, "a100-01")
    text = show_one_job(lambda argv: answers[argv[-1]], 9, detail=True)
    assert text == one and parse_job_devices(text, "a100-01") == {"gpu": [1]}
    assert parse_array_task(_read("squeue-array-tasks-22.05.txt"), 9) == "3"
    assert parse_array_task(_read("squeue-array-tasks-22.05.txt"), 14) == "2"
