"""The soak's pieces that need no cluster: the submitter that waits out a controller outage
(against a fake Slurm that is down for a while), the observer's bookkeeping, the schedule's
seeding and the audit's verdicts; agent-fail's switch in the fake backend and the devices
check on a crafted fake-device state; state-full's filler on a tiny tmpfs (root only)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.devcluster.faults import (
    FILLER,
    Injector,
    SoakCluster,
    devices_left,
    fill,
    fs_type,
    mounted,
    mounts,
    read_only,
    tmpfs_off,
    tmpfs_on,
    writable,
    write_error,
)
from slurm_hetero.energy import agent
from slurm_hetero.energy.fake import FAIL_SWITCH, FakeDevices
from slurm_hetero.energy.state import AgentConfig
from slurm_hetero.errors import InputError
from slurm_hetero.replay.clockmap import ClockMap
from slurm_hetero.replay.faults import (
    ALERT_FOR,
    BLOCKING,
    DAY_KINDS,
    DURATIONS,
    KINDS,
    SHORT_DURATIONS,
    SHORT_KINDS,
    Fault,
    Observer,
    PatientSubmitter,
    Seen,
    audit,
    parse_kinds,
    plan,
    transient,
)
from slurm_hetero.replay.sacct import JobRecord
from slurm_hetero.replay.submit import Request
from slurm_hetero.replay.window import ReplayJob
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule
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


def test_with_the_bridge_accelerator_jobs_stay_on_the_trace_sites_partitions(tmp_path: Path) -> None:
    clock = ClockMap(time.time(), 0.0, 50.0)
    jobs = [ReplayJob("1", 0, 60, 5, 4, 2, "u1", True), ReplayJob("2", 0, 60, 5, 4, 0, "u1", True)]
    sub = PatientSubmitter(FlakySlurm(), jobs, clock, clock.now(), Request(True), tmp_path / "job.sh", tmp_path,
                           accel_partitions="gpu,gpu-long")
    gpu, cpu = sub.sbatch(jobs[0]), sub.sbatch(jobs[1])
    assert "--partition=gpu,gpu-long" in gpu and "--accel=any:2" in gpu
    assert not any(a.startswith("--partition") for a in cpu)
    plain = PatientSubmitter(FlakySlurm(), jobs, clock, clock.now(), Request(True), tmp_path / "job.sh", tmp_path)
    assert not any(a.startswith("--partition") for a in plain.sbatch(jobs[0]))


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


# ---- agent-fail: the fake backend's switch, the agent's Prolog midway, the devices check ------
def agent_on_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[AgentConfig, FakeDevices]:
    """The node agent on one node `g01` of 4 fake GPUs; every job asks for efficiency on 0 and 1."""
    path = tmp_path / "dev" / "g01" / "fake-devices.json"
    path.parent.mkdir(parents=True)
    FakeDevices.create(path, "gpu", 4, "a100-80gb", default_w=400)
    (tmp_path / "gres.conf").write_text("NodeName=g01 Name=gpu File=/dev/nvidia[0-3]\n")
    cfg = AgentConfig(state_dir=tmp_path / "agent", history=tmp_path / "agent" / "history.jsonl",
                      groups=[{"nodes": "g01", "devices": f"fake:{path}"}],
                      policies={p.name: p for p in DEFAULT_POLICIES}, auto=AutoRule(),
                      gres_conf=tmp_path / "gres.conf")
    comment = json.dumps({"hetero": 1, "energy": "efficiency"})
    monkeypatch.setattr(agent, "job_view",
                        lambda job_id, node: agent.JobView(job_id, "root", "probe", comment, {"gpu": [0, 1]}))
    return cfg, FakeDevices(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="the switch counts only when root owns it")
def test_the_switch_fails_a_policy_midway_and_the_epilog_restores_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, dev = agent_on_fake(tmp_path, monkeypatch)
    switch = dev.path.with_name(FAIL_SWITCH)
    switch.write_text("on\n")
    with pytest.raises(OSError, match=FAIL_SWITCH):
        agent.prolog(cfg, "7", "g01")  # _entry logs it as an ERROR and exits 0
    states = [dev.state(i) for i in range(4)]
    assert states[0]["limit_w"] == 240 and states[0]["clock_level"] == "medium"  # the first device, whole
    assert [s["limit_w"] for s in states[1:]] == [400, 400, 400]  # the next write failed
    assert agent.epilog(cfg, "7", "g01") is None  # no prolog record: what its owner records name
    assert all(dev.state(i)["limit_w"] == 400 and dev.state(i)["clock_level"] == "default" for i in range(4))
    switch.unlink()
    agent.prolog(cfg, "8", "g01")  # the switch gone: the whole policy again
    assert [dev.state(i)["limit_w"] for i in range(4)] == [240, 240, 400, 400]


def test_the_switch_counts_only_as_roots_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "fake-devices.json"
    FakeDevices.create(path, "gpu", 2)
    dev = FakeDevices(path)
    switch = path.with_name(FAIL_SWITCH)
    assert not dev.failing()
    switch.symlink_to(path)  # a link, even to root's file, is no switch
    assert not dev.failing()
    switch.unlink()
    switch.write_text("on\n")
    assert dev.failing() is (os.geteuid() == 0)
    if os.geteuid() == 0:
        os.chown(switch, 65534, 65534)  # another user's file: no switch
        assert not dev.failing()
        os.chown(switch, 0, 0)
        dev.set_power_limit(0, 100)
        dev.set_power_limit(0, 90)  # the same device again: fine
        with pytest.raises(OSError):
            dev.set_gpu_clock_level(1, "low")
        dev.reset(0)  # restores never fail
        dev.reset(1)
        assert dev.state(0)["limit_w"] == dev.state(0)["default_w"]


@dataclass
class JobsOnNode(Runner):
    """squeue and `scontrol show job -d` for devices_left: job 5 holds gpu 0 on g01."""

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        if argv[0] == "squeue":
            return subprocess.CompletedProcess(argv, 0, "5\n", "")
        assert argv[:3] == ["scontrol", "show", "job"] and "5" in argv, argv
        return subprocess.CompletedProcess(
            argv, 0, "JobId=5 JobName=x\n   JobState=RUNNING\n     Nodes=g01 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)\n", "")


@dataclass
class OneNodeCluster:
    """What devices_left reads of a Cluster: its nodes, fake devices folder and runner."""

    dev: Path
    runner: Runner

    def info(self) -> dict[str, Any]:
        return {"nodes": ["g01"]}


def test_the_devices_check_counts_a_device_left_with_a_policy(tmp_path: Path) -> None:
    path = tmp_path / "g01" / "fake-devices.json"
    path.parent.mkdir()
    FakeDevices.create(path, "gpu", 3, default_w=400)
    dev = FakeDevices(path)
    c = OneNodeCluster(tmp_path, JobsOnNode())
    assert devices_left(c)["left"] == 0  # type: ignore[arg-type]
    dev.set_power_limit(0, 240)  # held by job 5: not left
    dev.set_gpu_clock_level(0, "medium")
    FakeDevices(path).set_gpu_clock_level(2, "medium")  # no job holds gpu 2: left
    got = devices_left(c)  # type: ignore[arg-type]
    assert (got["devices"], got["non_default"], got["left"]) == (3, 2, 1)
    assert got["examples"] == [{"node": "g01", "kind": "gpu", "index": 2, "limit_w": 400, "default_w": 400,
                                "clock_level": "medium"}]


def test_a_device_its_epilog_restores_between_two_readings_is_not_left(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "g01" / "fake-devices.json"
    path.parent.mkdir()
    FakeDevices.create(path, "gpu", 3, default_w=400)
    FakeDevices(path).set_gpu_clock_level(2, "medium")  # its job just ended; the epilog is on its way
    c = OneNodeCluster(tmp_path, JobsOnNode())
    monkeypatch.setattr(time, "sleep", lambda _s: FakeDevices(path).reset(2))
    assert devices_left(c)["left"] == 0  # type: ignore[arg-type]
    FakeDevices(path).set_gpu_clock_level(2, "medium")  # and one that stays
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    assert devices_left(c)["left"] == 1  # type: ignore[arg-type]


def test_agent_fail_is_planned_on_a_node_with_devices() -> None:
    fs = plan(["agent-fail", "slurmd-kill"], 7200, 3, ["n1", "n2"], SHORT_DURATIONS, gap_s=300,
              device_nodes=["gpu-1"])
    assert {f.kind: f.node for f in fs}["agent-fail"] == "gpu-1"
    assert {f.kind: f.node for f in fs}["slurmd-kill"] in ("n1", "n2")
    assert len(plan(list(DAY_KINDS), 7200, 293, ["n1"], SHORT_DURATIONS, gap_s=300)) == len(DAY_KINDS)  # fits
    with pytest.raises(InputError, match="do not fit"):  # all ten do not, in 2 hours
        plan(list(KINDS), 7200, 293, ["n1"], SHORT_DURATIONS, gap_s=300)


# ---- state-full: StateSaveLocation on a tmpfs of its own, filled -----------------------------
def test_state_full_is_planned_blocks_and_is_meant_the_stale_snapshot_alert() -> None:
    assert parse_kinds("state-full") == ["state-full"] and "state-full" in parse_kinds("all")
    # The defaults stay what they were: the day's nine, the short soak's three.
    assert "state-readonly" not in parse_kinds("default") and "state-full" in parse_kinds("default")
    assert list(DAY_KINDS) == [k for k in KINDS if k != "state-readonly"]
    assert parse_kinds("default", short=True) == list(SHORT_KINDS)
    assert (DURATIONS["state-full"], SHORT_DURATIONS["state-full"]) == (1800, 600)
    (f,) = plan(["state-full"], 7200, 293, ["n1"], SHORT_DURATIONS, gap_s=300)
    assert f.for_s == 600 and f.node == "" and 360 <= f.at_s <= 6840 - 600
    assert "state-full" in BLOCKING and ALERT_FOR["state-full"] == ALERT_FOR["state-readonly"] == "HeteroSnapshotStale"
    assert transient("sbatch: error: Batch job submission failed: No space left on device")


def holds(kind: str, ev: dict[str, Any]) -> bool:
    """Injector._holds alone (it reads only the fault and its evidence)."""
    return Injector.__new__(Injector)._holds(Fault(kind, 100.0, 600.0), ev)


def test_state_full_holds_only_when_full_throughout_then_writable_and_the_heartbeat_back() -> None:
    ev = {"write_error": "ENOSPC", "write_error_at_end": "ENOSPC", "filler_removed": True,
          "write_error_after": "", "heartbeat_back_real_s": 1.2}
    assert holds("state-full", ev)  # no daemon restarted: no clock to check
    for key, bad in (("write_error", ""), ("write_error", "EROFS"), ("write_error_at_end", ""),
                     ("filler_removed", False), ("write_error_after", "ENOSPC"), ("heartbeat_back_real_s", None)):
        assert not holds("state-full", {**ev, key: bad}), key
    assert not holds("state-readonly", ev)  # EROFS is the read-only fault's evidence


def root_mounts() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Any:
    """A 1 MiB tmpfs on tmp_path/state, whatever the test leaves mounted taken away after."""
    root_mounts()
    folder = tmp_path / "state"
    try:
        tmpfs_on(folder, 1)
    except Exception as e:  # no CAP_SYS_ADMIN here (a container)
        pytest.skip(f"cannot mount a tmpfs: {e}")
    yield folder
    for _ in range(4):
        if mounted(folder):
            writable(folder)


def test_a_full_tmpfs_fails_every_write_with_enospc_until_the_filler_goes(tiny_tmpfs: Path) -> None:
    folder = tiny_tmpfs
    assert fs_type(folder) == "tmpfs" and mounts(folder) == 1 and write_error(folder) == ""
    (folder / "job_state").write_bytes(b"s" * 8192)
    assert fill(folder) > 0 and write_error(folder) == "ENOSPC"
    assert not list(folder.glob(".soak-probe-*"))  # the probe cleans up after itself
    (folder / "job_state").unlink()  # a daemon frees pages: the filler takes them back
    assert write_error(folder) == "" and fill(folder) >= 8192 and write_error(folder) == "ENOSPC"
    (folder / FILLER).unlink()
    assert write_error(folder) == ""
    read_only(folder)  # state-readonly over state-full's tmpfs: its own mount, EROFS
    assert mounts(folder) == 2 and write_error(folder) == "EROFS"
    writable(folder)
    assert mounts(folder) == 1 and fs_type(folder) == "tmpfs"


def test_the_tmpfs_hides_nothing_and_down_leaves_no_mount(tmp_path: Path) -> None:
    root_mounts()
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "before").write_text("kept\n")
    try:
        tmpfs_on(folder, 1)
    except Exception as e:
        pytest.skip(f"cannot mount a tmpfs: {e}")
    try:
        assert (folder / "before").read_text() == "kept\n"  # moved onto the tmpfs
        (folder / "during").write_text("written\n")
        fill(folder)
        tmpfs_off(folder)
        assert not mounted(folder) and sorted(p.name for p in folder.iterdir()) == ["before", "during"]
        # The soak's cluster: its tmpfs from the arm's start, gone (read-only bind above too) at down.
        sc = SoakCluster(tmp_path / "w", state_tmpfs_mb=1)
        sc._fresh()
        state = sc.cluster.state
        assert fs_type(state) == "tmpfs" and sc.state_tmpfs
        (state / "hetero-snapshot.lua").write_text("return {}\n")
        read_only(state)
        sc.down()
        assert not mounted(state) and (state / "hetero-snapshot.lua").exists()
        # A soak killed outright left its tmpfs: the next arm in that workdir takes it away first.
        tmpfs_on(state, 1)
        again = SoakCluster(tmp_path / "w")
        again._fresh()
        assert not mounted(again.cluster.state) and not again.state_tmpfs
    finally:
        for f in (folder, tmp_path / "w" / "state"):
            for _ in range(4):
                if mounted(f):
                    writable(f)
