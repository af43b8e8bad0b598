"""The exporters on the real dev cluster, scraped by a real Prometheus (Debian's package).

The dev cluster starts a node exporter for every node and the cluster exporter
(`Cluster.start_exporters`, `cluster up --exporters`); Prometheus scrapes a GPU node's, an
NPU node's and the cluster's with what `conf render` writes for it (short intervals): the
scrape jobs pasted into its own configuration as an admin of Prometheus 2.42 does, their
file_sd target lists and the rules. A GPU and an NPU job run: each of their devices must have
one `hetero_device_job_info` series with the job's id, which joins its device series, as
Prometheus stored them. Fragmentation and queue time: with 1 A100 free on each A100 node and a 2-A100 job
waiting, both free devices are fragmented, as Prometheus stored it and as a brute-force
recount from `sinfo --json` says; when the job starts, its wait is observed once. Then the
bridge daemon is stopped: the heartbeat alert must fire.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import free_ports, port_open, wait_until
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.monitor.render import PrometheusSettings, render_scrape
from slurm_hetero.site import Site
from slurm_hetero.slurm.jobs import submit
from tests.integration.test_energy import devices_of
from tests.unit.test_monitor_queue import bench

pytestmark = pytest.mark.integration

GPU_NODE, NPU_NODE = "h100-01", "npu-01"
A100 = "a100-80gb@x86_64"


class Prom:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=5) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, q: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("/api/v1/query", query=q)["result"]
        return result

    def wait(self, q: str, check: Any, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                res = self.query(q)
            except OSError:
                res = []
            if check(res):
                return res
            assert time.monotonic() < deadline, f"{q}: {res}"
            time.sleep(1)


def has_series(n: int) -> Any:
    return lambda r: len(r) == n


def has_values(values: list[float]) -> Any:
    return lambda r: [float(x["value"][1]) for x in r] == values


@pytest.fixture(scope="module")
def monitoring(cluster: Cluster, demo_site: Site, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    if shutil.which("prometheus") is None:
        pytest.fail("Debian's prometheus package is not installed (apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("monitor")
    # The dev cluster starts an exporter for every node and the cluster exporter (fast here).
    ports = cluster.start_exporters(demo_site, every=1, tier_s=2, cluster_every=2, sacct_every=0)
    assert set(ports) == {*cluster.info()["nodes"], "cluster"}
    gpu_port, npu_port, cluster_port = ports[GPU_NODE], ports[NPU_NODE], ports["cluster"]
    (prom_port,) = free_ports(1)
    env = cluster.runner.env()
    argvs: list[list[str]] = []
    settings = PrometheusSettings(
        node_targets=[f"127.0.0.1:{gpu_port}", f"127.0.0.1:{npu_port}"],
        cluster_targets=[f"127.0.0.1:{cluster_port}"], node_sd_file="hetero-node-targets.json",
        cluster_sd_file="hetero-cluster-targets.json", node_scrape_s=1, cluster_scrape_s=1, cluster_every_s=2,
        fast_rules_s=1, slow_rules_s=2, alert_for_s=1, heartbeat_lost_s=6, snapshot_stale_s=10)
    files = render_scrape(settings)
    assert sorted(files) == ["hetero-cluster-targets.json", "hetero-node-targets.json", "hetero-rules.yml",
                             "hetero-scrape.yml"]
    for name, text in files.items():
        (tmp / name).write_text(text)
    own = {"global": {"scrape_interval": "15s", "evaluation_interval": "1s"}, "rule_files": ["hetero-rules.yml"],
           "scrape_configs": yaml.safe_load(files["hetero-scrape.yml"])["scrape_configs"]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(own))
    argvs.append(["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                  f"--web.listen-address=127.0.0.1:{prom_port}"])
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i, argv in enumerate(argvs):
            log = open(tmp / f"proc-{i}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(log)
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
        for port in (prom_port,):
            assert wait_until(functools.partial(port_open, port), 30), \
                f"port {port} not open:\n" + "\n".join(p.read_text()[-2000:] for p in sorted(tmp.glob("proc-*.log")))
        prom = Prom(prom_port)
        # every target scraped once
        prom.wait('up{job=~"hetero-.*"}', lambda r: len(r) == 3 and all(x["value"][1] == "1" for x in r))
        yield prom
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
        cluster.stop_exporters()


def held_by(jid: int, q: str = "hetero_device_power_watts", *labels: str) -> str:
    """`q` on the devices job `jid` holds, with its id and user: the info series' join."""
    extra = ", ".join(["jobid", "user", *labels])
    return f'{q} * on (node, kind, index) group_left ({extra}) hetero_device_job_info{{jobid="{jid}"}}'


