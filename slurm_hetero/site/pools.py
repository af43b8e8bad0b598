"""Pools: (accelerator model, architecture) pairs, the unit the bridge chooses between.

Their order is the documented static order used when there is no capacity snapshot:
the smallest model (fewest normalized units per device) first, then the architecture.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_hetero.site.model import AccelGroup, NodeGroup, Site


@dataclass(frozen=True)
class Pool:
    key: str  # "model@arch"
    model: str
    arch: str
    per_node: int  # largest device count on one node of the pool
    cpus: int  # most CPUs on one node of the pool
    mem_mib: int  # most memory on one node of the pool
    devices: int
    partitions: tuple[str, ...]


def pools(site: Site) -> list[Pool]:
    members: dict[tuple[str, str], list[tuple[NodeGroup, AccelGroup]]] = {}
    for g in site.node_groups:
        for a in g.accelerators:
            members.setdefault((a.model.id, g.architecture), []).append((g, a))
    out = [
        Pool(key=f"{mid}@{arch}", model=mid, arch=arch,
             per_node=max(a.count for _, a in ms),
             cpus=max(g.cpus for g, _ in ms), mem_mib=max(g.memory_mib for g, _ in ms),
             devices=sum(a.count * g.node_count for g, a in ms),
             partitions=tuple(dict.fromkeys(p for g, _ in ms for p in g.partitions)))
        for (mid, arch), ms in members.items()
    ]
    return sorted(out, key=lambda p: (site.catalog[p.model].units, p.model, p.arch))


def group_pool(g: NodeGroup) -> tuple[str, float]:
    """(pool, capacity of one node in the pool's units) of a node group."""
    if g.accelerators:
        a = g.accelerators[0]
        return f"{a.model.id}@{g.architecture}", a.model.units * a.count
    return f"cpu@{g.architecture}", float(g.cpus)
