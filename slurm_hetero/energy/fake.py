"""A fake device layer whose state lives in a JSON file, for machines without accelerators.

Each emulated node has its own file; prolog and epilog are separate processes, so the
state (limits, levels, energy counters) must survive between them. Energy grows as
power x time, where power = min(limit, default limit x load) and load is per device
(tests set it to stand for compute- or memory-bound work). With `counter: false` it
stands for npu-smi: power and use "now" only, no energy counter, no utilisation history.

Identity (energy/identity.py): a fake device has a minor number (its index unless the test
says otherwise) and MIG mode off. The dev cluster's device files are all copies of
/dev/null, so the fake reads a file's identity from its name instead: the number at its
end is the minor (`nvidia3`, `davinci3`: 3; DRM render nodes count from 128, as the
kernel's do: `renderD131`: 3).

A fault for the soak (devcluster/faults.py `agent-fail`): while a root-owned regular file
FAIL_SWITCH lies beside the state file, a backend fails partway through a policy: once it
has changed one device, a policy write to another raises OSError, as a driver that stops
answering would (the agent's Prolog then stops midway). Restores (`reset`) never fail.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, Reading
from slurm_hetero.fileio import write_json_atomic

FAIL_SWITCH = "fail-policy-writes"


class FakeDevices:
    name = "fake"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._changed: set[int] = set()  # devices this instance (one Prolog) wrote a policy to

    # ---- state file ---------------------------------------------------------------------
    @staticmethod
    def create(path: str | Path, kind: str, count: int, model: str = "fake",
               default_w: float = 400.0, load: float = 0.8, memory_mib: int = 0,
               counter: bool = True, minors: Sequence[int] | None = None,
               mig: Sequence[int] = ()) -> None:
        """minors: each device's minor number in the backend's order (default: its index);
        mig: the indices of devices in MIG mode."""
        minors = list(range(count)) if minors is None else list(minors)
        devs = [{"index": i, "kind": kind, "name": model, "memory_mib": memory_mib,
                 "default_w": default_w, "limit_w": default_w,
                 "clock_level": "default", "npu_mode": "normal", "load": load,
                 "energy_j": 0.0, "t": time.time(), "counter": counter,
                 "minor": minors[i], "mig": i in mig} for i in range(count)]
        write_json_atomic(path, {"devices": devs})

    def _load(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    def _advance(self, d: dict[str, Any], now: float) -> None:
        d["energy_j"] += _power(d) * max(0.0, now - d["t"])
        d["t"] = now

    def _update(self, index: int, **changes: Any) -> None:
        # Prologs and epilogs of different jobs on one node may run at once: lock the file.
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data, now = self._load(), time.time()
            d = data["devices"][index]
            self._advance(d, now)  # the counter is integrated up to the change
            d.update(changes)
            write_json_atomic(self.path, data)

    # ---- DeviceLayer ---------------------------------------------------------------------
    def devices(self) -> list[DeviceInfo]:
        out = []
        for d in self._load()["devices"]:
            minor = d.get("minor", d["index"])  # files written before minors existed
            out.append(DeviceInfo(d["index"], d["kind"], d["name"], uuid=f"FAKE-{d['index']}",
                                  memory_mib=d.get("memory_mib", 0),
                                  power_default_w=d["default_w"], power_min_w=d["default_w"] * 0.25,
                                  power_max_w=d["default_w"], minor=minor,
                                  identity="" if minor is None else f"minor:{minor}",
                                  mig=bool(d.get("mig", False))))
        return out

    def file_identity(self, path: str) -> str:
        m = _NUMBERED.search(path.rsplit("/", 1)[-1])
        if not m:
            raise ControlUnsupported(f"{path}: no number at the end of the name (the fake's minor)")
        return f"minor:{int(m.group(2)) - (128 if m.group(1) == 'renderD' else 0)}"

    def read(self, index: int) -> Reading:
        d, now = self._load()["devices"][index], time.time()
        self._advance(d, now)
        energy = d["energy_j"] if d.get("counter", True) else None
        return Reading(energy_j=energy, power_w=_power(d), util=float(d["load"]), timestamp=now)

    def mean_util(self, index: int, since: float) -> float | None:
        d = self._load()["devices"][index]
        return float(d["load"]) if d.get("counter", True) else None

    def failing(self) -> bool:
        """Is the fault switch on? Only a root-owned regular file counts (lstat: no link), so
        only root, as the soak is, can make the fake fail."""
        try:
            st = os.lstat(self.path.with_name(FAIL_SWITCH))
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_uid == 0

    def _policy_write(self, index: int) -> None:
        if self._changed and index not in self._changed and self.failing():
            raise OSError(errno.EIO, f"fake device {index}: write failed ({FAIL_SWITCH} is on)")
        self._changed.add(index)

    def set_power_limit(self, index: int, watts: float) -> None:
        self._policy_write(index)
        self._update(index, limit_w=watts)

    def set_gpu_clock_level(self, index: int, level: str) -> None:
        self._policy_write(index)
        self._update(index, clock_level=level)

    def set_npu_power_mode(self, index: int, mode: str) -> None:
        self._policy_write(index)
        self._update(index, npu_mode=mode)

    def reset(self, index: int) -> None:
        d = self._load()["devices"][index]
        self._update(index, limit_w=d["default_w"], clock_level="default", npu_mode="normal")

    def state(self, index: int) -> dict[str, Any]:
        """What is applied now (tests read it to check restores)."""
        d: dict[str, Any] = self._load()["devices"][index]
        return d


_NUMBERED = re.compile(r"(renderD)?(\d+)$")


def _power(d: dict[str, Any]) -> float:
    return float(min(d["limit_w"], d["default_w"] * d["load"]))
