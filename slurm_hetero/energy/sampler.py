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
from typing import Any

from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.devices import ControlUnsupported, DeviceLayer
from slurm_hetero.energy.sampled import COUNTERS
from slurm_hetero.energy.state import AgentConfig, NodeState
from slurm_hetero.errors import InputError
from slurm_hetero.fileio import write_json_atomic

log = logging.getLogger("slurm-hetero.sampler")


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
