"""Devices by identity: a job's GRES index reaches the device that gres.conf's file
for that index is, never the backend's device of the same number.

The fake layer stands for NVML here: `minors` gives each device's minor number in NVML's
order, and the fake reads a device file's minor from the number in its name (the dev
cluster's files are all copies of /dev/null). minors [2, 0, 3, 1] is a node where NVML
(PCI bus order) and the driver's probe order (/dev/nvidiaN) disagree.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.energy import agent, identity, nvml
from slurm_hetero.energy.devices import ControlUnsupported
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.energy.npusmi import NpuSmiDevices, parse_npu_smi_info
from slurm_hetero.energy.probe import NodeDescription, drift
from slurm_hetero.energy.state import AgentConfig, NodeState
from slurm_hetero.site import load_site_text
from slurm_hetero.site.gresconf import (
    DetectedGpu,
    GresConfError,
    NodeGres,
    Unmappable,
    autodetect_order,
    parse_gres_conf,
    read_gres_conf,
)
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule
from tests.unit.test_device_backends import AmdGpu, NvGpu, fake_amdsmi, fake_pynvml
from tests.unit.test_energy import DEMO, ROOT

SHUFFLED = [2, 0, 3, 1]  # minor of NVML device 0, 1, 2, 3
FOUR = "NodeName=g01 Name=gpu Type=h100 File=/dev/nvidia[0-3]\n"


def node(tmp_path: Path, gres: str = FOUR, minors: list[int] | None = None, mig: tuple[int, ...] = (),
         devices: str | None = None) -> AgentConfig:
    if minors is not None or devices is None:
        FakeDevices.create(tmp_path / "gpu.json", "gpu", len(minors or SHUFFLED), "h100", default_w=700,
                           minors=minors or SHUFFLED, mig=mig)
    (tmp_path / "gres.conf").write_text(gres)
    return AgentConfig(state_dir=tmp_path / "agent", history=tmp_path / "agent/history.jsonl",
                       groups=[{"nodes": "g01", "devices": devices or f"fake:{tmp_path}/gpu.json"}],
                       policies={p.name: p for p in DEFAULT_POLICIES}, auto=AutoRule(),
                       update_comment=False, gres_conf=tmp_path / "gres.conf")


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> dict[str, agent.JobView]:
    """Stand-in for what slurmd and `scontrol show job -d` say (unit tests only)."""
    table: dict[str, agent.JobView] = {}
    monkeypatch.setattr(agent, "job_view", lambda job_id, node: table[job_id])
    return table


def job(jobs: dict[str, agent.JobView], job_id: str, idx: list[int], kind: str = "gpu",
        energy: str = "efficiency") -> None:
    jobs[job_id] = agent.JobView(job_id, "alice", "train", json.dumps({"hetero": 1, "energy": energy}),
                                 {kind: idx})


def limits(tmp_path: Path) -> list[float]:
    """Power limit of each fake device, in the backend's (NVML's) order."""
    dev = FakeDevices(tmp_path / "gpu.json")
    return [dev.state(i)["limit_w"] for i in range(len(dev.devices()))]


# ---- gres.conf as slurmd reads it ---------------------------------------------------------------

def test_gres_conf_indices_follow_the_file_as_written() -> None:
    text = ("# a site's gres.conf\n"
            "AutoDetect=off\n"
            "NodeName=g[01-02] Name=gpu Type=a100 File=/dev/nvidia[2,0]  # not sorted by Slurm\n"
            "NodeName=g01 Name=gpu Type=a100 \\\n    File=/dev/nvidia3,/dev/nvidia1\n"
            "NodeName=g02 Name=gpu Type=a100 File=/dev/nvidia9\n"
            "NodeName=g01 Name=gpu Type=a100 MultipleFiles=/dev/nvidia4,/dev/nvidia-caps/nvidia-cap21\n"
            "NodeName=g[01-02] Name=npu Type=910b File=/dev/davinci[0-1]\n"
            "Name=shard Count=8\n")
    g = parse_gres_conf(text, "g01")
    assert [s.file for s in g.slots["gpu"]] == ["/dev/nvidia2", "/dev/nvidia0", "/dev/nvidia3",
                                                "/dev/nvidia1", None]
    assert g.slots["gpu"][4].multiple == ("/dev/nvidia4", "/dev/nvidia-caps/nvidia-cap21")
    assert [s.file for s in g.slots["npu"]] == ["/dev/davinci0", "/dev/davinci1"]
    assert g.counts == {"shard": 8} and g.autodetect == "off"
    assert [s.file for s in parse_gres_conf(text, "g02").slots["gpu"]] == [
        "/dev/nvidia2", "/dev/nvidia0", "/dev/nvidia9"]
    # A node's own AutoDetect trumps the global one (man gres.conf, Slurm 22.05).
    both = "AutoDetect=nvml\nNodeName=g01 AutoDetect=off\n"
    assert (parse_gres_conf(both, "g01").autodetect, parse_gres_conf(both, "g02").autodetect) == ("off", "nvml")


@pytest.mark.parametrize(("text", "message"), [
    ("Name=gpu File=/dev/nvidia0\nInclude /etc/slurm/gres.d/*.conf\n",
     "gres.conf:2: Include is not followed"),
    ("NodeName=g[01 Name=gpu File=/dev/nvidia0\n", "gres.conf:1: NodeName: unbalanced brackets"),
    ("Name=gpu File=/dev/nvidia[3-1]\n", "gres.conf:1: range '3-1' runs backwards"),
    ("Name=gpu Count=lots\n", "gres.conf:1: Count='lots' is not a number"),
    ("Name=gpu File=/dev/nvidia0 MultipleFiles=/dev/nvidia1\n", "gres.conf:1: File and MultipleFiles"),
    ("NodeName=g01 AutoDetect=nvml\nNodeName=g[01-02] AutoDetect=off\n",
     "node g01 has AutoDetect=nvml and off"),
    ("NodeName=g01 gpu\n", "gres.conf:1: 'gpu' is not Key=Value"),
])
def test_gres_conf_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(GresConfError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_gres_conf(text, "g01")


def test_read_gres_conf_missing(tmp_path: Path) -> None:
    with pytest.raises(GresConfError, match=r"gres\.conf: cannot read: No such file"):
        read_gres_conf(tmp_path / "gres.conf", "g01")


# ---- the agent, where /dev minors and NVML's order differ -----------------------------------

def test_cap_lands_on_the_device_gres_conf_names(tmp_path: Path, jobs: dict[str, Any]) -> None:
    cfg = node(tmp_path)
    job(jobs, "1", [0])  # Slurm's index 0 = /dev/nvidia0 = minor 0 = NVML device 1
    rec = agent.prolog(cfg, "1", "g01")
    assert limits(tmp_path) == [700, 420, 700, 700]  # by number it would have been NVML device 0
    assert rec["devices"][0] | {"t": 0} == {
        "kind": "gpu", "idx": 0, "dev": 1, "identity": "minor:0", "t": 0, "applied": ["cap 420W", "clocks medium"],
        "default_w": 700, "energy_j": rec["devices"][0]["energy_j"], "busy_s": None, "covered_s": None}
    job(jobs, "2", [2, 3], energy="balanced")  # minor 2 = NVML 0, minor 3 = NVML 2
    agent.prolog(cfg, "2", "g01")
    assert limits(tmp_path) == [595, 420, 595, 700]
    time.sleep(0.2)
    summary = agent.epilog(cfg, "1", "g01")
    assert summary and [d["idx"] for d in summary["devices"]] == [0] and summary["energy_j"] > 0
    assert limits(tmp_path) == [595, 700, 595, 700]  # job 1's device back, job 2's untouched
    agent.epilog(cfg, "2", "g01")
    assert limits(tmp_path) == [700] * 4 and not list((cfg.state_dir / "g01").glob("dev-*.json"))


def test_a_device_without_identity_match_is_refused_and_reported(
        tmp_path: Path, jobs: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    cfg = node(tmp_path, minors=[0, 1, 2, 5])  # /dev/nvidia3 is minor 3: NVML has no such GPU
    job(jobs, "7", [1, 3])
    with caplog.at_level(logging.INFO, "slurm-hetero.agent"):
        rec = agent.prolog(cfg, "7", "g01")
    assert limits(tmp_path) == [700, 420, 700, 700]  # the minor-5 GPU (NVML 3) is another's
    assert [(d["idx"], d.get("refused", "")) for d in rec["devices"]] == [(1, ""), (
        3, "/dev/nvidia3 is minor:3, which no fake device is (they are: minor:0, minor:1, minor:2, minor:5)")]
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warning] == [
        "job 7: gpu3 not matched to a fake device: /dev/nvidia3 is minor:3, which no fake device is (they "
        "are: minor:0, minor:1, minor:2, minor:5); no policy applied, not metered"]
    refused = json.loads((cfg.state_dir / "g01" / "refused.json").read_text())
    assert list(refused) == ["gpu3"] and refused["gpu3"]["job"] == "7"
    summary = agent.epilog(cfg, "7", "g01")
    assert summary and summary["devices"][1] == {"kind": "gpu", "idx": 3, "refused": rec["devices"][1]["refused"]}
    assert limits(tmp_path) == [700] * 4
    # Matched later (the admin fixed the node): the report of that device goes.
    FakeDevices(tmp_path / "gpu.json")._update(3, minor=3)
    job(jobs, "8", [3])
    agent.prolog(cfg, "8", "g01")
    assert limits(tmp_path) == [700, 700, 700, 420]
    assert json.loads((cfg.state_dir / "g01" / "refused.json").read_text()) == {}


def test_the_prolog_exits_0_when_nothing_can_be_matched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        jobs: dict[str, Any],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    cfg = node(tmp_path)
    conf = {"state_dir": str(cfg.state_dir), "history": str(cfg.history), "groups": cfg.groups,
            "policies": {"efficiency": {"gpu_power_cap": "60%"}}, "gres_conf": str(tmp_path / "none.conf")}
    (tmp_path / "hetero-agent.json").write_text(json.dumps(conf))
    monkeypatch.setenv("SLURM_HETERO_AGENT", str(tmp_path / "hetero-agent.json"))
    monkeypatch.setenv("SLURM_JOB_ID", "3")
    monkeypatch.setenv("SLURMD_NODENAME", "g01")
    job(jobs, "3", [0, 1])
    assert agent.prolog_main() == 0
    assert limits(tmp_path) == [700] * 4
    rec = json.loads((cfg.state_dir / "g01" / "job-3.json").read_text())
    assert {d["refused"] for d in rec["devices"]} == {f"{tmp_path}/none.conf: cannot read: No such file or directory"}
    assert "job 3: gpu0 not matched to a fake device" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert agent.epilog_main() == 0


def test_two_files_of_one_device_are_both_refused(tmp_path: Path, jobs: dict[str, Any]) -> None:
    cfg = node(tmp_path, "NodeName=g01 Name=gpu File=/dev/nvidia0,/dev/x/nvidia0,/dev/nvidia1\n")
    job(jobs, "4", [0, 1, 2])
    rec = agent.prolog(cfg, "4", "g01")
    assert [d.get("refused", "") for d in rec["devices"]] == [
        "/dev/nvidia0, /dev/x/nvidia0 are all minor:0: which one Slurm means cannot be told"] * 2 + [""]
    assert limits(tmp_path) == [700, 700, 700, 420]  # /dev/nvidia1 = minor 1 = NVML 3


def test_a_mig_gpu_is_refused(tmp_path: Path, jobs: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    cfg = node(tmp_path, mig=(0,))  # NVML 0 = minor 2 = Slurm's index 2
    job(jobs, "5", [2, 3])
    rec = agent.prolog(cfg, "5", "g01")
    assert limits(tmp_path) == [700, 700, 420, 700]
    assert rec["devices"][0]["refused"] == ("gpu 0 has MIG mode on: its power limit and clocks belong to "
                                            "every MIG instance, so no one job may change them")
    assert "job 5: gpu2 not matched to a fake device: gpu 0 has MIG mode on" in caplog.text
    # `restore --all` resets every device but the MIG one (the agent never changes it).
    FakeDevices(tmp_path / "gpu.json").set_power_limit(0, 111)
    assert agent.restore(cfg, "g01", alive=None) == ["gpu1", "gpu2", "gpu3"]
    assert limits(tmp_path) == [111, 700, 700, 700]


def test_restore_finds_the_changed_device_by_identity(tmp_path: Path, jobs: dict[str, Any]) -> None:
    cfg = node(tmp_path)
    job(jobs, "6", [1])  # minor 1 = NVML 3
    agent.prolog(cfg, "6", "g01")  # ... and the node loses the job: no epilog
    assert limits(tmp_path) == [700, 700, 700, 420]
    assert NodeState(cfg, "g01").owner_record("gpu", 1) == {"job": "6", "dev": 3, "identity": "minor:1"}
    assert agent.restore(cfg, "g01", alive=lambda j: False, grace_s=0) == ["gpu1 (job 6)"]
    assert limits(tmp_path) == [700] * 4
    # An owner record whose device is gone (or ambiguous) resets nothing.
    job(jobs, "9", [1])
    agent.prolog(cfg, "9", "g01")
    FakeDevices(tmp_path / "gpu.json")._update(3, minor=7)
    assert agent.restore(cfg, "g01", alive=lambda j: False, grace_s=0) == ["gpu1 (job 9)"]
    assert limits(tmp_path) == [700, 700, 700, 420]


# ---- AutoDetect=nvml: Slurm orders the GPUs, by NVML's index ------------------------------------

AUTO = "NodeName=g01 AutoDetect=nvml\nNodeName=g01 Name=gpu Type=h100 Count=4\n"


def test_autodetect_follows_nvmls_order(tmp_path: Path, jobs: dict[str, Any]) -> None:
    # gpu/nvml gives NVML device i the file /dev/nvidia<minor> and index i (links order).
    gpus = [DetectedGpu(i, m) for i, m in enumerate(SHUFFLED)]
    assert [f"/dev/nvidia{d.minor}" for d in autodetect_order(NodeGres("g01", "nvml"), gpus)] == [
        "/dev/nvidia2", "/dev/nvidia0", "/dev/nvidia3", "/dev/nvidia1"]
    cfg = node(tmp_path, AUTO)
    job(jobs, "1", [0])
    rec = agent.prolog(cfg, "1", "g01")
    assert limits(tmp_path) == [420, 700, 700, 700]
    assert (rec["devices"][0]["dev"], rec["devices"][0]["identity"]) == (0, "minor:2")
    # File= in NVML's order agrees whether or not slurmd loads NVML: accepted.
    cfg = node(tmp_path, "AutoDetect=nvml\nName=gpu File=/dev/nvidia[2,0,3,1]\n")
    job(jobs, "2", [3])
    assert agent.prolog(cfg, "2", "g01")["devices"][0]["identity"] == "minor:1"


@pytest.mark.parametrize(("gres", "mig", "why"), [
    ("AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-3]\n", (),
     "the File= order in gres.conf differs from the NVML order (PCI bus id)"),
    ("AutoDetect=nvml\nName=gpu Count=3\n", (), "gres.conf configures 3 GPUs and NVML finds 4"),
    ("AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-4]\n", (),
     "gres.conf names /dev/nvidia4, which NVML does not find"),
    (AUTO, (3,), "NVML GPU 3 has MIG mode on: under AutoDetect=nvml Slurm makes one GRES per MIG instance"),
    ("AutoDetect=rsmi\nName=gpu Count=4\n", (), "AutoDetect=rsmi on g01: only the AutoDetect=nvml order"),
])
def test_autodetect_refuses_what_it_cannot_tell(tmp_path: Path, jobs: dict[str, Any], gres: str,
                                                mig: tuple[int, ...], why: str) -> None:
    cfg = node(tmp_path, gres, mig=mig)
    job(jobs, "1", [0, 1])
    rec = agent.prolog(cfg, "1", "g01")
    assert all(d["refused"].startswith(why) for d in rec["devices"]), rec["devices"]
    assert limits(tmp_path) == [700] * 4


def test_autodetect_needs_nvidia_minor_numbers(tmp_path: Path, jobs: dict[str, Any]) -> None:
    # gpu/nvml skips a GPU whose minor number NVML cannot give: it gets no GRES index.
    gpus = [DetectedGpu(0, None), DetectedGpu(1, 4)]
    assert autodetect_order(NodeGres("g01", "nvml"), gpus) == [DetectedGpu(1, 4)]
    with pytest.raises(Unmappable, match="configures 2 GPUs and NVML finds 1"):
        autodetect_order(NodeGres("g01", "nvml", counts={"gpu": 2}), gpus)
    cfg = node(tmp_path, AUTO)
    fake = FakeDevices(tmp_path / "gpu.json")
    for i in range(4):
        fake._update(i, minor=None)  # a backend without NVIDIA minor numbers
    job(jobs, "1", [0])
    assert agent.prolog(cfg, "1", "g01")["devices"][0]["refused"] == (
        "AutoDetect=nvml on g01, but the fake backend reports no NVIDIA minor numbers")


# ---- identities the kernel gives, and the real backends' side -------------------------------------

@pytest.fixture
def sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sysfs of our own: /dev/null (1:3) and /dev/zero (1:5) stand for two PCI devices."""
    root = tmp_path / "sys"
    for (major, minor), bdf in (((1, 3), "0000:C1:00.0"), ((1, 5), "0000:81:00.0")):
        pci = root / "devices/pci0000:00" / bdf
        pci.mkdir(parents=True)
        (root / f"dev/char/{major}:{minor}").mkdir(parents=True)
        (root / f"dev/char/{major}:{minor}/device").symlink_to(pci)
    monkeypatch.setattr(identity, "SYS_ROOT", str(root))
    return root