def test_running_jobs_series_carry_their_job_id(cluster: Cluster, monitoring: Prom) -> None:
    gpu = submit(cluster.runner, ["--accel=h100:2", "--energy=efficiency", "-o", "/dev/null"], "sleep 40")
    npu = submit(cluster.runner, ["--accel=cann:2", "-w", NPU_NODE, "-o", "/dev/null"], "sleep 40")
    try:
        for jid, node, kind, arch in ((gpu, GPU_NODE, "gpu", "x86_64"), (npu, NPU_NODE, "npu", "aarch64")):
            got_node, _, idx = devices_of(cluster, jid)
            assert got_node == node
            res = monitoring.wait(held_by(jid, "hetero_device_power_watts", "policy"), has_series(len(idx)))
            assert sorted(int(r["metric"]["index"]) for r in res) == sorted(idx)
            for r in res:
                m = r["metric"]
                assert (m["node"], m["kind"], m["arch"], m["user"], m["job"], m["jobid"]) == \
                    (node, kind, arch, "root", "hetero-node", str(jid))
                assert float(r["value"][1]) > 0
            if kind == "gpu":  # the policy its prolog applied, on the same info series
                assert {r["metric"]["policy"] for r in res} == {"efficiency"}
            # The device series themselves carry no job: one series per device, whoever holds it.
            stored = monitoring.query(f'hetero_device_power_watts{{node="{node}", index="{idx[0]}"}}')
            assert len(stored) == 1 and "jobid" not in stored[0]["metric"], stored
            held = monitoring.query(f'hetero_device_job_id{{node="{node}"}} == {jid}')
            assert sorted(int(r["metric"]["index"]) for r in held) == sorted(idx)
            # the 10 s tier (2 s here) and its recording rule see the job too
            monitoring.wait(f'hetero_job_devices{{jobid="{jid}"}}', has_values([len(idx)]))
            monitoring.wait(f'hetero:job_power_watts:sum{{jobid="{jid}"}}',
                            lambda r: len(r) == 1 and float(r[0]["value"][1]) > 0)
        # devices no job holds have no info series
        free = monitoring.query(f'hetero_device_power_watts{{node="{GPU_NODE}"}} unless on (node, kind, index) '
                                "hetero_device_job_info")
        assert len(free) == 8 - 2
        # what the agent applied to the GPU job's devices (the fake's state) is what Prometheus has
        _, _, idx = devices_of(cluster, gpu)
        fake = FakeDevices(cluster.dev / GPU_NODE / "fake-devices.json")
        for i in idx:
            state = fake.state(i)
            res = monitoring.query(f'hetero_device_power_limit_watts{{node="{GPU_NODE}", index="{i}"}}')
            assert [float(r["value"][1]) for r in res] == [state["limit_w"]]
            changed = state["limit_w"] != state["default_w"] or state["clock_level"] != "default"
            res = monitoring.query(held_by(gpu, f'hetero_device_non_default{{node="{GPU_NODE}", index="{i}"}}'))
            assert [(r["metric"]["jobid"], float(r["value"][1])) for r in res] == [(str(gpu), float(changed))]
        # the cluster exporter counts both jobs as running in their pools
        pools = monitoring.wait('hetero_jobs{state="running"}',
                                lambda r: {x["metric"]["pool"] for x in r} >= {"h100@x86_64", "ascend-910b@aarch64"})
        assert pools
    finally:
        cluster.runner.run(["scancel", str(gpu), str(npu)], check=False)


def _squeue(cluster: Cluster) -> dict[int, dict[str, Any]]:
    return {j["job_id"]: j for j in json.loads(cluster.runner.out(["squeue", "--json"]))["jobs"]}


