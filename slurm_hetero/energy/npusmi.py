"""Ascend NPUs through `npu-smi info` (Huawei's CLI; no Python binding is assumed).

The parser is tested on output written from the vendor documentation's table format
(tests/data/npu), not captured on real hardware: this machine has no NPU. npu-smi gives
instantaneous power and AI-core use but no counters: nodes run `node sample`, which
integrates them (energy/sampler.py), and the agent opens them as `sampled:npu-smi`.
A power-mode control is not exposed through a documented, stable npu-smi command we can
rely on across driver versions: it raises ControlUnsupported (the agent logs and goes on).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass

from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, Reading
from slurm_hetero.energy.identity import pci_file_identity, pci_identity_of

_ROW1 = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*(\w+)\s*\|\s*([\d.]+|-)\s+(\d+|-)")
_ROW2 = re.compile(r"^\|\s*(\d+)\s*\|\s*([0-9A-Fa-f:.]+)\s*\|\s*(\d+|-)\s+[\d ]+/\s*\d+\s+(\d+)\s*/\s*(\d+)")


@dataclass(frozen=True)
class NpuRow:
    npu: int
    chip: int
    name: str
    health: str
    power_w: float | None
    temp_c: int | None
    bus_id: str
    aicore_pct: int | None
    hbm_used_mib: int
    hbm_total_mib: int


def parse_npu_smi_info(text: str) -> list[NpuRow]:
    """Rows of `npu-smi info`: each NPU takes two table lines (NPU/name/power, chip/bus/usage)."""
    rows: list[NpuRow] = []
    first: re.Match[str] | None = None
    for line in text.splitlines():
        m1 = _ROW1.match(line)
        if m1:
            first = m1
            continue
        m2 = _ROW2.match(line)
        if m2 and first:
            rows.append(NpuRow(
                npu=int(first.group(1)), chip=int(m2.group(1)), name=first.group(2),
                health=first.group(3), power_w=_float(first.group(4)),
                temp_c=_int(first.group(5)), bus_id=m2.group(2),
                aicore_pct=_int(m2.group(3)), hbm_used_mib=int(m2.group(4)),
                hbm_total_mib=int(m2.group(5))))
            first = None
    return rows


def _float(text: str) -> float | None:
    return None if text == "-" else float(text)


def _int(text: str) -> int | None:
    return None if text == "-" else int(text)


class NpuSmiDevices:
    name = "npu-smi"

    def __init__(self) -> None:
        self._cache: tuple[float, list[NpuRow]] = (0.0, [])

    def _rows(self) -> list[NpuRow]:
        # One `npu-smi info` lists every NPU: a sampler round or an epilog reading several
        # devices asks once, not once per device.
        t, rows = self._cache
        if time.monotonic() - t < 0.5:
            return rows
        exe = shutil.which("npu-smi")
        if exe is None:
            return []
        out = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=10, check=False)
        rows = parse_npu_smi_info(out.stdout) if out.returncode == 0 else []
        self._cache = (time.monotonic(), rows)
        return rows

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(index=i, kind="npu", name=r.name, memory_mib=r.hbm_total_mib,
                           pci_bus=r.bus_id, identity=pci_identity_of(r.bus_id))
                for i, r in enumerate(self._rows())]

    def file_identity(self, path: str) -> str:
        """The davinci node's PCI address (from sysfs; not yet seen on Ascend hardware)."""
        return pci_file_identity(path)

    def read(self, index: int) -> Reading:
        rows = self._rows()
        if index >= len(rows):
            raise ControlUnsupported(f"npu {index}: not listed by npu-smi")
        r = rows[index]
        if r.power_w is None:  # "-": no reading now, which is not 0 W
            raise ControlUnsupported(f"npu {index}: npu-smi shows no power")
        return Reading(energy_j=None, power_w=r.power_w, util=(r.aicore_pct or 0) / 100,
                       timestamp=time.time())

    def mean_util(self, index: int, since: float) -> float | None:
        return None

    def set_power_limit(self, index: int, watts: float) -> None:
        raise ControlUnsupported("npu-smi: no power cap control")

    def set_gpu_clock_level(self, index: int, level: str) -> None:
        raise ControlUnsupported("NPUs have no GPU clocks")

    def set_npu_power_mode(self, index: int, mode: str) -> None:
        raise ControlUnsupported("npu-smi: no documented power-mode control")

    def reset(self, index: int) -> None:
        return None  # nothing was changed
