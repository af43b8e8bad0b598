"""What a cluster could deliver: accelerators per (model, arch), CPUs and nodes per arch;
from a site file, or from what a trace says about its machine."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_hetero.site.model import Site


@dataclass
class Capacity:
    devices: dict[tuple[str, str], float] = field(default_factory=dict)
    units_per_device: dict[str, float] = field(default_factory=dict)
    cpus: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    source: str = ""
    # Devices per model that jobs cannot be attributed to (a trace naming no model per job).
    inventory: dict[str, float] = field(default_factory=dict)

    def units(self, model: str, arch: str) -> float:
        return self.devices.get((model, arch), 0.0) * self.units_per_device.get(model, float("nan"))


def site_capacity(site: Site, partition: str | None = None) -> Capacity:
    """Capacity of the site's node groups (those in `partition` when given)."""
    cap = Capacity(source=f"site {site.name}")
    for g in site.node_groups:
        if partition and partition not in g.partitions:
            continue
        n = g.node_count
        cap.cpus[g.architecture] = cap.cpus.get(g.architecture, 0.0) + g.cpus * n
        cap.nodes[g.architecture] = cap.nodes.get(g.architecture, 0) + n
        for a in g.accelerators:
            key = (a.model.id, g.architecture)
            cap.devices[key] = cap.devices.get(key, 0.0) + a.count * n
            cap.units_per_device[a.model.id] = a.model.units
    return cap
