"""The node exporter puts a job on its devices by identity, as the agent does.

The fake layer stands for NVML: `minors` gives each device's minor number in NVML's order,
and gres.conf's /dev/nvidia[0-3] gives Slurm's index i the device of minor i. With minors
[1, 2, 3, 0] NVML's device 0 is /dev/nvidia1: a job Slurm gave GRES index 1 holds NVML
device 0, and the exporter must report that device's power, energy and utilisation as the
job's, never those of NVML device 1 (another job's, or an idle one).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurm_hetero.energy import agent
from slurm_hetero.energy.devices import DeviceInfo
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.energy.state import AgentConfig
from slurm_hetero.monitor.holders import Holder, Holders, parse_job_record
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule
from tests.unit.test_monitor_node import NODE, by_index, exporter, scrape

ROTATED = [1, 2, 3, 0]  # minor of NVML device 0, 1, 2, 3
LOADS = [0.1, 0.2, 0.3, 0.4]  # per NVML device: 70, 140, 210, 280 W at a 700 W default


@pytest.fixture
def cfg(tmp_path: Path) -> AgentConfig:
    path = tmp_path / "gpu-node.json"
    FakeDevices.create(path, "gpu", 4, "h100", default_w=700, minors=ROTATED)
    for i, load in enumerate(LOADS):
        FakeDevices(path)._update(i, load=load)
    (tmp_path / "gres.conf").write_text(f"NodeName={NODE} Name=gpu Type=h100 File=/dev/nvidia[0-3]\n")
    return AgentConfig(
        state_dir=tmp_path / "agent", history=tmp_path / "agent" / "history.jsonl",
        groups=[{"nodes": NODE, "devices": f"fake:{path}"}],
        policies={p.name: p for p in DEFAULT_POLICIES}, auto=AutoRule(), update_comment=False,
        gres_conf=tmp_path / "gres.conf")


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> dict[str, agent.JobView]:
    table: dict[str, agent.JobView] = {}
    monkeypatch.setattr(agent, "job_view", lambda job_id, node: table[job_id])
    return table


def job(jobs: dict[str, agent.JobView], job_id: str, user: str, idx: list[int], energy: str) -> None:
    jobs[job_id] = agent.JobView(job_id, user, "train", json.dumps({"hetero": 1, "energy": energy}), {"gpu": idx})


def test_a_jobs_power_is_its_own_devices_where_nvml_and_dev_orders_differ(
        cfg: AgentConfig, jobs: dict[str, agent.JobView]) -> None:
    job(jobs, "41", "alice", [1], "efficiency")  # /dev/nvidia1 = minor 1 = NVML device 0
    job(jobs, "42", "bob", [3], "balanced")  # /dev/nvidia3 = minor 3 = NVML device 2
    t0 = time.time()
    agent.prolog(cfg, "41", NODE)
    t1 = time.time()
    agent.prolog(cfg, "42", NODE)
    time.sleep(0.3)
    exp = exporter(cfg)
    t2 = time.time()
    exp.sample()
    t3 = time.time()
    m = scrape(exp)
    # Device series stay in the backend's numbering: NVML device i draws 700 x LOADS[i].
    power = {i: v for i, (_, v) in by_index(m["hetero_device_power_watts"]).items()}
    assert power == pytest.approx({0: 70.0, 1: 140.0, 2: 210.0, 3: 280.0})
    # The jobs sit on the devices their files are: by number they would be on 1 and 3.
    info = sorted((lb["index"], lb["jobid"], lb["user"], lb["policy"]) for lb, _ in m["hetero_device_job_info"])
    assert info == [("0", "41", "alice", "efficiency"), ("2", "42", "bob", "balanced")]
    assert {i: v for i, (_, v) in by_index(m["hetero_device_job_id"]).items()} == {0: 41, 1: 0, 2: 42, 3: 0}
    assert {i: v for i, (_, v) in by_index(m["hetero_device_allocated"]).items()} == {0: 1, 1: 0, 2: 1, 3: 0}
    assert {i: v for i, (_, v) in by_index(m["hetero_device_agent_changed"]).items()} == {0: 1, 1: 0, 2: 1, 3: 0}
    # The agent capped the same devices (efficiency: 420 W, balanced: 595 W).
    assert {i: v for i, (_, v) in by_index(m["hetero_device_power_limit_watts"]).items()} == \
        {0: 420, 1: 700, 2: 595, 3: 700}
    # Per job: each one's own device's power, and energy from that device's own counter.
    jp = {(lb["jobid"], lb["stat"]): v for lb, v in m["hetero_job_power_watts"]}
    assert jp == pytest.approx({("41", "mean"): 70.0, ("41", "max"): 70.0, ("42", "mean"): 210.0,
                                ("42", "max"): 210.0})
    ju = {(lb["jobid"], lb["stat"]): v for lb, v in m["hetero_job_utilization_ratio"]}
    assert ju[("41", "mean")] == pytest.approx(0.1) and ju[("42", "mean")] == pytest.approx(0.3)
    je = {lb["jobid"]: v for lb, v in m["hetero_job_energy_joules"]}
    # NVML device 0 counted 70 W from job 41's prolog (in [t0, t1]) to the sample (in [t2, t3]).
    assert 70 * (t2 - t1) * 0.99 <= je["41"] <= 70 * (t3 - t0) * 1.01, (je, t0, t1, t2, t3)

    agent.epilog(cfg, "41", NODE)
    exp.sample()
    m = scrape(exp)
    assert [(lb["index"], lb["jobid"]) for lb, _ in m["hetero_device_job_info"]] == [("2", "42")]
    assert {i: v for i, (_, v) in by_index(m["hetero_device_agent_changed"]).items()} == {0: 0, 1: 0, 2: 1, 3: 0}


def test_a_device_the_agent_refused_is_held_by_nobody(cfg: AgentConfig, jobs: dict[str, agent.JobView]) -> None:
    FakeDevices(Path(str(cfg.devices_for(NODE)).removeprefix("fake:")))._update(3, minor=7)  # no /dev/nvidia0
    job(jobs, "43", "carol", [0, 2], "efficiency")  # minor 0: no device; minor 2 = NVML device 1
    rec = agent.prolog(cfg, "43", NODE)
    assert [d.get("refused", "") != "" for d in rec["devices"]] == [True, False]
    exp = exporter(cfg)
    exp.sample()
    m = scrape(exp)
    # Not NVML device 0 (the number Slurm gave), nor any other: the job is on its one matched device.
    assert [(lb["index"], lb["jobid"]) for lb, _ in m["hetero_device_job_info"]] == [("1", "43")]
    assert [(lb["jobid"], v) for lb, v in m["hetero_job_devices"]] == [("43", 1)]


GPUS = [DeviceInfo(i, "gpu", "h100", identity=f"minor:{m}", minor=m) for i, m in enumerate(ROTATED)]


def write(d: Path, name: str, data: object) -> None:
    (d / name).write_text(json.dumps(data))


def test_holders_find_devices_by_the_identity_the_prolog_noted(tmp_path: Path) -> None:
    d = tmp_path / "node"
    d.mkdir()
    write(d, "job-1.json", {"job": "1", "user": "ann", "policy": "efficiency", "devices": [
        {"kind": "gpu", "idx": 1, "dev": 0, "identity": "minor:1", "t": 1.0, "energy_j": 5.0},
        # renumbered since the prolog (a driver reload): the identity wins over `dev`
        {"kind": "gpu", "idx": 3, "dev": 0, "identity": "minor:3", "t": 1.0},
        {"kind": "gpu", "idx": 0, "t": 1.0, "applied": [], "refused": "no such device"},
        {"kind": "gpu", "idx": 2, "dev": 1, "identity": "minor:9", "t": 1.0}]})  # gone: nobody's
    # written before identities: that agent used Slurm's index as the backend's
    write(d, "job-2.json", {"job": "2", "user": "old", "devices": [{"kind": "npu", "idx": 1, "t": 2.0}]})
    # a backend without identities: the index the prolog used
    write(d, "job-3.json", {"job": "3", "user": "bo", "devices": [
        {"kind": "npu", "idx": 0, "dev": 3, "identity": "", "t": 3.0}]})
    held = Holders(d).devices(GPUS)
    assert held == {("gpu", 0): Holder("1", "ann", "efficiency", 1.0, 5.0),
                    ("gpu", 2): Holder("1", "ann", "efficiency", 1.0, None),
                    ("npu", 1): Holder("2", "old", "", 2.0, None),
                    ("npu", 3): Holder("3", "bo", "", 3.0, None)}
    # Without the backend's list no identity can be told: only what needs none is placed.
    assert set(Holders(d).devices()) == {("npu", 1), ("npu", 3)}


def test_owner_files_name_the_changed_device_by_identity(tmp_path: Path) -> None:
    d = tmp_path / "node"
    d.mkdir()
    write(d, "dev-gpu1.json", {"job": "1", "dev": 0, "identity": "minor:1"})
    write(d, "dev-gpu2.json", {"job": "1", "dev": 1, "identity": "minor:8"})  # gone
    write(d, "dev-npu4.json", {"job": "2"})  # before identities: npu 4 by number
    (d / "dev-gpu3.json").write_text("{half")
    holders = Holders(d)
    assert holders.changed(GPUS) == {("gpu", 0), ("npu", 4)}
    write(d, "dev-gpu2.json", {"job": "1", "dev": 1, "identity": "minor:3"})  # replaced: read again
    assert holders.changed(GPUS) == {("gpu", 0), ("gpu", 2), ("npu", 4)}


def test_record_identity_is_bounded_text() -> None:
    r = parse_job_record("5", {"job": "5", "devices": [
        {"kind": "gpu", "idx": 0, "dev": True, "identity": ["minor:0"]},
        {"kind": "gpu", "idx": 1, "dev": 2, "identity": "x" * 500}]})
    assert r is not None
    assert [(h.dev, h.identity) for h in r.devices] == [(None, ""), (None, "")]
    assert Holders(Path("/nonexistent")).devices(GPUS, [r]) == {}
