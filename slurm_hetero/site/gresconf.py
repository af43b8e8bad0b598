"""gres.conf as slurmd reads it for one node: which device each GRES index stands for.

Slurm hands a job GRES *indices* (SLURM_JOB_GPUS, `scontrol show job -d` IDX), not
devices. slurmd numbers them (22.05 and 24.11, `common_node_config_load` in
src/plugins/gres/common/gres_common.c): the node's records of one GRES name in file
order, each File= expanded as written (`/dev/nvidia[2,0]` is 2, then 0: nothing is
sorted), one index per file; a MultipleFiles= record (MIG) is one index. Under
AutoDetect=nvml the GPU records are what NVML finds instead (gpu/nvml: one record per GPU,
File=/dev/nvidia<minor>), ordered by NVML's enumeration: see `autodetect_order`.

Stdlib only: the prolog reads this at every job start.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_hetero.errors import InputError
from slurm_hetero.slurm.hostlist import HostlistError, contains, expand

MAX_BYTES = 4 * 1024 * 1024  # a gres.conf is a few KB; never read an unbounded file
MAX_FILES = 1024  # Slurm's own limit on File entries per node
_SIZE = re.compile(r"(\d+)([KMGTP]?)", re.IGNORECASE)
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


class GresConfError(InputError):
    """gres.conf cannot be read, or says something this reader cannot follow."""


class Unmappable(Exception):
    """Which device a GRES index stands for cannot be told (the reason is the message)."""


@dataclass(frozen=True)
class Slot:
    """One GRES index: its device file, or the files of a MultipleFiles= record (MIG)."""

    file: str | None
    multiple: tuple[str, ...] = ()
    type: str = ""


@dataclass(frozen=True)
class NodeGres:
    node: str
    autodetect: str = "off"  # the node's effective AutoDetect (nvml, rsmi, oneapi or off)
    slots: dict[str, list[Slot]] = field(default_factory=dict)  # name → slots in index order
    counts: dict[str, int] = field(default_factory=dict)  # name → devices of Count= lines without File


@dataclass(frozen=True)
class DetectedGpu:
    """What gpu/nvml reads of one GPU: its NVML index, minor number and MIG mode."""

    index: int
    minor: int | None
    mig: bool = False


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) with comments dropped and `\\` continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _count(value: str, where: str) -> int:
    m = _SIZE.fullmatch(value)
    if not m:
        raise GresConfError(f"{where}: Count={value!r} is not a number (with an optional K/M/G/T/P)")
    return int(m.group(1)) * _SUFFIX[m.group(2).upper()]


def _files(value: str, where: str) -> list[str]:
    try:
        files = expand(value, limit=MAX_FILES)
    except HostlistError as e:
        raise GresConfError(f"{where}: {e}") from e
    return files


def parse_gres_conf(text: str, node: str, source: str = "gres.conf") -> NodeGres:
    """The records of gres.conf that apply to `node`, in slurmd's index order.

    >>> g = parse_gres_conf("NodeName=n[1-2] Name=gpu Type=a100 File=/dev/nvidia[2,0]\\n"
    ...                     "NodeName=n1 Name=gpu Type=a100 File=/dev/nvidia1\\n", "n1")
    >>> [s.file for s in g.slots["gpu"]]
    ['/dev/nvidia2', '/dev/nvidia0', '/dev/nvidia1']
    """
    glob_auto: set[str] = set()
    node_auto: set[str] = set()
    slots: dict[str, list[Slot]] = {}
    counts: dict[str, int] = {}
    for n, line in _logical_lines(text):
        where = f"{source}:{n}"
        words = line.split()
        if not words:
            continue
        if words[0].lower() == "include":
            raise GresConfError(f"{where}: Include is not followed by the slurm-hetero device map; "
                                "write the lines of this node into gres.conf itself")
        kv: dict[str, str] = {}
        for w in words:
            key, eq, value = w.partition("=")
            if not eq:
                raise GresConfError(f"{where}: {w!r} is not Key=Value")
            kv[key.lower()] = value.strip('"')
        if "nodename" in kv:
            try:
                if not contains(kv["nodename"], node):
                    continue
            except HostlistError as e:
                raise GresConfError(f"{where}: NodeName: {e}") from e
        if "autodetect" in kv:
            (node_auto if "nodename" in kv else glob_auto).add(kv["autodetect"].lower())
        name = kv.get("name", "").lower()
        if not name:
            continue
        typ = kv.get("type", "")
        if "file" in kv and "multiplefiles" in kv:
            raise GresConfError(f"{where}: File and MultipleFiles are mutually exclusive")
        if "file" in kv:
            slots.setdefault(name, []).extend(Slot(f, type=typ) for f in _files(kv["file"], where))
        elif "multiplefiles" in kv:
            slots.setdefault(name, []).append(Slot(None, tuple(_files(kv["multiplefiles"], where)), typ))
        else:
            counts[name] = counts.get(name, 0) + _count(kv.get("count", "1"), where)
    for chosen in (node_auto, glob_auto):  # a node's own AutoDetect trumps the global one
        if len(chosen) > 1:
            raise GresConfError(f"{source}: node {node} has AutoDetect={' and '.join(sorted(chosen))}; "
                                "Slurm needs one value per node")
    auto = next(iter(node_auto or glob_auto or {"off"}))
    return NodeGres(node=node, autodetect=auto, slots=slots, counts=counts)


def read_gres_conf(path: str | Path, node: str) -> NodeGres:
    """gres.conf at `path` for `node`; GresConfError when it cannot be read or followed."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise GresConfError(f"{path}: cannot read: {e.strerror}") from e
    if len(raw) > MAX_BYTES:
        raise GresConfError(f"{path}: larger than {MAX_BYTES} bytes")
    return parse_gres_conf(raw.decode("utf-8", errors="replace"), node, str(path))


