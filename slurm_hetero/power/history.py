"""The keeper's history: one compact JSON line per pool and keeper round (about a minute),
for the report's "Power saving" section.

    {"t": 1796111562.0, "pool": "cpu@x86_64", "forecast": {"5": 40.0, "15": 52.0, "60": 60.0},
     "need": 62.4, "running": 50.0, "nodes": 4, "idle": 1, "asleep": 2, "waking": 0,
     "keep_idle": 1, "wake": [], "sleep": ["sp2-04"], "failed": []}

`t` is the daemon's clock (epoch seconds); `forecast` is what the keeper was given (null
without one); `wake`/`sleep` the nodes it asked slurmctld to power up/down, `failed` the
actions ("power_up"/"power_down") slurmctld refused. The demand that materialised is not
written here: the report computes it later from accounting.

Writes are appends of whole lines in one write(2) on an O_APPEND descriptor; a line torn
by a crash is fenced off by a newline before the next append, and readers skip it. The file
is bounded: past `max_bytes` it is renamed to `<name>.1` (replacing the previous one) and a
new one is started. One writer (the bridge daemon) is assumed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_hetero.power.rules import Forecast, Plan

HISTORY_FILE = "hetero-power-history.jsonl"  # beside the capacity snapshot (StateSaveLocation)
MAX_BYTES = 8 * 1024 * 1024  # ~40,000 records: about a month of one pool at one a minute
MAX_LINE = 64 * 1024  # a longer line is not one of ours: skipped when read


def records(plan: Plan, forecast: Forecast | None, now: float,
            failed: Iterable[str] = ()) -> list[dict[str, Any]]:
    """One record per pool of a keeper round."""
    bad = sorted(set(failed))
    out = []
    for p in plan.pools:
        fc = (forecast or {}).get(p.pool)
        out.append({
            "t": round(now, 1), "pool": p.pool,
            "forecast": ({str(h): round(float(v), 3) for h, v in sorted(fc.items())
                          if isinstance(v, int | float) and math.isfinite(v)} if fc else None),
            "need": p.need, "running": p.running, "nodes": p.nodes, "idle": p.idle,
            "asleep": p.asleep, "waking": p.waking, "keep_idle": p.keep_idle,
            "wake": list(p.wake), "sleep": list(p.sleep),
            "failed": [s for s in bad if (s == "power_up" and p.wake) or (s == "power_down" and p.sleep)],
        })
    return out


class PowerHistory:
    def __init__(self, path: Path, max_bytes: int = MAX_BYTES):
        self.path, self.max_bytes = Path(path), max_bytes

    @property
    def rotated(self) -> Path:
        return self.path.with_name(self.path.name + ".1")

    def append(self, recs: Sequence[Mapping[str, Any]]) -> None:
        if not recs:
            return
        data = "".join(json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n" for r in recs).encode()
        try:
            size = os.lstat(self.path).st_size
        except FileNotFoundError:
            size = 0
        if size and size + len(data) > self.max_bytes:
            os.replace(self.path, self.rotated)
            size = 0
        # O_RDWR: the last byte is read to see whether a crash tore the last line.
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
        try:
            if size and not _ends_with_newline(fd, size):
                data = b"\n" + data  # fence off a line torn by a crash
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def _ends_with_newline(fd: int, size: int) -> bool:
    return os.pread(fd, 1, size - 1) == b"\n"


def _valid(rec: object) -> bool:
    return (isinstance(rec, dict) and isinstance(rec.get("pool"), str)
            and isinstance(rec.get("t"), int | float) and not isinstance(rec.get("t"), bool)
            and math.isfinite(rec["t"]))


def parse_history(text: str) -> list[dict[str, Any]]:
    """Pure: the valid records of JSONL text; torn, foreign or malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        if not line.strip() or len(line) > MAX_LINE:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if _valid(rec):
            out.append(rec)
    return out


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every record of the history (its rotated part first), in time order; [] if none."""
    out: list[dict[str, Any]] = []
    for p in (Path(path).with_name(Path(path).name + ".1"), Path(path)):
        try:
            text = p.read_text(errors="replace")
        except (FileNotFoundError, IsADirectoryError):
            continue
        out.extend(parse_history(text))
    out.sort(key=lambda r: float(r["t"]))
    return out
