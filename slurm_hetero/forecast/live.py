"""The forecast now: a pure function for the bridge daemon's minute, and a refresher that
keeps its inputs (accounting history, a trained model) current.

`forecast_now(model, table, now)` → {pool: {5: units, 15: units, 60: units}}: the peak
in-system demand expected in the next 5, 15 and 60 minutes. It reads only `table` as it was
known at `now` (`demand.as_of`) and the last LOOKBACK_MIN minutes of it; a pool without a
trained booster (new, or too little history) gets the persistence forecast (what is in the
system now), so every pool always has a number.

The bridge daemon sits one floor below this package, so it never imports it: the top-level
CLI (`bridge run`) builds a `Refresher` and hands the daemon a plain callable that returns
the forecast; the daemon writes it into the capacity snapshot.

On a replay (benchmarks/power_replay.py) the cluster's clock is faked and its accounting holds
only the replayed jobs: `OnTraceClock` forecasts on the trace's clock instead, from a model
trained on the trace before the window and the trace's history before it (`history_before`),
and the replay publishes the result for the daemon (power/published.py).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from slurm_hetero.forecast import HORIZONS
from slurm_hetero.forecast.demand import MINUTE, as_of, build_series, concat
from slurm_hetero.forecast.features import WEEK, PoolFeatures
from slurm_hetero.forecast.models import ForecastModel, ForecastParams, Method, best_available, train
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.runner import Runner

# The features reach back one week plus the window of the longest horizon, and 4 hours.
LOOKBACK_MIN = WEEK + 240
RETRY_S = 600.0  # after a failed retrain (slurmdbd away), try again this much later
Forecast = dict[str, dict[int, float]]


@dataclass(frozen=True)
class PoolForecast:
    pool: str
    level: float  # in-system amount at the origin (running + pending)
    running: float
    pending: float
    values: dict[int, float]
    methods: dict[int, Method]


def origin(now: float) -> float:
    """The whole minute a forecast at `now` is made from (the grid's last boundary)."""
    return math.floor(now / MINUTE) * MINUTE


def forecast_detail(model: ForecastModel | None, table: pd.DataFrame, now: float,
                    pools: Iterable[str] | None = None, horizons: Sequence[int] = HORIZONS,
                    tz: str | None = None) -> list[PoolForecast]:
    """Pure: per pool, the forecast at `now` and which method gave each horizon."""
    at = origin(now)
    known = as_of(table, at)
    tz = model.tz if model is not None and tz is None else tz
    series = build_series(known, t0=at - LOOKBACK_MIN * MINUTE, t1=at, pools=pools, horizons=horizons)
    k = series.boundary(at)
    out = []
    for pool in series.pools:
        feats = PoolFeatures(series, pool, tz)
        values: dict[int, float] = {}
        methods: dict[int, Method] = {}
        for h in horizons:
            v, used = best_available(feats, np.array([k]), h, model, pool)
            values[h], methods[h] = round(float(v[0]), 3), used[0]
        p = series.pools[pool]
        out.append(PoolForecast(pool, float(p.level[k]), float(p.running[k]), float(p.pending[k]),
                                values, methods))
    return out


def forecast_now(model: ForecastModel | None, table: pd.DataFrame, now: float,
                 pools: Iterable[str] | None = None, horizons: Sequence[int] = HORIZONS,
                 tz: str | None = None) -> Forecast:
    """Pure: {pool: {horizon_min: units}} at `now` (what the bridge daemon publishes)."""
    return {f.pool: f.values for f in forecast_detail(model, table, now, pools, horizons, tz)}


def fit(table: pd.DataFrame, now: float, days: float, params: ForecastParams | None = None,
        pools: Iterable[str] | None = None, tz: str | None = None) -> ForecastModel:
    """A model trained on the `days` before `now`, from what was known at `now`."""
    at = origin(now)
    series = build_series(as_of(table, at), t0=at - days * 86400, t1=at, pools=pools)
    return train(series, at, series.pools, HORIZONS, params, tz)


class Refresher:
    """For the bridge daemon: call it once a minute; it returns `forecast_now` on current
    accounting. Each call fetches the last few minutes of sacct (running and pending jobs
    included); once a day (and at the first call) a background thread re-reads `days` of
    history and retrains, so a call never waits for training."""

    def __init__(self, site: Site, runner: Runner, days: float = 28.0, retrain_s: float = 86400.0,
                 params: ForecastParams | None = None, tz: str | None = None,
                 clock: Callable[[], float] = time.time, log: Callable[[str], None] = print,
                 background: bool = True, cache_root: Path | None = None):
        from slurm_hetero.forecast.sources import PoolMap

        self.site, self.runner, self.days, self.retrain_s = site, runner, days, retrain_s
        self.params, self.tz, self.clock, self.log, self.background = params, tz, clock, log, background
        self.cache_root = cache_root  # settled days of the history fetch (slurm.sacct's cache)
        self.pools = PoolMap(site).pools()
        self.table: pd.DataFrame | None = None
        self.model: ForecastModel | None = None
        self.fetched_to = 0.0
        self.trained_at = -math.inf
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def _fetch(self, start: float, end: float, cache_root: Path | None = None) -> pd.DataFrame:
        from slurm_hetero.forecast.sources import fetch_sacct

        return fetch_sacct(self.runner, self.site, start, end, cache_root, now=end)

    def _retrain(self, now: float) -> None:
        try:
            history = self._fetch(now - self.days * 86400, now, self.cache_root)
            model = fit(history, now, self.days, self.params, self.pools, self.tz)
        except Exception as e:  # a failed retrain keeps the last model; retried in RETRY_S
            self.trained_at = now - self.retrain_s + RETRY_S
            self.log(f"forecast: retrain failed: {type(e).__name__}: {e}")
            return
        with self._lock:
            self.table = concat([history, self.table]) if self.table is not None else history
            self.model = model
        self.log(f"forecast: trained {len(model.boosters)} model(s) on {self.days:g} days")

    def __call__(self) -> Forecast:
        now = self.clock()
        if now - self.trained_at >= self.retrain_s and (self._worker is None or not self._worker.is_alive()):
            self.trained_at = now
            if self.background:
                self._worker = threading.Thread(target=self._retrain, args=(now,), daemon=True,
                                                name="forecast-retrain")
                self._worker.start()
            else:
                self._retrain(now)
        recent = self._fetch(max(self.fetched_to, now - 3600) - 300, now)
        self.fetched_to = now
        with self._lock:
            table = concat([self.table, recent]) if self.table is not None else recent
            keep = table["end"].isna() | (table["end"] >= now - (self.days * 86400))
            self.table = table.loc[keep].reset_index(drop=True)
            model, table = self.model, self.table
        return forecast_now(model, table, now, self.pools, tz=self.tz)


def shifted(table: pd.DataFrame, by: float) -> pd.DataFrame:
    """The table with every time moved by `by` seconds."""
    out = table.copy()
    for c in ("submit", "start", "end"):
        out[c] = out[c] + by
    return out


def history_before(table: pd.DataFrame, first: float, pool: str | None = None) -> pd.DataFrame:
    """A trace's jobs submitted before `first`, as a replay starting then sees them: the
    replay's cluster is empty at `first`, so a job still in the system then ends there.
    `pool`: the site pool every row counts in (a trace names no architecture)."""
    t = table.loc[table["submit"] < first].copy()
    for c in ("start", "end"):
        t.loc[~(t[c] < first), c] = first
    if pool is not None:
        t["pool"] = pool
    t["job"] = "trace:" + t["job"].astype(str)  # never the same key as a cluster's job id
    return t.reset_index(drop=True)


class OnTraceClock:
    """The forecaster of a replay (benchmarks/power_replay.py): a model trained on the trace
    before the window, fed the trace's history before the window and the replay cluster's
    accounting since, all on the trace's clock (the cluster's minus `shift()`: the replay's
    mapping, None until it is known, and then no forecast). The calendar features thus stay
    the trace's own, whatever the faked clock's date."""

    def __init__(self, model: ForecastModel | None, history: pd.DataFrame,
                 fetch: Callable[[float, float], pd.DataFrame], clock: Callable[[], float],
                 shift: Callable[[], float | None], since: float, pools: Sequence[str],
                 tz: str | None = None):
        self.model, self.history, self.fetch, self.clock = model, history, fetch, clock
        self.shift, self.since, self.pools, self.tz = shift, since, list(pools), tz

    def __call__(self) -> Forecast:
        d = self.shift()
        if d is None:
            return {}
        now = self.clock()
        recent = shifted(self.fetch(self.since, now), -d)
        return forecast_now(self.model, concat([self.history, recent]), now - d, self.pools, tz=self.tz)
