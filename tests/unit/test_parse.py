"""Parsers on output captured from a real Slurm 22.05 cluster (tests/data/captured)."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from slurm_hetero.slurm import parse

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured"
# The fields sacct-22.05.txt was captured with (JobName among them: the parser reads any list;
# what is fetched beside other fields is checked apart, parse.check_trusted).
CAPTURED_SACCT_FIELDS = ["JobID", "JobName", "Partition", "NodeList", "State", "ExitCode", "AllocTRES",
                         "Elapsed", "QOS", "Submit", "Start", "End"]


def test_doctests() -> None:
    assert doctest.testmod(parse).failed == 0


def test_version() -> None:
    assert parse.parse_version((CAPTURED / "version-22.05.txt").read_text()) == (22, 5)
    assert parse.parse_version("slurm-wlm 24.11.1") == (24, 11)
    with pytest.raises(ValueError):
        parse.parse_version("garbage")


def test_sinfo_nodes() -> None:
    nodes = parse.parse_sinfo_nodes((CAPTURED / "sinfo-22.05.txt").read_text())
    assert len(nodes) == 11
    npu = nodes["npu-01"]
    assert (npu.state, npu.cpus, npu.memory_mib, npu.gres) == ("idle", 192, 1048576, "npu:910b:8")
    assert npu.features == ("aarch64", "huawei", "cann", "ascend-910b", "devmem64g")
    assert nodes["cpu-x86-01"].partitions == ("cpu",)  # the default marker '*' is stripped
    assert nodes["cpu-x86-01"].gres == ""
    assert parse.parse_gres(nodes["v100-01"].gres) == {"gpu:v100": 4, "shard:v100": 16}


def test_sacct() -> None:
    rows = parse.parse_sacct((CAPTURED / "sacct-22.05.txt").read_text(), CAPTURED_SACCT_FIELDS)
    assert len(rows) == 7
    by_node = {r["NodeList"]: r for r in rows}
    tres = parse.parse_tres(by_node["npu-01"]["AllocTRES"])
    assert tres["gres/npu:910b"] == "1" and tres["gres/npu"] == "1"
    assert by_node["h100-01"]["Partition"] == "gpu"
    with pytest.raises(ValueError, match="expected 12"):
        parse.parse_sacct("1|2|3\n", CAPTURED_SACCT_FIELDS)


def test_scontrol_job_record() -> None:
    rec = parse.parse_kv_record((CAPTURED / "scontrol-job-22.05.txt").read_text())
    assert rec["TresPerNode"] == "gres:gpu:a100-80gb:2"
    assert rec["Partition"] == "gpu" and rec["QOS"] == "gold" and rec["NodeList"] == "a100-01"
    assert rec["TRES"] == "cpu=2,mem=2G,node=1,billing=34,gres/gpu=2,gres/gpu:a100-80gb=2"
