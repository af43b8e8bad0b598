"""The demo site as a real cluster: nodes, jobs on the right hardware, accounting."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import alive, read_pid, wait_until
from slurm_hetero.devcluster.supervise import Backoff, Supervisor
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_gres, parse_tres
from tests.integration.conftest import ROOT, assert_nothing_left

pytestmark = pytest.mark.integration


def test_every_node_idle_with_declared_resources(cluster: Cluster, demo_site: Site) -> None:
    # Jobs of earlier tests may still be completing (their epilogs run): let them finish.
    assert wait_until(lambda: {n.state for n in cluster.nodes().values()} == {"idle"}, 60)
    nodes = cluster.nodes()
    assert set(nodes) == set(demo_site.all_nodes)
    for g in demo_site.node_groups:
        declared = parse_gres(g.gres)
        for name in g.nodes:
            n = nodes[name]
            assert n.state == "idle", (name, n.state, n.reason)
            assert (n.cpus, n.memory_mib) == (g.cpus, g.memory_mib)
            assert n.features == g.features
            assert set(n.partitions) == set(g.partitions)
            # Slurm reports shards with the GPU type they slice (shard:v100:16).
            got = {k.replace(f"shard:{a.model.gres_type}", "shard"): v
                   for k, v in parse_gres(n.gres).items() for a in g.accelerators[:1]}
            assert got == declared, name


@pytest.mark.parametrize(("options", "group", "gres"), [
    (["--gres=npu:1", "-C", "aarch64"], "npu-[01-02]", "gres/npu:910b"),
    (["--gres=gpu:h100:1"], "h100-01", "gres/gpu:h100"),
    (["-c", "32"], None, None),
    (["--gres=shard:2"], "v100-01", "gres/shard"),
])
def test_job_lands_on_matching_hardware(cluster: Cluster, demo_site: Site, options: list[str],
                                        group: str | None, gres: str | None) -> None:
    jid = submit(cluster.runner, [*options, "-o", "/dev/null"], "true")
    wait_done(cluster.runner, [jid], timeout=60)
    row = sacct_jobs(cluster.runner, [jid])[jid]
    assert row["State"] == "COMPLETED", row
    groups = {n: g for g in demo_site.node_groups for n in g.nodes}
    g = groups[row["NodeList"]]
    tres = parse_tres(row["AllocTRES"])
    if group:
        assert g.names == group
        assert gres is not None and int(tres[gres]) >= 1, row["AllocTRES"]
    else:  # a CPU-only job goes to a CPU-only node (lowest Weight) and gets its 32 CPUs
        assert g.resource_type == "CPU" and tres["cpu"] == "32"
    assert float(tres["billing"]) > 0


def test_billing_charges_normalized_units(cluster: Cluster, demo_site: Site) -> None:
    """One H100 costs its normalized units times billing.unit, on top of CPU and memory."""
    jid = submit(cluster.runner, ["--gres=gpu:h100:1", "-c", "1", "--mem=1G", "-o", "/dev/null"], "true")
    wait_done(cluster.runner, [jid])
    tres = parse_tres(sacct_jobs(cluster.runner, [jid])[jid]["AllocTRES"])
    h100 = demo_site.catalog["h100"]
    b = demo_site.billing
    # cpu=2: the H100 node has 2 threads per core and Slurm allocates whole cores.
    assert (tres["cpu"], tres["mem"]) == ("2", "1G")
    expected = h100.units * b.unit + 2 * b.cpu + 1 * b.mem_per_gb
    assert int(tres["billing"]) == int(expected) == 41


def test_qos_tiers_registered(cluster: Cluster, demo_site: Site) -> None:
    out = cluster.runner.out(["sacctmgr", "-n", "-P", "show", "qos", "format=name,priority,preempt"])
    rows = {r.split("|")[0]: r.split("|")[1:] for r in out.split()}
    for q in demo_site.qos:
        assert rows[q.name][0] == str(q.priority)
        assert sorted(filter(None, rows[q.name][1].split(","))) == sorted(q.preempt)
    jid = submit(cluster.runner, ["--qos=diamond", "-o", "/dev/null"], "true")
    wait_done(cluster.runner, [jid])
    assert sacct_jobs(cluster.runner, [jid])[jid]["QOS"] == "diamond"


def test_status_and_logs_commands(cluster: Cluster) -> None:
    r = CliRunner().invoke(main, ["cluster", "status", "--workdir", str(cluster.workdir)])
    assert r.exit_code == 0, r.output
    assert "slurmctld" in r.output and "npu-02" in r.output and "stopped" not in r.output
    r = CliRunner().invoke(main, ["cluster", "logs", "--workdir", str(cluster.workdir), "-n", "2"])
    assert r.exit_code == 0, r.output
    assert "slurmctld.log" in r.output


def test_second_cluster_up_twice_then_down(cluster: Cluster, tmp_path: Path) -> None:
    """A second cluster runs beside the demo one; `up` twice is safe; `down` leaves nothing."""
    tiny = load_site(ROOT / "tests" / "data" / "sites" / "tiny.yaml")
    c = Cluster(tmp_path / "tiny")
    try:
        c.up(tiny, timeout=90)
        first = {d.name: c.pid(d) for d in c.daemons()}
        said: list[str] = []
        c.up(tiny, timeout=30, log=said.append)
        assert {d.name: c.pid(d) for d in c.daemons()} == first, said  # nothing restarted
        assert set(c.nodes()) == {"tcpu01", "tnpu01"}
        assert set(cluster.nodes()) != set(c.nodes())  # each answers for its own site
        jid = submit(c.runner, ["--gres=npu:2", "-o", "/dev/null"], "sleep 30")
        assert c.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%N"]).strip() in ("", "tnpu01")
    finally:
        stopped = c.down(log=lambda *_: None)
    assert "slurmctld" in stopped and "munged" in stopped and "mariadb" in stopped
    assert "bridge supervisor" in stopped
    assert_nothing_left(c)
    assert cluster.is_up()  # the demo cluster was not touched


def test_bad_workdir_is_exit_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["cluster", "up", "--workdir", str(tmp_path / "with space")])
    assert r.exit_code == 2
    assert "--workdir" in r.output and "allowed characters" in r.output


# ---- the private MariaDB: root's alone, no TCP ------------------------------------------------

def listening_tcp_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        inodes |= {r.split()[9] for r in rows if r.split()[3] == "0A"}  # state LISTEN
    return inodes


def socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[len("socket:["):-1])
    return out


def sql(cluster: Cluster, statement: str, user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    client = shutil.which("mariadb") or "mysql"
    # --skip-ssl: as Cluster._sql (MariaDB 11.4+'s client demands TLS a 10.11 server lacks).
    return subprocess.run([*(user or []), client, "--no-defaults", "--skip-ssl", f"--socket={cluster.db_socket}",
                           "-u", "root",
                           "-N", "-B", "-e", statement], capture_output=True, text=True, timeout=30, check=False)


def test_mariadb_has_no_tcp_port_and_only_root_gets_in(cluster: Cluster) -> None:
    pid = cluster.pid(next(d for d in cluster.daemons() if d.name == "mariadb"))
    assert pid is not None
    assert socket_inodes(pid) & listening_tcp_inodes() == set()  # no TCP port at all
    st = cluster.db.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, 0)  # the socket's folder: root's
    conf = (cluster.etc / "slurmdbd.conf").read_text()
    assert "StorageHost=localhost" in conf and "StoragePort" not in conf and "StoragePass" not in conf
    assert stat.S_IMODE((cluster.etc / "slurmdbd.conf").stat().st_mode) == 0o600
    # Root (slurmdbd) gets in through the socket; the accounts are root@localhost by uid only.
    r = sql(cluster, "SELECT User, Host FROM mysql.user WHERE User <> 'mariadb.sys' AND Host <> ''")
    assert (r.returncode, r.stdout) == (0, "root\tlocalhost\n"), r.stderr
    r = sql(cluster, "SHOW GRANTS FOR 'root'@'localhost'")
    assert "unix_socket" in r.stdout and "mysql_native_password" not in r.stdout, r.stdout
    assert sql(cluster, "SHOW DATABASES").stdout.split().count("slurm_acct_db") == 1


def test_mariadb_refuses_other_local_users(cluster: Cluster) -> None:
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux)")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    r = sql(cluster, "SELECT 1", nobody)
    assert r.returncode != 0 and "(13)" in r.stderr, (r.stdout, r.stderr)  # EACCES: root's folder
    # Even with every folder on the way open, root's account takes the caller's uid, not a
    # password, and there is no anonymous account.
    opened = [p for p in [cluster.db, *cluster.db.parents] if not p.stat().st_mode & 0o001]
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in opened}
    try:
        for p, m in modes.items():
            os.chmod(p, m | 0o001)
        r = sql(cluster, "SELECT 1", nobody)
        anonymous = subprocess.run([*nobody, shutil.which("mariadb") or "mysql", "--no-defaults", "--skip-ssl",
                                    f"--socket={cluster.db_socket}", "-u", "", "-e", "SELECT 1"],
                                   capture_output=True, text=True, timeout=30, check=False)
    finally:
        for p, m in modes.items():
            os.chmod(p, m)
    assert r.returncode != 0 and "Access denied for user 'root'@'localhost'" in r.stderr, (r.stdout, r.stderr)
    assert anonymous.returncode != 0 and "Access denied" in anonymous.stderr, anonymous.stderr


# ---- the bridge daemon stays up --------------------------------------------------------------

def test_bridge_daemon_is_restarted(cluster: Cluster) -> None:
    bridge = next(d for d in cluster.daemons() if d.name == "bridge")
    first = cluster.pid(bridge)
    assert first is not None
    log_before = bridge.log.read_text()
    os.kill(first, signal.SIGKILL)
    assert wait_until(lambda: cluster.pid(bridge) not in (None, first), 30)
    new_lines = bridge.log.read_text()[len(log_before):]
    assert "supervise bridge: killed by signal 9 after" in new_lines and "restart" in new_lines, new_lines
    snap = cluster.state / "hetero-snapshot.lua"
    t0 = snap.stat().st_mtime
    assert wait_until(lambda: snap.stat().st_mtime > t0, 20)  # heartbeat again
    assert cluster.is_up()


def test_supervisor_backoff() -> None:
    b = Backoff(first=1, factor=2, most=30, stable=60)
    pauses: list[float] = []
    pause = None
    for _ in range(7):
        pause = b.next(pause, ran_s=0.5)
        pauses.append(pause)
    assert pauses == [1, 2, 4, 8, 16, 30, 30]
    assert b.next(30, ran_s=61) == 1  # a healthy run starts the count again


def test_supervisor_restarts_and_logs_each_restart() -> None:
    lines: list[str] = []
    sup = Supervisor("t", ["sh", "-c", "exit 3"], log=lines.append, backoff=Backoff(first=0.01, most=0.04))
    t0 = time.monotonic()
    assert sup.run(max_starts=4) == 0
    assert sup.starts == 4 and time.monotonic() - t0 < 10
    assert [ln.split(" ", 1)[1].split(" after")[0] for ln in lines] == ["supervise t: exited with status 3"] * 4
    assert [ln.rsplit("; ", 1)[1] for ln in lines] == [
        "restart 1 in 0.01 s", "restart 2 in 0.02 s", "restart 3 in 0.04 s", "not restarted (4 starts)"]
    lines.clear()
    Supervisor("t", ["/nonexistent/cmd"], log=lines.append, backoff=Backoff(first=0.01)).run(max_starts=2)
    assert "cannot start /nonexistent/cmd" in lines[0] and "could not start" in lines[1]


def test_supervisor_stops_with_its_child(tmp_path: Path) -> None:
    pidfile, child_pid = tmp_path / "sup.pid", tmp_path / "child.pid"
    proc = subprocess.Popen([sys.executable, "-m", "slurm_hetero.devcluster.supervise", "--name", "sleeper",
                             "--pidfile", str(pidfile), "--first", "0.05", "--",
                             "sh", "-c", f"echo $$ > {child_pid}; exec sleep 300"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_until(lambda: read_pid(child_pid) is not None and read_pid(pidfile) == proc.pid, 20)
        first = read_pid(child_pid)
        assert first is not None
        os.kill(first, signal.SIGKILL)  # dies: a new one comes
        assert wait_until(lambda: read_pid(child_pid) not in (None, first) and alive(read_pid(child_pid)), 20)
        second = read_pid(child_pid)
        proc.send_signal(signal.SIGTERM)  # the supervisor stops: its child goes with it
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not alive(second) and not pidfile.exists()
    out = proc.stdout.read() if proc.stdout else ""
    assert out.count("supervise sleeper: killed by signal 9") == 1, out
