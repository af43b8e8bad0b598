"""The bridge daemon on a live cluster with a large queue: submit throughput while it runs
vs while it is stopped (same cluster, interleaved phases), and what each of its rounds
costs the daemon (CPU) and slurmctld (RPCs, from `sdiag`).

    python benchmarks/bridge_daemon_live.py [--pending 20000] [--phases 3] [--phase-s 120]
        [--submitters 4] [--every 2]

The demo site's dev cluster with the whole bridge (SPANK plugin, job_submit.lua with the
runtime model of benchmarks/bridge_throughput.py compiled in, daemon), MaxJobCount raised.
The queue is filled with --pending held jobs asking
`--accel=any:1 --tier=gold` (8 submitters), then phases alternate, daemon running /
stopped (the order rotates each pair), each submitting held jobs the same way for
--phase-s seconds with --submitters submitters (then cancelled: the queue stays at
--pending); the first submission of a phase is not timed. "Stopped" is the daemon paused
(SIGSTOP), so it neither restarts nor loses its cadence between phases. Per phase kind:
jobs/s; the ratio running ÷ stopped over all jobs and as the median of the pairs. Over the
running phases: the daemon's CPU seconds (utime+stime of its process, /proc) per round and
per wall second, its rounds (from its log: "round" lines are not logged, so rounds are the
phase time ÷ the gap it reports, see `BridgeDaemon.gap`), and sdiag's RPC counts per
second running minus stopped (what the daemon's rounds add). Running jobs: only what 11
nodes hold (the synthetic benchmarks/bridge_daemon_scale.py covers 5,000 running).
Prints figures only. Run as root.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from slurm_hetero.devcluster import Cluster
from slurm_hetero.site import load_site

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bridge_throughput import model_file  # the same compiled-in model

DEMO = Path(__file__).resolve().parents[1] / "site" / "demo" / "site.yaml"
OPTS = ["--accel=any:1", "--tier=gold"]
SBATCH = ["sbatch", "-H", "-Q", "-o", "/dev/null", *OPTS, "--wrap", "true"]
RPC = re.compile(r"^\s*(REQUEST_[A-Z_]+|MESSAGE_[A-Z_]+)\s+\(\s*\d+\)\s+count:(\d+)"
                 r"\s+ave_time:\d+\s+total_time:(\d+)", re.M)


def submit(env: dict[str, str], n: int, submitters: int, name: str = "fill") -> float:
    """Submit n held jobs named `name` with `submitters` parallel loops; jobs/s."""
    argv = [*SBATCH[:-2], "-J", name, *SBATCH[-2:]]

    def loop(k: int) -> None:
        for _ in range(k):
            subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    shares = [n // submitters + (1 if i < n % submitters else 0) for i in range(submitters)]
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(submitters) as ex:
        list(ex.map(loop, shares))
    return n / (time.monotonic() - t0)


def submit_for(env: dict[str, str], seconds: float, submitters: int, name: str) -> tuple[int, float]:
    """Submit held jobs named `name` for `seconds` with `submitters` loops; (jobs, seconds)."""
    argv = [*SBATCH[:-2], "-J", name, *SBATCH[-2:]]
    t0 = time.monotonic()
    end = t0 + seconds

    def loop(_: int) -> int:
        k = 0
        while time.monotonic() < end:
            subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
            k += 1
        return k
    with concurrent.futures.ThreadPoolExecutor(submitters) as ex:
        n = sum(ex.map(loop, range(submitters)))
    return n, time.monotonic() - t0


def rpc_counts(c: Cluster) -> dict[str, int]:
    """Per RPC type: its count, and (as "NAME us") slurmctld's total time in it."""
    out: dict[str, int] = {}
    for m in RPC.finditer(c.runner.out(["sdiag"])):
        out[m.group(1)] = int(m.group(2))
        out[m.group(1) + " us"] = int(m.group(3))
    return out


