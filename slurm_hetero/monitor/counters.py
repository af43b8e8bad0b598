"""Energy counters that stay monotonic across exporter restarts and device counter resets.

Where the backend has an energy counter (NVML, amdsmi, the sampler's, the fake's) the
exported counter follows it: each reading adds the counter's growth since the last one
(also across an exporter restart: the last raw value is on disk), and a counter that went
backwards (driver reload, sampler state lost) adds what it counted since its reset instead.
Where the backend has none, the exporter integrates its own power samples (trapezoids, no
integration across a gap longer than `max_gap_s`). The totals live in the node's agent
state folder (`monitor-energy.json`), written atomically every `persist_every_s` and on stop.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetero.fileio import write_json_atomic

FILE = "monitor-energy.json"


@dataclass
class _Counter:
    total: float = 0.0
    last_raw: float | None = None
    last_power: float | None = None
    last_t: float | None = None


class EnergyCounters:
    def __init__(self, path: Path | None, max_gap_s: float = 5.0, persist_every_s: float = 10.0):
        self.path, self.max_gap_s, self.persist_every_s = path, max_gap_s, persist_every_s
        self.devices: dict[str, _Counter] = {}
        self.by_policy: dict[str, float] = {}
        self._saved = 0.0
        self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        for key, d in (data.get("devices") or {}).items():
            total = d.get("total") if isinstance(d, dict) else None
            if isinstance(total, int | float) and not isinstance(total, bool):
                raw = d.get("last_raw")
                self.devices[str(key)] = _Counter(total=float(total),
                                                  last_raw=float(raw) if _is_num(raw) else None)
        self.by_policy = {str(k): float(v) for k, v in (data.get("by_policy") or {}).items() if _is_num(v)}

    def update(self, key: str, raw: float | None, power_w: float, t: float) -> tuple[float, float]:
        """Advance one device's counter; returns (total J, J added since the last reading)."""
        c = self.devices.setdefault(key, _Counter())
        added = 0.0
        if raw is not None:
            if c.last_raw is None:
                # First sight: a device never seen starts at its own counter (energy from
                # before the exporter, not added to anyone); one seen by an earlier exporter
                # that had no counter then goes on from its total.
                if c.total == 0.0:
                    c.total = max(0.0, raw)
            else:
                added = raw - c.last_raw if raw >= c.last_raw else raw  # went back: reset
            c.last_raw = raw
        elif c.last_t is not None and c.last_power is not None and 0 < t - c.last_t <= self.max_gap_s:
            added = (c.last_power + power_w) / 2 * (t - c.last_t)
        c.total += max(0.0, added)
        c.last_power, c.last_t = power_w, t
        return c.total, max(0.0, added)

    def add_policy(self, policy: str, joules: float) -> None:
        self.by_policy[policy] = self.by_policy.get(policy, 0.0) + joules

    def maybe_save(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if now - self._saved >= self.persist_every_s:
            self.save()
            self._saved = now

    def save(self) -> None:
        if self.path is None:
            return
        write_json_atomic(self.path, {
            "devices": {k: {"total": round(c.total, 3), "last_raw": c.last_raw}
                        for k, c in self.devices.items()},
            "by_policy": {k: round(v, 3) for k, v in self.by_policy.items()}})


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
