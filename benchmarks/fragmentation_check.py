"""Does the cluster exporter's fragmentation gauge say what the cluster holds? At random
instants, scrape the exporter and recount every pool's fragmented devices by brute force
from Slurm's structured answers, then print the largest differences.

    SLURM_CONF=/etc/slurm/slurm.conf python benchmarks/fragmentation_check.py \\
        --site site.yaml --metrics http://ctl:9411/metrics [--samples 30] [--max-gap 60] \\
        [--seed 37] [--json benchmarks/results/fragmentation_check.json]

Or, self-contained (as root; boots the demo site's dev cluster with its exporters, drives a
seeded fragmenting workload through sbatch, samples, tears the cluster down):

    nice -n 19 .venv/bin/python benchmarks/fragmentation_check.py --boot \
        --workdir /var/tmp/frag-busy --minutes 12 --samples 40 \
        --json benchmarks/results/fragmentation-check-busy.json

The workload keeps `--pending` jobs waiting per model of 2+ devices a node (A100, H100,
V100, Ascend): 1/2/3/4/8 devices on one node, a quarter of them the whole node, runs of
10-120 s with limits a minute or two above, so pieces of nodes lie free while jobs wait.

The recount shares the definition (monitor/fragmentation.py) but none of the exporter's
code or inputs: the exporter reads `sinfo -O ...GresUsed` and counts per node, this reads
`sinfo --json` (22.05 has no `scontrol show node --json`; `scontrol show node -d` is
Key=Value text an admin's node Reason could imitate), enumerates each device index in
use and asks, for every free device, whether any waiting job of `squeue --json` fits its
node. The exporter's figures lag by up to its fast tier (10 s, free devices) and its round
(60 s, the queue), so a busy cluster shows differences that are staleness, not error: each
sample prints the age of the exporter's figures beside the difference, and a difference
counts as staleness only when readings taken (every second) within 3 s of the exporter's
own reads recount to its figures exactly, in every pool; else it is "unexplained".
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import re
import shlex
import signal
import sys
import threading
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from slurm_hetero.site import load_site
from slurm_hetero.site.model import Site
from slurm_hetero.site.pools import pools
from slurm_hetero.slurm.commands import sbatch_script_argv
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import squeue_json_argv

DEMO = Path(__file__).resolve().parents[1] / "site" / "demo" / "site.yaml"

SINFO_JSON_ARGV = ["sinfo", "--json"]
# Which nodes can run jobs, as the exporter reads sinfo's long state (cluster.node_state):
# powered down or powering up/down still counts (Slurm wakes it), drained or failing not.
RUNNING_STATES = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
UNUSABLE_FLAGS = {"DRAIN", "POWER_DRAIN", "MAINTENANCE", "NOT_RESPONDING", "FAIL", "DOWN", "FUTURE",
                  "UNKNOWN", "ERROR", "PLANNED", "REBOOT_ISSUED", "INVALID_REG"}
WAITING = {"Resources", "Priority", "None", ""}
_ITEM = re.compile(r"([A-Za-z0-9_.-]+)(?::([A-Za-z0-9_.-]+))?:(\d+)(?:\((.*)\))?")
ARCHES = ("x86_64", "aarch64")
HISTORY_S = 150.0  # readings kept: a round (60 s) and its fast tier, with room
STALE_SLACK_S = 3.0  # a reading this close to an exporter's read may show what it saw
ROUND_READ_S = 10.0  # a round reads squeue at most this long before it ends
WHOLE_NODE_SHARE = 0.25  # of the workload's jobs: they wait while pieces lie free
DRIVE_EVERY_S = 3.0


# ---- the recount (pure) ------------------------------------------------------------------------

def _items(text: str) -> Iterable[tuple[str, str, int, str]]:
    """(name, type, count, detail) of `gpu:h100:2(IDX:0-1),npu:0,shard:v100:16`."""
    for item in re.split(r",(?![^(]*\))", text or ""):
        m = _ITEM.fullmatch(item.strip())
        if m:
            yield m.group(1), m.group(2) or "", int(m.group(3)), m.group(4) or ""


def _indices(detail: str, count: int) -> set[int]:
    """The device indices of `IDX:0-2,5` (a GRES with no files has none: its first `count`)."""
    m = re.search(r"IDX:([0-9,-]+)", detail)
    if not m:
        return set(range(count))
    out: set[int] = set()
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _words(v: Any) -> list[str]:
    if isinstance(v, list):
        return [str(x) for x in v]
    return re.split(r"[^\w.-]+", v) if isinstance(v, str) else []


def node_usable(node: dict[str, Any]) -> bool:
    """22.05: `state` "mixed" plus `state_flags` ["DRAIN"]; 23.02+: `state` ["MIXED", "DRAIN"]."""
    states = {s.upper() for s in _words(node.get("state")) + _words(node.get("state_flags"))}
    return bool(states & RUNNING_STATES) and not states & UNUSABLE_FLAGS


def free_devices(site: Site, sinfo_json: str) -> dict[str, dict[str, int]]:
    """{pool: {node: free devices}}, counting device indices one by one."""
    model = {(m.gres_name, m.gres_type): m.id for m in site.models_in_use}
    out: dict[str, dict[str, int]] = {}
    for node in json.loads(sinfo_json)["nodes"]:
        feats = _words(node.get("features"))
        arch = next((a for a in ARCHES if a in feats), "x86_64")
        used: dict[tuple[str, str], set[int]] = {}
        for name, gtype, n, detail in _items(node.get("gres_used", "")):
            used[(name, gtype)] = _indices(detail, n) if n else set()
        for name, gtype, n, _ in _items(node.get("gres", "")):
            mid = model.get((name, gtype))
            if mid is None:
                continue
            devices = set(range(n))
            free = devices - used.get((name, gtype), set()) if node_usable(node) else set()
            out.setdefault(f"{mid}@{arch}", {})[node["name"]] = len(free)
    return out


def waiting_jobs(site: Site, squeue_json: str) -> list[tuple[set[str], int]]:
    """(pools it may run in, devices per node) of each request of each job waiting for
    devices or its turn."""
    by_name: dict[str, list[str]] = {}
    typed = {}
    for model in site.models_in_use:
        by_name.setdefault(model.gres_name, []).append(model.id)
        typed[(model.gres_name, model.gres_type)] = model.id
    arches: dict[str, set[str]] = {}
    for p in pools(site):
        arches.setdefault(p.model, set()).add(p.arch)
    out = []
    for j in json.loads(squeue_json)["jobs"]:
        state = j.get("job_state")
        state = state[0] if isinstance(state, list) and state else state
        if state != "PENDING" or j.get("state_reason", "") not in WAITING:
            continue
        words = set(_words(j.get("features", "")))
        want_arch = {a for a in ARCHES if a in words}
        for item in (j.get("tres_per_node") or "").split(","):
            item = item.strip().removeprefix("gres:").removeprefix("gres/")
            m = _ITEM.fullmatch(item)
            if not m or int(m.group(3)) <= 0:
                continue
            name, gtype = m.group(1), m.group(2) or ""
            if gtype:
                models = [typed[(name, gtype)]] if (name, gtype) in typed else []
            else:  # any model of that GRES name, unless a feature names one (the bridge's pin)
                models = [mid for mid in by_name.get(name, []) if mid in words] or by_name.get(name, [])
            fits = {f"{mid}@{a}" for mid in models for a in arches.get(mid, ())
                    if not want_arch or a in want_arch}
            out.append((fits, int(m.group(3))))
    return out


def recount(free: dict[str, dict[str, int]], jobs: list[tuple[set[str], int]]) -> dict[str, tuple[int, int]]:
    """{pool: (free devices, fragmented devices)}: a free device is fragmented when a job
    waits for the pool and none of the pool's waiting jobs fits on its node."""
    out = {}
    for pool, nodes in free.items():
        wanted = [n for fits, n in jobs if pool in fits]
        free_n = lost = 0
        for count in nodes.values():
            for _device in range(count):
                free_n += 1
                if wanted and not any(n <= count for n in wanted):
                    lost += 1
        out[pool] = (free_n, lost)
    return out


