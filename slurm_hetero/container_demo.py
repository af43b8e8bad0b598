"""The containers part of `make demo`: one job script, the image variant for each node."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from slurm_hetero.containers.bundle import busybox_variants
from slurm_hetero.devcluster import Cluster
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done

CONTAINER_JOBS: list[tuple[str, list[str]]] = [
    ("an x86 GPU node", ["--image=pytorch:24.05", "--gres=gpu:a100-80gb:1"]),
    ("an ARM NPU node", ["--image=pytorch:24.05", "--gres=npu:1"]),
    ("an ARM GPU node (GH200)", ["--image=pytorch:24.05", "--gres=gpu:gh200:1"]),
]
# The V100 node's driver runs CUDA <= 12.2: the wrapper refuses the 12.4 build there.
REFUSED = ("the V100 node (old driver)", ["--image=pytorch:24.05", "--gres=gpu:v100:1"])
PROBE = ('echo "$(hostname)|$(cat /etc/hetero-variant)|'
         '$(ls /dev | grep -E "^(nvidia|davinci)" | tr "\\n" " ")|'
         '${CUDA_VISIBLE_DEVICES:-}${ASCEND_RT_VISIBLE_DEVICES:-}"')


def run_container_demo(cluster: Cluster, site: Site, console: Console, out_dir: Path) -> int:
    """Submit the same script with --image to different nodes; returns unexpected outcomes."""
    busybox_variants(site, str(cluster.workdir / "images"))  # stand-ins for the catalog's images
    runner = cluster.runner
    jobs = [*CONTAINER_JOBS, REFUSED]
    ids = {submit(runner, [*opts, "-J", "demo-image", f"--output={out_dir}/%j.out"], PROBE): (label, opts)
           for label, opts in jobs}
    wait_done(runner, list(ids))
    rows = sacct_jobs(runner, list(ids))
    t = Table(title="4. one script, --image=pytorch:24.05: the variant for each node, only its devices")
    for col in ("job", "sent to", "options", "node", "state", "image variant inside", "devices inside",
                "visible"):
        t.add_column(col)
    bad = 0
    for jid, (label, opts) in ids.items():
        state = rows.get(jid, {}).get("State", "?")
        text = (out_dir / f"{jid}.out").read_text().strip() if (out_dir / f"{jid}.out").exists() else ""
        parts = text.split("|") if text.count("|") == 3 else ["", text, "", ""]
        expected = "FAILED" if (label, opts) == REFUSED else "COMPLETED"
        bad += state != expected
        t.add_row(str(jid), label, " ".join(opts), rows.get(jid, {}).get("NodeList", ""),
                  state if state == expected else f"[red]{state}[/red]", parts[1], parts[2], parts[3])
    console.print(t)
    return bad
