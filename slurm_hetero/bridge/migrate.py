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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from slurm_hetero.bridge.snapshot import PoolCapacity
from slurm_hetero.site.model import MigrationSettings, Site
from slurm_hetero.site.pools import Pool, pools
from slurm_hetero.slurm.comment import parse_comment
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


class Planner:
    def __init__(self, site: Site, policy: MigrationSettings | None = None):
        self.site = site
        self.policy = policy or site.migration
        self.pools: dict[str, Pool] = {p.key: p for p in pools(site)}

    def plan(self, jobs: list[QueuedJob], caps: dict[str, PoolCapacity], now: float
             ) -> list[Move]:
        """Moves for this round, oldest job first; `caps` is not changed (a copy takes each
        move's devices, so two jobs are never sent to the same free devices)."""
        left = {k: replace(c) for k, c in caps.items()}
        moves = []
        for job in sorted(jobs, key=lambda j: (j.submit_time or now, j.job_id)):
            move = self.move_for(job, left, now)
            if move is not None:
                moves.append(move)
                cap = left[move.to_pool]
                cap.free -= move.n
                cap.free_max_node = max(0, cap.free_max_node - move.n)
        return moves

    def move_for(self, job: QueuedJob, caps: dict[str, PoolCapacity], now: float) -> Move | None:
        if job.state != "PENDING" or job.reason not in WAITING_FOR_NODES or job.node_count != 1:
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
        since = d.get("moved_at") if isinstance(d.get("moved_at"), int | float) else job.submit_time
        if since is None or now - float(since) < self.policy.pending_after_s:
            return None
        cur = caps.get(here.key)
        if cur is not None and cur.free_max_node >= n_here:
            return None  # its own pool has a node with room: Slurm will start it there
        here_model = self.site.catalog[here.model]
        best: tuple[float, int, Move] | None = None
        for order, (key, n) in enumerate(cands):
            pool = self.pools.get(key)
            cap = caps.get(key)
            if pool is None or cap is None or key == here.key:
                continue
            if not (cap.free_max_node >= n and cap.free - cap.pending >= n):
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
            prefix = "gres/" if job.tres_per_node.startswith("gres/") else "gres:"
            record = {**d, "pool": key, "model": pool.model, "n": n,
                      "units": round(n * model.units, 2), "why": "moved: own pool full, this one has room",
                      "moved_from": here.key, "moved_at": int(now), "moves": moves + 1}
            move = Move(job_id=job.job_id, from_pool=here.key, to_pool=key, n=n,
                        tres_per_node=f"{prefix}{model.gres_name}:{n}",
                        partition=partition, features=features,
                        comment=json.dumps(record, separators=(",", ":")),
                        why=f"{here.key} cannot start it now ({cur.free_max_node if cur else 0} of "
                            f"{n_here} free on one node), {key} can ({cap.free_max_node} free)")
            rank = (n * model.units, order)
            if best is None or rank < best[:2]:
                best = (rank[0], rank[1], move)
        return best[2] if best else None
