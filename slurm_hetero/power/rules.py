"""The safety rules and the keeper's plan: pure functions over node states.

A node is never suspended while it holds a job, sits in an active reservation or one
starting within the lead time (resume_timeout, at least the forecast horizon), is excluded
by the site (exclude_nodes, exclude_partitions), or is the last idle, awake node of its
pool. Pools are the forecast's: "model@arch" in normalized units (devices times units),
"cpu@arch" in cores for nodes without accelerators.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ClusterShell.NodeSet import NodeSet

from slurm_hetero.power.states import NodeState, Reservation
from slurm_hetero.site.model import Site
from slurm_hetero.site.pools import group_pool

Forecast = Mapping[str, Mapping[int, float]]


def node_pools(site: Site) -> dict[str, tuple[str, float]]:
    """node → (pool, capacity)."""
    return {n: group_pool(g) for g in site.node_groups for n in g.nodes}


def protected(site: Site) -> set[str]:
    """Nodes the site never lets sleep: exclude_nodes and the nodes of exclude_partitions."""
    out = set(NodeSet(site.power.exclude_nodes)) if site.power.exclude_nodes else set()
    for part in site.power.exclude_partitions:
        out |= {n for g in site.groups_in(part) for n in g.nodes}
    return out


def lead_s(site: Site) -> float:
    """How far ahead a reservation protects its nodes: a node woken later would be late."""
    return float(max(site.power.resume_timeout, site.power.horizon * 60))


def reserved(reservations: Iterable[Reservation], now: float, ahead_s: float) -> set[str]:
    return {n for r in reservations if r.holds(now, ahead_s) for n in r.nodes}


@dataclass(frozen=True)
class Verdict:
    node: str
    ok: bool
    why: str


def suspend_verdicts(site: Site, candidates: Iterable[str], states: Mapping[str, NodeState],
                     busy: set[str], reserved_nodes: set[str]) -> list[Verdict]:
    """Which of the nodes slurmctld hands the SuspendProgram may really be powered down.

    slurmctld has already marked them POWERING_DOWN: they count as awake here, so the last
    idle node of a pool is refused even when a whole pool comes in one hostlist."""
    cands = list(dict.fromkeys(candidates))
    pools = node_pools(site)
    keep = protected(site)
    pending = set(cands)
    awake: dict[str, set[str]] = {}
    for node, st in states.items():
        if node not in pools or node in busy or node in reserved_nodes:
            continue
        fit = st.idle_awake or (node in pending and st.base == "IDLE" and not st.busy)
        if fit:
            awake.setdefault(pools[node][0], set()).add(node)
    out = []
    for node in cands:
        cur = states.get(node)
        if node not in pools:
            out.append(Verdict(node, False, "not a node of this site"))
        elif cur is None:
            out.append(Verdict(node, False, "slurmctld does not list it"))
        elif node in keep:
            out.append(Verdict(node, False, "excluded by the site (power.exclude_nodes/exclude_partitions)"))
        elif node in busy or cur.busy:
            out.append(Verdict(node, False, "holds a job"))
        elif node in reserved_nodes:
            out.append(Verdict(node, False, "in an active or imminent reservation"))
        elif not awake.get(pools[node][0], set()) - {node}:
            out.append(Verdict(node, False, f"last idle node of pool {pools[node][0]}"))
        else:
            awake[pools[node][0]].discard(node)
            out.append(Verdict(node, True, "idle"))
    return out


@dataclass
class PoolPlan:
    pool: str
    need: float  # forecast peak * (1 + headroom), pool units
    running: float  # capacity of the nodes holding jobs
    keep_idle: int  # idle nodes to keep awake (at least 1)
    idle: int  # idle awake nodes now, nodes powering up included
    asleep: int
    wake: list[str] = field(default_factory=list)
    sleep: list[str] = field(default_factory=list)
    waking: int = 0  # powering up now (counted in `idle` too)
    nodes: int = 0  # nodes of the pool slurmctld lists


@dataclass
class Plan:
    pools: list[PoolPlan]

    @property
    def wake(self) -> list[str]:
        return [n for p in self.pools for n in p.wake]

    @property
    def sleep(self) -> list[str]:
        return [n for p in self.pools for n in p.sleep]


def plan(site: Site, states: Mapping[str, NodeState], busy: set[str], reserved_nodes: set[str],
         forecast: Forecast | None, now: float) -> Plan:
    """Per pool: keep enough idle nodes awake to cover forecast demand * (1 + headroom) beyond
    what is running (and never fewer than one); wake sleeping nodes when short; put to sleep
    the idle nodes beyond that which have been idle for suspend_time, longest idle first."""
    power = site.power
    keep = protected(site)
    members: dict[str, list[str]] = {}
    caps: dict[str, float] = {}
    for node, (pool, cap) in node_pools(site).items():
        if node in states:
            members.setdefault(pool, []).append(node)
            caps[pool] = max(caps.get(pool, 0.0), cap)
    out = []
    for pool, nodes in members.items():
        sts = [states[n] for n in nodes]
        running = sum(caps[pool] for s in sts if s.busy or s.name in busy)
        demand = float((forecast or {}).get(pool, {}).get(power.horizon, 0.0) or 0.0)
        need = max(0.0, demand) * (1 + power.headroom)
        spare = max(0.0, need - running)
        keep_idle = max(1, math.ceil(spare / caps[pool] - 1e-9)) if caps[pool] > 0 else 1
        free = [s for s in sts if s.name not in busy and s.name not in reserved_nodes
                and (s.idle_awake or s.waking)]
        sleeping = sorted(s.name for s in sts if s.can_wake and s.name not in reserved_nodes)
        p = PoolPlan(pool, round(need, 3), round(running, 3), keep_idle, len(free),
                     sum(1 for s in sts if s.asleep), waking=sum(1 for s in sts if s.waking),
                     nodes=len(sts))
        if len(free) < keep_idle:
            p.wake = sleeping[:keep_idle - len(free)]
        elif len(free) > keep_idle:
            idle_since = [s for s in free if s.idle_awake and s.name not in keep
                          and s.last_busy is not None and now - s.last_busy >= power.suspend_time]
            idle_since.sort(key=lambda s: (s.last_busy, s.name))
            p.sleep = [s.name for s in idle_since[:len(free) - keep_idle]]
        out.append(p)
    return Plan(out)
