"""The Ansible role against the real dev cluster: order, restarts, idempotence, check mode, QoS.

Every "host" is this machine (ansible_connection=local) with its own folders, so one run
has a controller and a compute node (and a login node). Slurm commands go to the session's
cluster (SLURM_CONF); the restart commands are replaced by ones that record, in order, what
would have been restarted where, and the reconfigure command records whether the compute
node already had its files before it runs the real `scontrol reconfigure`.
"""

from __future__ import annotations

import grp
import json
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_hetero.devcluster import Cluster
from slurm_hetero.site import Site

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "ansible" / "playbooks" / "deploy.yml"
LOCAL = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
CONTROLLER_FILES = ("job_submit.lua", "qos.sacctmgr", "site.yaml")
ALL_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "plugstack.conf", "hetero-agent.json", "oci.conf",
             "hetero-containers.json", "hetero-taskprolog", "hetero-healthcheck")
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
PROMETHEUS_FILES = ("hetero-scrape.yml", "hetero-rules.yml", "hetero-node-targets.json", "hetero-cluster-targets.json")
EXPORTER_USER = "slurm-hetero-exporter"

pytestmark = pytest.mark.integration


def inventory(tmp: Path, groups: dict[str, list[str]]) -> Path:
    """An inventory of local hosts, each with its own conf, systemd, Prometheus and node agent
    folders under tmp/hosts/."""
    lines = []
    for group, hosts in groups.items():
        lines.append(f"[{group}]")
        for h in hosts:
            lines.append(f"{h} {LOCAL} slurm_hetero_conf_dir={tmp / 'hosts' / h / 'etc'} "
                         f"slurm_hetero_systemd_dir={tmp / 'hosts' / h / 'units'} "
                         f"slurm_hetero_prometheus_dir={tmp / 'hosts' / h / 'prometheus'} "
                         f"slurm_hetero_agent_state_dir={tmp / 'hosts' / h / 'agent'}")
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "inventory"
    path.write_text("\n".join(lines) + "\n")
    return path


def recorder(log: Path, what: str) -> list[str]:
    """A restart command that appends `WHAT HOST` to log."""
    return ["sh", "-c", 'echo "$1 $2" >> "$3"', "sh", what, "{{ inventory_hostname }}", str(log)]


def playbook(inv: Path, extra: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(PLAYBOOK),
         "-e", json.dumps(extra), *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT / "ansible", check=False)


def deploy(c: Cluster, tmp: Path, inv: Path, *args: str, src: Path | None = None,
           **more: object) -> subprocess.CompletedProcess[str]:
    log = tmp / "restarts.log"
    log.touch()
    # The compute node's folder must hold the files being deployed when reconfigure runs.
    node = tmp / "hosts" / "node1" / "etc"
    reconfigure = ["sh", "-c", 'if cmp -s "$2/gres.conf" "$3/gres.conf" && cmp -s "$2/slurm.conf" "$3/slurm.conf"; '
                   'then echo reconfigure >> "$1"; else echo reconfigure-before-node-files >> "$1"; fi; '
                   'exec scontrol reconfigure', "sh", str(log), str(node), "{{ slurm_hetero_conf_src }}"]
    extra = {"slurm_hetero_conf_src": str(src or c.etc), "slurm_hetero_slurm_conf_env": {"SLURM_CONF": str(c.conf)},
             "ansible_become": False, "slurm_hetero_slurmctld_restart_command": recorder(log, "slurmctld"),
             "slurm_hetero_slurmd_restart_command": recorder(log, "slurmd"),
             "slurm_hetero_prometheus_reload_command": recorder(log, "prometheus"),
             "slurm_hetero_reconfigure_command": reconfigure if "\nnode1 " in inv.read_text() else
             ["sh", "-c", 'echo reconfigure >> "$1"; exec scontrol reconfigure', "sh", str(log)],
             # Units are installed, never started: test machines need not run systemd.
             "slurm_hetero_manage_services": False,
             **more}
    return playbook(inv, extra, *args)


def restarts(tmp: Path) -> list[str]:
    return (tmp / "restarts.log").read_text().splitlines()


