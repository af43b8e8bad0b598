"""AMD Instinct GPUs through amdsmi (ROCm's Python binding of libamd_smi).

The package loads libamd_smi.so when imported; without ROCm (no library, no GPU) the
layer simply has no devices, as NVML does on a node without NVIDIA's driver.
Units follow amdsmi.h: power caps in microwatts, the energy accumulator in ticks of
`counter_resolution` microjoules, socket power in watts, VRAM size in MiB.
"Clock level" maps to amdsmi's performance levels: low = AMDSMI_DEV_PERF_LEVEL_LOW,
high/default = AUTO (the driver's own DVFS), medium or a number = a GFX clock range with
that ceiling (amdsmi_set_gpu_clk_range; newer ROCm prefers amdsmi_set_gpu_clk_limit).
Reset = perf level AUTO and the default cap, as `amd-smi reset --clocks` does; that AUTO
also drops a set clock range is the driver's behaviour, assumed here, not seen.
This backend was written against amdsmi's documented interface (ROCm 6.x/7.x)
and tested with a stand-in module: this machine has no AMD GPU.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, Reading, reset_each
from slurm_hetero.energy.identity import pci_file_identity, pci_identity_of


def _load() -> Any:
    # Imported late: the module loads a C library at import time and must not slow or
    # break prologs on nodes that never ask for it.
    return importlib.import_module("amdsmi")


class AmdSmiDevices:
    name = "amdsmi"

    def __init__(self) -> None:
        self.available = False
        self.why = ""
        self._handles: list[Any] = []
        try:
            self.smi = _load()
        except (ImportError, OSError) as e:  # no package, or no libamd_smi.so
            self.why = f"amdsmi unavailable: {e}"
            return
        try:
            self.smi.amdsmi_init(self.smi.AmdSmiInitFlags.INIT_AMD_GPUS)
            self._handles = list(self.smi.amdsmi_get_processor_handles())
            self.available = True
        except self.smi.AmdSmiException as e:
            self.why = str(e)

    def _h(self, index: int) -> Any:
        if not 0 <= index < len(self._handles):
            raise ControlUnsupported(f"gpu {index}: amdsmi lists {len(self._handles)} GPUs")
        return self._handles[index]

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self.smi.AmdSmiException as e:
            raise ControlUnsupported(f"{what}: {e}") from e

    def devices(self) -> list[DeviceInfo]:
        out = []
        for i, h in enumerate(self._handles):
            smi = self.smi
            asic = self._call("asic info", smi.amdsmi_get_gpu_asic_info, h)
            try:
                cap = smi.amdsmi_get_power_cap_info(h)
                lo, hi, default = (_num(cap.get(k)) / 1e6 for k in
                                   ("min_power_cap", "max_power_cap", "default_power_cap"))
            except smi.AmdSmiException:
                lo = hi = default = 0.0
            clocks: dict[str, int] = {}
            for label, kind in (("sm", smi.AmdSmiClkType.GFX), ("mem", smi.AmdSmiClkType.MEM)):
                try:
                    c = smi.amdsmi_get_clock_info(h, kind)
                    clocks[label] = int(_num(c.get("clk")))
                    clocks[f"{label}_max"] = int(_num(c.get("max_clk")))
                except smi.AmdSmiException:
                    pass
            bdf = self._optional(smi.amdsmi_get_gpu_device_bdf, h)
            out.append(DeviceInfo(
                index=i, kind="gpu", name=str(asic.get("market_name", "")),
                uuid=self._optional(smi.amdsmi_get_gpu_device_uuid, h),
                memory_mib=int(_num(self._optional_dict(smi.amdsmi_get_gpu_vram_info, h).get("vram_size"))),
                pci_bus=bdf, power_default_w=default, power_min_w=lo, power_max_w=hi, clocks_mhz=clocks,
                identity=pci_identity_of(bdf)))
        return out

    def file_identity(self, path: str) -> str:
        """The render (or card) node's PCI address: gres.conf names /dev/dri/renderD<N>."""
        return pci_file_identity(path)

    def _optional(self, fn: Any, h: Any) -> str:
        try:
            return str(fn(h))
        except self.smi.AmdSmiException:
            return ""

    def _optional_dict(self, fn: Any, h: Any) -> dict[str, Any]:
        try:
            d: dict[str, Any] = fn(h)
            return d
        except self.smi.AmdSmiException:
            return {}

    def read(self, index: int) -> Reading:
        h = self._h(index)
        e = self._call("energy counter", self.smi.amdsmi_get_energy_count, h)
        # ROCm 6.0-6.3 name the accumulator "power"; 6.4 and later "energy_accumulator".
        ticks = e.get("energy_accumulator", e.get("power"))
        res = e.get("counter_resolution")
        energy = _num(ticks) * _num(res) / 1e6 if _is_num(ticks) and _is_num(res) else None
        p = self._call("power", self.smi.amdsmi_get_power_info, h)
        # MI300 reports only the average; older parts the current socket power.
        power = next((_num(p[k]) for k in ("socket_power", "current_socket_power", "average_socket_power")
                      if _is_num(p.get(k))), 0.0)
        act = self._call("activity", self.smi.amdsmi_get_gpu_activity, h)
        util = _num(act.get("gfx_activity")) / 100 if _is_num(act.get("gfx_activity")) else 0.0
        return Reading(energy_j=energy, power_w=power, util=util, timestamp=time.time())

    def mean_util(self, index: int, since: float) -> float | None:
        return None  # amdsmi keeps no utilisation history to average over the job

    def set_power_limit(self, index: int, watts: float) -> None:
        self._call("power cap", self.smi.amdsmi_set_power_cap, self._h(index), 0, int(watts * 1e6))

    def set_gpu_clock_level(self, index: int, level: str) -> None:
        h, smi = self._h(index), self.smi
        if level in ("high", "highm1", "default"):
            self._call("perf level", smi.amdsmi_set_gpu_perf_level, h, smi.AmdSmiDevPerfLevel.AUTO)
        elif level == "low":
            self._call("perf level", smi.amdsmi_set_gpu_perf_level, h, smi.AmdSmiDevPerfLevel.LOW)
        else:
            c = self._call("clock info", smi.amdsmi_get_clock_info, h, smi.AmdSmiClkType.GFX)
            lo, hi = int(_num(c.get("min_clk"))), int(_num(c.get("max_clk")))
            if hi <= 0:
                raise ControlUnsupported("clock range: amdsmi reports no GFX clock range")
            top = int(level) if level.isdigit() else (lo + hi) // 2
            self._call("clock range", smi.amdsmi_set_gpu_clk_range, h, lo, max(lo, min(top, hi)),
                       smi.AmdSmiClkType.GFX)

    def set_npu_power_mode(self, index: int, mode: str) -> None:
        raise ControlUnsupported("AMD GPUs have no NPU power mode")

    def reset(self, index: int) -> None:
        h, smi = self._h(index), self.smi

        def default_cap() -> None:
            cap = self._call("power cap info", smi.amdsmi_get_power_cap_info, h)
            if _num(cap.get("default_power_cap")) <= 0:
                raise ControlUnsupported("power cap: amdsmi reports no default cap to restore")
            self._call("power cap", smi.amdsmi_set_power_cap, h, 0, int(_num(cap["default_power_cap"])))

        # Both steps, even when one fails: amd-smi's own clock reset is "perf level auto".
        reset_each([lambda: self._call("perf level", smi.amdsmi_set_gpu_perf_level, h,
                                       smi.AmdSmiDevPerfLevel.AUTO), default_cap])

def _is_num(v: Any) -> bool:
    """amdsmi reports a missing figure as the string "N/A" (or uint max turned into it)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _num(v: Any) -> float:
    return float(v) if _is_num(v) else 0.0
