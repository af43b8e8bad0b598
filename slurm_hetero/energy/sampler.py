"""Energy and utilisation counters for devices that only report figures "now".

npu-smi gives an NPU's power and AI-core use at the moment it is asked, and a prolog and an
epilog only see the device idle before and after the job. `node sample` runs on such nodes
as a small daemon: every `every` seconds it reads each device and adds the trapezoid of
power and utilisation to counters on disk (energy_j, busy_s, covered_s per device). The
agent opens these nodes as `sampled:<backend>`: readings then carry the counters, so the
epilog gets energy = delta energy_j and mean utilisation = delta busy_s / delta covered_s,
as it does from NVML's energy counter.

A gap (the sampler was stopped for more than `max_gap`) is not integrated across:
covered_s then grows less than the job's time and the epilog reports the share measured.
Without a live sampler the readings carry no counters and the epilog reports no energy,
never a guess.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, DeviceLayer, Reading
from slurm_hetero.errors import InputError
from slurm_hetero.fileio import write_json_atomic

if TYPE_CHECKING:
    from slurm_hetero.energy.agent import AgentConfig

log = logging.getLogger("slurm-hetero.sampler")
COUNTERS = "samples.json"


def sample_once(dev: DeviceLayer, path: Path, now: float, max_gap: float) -> dict[str, Any]:
    """Read every device once and advance its counters to `now`. A device without a
    reading this round is skipped (not counted as 0 W); the next round bridges the gap if
    it is under max_gap."""
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        state = {"devices": {}}
    state["max_gap"] = max_gap  # readers call counters older than this stale
    counters = state.setdefault("devices", {})
    for info in dev.devices():
        try:
            r = dev.read(info.index)
        except ControlUnsupported as e:
            log.info("%s%d: no reading: %s", info.kind, info.index, e)
            continue
        c = counters.setdefault(str(info.index), {"energy_j": 0.0, "busy_s": 0.0, "covered_s": 0.0})
        dt = now - c.get("t", now)
        if 0 < dt <= max_gap:
            c["energy_j"] += (c["power_w"] + r.power_w) / 2 * dt
            c["busy_s"] += (c["util"] + r.util) / 2 * dt
            c["covered_s"] += dt
        c.update(t=now, power_w=r.power_w, util=r.util)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, state)
    return state


def run(dev: DeviceLayer, path: Path, every: float, stop: Callable[[], bool]) -> None:
    """Sample until stop() says so; one failed round is logged, not fatal."""
    while not stop():
        t0 = time.time()
        try:
            sample_once(dev, path, t0, max_gap=max(3 * every, 5.0))
        except Exception as e:  # a flaky driver call must not end the metering
            log.warning("sample failed: %s", e)
        time.sleep(max(0.0, every - (time.time() - t0)))


def serve(cfg: AgentConfig, node: str, every: float, stop: Callable[[], bool] | None = None,
          pidfile: Path | None = None) -> None:
    """`node sample`: the counters of this node's sampled backend, in its agent state,
    until stop() (default: until SIGTERM)."""
    from slurm_hetero.energy.agent import NodeState
    from slurm_hetero.energy.devices import open_devices

    spec = cfg.devices_for(node)
    if spec is None or not spec.startswith("sampled:"):
        raise InputError(f"node {node}: the agent config gives it {spec or 'no devices'}, "
                         "not a sampled: backend; nothing to sample (is --node Slurm's NodeName?)")
    if stop is None:
        stopping: list[bool] = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        stop = lambda: bool(stopping)  # noqa: E731
    if pidfile:
        pidfile.write_text(f"{os.getpid()}\n")
    log.info("sampling %s on %s every %.1f s", spec, node, every)
    try:
        run(open_devices(spec.removeprefix("sampled:")), NodeState(cfg, node).dir / COUNTERS, every, stop)
    finally:
        if pidfile:
            pidfile.unlink(missing_ok=True)


class SampledDevices:
    """A backend plus the counters its sampler keeps; controls go to the backend."""

    def __init__(self, inner: DeviceLayer, state_dir: Path):
        self.inner, self.path = inner, state_dir / COUNTERS
        self.name = f"sampled:{inner.name}"

    def devices(self) -> list[DeviceInfo]:
        return self.inner.devices()

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
