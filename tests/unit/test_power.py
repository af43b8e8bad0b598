"""Power saving: parsers on captured 22.05 output, the safety rules, the keeper's plan, the
methods (ipmi and command with a recording exec, redfish against a local HTTP server) and
the programs slurmctld runs, with a fake Slurm."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.errors import InputError
from slurm_hetero.power import rules
from slurm_hetero.power.keeper import Keeper
from slurm_hetero.power.methods import Command, DevCluster, Ipmi, PowerError, Redfish, read_password
from slurm_hetero.power.program import REFUSED, resume, site_nodes, suspend
from slurm_hetero.power.states import NodeState, parse_busy, parse_nodes, parse_reservations
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.commands import node_power_argv, nodes_oneliner_argv

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"
NOW = time.mktime(time.strptime("2026-12-01T23:20:00", "%Y-%m-%dT%H:%M:%S"))


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(ROOT / "tests" / "data" / "sites" / "power.yaml")


def node(name: str, state: str = "IDLE", alloc: int = 0, idle_s: float = 600.0) -> NodeState:
    base, *flags = state.split("+")
    return NodeState(name, base, frozenset(flags), alloc, NOW - idle_s, ("main",))


def line(name: str, state: str, alloc: int = 0, busy: str = "2026-12-01T23:10:00") -> str:
    return (f"NodeName={name} Arch=x86_64 CoresPerSocket=2  CPUAlloc={alloc} CPUTot=2 OS=Linux 6.1 #1 SMP "
            f"PREEMPT @0  RealMemory=4096 State={state} ThreadsPerCore=1 Partitions=main  "
            f"LastBusyTime={busy} CfgTRES=cpu=2")


# ---- parsers (captured on the dev cluster, Slurm 22.05.8) ---------------------------------

def test_parse_captured_nodes() -> None:
    lines = (CAPTURED / "scontrol-nodes-power-22.05.txt").read_text().splitlines()
    powering_down = parse_nodes(lines[2])["pc03"]
    assert powering_down.asleep and not powering_down.idle_awake and powering_down.flags == {"POWERING_DOWN"}
    down = parse_nodes("\n".join(lines[3:6]))
    assert down["pc01"].flags == {"RESERVED"} and down["pc01"].idle_awake
    assert down["pc03"].can_wake and down["pc03"].asleep and not down["pc03"].busy
    assert down["pc02"].idle_awake and down["pc02"].partitions == ("main",)
    assert down["pc02"].last_busy == time.mktime(time.strptime("2026-12-01T23:13:06", "%Y-%m-%dT%H:%M:%S"))
    up = parse_nodes(lines[8])["pc03"]
    assert up.waking and not up.can_wake and not up.idle_awake  # IDLE+NOT_RESPONDING+POWERING_UP


def test_parse_states_from_flags() -> None:
    n = parse_nodes("\n".join([line("a", "MIXED", 1), line("b", "DOWN+POWERED_DOWN+NOT_RESPONDING"),
                               line("c", "IDLE+DRAIN"), line("d", "IDLE+COMPLETING"), "garbage"]))
    assert set(n) == {"a", "b", "c", "d"}
    assert n["a"].busy and n["d"].busy and not n["c"].idle_awake
    assert n["b"].asleep and not n["b"].can_wake  # down: waking it would fail again


def test_reason_text_cannot_pose_as_state() -> None:
    n = parse_nodes(line("a", "ALLOCATED", 2) + " Reason=x State=IDLE CPUAlloc=0 [root@2026]")
    assert n["a"].busy


def test_parse_captured_reservations() -> None:
    res = parse_reservations((CAPTURED / "scontrol-res-22.05.txt").read_text())
    by = {r.name: r for r in res}
    assert by["now1"].nodes == ("pc01",) and by["now1"].state == "ACTIVE"
    assert by["maint"].nodes == ("pc02",) and by["maint"].state == "INACTIVE"
    start = by["maint"].start
    assert start is not None
    assert by["maint"].holds(start - 300, 600) and not by["maint"].holds(start - 3600, 600)
    assert parse_reservations("No reservations in the system\n") == []


def test_parse_busy() -> None:
    assert parse_busy("pw-cpu[01-02]\npw-npu01\n(null)\n") == {"pw-cpu01", "pw-cpu02", "pw-npu01"}


# ---- rules ----------------------------------------------------------------------------------

def states(*nodes: NodeState) -> dict[str, NodeState]:
    return {n.name: n for n in nodes}


def test_pools(site: Site) -> None:
    pools = rules.node_pools(site)
    assert pools["pw-cpu01"] == ("cpu@x86_64", 2.0)
    assert pools["pw-npu01"][0] == "ascend-310p@aarch64" and pools["pw-npu01"][1] > 0


def test_suspend_refuses_busy_reserved_last_idle_and_strangers(site: Site) -> None:
    st = states(node("pw-cpu01", "IDLE+POWERING_DOWN"), node("pw-cpu02", "MIXED", 1),
                node("pw-cpu03", "IDLE+POWERING_DOWN"), node("pw-npu01", "IDLE+POWERING_DOWN"))
    v = {x.node: x for x in rules.suspend_verdicts(site, ["pw-cpu01", "pw-cpu02", "pw-cpu03", "pw-npu01",
                                                          "other"], st, {"pw-cpu02"}, set())}
    assert v["pw-cpu01"].ok
    assert (v["pw-cpu02"].ok, v["pw-cpu02"].why) == (False, "holds a job")
    assert (v["pw-cpu03"].ok, v["pw-cpu03"].why) == (False, "last idle node of pool cpu@x86_64")
    assert (v["pw-npu01"].ok, v["pw-npu01"].why) == (False, "last idle node of pool ascend-310p@aarch64")
    assert (v["other"].ok, v["other"].why) == (False, "not a node of this site")
    held = rules.suspend_verdicts(site, ["pw-cpu01"], st, set(), {"pw-cpu01"})
    assert held[0].why == "in an active or imminent reservation"
    # A busy node is refused even when squeue missed it: the node state says so too.
    assert not rules.suspend_verdicts(site, ["pw-cpu02"], st, set(), set())[0].ok


def test_suspend_refuses_excluded(site: Site) -> None:
    s = replace(site, power=replace(site.power, exclude_nodes="pw-cpu01"))
    st = states(node("pw-cpu01"), node("pw-cpu02"), node("pw-cpu03"))
    assert rules.suspend_verdicts(s, ["pw-cpu01"], st, set(), set())[0].why.startswith("excluded")


def test_reservation_lead_time(site: Site) -> None:
    res = parse_reservations((CAPTURED / "scontrol-res-22.05.txt").read_text())
    start = next(r.start for r in res if r.name == "maint")
    assert start is not None
    assert rules.reserved(res, start - 60, rules.lead_s(site)) == {"pc01", "pc02"}
    assert rules.reserved(res, start - 7200, rules.lead_s(site)) == {"pc01"}


def test_plan_sleeps_all_but_one_idle_node_per_pool(site: Site) -> None:
    st = states(node("pw-cpu01", idle_s=600), node("pw-cpu02", idle_s=900), node("pw-cpu03", idle_s=5),
                node("pw-npu01", idle_s=900))
    p = rules.plan(site, st, set(), set(), None, NOW)
    # pw-cpu03 was idle only 5 s (< suspend_time): it stays; the longest idle goes first.
    assert p.sleep == ["pw-cpu02", "pw-cpu01"]
    assert "pw-npu01" not in p.sleep and p.wake == []
    fresh = states(node("pw-cpu01", idle_s=1), node("pw-cpu02", idle_s=2), node("pw-cpu03", idle_s=3))
    assert rules.plan(site, fresh, set(), set(), None, NOW).sleep == []  # nothing idle for suspend_time


def test_plan_keeps_and_wakes_for_the_forecast(site: Site) -> None:
    st = states(node("pw-cpu01", "MIXED", 2), node("pw-cpu02", "IDLE+POWERED_DOWN"),
                node("pw-cpu03", "IDLE+POWERED_DOWN"), node("pw-npu01"))
    # 5.5 cores in 5 minutes x 1.2 = 6.6: 2 running, 4.6 more = 3 nodes of 2 cores; only 2 asleep.
    p = rules.plan(site, st, {"pw-cpu01"}, set(), {"cpu@x86_64": {5: 5.5, 15: 0.0}}, NOW)
    cpu = next(x for x in p.pools if x.pool == "cpu@x86_64")
    assert (cpu.need, cpu.running, cpu.keep_idle) == (6.6, 2.0, 3)
    assert p.wake == ["pw-cpu02", "pw-cpu03"] and p.sleep == []
    # No forecast: one idle node is still the floor, so one is woken.
    assert rules.plan(site, st, {"pw-cpu01"}, set(), None, NOW).wake == ["pw-cpu02"]
    # A reserved sleeping node is not woken for general demand, nor counted.
    assert rules.plan(site, st, {"pw-cpu01"}, {"pw-cpu02"}, None, NOW).wake == ["pw-cpu03"]


def test_plan_never_sleeps_busy_or_reserved(site: Site) -> None:
    st = states(node("pw-cpu01", "ALLOCATED", 2), node("pw-cpu02"), node("pw-cpu03"))
    p = rules.plan(site, st, {"pw-cpu01"}, {"pw-cpu02"}, None, NOW)
    assert p.sleep == [] and p.wake == []  # pw-cpu03 is the last idle one outside the reservation


# ---- methods ----------------------------------------------------------------------------------

class Recorder:
    def __init__(self, rc: int = 0):
        self.calls: list[list[str]] = []
        self.rc = rc

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        return subprocess.CompletedProcess(argv, self.rc, "", "Error: Unable to establish IPMI v2 session\n")


def test_ipmi_argv(site: Site) -> None:
    p = replace(site.power, method="ipmi", bmc="{node}-bmc.mgmt", user="admin", password_file="/etc/slurm/bmc")
    rec = Recorder()
    Ipmi(p, rec)("suspend", "pw-cpu01")
    Ipmi(p, rec)("resume", "pw-cpu01")
    assert rec.calls == [
        ["ipmitool", "-I", "lanplus", "-H", "pw-cpu01-bmc.mgmt", "-U", "admin", "-f", "/etc/slurm/bmc",
         "chassis", "power", "off"],
        ["ipmitool", "-I", "lanplus", "-H", "pw-cpu01-bmc.mgmt", "-U", "admin", "-f", "/etc/slurm/bmc",
         "chassis", "power", "on"]]
    with pytest.raises(PowerError, match="ipmitool exited 1: Error: Unable to establish"):
        Ipmi(p, Recorder(rc=1))("suspend", "pw-cpu01")


def test_command_argv(site: Site) -> None:
    p = replace(site.power, method="command", suspend_argv=("/sbin/off", "--host={node}", "{node}"),
                resume_argv=("/sbin/on", "{node}"))
    rec = Recorder()
    Command(p, rec)("suspend", "pw-cpu02")
    Command(p, rec)("restart", "pw-cpu02")
    assert rec.calls == [["/sbin/off", "--host=pw-cpu02", "pw-cpu02"], ["/sbin/on", "pw-cpu02"]]


def test_devcluster_argv(site: Site) -> None:
    rec = Recorder()
    DevCluster(site.power, "/w/etc/slurm.conf", rec)("resume", "pw-cpu01")
    assert rec.calls[0][1:] == ["-m", "slurm_hetero.devcluster.power", "resume", "--conf", "/w/etc/slurm.conf",
                                "--boot-delay", "2", "pw-cpu01"]


class _Bmc(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []  # noqa: RUF012 - one test's record

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Bmc.seen.append({"path": self.path, "auth": self.headers["Authorization"], "body": json.loads(body)})
        self.send_response(401 if "bad" in self.path else 204)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture()
def bmc() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _Bmc)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()


def test_redfish_reset(site: Site, bmc: int, tmp_path: Path) -> None:
    pw = tmp_path / "bmc.pass"
    pw.write_text("s3cret\nignored\n")
    pw.chmod(0o600)
    p = replace(site.power, method="redfish", url=f"http://127.0.0.1:{bmc}/redfish/v1/Systems/{{node}}",
                user="admin", password_file=str(pw))
    _Bmc.seen.clear()
    Redfish(p)("suspend", "pw-cpu01")
    Redfish(p)("resume", "pw-cpu01")
    token = base64.b64encode(b"admin:s3cret").decode()
    assert _Bmc.seen == [
        {"path": "/redfish/v1/Systems/pw-cpu01/Actions/ComputerSystem.Reset", "auth": f"Basic {token}",
         "body": {"ResetType": "ForceOff"}},
        {"path": "/redfish/v1/Systems/pw-cpu01/Actions/ComputerSystem.Reset", "auth": f"Basic {token}",
         "body": {"ResetType": "On"}}]
    with pytest.raises(PowerError, match="HTTP 401"):
        Redfish(replace(p, url=p.url + "/bad"))("suspend", "pw-cpu01")


def test_redfish_verifies_tls_by_default(site: Site, bmc: int, tmp_path: Path) -> None:
    pw = tmp_path / "bmc.pass"
    pw.write_text("x\n")
    pw.chmod(0o600)
    # An http server spoken to over https: the TLS handshake fails; nothing is sent in clear.
    p = replace(site.power, url=f"https://127.0.0.1:{bmc}/redfish/v1/Systems/1", user="a", password_file=str(pw))
    assert p.verify_tls
    with pytest.raises(PowerError):
        Redfish(p, timeout=5)("suspend", "n1")


def test_password_file_must_be_private(tmp_path: Path) -> None:
    pw = tmp_path / "bmc.pass"
    pw.write_text("x\n")
    pw.chmod(0o644)
    with pytest.raises(PowerError, match="mode 0600"):
        read_password(str(pw))
    link = tmp_path / "link"
    link.symlink_to(pw)
    with pytest.raises(PowerError, match="cannot read"):
        read_password(str(link))


# ---- the programs and the keeper, with a fake Slurm -------------------------------------------

class FakeSlurm:
    """Answers scontrol/squeue from canned text; records what it is asked to run. `later`
    are the node texts of the following node reads, one per read (the last one stays): what
    slurmctld says once jobs have started."""

    def __init__(self, nodes: str, busy: str = "", res: str = "No reservations in the system\n",
                 later: tuple[str, ...] = ()):
        self.answers = {"node": nodes, "squeue": busy, "reservation": res}
        self.later = list(later)
        self.ran: list[list[str]] = []

    def out(self, argv: list[str], **_: object) -> str:
        if argv[:4] != ["scontrol", "-o", "show", "node"]:
            return self.answers["squeue" if argv[0] == "squeue" else argv[-1]]
        text = self.answers["node"]
        if self.later:
            self.answers["node"] = self.later.pop(0)
        if len(argv) == 5:  # the nodes named (a plain comma list, as the keeper writes it)
            names = set(argv[4].split(","))
            text = "\n".join(ln for ln in text.splitlines() if ln.split()[0].split("=")[1] in names)
        return text

    def run(self, argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        self.ran.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")


class Calls:
    def __init__(self, fail: set[str] = frozenset()):  # type: ignore[assignment]
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    def __call__(self, action: str, node: str) -> None:
        self.calls.append((action, node))
        if node in self.fail:
            raise PowerError("no answer")


def test_site_nodes_treats_the_hostlist_as_data(site: Site) -> None:
    assert site_nodes(site, "pw-cpu[01-02]") == (["pw-cpu01", "pw-cpu02"], [])
    assert site_nodes(site, "pw-cpu01,evil") == (["pw-cpu01"], ["evil"])
    assert site_nodes(site, "-rf,a;b")[0] == []
    with pytest.raises(InputError):
        site_nodes(site, "x[1-100000]")  # more names than the site has nodes: not expanded


def test_suspend_program(site: Site, tmp_path: Path) -> None:
    slurm = FakeSlurm("\n".join([line("pw-cpu01", "IDLE+POWERING_DOWN"), line("pw-cpu02", "MIXED", 1),
                                 line("pw-cpu03", "IDLE+POWERING_DOWN"), line("pw-npu01", "IDLE")]),
                      busy="pw-cpu02\n")
    logs: list[str] = []
    method = Calls()
    done = suspend(site, "pw-cpu[01-03],intruder", slurm, method, logs.append, tmp_path)  # type: ignore[arg-type]
    assert done == ["pw-cpu01"] and method.calls == [("suspend", "pw-cpu01")]
    assert logs == ["suspend intruder: refused: not a node of site power",
                    "suspend pw-cpu01: powered down",
                    "suspend pw-cpu02: refused: holds a job",
                    "suspend pw-cpu03: refused: last idle node of pool cpu@x86_64"]
    refused = json.loads((tmp_path / REFUSED).read_text())
    assert sorted(refused) == ["pw-cpu02", "pw-cpu03"]
    assert oct(os.stat(tmp_path / REFUSED).st_mode & 0o777) == "0o600"
    # Resuming: a node whose suspend was refused is restarted (22.05 needs a fresh registration).
    logs.clear()
    method = Calls()
    assert sorted(resume(site, "pw-cpu[01,03]", method, logs.append, tmp_path)) == ["pw-cpu01", "pw-cpu03"]
    assert sorted(method.calls) == [("restart", "pw-cpu03"), ("resume", "pw-cpu01")]
    assert sorted(json.loads((tmp_path / REFUSED).read_text())) == ["pw-cpu02"]


def test_suspend_without_slurm_state_suspends_nothing(site: Site, tmp_path: Path) -> None:
    from slurm_hetero.errors import RuntimeFailure

    class Down(FakeSlurm):
        def out(self, argv: list[str], **_: object) -> str:
            raise RuntimeFailure("scontrol: Unable to contact slurm controller")

    logs: list[str] = []
    method = Calls()
    assert suspend(site, "pw-cpu01", Down(""), method, logs.append, tmp_path) == []  # type: ignore[arg-type]
    assert method.calls == [] and "refused all" in logs[0]


def test_failed_power_down_is_logged_and_kept(site: Site, tmp_path: Path) -> None:
    slurm = FakeSlurm("\n".join([line("pw-cpu01", "IDLE+POWERING_DOWN"), line("pw-cpu02", "IDLE+POWERING_DOWN"),
                                 line("pw-cpu03", "IDLE")]))
    logs: list[str] = []
    done = suspend(site, "pw-cpu[01-02]", slurm, Calls(fail={"pw-cpu02"}), logs.append, tmp_path)  # type: ignore[arg-type]
    assert done == ["pw-cpu01"] and logs[-1] == "suspend pw-cpu02: failed: no answer"
    assert list(json.loads((tmp_path / REFUSED).read_text())) == ["pw-cpu02"]


def test_keeper_round(site: Site) -> None:
    old = "2026-12-01T22:00:00"
    slurm = FakeSlurm("\n".join([line("pw-cpu01", "IDLE", busy=old), line("pw-cpu02", "IDLE", busy=old),
                                 line("pw-cpu03", "IDLE", busy=old), line("pw-npu01", "IDLE", busy=old)]))
    logs: list[str] = []
    k = Keeper(site, slurm, log=logs.append, clock=lambda: NOW)  # type: ignore[arg-type]
    plan = k.round(None)
    assert plan is not None and slurm.ran == [node_power_argv(["pw-cpu01", "pw-cpu02"], "power_down")]
    assert logs == ["power: power_down pw-cpu01,pw-cpu02 (cpu@x86_64: need 0, running 0, idle 3, keep 1)"]
    assert k.round(None) is None  # throttled: once every keep_every(site) seconds


def test_keeper_reads_the_nodes_again_before_and_after_powering_down(site: Site) -> None:
    """A job that starts between the round's read and its request keeps its node up (read
    again just before); one that starts within the request itself is said, since 22.05
    cannot withdraw a pending power down."""
    old = "2026-12-01T22:00:00"
    idle = [line(n, "IDLE", busy=old) for n in ("pw-cpu01", "pw-cpu02", "pw-cpu03", "pw-npu01")]
    took_01 = [line("pw-cpu01", "MIXED", 1, busy=old), *idle[1:]]
    slurm = FakeSlurm("\n".join(idle), later=("\n".join(took_01),))
    logs: list[str] = []
    plan = Keeper(site, slurm, log=logs.append, clock=lambda: NOW).round(None)  # type: ignore[arg-type]
    assert plan is not None and slurm.ran == [node_power_argv(["pw-cpu02"], "power_down")]
    assert plan.sleep == ["pw-cpu02"]  # what the history records: what was asked
    assert logs[:2] == ["power: kept pw-cpu01 up: no longer idle since the round read it",
                        "power: power_down pw-cpu02 (cpu@x86_64: need 0, running 0, idle 3, keep 1)"]
    assert len(logs) == 2
    # The job starts as the request is made: the node is asked down, and the log says so.
    late = [line("pw-cpu01", "MIXED+POWER_DOWN", 1, busy=old), line("pw-cpu02", "IDLE+POWERING_DOWN", busy=old)]
    slurm = FakeSlurm("\n".join(idle), later=("\n".join(idle), "\n".join(late)))
    logs.clear()
    plan = Keeper(site, slurm, log=logs.append, clock=lambda: NOW).round(None)  # type: ignore[arg-type]
    assert plan is not None and slurm.ran == [node_power_argv(["pw-cpu01", "pw-cpu02"], "power_down")]
    assert logs[1:] == ["power: pw-cpu01 took a job as it was asked to power down; Slurm cannot withdraw "
                        "that: it sleeps when its jobs end"]
    # Every node taken by then: nothing is asked.
    took_all = [line(n, "ALLOCATED", 2, busy=old) for n in ("pw-cpu01", "pw-cpu02")]
    slurm = FakeSlurm("\n".join(idle), later=("\n".join(took_all),))
    plan = Keeper(site, slurm, log=logs.append, clock=lambda: NOW).round(None)  # type: ignore[arg-type]
    assert plan is not None and slurm.ran == [] and plan.sleep == []
    # slurmctld stops answering between the reads: nothing sleeps this round, the round stands.
    from slurm_hetero.errors import RuntimeFailure

    class Gone(FakeSlurm):
        def out(self, argv: list[str], **kw: object) -> str:
            if len(argv) == 5:
                raise RuntimeFailure("scontrol: Unable to contact slurm controller")
            return super().out(argv, **kw)

    slurm = Gone("\n".join(idle))
    logs.clear()
    plan = Keeper(site, slurm, log=logs.append, clock=lambda: NOW).round(None)  # type: ignore[arg-type]
    assert plan is not None and slurm.ran == [] and plan.sleep == []
    assert logs == ["power: kept pw-cpu01,pw-cpu02 up: could not read them again: "
                    "scontrol: Unable to contact slurm controller"]


def test_keeper_survives_a_bad_answer(site: Site) -> None:
    slurm = FakeSlurm("NodeName=pw-cpu01 State=IDLE LastBusyTime=garbage")
    logs: list[str] = []
    assert Keeper(site, slurm, log=logs.append).round(None) is not None  # type: ignore[arg-type]
    assert slurm.ran == []  # a node with an unknown idle time never sleeps


def test_power_argv_checks_names() -> None:
    assert node_power_argv(["a1", "b-2"], "power_up") == ["scontrol", "update", "nodename=a1,b-2",
                                                           "state=power_up"]
    for bad in (["a state=down"], ["-x"], []):
        with pytest.raises(ValueError):
            node_power_argv(bad, "power_down")
    with pytest.raises(ValueError):
        node_power_argv(["a"], "down")
    assert nodes_oneliner_argv(["a1", "b2"]) == ["scontrol", "-o", "show", "node", "a1,b2"]
    assert nodes_oneliner_argv() == ["scontrol", "-o", "show", "node"]
    with pytest.raises(ValueError):
        nodes_oneliner_argv(["a1 b2"])