def changed(r: subprocess.CompletedProcess[str]) -> dict[str, int]:
    counts = {m[1]: int(m[3]) for m in RECAP.finditer(r.stdout)}
    assert counts, r.stdout[-3000:]
    return counts


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def task(stdout: str, name: str) -> str:
    """The output of one task (the first with that name)."""
    return stdout.split(f"[slurm_hetero : {name}]", 1)[1].split("\nTASK [", 1)[0].split("\nRUNNING HANDLER [", 1)[0]


def changed_tasks(stdout: str) -> list[str]:
    """The names of the tasks that reported a change (for failure messages)."""
    return [t.split("]", 1)[0] for t in stdout.split("TASK [")[1:] if "\nchanged:" in t]


@pytest.fixture
def exporter_user() -> Iterator[str]:
    """The exporters' system user the role creates, removed afterwards if the test made it."""
    try:
        pwd.getpwnam(EXPORTER_USER)
        existed = True
    except KeyError:
        existed = False
    yield EXPORTER_USER
    if not existed:
        subprocess.run(["userdel", EXPORTER_USER], check=False, capture_output=True)
        subprocess.run(["groupdel", EXPORTER_USER], check=False, capture_output=True)


def prometheus_config(folder: Path, scrape: Path | None) -> None:
    """A Prometheus server's own prometheus.yml, as its admin left it: its own job, the rules
    file named, and (Prometheus 2.42: no scrape_config_files) the jobs of `scrape` pasted."""
    jobs = yaml.safe_load(scrape.read_text())["scrape_configs"] if scrape else []
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "15s"}, "rule_files": ["hetero-rules.yml"],
        "scrape_configs": [{"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]}, *jobs]}))


def test_role_deploys_in_order_then_changes_nothing(cluster: Cluster, tmp_path: Path, exporter_user: str) -> None:
    inv = inventory(tmp_path, {"slurm_controller": ["ctl"], "slurm_compute": ["node1"], "prometheus": ["prom"]})
    hosts = tmp_path / "hosts"
    prometheus_config(hosts / "prom" / "prometheus", cluster.etc / "hetero-scrape.yml")
    own = (hosts / "prom" / "prometheus" / "prometheus.yml").read_text()
    units: dict[str, Any] = {"slurm_hetero_sampler": True, "slurm_hetero_bridge": True, "slurm_hetero_exporters": True}
    r = deploy(cluster, tmp_path, inv, **units)
    assert r.returncode == 0, r.stdout[-3000:]
    assert all(n > 0 for n in changed(r).values()) and set(changed(r)) == {"ctl", "node1", "prom"}

    # Each host got what its role needs, byte for byte; scripts slurm.conf runs are executable.
    for host in ("ctl", "node1"):
        etc = hosts / host / "etc"
        for name in ALL_FILES:
            assert (etc / name).read_text() == (cluster.etc / name).read_text(), (host, name)
        for script in ("hetero-taskprolog", "hetero-healthcheck"):
            assert (etc / script).stat().st_mode & 0o777 == 0o755, (host, script)
        for name in CONTROLLER_FILES:
            assert (etc / name).exists() == (host == "ctl"), (host, name)
    # The daemons' units only where they run, each with the role's Restart=always drop-in.
    assert sorted(p.name for p in (hosts / "ctl" / "units").glob("*.service")) == \
        ["hetero-bridge.service", "hetero-exporter.service"]
    assert sorted(p.name for p in (hosts / "node1" / "units").glob("*.service")) == \
        ["hetero-node-exporter.service", "hetero-sampler.service"]
    for host, unit in (("ctl", "hetero-exporter.service"), ("node1", "hetero-node-exporter.service")):
        text = (hosts / host / "units" / unit).read_text()
        assert text == (cluster.etc / unit).read_text() and f"\nUser={exporter_user}\n" in text, (host, unit)
    # The exporters' user: a system user without login, in its own group; on the compute
    # node its group alone (and root) may enter the node agent's state folder.
    user = pwd.getpwnam(exporter_user)
    assert user.pw_shell == "/usr/sbin/nologin" and user.pw_uid < 1000 and user.pw_uid != 0
    assert grp.getgrgid(user.pw_gid).gr_name == exporter_user
    agent = (hosts / "node1" / "agent").stat()
    assert (agent.st_uid, agent.st_gid, agent.st_mode & 0o777) == (0, user.pw_gid, 0o750)
    assert not (hosts / "ctl" / "agent").exists()
    # The Prometheus server: its files only (no Slurm file), its own configuration untouched.
    assert not (hosts / "prom" / "etc").exists() and not (hosts / "prom" / "units").exists()
    prom = hosts / "prom" / "prometheus"
    assert sorted(p.name for p in prom.iterdir()) == sorted([*PROMETHEUS_FILES, "prometheus.yml"])
    for name in PROMETHEUS_FILES:
        assert (prom / name).read_text() == (cluster.etc / name).read_text(), name
    assert (prom / "prometheus.yml").read_text() == own
    assert "Prometheus accepts its whole configuration with them" in r.stdout
    sampler = (hosts / "node1" / "units" / "hetero-sampler.service").read_text()
    assert "node sample --every 1" in sampler and "npu-[01-02]" in sampler
    bridge = (hosts / "ctl" / "units" / "hetero-bridge.service").read_text()
    assert bridge == (cluster.etc / "hetero-bridge.service").read_text()
    for host, unit in (("ctl", "hetero-bridge"), ("node1", "hetero-sampler")):
        dropin = (hosts / host / "units" / f"{unit}.service.d" / "slurm-hetero-role.conf").read_text()
        assert "\nRestart=always\n" in dropin and "StartLimitIntervalSec=0" in dropin, dropin
    assert "skipping: [ctl]" in task(r.stdout, "Those units enabled and running (controller)")

    # Order: compute and login nodes first, then the controller, then slurmctld's restart (a
    # new slurm.conf), one reconfigure (once the node had its files), then slurmd, then verify.
    marks = ["TASK [slurm_hetero : Configuration files (nodes)]",
             "TASK [slurm_hetero : Configuration files (controller)]",
             "RUNNING HANDLER [slurm_hetero : Restart slurmctld]",
             "RUNNING HANDLER [slurm_hetero : Reconfigure slurm]",
             "RUNNING HANDLER [slurm_hetero : Restart slurmd]",
             "TASK [slurm_hetero : Nodes down or drained after deploying]"]
    at = [r.stdout.index(m) for m in marks]
    assert at == sorted(at), list(zip(marks, at, strict=True))
    assert restarts(tmp_path) == ["slurmctld ctl", "reconfigure", "slurmd node1", "prometheus prom"]
    assert "Slurm sees the accelerators the configuration declares" in r.stdout
    assert "no node became unusable" in r.stdout

    # Second run: nothing to do anywhere, nothing restarted.
    r = deploy(cluster, tmp_path, inv, **units)
    assert r.returncode == 0, r.stdout[-3000:]
    assert changed(r) == {"ctl": 0, "node1": 0, "prom": 0}, changed_tasks(r.stdout)
    assert len(restarts(tmp_path)) == 4

    # Check mode with nothing to change: succeeds, reports nothing.
    r = deploy(cluster, tmp_path, inv, "--check", "--diff", **units)
    assert r.returncode == 0, r.stdout[-3000:]
    assert changed(r) == {"ctl": 0, "node1": 0, "prom": 0}, changed_tasks(r.stdout)

    # A new gres.conf and a slurm.conf change that reconfigure applies (DefMemPerCPU).
    src = tmp_path / "src"
    shutil.copytree(cluster.etc, src)
    (src / "gres.conf").write_text((src / "gres.conf").read_text() + "# changed by the test\n")
    conf = (src / "slurm.conf").read_text()
    assert "\nDefMemPerCPU=1024\n" in conf
    (src / "slurm.conf").write_text(conf.replace("\nDefMemPerCPU=1024\n", "\nDefMemPerCPU=2048\n"))
    # --check --diff shows it and changes nothing: not a file, not a daemon.
    before = snapshot(hosts)
    r = deploy(cluster, tmp_path, inv, "--check", "--diff", src=src, **units)
    assert r.returncode == 0, r.stdout[-3000:]
    assert changed(r)["node1"] > 0 and changed(r)["ctl"] > 0
    assert "+DefMemPerCPU=2048" in r.stdout and "+# changed by the test" in r.stdout
    assert snapshot(hosts) == before
    assert len(restarts(tmp_path)) == 4
    # Applied: reconfigure (after the node got its files), slurmd restarted on the compute
    # node only (gres.conf), slurmctld not (no restart-only key changed), Prometheus not.
    r = deploy(cluster, tmp_path, inv, src=src, **units)
    assert r.returncode == 0, r.stdout[-3000:]
    assert restarts(tmp_path)[4:] == ["reconfigure", "slurmd node1"]
    assert (hosts / "node1" / "etc" / "gres.conf").read_text().endswith("# changed by the test\n")

    # A node definition changes: slurmctld restarted (not only reconfigured), then slurmd.
    conf = (src / "slurm.conf").read_text()
    line = re.search(r"(?m)^NodeName=cpu-x86-01 .*$", conf)
    assert line and " Weight=1 " in line[0]
    (src / "slurm.conf").write_text(conf.replace(line[0], line[0].replace(" Weight=1 ", " Weight=3 ")))
    r = deploy(cluster, tmp_path, inv, src=src, **units)
    assert r.returncode == 0, r.stdout[-3000:]
    assert restarts(tmp_path)[6:] == ["slurmctld ctl", "reconfigure", "slurmd node1"]
    assert "changed: NodeName: slurmctld is restarted" in r.stdout

    # A rule Prometheus would refuse is not installed: promtool checks it first.
    (src / "hetero-rules.yml").write_text((src / "hetero-rules.yml").read_text() + "  - name: broken\n    rules: [{record: x}]\n")
    r = deploy(cluster, tmp_path, inv, src=src, **units)
    assert r.returncode != 0 and "failed to validate" in r.stdout, r.stdout[-3000:]
    assert (prom / "hetero-rules.yml").read_text() == (cluster.etc / "hetero-rules.yml").read_text()


def assoc_qos(c: Cluster, account: str) -> set[str]:
    rows = [ln.split("|") for ln in c.runner.out(["sacctmgr", "-P", "-n", "show", "assoc", "where", f"account={account}",
                                                   "format=Account,User,QOS"]).splitlines()]
    [row] = [r for r in rows if r[0] == account and r[1] == ""]
    return {q for q in row[2].split(",") if q}


def qos_commands(stdout: str) -> list[list[str]]:
    out = task(stdout, "QoS tiers created or updated, and added to the accounts (qos+=, their other QoS kept)")
    m = re.search(r"=> (\{.*\})\s*$", out, re.M)
    assert m, out
    return list(json.loads(m[1])["commands"])


def test_qos_tiers_idempotent_and_accounts_keep_their_qos(cluster: Cluster, demo_site: Site,
                                                          tmp_path: Path) -> None:
    account, keep, tier = "hetero-ansible", "hetero-keep", "hetero-ansible-tier"
    sacctmgr = ["sacctmgr", "-i"]
    cluster.runner.run([*sacctmgr, "add", "qos", keep])
    cluster.runner.run([*sacctmgr, "add", "account", account, f"cluster={demo_site.name}", f"qos={keep}"])
    try:
        assert assoc_qos(cluster, account) == {keep}
        root = assoc_qos(cluster, "root")
        src = tmp_path / "src"
        shutil.copytree(cluster.etc, src)
        script = (src / "qos.sacctmgr").read_text()
        assert "set QOS=" in script  # what the role must never run as written
        (src / "qos.sacctmgr").write_text(
            script + f"sacctmgr -i add qos {tier}\n"
            f"sacctmgr -i modify qos where name={tier} set Priority=7 UsageFactor=1.5 Preempt=silver\n")
        inv = inventory(tmp_path, {"slurm_controller": ["ctl"]})
        more = {"slurm_hetero_qos_accounts": [account], "slurm_hetero_verify": False}

        # Check mode: says what it would run, runs nothing.
        r = deploy(cluster, tmp_path, inv, "--check", "--diff", src=src, **more)
        assert r.returncode == 0, r.stdout[-3000:]
        assert f"sacctmgr -i add qos {tier}" in r.stdout and "qos+=diamond,gold,silver" in r.stdout
        assert tier not in cluster.runner.out([*sacctmgr, "-n", "-P", "show", "qos", "format=Name"]).split()
        assert assoc_qos(cluster, account) == {keep}

        r = deploy(cluster, tmp_path, inv, "-v", src=src, **more)
        assert r.returncode == 0, r.stdout[-3000:]
        commands = qos_commands(r.stdout)
        assert commands == [
            [*sacctmgr, "add", "qos", tier],
            [*sacctmgr, "modify", "qos", "where", f"name={tier}", "set", "Priority=7", "UsageFactor=1.5",
             "Preempt=silver"],
            [*sacctmgr, "modify", "account", "where", f"name={account}", f"cluster={demo_site.name}", "set",
             "qos+=diamond,gold,silver"]], commands
        # The account kept the QoS it had; root's list is untouched.
        assert assoc_qos(cluster, account) == {keep, "diamond", "gold", "silver"}
        assert assoc_qos(cluster, "root") == root
        row = cluster.runner.out([*sacctmgr, "-n", "-P", "show", "qos", "where", f"name={tier}",
                                  "format=Name,Priority,UsageFactor,Preempt"]).strip()
        assert row == f"{tier}|7|1.500000|silver"

        # Again: nothing to do.
        r = deploy(cluster, tmp_path, inv, src=src, **more)
        assert r.returncode == 0, r.stdout[-3000:]
        assert changed(r) == {"ctl": 0}, r.stdout[-3000:]

        # One setting changes: only that field is modified.
        (src / "qos.sacctmgr").write_text((src / "qos.sacctmgr").read_text().replace("Priority=7", "Priority=9"))
        r = deploy(cluster, tmp_path, inv, "-v", src=src, **more)
        assert r.returncode == 0, r.stdout[-3000:]
        assert qos_commands(r.stdout) == [[*sacctmgr, "modify", "qos", "where", f"name={tier}", "set", "Priority=9"]]
    finally:
        cluster.runner.run([*sacctmgr, "delete", "account", f"name={account}"], check=False)
        cluster.runner.run([*sacctmgr, "delete", "qos", f"name={keep},{tier}"], check=False)


def test_compute_nodes_need_the_node_agent_installed(cluster: Cluster, tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"slurm_compute": ["node1"]})
    r = deploy(cluster, tmp_path, inv)
    assert r.returncode == 0, r.stdout[-3000:]  # the dev cluster's prolog/epilog exist here
    assert restarts(tmp_path) == ["slurmd node1"]  # no controller in the play: no reconfigure
    src = tmp_path / "conf"
    shutil.copytree(cluster.etc, src)
    conf = (src / "slurm.conf").read_text()
    (src / "slurm.conf").write_text(re.sub(r"(?m)^Prolog=.*$", "Prolog=/opt/missing/slurm-hetero-prolog", conf))
    inv = inventory(tmp_path / "bad", {"slurm_compute": ["node2"]})
    r = deploy(cluster, tmp_path, inv, src=src)
    assert r.returncode != 0
    assert "slurm.conf runs /opt/missing/slurm-hetero-prolog for every job" in r.stdout, r.stdout[-2000:]
    assert not (tmp_path / "bad" / "hosts").exists()  # checked before anything is copied


def test_role_fails_only_on_nodes_the_deployment_made_unusable(cluster: Cluster, tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"slurm_controller": ["ctl"]})
    quick: dict[str, Any] = {"slurm_hetero_verify_retries": 2, "slurm_hetero_verify_delay": 1}  # Any: mypy checks **-dict values against deploy's src too
    cluster.runner.run(["scontrol", "update", "NodeName=cpu-arm-01", "State=DRAIN", "Reason=in repair"])
    try:
        # A node drained before (in repair) is reported, not held against the deployment.
        r = deploy(cluster, tmp_path, inv, **quick)
        assert r.returncode == 0, r.stdout[-3000:]
        assert "no node became unusable (already down or drained before: cpu-arm-01)" in r.stdout
        # A node the deployment drains (here: the "restart" of slurmctld does) fails it.
        inv = inventory(tmp_path / "again", {"slurm_controller": ["ctl"]})
        drain = ["scontrol", "update", "NodeName=cpu-arm-02", "State=DRAIN", "Reason=broken by deploy"]
        r = deploy(cluster, tmp_path, inv, slurm_hetero_slurmctld_restart_command=drain, **quick)
    finally:
        cluster.runner.run(["scontrol", "update", "NodeName=cpu-arm-01,cpu-arm-02", "State=RESUME"])
    assert r.returncode != 0
    assert ("nodes down or drained after deploying: cpu-arm-02 drained broken by deploy "
            "(already so before, not counted: cpu-arm-01)") in r.stdout, r.stdout[-3000:]