def brute_force(site: Site, sinfo_json: str, squeue_json: str) -> dict[str, tuple[int, int]]:
    """`recount` of one `sinfo --json` and one `squeue --json`."""
    return recount(free_devices(site, sinfo_json), waiting_jobs(site, squeue_json))


def exporter_figures(text: str) -> tuple[dict[str, tuple[float, float]], float | None]:
    """({pool: (free, fragmented)}, when the exporter read the free devices) from /metrics."""
    free: dict[str, float] = {}
    lost: dict[str, float] = {}
    at = None
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "hetero_pool_free_devices":
                free[s.labels["pool"]] = s.value
            elif s.name == "hetero_pool_fragmented_devices":
                lost[s.labels["pool"]] = s.value
            elif s.name == "hetero_pool_fragmentation_timestamp_seconds":
                at = s.value
    return {p: (free[p], lost.get(p, 0.0)) for p in free}, at


KINDS = ("free", "fragmented", "ratio")
Diff = dict[str, dict[str, float]]  # pool → {"free", "fragmented", "ratio"}: absolute differences


def compare(exp: dict[str, tuple[float, float]], brute: dict[str, tuple[int, int]]) -> Diff:
    """Per pool: |Δ free|, |Δ fragmented| and |Δ ratio| (a pool missing on one side: 0 there)."""
    out = {}
    for pool in sorted(set(exp) | set(brute)):
        ef, el = exp.get(pool, (0.0, 0.0))
        bf, bl = brute.get(pool, (0, 0))
        out[pool] = {"free": abs(ef - bf), "fragmented": abs(el - bl),
                     "ratio": abs((el / ef if ef else 0.0) - (bl / bf if bf else 0.0))}
    return out


