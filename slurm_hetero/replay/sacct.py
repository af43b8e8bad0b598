"""What a replayed cluster's accounting says about its jobs: sacct argv, a pure parser.

Fields no user can write (ids, counts, times, states, node lists) come first, so `-P`
output is safe to split; the bridge's admin comment (JSON, set by job_submit.lua) comes
last and is taken whole, whatever it holds. Times come as epoch seconds
(`SLURM_TIME_FORMAT=%s`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.slurm.commands import sacct_window_argv
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import parse_squeue_json

FIELDS = ("JobIDRaw", "Partition", "AllocCPUS", "AllocTRES", "NodeList", "Submit", "Eligible",
          "Start", "End", "ElapsedRaw", "TimelimitRaw", "State", "AdminComment")


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    partition: str
    cpus: int
    tres: dict[str, float]
    nodes: str
    submit: int | None
    eligible: int | None
    start: int | None
    end: int | None
    elapsed: int
    limit_min: int | None
    state: str  # the first word: COMPLETED, TIMEOUT, CANCELLED, NODE_FAIL, ...
    admin: dict[str, Any] = field(default_factory=dict)  # the bridge's decision, if any
    # A requeued job (`by_job`): its earlier incarnations, oldest first.
    earlier: tuple[JobRecord, ...] = ()

    @property
    def predicted_s(self) -> float | None:
        """The bridge's upper-quantile prediction (its first limit in backfill mode)."""
        pred = self.admin.get("pred")
        p90 = pred.get("p90") if isinstance(pred, dict) else None
        return float(p90) if isinstance(p90, int | float) else None

    @property
    def ended_at_own_limit(self) -> bool:
        """Cancelled by the bridge daemon at its own limit, where limits are soft
        (OverTimeLimit): Slurm's TIMEOUT, on such a partition (bridge/daemon.py)."""
        return self.state == "CANCELLED" and self.admin.get("ended") == "own_limit"

    @property
    def accel(self) -> int:
        """Accelerator devices allocated (gres/gpu + gres/npu, whole job)."""
        return int(sum(v for k, v in self.tres.items() if k in ("gres/gpu", "gres/npu")))

    @property
    def accel_model(self) -> str | None:
        """The model of its allocated accelerators (`gres/gpu:a100-80gb=2` → a100-80gb)."""
        for k in self.tres:
            if k.startswith(("gres/gpu:", "gres/npu:")):
                return k.split(":", 1)[1]
        return None


def local_iso(epoch: float) -> str:
    """sacct's -S/-E take local times (not epoch seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def sacct_argv(since: float, until: float) -> list[str]:
    """Allocations (-X) of every user that existed between two epoch times (faked clock),
    every incarnation of a requeued job (-D) included."""
    return sacct_window_argv(local_iso(since), local_iso(until), FIELDS, duplicates=True)


def _time(v: str) -> int | None:
    v = v.strip()
    return int(v) if v.lstrip("-").isdigit() and int(v) > 0 else None


def parse_tres(text: str) -> dict[str, float]:
    """
    >>> parse_tres("billing=4,cpu=4,mem=4G,node=1,gres/gpu=2,gres/gpu:a100-80gb=2")["gres/gpu:a100-80gb"]
    2.0
    """
    out: dict[str, float] = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        if not k:
            continue
        mult = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2}.get(v[-1:], 1.0)
        num = v[:-1] if v[-1:] in "KMGT" and v[-1:] else v
        try:
            out[k] = float(num) * mult
        except ValueError:
            continue
    return out


def parse_rows(text: str) -> list[JobRecord]:
    """`sacct -P -n -o FIELDS` lines (with `SLURM_TIME_FORMAT=%s`) → records."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        f = line.split("|", len(FIELDS) - 1)
        if len(f) != len(FIELDS):
            raise RuntimeFailure(f"sacct line {n}: {len(f)} fields, expected {len(FIELDS)}: {line[:100]!r}")
        d = dict(zip(FIELDS, f, strict=True))
        limit = d["TimelimitRaw"].strip()
        out.append(JobRecord(
            job_id=d["JobIDRaw"].strip(), partition=d["Partition"].strip(),
            cpus=int(d["AllocCPUS"] or 0), tres=parse_tres(d["AllocTRES"]), nodes=d["NodeList"].strip(),
            submit=_time(d["Submit"]), eligible=_time(d["Eligible"]), start=_time(d["Start"]),
            end=_time(d["End"]), elapsed=int(d["ElapsedRaw"] or 0),
            limit_min=int(limit) if limit.isdigit() else None,
            state=(d["State"].split() or ["UNKNOWN"])[0], admin=parse_comment(d["AdminComment"])))
    return out


def by_job(rows: list[JobRecord]) -> dict[str, JobRecord]:
    """One record per job id: its last incarnation, the earlier ones in `earlier` (sacct -D
    lists a requeued job once per incarnation, oldest first, the earlier ones REQUEUED)."""
    groups: dict[str, list[JobRecord]] = {}
    for r in rows:
        groups.setdefault(r.job_id, []).append(r)
    return {jid: dataclasses.replace(g[-1], earlier=tuple(g[:-1])) for jid, g in groups.items()}


def with_live_comments(records: dict[str, JobRecord], squeue_json: str) -> dict[str, JobRecord]:
    """Records whose admin comment sacct left empty get slurmctld's (`squeue --json`): 22.05
    gives slurmdbd the admin comment only when a job ends, so the bridge's decision for the
    jobs still pending or running when the replay stops is read from slurmctld."""
    jobs, _ = parse_squeue_json(squeue_json)
    live = {str(j.job_id): j.admin_comment for j in jobs if j.admin_comment}
    return {k: dataclasses.replace(r, admin=parse_comment(live[k])) if not r.admin and k in live else r
            for k, r in records.items()}


def fetch_text(runner: Runner, since: float, until: float) -> str:
    """sacct's text for `parse_rows` (kept beside each arm's cluster, for a second look)."""
    r = dataclasses.replace(runner, extra_env={**runner.extra_env, "SLURM_TIME_FORMAT": "%s"})
    return r.out(sacct_argv(since, until), timeout=120)


# A job's last incarnation in one of these has not been booked as ended (REQUEUED last: the
# next incarnation is not booked yet).
NOT_ENDED = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING",
                       "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})


def not_ended(text: str) -> list[str]:
    """Jobs of sacct's text whose last incarnation has no final state."""
    return sorted(jid for jid, r in by_job(parse_rows(text)).items() if r.state in NOT_ENDED)


def fetch_settled(runner: Runner, since: float, until: float, wait_s: float = 60.0,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> str:
    """sacct's text once slurmdbd has booked every job's end, for a replay whose jobs have
    all left slurmctld's queue: slurmctld tells slurmdbd of an end a moment later, and a read
    in between shows a job that ended as RUNNING. After `wait_s` real seconds the text is
    taken as it is (and the figures then say what did not end)."""
    deadline = clock() + wait_s
    while True:
        text = fetch_text(runner, since, until)
        if not not_ended(text) or clock() >= deadline:
            return text
        sleep(1.0)