def test_pci_address_of_a_character_device(sysfs: Path) -> None:
    assert identity.pci_file_identity("/dev/null") == "pci:0000:c1:00.0"
    with pytest.raises(ControlUnsupported, match=r"/dev/full \(device 1:7\) has no PCI device in sysfs"):
        identity.pci_file_identity("/dev/full")
    with pytest.raises(ControlUnsupported, match="is not a character device"):
        identity.pci_file_identity(str(sysfs))
    with pytest.raises(ControlUnsupported, match=r"/dev/null is device 1:3, not an NVIDIA GPU \(major 195\)"):
        identity.nvidia_file_identity("/dev/null")


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_nvidia_minor_of_a_real_device_node(tmp_path: Path) -> None:
    os.mknod(tmp_path / "nvidia3", 0o600 | 0o020000, os.makedev(195, 3))
    assert identity.nvidia_file_identity(str(tmp_path / "nvidia3")) == "minor:3"


def test_nvml_reports_minor_numbers_and_mig(monkeypatch: pytest.MonkeyPatch) -> None:
    table = [NvGpu(minor=2, bus_id="00000000:17:00.0"), NvGpu(minor=0, mig=True), NvGpu(minor=1, unsupported={"mig"})]
    monkeypatch.setattr(nvml, "pynvml", fake_pynvml(table))
    layer = nvml.NvmlDevices.__new__(nvml.NvmlDevices)  # skip nvmlInit: no driver here
    layer.available, layer.why = True, ""
    assert [(d.index, d.identity, d.minor, d.mig) for d in layer.devices()] == [
        (0, "minor:2", 2, False), (1, "minor:0", 0, True), (2, "minor:1", 1, False)]


