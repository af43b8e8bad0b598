"""LightGBM on a synthetic series with a known daily pattern: it must beat persistence
clearly and come close to the forecast that knows the pattern (the truth without noise)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from slurm_hetero.forecast import HORIZONS
from slurm_hetero.forecast.demand import build_series, demand_table
from slurm_hetero.forecast.evaluate import errors, evaluate_pool, holdout_origins, split_boundary
from slurm_hetero.forecast.features import DAY, PoolFeatures
from slurm_hetero.forecast.models import ForecastParams, predict, train

DAYS = 21
RUN_S = 20 * 60.0


def office_hours(minute_of_day: np.ndarray) -> np.ndarray:
    """0 at night, up from 08:00 to 09:00, 1 by day, down from 17:00 to 18:00."""
    up = np.clip((minute_of_day - 8 * 60) / 60, 0, 1)
    down = np.clip((18 * 60 - minute_of_day) / 60, 0, 1)
    return np.minimum(up, down)


def daily_jobs(noise: float, seed: int = 11) -> pd.DataFrame:
    """One job a minute, 20 minutes long, of 2 units at night and 10 by day, times noise."""
    rng = np.random.default_rng(seed)
    minutes = np.arange(DAYS * DAY)
    size = 2.0 + 8.0 * office_hours(minutes % DAY)
    factor = np.clip(1.0 + noise * rng.standard_normal(len(minutes)), 0.05, None) if noise else 1.0
    submit = minutes * 60.0 + 1.0
    return demand_table(job=[str(m) for m in minutes], pool=["gpu@x86_64"] * len(minutes),
                        amount=size * factor, submit=submit, start=submit, end=submit + RUN_S,
                        limit=[math.nan] * len(minutes))


Scores = dict[tuple[str, int], float]


@pytest.fixture(scope="module")
def scored() -> Scores:
    """On the last 30% of the noisy series, per (what, horizon): "mae:M" the MAE of method M
    against the actual peaks, "under:M" its under-forecast share, "truth:M" its mean distance
    to the truth (the noise-free series' peaks). M = "truth" is the truth as a forecast."""
    noisy = build_series(daily_jobs(noise=0.1), t0=0.0, t1=DAYS * 86400.0)
    clean = build_series(daily_jobs(noise=0.0), t0=0.0, t1=DAYS * 86400.0)
    split_k = split_boundary(noisy, 0.7)
    model = train(noisy, float(noisy.time(split_k)), ["gpu@x86_64"], HORIZONS, ForecastParams(), None)
    feats, clean_feats = PoolFeatures(noisy, "gpu@x86_64"), PoolFeatures(clean, "gpu@x86_64")
    k = holdout_origins(noisy, split_k, 5)
    out: Scores = {}
    for h in HORIZONS:
        actual, truth = feats.target(k, h), clean_feats.target(k, h)
        forecasts = {m: predict(m, feats, k, h, model, "gpu@x86_64")
                     for m in ("lightgbm", "persistence", "seasonal_day")}
        forecasts["truth"] = truth
        for m, f in forecasts.items():
            mae, _, under, _ = errors(actual, f, 1.0)
            out[(f"mae:{m}", h)], out[(f"under:{m}", h)] = mae, under
            out[(f"truth:{m}", h)] = float(np.mean(np.abs(f - truth)) / np.mean(truth))
    return out


@pytest.mark.parametrize("h", HORIZONS)
def test_lightgbm_beats_persistence(scored: Scores, h: int) -> None:
    # the 08:00 ramp moves the peak by up to 160 units within the hour: persistence lags it
    assert scored[("mae:lightgbm", h)] < 0.7 * scored[("mae:persistence", h)], scored


@pytest.mark.parametrize("h", HORIZONS)
def test_lightgbm_approaches_the_truth(scored: Scores, h: int) -> None:
    # no worse than forecasting the known pattern itself (it also sees the noise of the jobs
    # already running, which the pattern cannot know) ...
    assert scored[("mae:lightgbm", h)] <= 1.1 * scored[("mae:truth", h)], scored
    # ... and within 5% of the pattern's own peaks on average
    assert scored[("truth:lightgbm", h)] < 0.05, scored


def test_persistence_under_forecasts_the_ramps(scored: Scores) -> None:
    # every rising stretch of the day is under-forecast by persistence, far less by the model
    assert scored[("under:persistence", 60)] > 1.5 * scored[("under:lightgbm", 60)], scored


def test_evaluate_ranks_the_methods() -> None:
    series = build_series(daily_jobs(noise=0.1), t0=0.0, t1=DAYS * 86400.0)
    scores = {(s.method, s.horizon): s for s in evaluate_pool(series, "gpu@x86_64", 0.7)}
    for h in HORIZONS:
        assert scores[("lightgbm", h)].mase < scores[("persistence", h)].mase
        assert scores[("lightgbm", h)].n == scores[("persistence", h)].n > 1000
    # MASE is scaled by seasonal-naive's in-sample error: on a stable daily pattern seasonal-naive
    # scores about 1 on the test part too
    assert 0.7 < scores[("seasonal_day", 60)].mase < 1.3


def test_errors_metrics() -> None:
    a = np.array([10.0, 10.0, 10.0, 10.0, np.nan])
    f = np.array([12.0, 9.0, 10.0, 6.0, 3.0])
    mae, mase, under, short = errors(a, f, scale=2.0)
    assert (mae, mase, under, short) == (1.75, 0.875, 0.5, 1.25)
    assert all(math.isnan(v) for v in errors(np.array([np.nan]), np.array([1.0]), 1.0))