def exporter_round_time(text: str) -> float | None:
    """When the exporter's last full round (its `squeue --json`, the waiting requests) ended."""
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "hetero_exporter_round_timestamp_seconds":
                return float(s.value)
    return None


def matches(diff: Diff) -> bool:
    """Free and fragmented devices equal in every pool (the ratio follows from them)."""
    return all(d["free"] == d["fragmented"] == 0 for d in diff.values())


# ---- staleness (pure) --------------------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """One `sinfo --json` + `squeue --json`, parsed, and when it was taken (t0 before sinfo,
    t1 after squeue)."""

    t0: float
    t1: float
    free: dict[str, dict[str, int]]
    jobs: list[tuple[set[str], int]]


def explain(exp: dict[str, tuple[float, float]], history: Sequence[Reading], free_at: float | None,
            queue_at: float | None, slack: float = STALE_SLACK_S) -> tuple[float, float] | None:
    """Whether the exporter's figures are what the cluster held when the exporter read it:
    the recount of some reading's free devices taken around `free_at` (its fast sinfo)
    against some reading's queue taken around `queue_at` (its last round's squeue, read at
    most a round's length before) matches in every pool. Returns (free, queue) ages of the
    matching readings relative to the exporter's reads, None when none matches."""
    if free_at is None or queue_at is None:
        return None
    near_free = [r for r in history if r.t1 >= free_at - slack and r.t0 <= free_at + slack]
    near_queue = [r for r in history if r.t1 >= queue_at - ROUND_READ_S - slack and r.t0 <= queue_at + slack]
    for a in near_free:
        for b in near_queue:
            if matches(compare(exp, recount(a.free, b.jobs))):
                return round(a.t0 - free_at, 1), round(b.t0 - queue_at, 1)
    return None


