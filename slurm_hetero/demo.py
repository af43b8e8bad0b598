"""`make demo`: boot the demo cluster, run jobs that need different hardware, show where."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from slurm_hetero.devcluster import Cluster
from slurm_hetero.site import load_site
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_tres

# (what the user wants, plain Slurm options). Later issues add bridge options here.
DEMO_JOBS: list[tuple[str, list[str]]] = [
    ("1 NPU on an ARM node", ["--gres=npu:1", "-C", "aarch64"]),
    ("1 H100", ["--gres=gpu:h100:1"]),
    ("2 A100-80GB", ["--gres=gpu:a100-80gb:2"]),
    ("1 GH200 (ARM + GPU)", ["--gres=gpu:gh200:1"]),
    ("a quarter V100 (shard)", ["--gres=shard:1"]),
    ("32 CPUs, x86", ["-c", "32", "-C", "x86_64"]),
    ("64 CPUs, ARM", ["-c", "64", "-C", "aarch64"]),
]
PROBE = 'echo "$(hostname) gpus=${CUDA_VISIBLE_DEVICES:-none}"'


def run_demo(site_path: Path, workdir: Path, console: Console) -> int:
    site = load_site(site_path)
    cluster = Cluster(workdir)
    took = cluster.up(site, log=console.print)
    console.print(f"cluster [bold]{site.name}[/bold]: {len(site.all_nodes)} nodes idle "
                  f"after {took:.1f} s")
    out_dir = cluster.workdir / "jobs"
    out_dir.mkdir(exist_ok=True)
    runner = cluster.runner
    ids = {}
    for label, opts in DEMO_JOBS:
        jid = submit(runner, [*opts, "-J", "demo", f"--output={out_dir}/%j.out"], PROBE)
        ids[jid] = (label, opts)
    wait_done(runner, list(ids))
    rows = sacct_jobs(runner, list(ids))
    t = Table(title="demo jobs: what each asked for, where it ran, what it got")
    for col in ("job", "asked for", "sbatch options", "partition", "node", "state", "got",
                "billing"):
        t.add_column(col)
    failed = 0
    for jid, (label, opts) in ids.items():
        r = rows.get(jid, {})
        tres = parse_tres(r.get("AllocTRES", ""))
        got = " ".join(f"{k.removeprefix('gres/')}={v}" for k, v in tres.items()
                       if (k.startswith("gres/") and ":" in k) or k == "cpu")
        state = r.get("State", "?")
        failed += state != "COMPLETED"
        t.add_row(str(jid), label, " ".join(opts), r.get("Partition", ""), r.get("NodeList", ""),
                  state if state == "COMPLETED" else f"[red]{state}[/red]", got,
                  tres.get("billing", ""))
    console.print(t)
    console.print(f"the cluster stays up. use it:  [bold]export SLURM_CONF={cluster.conf}[/bold]")
    console.print(f"stop it: slurm-hetero cluster down --workdir {cluster.workdir}")
    return 1 if failed else 0