def cpu_s(pid: int) -> tuple[float, float]:
    """(the process's own CPU seconds, its finished children's: squeue, sinfo, scontrol)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def bridge_pid(c: Cluster) -> int:
    pid = c.pid(c.daemon("bridge"))
    if not pid:
        raise SystemExit("the bridge daemon is not running")
    return pid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=20_000)
    ap.add_argument("--phases", type=int, default=3, help="phases of each kind")
    ap.add_argument("--phase-s", type=float, default=120.0,
                    help="seconds of submissions per phase (longer than the daemon's queue reads)")
    ap.add_argument("--submitters", type=int, default=4)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--users", type=int, default=40, help="users in the model's history table (0: no model)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-daemon-live-") as d:
        doc = yaml.safe_load(DEMO.read_text())
        slurm = doc.setdefault("slurm", {})
        slurm["extra_lines"] = [*slurm.get("extra_lines", []),
                                f"MaxJobCount={args.pending + 50_000}", "MinJobAge=5"]
        site_path = Path(d) / "site.yaml"
        site_path.write_text(yaml.safe_dump(doc))
        site = load_site(site_path)
        c = Cluster(Path(d) / "demo")
        c.up(site, log=lambda *_: None)
        if args.users:  # with a model the bridge sets each job's first SiteFactor itself
            c.load_model(site, model_file(Path(d), args.users))
        env = {"SLURM_CONF": str(c.conf), "PATH": "/usr/bin:/bin"}
        try:
            c.stop_bridge()
            c.start_bridge(site, every=args.every, wait=300)
            t0 = time.monotonic()
            submit(env, args.pending, 8)
            fill_s = time.monotonic() - t0
            rates: dict[str, list[float]] = {"running": [], "stopped": []}
            rpcs: dict[str, dict[str, float]] = {"running": {}, "stopped": {}}
            secs = {"running": 0.0, "stopped": 0.0}
            jobs = {"running": 0, "stopped": 0}
            cpu = child_cpu = 0.0
            for p in range(args.phases):
                for kind in (("running", "stopped") if p % 2 == 0 else ("stopped", "running")):
                    # Paused, not restarted: a restart would read the whole queue twice at
                    # once (startup repair, first round), which a running daemon does not.
                    os.kill(bridge_pid(c), signal.SIGCONT if kind == "running" else signal.SIGSTOP)
                    subprocess.run(SBATCH, env=env, check=True, stdout=subprocess.DEVNULL)  # untimed
                    c.runner.run(["sdiag", "-r"])
                    before = rpc_counts(c)
                    pid = bridge_pid(c) if kind == "running" else 0
                    cpu0 = cpu_s(pid) if pid else (0.0, 0.0)
                    n, took = submit_for(env, args.phase_s, args.submitters, f"p{p}{kind}")
                    rates[kind].append(n / took)
                    secs[kind] += took
                    jobs[kind] += n
                    if pid:
                        own, kids = cpu_s(pid)
                        cpu += own - cpu0[0]
                        child_cpu += kids - cpu0[1]
                    for k, v in rpc_counts(c).items():
                        rpcs[kind][k] = rpcs[kind].get(k, 0) + v - before.get(k, 0)
                    # The queue stays at --pending: this phase's jobs go (MinJobAge=5).
                    c.runner.run(["scancel", "-n", f"p{p}{kind}"], check=False, timeout=600)
            os.kill(bridge_pid(c), signal.SIGCONT)
            queued = len(c.runner.out(["squeue", "-h", "-t", "PD", "-o", "%i"]).split())
            log = (c.log / "bridge.log").read_text(errors="replace")
            gaps = [float(x) for x in re.findall(r"rounds ([0-9.]+) s apart", log)]
            reads = [float(x) for x in re.findall(r"read every ([0-9.]+) s", log)]
        finally:
            try:
                c.runner.run(["scancel", "--state=PENDING"], check=False, timeout=600)
            finally:
                c.down(log=lambda *_: None)
    def added(key: str) -> float:  # what the daemon's rounds add over the phases it ran in
        return rpcs["running"].get(key, 0) - rpcs["stopped"].get(key, 0) * secs["running"] / secs["stopped"]
    # Every round asks sinfo (NODE_INFO), only queue reads ask squeue (JOB_INFO).
    rounds = max(added("REQUEST_NODE_INFO"), 1.0)
    queue_reads = max(added("REQUEST_JOB_INFO"), 1.0)
    gap = secs["running"] / rounds
    print(f"queue filled with {args.pending} held jobs in {fill_s:.0f} s "
          f"({args.pending / fill_s:.0f} jobs/s, 8 submitters); {queued} pending at the end; "
          f"{os.cpu_count()} CPUs")
    read_gap = secs["running"] / queue_reads
    print(f"daemon rounds every {args.every:g} s asked; with this queue {gap:.1f} s apart on average "
          f"(longest asked {max(gaps, default=args.every):g} s), the whole queue read every {read_gap:.0f} s "
          f"(first stretch said: {reads[0] if reads else '-'} s)")
    for kind in ("running", "stopped"):
        r = rates[kind]
        shown = ", ".join(f"{x:.0f}" for x in r)
        print(f"  daemon {kind:7}: {statistics.mean(r):6.1f} jobs/s (phases: {shown})")
    pairs = [a / b for a, b in zip(rates["running"], rates["stopped"], strict=True)]
    total = (jobs["running"] / secs["running"]) / (jobs["stopped"] / secs["stopped"])
    print(f"  throughput running / stopped: {total:.3f} (median of pairs {statistics.median(pairs):.3f}, "
          f"min {min(pairs):.3f})")
    print(f"  daemon CPU: {cpu:.1f} s over {secs['running']:.0f} s running = {cpu / secs['running']:.2f} "
          f"CPU, {cpu / max(rounds, 1):.2f} s per round (~{rounds:.0f} rounds); the commands it ran "
          f"(squeue --json, sinfo, scontrol): {child_cpu:.1f} s = {child_cpu / secs['running']:.2f} CPU, "
          f"{child_cpu / queue_reads:.2f} s per queue read")
    print("  slurmctld RPCs per second, running - stopped (what the daemon adds), per round, and "
          "slurmctld's time in them per round (sdiag total_time):")
    for k in sorted(k for k in set(rpcs["running"]) | set(rpcs["stopped"]) if not k.endswith(" us")):
        def per_s(kind: str, key: str) -> float:
            return rpcs[kind].get(key, 0) / secs[kind]
        extra = per_s("running", k) - per_s("stopped", k)
        busy_ms = (per_s("running", k + " us") - per_s("stopped", k + " us")) * gap / 1000
        if abs(extra) >= 0.01:
            print(f"    {k:32} {extra:8.2f}/s  {extra * gap:8.1f}/round  {busy_ms:8.0f} ms/round")


if __name__ == "__main__":
    main()