def test_manifest_says_which_hosts_get_which_file(cluster: Cluster, tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(cluster.etc, src)
    (src / "manifest.json").write_text(json.dumps({"version": 1, "files": [
        {"name": "slurm.conf", "hosts": "all"}, {"name": "gres.conf", "hosts": "all"},
        {"name": "hetero-healthcheck", "hosts": "compute", "mode": "0755"},
        {"name": "job_submit.lua", "hosts": "controller", "mode": "0640"},
        {"name": "qos.sacctmgr", "hosts": "controller"},
        {"name": "hetero-sampler.service", "hosts": "compute"}]}))
    inv = inventory(tmp_path, {"slurm_controller": ["ctl"], "slurm_compute": ["node1"],
                                "slurm_login": ["login1"]})
    r = deploy(cluster, tmp_path, inv, src=src, slurm_hetero_verify=False, slurm_hetero_apply_qos=False)
    assert r.returncode == 0, r.stdout[-3000:]
    ctl, node = tmp_path / "hosts" / "ctl" / "etc", tmp_path / "hosts" / "node1" / "etc"
    # Login nodes get what every host reads (sbatch, srun and the SPANK plugin read slurm.conf).
    assert sorted(p.name for p in (tmp_path / "hosts" / "login1" / "etc").iterdir()) == ["gres.conf", "slurm.conf"]
    assert sorted(p.name for p in ctl.iterdir()) == ["gres.conf", "job_submit.lua", "qos.sacctmgr", "slurm.conf"]
    assert sorted(p.name for p in node.iterdir()) == ["gres.conf", "hetero-healthcheck", "slurm.conf"]
    assert (ctl / "job_submit.lua").stat().st_mode & 0o777 == 0o640
    assert (node / "hetero-healthcheck").stat().st_mode & 0o777 == 0o755
    assert not (tmp_path / "hosts" / "node1" / "units").exists()  # slurm_hetero_sampler is off


def test_configless_compute_nodes_get_our_files_in_the_node_folder(cluster: Cluster, tmp_path: Path) -> None:
    """A configless render (manifest.json's node_dir, node_files): slurmd fetch Slurm's files,
    so compute nodes get slurm-hetero's in the node folder; other hosts as before."""
    src = tmp_path / "src"
    shutil.copytree(cluster.etc, src)
    (src / "manifest.json").write_text(json.dumps({
        "version": 1, "files": [{"name": "slurm.conf", "hosts": "all"}, {"name": "hetero-agent.json", "hosts": "all"},
                                {"name": "hetero-healthcheck", "hosts": "all", "mode": "0755"}],
        "node_dir": "/etc/slurm-hetero", "node_files": ["hetero-agent.json", "hetero-healthcheck"]}))
    inv = inventory(tmp_path, {"slurm_controller": ["ctl"], "slurm_compute": ["node1"]})
    node_dir = tmp_path / "hosts" / "node1" / "slurm-hetero"  # stands for /etc/slurm-hetero
    r = deploy(cluster, tmp_path, inv, src=src, slurm_hetero_verify=False, slurm_hetero_apply_qos=False,
               slurm_hetero_node_dir=str(node_dir))
    assert r.returncode == 0, r.stdout[-3000:]
    assert sorted(p.name for p in (tmp_path / "hosts" / "node1" / "etc").iterdir()) == ["slurm.conf"]
    assert sorted(p.name for p in node_dir.iterdir()) == ["hetero-agent.json", "hetero-healthcheck"]
    assert (node_dir / "hetero-healthcheck").stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in (tmp_path / "hosts" / "ctl" / "etc").iterdir()) == \
        ["hetero-agent.json", "hetero-healthcheck", "slurm.conf"]
    again = deploy(cluster, tmp_path, inv, src=src, slurm_hetero_verify=False, slurm_hetero_apply_qos=False,
                   slurm_hetero_node_dir=str(node_dir))
    assert again.returncode == 0 and changed(again)["node1"] == 0, changed_tasks(again.stdout)


