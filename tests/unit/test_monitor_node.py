"""The node exporter on the fake device layer, with the node agent's own prolog/epilog
writing the records that say which job holds which device."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurm_hetero.energy import agent
from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.energy.state import AgentConfig, NodeState
from slurm_hetero.monitor.cli import node_exporter
from slurm_hetero.monitor.counters import EnergyCounters
from slurm_hetero.monitor.holders import Holder, Holders
from slurm_hetero.monitor.node import (
    AgentLog,
    DeviceSample,
    NodeExporter,
    Sample,
    aggregate,
    node_arch,
)
from slurm_hetero.monitor.serve import registry_for
from slurm_hetero.monitor.status import DeviceStatus
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule

NODE = "g01"


@pytest.fixture
def cfg(tmp_path: Path) -> AgentConfig:
    FakeDevices.create(tmp_path / "gpu-node.json", "gpu", 8, "h100", default_w=700, load=0.3,
                       memory_mib=81920)
    # The node's gres.conf: the agent matches Slurm's indices to devices through it.
    (tmp_path / "gres.conf").write_text(f"NodeName={NODE} Name=gpu Type=h100 File=/dev/nvidia[0-7]\n")
    return AgentConfig(
        state_dir=tmp_path / "agent", history=tmp_path / "agent" / "history.jsonl",
        groups=[{"nodes": NODE, "devices": f"fake:{tmp_path}/gpu-node.json"}],
        policies={p.name: p for p in DEFAULT_POLICIES}, auto=AutoRule(), update_comment=False,
        gres_conf=tmp_path / "gres.conf")


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> dict[str, agent.JobView]:
    """Stand-in for what slurmd and `scontrol show job -d` tell the prolog (unit tests only)."""
    table: dict[str, agent.JobView] = {}
    monkeypatch.setattr(agent, "job_view", lambda job_id, node: table[job_id])
    return table


def exporter(cfg: AgentConfig, **kw: Any) -> NodeExporter:
    spec = cfg.devices_for(NODE)
    assert spec
    st = NodeState(cfg, NODE)
    return NodeExporter(node=NODE, arch="x86_64", dev=open_devices(spec, st.dir), node_dir=st.dir,
                        agent_log=cfg.state_dir / "agent.log", **kw)


def scrape(exp: NodeExporter) -> dict[str, list[tuple[dict[str, str], float]]]:
    """What Prometheus would read: the text format, parsed back by prometheus_client."""
    text = generate_latest(registry_for(exp)).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def by_index(series: list[tuple[dict[str, str], float]]) -> dict[int, tuple[dict[str, str], float]]:
    return {int(labels["index"]): (labels, v) for labels, v in series}


def test_the_job_holding_a_device_is_one_info_series(cfg: AgentConfig, jobs: dict[str, agent.JobView]) -> None:
    jobs["41"] = agent.JobView("41", "alice", "train", json.dumps({"hetero": 1, "energy": "efficiency"}),
                               {"gpu": [2, 5]})
    agent.prolog(cfg, "41", NODE)
    exp = exporter(cfg)
    exp.sample()
    m = scrape(exp)
    power = by_index(m["hetero_device_power_watts"])
    assert sorted(power) == list(range(8))
    # A device's own series carry only what the device keeps for life; the job is apart.
    stable = {"node": NODE, "kind": "gpu", "model": "h100", "arch": "x86_64"}
    for i, (labels, _) in power.items():
        assert labels == {**stable, "index": str(i)}, labels
    info = m["hetero_device_job_info"]
    assert sorted((labels["index"], labels["jobid"], labels["user"], labels["policy"], v) for labels, v in info) == \
        [("2", "41", "alice", "efficiency", 1.0), ("5", "41", "alice", "efficiency", 1.0)]
    assert set(info[0][0]) == {"node", "kind", "index", "jobid", "user", "policy"}
    assert {i: v for i, (_, v) in by_index(m["hetero_device_job_id"]).items()} == \
        {i: 41.0 if i in (2, 5) else 0.0 for i in range(8)}
    # The fake draws default x load = 210 W, under the 420 W cap efficiency applies.
    assert power[2][1] == pytest.approx(210)
    limits = by_index(m["hetero_device_power_limit_watts"])
    assert limits[2][1] == 420 and limits[0][1] == 700
    assert by_index(m["hetero_device_non_default"])[2][1] == 1
    assert by_index(m["hetero_device_non_default"])[0][1] == 0
    assert by_index(m["hetero_device_allocated"])[5][1] == 1
    assert by_index(m["hetero_device_clock_policy_info"])[2][0]["level"] == "medium"
    assert by_index(m["hetero_device_memory_total_bytes"])[0][1] == 81920 * 2**20
    assert "hetero_device_temperature_celsius" not in m  # the fake has none: not exported
    # 10 s tier: the job's devices on this node
    jd = m["hetero_job_devices"]
    assert [(labels["jobid"], labels["user"], labels["policy"], v) for labels, v in jd] == \
        [("41", "alice", "efficiency", 2)]
    jp = {labels["stat"]: v for labels, v in m["hetero_job_power_watts"]}
    assert jp["mean"] == pytest.approx(420) and jp["max"] == pytest.approx(420)

    series_before = {(name, tuple(sorted(labels.items()))) for name, ss in m.items() if name.startswith("hetero_device")
                     and name != "hetero_device_job_info" for labels, _ in ss}
    agent.epilog(cfg, "41", NODE)
    exp.sample()
    m = scrape(exp)
    assert "hetero_device_job_info" not in m  # no job: no series at all, not a 0
    assert all(v == 0 for _, v in m["hetero_device_job_id"])
    assert all(v == 0 for _, v in m["hetero_device_non_default"])
    # The job came and went; the devices' series are the same ones, but for the clock level
    # the agent applied and restored (a device state: a handful of values per device).
    series_after = {(name, tuple(sorted(labels.items()))) for name, ss in m.items() if name.startswith("hetero_device")
                    and name != "hetero_device_job_info" for labels, _ in ss}
    differ = {(name, dict(labels)["index"], dict(labels).get("level")) for name, labels in series_before ^ series_after}
    assert differ == {("hetero_device_clock_policy_info", "2", "medium"), ("hetero_device_clock_policy_info", "2", "default"),
                      ("hetero_device_clock_policy_info", "5", "medium"), ("hetero_device_clock_policy_info", "5", "default")}, differ


def test_a_device_left_changed_without_a_job_is_visible(cfg: AgentConfig,
                                                        jobs: dict[str, agent.JobView]) -> None:
    """The epilog never came (node crash): the owner file stays, the job record is gone."""
    jobs["7"] = agent.JobView("7", "bob", "x", json.dumps({"hetero": 1, "energy": "efficiency"}), {"gpu": [1]})
    agent.prolog(cfg, "7", NODE)
    NodeState(cfg, NODE).job_file("7").unlink()
    exp = exporter(cfg)
    exp.sample()
    m = scrape(exp)
    assert by_index(m["hetero_device_non_default"])[1][1] == 1
    assert by_index(m["hetero_device_allocated"])[1][1] == 0
    assert by_index(m["hetero_device_agent_changed"])[1][1] == 1


def test_holder_records_that_are_not_the_agents_are_ignored(tmp_path: Path) -> None:
    d = tmp_path / "node"
    d.mkdir()
    (d / "job-5.json").write_text(json.dumps({"job": "6", "user": "eve", "devices": [{"kind": "gpu", "idx": 0}]}))
    (d / "job-x.json").write_text(json.dumps({"job": "x", "user": "eve", "devices": [{"kind": "gpu", "idx": 1}]}))
    (d / "job-8.json").write_text("{not json")
    (d / "job-9.json").write_text(json.dumps({"job": "9", "user": "ann", "devices": [
        {"kind": "gpu", "idx": 2, "t": 10.0}, {"kind": "tpu", "idx": 3}, {"kind": "gpu", "idx": "4"}]}))
    # a record a crashed epilog left behind names a device a newer job holds: the newest wins
    (d / "job-3.json").write_text(json.dumps({"job": "3", "user": "old", "devices": [{"kind": "gpu", "idx": 2, "t": 5.0}]}))
    held = Holders(d).devices()
    assert held == {("gpu", 2): Holder("9", "ann", "", 10.0, None)}


def test_energy_stays_monotonic_across_restarts_and_counter_resets(cfg: AgentConfig) -> None:
    exp = exporter(cfg)
    exp.sample()
    time.sleep(0.2)
    exp.sample()
    first = {labels["index"]: v for labels, v in scrape(exp)["hetero_device_energy_joules_total"]}
    exp.energy.save()
    spec = cfg.devices_for(NODE)
    assert spec
    fake = FakeDevices(spec.removeprefix("fake:"))
    fake._update(0, energy_j=0.0)  # the device's own counter went back (driver reload)
    time.sleep(0.2)
    again = exporter(cfg)  # a new process: reads the totals on disk
    again.sample()
    second = {labels["index"]: v for labels, v in scrape(again)["hetero_device_energy_joules_total"]}
    assert all(second[i] >= first[i] for i in first), (first, second)
    # device 1 kept counting: its growth while the exporter was away is in the total
    assert second["1"] - first["1"] == pytest.approx(210 * 0.2, rel=0.5)


def test_counterless_devices_are_integrated_by_the_exporter(tmp_path: Path) -> None:
    c = EnergyCounters(tmp_path / "e.json", max_gap_s=5)
    assert c.update("npu0", None, 300.0, 100.0) == (0.0, 0.0)
    assert c.update("npu0", None, 100.0, 102.0) == (400.0, 400.0)  # trapezoid
    assert c.update("npu0", None, 100.0, 200.0)[0] == 400.0  # a gap is not integrated across
    c.add_policy("idle", 400.0)
    c.save()
    again = EnergyCounters(tmp_path / "e.json")
    assert again.update("npu0", None, 100.0, 201.0)[0] == 400.0 and again.by_policy == {"idle": 400.0}
    # a counter seen for the first time starts at its own value, counted for nobody
    assert again.update("gpu0", 5000.0, 1.0, 1.0) == (5000.0, 0.0)
    assert again.update("gpu0", 5100.0, 1.0, 2.0) == (5100.0, 100.0)
    assert again.update("gpu0", 30.0, 1.0, 3.0) == (5130.0, 30.0)  # reset: what it counted since


def sample(t: float, devs: list[tuple[int, float, float, str]]) -> Sample:
    return Sample(t=t, devices=tuple(
        DeviceSample(key=("gpu", i), power_w=p, util=u, energy_j=0.0, raw_energy_j=1000.0 + t,
                     holder=Holder(job, "u", "balanced", 0.0, 1000.0) if job else None,
                     status=DeviceStatus(), changed_by_agent=False) for i, p, u, job in devs))


def test_aggregate_per_node_and_job() -> None:
    ring = [sample(t, [(0, 100.0 * t, 0.5, "1"), (1, 50.0, 0.1, "1"), (2, 10.0, 0.0, "")]) for t in (1, 2, 3)]
    ring.insert(0, sample(-20, [(0, 9999.0, 1.0, "1")]))  # outside the window
    tier = aggregate(ring, now=3.0, window_s=10.0)
    assert tier.samples == 3
    assert tier.node_power_w and tier.node_power_w.max == 360.0 and tier.node_power_w.mean == 260.0
    assert tier.node_util and tier.node_util.mean == pytest.approx(0.2)
    (job,) = tier.jobs
    assert (job.job, job.devices, job.policy) == ("1", 2, "balanced")
    assert job.power_w and job.power_w.mean == 250.0 and job.power_w.max == 350.0
    assert job.util and job.util.max == pytest.approx(0.3)
    assert job.energy_j == pytest.approx(2 * 3.0)  # counters at 1003 vs 1000 at the prolog


def test_agent_log_errors_are_counted_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "agent.log"
    path.write_text("2024 ERROR old\n")
    log = AgentLog(path)
    with open(path, "a") as f:
        f.write("2024 INFO prolog job 1\n2024 ERROR epilog job 1 on g01 failed: x\n2024 WARNING w\n2024 ERR")
    log.poll()
    assert log.counts == {"error": 1, "warning": 1}
    with open(path, "a") as f:
        f.write("OR partial line completed\n")
    log.poll()
    assert log.counts == {"error": 2, "warning": 1}
    path.write_text("")  # rotated
    log.poll()
    path.write_text("2024 ERROR new\n")
    log.poll()
    assert log.counts["error"] == 3


def test_arch_labels() -> None:
    assert node_arch("arm64") == "aarch64" and node_arch("x86_64") == "x86_64"
    assert node_arch("ARMv8") == "aarch64" and node_arch() == node_arch(platform.machine())


def test_cli_bad_input_names_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = CliRunner().invoke(node_exporter, ["--every", "5", "--tier", "2"])
    assert r.exit_code == 2 and "--tier" in r.output, r.output
    r = CliRunner().invoke(node_exporter, ["--port", "70000"])
    assert r.exit_code == 2 and "--port" in r.output, r.output
    monkeypatch.setenv("SLURM_HETERO_AGENT", str(tmp_path / "missing.json"))
    r = CliRunner().invoke(node_exporter, ["--node", NODE, "--port", "0"])
    assert r.exit_code == 2 and "missing.json" in r.output, r.output


def test_cli_state_dir_must_be_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "hetero-agent.json"
    conf.write_text(json.dumps({"state_dir": str(tmp_path / "agent"), "history": str(tmp_path / "h.jsonl"),
                                "groups": [], "policies": {}}))
    monkeypatch.setenv("SLURM_HETERO_AGENT", str(conf))
    r = CliRunner().invoke(node_exporter, ["--node", NODE, "--port", "0", "--state-dir", str(tmp_path / "nowhere")])
    assert r.exit_code == 2 and f"--state-dir {tmp_path / 'nowhere'}: not a folder this user" in r.output, r.output
    assert not (tmp_path / "agent").exists()  # the exporter creates nothing in the agent's folder


def test_counters_move_to_the_exporters_own_folder(cfg: AgentConfig, tmp_path: Path) -> None:
    """Its counters in its own folder; totals an exporter kept in the agent's folder (as root,
    before) go on from where they were."""
    old = exporter(cfg)
    old.sample()
    old.energy.save()
    before = {labels["index"]: v for labels, v in scrape(old)["hetero_device_energy_joules_total"]}
    node_dir = NodeState(cfg, NODE).dir
    kept = (node_dir / "monitor-energy.json").read_bytes()
    own = tmp_path / "own"
    own.mkdir()
    new = exporter(cfg, state_dir=own)
    new.sample()
    new.energy.save()
    after = {labels["index"]: v for labels, v in scrape(new)["hetero_device_energy_joules_total"]}
    assert all(after[i] >= before[i] for i in before), (before, after)
    assert (own / "monitor-energy.json").exists() and (node_dir / "monitor-energy.json").read_bytes() == kept


Scrape = dict[str, list[tuple[dict[str, str], float]]]


def _scrape_url(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: Scrape = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _run_as(uid: int, groups: list[int], argv: list[str], env: dict[str, str]) -> Scrape:
    """Start the exporter as uid (only `groups`), scrape it once it listens, stop it."""
    priv = ["setpriv", f"--reuid={uid}", f"--regid={uid}",
            f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"]
    p = subprocess.Popen([*priv, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        deadline, port = time.monotonic() + 60, None
        while port is None and time.monotonic() < deadline:
            line = p.stderr.readline()
            assert line or p.poll() is None, "the exporter stopped"
            m = re.search(r" on http://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        assert port, "the exporter never listened"
        time.sleep(0.5)  # a few samples
        return _scrape_url(f"http://127.0.0.1:{port}/metrics")
    finally:
        p.terminate()
        p.wait(10)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become another user")
def test_node_exporter_runs_as_an_unprivileged_user_of_the_agents_group() -> None:
    """What the unit gives it: an unprivileged user whose only way into the node agent's
    root-owned 0750 folder is its group, and a state folder of its own. It reads who holds
    each device and writes nothing but its own counters; without the group it sees no job."""
    uid, group = 65534, 4242
    base = Path(tempfile.mkdtemp(prefix="hetero-exporter-"))
    try:
        base.chmod(0o755)  # pytest's own folders are root's alone
        fake = base / "gpu.json"
        FakeDevices.create(fake, "gpu", 2, "h100", default_w=700, load=0.3, memory_mib=1000)
        agent_dir = base / "agent"
        node_dir = agent_dir / NODE
        node_dir.mkdir(parents=True)
        os.chown(agent_dir, 0, group)
        agent_dir.chmod(0o750)
        (node_dir / "job-41.json").write_text(json.dumps({"job": "41", "user": "alice", "policy": "balanced",
                                                          "devices": [{"kind": "gpu", "idx": 1, "t": 1.0}]}))
        conf = base / "hetero-agent.json"
        conf.write_text(json.dumps({"state_dir": str(agent_dir), "history": str(agent_dir / "history.jsonl"),
                                    "groups": [{"nodes": NODE, "devices": f"fake:{fake}"}], "policies": {}}))
        state = base / "state"
        state.mkdir(mode=0o700)
        os.chown(state, uid, uid)
        listing = sorted(p.name for p in node_dir.iterdir())
        argv = [sys.executable, "-m", "slurm_hetero.monitor", "node-exporter", "--node", NODE, "--port", "0",
                "--listen", "127.0.0.1", "--every", "0.2", "--tier", "1", "--state-dir", str(state)]
        env = {**os.environ, "SLURM_HETERO_AGENT": str(conf)}

        m = _run_as(uid, [group], argv, env)
        assert [(labels["index"], labels["jobid"], labels["user"]) for labels, _ in m["hetero_device_job_info"]] == \
            [("1", "41", "alice")]
        assert len(m["hetero_device_power_watts"]) == 2
        assert (state / "monitor-energy.json").stat().st_uid == uid  # its counters, in its folder
        assert sorted(p.name for p in node_dir.iterdir()) == listing  # nothing written in the agent's

        m = _run_as(uid, [], argv, env)  # the same user outside the group
        assert "hetero_device_job_info" not in m and len(m["hetero_device_power_watts"]) == 2
    finally:
        shutil.rmtree(base, ignore_errors=True)


class WithStatus:
    """A backend offering the optional `status(index)` (the interface for new backends)."""

    name = "future"

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def devices(self) -> Any:
        return self.inner.devices()

    def read(self, index: int) -> Any:
        return self.inner.read(index)

    def status(self, index: int) -> dict[str, Any]:
        return {"temperature_c": 40 + index, "memory_used_mib": 512, "sm_clock_mhz": 1410,
                "healthy": index != 1, "bogus": 1, "power_limit_w": "not a number"}


def test_backend_status_fields_are_exported_where_given(cfg: AgentConfig) -> None:
    spec = cfg.devices_for(NODE)
    assert spec
    st = NodeState(cfg, NODE)
    exp = NodeExporter(node=NODE, arch="x86_64", dev=WithStatus(open_devices(spec, st.dir)),  # type: ignore[arg-type]
                       node_dir=st.dir)
    exp.sample()
    m = scrape(exp)
    assert by_index(m["hetero_device_temperature_celsius"])[3][1] == 43
    assert by_index(m["hetero_device_memory_used_bytes"])[0][1] == 512 * 2**20
    assert {lb["clock"] for lb, _ in m["hetero_device_clock_mhz"]} == {"sm"}
    assert by_index(m["hetero_device_healthy"])[1][1] == 0 and by_index(m["hetero_device_healthy"])[0][1] == 1
    assert "hetero_device_power_limit_watts" not in m  # a value of the wrong type is dropped
