"""How many series the node exporters give Prometheus in a day of 10,000 jobs: with the job
in a label of every device series (before) and with the job apart, in one info series per
held device (after: `hetero_device_job_info`, see monitor/node.py).

A day of jobs runs on a simulated cluster (default 64 nodes of 8 GPUs): Poisson arrivals,
1/2/4/8/16 GPUs per job (16: two whole nodes), log-normal run times (median 10 min) sized so
the GPUs are about 70% busy, first-fit placement in arrival order, skipping a job that does
not fit yet. Every node runs the real NodeExporter over fake devices; the simulation writes
and removes the node agent's own job records (job-<id>.json) as the prolog and epilog do,
and after every start and end on a node the exporter samples and is collected, as a
scrape would (the series only change at those instants). A series is (name, labels), as
Prometheus's head block counts them. "Before" relabels the same scrapes the way the old
exporter labelled them: every device series also carried the holder's `jobid` and `user`
(empty while free), and there was no job info or job id family.

    python benchmarks/monitor_cardinality.py [--jobs 10000] [--nodes 64] [--gpus 8] [--seed 1]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.monitor.node import NodeExporter

DAY_S = 86400.0
SIZES = [(1, 0.45), (2, 0.2), (4, 0.15), (8, 0.15), (16, 0.05)]  # GPUs per job, share of jobs
# What the prolog records, and the clock level it applies for each (README, "Energy policies").
LEVELS = {"": "default", "balanced": "default", "efficiency": "medium", "performance": "high"}
USERS = 300
# The families a device labels; the old exporter added jobid and user to each of them.
JOB_FAMILIES = ("hetero_device_job_info", "hetero_device_job_id")
Series = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(order=True)
class Job:
    submit: float
    id: int = field(compare=False)
    gpus: int = field(compare=False)
    run_s: float = field(compare=False)
    user: str = field(compare=False)
    policy: str = field(compare=False)
    placed: dict[str, list[int]] = field(default_factory=dict, compare=False)


def jobs_of_a_day(n: int, nodes: int, gpus: int, rng: random.Random, busy: float = 0.7) -> list[Job]:
    mean_gpus = sum(s * p for s, p in SIZES)
    # log-normal run time with sigma 1.2 has mean = median * e^0.72; size the median for `busy`.
    median = busy * nodes * gpus * DAY_S / (n * mean_gpus) / 2.054
    out = []
    for i in range(n):
        size = rng.choices([s for s, _ in SIZES], [p for _, p in SIZES])[0]
        run_s = min(DAY_S / 2, max(30.0, rng.lognormvariate(0, 1.2) * median))
        out.append(Job(rng.uniform(0, DAY_S), 1000 + i, min(size, nodes * gpus), run_s,
                       f"user{rng.randrange(USERS):03d}", rng.choice(list(LEVELS))))
    return sorted(out)


def place(job: Job, free: dict[str, list[int]], gpus: int) -> dict[str, list[int]] | None:
    """First fit: one node for up to a node's GPUs, whole nodes beyond."""
    if job.gpus <= gpus:
        for node, idle in free.items():
            if len(idle) >= job.gpus:
                return {node: idle[:job.gpus]}
        return None
    whole = [n for n, idle in free.items() if len(idle) == gpus][: -(-job.gpus // gpus)]
    return {n: list(free[n]) for n in whole} if len(whole) * gpus >= job.gpus else None


class Node:
    def __init__(self, name: str, folder: Path, gpus: int):
        fake = folder / f"{name}.json"
        FakeDevices.create(fake, "gpu", gpus, "h100", default_w=700, load=0.5, memory_mib=81920)
        self.fake = FakeDevices(fake)
        self.dir = folder / "agent" / name
        self.dir.mkdir(parents=True)
        self.now = 0.0
        # A window shorter than any gap: each sample's 10 s tier holds the jobs of that sample.
        self.exp = NodeExporter(node=name, arch="x86_64", dev=open_devices(f"fake:{fake}"), node_dir=self.dir,
                                persist=False, tier_s=1e-6, clock=lambda: self.now)

    def hold(self, job: Job, devices: list[int], t: float) -> None:
        record = {"job": str(job.id), "user": job.user, "policy": job.policy,
                  "devices": [{"kind": "gpu", "idx": i, "t": t, "energy_j": 0.0} for i in devices]}
        (self.dir / f"job-{job.id}.json").write_text(json.dumps(record))
        for i in devices:
            self.fake.set_gpu_clock_level(i, LEVELS[job.policy])

    def release(self, job: Job, devices: list[int]) -> None:
        (self.dir / f"job-{job.id}.json").unlink()
        for i in devices:
            self.fake.reset(i)

    def scrape(self, t: float) -> Iterator[tuple[str, dict[str, str]]]:
        self.now = t
        self.exp.sample()
        for fam in self.exp.collect():
            for s in fam.samples:
                yield s.name, dict(s.labels)


def old_labels(series: list[tuple[str, dict[str, str]]]) -> Iterator[tuple[str, dict[str, str]]]:
    """The same scrape as the old exporter labelled it: the holder's jobid and user on every
    device series, and its energy policy on the clock level's."""
    held = {(lb["node"], lb["kind"], lb["index"]): lb for name, lb in series
            if name == "hetero_device_job_info"}
    for name, lb in series:
        if name in JOB_FAMILIES:
            continue
        if name.startswith("hetero_device_"):
            h = held.get((lb["node"], lb["kind"], lb["index"]), {})
            lb = {**lb, "jobid": h.get("jobid", ""), "user": h.get("user", "")}
            if name == "hetero_device_clock_policy_info":
                lb["policy"] = h.get("policy", "")
        yield name, lb


def key(name: str, labels: dict[str, str]) -> Series:
    return name, tuple(sorted(labels.items()))


def simulate(n_jobs: int, n_nodes: int, gpus: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    folder = Path(tempfile.mkdtemp(prefix="hetero-cardinality-"))
    try:
        nodes = {f"g{i:03d}": Node(f"g{i:03d}", folder, gpus) for i in range(n_nodes)}
        free = {name: list(range(gpus)) for name in nodes}
        jobs = jobs_of_a_day(n_jobs, n_nodes, gpus, rng)
        events: list[tuple[float, int, int, Job]] = [(j.submit, 1, j.id, j) for j in jobs]  # 0 end, 1 submit
        heapq.heapify(events)
        waiting: list[Job] = []
        before: set[Series] = set()
        after: set[Series] = set()
        started = held_devices = 0

        def scrape(name: str, t: float) -> None:
            series = list(nodes[name].scrape(t))
            after.update(key(*s) for s in series)
            before.update(key(*s) for s in old_labels(series))

        for name in nodes:  # every node is scraped all day, busy or not
            scrape(name, 0.0)

        while events:
            t, kind, _, job = heapq.heappop(events)
            if t > DAY_S:
                break
            touched: set[str] = set()
            if kind == 0:
                for name, devs in job.placed.items():
                    nodes[name].release(job, devs)
                    free[name] = sorted(free[name] + devs)
                    touched.add(name)
            else:
                waiting.append(job)
            for w in list(waiting):  # first fit in arrival order; a job that does not fit waits
                where = place(w, free, gpus)
                if where is None:
                    continue
                waiting.remove(w)
                w.placed = where
                for name, devs in where.items():
                    free[name] = [d for d in free[name] if d not in devs]
                    nodes[name].hold(w, devs, t)
                    touched.add(name)
                    held_devices += len(devs)
                started += 1
                heapq.heappush(events, (t + w.run_s, 0, w.id, w))
            for name in sorted(touched):
                scrape(name, t)
        return {"jobs_submitted": len(jobs), "jobs_started": started, "device_holds": held_devices,
                "still_waiting": len(waiting), "before": before, "after": after}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def by_family(series: set[Series]) -> Counter[str]:
    out: Counter[str] = Counter()
    for name, _ in series:
        out[name.removesuffix("_total")] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs submitted in the day")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="the figures as JSON")
    a = ap.parse_args()
    if a.jobs < 1 or a.nodes < 1 or not 1 <= a.gpus <= 64:
        print("--jobs and --nodes: at least 1; --gpus: 1 to 64", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    r = simulate(a.jobs, a.nodes, a.gpus, a.seed)
    before, after = r["before"], r["after"]
    assert isinstance(before, set) and isinstance(after, set)
    fb, fa = by_family(before), by_family(after)
    devices = a.nodes * a.gpus
    device_fams = sorted(n for n in set(fb) | set(fa) if n.startswith("hetero_device_"))
    other = sorted(n for n in set(fb) | set(fa) if not n.startswith("hetero_device_"))
    per_job = sum(fa[n] for n in other if n.startswith("hetero_job_"))
    run = {k: v for k, v in r.items() if k not in ("before", "after")}
    figures = {"nodes": a.nodes, "devices": devices, **run,
               "series_before": len(before), "series_after": len(after),
               "device_series_before": sum(fb[n] for n in device_fams),
               "device_series_after": sum(fa[n] for n in device_fams if n not in JOB_FAMILIES),
               "job_info_series": fa["hetero_device_job_info"], "per_job_family_series": per_job,
               "families": {n: [fb[n], fa[n]] for n in [*device_fams, *other]},
               "seconds": round(time.monotonic() - t0, 1)}
    if a.json:
        print(json.dumps(figures, indent=1))
        return 0
    print(f"{a.nodes} nodes x {a.gpus} GPUs = {devices} devices; {r['jobs_submitted']} jobs submitted "
          f"in 24 h, {r['jobs_started']} started ({r['device_holds']} device holds), "
          f"{r['still_waiting']} still waiting")
    print(f"\n{'family':45s} {'before':>9s} {'after':>9s}")
    for n in [*device_fams, *other]:
        print(f"{n:45s} {fb[n]:9d} {fa[n]:9d}")
    print(f"\n{'distinct series in the day':45s} {len(before):9d} {len(after):9d}   "
          f"({len(before) / len(after):.1f}x fewer after)")
    dev_b, dev_a = figures["device_series_before"], figures["device_series_after"]
    assert isinstance(dev_a, int)
    print(f"{'  per-device families':45s} {dev_b:9d} {dev_a:9d}"
          f"   (after: {dev_a / devices:.1f} per device, whatever the jobs)")
    print(f"{'  hetero_device_job_info (one per hold)':45s} {0:9d} {figures['job_info_series']:9d}")
    print(f"{'  per-job families (10 s tier, unchanged)':45s} {per_job:9d} {per_job:9d}")
    print(f"({figures['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