@pytest.mark.parametrize("bad", ["no folder", "no such folder", "path in manifest", "manifest version",
                                 "file missing", "prometheus without the jobs"])
def test_role_input_errors_are_clear(cluster: Cluster, tmp_path: Path, bad: str) -> None:
    src = tmp_path / "src"
    shutil.copytree(cluster.etc, src)
    manifest: dict[str, Any] = {"version": 1, "files": [{"name": "slurm.conf", "hosts": "all"}]}
    conf_src, expect = str(src), ""
    groups: dict[str, list[str]] = {"slurm_controller": ["ctl"]}
    more: dict[str, str] = {}
    if bad == "no folder":
        conf_src, expect = "", "slurm_hetero_conf_src must name the folder"
    elif bad == "no such folder":
        conf_src, expect = "/nonexistent/conf", "slurm.conf is missing from /nonexistent/conf"
    elif bad == "path in manifest":
        manifest["files"].append({"name": "../../etc/passwd", "hosts": "all"})
        expect = 'bad entry {"name": "../../etc/passwd", "hosts": "all"}'
    elif bad == "manifest version":
        del manifest["version"]
        expect = "manifest.json must be {\"version\": 1"
    elif bad == "file missing":
        manifest["files"].append({"name": "nosuch.conf", "hosts": "all"})
        expect = f"nosuch.conf is missing from {src}"
    elif bad == "prometheus without the jobs":
        # Its prometheus.yml names the rules but scrapes nothing of ours: nothing may change.
        manifest["files"] += [{"name": name, "hosts": "prometheus"} for name in PROMETHEUS_FILES]
        groups["prometheus"] = ["prom"]
        prometheus_config(tmp_path / "prom", None)
        more = {"slurm_hetero_prometheus_dir": str(tmp_path / "prom")}
        expect = (f"{tmp_path}/prom/prometheus.yml on prom must read the rules (rule_files: [hetero-rules.yml]) "
                  "and scrape the exporters")
    (src / "manifest.json").write_text(json.dumps(manifest))
    inv = inventory(tmp_path, groups)
    r = deploy(cluster, tmp_path, inv, src=src, slurm_hetero_conf_src=conf_src, **more)
    assert r.returncode != 0
    assert expect in " ".join(r.stdout.split()), r.stdout[-2000:]
    assert not (tmp_path / "hosts").exists()  # nothing was copied
    if bad == "prometheus without the jobs":
        assert "missing: the scrape jobs" in r.stdout and sorted(p.name for p in (tmp_path / "prom").iterdir()) == \
            ["prometheus.yml"]
    assert restarts(tmp_path) == []


