"""Energy policies, the agent's prolog/epilog on the fake device layer, crash repair."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.conf import Profile, render_site
from slurm_hetero.energy import agent, ship
from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.energy.npusmi import parse_npu_smi_info
from slurm_hetero.energy.state import AgentConfig, NodeState
from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.site import load_site, load_site_text
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule, EnergyPolicy, parse_power_cap
from slurm_hetero.slurm.comment import merge_comment, parse_comment
from slurm_hetero.slurm.runner import SlurmCommandError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"
DEMO_AGENT = "node_agent:\n  restore_interval: 300\n  sample_stacks: [cann]\n"


def demo_with(node_agent: str) -> str:
    """The demo site with its node_agent block replaced."""
    text = DEMO.read_text()
    assert DEMO_AGENT in text
    return text.replace(DEMO_AGENT, node_agent)


# ---- policies ---------------------------------------------------------------------------

@pytest.mark.parametrize(("runs", "chosen", "why"), [
    ([], "balanced", "0 past runs < 2: balanced"),
    ([(0.1, 0.1)], "balanced", "1 past runs < 2: balanced"),
    ([(0.2, None), (0.3, None)], "efficiency", "mean accelerator use 0.25 < 0.5 over 2 runs"),
    ([(0.9, 0.9), (0.8, 0.7)], "balanced",
     "mean accelerator use 0.85 >= 0.5 over 2 runs, mean power 0.80 of the limit >= 0.5 over 2 runs"),
    ([(0.2, None), (None, 0.3)], "balanced", "no figure measured in 2 of the last 2 runs: balanced"),
    # memory-bound: the units look busy, the power draw says otherwise
    ([(0.95, 0.40), (0.9, 0.44)], "efficiency", "mean power 0.42 of the limit < 0.5 over 2 runs"),
    ([(0.9, 0.9)] * 10 + [(0.1, 0.1)] * 5, "efficiency",  # only the last `window` runs count
     "mean accelerator use 0.10 < 0.5 over 5 runs"),
    ([(None, None)] * 3 + [(0.9, None)], "balanced", "1 past runs < 2: balanced"),  # unmetered runs
    ([(None, 0.9), (None, 0.8)], "balanced", "mean power 0.85 of the limit >= 0.5 over 2 runs"),
])
def test_auto_rule(runs: list[tuple[float | None, float | None]], chosen: str, why: str) -> None:
    assert AutoRule().choose(runs) == (chosen, why)


def test_power_caps() -> None:
    eff = {p.name: p for p in DEFAULT_POLICIES}["efficiency"]
    assert eff.power_cap_watts(700) == 420.0 and eff.gpu_freq == "medium"
    assert EnergyPolicy("x", gpu_power_cap="250W").power_cap_watts(700) == 250.0
    assert EnergyPolicy("x").power_cap_watts(700) is None
    for bad in ("fast", "0%", "120%", "-5W"):
        with pytest.raises(ValueError):
            parse_power_cap(bad)


def test_site_policies_validated() -> None:
    text = DEMO.read_text() + "energy_policies:\n  - {name: eco, gpu_power_cap: 150%}\n  - {name: auto}\n"
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    assert [ln.split(": ", 1)[1] for ln in e.value.lines] == [
        "energy_policies[0].gpu_power_cap: power cap '150%': a share must be above 0% and at most 100%",
        "energy_policies: policy 'auto' needs policies 'efficiency' and 'balanced'\n"
        "    hint: auto picks one of them per job"]


def test_site_policies_reach_bridge_and_agent() -> None:
    text = DEMO.read_text() + ("energy_policies:\n  - {name: fast, cpu_governor: performance, gpu_freq: high}\n"
                               "  - {name: eco, gpu_power_cap: 200W, gpu_freq: '900'}\n")
    files = render_site(load_site_text(text, "site.yaml"))
    assert '["eco"] = { cpu_freq_gov = nil, gpu_freq = "900" }' in files["job_submit.lua"]
    assert "energy=fast,eco " in files["plugstack.conf"]
    cfg = json.loads(files["hetero-agent.json"])
    assert cfg["policies"]["eco"] == {"gpu_freq": "900", "gpu_power_cap": "200W"}
    assert {"nodes": "npu-[01-02]", "devices": "sampled:npu-smi"} in cfg["groups"]
    assert {"nodes": "h100-01", "devices": "nvml"} in cfg["groups"]


# ---- comments, parsers ----------------------------------------------------------------------

def test_comment_merge_keeps_the_bridge_and_other_nodes() -> None:
    bridge = '{"hetero":1,"energy":"efficiency","model":"h100"}'
    first = merge_comment(bridge, {"node_energy": {"n1": {"energy_j": 5.0}}})
    stored = first.replace('"', "`")  # what sacctmgr keeps
    second = merge_comment(stored, {"node_energy": {"n2": {"energy_j": 7.0}}})
    assert parse_comment(second) == {"hetero": 1, "energy": "efficiency", "model": "h100",
                                     "node_energy": {"n1": {"energy_j": 5.0}, "n2": {"energy_j": 7.0}}}
    assert parse_comment("an admin's note") == {} and parse_comment("") == {}


def test_npu_smi_parse() -> None:
    # Written from the vendor documentation's `npu-smi info` table (no NPU on this machine).
    rows = parse_npu_smi_info((ROOT / "tests/data/npu/npu-smi-info-910b.txt").read_text())
    assert [(r.npu, r.name, r.health, r.power_w, r.aicore_pct, r.hbm_total_mib) for r in rows] == [
        (0, "910B3", "OK", 93.6, 0, 65536), (1, "910B3", "OK", 90.2, 35, 65536),
        (2, "910B3", "Warning", 301.5, 97, 65536)]
    assert rows[1].bus_id == "0000:C2:00.0" and rows[2].hbm_used_mib == 61000


def test_no_silent_fake() -> None:
    assert open_devices("nvml").devices() == []  # no NVML here: no devices, not a fake
    with pytest.raises(InputError, match="use nvml, amdsmi, npu-smi, none or fake:PATH, optionally after sampled:"):
        open_devices("fake")


# ---- the agent on the fake device layer ----------------------------------------------------

@pytest.fixture
def cfg(tmp_path: Path) -> AgentConfig:
    FakeDevices.create(tmp_path / "gpu-node.json", "gpu", 8, "h100", default_w=700, load=0.3)
    (tmp_path / "gres.conf").write_text("NodeName=g01 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n")
    return AgentConfig(
        state_dir=tmp_path / "agent", history=tmp_path / "agent" / "history.jsonl",
        groups=[{"nodes": "g01", "devices": f"fake:{tmp_path}/gpu-node.json"}],
        policies={p.name: p for p in DEFAULT_POLICIES}, auto=AutoRule(), gres_conf=tmp_path / "gres.conf")


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> dict[str, agent.JobView]:
    """Stand-in for `scontrol show job -d` (unit tests only)."""
    table: dict[str, agent.JobView] = {}
    monkeypatch.setattr(agent, "job_view", lambda job_id, node: table[job_id])
    return table


class FakeDb:
    """slurmdbd's admin comments behind sacct and sacctmgr (which, on 22.05, lower-cases the
    value and stores `"` as a backquote), by command, for the shipper (unit-test fake)."""

    def __init__(self, comments: dict[str, str]) -> None:
        self.comments = dict(comments)
        self.calls: list[list[str]] = []

    def out(self, argv: list[str], **kw: Any) -> str:
        return self.run(argv).stdout

    def run(self, argv: list[str], check: bool = True, input: str | None = None,
            **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[0] == "sacct":
            ids = argv[argv.index("-j") + 1].split(",")
            return subprocess.CompletedProcess(
                argv, 0, "".join(f"{j}|{self.comments[j]}\n" for j in ids if j in self.comments), "")
        if argv == ["sacctmgr", "-i"]:
            for line in (input or "").splitlines():
                m = re.fullmatch(r"modify job where jobid=(\d+) set AdminComment=(.*)", line)
                assert m, line
                self.comments[m.group(1)] = m.group(2).lower().replace('"', "`")
        else:
            assert argv[:5] == ["sacctmgr", "-i", "modify", "job", "where"], argv
            value = argv[-1].removeprefix("AdminComment=")
            self.comments[argv[5].removeprefix("jobid=")] = value.lower().replace('"', "`")
        return subprocess.CompletedProcess(argv, 0, "", "")


def fake(cfg: AgentConfig) -> FakeDevices:
    spec = cfg.devices_for("g01")
    assert spec
    return FakeDevices(spec.removeprefix("fake:"))


def view(job_id: str, energy: str | None, idx: list[int], name: str = "train") -> agent.JobView:
    comment = json.dumps({"hetero": 1, "energy": energy}) if energy else ""
    return agent.JobView(job_id, "alice", name, comment, {"gpu": idx})


def test_policy_applied_to_allocated_devices_only_then_restored(cfg: AgentConfig,
                                                                jobs: dict[str, Any]) -> None:
    jobs["1"] = view("1", "efficiency", [2, 5])
    rec = agent.prolog(cfg, "1", "g01")
    dev = fake(cfg)
    assert [dev.state(i)["limit_w"] for i in range(8)] == [700, 700, 420, 700, 700, 420, 700, 700]
    assert dev.state(2)["clock_level"] == "medium" and dev.state(3)["clock_level"] == "default"
    assert rec["policy"] == "efficiency" and rec["devices"][0]["applied"] == ["cap 420W", "clocks medium"]
    time.sleep(0.5)  # a job long enough that the readings' few ms of skew do not matter
    summary = agent.epilog(cfg, "1", "g01")
    assert summary and summary["policy"] == "efficiency" and summary["energy_j"] > 0
    assert [d["idx"] for d in summary["devices"]] == [2, 5]
    assert all(dev.state(i)["limit_w"] == 700 and dev.state(i)["clock_level"] == "default"
               for i in range(8))
    assert not list((cfg.state_dir / "g01").glob("*.json"))
    # The epilog asked Slurm nothing; the health check's shipper writes the figures.
    db = FakeDb({"1": jobs["1"].admin_comment.replace('"', "`")})
    st = NodeState(cfg, "g01")
    assert ship.ship(db, st, "g01").written == 1  # type: ignore[arg-type]
    merged = parse_comment(db.comments["1"])
    assert merged["hetero"] == 1 and merged["node_energy"]["g01"]["util"] == 0.3
    # the fake draws default x load = 210 W, under the 420 W cap: 0.3 of the default limit
    assert merged["node_energy"]["g01"]["power_frac"] == pytest.approx(0.3, abs=0.02)
    assert [c[0] for c in db.calls] == ["sacct", "sacctmgr"]
    # Read back next round: the spool entry goes, and nothing more is written.
    assert ship.ship(db, st, "g01").confirmed == 1  # type: ignore[arg-type]
    assert not list(ship.spool_dir(st).iterdir()) and [c[0] for c in db.calls[2:]] == ["sacct"]
    assert ship.ship(db, st, "g01") == ship.Shipped() and len(db.calls) == 3  # type: ignore[arg-type]  # nothing spooled: no call


def test_no_policy_still_meters(cfg: AgentConfig, jobs: dict[str, Any]) -> None:
    jobs["2"] = view("2", None, [0])
    assert agent.prolog(cfg, "2", "g01")["policy"] is None
    assert fake(cfg).state(0)["limit_w"] == 700
    summary = agent.epilog(cfg, "2", "g01")
    assert summary and "policy" not in summary and summary["devices"][0]["energy_j"] >= 0


def test_auto_uses_the_jobs_own_history(cfg: AgentConfig, jobs: dict[str, Any]) -> None:
    for jid in ("10", "11"):  # two low-utilisation runs of the same job name (fake load 0.3)
        jobs[jid] = view(jid, "balanced", [0])
        agent.prolog(cfg, jid, "g01")
        agent.epilog(cfg, jid, "g01")
    jobs["12"] = view("12", "auto", [1])
    rec = agent.prolog(cfg, "12", "g01")
    assert rec["policy"] == "efficiency" and "0.30 < 0.5 over 2 runs" in rec["auto_rule"]
    jobs["13"] = view("13", "auto", [2], name="other")
    assert agent.prolog(cfg, "13", "g01")["policy"] == "balanced"


def test_crash_between_prolog_and_epilog_is_repaired(cfg: AgentConfig, jobs: dict[str, Any]) -> None:
    jobs["20"] = view("20", "efficiency", [3])
    agent.prolog(cfg, "20", "g01")  # ... and the node dies: no epilog
    dev = fake(cfg)
    assert dev.state(3)["limit_w"] == 420
    jobs["21"] = view("21", "performance", [3])  # Slurm hands the device to the next job
    agent.prolog(cfg, "21", "g01")
    assert dev.state(3)["limit_w"] == 700 and dev.state(3)["clock_level"] == "high"
    agent.epilog(cfg, "21", "g01")
    # `node restore` repairs without waiting for a next job, and drops stale records.
    jobs["22"] = view("22", "efficiency", [4])
    agent.prolog(cfg, "22", "g01")
    # A prolog a moment ago: its batch step may not run yet; restore leaves it.
    assert agent.restore(cfg, "g01", alive=lambda job: False, gone=lambda job: False) == []
    assert dev.state(4)["limit_w"] == 420
    # Slurm still runs the job (no epilog yet): its record stays for the epilog.
    assert agent.restore(cfg, "g01", alive=lambda job: False, gone=lambda job: False, grace_s=0) == [
        "gpu4 (job 22)"]
    assert dev.state(4)["limit_w"] == 700 and (cfg.state_dir / "g01" / "job-22.json").exists()
    # slurmctld has forgotten the job (node crash): no epilog will come, the record goes.
    agent.restore(cfg, "g01", alive=lambda job: False, grace_s=0)
    assert not list((cfg.state_dir / "g01").glob("job-*.json"))


def test_prolog_is_idempotent(cfg: AgentConfig, jobs: dict[str, Any]) -> None:
    jobs["30"] = view("30", "efficiency", [1])
    agent.prolog(cfg, "30", "g01")
    agent.prolog(cfg, "30", "g01")  # Slurm may retry a prolog
    assert fake(cfg).state(1)["limit_w"] == 420
    agent.epilog(cfg, "30", "g01")
    assert agent.epilog(cfg, "30", "g01") is None  # a second epilog finds nothing to do
    assert fake(cfg).state(1)["limit_w"] == 700


def test_entry_point_never_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))  # no agent config there
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    monkeypatch.setenv("SLURMD_NODENAME", "g01")
    assert agent.prolog_main() == 0 and agent.epilog_main() == 0


def test_dev_profile_wires_prolog_and_fake_devices() -> None:
    files = render_site(load_site(DEMO), Profile(prolog="/v/bin/slurm-hetero-prolog",
                                                 epilog="/v/bin/slurm-hetero-epilog",
                                                 agent_devices="fake:/w/dev/{node}/f.json"))
    assert "Prolog=/v/bin/slurm-hetero-prolog\nEpilog=/v/bin/slurm-hetero-epilog\nPrologFlags=Alloc" in files["slurm.conf"]
    assert {"nodes": "npu-[01-02]", "devices": "sampled:fake:/w/dev/{node}/f.json"} in json.loads(
        files["hetero-agent.json"])["groups"]


# ---- which jobs still hold their devices (node restore, the health check) ----------------------

def test_holds_devices_on_captured_job() -> None:
    from slurm_hetero.slurm.scontrol import parse_job_record

    # A running batch job on a100-01, captured from `scontrol show job -d` on Slurm 22.05.
    rec = parse_job_record((ROOT / "tests/data/containers/scontrol-job-d-gpu-22.05.txt").read_text(),
                           ["JobState", "BatchFlag", "StartTime", "BatchHost", "NodeList"])
    assert rec["NodeList"] == "a100-01"
    start = time.mktime(time.strptime(rec["StartTime"], "%Y-%m-%dT%H:%M:%S"))
    late = start + agent.LAUNCH_GRACE_S + 1
    assert agent.holds_devices(rec, "a100-01", has_steps=True, now=late)
    # the batch host without a slurmstepd, past the launch grace: a killed slurmstepd
    assert not agent.holds_devices(rec, "a100-01", has_steps=False, now=late)
    assert agent.holds_devices(rec, "a100-01", has_steps=False, now=start + 5)  # still launching
    two = {**rec, "NodeList": "a100-[01-02]"}
    assert agent.holds_devices(two, "a100-02", has_steps=False, now=late)  # not the batch host
    # requeued after its node failed and running elsewhere now: nothing held on the old node
    assert not agent.holds_devices({**rec, "NodeList": "a100-02", "BatchHost": "a100-02"}, "a100-01",
                                   has_steps=False, now=start + 5)
    assert not agent.holds_devices(rec, "a100-02", has_steps=False, now=late)
    assert agent.holds_devices({**rec, "BatchFlag": "0"}, "a100-01", False, late)  # salloc
    assert agent.holds_devices({**rec, "NodeList": "a100-[01"}, "a100-01", False, start + 5)  # unreadable
    assert agent.holds_devices({**rec, "JobState": "COMPLETING"}, "a100-01", False, late)
    assert not agent.holds_devices({**rec, "JobState": "COMPLETED"}, "a100-01", False, late)
    assert not agent.holds_devices(None, "a100-01", False, late)  # slurmctld forgot it


def test_health_check_wiring_from_the_site() -> None:
    chained = render_site(load_site_text(demo_with("node_agent: {restore_interval: 120, "
                                                   "health_check: /usr/sbin/nhc}\n"), "site.yaml"))
    assert "HealthCheckInterval=120\n" in chained["slurm.conf"]
    assert chained["hetero-healthcheck"].rstrip().endswith("exec /usr/sbin/nhc")
    off = render_site(load_site_text(demo_with("node_agent: {restore_interval: 0}\n"), "site.yaml"))
    assert "HealthCheck" not in off["slurm.conf"]
    with pytest.raises(SiteError) as e:
        load_site_text(demo_with("node_agent: {health_check: 'nhc; reboot'}\n"), "site.yaml")
    assert "node_agent.health_check" in "\n".join(e.value.lines)


class ScriptedSlurm:
    """Stand-in for the agent's Runner: answers by the command's first words."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], check: bool = True, **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        rc, out, err = self.answers[" ".join(argv[:2])]
        if check and rc != 0:
            raise SlurmCommandError(argv, rc, err)
        return subprocess.CompletedProcess(argv, rc, out, err)

    def out(self, argv: list[str], **kw: Any) -> str:
        return self.run(argv, **kw).stdout


