"""Moving pending jobs to a pool that can start them now (`migration.pending`, off by default).

At submit the bridge picks one pool among those that satisfy a hardware-agnostic request
(`--accel=nvidia:2`, `any:4`, `units=2`) and records all of them in the job's admin comment
(`cands`, best first). Pools change while the job waits: a node is drained, a pool frees up.
Each round the daemon looks at pending single-node jobs that wait for resources; when the
job's own pool cannot start it now and another of its recorded pools can (a node with n
free devices, more free devices than that pool's pending demand), the job is moved there
with `scontrol update` of its features, GRES count and partition, and the move is recorded
in the admin comment (`moves`, `moved_from`, `moved_at`, `why`).

How a job is placed so that it can move: Slurm 22.05 cannot change the GRES *type* of a
pending job (`scontrol update TresPerNode=gres:gpu:a100-80gb:2` of a `gpu:v100:2` job keeps
both types in its request: BadConstraints for good; typed to untyped is refused), so on a
site with `migration.pending` the bridge asks for such a job's GRES untyped
(`gres:gpu:2`) and pins the model with its node feature (`x86_64&v100`); Slurm allocates
the typed devices (AllocTRES says `gres/gpu:v100=2`, billing follows), and a move rewrites
the feature (`x86_64&a100-80gb`) and the count. The bridge marks such jobs `movable`.

Guards: only jobs the bridge placed (its record, which users cannot write), only among the
pools it recorded (the request's own arch, partition and memory rules), never a job that is
held or waits for something else (dependency, begin time), a job waits `pending_after`
between moves and moves at most `max_moves` times, GRES kinds (gpu/npu) are kept unless the
site allows otherwise and the job has no GPU frequency policy, the arch is kept for a job
with a container image (its variants decided the arch), and the user's own constraint is
kept (a feature expression the daemon cannot rewrite safely keeps the job's arch).
Multi-node jobs are left where they are (the snapshot counts devices per node, not nodes).

Running jobs (`migration.running`, needs `pending`): a job submitted with --checkpoint and
--migratable, running on one node, is requeued into another pool of its request that has
room now when that saves at least `running_gain` of its remaining time, `restart_cost`
included (work runs as fast as the normalized units it holds; what is left is the bridge's
prediction less the run time, else the limit's). The record first names the target
(`migrate_to`, `migrated`), then `scontrol requeue` ends the job (SIGTERM, KillWait,
SIGKILL: the job checkpoints on SIGTERM, or has committed its last checkpoint already);
once pending again it is moved there and its requeue hold lifted. Once per job: after a
restart its run time starts at 0 again and its progress is not known here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from slurm_hetero.bridge.snapshot import PoolCapacity, room_for
from slurm_hetero.site.model import MigrationSettings, Site
from slurm_hetero.site.pools import Pool, pools
from slurm_hetero.slurm.comment import parse_comment, replace_comment
from slurm_hetero.slurm.squeue import QueuedJob

# Reasons of a job that waits for nodes (22.05 and 24.11 spellings); anything else (held,
# dependency, begin time, limits) is not the pool's fault.
WAITING_FOR_NODES = frozenset({
    "Resources", "Priority", "ReqNodeNotAvail",
    "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions",
})
_CAND = re.compile(r"([a-z0-9][a-z0-9._-]{0,63}@[a-z0-9_]{1,16}):(\d{1,4})")


@dataclass(frozen=True)
class Move:
    job_id: int
    from_pool: str
    to_pool: str
    n: int
    tres_per_node: str
    partition: str
    features: str
    comment: str  # the new admin comment
    why: str
    release: bool = False  # a requeued job: also lift the requeue's begin-time hold
    cpus: int = 0  # its CPUs and memory on the node (QueuedJob.cpus_node, mem_node_mib): what
    mem_mib: int = 0  # the move takes from the pool's fit besides its devices


def parse_cands(text: object) -> list[tuple[str, int]]:
    """The bridge's `cands` record: "pool:n,pool:n" ([] if absent or malformed).

    >>> parse_cands("v100@x86_64:2,a100-80gb@x86_64:2")
    [('v100@x86_64', 2), ('a100-80gb@x86_64', 2)]
    >>> parse_cands("v100@x86_64:2,oops"), parse_cands(7)
    ([], [])
    """
    if not isinstance(text, str) or len(text) > 4096:
        return []
    out = []
    for item in text.split(","):
        m = _CAND.fullmatch(item)
        if m is None:
            return []
        out.append((m.group(1), int(m.group(2))))
    return out


def rewrite_place(features: str, old: str, new: str) -> str | None:
    """The job's feature expression with the place the bridge pinned (`ARCH&MODEL`, after the
    user's own constraint in parentheses) swapped; None when it is not in that shape.

    >>> rewrite_place("x86_64&v100", "x86_64&v100", "aarch64&gh200")
    'aarch64&gh200'
    >>> rewrite_place("(ib|opa)&x86_64&v100", "x86_64&v100", "x86_64&h100")
    '(ib|opa)&x86_64&h100'
    >>> rewrite_place("ib&x86_64&v100", "x86_64&v100", "x86_64&h100") is None
    True
    """
    if features == old:
        return new
    suffix = ")&" + old
    if features.startswith("(") and features.endswith(suffix):
        return features[: -len(old)] + new
    return None


@dataclass(frozen=True)
class Requeue:
    """A running job to checkpoint and requeue: its record already names where it goes
    (`migrate_to`); once it is pending again a Move takes it there and releases it."""

    job_id: int
    from_pool: str
    to_pool: str
    comment: str
    why: str


@dataclass(frozen=True)
class _Target:
    pool: Pool
    n: int
    cost: float
    order: int
    features: str
    partition: str
    mem_mib: int  # what the job takes on one of its nodes (node_mem)


def node_mem(job: QueuedJob, d: dict[str, Any], pool: Pool) -> int:
    """The memory MiB `job` takes on one node of `pool`: all of it for a `--mem=0` job, which
    squeue shows as 0 (as where memory is not counted) but the bridge recorded ("mem": "node",
    in the admin comment users cannot write), else what squeue shows."""
    return pool.mem_mib if d.get("mem") == "node" else job.mem_node_mib


class Planner:
    def __init__(self, site: Site, policy: MigrationSettings | None = None):
        self.site = site
        self.policy = policy or site.migration
        self.pools: dict[str, Pool] = {p.key: p for p in pools(site)}

    def plan(self, jobs: list[QueuedJob], caps: dict[str, PoolCapacity], now: float
             ) -> list[Move]:
        """Moves of pending jobs for this round, oldest job first; `caps` is not changed (a
        copy takes each move's devices, so two jobs are never sent to the same free devices)."""
        left = {k: replace(c) for k, c in caps.items()}
        moves = []
        for job in sorted(jobs, key=lambda j: (j.submit_time or now, j.job_id)):
            move = self.move_for(job, left, now)
            if move is not None:
                moves.append(move)
                take(left[move.to_pool], move.n, move.cpus, move.mem_mib)
        return moves

    def plan_running(self, jobs: list[QueuedJob], caps: dict[str, PoolCapacity], now: float
                     ) -> list[Requeue]:
        """Running --checkpoint --migratable jobs to requeue into a pool with room now, when
        that saves at least `running_gain` of their remaining time, restart included. Work
        is taken to go as fast as the normalized units a job holds (n x units per device);
        the remaining time is the bridge's prediction less the run time, else the limit's."""
        if not self.policy.running:
            return []
        left = {k: replace(c) for k, c in caps.items()}
        out = []
        for job in sorted(jobs, key=lambda j: (j.start_time or now, j.job_id)):
            r = self.requeue_for(job, left, now)
            if r is not None:
                out.append(r[0])
                take(left[r[0].to_pool], r[1], job.cpus_node, r[2])
        return out

    # ---- one job ---------------------------------------------------------------------
    def _record(self, job: QueuedJob) -> tuple[dict[str, Any], Pool, int, list[tuple[str, int]]] | None:
        """The bridge's record of a movable single-node job: (record, pool, n there, cands)."""
        if job.node_count != 1:
            return None
        d = parse_comment(job.admin_comment)
        if d.get("hetero") != 1 or d.get("movable") is not True or not isinstance(d.get("pool"), str):
            return None
        cands = parse_cands(d.get("cands"))
        here = self.pools.get(d["pool"])
        n_here = next((n for k, n in cands if k == d["pool"]), None)
        moves = d.get("moves", 0)
        if here is None or n_here is None or not isinstance(moves, int) or moves >= self.policy.max_moves:
            return None
        return d, here, n_here, cands

    def _targets(self, job: QueuedJob, d: dict[str, Any], here: Pool, cands: list[tuple[str, int]],
                 caps: dict[str, PoolCapacity]) -> list[_Target]:
        """The other pools of the request with room now, cheapest first."""
        here_model = self.site.catalog[here.model]
        out = []
        for order, (key, n) in enumerate(cands):
            pool, cap = self.pools.get(key), caps.get(key)
            if pool is None or cap is None or key == here.key:
                continue
            mem = node_mem(job, d, pool)
            if not (room_for(cap, n, job.cpus_node, mem) and cap.free - cap.pending >= n):
                continue
            model = self.site.catalog[pool.model]
            if model.gres_name != here_model.gres_name and (not self.policy.across_gres or "energy" in d):
                continue
            if pool.arch != here.arch and "image" in d:
                continue
            features = rewrite_place(job.features, f"{here.arch}&{here.model}", f"{pool.arch}&{pool.model}")
            if features is None:
                continue
            partitions = [p for p in job.partition.split(",") if p]
            partition = job.partition if any(p in pool.partitions for p in partitions) \
                else ",".join(pool.partitions)
            out.append(_Target(pool, n, n * model.units, order, features, partition, mem))
        return sorted(out, key=lambda t: (t.cost, t.order))

    def _move(self, job: QueuedJob, d: dict[str, Any], here: Pool, t: _Target, now: float, why: str,
              release: bool) -> Move:
        model = self.site.catalog[t.pool.model]
        record = {k: v for k, v in d.items() if k != "migrate_to"}
        record.update(pool=t.pool.key, model=t.pool.model, n=t.n, units=round(t.cost, 2),
                      why=why, moved_from=here.key, moved_at=int(now))
        if not release:  # a requeued job's move was counted when it was requeued
            record["moves"] = int(d.get("moves", 0)) + 1
        prefix = "gres/" if job.tres_per_node.startswith("gres/") else "gres:"
        return Move(job_id=job.job_id, from_pool=here.key, to_pool=t.pool.key, n=t.n,
                    tres_per_node=f"{prefix}{model.gres_name}:{t.n}", partition=t.partition,
                    features=t.features, comment=replace_comment(job.admin_comment, record),
                    why=why, release=release, cpus=job.cpus_node, mem_mib=t.mem_mib)

    def move_for(self, job: QueuedJob, caps: dict[str, PoolCapacity], now: float) -> Move | None:
        if job.state != "PENDING":
            return None
        rec = self._record(job)
        if rec is None:
            return None
        d, here, n_here, cands = rec
        intent = d.get("migrate_to")
        if isinstance(intent, str) and job.reason in WAITING_FOR_NODES | {"BeginTime"}:
            # Requeued to move: go where the requeue was for if there is still room, and
            # skip the requeue's begin-time hold (its checkpoint is written).
            ts = self._targets(job, d, here, cands, caps)
            t = next((t for t in ts if t.pool.key == intent), None)
            if t is not None:
                return self._move(job, d, here, t, now, f"migrated from {here.key}: requeued to run "
                                  f"sooner on {intent}", release=True)
        if job.reason not in WAITING_FOR_NODES:
            return None
        since = d.get("moved_at") if isinstance(d.get("moved_at"), int | float) else job.submit_time
        if since is None or now - float(since) < self.policy.pending_after_s:
            return None
        cur = caps.get(here.key)
        mem_here = node_mem(job, d, here)
        if cur is not None and room_for(cur, n_here, job.cpus_node, mem_here):
            return None  # its own pool has a node with room: Slurm will start it there
        ts = self._targets(job, d, here, cands, caps)
        if not ts:
            return None
        t = ts[0]
        free_here = cur.free_max_node if cur else 0
        # with node_fit, devices free beside busy cores (or taken memory) are no room either
        short = f"{free_here} of {n_here} free on one node" if free_here < n_here else \
            f"{n_here} free on one node, but not with {job.cpus_node} CPUs and {mem_here} MiB"
        return self._move(job, d, here, t, now,
                          f"moved: {here.key} cannot start it now ({short}), {t.pool.key} can "
                          f"({caps[t.pool.key].free_max_node} free)", release=False)

    def requeue_for(self, job: QueuedJob, caps: dict[str, PoolCapacity], now: float
                    ) -> tuple[Requeue, int, int] | None:
        if job.state != "RUNNING" or not job.start_time:
            return None
        rec = self._record(job)
        if rec is None:
            return None
        d, here, n_here, cands = rec
        if d.get("migratable") is not True or not isinstance(d.get("checkpoint"), str):
            return None
        if d.get("migrated") is True:
            # Once per job: a restarted job's run time starts again at 0 and its work so far
            # is unknown here, so "what is left" would be guessed from the limit again.
            return None
        elapsed = max(0.0, now - job.start_time)
        if elapsed < self.policy.restart_cost_s:
            return None  # just started (or just moved): let it work first
        pred = d.get("pred")
        p50 = pred.get("p50") if isinstance(pred, dict) else None
        if isinstance(p50, int | float) and not isinstance(p50, bool) and p50 > elapsed:
            left = float(p50) - elapsed
        elif job.time_limit_min:
            left = job.time_limit_min * 60.0 - elapsed
        else:
            return None
        speed_here = n_here * self.site.catalog[here.model].units
        for t in self._targets(job, d, here, cands, caps):
            after = self.policy.restart_cost_s + left * speed_here / t.cost
            if left - after >= self.policy.running_gain * left:
                record = {**d, "migrate_to": t.pool.key, "moves": int(d.get("moves", 0)) + 1,
                          "migrated": True}
                why = (f"{t.pool.key} has room: about {human_s(after)} left there instead of "
                       f"{human_s(left)} on {here.key}, restart included")
                return Requeue(job.job_id, here.key, t.pool.key,
                               replace_comment(job.admin_comment, record), why), t.n, t.mem_mib
        return None


def take(cap: PoolCapacity, n: int, cpus: int = 0, mem_mib: int = 0) -> None:
    """A move's devices (and CPUs and memory) are no longer free for the rest of the round.
    Where the pool keeps its fit, what is left is a lower bound whichever node the job lands
    on: the node of old entry k + n still has k devices free, and at least its CPUs and
    memory less the job's."""
    cap.free -= n
    cap.free_max_node = max(0, cap.free_max_node - n)
    if cap.fit is not None:  # a new list: plan() works on shallow copies of the snapshot's
        cap.fit = [(max(0, c - cpus), max(0, m - mem_mib)) for c, m in cap.fit[n:]]


def take_moves(caps: dict[str, PoolCapacity], moves: list[Move]) -> None:
    """The round's applied moves, taken from the capacity its requeues are then planned on:
    devices, CPUs and memory (or a running job is requeued into the node a move took)."""
    for m in moves:
        if m.to_pool in caps:
            take(caps[m.to_pool], m.n, m.cpus, m.mem_mib)


def human_s(seconds: float) -> str:
    """
    >>> human_s(59), human_s(600), human_s(5400)
    ('59 s', '10 min', '1.5 h')
    """
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
