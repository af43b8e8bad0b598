"""The device files of a node group, in Slurm's index order: gres.conf's File= lines, the
container config's device table and the dev cluster's emulated /dev all come from here."""

from __future__ import annotations

from ClusterShell.NodeSet import NodeSet

from slurm_hetero.conf.profile import Profile
from slurm_hetero.site.model import NodeGroup


def device_files(g: NodeGroup, node: str | None, profile: Profile) -> list[dict[str, str | int]]:
    """gres.conf lines of one group (or one node of it, for per-node dev files).

    A group with gres_autodetect nvml gets `AutoDetect=nvml` and Count= lines, no File=:
    slurmd then names and orders the GPUs itself (by NVML index, i.e. PCI bus id), and a
    slurmd that cannot load NVML finds no GPU and drains the node, instead of silently
    numbering File= in another order. The dev cluster's per-node files keep File= (no NVML)."""
    if g.gres_autodetect == "nvml" and not node:
        lines: list[dict[str, str | int]] = [{"name": "gpu", "autodetect": "nvml"}]
        for a in g.accelerators:
            lines.append({"name": a.model.gres_name, "type": a.model.gres_type, "count": a.count})
            if a.shards_per_device:
                lines.append({"name": "shard", "count": a.count * a.shards_per_device})
        return lines
    lines = []
    base = f"{profile.dev_dir}/{node}" if node else profile.dev_dir
    offsets: dict[str, int] = {}
    for a in g.accelerators:
        m = a.model
        first = offsets.get(m.gres_name, 0)
        offsets[m.gres_name] = first + a.count
        span = f"{first}" if a.count == 1 else f"[{first}-{first + a.count - 1}]"
        prefix = {"cuda": "nvidia", "cann": "davinci", "rocm": "dri/renderD"}[m.stack]
        if m.stack == "rocm":
            first += 128
            span = f"{first}" if a.count == 1 else f"[{first}-{first + a.count - 1}]"
        lines.append({"name": m.gres_name, "type": m.gres_type, "file": f"{base}/{prefix}{span}"})
        if a.shards_per_device:
            lines.append({"name": "shard", "count": a.count * a.shards_per_device})
    return lines


def device_paths(g: NodeGroup, node: str, profile: Profile) -> list[str]:
    """The device files gres.conf names for one node (the dev cluster creates them)."""
    return [p for line in device_files(g, node, profile) if "file" in line
            for p in NodeSet(str(line["file"]))]