def test_amd_gpus_are_matched_by_pci_address(sysfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             jobs: dict[str, Any]) -> None:
    gpus = [AmdGpu(bdf="0000:81:00.0"), AmdGpu(bdf="0000:c1:00.0")]
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(gpus))
    # /dev/null stands for renderD128 (0000:c1:00.0), /dev/zero for renderD129 (0000:81:00.0).
    cfg = node(tmp_path, "NodeName=g01 Name=gpu Type=mi300x File=/dev/null,/dev/zero\n", devices="amdsmi")
    job(jobs, "1", [0])
    rec = agent.prolog(cfg, "1", "g01")
    assert (rec["devices"][0]["dev"], rec["devices"][0]["identity"]) == (1, "pci:0000:c1:00.0")
    assert (gpus[0].cap_uw, gpus[1].cap_uw) == (750_000_000, 450_000_000)
    agent.epilog(cfg, "1", "g01")
    assert gpus[1].cap_uw == 750_000_000


def test_npus_are_matched_by_bus_id(sysfs: Path) -> None:
    rows = parse_npu_smi_info((ROOT / "tests/data/npu/npu-smi-info-910b.txt").read_text())
    layer = NpuSmiDevices()
    layer._cache = (time.monotonic() + 3600, rows)  # npu-smi's answer, kept (no NPU here)
    g = parse_gres_conf("Name=npu Type=910b File=/dev/zero,/dev/null,/dev/full\n", "npu-01")
    targets = identity.match_devices(layer, layer.devices(), g, {"npu": [0, 1, 2]})
    assert [(t.idx, t.dev, t.identity) for t in targets[:2]] == [(0, 2, "pci:0000:81:00.0"),
                                                                 (1, 0, "pci:0000:c1:00.0")]
    assert targets[2].dev is None and "has no PCI device in sysfs" in targets[2].refused
    assert layer.read(targets[0].dev or 0).power_w == 301.5  # the NPU at 81:00.0, not NPU 0


