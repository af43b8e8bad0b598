"""What one job costs the control plane because of the node agent: slurmctld RPCs (sdiag's
counters by message type) and slurmdbd RPCs (`sacctmgr show stats`) from submit until the
job's per-node energy is in its accounting record, and the prolog/epilog wall time each
node's agent logged, for a 1-node and an N-node GPU job with an energy policy on a dev
cluster of N one-GPU nodes (fake devices). Then the per-task side on an NPU node (a GRES
without a Slurm plugin, so the TaskProlog runs for every task): slurmctld's job-info RPCs
for one job of T tasks (its batch step and one `srun -n T` step), and the TaskProlog's own
wall time, run by hand against a live NPU job.

    python benchmarks/job_hooks_cost.py [--nodes 64] [--npu-tasks 16] [--workdir DIR]

The baseline is the same job without the agent's part: Slurm's own RPCs for a job of that
size are what the `--gres` job (no energy policy, so no device figures to ship) costs; the
difference is the agent's. The waits here read files and slurmdbd only through
`sacctmgr show stats`/`sacct`, whose own RPCs are counted and taken off.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.site import load_site
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import submit, wait_done
from slurm_hetero.slurm.runner import Runner

SITE = """\
name: hooks
partitions:
  - {{name: gpu, default: true, max_time: "1:00:00", default_time: "0:10:00"}}
  - {{name: npu, max_time: "1:00:00", default_time: "0:10:00"}}
node_groups:
  - names: g[01-{n:02d}]
    resource_type: GPU
    architecture: x86_64
    sockets: 1
    cores_per_socket: 4
    memory: 16GB
    memory_bandwidth: 100GB/s
    partitions: [gpu]
    accelerators:
      - {{model: a100-80gb, count: 1}}
  - names: npu-01
    resource_type: NPU
    architecture: aarch64
    sockets: 1
    cores_per_socket: 32
    memory: 64GB
    memory_bandwidth: 800GB/s
    partitions: [npu]
    accelerators:
      - {{model: ascend-910b, count: 8}}
node_agent:
  restore_interval: 300
