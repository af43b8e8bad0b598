"""TaskProlog: export the allocated indices of GRES that have no Slurm plugin (stdlib only).

Slurm sets CUDA_VISIBLE_DEVICES for gres/gpu; an `npu` GRES gets nothing, so without this
every task on an Ascend node would see all NPUs. slurmstepd runs the TaskProlog before each
task and applies the `export NAME=VALUE` / `unset NAME` lines it prints. The indices come
from the Prolog's device cache (root's, checked by containers/devcache.py, found through the
--conf slurm.conf names), else from slurmctld (`scontrol show job -d`, with a `print` line
saying why), never from the user's environment; host numbering, as a task outside a
container sees every device file. SLURM_HETERO_VERBOSE in the task's environment prints
which of the two it was (a message only: it changes nothing else).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from slurm_hetero.containers.gres import cached_allocation
from slurm_hetero.containers.nodeconf import NodeConfig
from slurm_hetero.errors import HeteroError


def export_lines(gres_env: Mapping[str, list[str]], allocation: Mapping[str, list[int]]) -> list[str]:
    """TaskProlog lines: each plugin-less GRES's variables = its indices, or unset when the
    job holds none here (a value inherited from the submit host must not pose as one)."""
    lines = []
    for gres, names in sorted(gres_env.items()):
        indices = allocation.get(gres)
        for name in names:
            if indices:
                lines.append(f"export {name}={','.join(str(i) for i in indices)}")
            else:
                lines.append(f"unset {name}")
    return lines


SOURCES = {"cache": "the Prolog's cache", "slurmctld": "slurmctld (scontrol)"}


def say(text: str) -> None:
    """One line to the task's output (slurmstepd prints `print` lines there): the TaskProlog's log."""
    print(f"print slurm-hetero taskprolog: {text}".replace("\n", " "))


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[0] != "--conf":
        print("print slurm-hetero taskprolog: usage: taskprolog --conf FILE")
        return 0
    job, node = os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURMD_NODENAME", "")
    try:
        conf = NodeConfig.load(argv[1])
    except HeteroError as e:
        print(f"print slurm-hetero taskprolog: {e}".replace("\n", " "))
        return 0
    try:
        if not job or not node or not conf.gres_env:
            return 0
        if not any(g in conf.node(node).devices for g in conf.gres_env):
            return 0  # no such devices here: nothing to read
        allocation, source = cached_allocation(job, node, conf.path, conf.slurm_conf, say)
        if os.environ.get("SLURM_HETERO_VERBOSE"):
            say(f"job {job}: devices on {node} from {SOURCES[source]}")
        lines = export_lines(conf.gres_env, allocation)
    except HeteroError as e:
        # Never fail the task for this: say why its NPU variables are missing, and unset
        # them, so a value from the submit host does not pose as the allocation.
        print(f"print slurm-hetero taskprolog: {e}".replace("\n", " "))
        sys.stdout.write("".join(line + "\n" for line in export_lines(conf.gres_env, {})))
        return 0
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0