# ---- the site file: AutoDetect per node group, MIG acknowledged ---------------------------------

def site_with(group_lines: str, names: str = "h100-01") -> str:
    text = DEMO.read_text()
    head = f"  - names: {names}\n"
    assert head in text
    return text.replace(head, head + group_lines, 1)


def test_autodetect_group_renders_autodetect_and_agrees_with_the_agent() -> None:
    site = load_site_text(site_with("    gres_autodetect: nvml\n"), "site.yaml")
    gres = render_site(site)["gres.conf"]
    assert "NodeName=h100-01 AutoDetect=nvml\nNodeName=h100-01 Name=gpu Type=h100 Count=8\n" in gres
    assert "NodeName=a100-[01-02] Name=gpu Type=a100-80gb File=/dev/nvidia[0-3]\n" in gres
    g = parse_gres_conf(gres, "h100-01")  # what the agent reads back
    assert (g.autodetect, g.counts, g.slots.get("gpu")) == ("nvml", {"gpu": 8}, None)
    # The dev cluster has no NVML: its per-node emulated files stay File= lines.
    dev = render_site(site, Profile(node_ports={n: 7000 + i for i, n in enumerate(
        n for grp in site.node_groups for n in grp.nodes)}, dev_dir="/w/dev"))["gres.conf"]
    assert "NodeName=h100-01 Name=gpu Type=h100 File=/w/dev/h100-01/nvidia[0-7]" in dev and "AutoDetect" not in dev