"""


_RPC_ROW = re.compile(r"^\s*(\w+)\s+\(\s*\d+\) count:(\d+)", re.M)


def rpc_counts(text: str) -> dict[str, int]:
    """Counts by message type from sdiag's or `sacctmgr show stats`' RPC table."""
    part = text.split("Remote Procedure Call statistics by message type", 1)[-1]
    part = part.split("Remote Procedure Call statistics by user", 1)[0]
    return {m.group(1): int(m.group(2)) for m in _RPC_ROW.finditer(part)}


def ctld_rpcs(runner: Runner) -> dict[str, int]:
    return rpc_counts(runner.out(["sdiag"]))


def dbd_rpcs(runner: Runner) -> dict[str, int]:
    return rpc_counts(runner.out(["sacctmgr", "show", "stats"]))


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def hook_times(log: Path, jid: int) -> tuple[list[float], list[float]]:
    text = log.read_text() if log.exists() else ""
    pro = [float(m) for m in re.findall(rf"prolog job {jid} on \S+: .*?, (\d+) ms", text)]
    epi = [float(m) for m in re.findall(rf"epilog job {jid} on \S+: .*, (\d+) ms", text)]
    return pro, epi


def one(c: Cluster, options: list[str], nodes: int, energy: bool) -> None:
    log = c.agent_dir / "agent.log"
    r = c.runner
    c0, d0 = ctld_rpcs(r), dbd_rpcs(r)
    jid = submit(r, [*options, "-N", str(nodes), "-o", "/dev/null"], "sleep 2")
    assert wait_until(lambda: len(hook_times(log, jid)[1]) >= nodes, 300), f"job {jid}: epilogs missing"
    t_hooks = time.monotonic()
    checks = 0
    if energy:  # until the figures of every node are in the record
        def shipped() -> bool:  # the health check ships (each node every 20 s here)
            nonlocal checks
            checks += 1
            out = r.out(["sacct", "-X", "-n", "-P", "-j", str(jid), "-o", "AdminComment"])
            return len(parse_comment(out.strip()).get("node_energy", {})) == nodes

        assert wait_until(shipped, 180, 2.0), f"job {jid}: figures not shipped"
    c1, d1 = ctld_rpcs(r), dbd_rpcs(r)
    dc, dd = delta(c1, c0), delta(d1, d0)
    dc.pop("REQUEST_STATS_INFO", None)  # sdiag's own
    for k in ("DBD_GET_STATS",):  # sacctmgr show stats' own
        dd.pop(k, None)
    for k in ("DBD_GET_JOBS_COND", "SLURM_PERSIST_INIT", "DBD_FINI"):  # the checks' own sacct
        if k in dd:
            dd[k] -= checks
    pro, epi = hook_times(log, jid)
    label = f"{nodes}-node job, {'energy policy (figures shipped)' if energy else 'no policy'}"
    print(f"{label}: slurmctld {sum(dc.values())} RPCs {dc}")
    print(f"  slurmdbd {sum(v for v in dd.values() if v > 0)} RPCs {dd}")
    print(f"  prolog median {sorted(pro)[len(pro) // 2]:.0f} ms max {max(pro):.0f}; "
          f"epilog median {sorted(epi)[len(epi) // 2]:.0f} ms max {max(epi):.0f} "
          f"(figures in the record {time.monotonic() - t_hooks:.1f} s after the epilogs, "
          f"{checks} sacct checks of ours taken off)")


def npu_tasks(c: Cluster, tasks: int, repeat: int = 20) -> None:
    """The per-task hooks on an NPU node: slurmctld's RPCs for a job of `tasks` tasks, and the
    TaskProlog's wall time (median of `repeat` runs by hand for a live job's task)."""
    r = c.runner
    c0 = ctld_rpcs(r)
    jid = submit(r, ["-p", "npu", "-w", "npu-01", "--gres=npu:2", "-n", str(tasks), "-o", "/dev/null"],
                 f"srun -n {tasks} /bin/true")
    wait_done(r, [jid], timeout=180)
    dc = delta(ctld_rpcs(r), c0)
    dc.pop("REQUEST_STATS_INFO", None)
    info = sum(v for k, v in dc.items() if k.startswith("REQUEST_JOB_INFO"))
    print(f"NPU job of {tasks} tasks (+ its batch step): slurmctld {sum(dc.values())} RPCs, "
          f"{info} job-info (scontrol show job) {dc}")
    held = submit(r, ["-p", "npu", "-w", "npu-01", "--gres=npu:2", "-o", "/dev/null"], "sleep 120")
    try:
        assert wait_until(lambda: r.out(["squeue", "-h", "-j", str(held), "-o", "%t"]).strip() == "R", 60)
        time.sleep(1)  # its prolog is done once it runs (PrologFlags=Alloc)
        script = (c.etc / "hetero-taskprolog").read_text().splitlines()
        argv = shlex.split(next(line for line in script if line.startswith("exec ")))[1:]
        env = {**os.environ, "SLURM_JOB_ID": str(held), "SLURMD_NODENAME": "npu-01",
               "SLURM_CONF": str(c.etc / "slurm.conf")}
        took, out = [], ""
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
            took.append((time.perf_counter() - t0) * 1000)
        print(f"  TaskProlog by hand: median {statistics.median(took):.0f} ms, min {min(took):.0f} ms "
              f"({repeat} runs); it printed {out.strip()!r}")
    finally:
        r.run(["scancel", str(held)], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--npu-tasks", type=int, default=16)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    base = a.workdir or Path(tempfile.mkdtemp(prefix="hooks-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    (base / "site.yaml").write_text(SITE.format(n=a.nodes))
    c = Cluster(base / "cluster")
    t0 = time.monotonic()
    c.up(load_site(base / "site.yaml"), timeout=600, log=lambda *_: None)
    c.stop_bridge()  # its rounds (squeue, sinfo) are not the job's; job_submit.lua stays
    print(f"{a.nodes} one-GPU nodes and an NPU node up in {time.monotonic() - t0:.0f} s")
    try:
        for nodes in (1, a.nodes):
            one(c, ["--gres=gpu:a100-80gb:1"], nodes, energy=False)
            one(c, ["--accel=a100-80gb:1", "--energy=efficiency"], nodes, energy=True)
        npu_tasks(c, a.npu_tasks)
    finally:
        c.down(log=lambda *_: None)


if __name__ == "__main__":
    main()