def test_cannot_tell_is_not_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "SLURM", ScriptedSlurm({"scontrol show": (
        1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")}))
    with pytest.raises(RuntimeFailure, match="Unable to contact"):
        agent.job_gone("7")
    monkeypatch.setattr(agent, "SLURM", ScriptedSlurm({"scontrol show": (
        1, "", "slurm_load_jobs error: Invalid job id specified")}))
    assert agent.job_gone("7")


def test_a_multinode_jobs_dropped_entry_is_written_again_next_round(tmp_path: Path) -> None:
    """Nodes n1 and n2 of one job ship their figures; n2's write, based on what it read
    before n1 wrote, drops n1's entry: n1 sees that next round and writes again."""
    cfg = AgentConfig(state_dir=tmp_path, history=tmp_path / "h.jsonl", groups=[], policies={},
                      auto=AutoRule())
    st1, st2 = NodeState(cfg, "n1"), NodeState(cfg, "n2")
    ship.spool(st1, "9", "n1", {"energy_j": 1}, nodes=2)
    ship.spool(st2, "9", "n2", {"energy_j": 2}, nodes=2)
    db = FakeDb({"9": "{`hetero`:1}"})
    read_before = db.comments["9"]
    waits: list[float] = []
    ship.ship(db, st1, "n1", sleep=waits.append)  # type: ignore[arg-type]
    # Nodes of one job whose health checks run at once spread their read-and-writes out.
    assert len(waits) == 1 and 0 <= waits[0] <= 2 * ship.JITTER_PER_NODE_S
    db.comments["9"] = merge_comment(read_before, {"node_energy": {"n2": {"energy_j": 2}}}).replace('"', "`")
    nap = waits.append
    assert ship.ship(db, st1, "n1", sleep=nap).written == 1  # type: ignore[arg-type]
    assert ship.ship(db, st2, "n2", sleep=nap).confirmed == 1  # type: ignore[arg-type]
    assert ship.ship(db, st1, "n1", sleep=nap).confirmed == 1  # type: ignore[arg-type]
    assert parse_comment(db.comments["9"])["node_energy"] == {"n1": {"energy_j": 1}, "n2": {"energy_j": 2}}


def test_shipping_waits_for_the_database_and_batches_what_a_line_can_carry(tmp_path: Path) -> None:
    cfg = AgentConfig(state_dir=tmp_path, history=tmp_path / "h.jsonl", groups=[], policies={},
                      auto=AutoRule())
    st = NodeState(cfg, "n1")
    for j in ("1", "2", "3"):
        ship.spool(st, j, "n1", {"energy_j": int(j)})
    # Job 3 is not in the accounting database yet; job 2's comment holds an admin's text
    # with a quote, which sacctmgr's line parser would misread: it goes as one argv.
    db = FakeDb({"1": "", "2": "note: 'keep'"})
    done = ship.ship(db, st, "n1")  # type: ignore[arg-type]
    assert (done.written, done.waiting) == (2, 1)
    assert [c[:2] for c in db.calls] == [["sacct", "-X"], ["sacctmgr", "-i"], ["sacctmgr", "-i"]]
    assert len(db.calls[2]) > 2  # the argv form
    # The admin's text stays in front, byte for byte; ours follows it.
    assert db.comments["2"].startswith("note: 'keep' {")
    assert parse_comment(db.comments["2"]) == {"hetero": 0, "node_energy": {"n1": {"energy_j": 2}}}
    # A week later job 3 is still unknown: its figures go, with a warning.
    assert ship.ship(db, st, "n1", now=time.time() + 8 * 86400).dropped == 1  # type: ignore[arg-type]
    assert sorted(p.name for p in ship.spool_dir(st).iterdir()) == []


def test_a_shared_spool_makes_the_first_node_the_one_writer(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    figures = {n: {"energy_j": i + 1} for i, n in enumerate(["g01", "g02", "g03"])}
    db = FakeDb({"5": 'js1:h4si {"hetero":1,"pool":"h100@x86_64"}'})
    ship.spool_shared(shared, "5", "g02", figures["g02"], nodes=3, first="g01")
    ship.spool_shared(shared, "5", "g03", figures["g03"], nodes=3, first="g01")
    # Not the writer: nothing; the writer waits while a node's figures are missing.
    assert ship.ship_shared(db, shared, "g02") == ship.Shipped() and db.calls == []  # type: ignore[arg-type]
    assert ship.ship_shared(db, shared, "g01").waiting == 1 and db.calls == []  # type: ignore[arg-type]
    ship.spool_shared(shared, "5", "g01", figures["g01"], nodes=3, first="g01")
    assert ship.ship_shared(db, shared, "g01").written == 1  # type: ignore[arg-type]
    # One read and one write for the whole job; the foreign text stays in front.
    assert [c[:2] for c in db.calls] == [["sacct", "-X"], ["sacctmgr", "-i"]]
    assert db.comments["5"].startswith("js1:h4si {")
    rec = parse_comment(db.comments["5"])
    assert rec["pool"] == "h100@x86_64" and rec["node_energy"] == figures
    # Read back: confirmed, the job's folder goes.
    assert ship.ship_shared(db, shared, "g01").confirmed == 1 and not (shared / "5").exists()  # type: ignore[arg-type]


def test_the_shared_spool_waits_then_writes_what_came_and_others_take_over(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    db = FakeDb({"6": ""})
    ship.spool_shared(shared, "6", "g02", {"energy_j": 2}, nodes=2, first="g01")
    later = time.time() + ship.SHARED_WAIT_S + 1
    # g01 (the writer) never got its own figures in: after the wait, what is there goes.
    assert ship.ship_shared(db, shared, "g01", now=later).written == 1  # type: ignore[arg-type]
    assert parse_comment(db.comments["6"])["node_energy"] == {"g02": {"energy_j": 2}}
    # A job whose writer is gone: after TAKEOVER_S any of its nodes ships it, others not.
    db.comments["7"] = ""
    ship.spool_shared(shared, "7", "g05", {"energy_j": 5}, nodes=2, first="g04")
    gone = time.time() + ship.TAKEOVER_S + 1
    assert ship.ship_shared(db, shared, "g09", now=gone).written == 0  # type: ignore[arg-type]
    assert ship.ship_shared(db, shared, "g05", now=gone).written >= 1  # type: ignore[arg-type]
    assert parse_comment(db.comments["7"])["node_energy"] == {"g05": {"energy_j": 5}}


def test_a_shared_spool_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match="owned by root and writable by root only"):
        ship.spool_shared(shared, "8", "g01", {"energy_j": 1}, nodes=1, first="g01")
    with pytest.raises(PermissionError):
        ship.ship_shared(FakeDb({}), shared, "g01")  # type: ignore[arg-type]


def test_a_site_can_keep_the_agent_out_of_the_admin_comment(tmp_path: Path) -> None:
    import yaml

    from slurm_hetero.conf import Profile, render_site
    from slurm_hetero.site import load_site

    demo = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"
    doc = yaml.safe_load(demo.read_text())
    assert json.loads(render_site(load_site(demo), Profile())["hetero-agent.json"]).get("update_comment", True)
    doc["node_agent"] = {**doc.get("node_agent", {}), "write_comment": False, "shared_spool": "/shared/spool"}
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(doc))
    cfg = json.loads(render_site(load_site(tmp_path / "site.yaml"), Profile())["hetero-agent.json"])
    (tmp_path / "agent.json").write_text(json.dumps(cfg))
    loaded = AgentConfig.load(tmp_path / "agent.json")
    assert loaded.update_comment is False and loaded.shared_spool == Path("/shared/spool")


def test_foreign_text_sacctmgr_would_lower_case_is_left_alone(cfg: AgentConfig) -> None:
    # jobstats' base64 in front of ours: a write through sacctmgr would lower-case it.
    st = NodeState(cfg, "n1")
    ship.spool(st, "8", "n1", {"energy_j": 8})
    before = 'JS1:H4sIAAAA {"hetero":1,"checkpoint":"/ckpt/RunA"}'
    db = FakeDb({"8": before})
    done = ship.ship(db, st, "n1")  # type: ignore[arg-type]
    assert (done.written, done.dropped) == (0, 1) and db.comments["8"] == before
    assert [c[:2] for c in db.calls] == [["sacct", "-X"]]  # read, never written
    # Ours alone: written escaped, read back with its case (a checkpoint path is case-sensitive).
    ship.spool(st, "9", "n1", {"energy_j": 9})
    db.comments["9"] = '{"hetero":1,"checkpoint":"/ckpt/RunA"}'
    assert ship.ship(db, st, "n1").written == 1  # type: ignore[arg-type]
    assert parse_comment(db.comments["9"]) == {"hetero": 1, "checkpoint": "/ckpt/RunA",
                                               "node_energy": {"n1": {"energy_j": 9}}}
