"""What a device has applied now, where its backend can tell: temperature, memory used,
clocks, the applied power cap, the clock level / NPU power mode, health.

The device layer's `read` gives power, an energy counter and utilisation for every
backend; these extras differ per backend, so they are optional: a backend with a
`status(index) -> Mapping[str, float | str | bool]` method is asked through it (the
interface for new backends), and the existing ones are read here — the fake from its
state file, NVML through pynvml, npu-smi from the table its backend already fetched.
A field a backend lacks stays None and is not exported.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from slurm_hetero.energy.devices import DeviceInfo, DeviceLayer

log = logging.getLogger("slurm-hetero.monitor")
DEFAULT_LEVELS = ("default", "normal", "high", "")  # clock levels / modes that change nothing


@dataclass(frozen=True)
class DeviceStatus:
    temperature_c: float | None = None
    memory_used_mib: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_limit_w: float | None = None
    clock_policy: str | None = None  # fake/agent clock level (gpu) or NPU power mode
    non_default: bool | None = None  # settings differ from the device's defaults
    healthy: bool | None = None


_FIELDS = {f.name for f in fields(DeviceStatus)}


def from_mapping(m: Mapping[str, Any]) -> DeviceStatus:
    """A backend's own `status()` answer: known keys of the right type, the rest ignored."""
    kw: dict[str, Any] = {}
    for k, v in m.items():
        if k not in _FIELDS or v is None:
            continue
        if k == "clock_policy":
            kw[k] = str(v)
        elif k in ("non_default", "healthy"):
            kw[k] = bool(v)
        elif isinstance(v, int | float) and not isinstance(v, bool):
            kw[k] = float(v)
    return DeviceStatus(**kw)


def _unwrap(dev: DeviceLayer) -> DeviceLayer:
    inner = getattr(dev, "inner", None)  # SampledDevices: controls go to the backend
    return inner if inner is not None and hasattr(inner, "read") else dev


def read_status(dev: DeviceLayer, info: DeviceInfo) -> DeviceStatus:
    """The extras of one device; DeviceStatus() (all None) when the backend has none."""
    base = _unwrap(dev)
    own = getattr(dev, "status", None) or getattr(base, "status", None)
    try:
        if callable(own):
            answer = own(info.index)
            return from_mapping(answer) if isinstance(answer, Mapping) else DeviceStatus()
        if base.name == "fake":
            return _fake(base, info)
        if base.name == "nvml":
            return _nvml(info)
        if base.name == "npu-smi":
            return _npu_smi(base, info)
    except Exception as e:  # an extra is never worth a missing power sample
        log.debug("%s%d: status: %s", info.kind, info.index, e)
    return DeviceStatus()


def _fake(dev: Any, info: DeviceInfo) -> DeviceStatus:
    s = dev.state(info.index)
    level = str(s.get("clock_level", "default")) if info.kind == "gpu" else str(s.get("npu_mode", "normal"))
    limit, default = float(s["limit_w"]), float(s["default_w"])
    changed = (limit != default or s.get("clock_level", "default") != "default"
               or s.get("npu_mode", "normal") != "normal")
    return DeviceStatus(power_limit_w=limit, clock_policy=level, non_default=changed)


def _nvml(info: DeviceInfo) -> DeviceStatus:
    import pynvml

    h = pynvml.nvmlDeviceGetHandleByIndex(info.index)

    def opt(fn: Any, *args: Any) -> Any:
        try:
            return fn(h, *args)
        except pynvml.NVMLError:
            return None

    temp = opt(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
    mem = opt(pynvml.nvmlDeviceGetMemoryInfo)
    sm = opt(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)
    memclk = opt(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM)
    limit = opt(pynvml.nvmlDeviceGetEnforcedPowerLimit)
    limit_w = limit / 1000 if limit is not None else None
    changed = (None if limit_w is None or not info.power_default_w
               else abs(limit_w - info.power_default_w) > 1.0)
    used = mem.used / 2**20 if mem is not None else None
    return DeviceStatus(temperature_c=_num(temp), memory_used_mib=used,
                        sm_clock_mhz=_num(sm), mem_clock_mhz=_num(memclk), power_limit_w=limit_w,
                        non_default=changed)


def _npu_smi(dev: Any, info: DeviceInfo) -> DeviceStatus:
    rows = dev._rows()  # cached by the backend for 0.5 s: the reading just fetched it
    if info.index >= len(rows):
        return DeviceStatus()
    r = rows[info.index]
    return DeviceStatus(temperature_c=_num(r.temp_c), memory_used_mib=float(r.hbm_used_mib),
                        healthy=str(r.health).upper() == "OK")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
