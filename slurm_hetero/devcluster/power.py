"""The dev cluster's power method (site `power.method: devcluster`): a node "powers down"
when its slurmd stops and "boots" for `boot_delay` seconds before its slurmd starts again.

Run by the power programs as `python -m slurm_hetero.devcluster.power ACTION --conf
SLURM_CONF NODE` (the power package sits below this one). slurmd restarts with `-b`: on
one machine there is no new boot time, and 22.05's slurmctld takes a resumed node as back
only with one.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from slurm_hetero.devcluster import procs
from slurm_hetero.devcluster.cluster import Cluster
from slurm_hetero.slurm.commands import node_names


def stop(c: Cluster, node: str) -> None:
    d = c.daemon(f"slurmd {node}")
    pid = c.pid(d)
    if d is not None and pid:
        procs.stop(pid, d.expect)


def start(c: Cluster, node: str, boot_delay: float) -> None:
    """Start the node's slurmd after boot_delay; one still running (its suspend failed) is
    restarted: slurmctld takes the node back only from a fresh registration."""
    stop(c, node)
    time.sleep(boot_delay)
    if c.pid(c.daemon("slurmctld")) is None:
        # The cluster went down while the node "booted": a slurmd started now would outlive
        # it (seen: a resume in flight during `cluster down` left one behind). `down` stops
        # slurmctld a moment after the slurmds, so this narrows that window, not closes it.
        return
    c.start_slurmd(node, rebooted=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="slurm_hetero.devcluster.power")
    ap.add_argument("action", choices=("suspend", "resume", "restart"))
    ap.add_argument("--conf", required=True, help="the cluster's slurm.conf (WORKDIR/etc/slurm.conf)")
    ap.add_argument("--boot-delay", type=float, default=0.0)
    ap.add_argument("node")
    a = ap.parse_args(argv)
    try:
        node = node_names([a.node])[0]
    except ValueError as e:
        ap.error(str(e))
    c = Cluster(Path(a.conf).resolve().parent.parent)
    if node not in c.info().get("nodes", []):
        ap.error(f"{node}: not a node of the cluster in {c.workdir}")
    if a.action == "suspend":
        stop(c, node)
    else:
        start(c, node, a.boot_delay)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