def autodetect_order(g: NodeGres, gpus: Sequence[DetectedGpu]) -> list[DetectedGpu]:
    """The GPUs behind GRES indices 0, 1, ... of a node where slurmd runs AutoDetect=nvml.

    gpu/nvml (22.05 and 24.11) skips a GPU whose minor number NVML cannot give, names each
    File=/dev/nvidia<minor>, and the merged list is sorted by its NVLink row, whose "self"
    entry sits at the GPU's NVML index: the final order is NVML's enumeration order, which
    follows the PCI bus id (src/plugins/gres/gpu/gres_gpu.c, _sort_gpu_by_links_order).
    Raises Unmappable where Slurm's result depends on what this reader cannot know:
    MIG (one GRES per MIG instance), File= that disagrees with NVML (the order then depends
    on whether slurmd could load NVML), or a count that differs from what NVML finds
    (which GPUs Slurm keeps then depends on its type matching).

    >>> gpus = [DetectedGpu(0, 2), DetectedGpu(1, 0), DetectedGpu(2, 3), DetectedGpu(3, 1)]
    >>> [d.minor for d in autodetect_order(NodeGres("n1", "nvml"), gpus)]
    [2, 0, 3, 1]
    """
    for d in gpus:
        if d.mig:
            raise Unmappable(f"NVML GPU {d.index} has MIG mode on: under AutoDetect=nvml Slurm makes "
                             "one GRES per MIG instance, which slurm-hetero does not model")
    system = sorted((d for d in gpus if d.minor is not None), key=lambda d: d.index)
    conf = g.slots.get("gpu", [])
    if any(s.file is None for s in conf):
        raise Unmappable("gres.conf has a MultipleFiles= (MIG) record for gpu: not modeled")
    if conf:
        by_file = {f"/dev/nvidia{d.minor}": d for d in system}
        missing = [s.file for s in conf if s.file not in by_file]
        if missing:
            raise Unmappable(f"gres.conf names {', '.join(map(str, missing))}, which NVML does not "
                             f"find (it finds {', '.join(sorted(by_file)) or 'no GPU'})")
        kept = [by_file[str(s.file)] for s in conf]
        if kept != sorted(kept, key=lambda d: d.index):
            # Refusal texts go into the accounting record through sacctmgr: no quotes.
            raise Unmappable("the File= order in gres.conf differs from the NVML order (PCI bus id); "
                             "under AutoDetect=nvml slurmd uses the NVML order only when it can load "
                             "NVML, else the File= order: leave File= out or write it in NVML order")
        return kept
    configured = g.counts.get("gpu")
    if configured is not None and configured != len(system):
        raise Unmappable(f"gres.conf configures {configured} GPUs and NVML finds {len(system)}: "
                         "which ones Slurm keeps depends on its type matching")
    return system
