"""One job as slurmdbd recorded it: `sacct --json -j ID` (pure parser, captured output in
tests/data/captured/sacct-json-*-22.05.json and -24.11.json), and the same record from
slurmctld's `squeue --json` for a job slurmdbd has not heard of yet.

JSON rather than `-P`: the job and step names, the work dir and the comment are user text
and arrive as JSON strings, so no name can pose as a step line with made-up figures.
Shapes read: data_parser v0.0.38 (22.05: plain numbers, `state.current` a string, step ids
`batch`/0, `required.memory` in MB with per-CPU memory flagged by Slurm's MEM_PER_CPU bit)
and v0.0.41 (24.11: numbers as `{"set", "infinite", "number"}`, states as lists, step ids
`12.batch`, `required.memory_per_node` / `memory_per_cpu`); both keep the admin comment in
`comment.administrator`.

Step figures: CPU time is each step's `time.total` (seconds + microseconds; 22.05 may hold
more than 10^6 microseconds); MaxRSS is the `mem` entry of `tres.requested.max` (bytes),
recorded only when the step lived past a JobAcctGatherFrequency sample.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from slurm_hetero.slurm.squeue import json_number

MAX_JSON_BYTES = 64 << 20  # one job with thousands of steps stays well below
_MEM_PER_CPU = 0x8000000000000000  # Slurm's MEM_PER_CPU flag on a 22.05 memory value
_NO_VAL = 0xFFFFFFFE


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _text(v: Any) -> str:
    if isinstance(v, list):
        v = v[0] if v else ""
    return v if isinstance(v, str) else ""


def _seconds(v: Any) -> float | None:
    """`{"seconds": S, "microseconds": U}` or a plain number."""
    if isinstance(v, dict) and "seconds" in v:
        s, us = json_number(v.get("seconds")), json_number(v.get("microseconds")) or 0.0
        return None if s is None else s + us / 1e6
    return json_number(v)


def _time(v: Any) -> float | None:
    t = json_number(v)
    return t if t else None  # 0: not yet (pending jobs have start 0)


def _tres(items: Any) -> dict[str, float]:
    """`[{"type": "gres", "name": "gpu:h100", "count": 2}, ...]` → {"gres/gpu:h100": 2}."""
    out: dict[str, float] = {}
    if not isinstance(items, list):
        return out
    for it in items:
        if not isinstance(it, dict):
            continue
        kind, name, count = _text(it.get("type")), _text(it.get("name")), json_number(it.get("count"))
        if kind and count is not None:
            key = f"{kind}/{name}" if name else kind
            out[key] = out.get(key, 0.0) + count
    return out


@dataclass(frozen=True)
class Step:
    step: str  # batch, extern, 0, 1, ...
    name: str
    state: str
    elapsed_s: float | None
    cpu_s: float | None
    max_rss_bytes: float | None  # None: not sampled
    nodes: str


@dataclass(frozen=True)
class JobRecord:
    job_id: int
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: str
    reason: str
    submit: float | None
    eligible: float | None
    start: float | None
    end: float | None
    elapsed_s: float | None
    limit_s: float | None  # None: no limit recorded (UNLIMITED or not set)
    req_cpus: float | None
    req_mem_mb: float | None  # for the whole job (per-CPU requests multiplied out)
    mem_per_cpu: bool
    nodes: str  # hostlist; "" before it ran
    node_count: float | None
    constraints: str
    requested: dict[str, float]  # TRES: cpu, mem (MB), node, gres/gpu:h100, ...
    allocated: dict[str, float]
    admin_comment: str
    exit_code: str
    steps: tuple[Step, ...] = field(default_factory=tuple)

    @property
    def alloc_cpus(self) -> float | None:
        return self.allocated.get("cpu")

    def cpu_seconds(self) -> float | None:
        """CPU time of all steps (the job-level total stays 0 in 22.05's JSON)."""
        parts = [s.cpu_s for s in self.steps if s.cpu_s is not None]
        return sum(parts) if parts else None

    def max_rss_bytes(self) -> float | None:
        parts = [s.max_rss_bytes for s in self.steps if s.max_rss_bytes is not None]
        return max(parts) if parts else None


def _memory(j: dict[str, Any], cpus: float | None) -> tuple[float | None, bool]:
    req = _obj(j.get("required"))
    per_node, per_cpu = json_number(req.get("memory_per_node")), json_number(req.get("memory_per_cpu"))
    nodes = json_number(j.get("allocation_nodes")) or 1.0
    if per_cpu:
        return per_cpu * (cpus or 1.0), True
    if per_node:
        return per_node * nodes, False
    mem = json_number(req.get("memory"))
    if mem is None or mem <= 0 or mem >= _NO_VAL:
        return None, False
    if int(mem) & _MEM_PER_CPU:
        return (int(mem) & ~_MEM_PER_CPU) * (cpus or 1.0), True
    return mem * nodes, False


def _step(s: dict[str, Any]) -> Step:
    st = _obj(s.get("step"))
    sid = st.get("id")
    if isinstance(sid, dict):  # v0.0.40+: {"job_id": .., "step_id": ..}
        sid = sid.get("step_id")
    num = json_number(sid)
    step_id = _text(sid) or ("" if num is None else str(int(num)))
    step_id = step_id.split(".", 1)[1] if "." in step_id else step_id  # 24.11: "12.batch"
    t = _obj(s.get("time"))
    tres = _obj(s.get("tres"))
    usage = _obj(tres.get("requested"))
    rss = _tres(usage.get("max")).get("mem")
    nodes = _obj(s.get("nodes"))
    return Step(
        step=step_id,
        name=_text(st.get("name")),
        state=_text(s.get("state")).upper(),
        elapsed_s=json_number(t.get("elapsed")),
        cpu_s=_seconds(t.get("total")),
        max_rss_bytes=rss if rss else None,
        nodes=_text(nodes.get("range")),
    )


def _job(j: dict[str, Any]) -> JobRecord:
    t = _obj(j.get("time"))
    state = _obj(j.get("state"))
    tres = _obj(j.get("tres"))
    comment = j.get("comment")
    admin = (
        _text(comment.get("administrator")) if isinstance(comment, dict) else _text(j.get("admin_comment"))
    )
    limit = json_number(t.get("limit"))
    limit_s = None if limit is None or limit <= 0 or limit >= _NO_VAL else limit * 60.0
    requested, allocated = _tres(tres.get("requested")), _tres(tres.get("allocated"))
    req = _obj(j.get("required"))
    cpus = json_number(req.get("CPUs")) or requested.get("cpu")
    mem, per_cpu = _memory(j, cpus)
    ec = _obj(j.get("exit_code"))
    rc = json_number(ec.get("return_code"))
    steps = tuple(_step(s) for s in j.get("steps", []) if isinstance(s, dict))
    nodes = _text(j.get("nodes"))
    start = _time(t.get("start"))
    return JobRecord(
        job_id=int(json_number(j.get("job_id")) or 0),
        name=_text(j.get("name")),
        user=_text(j.get("user")),
        account=_text(j.get("account")),
        partition=_text(j.get("partition")),
        qos=_text(j.get("qos")),
        state=_text(state.get("current")).upper(),
        reason=_text(state.get("reason")),
        submit=_time(t.get("submission")),
        eligible=_time(t.get("eligible")),
        start=start,
        end=_time(t.get("end")),
        elapsed_s=json_number(t.get("elapsed")) if start else None,
        limit_s=limit_s,
        req_cpus=cpus,
        req_mem_mb=mem,
        mem_per_cpu=per_cpu,
        nodes="" if nodes in ("None assigned", "(null)") else nodes,
        node_count=json_number(j.get("allocation_nodes")) if start else None,
        constraints=_text(j.get("constraints")),
        requested=requested,
        allocated=allocated,
        admin_comment=admin,
        exit_code=f"{_text(ec.get('status'))}:{'' if rc is None else int(rc)}",
        steps=steps,
    )


def parse_sacct_job_json(text: str, job_id: int) -> JobRecord | None:
    """The record of `job_id` in a `sacct --json -j JOB_ID` answer; None when slurmdbd has
    none (sacct answers "Nothing found" then). ValueError for an unusable document.
    A requeued job has one record per run: the last one is the job now."""
    if len(text) > MAX_JSON_BYTES:
        raise ValueError(f"sacct --json answer of {len(text)} bytes is too large")
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ValueError("sacct --json answer has no jobs list")
    found = [j for j in doc["jobs"] if isinstance(j, dict) and json_number(j.get("job_id")) == job_id]
    return _job(found[-1]) if found else None


def parse_admin_level(text: str) -> str:
    """`sacctmgr -n -P show user NAME format=AdminLevel` → None, Operator or Administrator
    ("" for a user the database does not know)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""


_MB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


def tres_numbers(text: str) -> dict[str, float]:
    """A TRES list as numbers, memory in MB.

    >>> tres_numbers("cpu=2,mem=4G,gres/gpu:h100=2,bad")
    {'cpu': 2.0, 'mem': 4096.0, 'gres/gpu:h100': 2.0}
    """
    out: dict[str, float] = {}
    for item in text.split(","):
        key, _, value = item.strip().partition("=")
        if not key or not value:
            continue
        unit = value[-1].upper() if value[-1].isalpha() else ""
        try:
            number = float(value[:-1] if unit else value)
        except ValueError:
            continue
        out[key] = number * _MB.get(unit, 1.0) if key == "mem" else number
    return out


def record_from_squeue(text: str, job_id: int) -> JobRecord | None:
    """The same record from slurmctld's `squeue --json`, for a job slurmdbd has not heard of
    yet (it learns of a new job a moment after submission). No steps, no usage figures."""
    if len(text) > 1 << 30:
        raise ValueError(f"squeue --json answer of {len(text)} bytes is too large")
    doc = json.loads(text)
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise ValueError("squeue --json answer has no jobs list")
    j = next((x for x in jobs if isinstance(x, dict) and json_number(x.get("job_id")) == job_id), None)
    if j is None:
        return None
    limit = json_number(j.get("time_limit"))
    cpus = json_number(j.get("cpus"))
    start = _time(j.get("start_time"))
    state = _text(j.get("job_state")).upper()
    per_cpu, per_node = json_number(j.get("memory_per_cpu")), json_number(j.get("memory_per_node"))
    nodes = json_number(j.get("node_count")) or 1.0
    mem = per_cpu * (cpus or 1.0) if per_cpu else per_node * nodes if per_node else None
    running = start is not None and state != "PENDING"
    return JobRecord(
        job_id=job_id, name=_text(j.get("name")), user=_text(j.get("user_name")),
        account=_text(j.get("account")), partition=_text(j.get("partition")), qos=_text(j.get("qos")),
        state=state, reason=_text(j.get("state_reason")), submit=_time(j.get("submit_time")),
        eligible=_time(j.get("eligible_time")), start=start if running else None, end=None,
        elapsed_s=None, limit_s=None if limit is None or limit <= 0 or limit >= _NO_VAL else limit * 60.0,
        req_cpus=cpus, req_mem_mb=mem, mem_per_cpu=bool(per_cpu),
        nodes=_text(j.get("nodes")) if running else "", node_count=nodes if running else None,
        constraints=_text(j.get("features")), requested=tres_numbers(_text(j.get("tres_req_str"))),
        allocated=tres_numbers(_text(j.get("tres_alloc_str"))) if running else {},
        admin_comment=_text(j.get("admin_comment")), exit_code="", steps=())
