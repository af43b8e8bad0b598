"""The NVML and amdsmi backends against stand-in modules (unit tests only).

This machine has neither an NVIDIA nor an AMD GPU. The stand-ins follow each library's
documented interface and units — NVML: milliwatts and millijoules; amdsmi.h: power caps in
microwatts, the energy accumulator in ticks of `counter_resolution` microjoules, "N/A" for
a figure the part lacks — so these tests check our translation (units, levels, the reset
that restores both clocks and the power limit), not the libraries. The real NVML path is
exercised by benchmarks/gpu_energy.py on a device machine.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import pytest

from slurm_hetero.energy import agent, amd, nvml
from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.devices import ControlUnsupported
from slurm_hetero.energy.probe import match_model, probe
from slurm_hetero.site import load_site
from slurm_hetero.site.policies import DEFAULT_POLICIES
from tests.unit.test_energy import DEMO

POLICIES = {p.name: p for p in DEFAULT_POLICIES}


# ---- a stand-in amdsmi module ----------------------------------------------------------------

class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, code: int):
        super().__init__(f"Error code: {code} | AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported")


@dataclass
class AmdGpu:
    market_name: str = "AMD Instinct MI300X"
    cap_uw: int = 750_000_000
    default_uw: int = 750_000_000
    ticks: int = 0
    perf: str = "AUTO"
    clk_range: tuple[int, int] | None = None
    unsupported: set[str] = field(default_factory=set)
    bdf: str = "0000:05:00.0"


def fake_amdsmi(gpus: list[AmdGpu], legacy_energy_key: bool = False) -> types.ModuleType:
    m = types.ModuleType("amdsmi")
    m.AmdSmiException = AmdSmiException  # type: ignore[attr-defined]
    AmdSmiInitFlags = IntEnum("AmdSmiInitFlags", "INIT_ALL_PROCESSORS INIT_AMD_GPUS")
    m.AmdSmiInitFlags = AmdSmiInitFlags  # type: ignore[attr-defined]
    AmdSmiClkType = IntEnum("AmdSmiClkType", "SYS GFX MEM")
    m.AmdSmiClkType = AmdSmiClkType  # type: ignore[attr-defined]
    AmdSmiDevPerfLevel = IntEnum("AmdSmiDevPerfLevel", "AUTO LOW HIGH MANUAL")
    m.AmdSmiDevPerfLevel = AmdSmiDevPerfLevel  # type: ignore[attr-defined]

    def guard(h: AmdGpu, what: str) -> None:
        if what in h.unsupported:
            raise AmdSmiLibraryException(2)

    def set_cap(h: AmdGpu, sensor: int, cap: int) -> None:
        assert sensor == 0 and isinstance(cap, int)
        guard(h, "cap")
        h.cap_uw = cap

    def set_perf(h: AmdGpu, level: Any) -> None:
        assert isinstance(level, AmdSmiDevPerfLevel)
        guard(h, "perf")
        h.perf, h.clk_range = level.name, None  # assumed: a perf level drops a set clock range

    def set_range(h: AmdGpu, lo: int, hi: int, kind: Any) -> None:
        assert kind == m.AmdSmiClkType.GFX
        h.perf, h.clk_range = "MANUAL", (lo, hi)

    def energy(h: AmdGpu) -> dict[str, Any]:
        guard(h, "energy")
        key = "power" if legacy_energy_key else "energy_accumulator"
        return {key: h.ticks, "counter_resolution": 15.3, "timestamp": 1}

    fns = {
        "amdsmi_init": lambda flag: None,
        "amdsmi_get_processor_handles": lambda: gpus,
        "amdsmi_get_gpu_asic_info": lambda h: {"market_name": h.market_name, "vendor_name": "AMD"},
        "amdsmi_get_power_cap_info": lambda h: {
            "power_cap": h.cap_uw, "default_power_cap": h.default_uw, "dpm_cap": 2100,
            "min_power_cap": 0, "max_power_cap": 750_000_000},
        "amdsmi_get_clock_info": lambda h, kind: {"clk": 132, "min_clk": 500, "max_clk": 2100,
                                                  "clk_locked": False},
        "amdsmi_get_gpu_device_uuid": lambda h: "1fff74a1-0000-1000-80a5-fc47c6a8d2f1",
        "amdsmi_get_gpu_device_bdf": lambda h: h.bdf,
        "amdsmi_get_gpu_vram_info": lambda h: {"vram_type": 7, "vram_size": 196592, "vram_bit_width": 8192},
        "amdsmi_get_energy_count": energy,
        # MI300X: no current socket power, only the average.
        "amdsmi_get_power_info": lambda h: {"current_socket_power": "N/A", "average_socket_power": 310,
                                            "gfx_voltage": "N/A", "power_limit": h.cap_uw // 10**6},
        "amdsmi_get_gpu_activity": lambda h: {"gfx_activity": 87, "umc_activity": 40, "mm_activity": "N/A"},
        "amdsmi_set_power_cap": set_cap,
        "amdsmi_set_gpu_perf_level": set_perf,
        "amdsmi_set_gpu_clk_range": set_range,
    }
    for name, fn in fns.items():
        setattr(m, name, fn)
    return m


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> list[AmdGpu]:
    table = [AmdGpu(), AmdGpu()]
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(table))
    return table


def test_amd_devices_in_watts_and_mib(gpus: list[AmdGpu]) -> None:
    layer = open_devices("amdsmi")
    d = layer.devices()[1]
    assert (d.index, d.kind, d.name, d.memory_mib, d.pci_bus) == (1, "gpu", "AMD Instinct MI300X",
                                                                  196592, "0000:05:00.0")
    assert (d.power_default_w, d.power_min_w, d.power_max_w) == (750.0, 0.0, 750.0)
    assert d.clocks_mhz == {"sm": 132, "sm_max": 2100, "mem": 132, "mem_max": 2100}


@pytest.mark.parametrize("legacy", [False, True])
def test_amd_energy_counter_in_joules(monkeypatch: pytest.MonkeyPatch, legacy: bool) -> None:
    table = [AmdGpu(ticks=10_000_000)]
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(table, legacy_energy_key=legacy))
    r = open_devices("amdsmi").read(0)
    assert r.energy_j == pytest.approx(153.0)  # 1e7 ticks x 15.3 uJ
    assert r.power_w == 310.0 and r.util == 0.87


def test_amd_policy_then_reset(gpus: list[AmdGpu]) -> None:
    layer = open_devices("amdsmi")
    applied = agent.apply_policy(layer, "gpu", 0, POLICIES["efficiency"], 750.0)
    assert applied == ["cap 450W", "clocks medium"]
    assert (gpus[0].cap_uw, gpus[0].perf, gpus[0].clk_range) == (450_000_000, "MANUAL", (500, 1300))
    assert gpus[1].perf == "AUTO" and gpus[1].cap_uw == 750_000_000  # not its device
    layer.set_gpu_clock_level(0, "low")
    assert gpus[0].perf == "LOW"
    layer.set_gpu_clock_level(0, "9999")  # MHz above the part's range: clamped
    assert gpus[0].clk_range == (500, 2100)
    layer.reset(0)
    g = gpus[0]  # a fresh name: mypy would keep gpus[0].clk_range narrowed by the assert above across reset()
    assert (g.cap_uw, g.perf, g.clk_range) == (750_000_000, "AUTO", None)


def test_amd_reset_restores_the_cap_when_clocks_are_not_controllable(gpus: list[AmdGpu]) -> None:
    layer = open_devices("amdsmi")
    layer.set_power_limit(0, 300)
    gpus[0].unsupported.add("perf")
    with pytest.raises(ControlUnsupported, match="perf level"):
        layer.reset(0)
    assert gpus[0].cap_uw == 750_000_000


def test_amd_missing_library_means_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library(name: str) -> Any:
        raise OSError("Could not load libamd_smi.so")

    monkeypatch.setattr(importlib, "import_module", no_library)
    layer = amd.AmdSmiDevices()
    assert layer.devices() == [] and "libamd_smi.so" in layer.why
    with pytest.raises(ControlUnsupported):
        layer.read(0)


def test_probe_names_amd_parts_by_catalog_id(gpus: list[AmdGpu]) -> None:
    catalog = load_site(DEMO).catalog
    desc = probe([open_devices("amdsmi")], catalog)
    assert [(a["model"], a["count"]) for a in desc.accelerators] == [("mi300x", 2)]
    assert match_model("AMD Instinct MI250X", 131072, catalog) == "mi250x"


# ---- a stand-in pynvml module ----------------------------------------------------------------

class NVMLError(Exception):
    pass


@dataclass
class NvGpu:
    limit_mw: int = 700_000
    locked: tuple[int, int] | None = None
    energy_mj: int = 0
    unsupported: set[str] = field(default_factory=set)
    minor: int = 0
    mig: bool = False
    bus_id: str = "00000000:17:00.0"


def fake_pynvml(gpus: list[NvGpu]) -> types.SimpleNamespace:
    def guard(h: NvGpu, what: str) -> None:
        if what in h.unsupported:
            raise NVMLError("Not Supported")

    def set_limit(h: NvGpu, mw: int) -> None:
        guard(h, "limit")
        h.limit_mw = mw

    def lock(h: NvGpu, lo: int, hi: int) -> None:
        guard(h, "clocks")
        h.locked = (lo, hi)

    def unlock(h: NvGpu) -> None:
        guard(h, "clocks")
        h.locked = None

    def mig_mode(h: NvGpu) -> tuple[int, int]:
        guard(h, "mig")  # GPUs without MIG answer NOT_SUPPORTED
        return (1, 1) if h.mig else (0, 0)

    return types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_DEVICE_MIG_ENABLE=1,
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: gpus[i],
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h.minor:08x}",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80 * 2**30),
        nvmlDeviceGetPowerManagementLimitConstraints=lambda h: (200_000, 700_000),
        nvmlDeviceGetClockInfo=lambda h, kind: 1980,
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 1980,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=h.bus_id.encode()),
        nvmlDeviceGetMinorNumber=lambda h: h.minor,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: h.energy_mj,
        nvmlDeviceGetPowerUsage=lambda h: 512_345,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=64, memory=30),
        nvmlDeviceGetPowerManagementDefaultLimit=lambda h: 700_000,
        nvmlDeviceSetPowerManagementLimit=set_limit,
        nvmlDeviceGetSupportedMemoryClocks=lambda h: [2619, 1593],
        nvmlDeviceGetSupportedGraphicsClocks=lambda h, mem: [1980, 1200, 345, 1500],
        nvmlDeviceSetGpuLockedClocks=lock, nvmlDeviceResetGpuLockedClocks=unlock)


@pytest.fixture
def nv(monkeypatch: pytest.MonkeyPatch) -> tuple[nvml.NvmlDevices, list[NvGpu]]:
    table = [NvGpu(energy_mj=1_500_000), NvGpu()]
    monkeypatch.setattr(nvml, "pynvml", fake_pynvml(table))
    layer = nvml.NvmlDevices.__new__(nvml.NvmlDevices)  # skip nvmlInit: no driver here
    layer.available, layer.why = True, ""
    return layer, table


def test_nvml_units(nv: tuple[nvml.NvmlDevices, list[NvGpu]]) -> None:
    layer, _ = nv
    r = layer.read(0)
    assert (r.energy_j, r.power_w, r.util) == (1500.0, 512.345, 0.64)


def test_nvml_levels_and_reset(nv: tuple[nvml.NvmlDevices, list[NvGpu]]) -> None:
    layer, gpus = nv
    assert agent.apply_policy(layer, "gpu", 1, POLICIES["efficiency"], 700.0) == ["cap 420W", "clocks medium"]
    assert (gpus[1].limit_mw, gpus[1].locked) == (420_000, (345, 1500))
    layer.set_gpu_clock_level(1, "low")
    assert gpus[1].locked == (345, 345)
    gpus[1].unsupported.add("clocks")  # e.g. a part without locked-clock support
    with pytest.raises(ControlUnsupported, match="clock reset"):
        layer.reset(1)
    assert gpus[1].limit_mw == 700_000 and gpus[0].limit_mw == 700_000
