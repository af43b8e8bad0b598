"""The node agent takes job facts from slurmd's environment and from records user text cannot
steer; a prolog that stops midway leaves a record of what it may have changed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.energy import agent
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.energy.state import AgentConfig, NodeState
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule
from slurm_hetero.slurm.scontrol import AmbiguousRecord

DATA = Path(__file__).resolve().parents[1] / "data"


class Scontrol:
    """Answers `scontrol show job -d N` with a captured record (unit-test fake)."""

    def __init__(self, text: str):
        self.text = text

    def out(self, argv: list[str], **_: Any) -> str:
        assert argv[:4] == ["scontrol", "show", "job", "-d"]
        return self.text

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, self.text, "")


def test_slurmd_gpu_list_wins_over_scontrol(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "SLURM", Scontrol((DATA / "containers/scontrol-job-d-gpu-22.05.txt").read_text()))
    env = {"SLURM_JOB_ID": "13", "SLURM_JOB_GPUS": "2,3", "SLURM_JOB_USER": "alice",
           "SLURM_JOB_NUM_NODES": "1"}
    v = agent.job_view("13", "a100-01", env)
    assert v.devices == {"gpu": [2, 3]} and v.user == "alice" and v.num_nodes == 1
    # An environment of another job (a stale shell) is not believed: scontrol's view is used.
    v = agent.job_view("13", "a100-01", {**env, "SLURM_JOB_ID": "99", "SLURM_JOB_GPUS": "0-7"})
    assert v.devices == {"gpu": [2, 3]} and v.user == "root"


def test_forged_detail_line_leaves_the_devices_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(agent, "SLURM", Scontrol((DATA / "captured/scontrol-job-d-injected-22.05.txt").read_text()))
    with pytest.raises(AmbiguousRecord):
        agent.job_view("1", "npu-01", {})
    FakeDevices.create(tmp_path / "npu.json", "npu", 8, "910b")
    (tmp_path / "hetero-agent.json").write_text(json.dumps({
        "state_dir": str(tmp_path / "agent"), "history": str(tmp_path / "agent/history.jsonl"),
        "groups": [{"nodes": "npu-01", "devices": f"fake:{tmp_path}/npu.json"}],
        "policies": {"efficiency": {"npu_power_mode": "low"}}}))
    monkeypatch.setenv("SLURM_HETERO_AGENT", str(tmp_path / "hetero-agent.json"))
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.setenv("SLURMD_NODENAME", "npu-01")
    assert agent.prolog_main() == 0  # the job still runs ...
    assert not list((tmp_path / "agent" / "npu-01").glob("*.json"))  # ... and nothing was touched
    assert "detail lines name node npu-01" in caplog.text


def test_a_prolog_stopped_midway_is_undone_by_the_epilog(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    FakeDevices.create(tmp_path / "gpu.json", "gpu", 4, "h100", default_w=700)
    (tmp_path / "gres.conf").write_text("NodeName=g01 Name=gpu Type=h100 File=/dev/nvidia[0-3]\n")
    cfg = AgentConfig(state_dir=tmp_path / "agent", history=tmp_path / "agent/history.jsonl",
                            groups=[{"nodes": "g01", "devices": f"fake:{tmp_path}/gpu.json"}],
                            policies={p.name: p for p in DEFAULT_POLICIES}, auto=AutoRule(),
                            update_comment=False, gres_conf=tmp_path / "gres.conf")
    view = agent.JobView("5", "alice", "train", json.dumps({"hetero": 1, "energy": "efficiency"}), {"gpu": [1, 2]})
    monkeypatch.setattr(agent, "job_view", lambda job_id, node: view)
    real_apply = agent.apply_policy

    def dies_on_second(dev: Any, kind: str, index: int, p: Any, default_w: float) -> list[str]:
        if index == 2:
            real_apply(dev, kind, index, p, default_w)  # changed, then the prolog is killed
            raise KeyboardInterrupt
        return real_apply(dev, kind, index, p, default_w)

    monkeypatch.setattr(agent, "apply_policy", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        agent.prolog(cfg, "5", "g01")
    dev = FakeDevices(tmp_path / "gpu.json")
    assert dev.state(1)["limit_w"] == 420 and dev.state(2)["limit_w"] == 420
    assert not (cfg.state_dir / "g01" / "job-5.json").exists()  # no record of the job ...
    agent.epilog(cfg, "5", "g01")  # ... yet the epilog restores both devices it owned
    assert [dev.state(i)["limit_w"] for i in range(4)] == [700] * 4
    assert not list((cfg.state_dir / "g01").glob("dev-*.json"))


def test_restore_survives_one_job_it_cannot_tell(tmp_path: Path) -> None:
    FakeDevices.create(tmp_path / "gpu.json", "gpu", 2, "h100", default_w=700)
    cfg = AgentConfig(state_dir=tmp_path / "agent", history=tmp_path / "agent/history.jsonl",
                            groups=[{"nodes": "g01", "devices": f"fake:{tmp_path}/gpu.json"}],
                            policies={p.name: p for p in DEFAULT_POLICIES}, auto=AutoRule())
    st = NodeState(cfg, "g01")
    for i, job in ((0, "7"), (1, "8")):
        (st.owner_file("gpu", i)).write_text(json.dumps({"job": job}))
    import os
    import time
    old = time.time() - 3600
    for i in (0, 1):
        os.utime(st.owner_file("gpu", i), (old, old))

    def alive(job: str) -> bool:
        if job == "7":
            raise AmbiguousRecord("JobState= appears 2 times")
        return False

    assert agent.restore(cfg, "g01", alive) == ["gpu1 (job 8)"]
    assert st.owner("gpu", 0) == "7"  # cannot tell: left for the next round
