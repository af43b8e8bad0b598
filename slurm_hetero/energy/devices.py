"""The device layer: one small interface over NVML, amdsmi, npu-smi and a fake for tests.

The node agent only talks to `DeviceLayer`. Which backend runs is chosen explicitly (the
agent's config `devices:` or SLURM_HETERO_DEVICES): `nvml`, `amdsmi`, `npu-smi`, or
`fake:PATH`, and `sampled:` before one of them where `node sample` integrates power and
utilisation for a backend without counters (npu-smi).
The fake is never a silent fallback: a node without NVML simply has no NVML devices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class ControlUnsupported(Exception):
    """The device has no such control (or we may not use it): log and go on."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    kind: str  # gpu or npu
    name: str
    uuid: str = ""
    memory_mib: int = 0
    pci_bus: str = ""
    power_default_w: float = 0.0
    power_min_w: float = 0.0
    power_max_w: float = 0.0
    clocks_mhz: dict[str, int] = field(default_factory=dict)
    # What ties the device to the device file gres.conf names for it (energy/identity.py):
    # "minor:N" for NVIDIA (/dev/nvidiaN), "pci:DOMAIN:BUS:DEV.FN" for AMD and Ascend.
    identity: str = ""
    minor: int | None = None  # NVIDIA's minor number (AutoDetect=nvml names /dev/nvidia<minor>)
    mig: bool = False  # MIG mode on: one power limit and clock for every instance's job


@dataclass(frozen=True)
class Reading:
    energy_j: float | None  # a monotonic counter (J); None where the device has none
    power_w: float
    util: float  # 0..1, instantaneous (or the backend's own recent average)
    timestamp: float
    # Counters kept by `node sample` for backends that only report figures "now"
    # (energy/sampler.py): seconds-busy (integral of util) and seconds measured.
    busy_s: float | None = None
    covered_s: float | None = None
    energy_sampled: bool = False  # energy_j is the sampler's (over covered_s), not the device's


class DeviceLayer(Protocol):
    name: str

    def devices(self) -> list[DeviceInfo]: ...

    def file_identity(self, path: str) -> str:
        """The identity the device file at path carries, in DeviceInfo.identity's terms;
        ControlUnsupported (saying why) when it has none this backend can match."""
        ...

    def read(self, index: int) -> Reading: ...

    def mean_util(self, index: int, since: float) -> float | None:
        """Average utilisation since a time, where the backend keeps samples."""
        ...

    def set_power_limit(self, index: int, watts: float) -> None: ...

    def set_gpu_clock_level(self, index: int, level: str) -> None: ...

    def set_npu_power_mode(self, index: int, mode: str) -> None: ...

    def reset(self, index: int) -> None:
        """Back to the device's defaults (power limit, clocks, mode)."""
        ...


def reset_each(steps: list[Callable[[], object]]) -> None:
    """Run every reset step even when one fails (a device lacking clock control must still
    get its power limit back), then report what failed."""
    failed = []
    for step in steps:
        try:
            step()
        except ControlUnsupported as e:
            failed.append(str(e))
    if failed:
        raise ControlUnsupported("; ".join(failed))


class NoDevices:
    """A node with no accelerator backend configured (a CPU node)."""

    name = "none"

    def devices(self) -> list[DeviceInfo]:
        return []

    def file_identity(self, path: str) -> str:
        raise ControlUnsupported("no device backend on this node")

    def read(self, index: int) -> Reading:
        raise ControlUnsupported("no device backend on this node")

    def mean_util(self, index: int, since: float) -> float | None:
        return None

    def set_power_limit(self, index: int, watts: float) -> None:
        raise ControlUnsupported("no device backend on this node")

    def set_gpu_clock_level(self, index: int, level: str) -> None:
        raise ControlUnsupported("no device backend on this node")

    def set_npu_power_mode(self, index: int, mode: str) -> None:
        raise ControlUnsupported("no device backend on this node")

    def reset(self, index: int) -> None:
        return None