def test_role_installs_the_package_then_changes_nothing(cluster: Cluster, tmp_path: Path) -> None:
    """slurm_hetero_package: a wheel of this checkout goes into a virtual environment on the
    host, its console scripts into the bin folder and the package where the container
    wrapper imports it from; the same wheel again (and check mode) changes nothing."""
    dist = tmp_path / "dist"
    # From a copy: pip builds in the source folder (build/, *.egg-info), which may be
    # read-only (scripts/test-slurm-24.11.sh mounts the checkout so) and is not ours to litter.
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache", "spank", "tests"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(copy)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("slurm_hetero-*.whl"))
    inv = inventory(tmp_path, {"slurm_compute": ["node1"]})
    host = tmp_path / "hosts" / "node1"
    where: dict[str, Any] = {"slurm_hetero_package": str(wheel), "slurm_hetero_python": sys.executable,
                             "slurm_hetero_venv": str(host / "venv"), "slurm_hetero_bin_dir": str(host / "bin"),
                             "slurm_hetero_lib_dir": str(host / "lib")}
    r = deploy(cluster, tmp_path, inv, **where)
    assert r.returncode == 0, r.stdout[-3000:]
    for name in ("slurm-hetero", "slurm-hetero-prolog", "slurm-hetero-epilog", "slurm-hetero-restore"):
        assert (host / "bin" / name).resolve() == (host / "venv" / "bin" / name).resolve(), name
    # The installed package runs (its own dependencies, not this checkout's).
    out = subprocess.run([str(host / "bin" / "slurm-hetero"), "--help"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "conf" in out and "bridge" in out
    lib = (host / "lib" / "slurm_hetero").resolve()
    assert (lib / "__init__.py").exists() and str(lib).startswith(str((host / "venv").resolve()))
    again = deploy(cluster, tmp_path, inv, **where)
    assert again.returncode == 0 and changed(again) == {"node1": 0}, changed_tasks(again.stdout)
    check = deploy(cluster, tmp_path, inv, "--check", "--diff", **where)
    assert check.returncode == 0 and changed(check) == {"node1": 0}, changed_tasks(check.stdout)


def test_role_joins_the_sites_hooks(cluster: Cluster, demo_site: Site, tmp_path: Path) -> None:
    """A site with its own Prolog folder and job_submit.lua: the node agent is linked into the
    folder on compute nodes, and the controller keeps the site's live job_submit.lua as the
    rules the rendered one loads, before that file takes its name; nothing changes twice."""
    import yaml

    from slurm_hetero.conf.render import MANIFEST, manifest, node_hooks, render_site, write_files
    from slurm_hetero.site import load_site_text

    hosts = tmp_path / "hosts"
    ctl_etc, prolog_d = hosts / "ctl" / "etc", tmp_path / "site-prolog.d"
    prolog_d.mkdir()
    (prolog_d / "50-site").write_text("#!/bin/sh\nexit 0\n")
    data = yaml.safe_load(Path(str(demo_site.path)).read_text())
    data["slurm"] = {"prolog": f"{prolog_d}/*", "job_submit": {"script": f"{ctl_etc}/job_submit.site.lua"}}
    site = load_site_text(yaml.safe_dump(data))
    profile = cluster.profile(cluster.info())
    files = render_site(site, profile)
    files[MANIFEST] = manifest(files, hooks=node_hooks(site, profile), site_rules=site.slurm.job_submit_script)
    src = tmp_path / "src"
    write_files(files, src)
    inv = inventory(tmp_path, {"slurm_controller": ["ctl"], "slurm_compute": ["node1"]})
    site_rules = "-- the site's own rules\nfunction slurm_job_submit() return slurm.SUCCESS end\n"
    ctl_etc.mkdir(parents=True)
    (ctl_etc / "job_submit.lua").write_text(site_rules)
    quiet = {"slurm_hetero_verify": False, "slurm_hetero_apply_qos": False}
    r = deploy(cluster, tmp_path, inv, src=src, **quiet)
    assert r.returncode == 0, r.stdout[-3000:]
    link = prolog_d / "zz-slurm-hetero"
    assert link.is_symlink() and str(link.readlink()) == profile.prolog
    assert (ctl_etc / "job_submit.site.lua").read_text() == site_rules
    assert (ctl_etc / "job_submit.lua").read_text() == files["job_submit.lua"]
    again = deploy(cluster, tmp_path, inv, src=src, **quiet)
    assert again.returncode == 0 and changed(again) == {"ctl": 0, "node1": 0}, changed_tasks(again.stdout)
    assert (ctl_etc / "job_submit.site.lua").read_text() == site_rules  # never over the site's

    # A controller with neither the site's rules nor a job_submit.lua of the site's own to keep.
    inv = inventory(tmp_path / "bare", {"slurm_controller": ["ctl"]})
    data["slurm"]["job_submit"]["script"] = f"{tmp_path}/bare/nowhere/rules.lua"
    site = load_site_text(yaml.safe_dump(data))
    files[MANIFEST] = manifest(files, site_rules=site.slurm.job_submit_script)
    write_files(files, src)
    r = deploy(cluster, tmp_path, inv, src=src, **quiet)
    assert r.returncode != 0
    assert f"loads the site's own rules from {tmp_path}/bare/nowhere/rules.lua, which ctl does not have" \
        in r.stdout, r.stdout[-3000:]
