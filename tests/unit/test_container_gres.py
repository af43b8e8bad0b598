"""Allocated indices for the container wrapper and the TaskProlog: from slurmctld's detail
lines only (captured `scontrol show job -d`, Slurm 22.05), refused when user text imitates
one, and the TaskProlog lines built from them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.containers import gres
from slurm_hetero.containers.taskprolog import export_lines
from slurm_hetero.errors import RuntimeFailure

DATA = Path(__file__).resolve().parents[1] / "data"


def test_ranges() -> None:
    assert gres.parse_ranges("0-2,5,7-7") == [0, 1, 2, 5, 7]
    assert gres.parse_ranges("") == []


def answer_with(monkeypatch: pytest.MonkeyPatch, text: str) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(self: Any, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, text, "")

    monkeypatch.setattr("slurm_hetero.slurm.runner.Runner.run", run)
    return calls


def test_allocation_of_a_two_node_npu_job(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = answer_with(monkeypatch, (DATA / "containers/scontrol-job-d-npu-2nodes-22.05.txt").read_text())
    assert gres.job_allocation("12", "npu-01") == {"npu": [3, 4]}
    assert gres.job_allocation("12", "npu-02") == {"npu": [0, 1]}
    assert calls[0] == ["scontrol", "show", "job", "-d", "12"]


def test_a_forged_detail_line_gives_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    answer_with(monkeypatch, (DATA / "captured/scontrol-job-d-injected-22.05.txt").read_text())
    with pytest.raises(RuntimeFailure, match="ambiguous"):
        gres.job_allocation("1", "npu-01")
    with pytest.raises(RuntimeFailure, match="not a number"):
        gres.job_allocation("1;reboot", "npu-01")


def test_taskprolog_exports_host_indices_and_unsets_without_allocation() -> None:
    env = {"npu": ["ASCEND_RT_VISIBLE_DEVICES", "SLURM_JOB_NPUS"]}
    assert export_lines(env, {"npu": [3, 4]}) == ["export ASCEND_RT_VISIBLE_DEVICES=3,4",
                                                  "export SLURM_JOB_NPUS=3,4"]
    assert export_lines(env, {"gpu": [0]}) == ["unset ASCEND_RT_VISIBLE_DEVICES", "unset SLURM_JOB_NPUS"]