def _p90(values: Sequence[float]) -> float:
    """The nearest-rank 90th percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run's figures from its samples (each with `per_pool` differences and a `verdict`:
    exact, staleness or unexplained). Max and p90 are over pool-samples, p90 of each sample's
    worst pool too."""
    pools_seen = sorted({p for r in rows for p in r["per_pool"]})
    cells = [d for r in rows for d in r["per_pool"].values()]
    verdicts = Counter(r["verdict"] for r in rows)
    out: dict[str, Any] = {
        "samples": len(rows), "pools": pools_seen, "pool_samples": len(cells),
        "pool_samples_exact": sum(1 for d in cells if d["free"] == d["fragmented"] == 0),
        "samples_exact": verdicts["exact"], "samples_differing": len(rows) - verdicts["exact"],
        "differing_explained_by_staleness": verdicts["staleness"],
        "differing_not_explained": verdicts["unexplained"],
        "samples_with_fragmentation": sum(1 for r in rows if any(v[1] for v in r["brute_force"].values())),
        "fragmented_devices_seen_max": max((v[1] for r in rows for v in r["brute_force"].values()),
                                           default=0),
    }
    for k in KINDS:
        vals = [d[k] for d in cells]
        worst = [max((d[k] for d in r["per_pool"].values()), default=0.0) for r in rows]
        out[k] = {"max_abs_diff": max(vals, default=0.0), "p90_abs_diff": _p90(vals),
                  "p90_worst_pool_abs_diff": _p90(worst)}
    return out


# ---- the workload (pure) -----------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """One accelerator model as a job asks for it: GRES, partition, devices per node."""

    model: str
    gres: str  # name:type
    partition: str
    per_node: int


