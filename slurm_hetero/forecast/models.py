"""The forecasters: LightGBM per (pool, horizon), and the baselines it must beat.

- persistence: the in-system amount now (what a plain SuspendTime policy assumes);
- seasonal-naive: the same window one day (or one week) earlier;
- LightGBM: gradient-boosted trees over `features.FEATURES`, trained on the *change*
  (peak - level now), so a pool that grows beyond anything seen in training is still
  forecast around its current level; the forecast is never negative.

Training takes origins whose whole target window ends at or before `until`: nothing at or
after `until` reaches the model (tests/unit/test_forecast_split.py holds this).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import lightgbm as lgb
import numpy as np

from slurm_hetero.forecast import HORIZONS
from slurm_hetero.forecast.demand import Series
from slurm_hetero.forecast.features import DAY, FEATURES, WEEK, PoolFeatures

Method = Literal["lightgbm", "seasonal_day", "seasonal_week", "persistence"]
METHODS: tuple[Method, ...] = ("lightgbm", "seasonal_day", "seasonal_week", "persistence")
# Without a booster: persistence, which beat seasonal-naive on every shared trace
# (benchmarks/forecast_traces.py) and never forecasts below what is in the system now.
FALLBACKS: tuple[Method, ...] = ("lightgbm", "persistence")


@dataclass(frozen=True)
class ForecastParams:
    rounds: int = 200
    leaves: int = 31
    learning_rate: float = 0.05
    min_leaf: int = 50
    objective: str = "l1"  # the metric we report is MAE: fit the median
    alpha: float = 0.5  # with objective "quantile": the quantile (0.8: under-forecast ~20% of origins)
    threads: int = 2
    stride: int = 5  # minutes between training origins
    min_rows: int = 200  # fewer training origins: no model, the fallback forecasts
    seed: int = 7


@dataclass
class ForecastModel:
    """Trained boosters by (pool, horizon); `until`: the end of the training data."""

    boosters: dict[tuple[str, int], lgb.Booster] = field(default_factory=dict)
    tz: str | None = None
    until: float = float("nan")
    params: ForecastParams = field(default_factory=ForecastParams)

    def has(self, pool: str, horizon: int) -> bool:
        return (pool, horizon) in self.boosters


def train_origins(series: Series, horizon: int, until_k: int, stride: int, first_k: int = 0) -> np.ndarray:
    """Boundaries k (every `stride`, aligned to the end) with k + horizon <= until_k: the
    whole target window lies before boundary until_k."""
    last = min(until_k, series.minutes) - horizon
    if last < first_k:
        return np.empty(0, dtype=np.int64)
    return np.arange(last, first_k - 1, -max(1, stride), dtype=np.int64)[::-1]


def fit_booster(x: np.ndarray, y: np.ndarray, params: ForecastParams) -> lgb.Booster:
    lgb_params = {
        "objective": params.objective, "num_leaves": params.leaves,
        "learning_rate": params.learning_rate, "min_data_in_leaf": params.min_leaf,
        "feature_fraction": 0.9, "bagging_fraction": 0.8, "bagging_freq": 1,
        "num_threads": params.threads, "seed": params.seed, "deterministic": True,
        "verbosity": -1,
    }
    if params.objective == "quantile":
        lgb_params["alpha"] = params.alpha
    data = lgb.Dataset(x, label=y, feature_name=list(FEATURES), free_raw_data=True)
    return lgb.train(lgb_params, data, num_boost_round=params.rounds)


def training_rows(feats: PoolFeatures, horizon: int, until_k: int,
                  stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(origins, X, y) of one pool: y is the change peak - level; rows without a target dropped."""
    k = train_origins(feats.series, horizon, until_k, stride)
    y = feats.target(k, horizon) - feats.persistence(k)
    ok = np.isfinite(y)
    k = k[ok]
    return k, feats.matrix(k, horizon), y[ok]


def train(series: Series, until: float, pools: Iterable[str] | None = None,
          horizons: Sequence[int] = HORIZONS, params: ForecastParams | None = None,
          tz: str | None = None) -> ForecastModel:
    """One booster per pool and horizon from the series up to `until` (epoch seconds)."""
    params = params or ForecastParams()
    until_k = series.boundary(until)
    model = ForecastModel(tz=tz, until=float(series.time(until_k)), params=params)
    for pool in pools if pools is not None else series.pools:
        feats = PoolFeatures(series, pool, tz)
        for h in horizons:
            _, x, y = training_rows(feats, h, until_k, params.stride)
            if len(y) < params.min_rows:
                continue
            model.boosters[(pool, h)] = fit_booster(x, y, params)
    return model


def predict(method: Method, feats: PoolFeatures, k: np.ndarray, horizon: int,
            model: ForecastModel | None = None, pool: str = "") -> np.ndarray:
    """Forecasts of `method` at origins k; NaN where the method has nothing to say (no
    booster for the pool, no history a day or week back)."""
    k = np.asarray(k, dtype=np.int64)
    if method == "persistence":
        return feats.persistence(k)
    if method == "seasonal_day":
        return feats.seasonal(k, horizon, DAY)
    if method == "seasonal_week":
        return feats.seasonal(k, horizon, WEEK)
    if model is None or not model.has(pool, horizon):
        return np.full(len(k), np.nan)
    if not len(k):
        return np.empty(0)
    change = np.asarray(model.boosters[(pool, horizon)].predict(feats.matrix(k, horizon)), dtype="float64")
    return np.asarray(np.maximum(0.0, feats.persistence(k) + change), dtype="float64")


def best_available(feats: PoolFeatures, k: np.ndarray, horizon: int, model: ForecastModel | None,
                   pool: str) -> tuple[np.ndarray, list[Method]]:
    """LightGBM where a booster exists, else persistence."""
    k = np.asarray(k, dtype=np.int64)
    out = np.full(len(k), np.nan)
    used: list[Method] = ["persistence"] * len(k)
    for method in FALLBACKS:
        todo = np.isnan(out)
        if not todo.any():
            break
        got = predict(method, feats, k[todo], horizon, model, pool)
        idx = np.flatnonzero(todo)
        fill = np.isfinite(got)
        out[idx[fill]] = got[fill]
        for i in idx[fill]:
            used[i] = method
    return out, used
