"""Allocated indices from captured `scontrol show job -d` (Slurm 22.05), hostlists, and the
TaskProlog lines built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetero.containers.gres import expand_hostlist, parse_job_gres, parse_ranges
from slurm_hetero.containers.taskprolog import export_lines

DATA = Path(__file__).resolve().parents[1] / "data" / "containers"


def captured(name: str) -> str:
    return (DATA / f"scontrol-job-d-{name}-22.05.txt").read_text()


@pytest.mark.parametrize(("name", "expected"), [
    ("gpu", {"a100-01": {"gpu": [2, 3]}}),
    ("npu-2nodes", {"npu-01": {"npu": [3, 4]}, "npu-02": {"npu": [0, 1]}}),
    ("npu-hostlist", {"npu-01": {"npu": [0, 1]}, "npu-02": {"npu": [0, 1]}}),
    ("shard", {"v100-01": {"shard": [0]}}),
    ("cpu", {"cpu-arm-01": {}}),
])
def test_parse_captured_scontrol(name: str, expected: dict[str, dict[str, list[int]]]) -> None:
    assert parse_job_gres(captured(name)) == expected


def test_several_gres_on_one_node() -> None:
    text = "     Nodes=x[1-2] CPU_IDs=0 Mem=1 GRES=gpu:a100:1(IDX:0),npu:910b:3(IDX:1-2,5)\n"
    assert parse_job_gres(text) == {"x1": {"gpu": [0], "npu": [1, 2, 5]},
                                    "x2": {"gpu": [0], "npu": [1, 2, 5]}}


@pytest.mark.parametrize(("expr", "names"), [
    ("a100-01", ["a100-01"]),
    ("npu-[01-02],h100-01", ["npu-01", "npu-02", "h100-01"]),
    ("r[1-2]-n[08-10]", ["r1-n08", "r1-n09", "r1-n10", "r2-n08", "r2-n09", "r2-n10"]),
    ("n[1,3-4]", ["n1", "n3", "n4"]),
])
def test_hostlists(expr: str, names: list[str]) -> None:
    assert expand_hostlist(expr) == names


def test_ranges() -> None:
    assert parse_ranges("0-2,5,7-7") == [0, 1, 2, 5, 7]
    assert parse_ranges("") == []


def test_taskprolog_exports_host_indices_and_unsets_without_allocation() -> None:
    env = {"npu": ["ASCEND_RT_VISIBLE_DEVICES", "SLURM_JOB_NPUS"]}
    assert export_lines(env, {"npu": [3, 4]}) == ["export ASCEND_RT_VISIBLE_DEVICES=3,4",
                                                  "export SLURM_JOB_NPUS=3,4"]
    assert export_lines(env, {"gpu": [0]}) == ["unset ASCEND_RT_VISIBLE_DEVICES", "unset SLURM_JOB_NPUS"]
