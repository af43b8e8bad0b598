"""Which backend device each of a job's GRES indices is: matched by identity, never by number.

Slurm's GRES index i is the i-th device file of the node's gres.conf (site/gresconf.py).
A backend numbers devices its own way — NVML by PCI bus order, while the N of /dev/nvidiaN
follows the driver's probe order — so index i of one need not be index i of the other.
The device file carries an identity that the backend reports too:

  NVIDIA  the file's minor number (char major 195)  ↔  nvmlDeviceGetMinorNumber
  AMD     the render/card node's PCI address        ↔  amdsmi_get_gpu_device_bdf
  Ascend  the davinci node's PCI address            ↔  npu-smi info's Bus-Id
          (the PCI address of a character device: /sys/dev/char/MAJ:MIN/device)

Under AutoDetect=nvml Slurm orders GPUs itself; the same NVML minor numbers then give the
mapping (gresconf.autodetect_order). A GRES index that does not lead to exactly one backend
device, through an identity no other index of the node shares, is refused: no policy, no
reading. So a cap can miss a device, never land on another job's.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, DeviceLayer
from slurm_hetero.site.gresconf import DetectedGpu, GresConfError, NodeGres, Unmappable, autodetect_order

SYS_ROOT = "/sys"  # where the kernel shows devices (tests point it at a folder of their own)
NVIDIA_MAJOR = 195  # the character major NVIDIA's driver registers for /dev/nvidia<minor>
_BDF = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])")


@dataclass(frozen=True)
class Target:
    """One GRES index of a job and the backend device it is, or why none could be told."""

    kind: str
    idx: int  # Slurm's GRES index on this node
    dev: int | None = None  # the backend's index of the same device
    identity: str = ""
    refused: str = ""


def normalize_bdf(text: str) -> str:
    """A PCI address as NVML (`00000000:C1:00.0`), amdsmi and npu-smi write it, in one form.

    >>> normalize_bdf("00000000:C1:00.0"), normalize_bdf("c1:00.0")
    ('0000:c1:00.0', '0000:c1:00.0')
    """
    m = _BDF.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a PCI address (DOMAIN:BUS:DEVICE.FUNCTION)")
    dom, bus, dev, fn = m.groups()
    return f"{int(dom or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def pci_identity_of(bdf: str) -> str:
    """DeviceInfo.identity of a device the backend reports by PCI address ("" if none)."""
    try:
        return "pci:" + normalize_bdf(bdf)
    except ValueError:
        return ""


def _char_device(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError as e:
        raise ControlUnsupported(f"cannot stat {path}: {e.strerror}") from e
    if not stat.S_ISCHR(st.st_mode):
        raise ControlUnsupported(f"{path} is not a character device")
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def nvidia_file_identity(path: str) -> str:
    """`minor:N` of an NVIDIA device file (what nvmlDeviceGetMinorNumber reports)."""
    major, minor = _char_device(path)
    if major != NVIDIA_MAJOR:
        raise ControlUnsupported(f"{path} is device {major}:{minor}, not an NVIDIA GPU "
                                 f"(major {NVIDIA_MAJOR})")
    return f"minor:{minor}"


def pci_file_identity(path: str) -> str:
    """`pci:DOMAIN:BUS:DEV.FN` of the PCI device behind a character device file (sysfs)."""
    major, minor = _char_device(path)
    link = f"{SYS_ROOT}/dev/char/{major}:{minor}/device"
    target = os.path.basename(os.path.realpath(link)) if os.path.exists(link) else ""
    try:
        return "pci:" + normalize_bdf(target)
    except ValueError:
        raise ControlUnsupported(f"{path} (device {major}:{minor}) has no PCI device in sysfs "
                                 f"({link})") from None


def slot_devices(layer: DeviceLayer, infos: Sequence[DeviceInfo], gres: NodeGres,
                 kind: str) -> list[tuple[DeviceInfo | None, str]]:
    """Per GRES index of `kind` on the node: its backend device, or None and why not.

    The whole node's table, so that an identity two indices share is caught: either could
    be the device, so neither gets it. Unmappable when no index can be told at all."""
    candidates = [d for d in infos if d.kind == kind]
    if kind == "gpu" and gres.autodetect != "off":
        if gres.autodetect != "nvml":
            raise Unmappable(f"AutoDetect={gres.autodetect} on {gres.node}: only the AutoDetect=nvml "
                             "order is modeled")
        if candidates and all(d.minor is None for d in candidates):
            raise Unmappable(f"AutoDetect=nvml on {gres.node}, but the {layer.name} backend reports "
                             "no NVIDIA minor numbers")
        order = autodetect_order(gres, [DetectedGpu(d.index, d.minor, d.mig) for d in candidates])
        by_index = {d.index: d for d in candidates}
        return [(by_index[o.index], "") for o in order]
    slots = gres.slots.get(kind, [])
    if not slots:
        raise Unmappable(f"gres.conf gives {gres.node} no File= for {kind}: no device file, no identity")
    if gres.counts.get(kind):
        raise Unmappable(f"gres.conf mixes Count-only and File= lines for {kind} on {gres.node}: "
                         "which index each device has cannot be told")
    idents: list[str | None] = []
    why: list[str] = []
    for s in slots:
        if s.file is None:
            idents.append(None)
            why.append(f"a MultipleFiles= (MIG) record ({','.join(s.multiple)}): not modeled")
            continue
        try:
            idents.append(layer.file_identity(s.file))
            why.append("")
        except ControlUnsupported as e:
            idents.append(None)
            why.append(f"{s.file}: {e}")
    shared = Counter(i for i in idents if i)
    out: list[tuple[DeviceInfo | None, str]] = []
    for s, ident, reason in zip(slots, idents, why, strict=True):
        if ident is None:
            out.append((None, reason))
            continue
        if shared[ident] > 1:
            others = [str(o.file) for o, j in zip(slots, idents, strict=True) if j == ident]
            out.append((None, f"{', '.join(others)} are all {ident}: which one Slurm means cannot be told"))
            continue
        match = [d for d in candidates if d.identity == ident]
        if len(match) != 1:
            seen = ", ".join(d.identity or "?" for d in candidates) or "none found"
            out.append((None, f"{s.file} is {ident}, which no {layer.name} device is (they are: {seen})"
                        if not match else f"{s.file} is {ident}, which {len(match)} {layer.name} "
                                          "devices report"))
            continue
        out.append((match[0], ""))
    return out


def device_with_identity(infos: Sequence[DeviceInfo], kind: str, identity: str) -> DeviceInfo | None:
    """The one device of `kind` that reports `identity`: None when none or several do, so a
    device the agent matched once is found again whatever number the backend gives it now
    (the node exporter, a restore after a driver reload)."""
    if not identity:
        return None
    found = [d for d in infos if d.kind == kind and d.identity == identity]
    return found[0] if len(found) == 1 else None


def match_devices(layer: DeviceLayer, infos: Sequence[DeviceInfo], gres: NodeGres | GresConfError,
            devices: Mapping[str, list[int]]) -> list[Target]:
    """The job's GRES indices (per kind) as backend devices; refused where unknown or MIG."""
    out: list[Target] = []
    for kind, indices in devices.items():
        try:
            if isinstance(gres, GresConfError):
                raise Unmappable(str(gres))
            table = slot_devices(layer, infos, gres, kind)
        except Unmappable as e:
            out += [Target(kind, i, refused=str(e)) for i in indices]
            continue
        for i in indices:
            if i >= len(table):
                out.append(Target(kind, i, refused=f"Slurm gave {kind} index {i}, but gres.conf gives "
                                                   f"{gres.node} {len(table)} {kind} device(s)"))
                continue
            info, why = table[i]
            if info is None:
                out.append(Target(kind, i, refused=why))
            elif info.mig:
                why = (f"{kind} {info.index} has MIG mode on: its power limit and clocks belong to "
                       "every MIG instance, so no one job may change them")
                out.append(Target(kind, i, identity=info.identity, refused=why))
            else:
                out.append(Target(kind, i, info.index, info.identity))
    return out
