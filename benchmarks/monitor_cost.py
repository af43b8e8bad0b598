"""What monitoring costs: the node exporter on an 8-device fake node sampling every 1 s
(CPU % and RSS of the process, scrape time and size), and the cluster exporter's work per
round on 20,000 synthetic jobs and 1,000 nodes (parse squeue --json, reduce, format).

    python benchmarks/monitor_cost.py [--seconds 30] [--jobs 20000] [--nodes 1000]

With SLURM_CONF pointing at a running cluster, `--sdiag` also runs one cluster-exporter
round against it and prints how many RPCs slurmctld counted for it (sdiag's per-message
counters before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from slurm_hetero.devcluster.procs import free_ports, port_open, wait_until
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.monitor.cluster import ClusterExporter, SiteView, parse_queue, summarize
from slurm_hetero.site import load_site
from slurm_hetero.slurm.parse import parse_sinfo_nodes
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import parse_squeue_json

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "site" / "demo" / "site.yaml"
CAPTURED = ROOT / "tests" / "data" / "captured"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    m = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) / 1024 if m else float("nan")


def node_exporter_cost(seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-monitor-") as d:
        tmp = Path(d)
        FakeDevices.create(tmp / "fake.json", "gpu", 8, "h100", default_w=700, memory_mib=81920)
        node_dir = tmp / "agent" / "bench-01"
        node_dir.mkdir(parents=True)
        for job, idx in (("101", [0, 1, 2, 3]), ("102", [4, 5])):  # two jobs hold 6 of the 8
            (node_dir / f"job-{job}.json").write_text(json.dumps({
                "job": job, "user": "alice", "name": "x", "policy": "balanced",
                "devices": [{"kind": "gpu", "idx": i, "t": time.time(), "energy_j": 0.0} for i in idx]}))
        (tmp / "hetero-agent.json").write_text(json.dumps({
            "state_dir": str(tmp / "agent"), "history": str(tmp / "agent" / "history.jsonl"),
            "groups": [{"nodes": "bench-01", "devices": f"fake:{tmp}/fake.json"}],
            "policies": {}, "auto": {}}))
        (port,) = free_ports(1)
        env = {**os.environ, "SLURM_HETERO_AGENT": str(tmp / "hetero-agent.json")}
        t_start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "slurm_hetero.monitor", "node-exporter",
                                 "--node", "bench-01", "--port", str(port), "--listen", "127.0.0.1",
                                 "--every", "1"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not wait_until(lambda: port_open(port), 30, 0.02):
                raise SystemExit("node exporter did not start")
            startup = time.monotonic() - t_start
            time.sleep(3)  # past the imports and the first tier
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            scrapes: list[float] = []
            size = 0
            while time.monotonic() - t0 < seconds:
                s0 = time.perf_counter()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    size = len(r.read())
                scrapes.append(time.perf_counter() - s0)
                time.sleep(max(0.0, 10 - (time.perf_counter() - s0)) if seconds >= 20 else 1)
            c1, t1 = cpu_seconds(proc.pid), time.monotonic()
            print(f"node exporter, 8 fake devices, 1 s samples, scraped every {10 if seconds >= 20 else 1} s "
                  f"for {t1 - t0:.0f} s:")
            print(f"  CPU {100 * (c1 - c0) / (t1 - t0):.2f} %   RSS {rss_mib(proc.pid):.1f} MiB   "
                  f"start to listening {startup:.2f} s")
            print(f"  scrape: median {1000 * statistics.median(scrapes):.1f} ms, {size / 1024:.1f} KiB")
        finally:
            proc.terminate()
            proc.wait(10)


def synthetic_queue(jobs: int) -> str:
    """`jobs` jobs shaped like the captured 22.05 ones: running, pending and done, some with
    bridge decisions and predictions."""
    doc = json.loads((CAPTURED / "squeue-json-22.05.json").read_text())
    templates = doc["jobs"]
    out = []
    for i in range(jobs):
        j = dict(templates[i % len(templates)])
        j["job_id"] = 1000 + i
        if i % 3 == 0:
            j["admin_comment"] = json.dumps({"hetero": 1, "pool": "h100@x86_64", "model": "h100", "n": 1,
                                             "why": ("starts-now", "backlog", "static")[i // 3 % 3],
                                             "pred": {"p50": 600 + i % 900, "p90": 1800}})
        out.append(j)
    doc["jobs"] = out
    return json.dumps(doc)


def synthetic_sinfo(nodes: int) -> str:
    lines = (CAPTURED / "sinfo-22.05.txt").read_text().splitlines()
    states = ["idle", "mixed", "allocated", "drained", "down*"]
    out = []
    for i in range(nodes):
        f = lines[i % len(lines)].split("|")
        f[0] = f"{f[0]}-{i:04d}"
        f[1] = states[i % len(states)]
        out.append("|".join(f))
    return "\n".join(out) + "\n"


class Answers(Runner):
    def __init__(self, squeue: str, sinfo: str):
        super().__init__()
        self.answers = {"squeue": squeue, "sinfo": sinfo}

    def run(self, argv: Any, **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(argv), 0, self.answers[argv[0]], "")


def cluster_exporter_cost(jobs: int, nodes: int) -> None:
    site = load_site(DEMO)
    squeue, sinfo = synthetic_queue(jobs), synthetic_sinfo(nodes)
    view = SiteView.of(site)

    def best(fn: Any, n: int = 3) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    t_project = best(lambda: parse_squeue_json(squeue))
    t_parse = best(lambda: parse_queue(squeue))
    entries, _ = parse_queue(squeue)
    node_info = parse_sinfo_nodes(sinfo)
    t_sinfo = best(lambda: parse_sinfo_nodes(sinfo))
    t_reduce = best(lambda: summarize(view, entries, node_info, time.time()))
    exp = ClusterExporter(site, Answers(squeue, sinfo), None)
    t_round = best(exp.round)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exp)
    t_scrape = best(lambda: generate_latest(reg))
    print(f"cluster exporter, {jobs} jobs ({len(squeue) / 2**20:.0f} MiB of squeue --json), {nodes} nodes:")
    print(f"  parse squeue --json {1000 * t_parse:.0f} ms (the project's parse_squeue_json alone "
          f"{1000 * t_project:.0f} ms), sinfo {1000 * t_sinfo:.1f} ms, reduce {1000 * t_reduce:.0f} ms")
    print(f"  whole round without Slurm {1000 * t_round:.0f} ms; a scrape {1000 * t_scrape:.1f} ms "
          f"({len(generate_latest(reg)) / 1024:.1f} KiB)")


def rpc_counts(runner: Runner) -> dict[str, int]:
    text = runner.out(["sdiag"])
    part = text.split("Remote Procedure Call statistics by message type", 1)[-1]
    part = part.split("Remote Procedure Call statistics by user", 1)[0]
    rows = re.finditer(r"^\s*(\w+)\s+\(\s*\d+\) count:(\d+)", part, re.M)
    return {m.group(1): int(m.group(2)) for m in rows}


def sdiag_cost() -> None:
    runner = Runner()
    before = rpc_counts(runner)
    ClusterExporter(load_site(DEMO), runner, None).round()
    after = rpc_counts(runner)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    delta.pop("REQUEST_STATS_INFO", None)  # sdiag's own
    print(f"slurmctld RPCs for one cluster-exporter round: {sum(delta.values())} {delta}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--sdiag", action="store_true", help="also measure RPCs on the cluster of SLURM_CONF")
    a = ap.parse_args()
    node_exporter_cost(a.seconds)
    cluster_exporter_cost(a.jobs, a.nodes)
    if a.sdiag:
        sdiag_cost()


if __name__ == "__main__":
    main()