@dataclass(frozen=True)
class JobSpec:
    model: str
    gres: str
    partition: str
    devices: int  # per node, on one node
    seconds: int  # how long it sleeps

    def options(self) -> list[str]:
        """sbatch options: one node, its GRES, a limit a minute above its run (varied limits
        give backfill something to do), output nowhere."""
        return ["-p", self.partition, "-N", "1", f"--gres={self.gres}:{self.devices}",
                "-t", str(self.seconds // 60 + 2), "-J", f"frag-{self.model}", "-o", "/dev/null"]


def shapes(site: Site) -> list[Shape]:
    """Every model with at least 2 devices on a node (1-device nodes cannot fragment), with
    the largest per-node count and the first partition of a node group holding it."""
    out: dict[str, Shape] = {}
    for g in site.node_groups:
        for a in g.accelerators:
            m = a.model
            old = out.get(m.id)
            if a.count >= 2 and (old is None or a.count > old.per_node) and g.partitions:
                out[m.id] = Shape(m.id, f"{m.gres_name}:{m.gres_type}", g.partitions[0], a.count)
    return [out[k] for k in sorted(out)]


def job_stream(seed: int, shape: Shape) -> Iterator[JobSpec]:
    """The model's endless job sequence, the same for the same seed: 1/2/3/4/8 devices (those
    a node holds), a quarter of them the whole node, 10-120 s runs."""
    rng = random.Random(f"{seed}/{shape.model}")
    sizes = [n for n in (1, 2, 3, 4, 8) if n <= shape.per_node]
    while True:
        devices = shape.per_node if rng.random() < WHOLE_NODE_SHARE else rng.choice(sizes)
        yield JobSpec(shape.model, shape.gres, shape.partition, devices, rng.randint(10, 120))


def sample_instants(seed: int, count: int, start: float, span: float) -> list[float]:
    """`count` instants drawn uniformly in [start, start + span], in order (seconds)."""
    rng = random.Random(f"{seed}/instants")
    return sorted(start + rng.uniform(0, span) for _ in range(count))


# ---- the live check ----------------------------------------------------------------------------

class Recorder:
    """Reads sinfo --json and squeue --json back to back, over and over, and keeps the last
    HISTORY_S seconds: what the cluster held when the exporter read it."""

    def __init__(self, site: Site, runner: Runner, every: float = 1.0):
        self.site, self.runner, self.every = site, runner, every
        self.history: deque[Reading] = deque()
        self.lock = threading.Lock()
        self.errors = 0

    def read(self) -> Reading:
        t0 = time.time()
        sinfo = self.runner.out(SINFO_JSON_ARGV)
        squeue = self.runner.out(squeue_json_argv())
        r = Reading(t0, time.time(), free_devices(self.site, sinfo), waiting_jobs(self.site, squeue))
        with self.lock:
            self.history.append(r)
            while self.history and self.history[0].t1 < r.t0 - HISTORY_S:
                self.history.popleft()
        return r

    def snapshot(self) -> list[Reading]:
        with self.lock:
            return list(self.history)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.read()
            except Exception as e:  # a slow slurmctld costs a reading, not the run
                self.errors += 1
                print(f"recorder: {e}", file=sys.stderr, flush=True)
            stop.wait(self.every)


class Driver:
    """Keeps `pending` jobs of each model waiting: submits the model's next job (job_stream)
    whenever fewer wait, as root through sbatch with a script (no shell, no text in it)."""

    def __init__(self, runner: Runner, site: Site, script: Path, seed: int, pending: int = 4):
        self.runner, self.script, self.pending = runner, script, pending
        self.streams = {s.model: job_stream(seed, s) for s in shapes(site)}
        self.submitted: Counter[str] = Counter()
        self.errors = 0

    def step(self) -> None:
        names = self.runner.out(["squeue", "-h", "-t", "PENDING", "-o", "%j"]).split()
        waiting = Counter(names)
        for model, stream in self.streams.items():
            for _ in range(max(0, self.pending - waiting[f"frag-{model}"])):
                job = next(stream)
                self.runner.out(sbatch_script_argv(job.options(), str(self.script), [str(job.seconds)]))
                self.submitted[model] += 1

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception as e:
                self.errors += 1
                print(f"driver: {e}", file=sys.stderr, flush=True)
            stop.wait(DRIVE_EVERY_S)


def check(site: Site, runner: Runner, metrics: str, instants: Sequence[float], t_start: float,
          recorder: Recorder) -> list[dict[str, Any]]:
    """Sample at each instant (seconds after t_start): scrape, recount now, and on a
    difference look for the readings that explain it."""
    rows: list[dict[str, Any]] = []
    for i, at in enumerate(instants):
        delay = t_start + at - time.time()
        if delay > 0:
            time.sleep(delay)
        with urllib.request.urlopen(metrics, timeout=30) as r:
            text = r.read().decode()
        exp, free_at = exporter_figures(text)
        queue_at = exporter_round_time(text)
        now = recorder.read()
        brute = recount(now.free, now.jobs)
        diff = compare(exp, brute)
        verdict, why = "exact", None
        if not matches(diff):
            why = explain(exp, recorder.snapshot(), free_at, queue_at)
            verdict = "staleness" if why else "unexplained"
        worst = {k: max((d[k] for d in diff.values()), default=0.0) for k in KINDS}
        age = None if free_at is None else round(now.t0 - free_at, 1)
        queue_age = None if queue_at is None else round(now.t0 - queue_at, 1)
        rows.append({"t": round(now.t0, 3), "age_s": age, "queue_age_s": queue_age, "verdict": verdict,
                     "explained_by_readings_at_s": why, "worst": worst, "per_pool": diff,
                     "exporter": exp, "brute_force": brute})
        off = ", ".join(f"{p} Δfree {d['free']:g} Δfragmented {d['fragmented']:g}"
                        for p, d in diff.items() if d["fragmented"] or d["free"])
        print(f"sample {i + 1:3d}: figures {age} s old (queue {queue_age} s), {verdict}, "
              f"|Δ fragmented| max {worst['fragmented']:g}, |Δ free| max {worst['free']:g}"
              + (f" ({off})" if off else ""), flush=True)
    return rows


Writer = Callable[[list[dict[str, Any]], dict[str, Any]], None]


def boot(args: argparse.Namespace, site: Site, write: Writer) -> int:
    """Boot the site's dev cluster with its exporters, drive the workload, sample, and tear
    the cluster down whatever happens (SIGTERM included)."""
    from slurm_hetero.devcluster import Cluster  # the top floor: only for --boot

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # run the finally below
    c = Cluster(args.workdir)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    try:
        print(f"booting {site.name} in {c.workdir}", flush=True)
        c.up(site, timeout=300)
        # Node exporters slower than their default (5 s ring): only the cluster exporter is
        # checked, and on its production tiers (60 s round, 10 s free devices).
        ports = c.start_exporters(site, every=5.0, tier_s=30.0, sacct_every=0)
        metrics = f"http://127.0.0.1:{ports['cluster']}/metrics"
        script = c.workdir / "frag-job.sh"
        script.write_text('#!/bin/sh\nexec sleep "$1"\n')
        script.chmod(0o755)
        recorder = Recorder(site, c.runner)
        driver = Driver(c.runner, site, script, args.seed, pending=args.pending)
        threads = [threading.Thread(target=o.run, args=(stop,), daemon=True) for o in (driver, recorder)]
        for t in threads:
            t.start()
        span = args.minutes * 60.0
        instants = sample_instants(args.seed, args.samples, args.warmup, span)
        print(f"workload running; {args.samples} samples over {args.minutes:g} min after a "
              f"{args.warmup:g} s warm-up; exporter {metrics}", flush=True)
        rows = check(site, c.runner, metrics, instants, time.time(), recorder)
        extra = {"workdir": str(c.workdir), "jobs_submitted": dict(driver.submitted),
                 "submit_errors": driver.errors, "recorder_errors": recorder.errors,
                 "minutes": args.minutes, "warmup_s": args.warmup, "pending_per_model": args.pending,
                 "exporter": {"every_s": 60.0, "fast_every_s": 10.0}}
        return 0
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        write(rows, extra)
        c.down(log=lambda m: print(m, flush=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, default=None, help="the site file (--boot: the demo site)")
    ap.add_argument("--metrics", help="the cluster exporter's /metrics URL (not with --boot)")
    ap.add_argument("--boot", action="store_true",
                    help="boot the site's dev cluster with exporters in --workdir, drive a fragmenting GPU "
                         "workload for --minutes, sample, tear it down")
    ap.add_argument("--workdir", type=Path, default=None, help="--boot: the dev cluster's folder")
    ap.add_argument("--minutes", type=float, default=12.0, help="--boot: minutes over which samples fall")
    ap.add_argument("--warmup", type=float, default=75.0, help="--boot: seconds of workload before sampling")
    ap.add_argument("--pending", type=int, default=4, help="--boot: jobs kept waiting per model")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--max-gap", type=float, default=60.0,
                    help="most seconds between two samples (not --boot)")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--json", type=Path, default=None, help="write the samples and summary here")
    args = ap.parse_args(argv)
    if args.boot and (args.workdir is None or args.metrics):
        ap.error("--boot needs --workdir and takes no --metrics")
    if not args.boot and (args.metrics is None or args.site is None):
        ap.error("give --site and --metrics, or --boot --workdir DIR")
    site = load_site(args.site or DEMO)
    command = shlex.join(sys.orig_argv if argv is None else [sys.executable, __file__, *argv])
    niceness = os.nice(0)
    if niceness:
        command = f"nice -n {niceness} {command}"

    def write(rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
        s = summarize(rows)
        f = s["fragmented"]
        print(f"{s['samples']} samples, {s['pool_samples']} pool-samples: {s['pool_samples_exact']} exact; "
              f"|Δ fragmented| max {f['max_abs_diff']:g} p90 {f['p90_abs_diff']:g}; "
              f"{s['samples_differing']} samples differ: {s['differing_explained_by_staleness']} staleness, "
              f"{s['differing_not_explained']} not explained", flush=True)
        if args.json:
            doc = {"command": command, "seed": args.seed, "site": str(site.path or site.name),
                   "complete": len(rows) == args.samples, **extra, "summary": s, "samples": rows}
            args.json.write_text(json.dumps(doc, indent=1) + "\n")

    if args.boot:
        return boot(args, site, write)
    runner, rng = Runner(timeout=60), random.Random(args.seed)
    recorder = Recorder(site, runner)
    stop = threading.Event()
    threading.Thread(target=recorder.run, args=(stop,), daemon=True).start()
    gaps = [rng.uniform(0, args.max_gap) for _ in range(args.samples)]
    rows = check(site, runner, args.metrics, list(itertools.accumulate(gaps)), time.time(), recorder)
    stop.set()
    write(rows, {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
