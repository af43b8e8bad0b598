"""`cluster status`: daemons (from pid files) and nodes (from sinfo)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from slurm_hetero.devcluster.cluster import Cluster
from slurm_hetero.errors import RuntimeFailure


def print_status(c: Cluster, console: Console) -> int:
    """Print the status table; returns 0 when everything runs, 1 otherwise."""
    if not c.info():
        console.print(f"no cluster in {c.workdir} (start one with `slurm-hetero cluster up`)")
        return 1
    t = Table(title=f"cluster {c.info().get('site')} in {c.workdir}")
    t.add_column("daemon")
    t.add_column("pid", justify="right")
    t.add_column("state")
    down = 0
    for d in c.daemons():
        pid = c.pid(d)
        down += pid is None
        t.add_row(d.name, str(pid or "-"), "running" if pid else "[red]stopped[/red]")
    console.print(t)
    try:
        nodes = c.nodes()
    except RuntimeFailure as e:
        console.print(f"sinfo: {e}")
        return 1
    nt = Table(title="nodes")
    for col in ("node", "state", "cpus", "memory", "gres", "features", "partitions"):
        nt.add_column(col)
    for n in nodes.values():
        nt.add_row(n.name, n.state, str(n.cpus), f"{n.memory_mib // 1024}G", n.gres,
                   ",".join(n.features), ",".join(n.partitions))
    console.print(nt)
    return 1 if down else 0