def test_site_rejects_autodetect_for_other_than_nvidia(tmp_path: Path) -> None:
    with pytest.raises(SiteError) as e:
        load_site_text(site_with("    gres_autodetect: nvml\n", "npu-[01-02]"), "site.yaml")
    assert [ln for ln in e.value.lines if "gres_autodetect" in ln] == [
        "site.yaml:104:22: node_groups[6].gres_autodetect: AutoDetect=nvml finds NVIDIA GPUs only; this group "
        "has ascend-910b\n    hint: use it on groups of NVIDIA (cuda) models alone, or leave it out (File= lines)"]


def test_site_rejects_mig_unless_acknowledged(tmp_path: Path) -> None:
    with pytest.raises(SiteError) as e:
        load_site_text(site_with("    mig: true\n"), "site.yaml")
    assert len(e.value.lines) == 1 and "node_groups[3].mig: slurm-hetero does not model MIG instances" in \
        e.value.lines[0] and "hint: write `mig: unsupported` to run these nodes anyway" in e.value.lines[0]
    site = load_site_text(site_with("    mig: unsupported\n"), "site.yaml")
    assert [g.mig_unsupported for g in site.node_groups if g.names == "h100-01"] == [True]
    bad = tmp_path / "site.yaml"
    bad.write_text(site_with("    mig: true\n"))
    result = CliRunner().invoke(main, ["site", "validate", str(bad)])
    assert result.exit_code == 2 and "node_groups[3].mig" in result.output, result.output


