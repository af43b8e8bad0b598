"""The job's allocated device indices on one node, from `scontrol show job -d` (stdlib only).

Slurm sets CUDA_VISIBLE_DEVICES for gres/gpu, but nothing for a GRES without a plugin
(npu), and the variables in a task's environment are the user's to change. The detail
lines of `scontrol show job -d` come from slurmctld and name every node's indices:

    Nodes=npu-[01-02] CPU_IDs=0 Mem=1024 GRES=npu:910b:2(IDX:0-1)
    Nodes=a100-01 CPU_IDs=2-3 Mem=2048 GRES=gpu:a100-80gb:2(IDX:2-3)
    Nodes=v100-01 CPU_IDs=0-1 Mem=2048 GRES=shard:2(IDX:0)
"""

from __future__ import annotations

import os
import re
import subprocess

from slurm_hetero.errors import RuntimeFailure

_NODES_LINE = re.compile(r"^\s*Nodes=(\S+)\s.*?\bGRES=(\S*)", re.MULTILINE)
_GRES_ITEM = re.compile(r"([A-Za-z0-9_-]+)(?::[^,(]*)?\(IDX:([0-9,\-]*)\)")
_BRACKET = re.compile(r"\[([^\]]+)\]")


def parse_ranges(text: str) -> list[int]:
    """'0-2,5' → [0, 1, 2, 5].

    >>> parse_ranges("0-2,5")
    [0, 1, 2, 5]
    """
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def expand_hostlist(expr: str) -> list[str]:
    """Slurm hostlist → names: 'npu-[01-02],a100-01' → ['npu-01', 'npu-02', 'a100-01'].

    >>> expand_hostlist("r[1-2]-n[01,03]")
    ['r1-n01', 'r1-n03', 'r2-n01', 'r2-n03']
    """
    items, depth, cur = [], 0, ""
    for ch in expr:  # split on commas outside brackets
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    names: list[str] = []
    for item in filter(None, items):
        m = _BRACKET.search(item)
        if not m:
            names.append(item)
            continue
        head, tail = item[: m.start()], item[m.end():]
        for part in m.group(1).split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                names += expand_hostlist(f"{head}{n:0{width}d}{tail}")
    return names


def parse_job_gres(text: str) -> dict[str, dict[str, list[int]]]:
    """{node: {gres name: [indices]}} from `scontrol show job -d` output."""
    out: dict[str, dict[str, list[int]]] = {}
    for nodes, gres in _NODES_LINE.findall(text):
        per: dict[str, list[int]] = {}
        for name, idx in _GRES_ITEM.findall(gres):
            per.setdefault(name, [])
            per[name] += [i for i in parse_ranges(idx) if i not in per[name]]
        for node in expand_hostlist(nodes):
            out[node] = per
    return out


def job_allocation(job_id: str, node: str, slurm_conf: str | None = None,
                   scontrol: str = "scontrol", timeout: float = 20.0) -> dict[str, list[int]]:
    """Indices per GRES name that job `job_id` holds on `node` ({} when none)."""
    if not job_id.isdigit():
        raise RuntimeFailure(f"job id {job_id!r} is not a number")
    env = dict(os.environ)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    try:
        r = subprocess.run([scontrol, "show", "job", "-d", job_id], capture_output=True,
                           text=True, env=env, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeFailure(f"scontrol show job -d {job_id}: {e}") from e
    if r.returncode != 0:
        raise RuntimeFailure(f"scontrol show job -d {job_id} exited {r.returncode}: "
                             f"{r.stderr.strip()[-300:]}")
    return parse_job_gres(r.stdout).get(node, {})