def _value(monitoring: Prom, q: str) -> float:
    res = monitoring.query(q)
    return float(res[0]["value"][1]) if res else 0.0


def test_fragmentation_and_wait_of_the_a100_pool(cluster: Cluster, demo_site: Site, monitoring: Prom) -> None:
    runner = cluster.runner
    opts = ["-p", "gpu", "-t", "5", "-o", "/dev/null"]
    holders = [submit(runner, [*opts, "-w", node, "--gres=gpu:a100-80gb:3"], "sleep 300")
               for node in ("a100-01", "a100-02")]
    waiting = None
    try:
        assert wait_until(lambda: all(_squeue(cluster)[j]["job_state"] == "RUNNING" for j in holders), 30)
        waiting = submit(runner, [*opts, "--gres=gpu:a100-80gb:2"], "sleep 1")
        # 1 A100 free on each node, the waiting job needs 2 on one: both are fragmented
        for q, want in ((f'hetero_pool_fragmented_devices{{pool="{A100}"}}', 2.0),
                        (f'hetero_pool_free_devices{{pool="{A100}"}}', 2.0),
                        (f'hetero_pool_fragmentation_ratio{{pool="{A100}"}}', 1.0),
                        (f'hetero_pool_smallest_waiting_request_devices{{pool="{A100}"}}', 2.0),
                        (f'sum(hetero_pending_jobs{{pool="{A100}"}})', 1.0)):
            monitoring.wait(q, has_values([want]))
        # the exporter's whole answer against the benchmark's recount from sinfo --json
        url = f"http://127.0.0.1:{cluster.info()['exporters']['cluster']}/metrics"

        def agrees() -> bool:
            with urllib.request.urlopen(url, timeout=5) as r:
                figures, _ = bench().exporter_figures(r.read().decode())
            brute = bench().brute_force(demo_site, runner.out(["sinfo", "--json"]), runner.out(["squeue", "--json"]))
            assert brute[A100] == (2, 2), brute
            return all(d["fragmented"] == d["free"] == 0 for d in bench().compare(figures, brute).values())

        assert wait_until(agrees, 20, 1.0)
        # the holders' starts were counted; the waiting job's start adds its wait, once
        count_q = f'sum(hetero_job_wait_seconds_count{{pool="{A100}"}})'
        sum_q = f'sum(hetero_job_wait_seconds_sum{{pool="{A100}"}})'
        monitoring.wait(count_q, lambda r: len(r) == 1 and float(r[0]["value"][1]) >= 2)
        count, total = _value(monitoring, count_q), _value(monitoring, sum_q)
        runner.run(["scancel", str(holders[0])], check=False)
        assert wait_until(lambda: _squeue(cluster)[waiting]["job_state"] in ("RUNNING", "COMPLETED"), 60, 0.5)
        job = _squeue(cluster)[waiting]
        wait = job["start_time"] - (job["eligible_time"] or job["submit_time"])
        monitoring.wait(count_q, has_values([count + 1]))
        assert _value(monitoring, sum_q) == pytest.approx(total + wait)
        monitoring.wait(f'hetero_pool_fragmented_devices{{pool="{A100}"}}', has_values([0.0]))
    finally:
        runner.run(["scancel", *map(str, holders), *([str(waiting)] if waiting else [])], check=False)


def test_alert_fires_when_the_bridge_daemon_stops(cluster: Cluster, demo_site: Site, monitoring: Prom) -> None:
    def firing(name: str) -> bool:
        alerts = monitoring.get("/api/v1/alerts")["alerts"]
        return any(a["labels"]["alertname"] == name and a["state"] == "firing" for a in alerts)

    assert wait_until(lambda: monitoring.query("hetero_bridge_snapshot_up == 1") != [], 20)
    assert not firing("HeteroBridgeHeartbeatLost")
    cluster.stop_bridge()
    try:
        assert wait_until(lambda: firing("HeteroBridgeHeartbeatLost"), 60, 1.0), \
            monitoring.get("/api/v1/alerts")
    finally:
        cluster.start_bridge(demo_site)
    assert wait_until(lambda: not firing("HeteroBridgeHeartbeatLost"), 60, 1.0)