def test_probe_names_what_would_make_slurm_and_the_agent_disagree() -> None:
    site = load_site_text(site_with("    gres_autodetect: nvml\n", "a100-[01-02]"), "site.yaml")
    devs = [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "mig": i == 1} for i in range(4)]
    desc = NodeDescription("x86_64", 2, 32, 1, 10**7, accelerators=[{"model": "a100-80gb", "count": 4,
                                                                    "devices": devs}])
    problems = [p for p in drift(desc, site, "a100-01") if "MIG" in p or "gres_autodetect" in p]
    assert problems[0] == ("device 1 (NVIDIA A100-SXM4-80GB) has MIG mode on; the site does not say "
                           "`mig: unsupported` (no energy policy reaches a MIG GPU)")
    assert problems[1].startswith("gres_autodetect nvml: Type=a100-80gb is part of 0 of NVML's GPU names "
                                  "here (nvidia_a100-sxm4-80gb), the site says 4")


# ---- the container wrapper under AutoDetect=nvml ------------------------------------------------

def test_container_wrapper_refuses_gpus_it_cannot_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_hetero.containers import wrapper
    from slurm_hetero.errors import RuntimeFailure
    from tests.unit.container_fixtures import dev_tree

    tree = dev_tree(tmp_path)
    asked: list[str] = []
    held: dict[str, list[int]] = {}

    def allocation(job: str, node: str, conf: str, slurm_conf: str | None,
                   say: object) -> tuple[dict[str, list[int]], str]:
        asked.append(node)
        return held, "cache"

    monkeypatch.setattr(wrapper, "cached_allocation", allocation)
    # No device table for the node and no AutoDetect: a CPU container, no Slurm call.
    assert wrapper.node_allocation(tree.conf, "12", "cpu-x86-01") == {} and asked == []
    slurm_conf = tree.conf.slurm_conf
    assert slurm_conf is not None  # None only on configless sites
    Path(slurm_conf).parent.mkdir(parents=True, exist_ok=True)
    (Path(slurm_conf).parent / "gres.conf").write_text("NodeName=cpu-x86-01 AutoDetect=nvml\n")
    assert wrapper.node_allocation(tree.conf, "12", "cpu-x86-01") == {} and asked == ["cpu-x86-01"]
    held["gpu"] = [0]
    with pytest.raises(RuntimeFailure, match=r"gres\.conf has AutoDetect=nvml for cpu-x86-01: slurmd "
                                             r"orders its GPUs itself"):
        wrapper.node_allocation(tree.conf, "12", "cpu-x86-01")
