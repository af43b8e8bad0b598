"""`squeue --json`: every job slurmctld holds, each field a separate JSON value.

User text (comment, name, work dir) arrives as a JSON string and can never pose as another
field, unlike the `Key=Value` text of `scontrol show job -o`. On 22.05 (data_parser
v0.0.38) `-j`/`-p`/`-u` are ignored with `--json`: the answer is every job. From v0.0.40
(23.11+) numbers may come as `{"set": bool, "infinite": bool, "number": N}` and
`job_state` as a list; both shapes are read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any


def squeue_json_argv() -> list[str]:
    """`squeue --json`: every job slurmctld lists, as structured fields."""
    return ["squeue", "--json"]


MAX_JSON_BYTES = 1 << 30  # a 22.05 job is ~5 KB: room for ~200k jobs


@dataclass(frozen=True)
class QueuedJob:
    job_id: int
    state: str
    user: str
    name: str
    partition: str
    time_limit_min: int | None  # None: no limit (INFINITE / partition default unknown)
    submit_time: float | None
    start_time: float | None
    admin_comment: str
    gres_detail: tuple[str, ...]
    nodes: str
    tres_per_node: str = ""
    features: str = ""
    node_count: int = 1
    reason: str = ""  # why a pending job waits (Resources, Priority, JobHeldUser, Dependency, ...)
    # A running job's end by its current limit, as slurmctld keeps it (time suspended and
    # node boot time added): where Slurm's own time-limit check starts from.
    end_time: float | None = None
    # What one node must hold, as slurmctld has it (0: unknown): CPUs (the per-node minimum,
    # or a one-node job's whole count) and memory in MiB (per node, or per CPU x those CPUs).
    cpus_node: int = 0
    mem_node_mib: int = 0


def json_number(v: Any) -> float | None:
    """A number of Slurm's JSON output in either shape (a plain number, or 23.02+'s
    {"set", "infinite", "number"}); None for unset, infinite or not a number.

    >>> json_number(5), json_number({"set": True, "number": 7}), json_number({"set": False})
    (5.0, 7.0, None)
    """
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite", False):
            return None
        v = v.get("number")
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _state(v: Any) -> str:
    if isinstance(v, list):
        v = v[0] if v else ""
    return _text(v).upper()


def _count(v: Any) -> int:
    """A count of Slurm's JSON output; 0 when unset, infinite or NO_VAL (22.05 spells those
    as numbers from 0xFFFFFFFE up)."""
    n = json_number(v)
    return int(n) if n is not None and 0 < n < 0xFFFFFFFE else 0


def node_need(j: dict[str, Any]) -> tuple[int, int]:
    """(CPUs, memory MiB) one node of the job must hold, from a `squeue --json` job.

    >>> node_need({"cpus": 12, "node_count": 1, "minimum_cpus_per_node": 1, "memory_per_cpu": 1024})
    (12, 12288)
    >>> node_need({"cpus": {"number": 8}, "node_count": 2, "minimum_cpus_per_node": 4,
    ...            "memory_per_node": {"set": True, "number": 0}})
    (4, 0)
    >>> node_need({"cpus": 4294967294, "node_count": 1, "minimum_cpus_per_node": 65534})
    (0, 0)

    Memory 0 counts as no need: squeue shows 0 for `--mem=0` (Slurm's whole node) and where
    nothing was said with no DefMemPerCPU (24.11's capture), which this cannot tell apart.
    The bridge's Lua sees `--mem=0` itself (min_mem_per_node 0) and records it for the
    daemon's moves ("mem": "node", bridge/migrate.node_mem).
    """
    per_node, nodes = _count(j.get("minimum_cpus_per_node")), _count(j.get("node_count")) or 1
    if per_node >= 0xFFFE:  # a 16-bit field: NO_VAL16 / INFINITE16 say "not set"
        per_node = 0
    cpus = max(per_node, _count(j.get("cpus"))) if nodes == 1 else per_node
    mem = _count(j.get("memory_per_node")) or _count(j.get("memory_per_cpu")) * cpus
    return cpus, mem


def parse_job(j: Any) -> QueuedJob:
    """One job object → QueuedJob; ValueError when it lacks an id."""
    if not isinstance(j, dict):
        raise ValueError("job entry is not an object")
    jid = json_number(j.get("job_id"))
    if jid is None or jid <= 0 or jid != int(jid):
        raise ValueError(f"job entry without a valid job_id: {str(j.get('job_id'))[:40]!r}")
    limit = json_number(j.get("time_limit"))
    # 22.05 reports "no limit" as 4294967295 (INFINITE) and unset as 4294967294 (NO_VAL).
    if limit is not None and (limit < 0 or limit >= 0xFFFFFFFE):
        limit = None
    start = json_number(j.get("start_time"))
    end = json_number(j.get("end_time"))
    submit = json_number(j.get("submit_time"))
    gres = j.get("gres_detail")
    cpus, mem = node_need(j)
    return QueuedJob(
        job_id=int(jid), state=_state(j.get("job_state")), user=_text(j.get("user_name")),
        name=_text(j.get("name")), partition=_text(j.get("partition")),
        time_limit_min=None if limit is None else int(limit),
        submit_time=submit if submit else None, start_time=start if start else None,
        admin_comment=_text(j.get("admin_comment")),
        gres_detail=tuple(g for g in gres if isinstance(g, str)) if isinstance(gres, list) else (),
        nodes=_text(j.get("nodes")), tres_per_node=_text(j.get("tres_per_node")),
        features=_text(j.get("features")), node_count=int(json_number(j.get("node_count")) or 1),
        reason=_text(j.get("state_reason")), end_time=end if end else None,
        cpus_node=cpus, mem_node_mib=mem)


def parse_squeue_json(text: str) -> tuple[list[QueuedJob], list[str]]:
    """(jobs, problems): a malformed job entry is skipped and named in `problems`, so one
    bad job never hides the others. ValueError only when the document itself is unusable."""
    if len(text) > MAX_JSON_BYTES:
        raise ValueError(f"squeue --json answer of {len(text)} bytes is too large")
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ValueError("squeue --json answer has no jobs list")
    jobs, problems = [], []
    for i, j in enumerate(doc["jobs"]):
        try:
            jobs.append(parse_job(j))
        except ValueError as e:
            problems.append(f"job entry {i}: {e}")
    return jobs, problems
