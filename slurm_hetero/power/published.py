"""A demand forecast published in a file, for a bridge daemon that computes none itself.

A forecaster running apart from the daemon (replay's, on the replayed trace's history; a
site's own) writes `{"time": EPOCH, "forecast": {pool: {"5": units, "15": ..., "60": ...}}}`
atomically to StateSaveLocation/hetero-forecast.json; the daemon, started without
`--forecast`, reads it once a minute and hands it to the keeper and the snapshot. A file
older than `max_age_s` on the daemon's clock (its writer stopped) counts as no forecast:
the keeper then keeps one idle node per pool, the safe side.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from slurm_hetero.fileio import write_json_atomic

FORECAST_FILE = "hetero-forecast.json"
MAX_AGE_S = 300.0
MAX_BYTES = 1024 * 1024


def write_published(path: Path, forecast: Mapping[str, Mapping[int, float]], now: float) -> None:
    write_json_atomic(str(path), {"time": now, "forecast": {
        pool: {str(h): float(v) for h, v in hv.items()} for pool, hv in forecast.items()}})


def parse_published(data: object, now: float, max_age_s: float = MAX_AGE_S) -> dict[str, dict[int, float]]:
    """Pure: the forecast of a published document; {} when stale, from the future by more
    than max_age_s, or not of this shape (bad entries are dropped one by one)."""
    if not isinstance(data, dict):
        return {}
    t = data.get("time")
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) \
            or abs(now - t) > max_age_s:
        return {}
    fc = data.get("forecast")
    out: dict[str, dict[int, float]] = {}
    for pool, hv in (fc.items() if isinstance(fc, dict) else ()):
        if not isinstance(hv, dict):
            continue
        vals = {}
        for h, v in hv.items():
            if str(h).isdigit() and isinstance(v, int | float) and not isinstance(v, bool) \
                    and math.isfinite(v) and v >= 0:
                vals[int(h)] = float(v)
        if vals:
            out[str(pool)] = vals
    return out


def reader(path: Path, max_age_s: float = MAX_AGE_S,
           clock: Callable[[], float] = time.time) -> Callable[[], dict[str, dict[int, float]]]:
    """A forecaster for the bridge daemon: the file's forecast now ({} if absent or stale)."""
    def read() -> dict[str, dict[int, float]]:
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
        except OSError:
            return {}
        if len(raw) > MAX_BYTES:
            return {}
        try:
            data = json.loads(raw)
        except ValueError:
            return {}
        return parse_published(data, clock(), max_age_s)
    return read
