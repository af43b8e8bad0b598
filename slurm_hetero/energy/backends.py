"""Opening the device backend a node's agent config names (`nvml`, `amdsmi`, `npu-smi`,
`none`, `fake:PATH`, each optionally `sampled:`). Backends are imported only when named:
the prolog on an NPU node never loads NVML's bindings.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurm_hetero.energy.devices import DeviceLayer, NoDevices
from slurm_hetero.errors import InputError


def open_devices(spec: str | None = None, state_dir: Path | None = None) -> DeviceLayer:
    """The backend named by spec (or $SLURM_HETERO_DEVICES, default `nvml`).
    `sampled:SPEC` is SPEC with the counters `node sample` keeps in state_dir."""
    spec = spec or os.environ.get("SLURM_HETERO_DEVICES") or "nvml"
    if spec.startswith("sampled:"):
        from slurm_hetero.energy.sampled import SampledDevices

        if state_dir is None:
            raise InputError(f"devices {spec!r}: a sampled backend needs the node's state folder")
        return SampledDevices(open_devices(spec.removeprefix("sampled:")), state_dir)
    if spec == "nvml":
        from slurm_hetero.energy.nvml import NvmlDevices

        return NvmlDevices()
    if spec == "amdsmi":
        from slurm_hetero.energy.amd import AmdSmiDevices

        return AmdSmiDevices()
    if spec == "npu-smi":
        from slurm_hetero.energy.npusmi import NpuSmiDevices

        return NpuSmiDevices()
    if spec == "none":
        return NoDevices()
    if spec.startswith("fake:"):
        from slurm_hetero.energy.fake import FakeDevices

        return FakeDevices(spec.removeprefix("fake:"))
    raise InputError(f"devices {spec!r}: use nvml, amdsmi, npu-smi, none or fake:PATH, "
                     "optionally after sampled:")
