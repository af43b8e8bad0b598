"""`make demo`: boot the demo cluster, run jobs that need different hardware, show where.

Part 1 submits plain Slurm requests; part 2 the same needs through the bridge's options
(--accel/--arch/--energy/--tier), including `--accel=any:2` while the cheapest pool is full,
and a typo the bridge rejects.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from slurm_hetero.bridge.snapshot import wait_for_pool
from slurm_hetero.conf import Profile
from slurm_hetero.container_demo import run_container_demo
from slurm_hetero.devcluster import Cluster
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.reports import Period, sacct_report, write_html
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.commands import cancel_argv, sbatch_wrap_argv
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_tres
from slurm_hetero.slurm.runner import Runner

PLAIN_JOBS: list[tuple[str, list[str]]] = [
    ("1 NPU on an ARM node", ["--gres=npu:1", "-C", "aarch64"]),
    ("1 H100", ["--gres=gpu:h100:1"]),
    ("2 A100-80GB", ["--gres=gpu:a100-80gb:2"]),
    ("1 GH200 (ARM + GPU)", ["--gres=gpu:gh200:1"]),
    ("a quarter V100 (shard)", ["--gres=shard:1"]),
    ("32 CPUs, x86", ["-c", "32", "-C", "x86_64"]),
    ("64 CPUs, ARM", ["-c", "64", "-C", "aarch64"]),
]
BRIDGE_JOBS: list[tuple[str, list[str]]] = [
    ("any 2 accelerators (V100s busy)", ["--accel=any:2"]),
    ("an NVIDIA GPU on ARM", ["--accel=nvidia:1", "--arch=aarch64"]),
    ("4 normalized units, top tier, frugal", ["--accel=units=4", "--tier=diamond", "--energy=efficiency"]),
    ("2 GPUs with >= 80 GB each", ["--accel=nvidia:2,mem>=80G", "--tier=silver"]),
    ("8 Ascend NPUs (CANN)", ["--accel=cann:8"]),
]
TYPO = ["--accel=a100-80:1"]
PROBE = 'echo "$SLURMD_NODENAME gpus=${CUDA_VISIBLE_DEVICES:-none}"'


def _got(alloc_tres: str) -> str:
    tres = parse_tres(alloc_tres)
    typed = {k.split(":")[0] for k in tres if k.startswith("gres/") and ":" in k}
    return " ".join(f"{k.removeprefix('gres/')}={v}" for k, v in tres.items()
                    if k == "cpu" or (k.startswith("gres/") and (":" in k or k not in typed)))


def _run_jobs(runner: Runner, jobs: list[tuple[str, list[str]]], out_dir: Path
              ) -> dict[int, tuple[str, list[str]]]:
    ids = {}
    for label, opts in jobs:
        jid = submit(runner, [*opts, "-J", "demo", f"--output={out_dir}/%j.out"], PROBE)
        ids[jid] = (label, opts)
    return ids


def _table(title: str, runner: Runner, ids: dict[int, tuple[str, list[str]]],
           decisions: bool) -> tuple[Table, int]:
    wait_done(runner, list(ids))
    fields = ["JobID", "Partition", "NodeList", "State", "AllocTRES", "QOS", "AdminComment", "End"]
    rows = sacct_jobs(runner, list(ids), fields, require=["AdminComment"] if decisions else [])
    t = Table(title=title)
    cols = ["job", "asked for", "options", "partition", "node", "state", "got", "qos"]
    for col in cols + (["bridge chose"] if decisions else []):
        t.add_column(col)
    failed = 0
    for jid, (label, opts) in ids.items():
        r = rows.get(jid, {})
        state = r.get("State", "?")
        failed += state != "COMPLETED"
        cells = [str(jid), label, " ".join(opts), r.get("Partition", ""), r.get("NodeList", ""),
                 state if state == "COMPLETED" else f"[red]{state}[/red]", _got(r.get("AllocTRES", "")),
                 r.get("QOS", "")]
        if decisions:
            d = parse_comment(r.get("AdminComment", ""))
            chose = f"{d.get('model', '-')} ({d.get('why', '-')})" if "model" in d else "-"
            if "energy" in d:
                chose += f", energy {d['energy']}"
            pred = d.get("pred")
            if isinstance(pred, dict):
                chose += f", predicted {pred.get('p50')} s (p90 {pred.get('p90')} s)"
            cells.append(chose)
        t.add_row(*cells)
    return t, failed


def load_demo_model(cluster: Cluster, site: Site, console: Console) -> None:
    """The prediction pipeline a site runs, in small: a real trace plus this cluster's own
    accounting (the demo's first jobs) → LightGBM → Lua, compiled into the running bridge."""
    from slurm_hetero.jobs import table
    from slurm_hetero.jobs.swf import read_swf
    from slurm_hetero.jobs.trace import KTH_SP2
    from slurm_hetero.predict import export_lua
    from slurm_hetero.predict.ingest import sacct_jobs
    from slurm_hetero.predict.train import train
    from slurm_hetero.slurm.sacct import next_midnight, parse_when

    out = cluster.workdir / "model"
    out.mkdir(exist_ok=True)
    t0 = time.monotonic()
    today = parse_when("today", "--since")
    own = sacct_jobs(cluster.runner, today, next_midnight(today), out / "sacct.parts")
    jobs = table.merge(read_swf(KTH_SP2).jobs, own)
    lua = out / "predict.lua"
    # The users' history the bridge needs is this cluster's (trace users are other people).
    export_lua.write(export_lua.export_text(train(jobs), own if len(own) else jobs), lua)
    cluster.load_model(site, lua)
    console.print(f"runtime model trained on {KTH_SP2.name} + this cluster's accounting "
                  f"({len(jobs):,} jobs, {len(own)} of them here) in {time.monotonic() - t0:.0f} s, "
                  f"compiled into the bridge ({lua.stat().st_size // 1024} KiB of Lua)")
    time.sleep(1)  # slurmctld re-reads job_submit.lua on the next submission


def run_demo(site_path: Path, workdir: Path, console: Console) -> int:
    site = load_site(site_path)
    cluster = Cluster(workdir)
    took = cluster.up(site, log=console.print)
    console.print(f"cluster [bold]{site.name}[/bold]: {len(site.all_nodes)} nodes idle "
                  f"after {took:.1f} s")
    out_dir = cluster.workdir / "jobs"
    out_dir.mkdir(exist_ok=True)
    runner = cluster.runner

    started = time.time()
    ids = _run_jobs(runner, PLAIN_JOBS, out_dir)
    table, failed = _table("1. plain Slurm requests: where each ran, what it got", runner, ids, False)
    console.print(table)

    load_demo_model(cluster, site, console)

    # Fill the cheapest pool first: `any:2` must then go where it can start now.
    snapshot = cluster.state / "hetero-snapshot.lua"
    filler = submit(runner, ["--gres=gpu:v100:4", "-J", "filler", "-o", "/dev/null"], "sleep 300")
    try:
        if not wait_for_pool(snapshot, "v100@x86_64", 0):
            raise RuntimeFailure("the capacity snapshot did not see the V100s fill up")
        time.sleep(Profile().snapshot_check_s + 0.5)  # the bridge re-reads it this often
        ids = _run_jobs(runner, BRIDGE_JOBS, out_dir)
        table, failed2 = _table("2. the same needs through the bridge (V100 pool full)", runner, ids, True)
    finally:
        runner.run(cancel_argv([filler]), check=False)
    console.print(table)
    r = runner.run(sbatch_wrap_argv(TYPO, "true"), check=False)
    console.print(f"3. a typo is rejected before it queues: [bold]sbatch {' '.join(TYPO)}[/bold] "
                  f"(exit {r.returncode})")
    console.print("\n".join(f"   {ln}" for ln in r.stderr.strip().splitlines()), markup=False)

    failed3 = run_container_demo(cluster, site, console, out_dir)

    cluster.ship_energy()  # the jobs' energy now, not at the nodes' next health check
    report = sacct_report(site, runner, Period(started - 1, time.time(), True, True))
    path = write_html(report, cluster.workdir / "report.html")
    console.print(f"the accounting report of the demo's jobs: [bold]{path}[/bold]")

    console.print(f"\nthe cluster stays up. use it:  [bold]export SLURM_CONF={cluster.conf}[/bold]")
    console.print("   e.g. sbatch --accel=any:2 --tier=gold --wrap 'echo $SLURMD_NODENAME'")
    console.print("        sbatch --image=pytorch:24.05 --gres=npu:1 --wrap 'cat /etc/hetero-variant'")
    console.print(f"stop it: slurm-hetero cluster down --workdir {cluster.workdir}")
    return 1 if failed or failed2 or failed3 or r.returncode == 0 else 0
