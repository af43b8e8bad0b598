"""Readings of a backend that reports figures only "now", carried with the counters that
`node sample` (energy/sampler.py) keeps on disk: the agent's side of the sampler.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from slurm_hetero.energy.devices import DeviceInfo, DeviceLayer, Reading

log = logging.getLogger("slurm-hetero.sampler")
COUNTERS = "samples.json"


class SampledDevices:
    """A backend plus the counters its sampler keeps; controls go to the backend."""

    def __init__(self, inner: DeviceLayer, state_dir: Path):
        self.inner, self.path = inner, state_dir / COUNTERS
        self.name = f"sampled:{inner.name}"

    def devices(self) -> list[DeviceInfo]:
        return self.inner.devices()

    def file_identity(self, path: str) -> str:
        return self.inner.file_identity(path)

    def read(self, index: int) -> Reading:
        r = self.inner.read(index)
        c = self._counters(index, r.timestamp)
        if c is None:
            return r
        # Carry the counters forward from the last sample with the last figures, so that a
        # job's start and end fall between samples without losing up to `every` seconds.
        # A device with its own energy counter (sampled:nvml, for whole-job utilisation)
        # keeps it: the sampler's is the estimate.
        ahead = max(0.0, r.timestamp - c["t"])
        own = r.energy_j is not None
        return Reading(energy_j=r.energy_j if own else c["energy_j"] + c["power_w"] * ahead,
                       power_w=r.power_w, util=r.util, timestamp=r.timestamp,
                       busy_s=c["busy_s"] + c["util"] * ahead, covered_s=c["covered_s"] + ahead,
                       energy_sampled=not own)

    def _counters(self, index: int, now: float) -> dict[str, Any] | None:
        try:
            state = json.loads(self.path.read_text())
            c: dict[str, Any] = state["devices"][str(index)]
        except (OSError, ValueError, KeyError):
            return None
        if now - c["t"] > max(10.0, float(state.get("max_gap", 0))):
            log.warning("device %d: counters %.0f s old: is `node sample` running?", index, now - c["t"])
            return None
        return c

    def mean_util(self, index: int, since: float) -> float | None:
        return self.inner.mean_util(index, since)

    def set_power_limit(self, index: int, watts: float) -> None:
        self.inner.set_power_limit(index, watts)

    def set_gpu_clock_level(self, index: int, level: str) -> None:
        self.inner.set_gpu_clock_level(index, level)

    def set_npu_power_mode(self, index: int, mode: str) -> None:
        self.inner.set_npu_power_mode(index, mode)

    def reset(self, index: int) -> None:
        self.inner.reset(index)
