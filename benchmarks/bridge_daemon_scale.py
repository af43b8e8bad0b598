"""The bridge daemon at a large site's scale, without a cluster: 20,000 pending and 5,000
running jobs (shaped like captured 22.05 `squeue --json`), 1,000 nodes. Per round: the
daemon's own CPU (parse the queue, snapshot, limits, SiteFactor, moves), the scontrol
commands it starts and the update RPCs they send to slurmctld; the first round (every
pending job gets its factor) and the steady state (rounds 5 s apart), with today's stepped
and batched SiteFactor and with the earlier one-command-per-changed-job, unstepped way.

    python benchmarks/bridge_daemon_scale.py [--pending 20000] [--running 5000] [--nodes 1000] [--rounds 12]

Process starts are not in the CPU figure (the fake runner answers at once); each costs
what `scontrol -V` costs here (measured and printed), times the commands.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

from slurm_hetero.bridge import daemon as daemon_mod
from slurm_hetero.bridge.daemon import BridgeDaemon, FactorPolicy
from slurm_hetero.site import load_site
from slurm_hetero.slurm.runner import Runner

ROOT = Path(__file__).resolve().parents[1]
CAPTURED = ROOT / "tests" / "data" / "captured"
DEMO = ROOT / "site" / "demo" / "site.yaml"
NOW = 1_800_000_000.0


def synthetic_queue(pending: int, running: int) -> str:
    doc = json.loads((CAPTURED / "squeue-json-22.05.json").read_text())
    template = doc["jobs"][0]
    jobs = []
    for i in range(pending + running):
        j = dict(template)
        run = i < running
        j.update(job_id=1000 + i, job_state="RUNNING" if run else "PENDING",
                 submit_time=int(NOW - 60 - (i * 7) % 86_400), start_time=int(NOW - 30) if run else 0,
                 time_limit=240, state_reason="None" if run else "Priority",
                 admin_comment=json.dumps({"hetero": 1, "pool": "h100@x86_64", "model": "h100", "n": 1,
                                           "pred": {"p50": 60 + (i * 37) % 20_000, "p90": 30_000}}))
        jobs.append(j)
    doc["jobs"] = jobs
    return json.dumps(doc)


def synthetic_sinfo(nodes: int) -> str:
    lines = []
    for i in range(nodes):
        gres, feats = (("gpu:h100:8", "x86_64,nvidia,cuda,h100") if i % 2 else
                       ("gpu:a100-80gb:4", "x86_64,nvidia,cuda,a100-80gb"))
        lines.append(f"n{i:04d}|{('idle', 'mixed', 'allocated')[i % 3]}|{gres}|{gres[:-1]}0|{feats}|")
    return "\n".join(lines) + "\n"


class Counting(Runner):
    """Answers squeue/sinfo from memory and counts everything else it is asked to run."""

    def __init__(self, squeue: str, sinfo: str):
        super().__init__()
        self.answers = {"squeue": squeue, "sinfo": sinfo}
        self.commands = 0
        self.rpcs = 0

    def run(self, argv: Any, **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[0] in self.answers:
            return subprocess.CompletedProcess(list(argv), 0, self.answers[argv[0]], "")
        self.commands += 1
        job = next((a for a in argv if a.startswith("JobId=")), "JobId=")
        self.rpcs += len(job.removeprefix("JobId=").split(","))
        return subprocess.CompletedProcess(list(argv), 0, "", "")


def measure(label: str, squeue: str, sinfo: str, rounds: int, factor: FactorPolicy, batch: int) -> None:
    site = load_site(DEMO)
    runner = Counting(squeue, sinfo)
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(daemon_mod, "FACTOR_BATCH", batch):
        d = BridgeDaemon(site, runner, Path(tmp) / "snap.lua", factor=factor, log=lambda _: None)
        cpu, cmds, rpcs = [], [], []
        for r in range(rounds):
            with mock.patch.object(daemon_mod.time, "time", return_value=NOW + 5 * r):
                c0, n0, p0 = time.process_time(), runner.commands, runner.rpcs
                d.round()
                cpu.append(time.process_time() - c0)
                cmds.append(runner.commands - n0)
                rpcs.append(runner.rpcs - p0)
    steady = slice(1, None)
    print(f"{label}:")
    print(f"  first round: {cpu[0]:.2f} s CPU, {cmds[0]} scontrol commands, {rpcs[0]} update RPCs")
    cpu_s = statistics.median(cpu[steady])
    n_cmds, n_rpcs = statistics.mean(cmds[steady]), statistics.mean(rpcs[steady])
    print(f"  steady state (rounds 2-{rounds}, 5 s apart): {cpu_s:.2f} s CPU median, "
          f"{n_cmds:.1f} commands and {n_rpcs:.1f} RPCs per round")


def spawn_cost() -> float:
    t0 = time.perf_counter()
    for _ in range(20):
        subprocess.run(["scontrol", "-V"], capture_output=True, check=False)
    return (time.perf_counter() - t0) / 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=20_000)
    ap.add_argument("--running", type=int, default=5_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=12)
    a = ap.parse_args()
    squeue, sinfo = synthetic_queue(a.pending, a.running), synthetic_sinfo(a.nodes)
    print(f"{a.pending} pending + {a.running} running jobs ({len(squeue) / 2**20:.0f} MiB of squeue --json), "
          f"{a.nodes} nodes")
    measure("one command per changed job, unstepped factor (before)", squeue, sinfo, a.rounds,
            FactorPolicy(step=1), 1)
    measure("stepped factor, one command per value (now)", squeue, sinfo, a.rounds, FactorPolicy(), 500)
    print(f"a process start (scontrol -V) costs {1000 * spawn_cost():.1f} ms here")


if __name__ == "__main__":
    main()
