"""NVIDIA devices through NVML (the `pynvml` module of nvidia-ml-py).

No NVML library (no driver, no GPU) is a normal state: the layer then has no devices.
Controls the device or our privileges lack raise ControlUnsupported, never fail the job.
"""

from __future__ import annotations

import time
from typing import Any

from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, Reading, reset_each
from slurm_hetero.energy.identity import nvidia_file_identity

try:
    import pynvml
except ImportError:  # the package is a dependency, but a broken install must not stop prologs
    pynvml = None


class NvmlDevices:
    name = "nvml"

    def __init__(self) -> None:
        self.available = False
        self.why = ""
        if pynvml is None:
            self.why = "pynvml is not installed"
            return
        try:
            pynvml.nvmlInit()
            self.available = True
        except pynvml.NVMLError as e:
            self.why = str(e)

    def _h(self, index: int) -> Any:
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            raise ControlUnsupported(f"{what}: {e}") from e

    def devices(self) -> list[DeviceInfo]:
        if not self.available:
            return []
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = self._h(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            try:
                lo, hi = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
                default = pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h)
            except pynvml.NVMLError:
                lo = hi = default = 0
            clocks = {}
            for label, kind in (("sm", pynvml.NVML_CLOCK_SM), ("mem", pynvml.NVML_CLOCK_MEM)):
                try:
                    clocks[label] = pynvml.nvmlDeviceGetClockInfo(h, kind)
                    clocks[f"{label}_max"] = pynvml.nvmlDeviceGetMaxClockInfo(h, kind)
                except pynvml.NVMLError:
                    pass
            minor = _minor(h)
            out.append(DeviceInfo(
                index=i, kind="gpu", name=_str(pynvml.nvmlDeviceGetName(h)),
                uuid=_str(pynvml.nvmlDeviceGetUUID(h)), memory_mib=int(mem.total) // 2**20,
                pci_bus=_str(pynvml.nvmlDeviceGetPciInfo(h).busId),
                power_default_w=default / 1000, power_min_w=lo / 1000, power_max_w=hi / 1000,
                clocks_mhz=clocks, identity="" if minor is None else f"minor:{minor}", minor=minor,
                mig=_mig_on(h)))
        return out

    def file_identity(self, path: str) -> str:
        return nvidia_file_identity(path)

    def read(self, index: int) -> Reading:
        h = self._h(index)
        energy = self._call("energy counter", pynvml.nvmlDeviceGetTotalEnergyConsumption, h)
        power = self._call("power", pynvml.nvmlDeviceGetPowerUsage, h)
        util = self._call("utilisation", pynvml.nvmlDeviceGetUtilizationRates, h)
        return Reading(energy_j=energy / 1000, power_w=power / 1000, util=util.gpu / 100,
                       timestamp=time.time())

    def mean_util(self, index: int, since: float) -> float | None:
        """Average of the driver's utilisation samples since `since` (it keeps a ring buffer)."""
        try:
            _, samples = pynvml.nvmlDeviceGetSamples(
                self._h(index), pynvml.NVML_GPU_UTILIZATION_SAMPLES, int(since * 1e6))
        except pynvml.NVMLError:
            return None
        values = [s.sampleValue.uiVal for s in samples]
        return sum(values) / len(values) / 100 if values else None

    def set_power_limit(self, index: int, watts: float) -> None:
        self._call("power limit", pynvml.nvmlDeviceSetPowerManagementLimit, self._h(index),
                   int(watts * 1000))

    def set_gpu_clock_level(self, index: int, level: str) -> None:
        """Lock graphics clocks: low = lowest supported, medium = middle, high = no lock."""
        h = self._h(index)
        if level in ("high", "highm1", "default"):
            self._call("clock reset", pynvml.nvmlDeviceResetGpuLockedClocks, h)
            return
        mem = max(self._call("memory clocks", pynvml.nvmlDeviceGetSupportedMemoryClocks, h))
        gfx = sorted(self._call("graphics clocks", pynvml.nvmlDeviceGetSupportedGraphicsClocks, h, mem))
        target = int(level) if level.isdigit() else gfx[0] if level == "low" else gfx[len(gfx) // 2]
        self._call("clock lock", pynvml.nvmlDeviceSetGpuLockedClocks, h, gfx[0], target)

    def set_npu_power_mode(self, index: int, mode: str) -> None:
        raise ControlUnsupported("NVIDIA GPUs have no NPU power mode")

    def reset(self, index: int) -> None:
        h = self._h(index)

        def default_limit() -> None:
            default = self._call("default limit", pynvml.nvmlDeviceGetPowerManagementDefaultLimit, h)
            self._call("power limit", pynvml.nvmlDeviceSetPowerManagementLimit, h, default)

        reset_each([lambda: self._call("clock reset", pynvml.nvmlDeviceResetGpuLockedClocks, h),
                    default_limit])

def _minor(h: Any) -> int | None:
    """The N of /dev/nvidiaN (None where NVML cannot say, as on some virtual GPUs)."""
    try:
        return int(pynvml.nvmlDeviceGetMinorNumber(h))
    except pynvml.NVMLError:
        return None


def _mig_on(h: Any) -> bool:
    """MIG mode currently on (GPUs without MIG answer NOT_SUPPORTED: off)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(h)
    except pynvml.NVMLError:
        return False
    return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)


def _str(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v
