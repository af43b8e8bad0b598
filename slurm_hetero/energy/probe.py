"""`node probe`: describe this node in the site file's format, and list drift from the site.

CPU topology from `lscpu -J`, memory from /proc/meminfo, accelerators from the device
layer (NVML, npu-smi; AMD through amdsmi where that package is installed).
"""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_hetero.energy.devices import DeviceInfo, DeviceLayer
from slurm_hetero.site.catalog import AccelModel
from slurm_hetero.site.names import normalize_arch

if TYPE_CHECKING:  # the site model needs ClusterShell; probing a node does not
    from slurm_hetero.site.model import NodeGroup, Site


@dataclass
class NodeDescription:
    architecture: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mib: int
    cpu_model: str = ""
    accelerators: list[dict[str, Any]] = field(default_factory=list)

    def as_site_group(self, name: str) -> dict[str, Any]:
        group: dict[str, Any] = {
            "names": name, "architecture": self.architecture, "sockets": self.sockets,
            "cores_per_socket": self.cores_per_socket, "threads_per_core": self.threads_per_core,
            "memory": f"{self.memory_mib // 1024}GB"}
        if self.accelerators:
            group["accelerators"] = [{"model": a["model"], "count": a["count"]} for a in self.accelerators]
        return group


def parse_lscpu(text: str) -> dict[str, str]:
    """`lscpu -J` → {field: value}, flattening the nested form newer util-linux prints."""
    out: dict[str, str] = {}

    def walk(items: list[dict[str, Any]]) -> None:
        for it in items:
            out[str(it["field"]).rstrip(":")] = str(it.get("data") or "")
            walk(it.get("children", []))

    walk(json.loads(text)["lscpu"])
    return out


def parse_meminfo_mib(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise ValueError("no MemTotal in /proc/meminfo")


def match_model(name: str, memory_mib: int, catalog: dict[str, AccelModel]) -> str | None:
    """Catalog id of a device name such as `NVIDIA A100-SXM4-80GB` or `910B3`."""
    flat = name.lower().replace(" ", "").replace("-", "")
    hits = [m for m in catalog.values() if _base(m) in flat]
    if not hits:
        return None
    # The most specific family first (gh200 before h200), then the closest memory size.
    return min(hits, key=lambda m: (-len(_base(m)), abs(m.device_memory_mib - memory_mib))).id


def _base(m: AccelModel) -> str:
    """The family token of a model: a100-80gb → a100, ascend-910b → 910b, mi300x → mi300x."""
    return m.id.removeprefix("ascend-").split("-")[0]


def probe(devices: list[DeviceLayer], catalog: dict[str, AccelModel]) -> NodeDescription:
    cpu = parse_lscpu(subprocess.run(["lscpu", "-J"], capture_output=True, text=True, check=True).stdout)
    desc = NodeDescription(
        architecture=normalize_arch(platform.machine()),
        sockets=int(cpu.get("Socket(s)", "1") or 1),
        cores_per_socket=int(cpu.get("Core(s) per socket", "1") or 1),
        threads_per_core=int(cpu.get("Thread(s) per core", "1") or 1),
        memory_mib=parse_meminfo_mib(Path("/proc/meminfo").read_text()),
        cpu_model=cpu.get("Model name", ""))
    found: dict[str, list[DeviceInfo]] = {}
    for layer in devices:
        for d in layer.devices():
            mid = match_model(d.name, d.memory_mib, catalog) or d.name
            found.setdefault(mid, []).append(d)
    for mid, devs in found.items():
        desc.accelerators.append({"model": mid, "count": len(devs), "devices": [
            {"index": d.index, "name": d.name, "uuid": d.uuid, "memory_mib": d.memory_mib,
             "pci_bus": d.pci_bus, "identity": d.identity, "mig": d.mig,
             "power_default_w": d.power_default_w,
             "power_range_w": [d.power_min_w, d.power_max_w], "clocks_mhz": d.clocks_mhz}
            for d in devs]})
    return desc


def slurm_type_name(nvml_name: str) -> str:
    """The GPU type gpu/nvml derives from NVML's name (lowercase, blanks as `_`).

    >>> slurm_type_name("NVIDIA A100-SXM4-80GB"), slurm_type_name("NVIDIA H100 80GB HBM3")
    ('nvidia_a100-sxm4-80gb', 'nvidia_h100_80gb_hbm3')
    """
    return nvml_name.strip().lower().replace(" ", "_")


def drift(desc: NodeDescription, site: Site, node: str) -> list[str]:
    """Differences between what this node is and what the site declares for it."""
    group = next((g for g in site.node_groups if node in g.nodes), None)
    if group is None:
        return [f"node {node} is not in the site {site.name}"]
    out = []
    for label, have, want in (("architecture", desc.architecture, group.architecture),
                              ("sockets", desc.sockets, group.sockets),
                              ("cores_per_socket", desc.cores_per_socket, group.cores_per_socket),
                              ("threads_per_core", desc.threads_per_core, group.threads_per_core)):
        if have != want:
            out.append(f"{label}: site says {want}, node has {have}")
    if desc.memory_mib < group.memory_mib:
        out.append(f"memory: site says {group.memory_mib} MiB, node has only {desc.memory_mib} MiB "
                   "(slurmd would drain it)")
    out += _gres_identity_drift(desc, group)
    want_acc = {a.model.id: a.count for a in group.accelerators}
    have_acc = {a["model"]: a["count"] for a in desc.accelerators}
    for mid in sorted(set(want_acc) | set(have_acc)):
        if want_acc.get(mid, 0) != have_acc.get(mid, 0):
            out.append(f"accelerators {mid}: site says {want_acc.get(mid, 0)}, "
                       f"node has {have_acc.get(mid, 0)}")
    return out


def _gres_identity_drift(desc: NodeDescription, group: NodeGroup) -> list[str]:
    """What would make slurmd's GPUs and the agent's disagree on this node: MIG the site
    does not acknowledge, and, under AutoDetect=nvml, a Type slurmd cannot find in NVML's
    names (it keeps a GPU only when its gres.conf Type is part of that name)."""
    devices = [d for a in desc.accelerators for d in a["devices"]]
    out = [f"device {d['index']} ({d['name']}) has MIG mode on; the site does not say "
           "`mig: unsupported` (no energy policy reaches a MIG GPU)"
           for d in devices if d.get("mig") and not group.mig_unsupported]
    if group.gres_autodetect == "nvml":
        names = [slurm_type_name(str(d["name"])) for d in devices]
        for a in group.accelerators:
            t = a.model.gres_type.lower()
            found = sum(t in n for n in names)
            if found < a.count:
                out.append(f"gres_autodetect nvml: Type={t} is part of {found} of NVML's GPU names here "
                           f"({', '.join(sorted(set(names))) or 'none'}), the site says {a.count}: slurmd "
                           "keeps a GPU only when its Type is part of that name; give the model a "
                           "gres_type that is")
    return out
