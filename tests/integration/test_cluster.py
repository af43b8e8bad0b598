"""The demo site as a real cluster: nodes, jobs on the right hardware, accounting."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_gres, parse_tres
from tests.integration.conftest import ROOT, assert_nothing_left


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
        c.up(tiny, timeout=30, log=lambda *_: None)
        assert {d.name: c.pid(d) for d in c.daemons()} == first  # nothing restarted
        assert set(c.nodes()) == {"tcpu01", "tnpu01"}
        assert set(cluster.nodes()) != set(c.nodes())  # each answers for its own site
        jid = submit(c.runner, ["--gres=npu:2", "-o", "/dev/null"], "sleep 30")
        assert c.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%N"]).strip() in ("", "tnpu01")
    finally:
        stopped = c.down(log=lambda *_: None)
    assert "slurmctld" in stopped and "munged" in stopped and "mariadb" in stopped
    assert_nothing_left(c)
    assert cluster.is_up()  # the demo cluster was not touched


def test_bad_workdir_is_exit_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["cluster", "up", "--workdir", str(tmp_path / "with space")])
    assert r.exit_code == 2
    assert "--workdir" in r.output and "allowed characters" in r.output
