"""Train on the past, test on the future: scores per pool, horizon and method.

The split is one boundary S (a fraction of the grid): training origins are those whose
target window ends at or before S, test origins are at or after S, every `stride`
minutes, each with all horizons' windows inside the data. Every method is scored on the
same test origins (those where all of them have a forecast).

Metrics, and why:
- MAE, in the pool's units (normalized accelerator units, or cores): what an admin can
  read as "nodes' worth of capacity we were off by".
- MASE: MAE divided by the in-sample MAE of the seasonal-naive (same window yesterday)
  forecast on the training origins. Scale-free, so traces in cores and pools in GPU units
  compare; below 1 beats what seasonal-naive did in the past; the methods' ranking is
  the same as by MAE (one scale per pool and horizon).
- under: the share of origins forecast below the actual peak. Under-forecast means a
  node asleep when a job needs it, i.e. a wait of ResumeTimeout; over-forecast only costs
  idle power. `shortfall`: the mean amount missing (0 where not under).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_hetero.forecast import HORIZONS
from slurm_hetero.forecast.demand import Series
from slurm_hetero.forecast.features import DAY, PoolFeatures
from slurm_hetero.forecast.models import METHODS, ForecastParams, Method, predict, train, train_origins


@dataclass(frozen=True)
class Score:
    pool: str
    horizon: int
    method: Method
    n: int
    mae: float
    mase: float
    under: float
    shortfall: float
    cap_mae: float = math.nan  # MAE and under share of min(value, capacity): what waking nodes sees
    cap_under: float = math.nan


def errors(actual: np.ndarray, forecast: np.ndarray, scale: float) -> tuple[float, float, float, float]:
    """(MAE, MASE, under-forecast share, mean shortfall) over the finite pairs.

    >>> errors(np.array([2.0, 4.0, 6.0]), np.array([3.0, 4.0, 3.0]), scale=2.0)
    (1.3333333333333333, 0.6666666666666666, 0.3333333333333333, 1.0)
    """
    ok = np.isfinite(actual) & np.isfinite(forecast)
    a, f = actual[ok], forecast[ok]
    if not len(a):
        return math.nan, math.nan, math.nan, math.nan
    mae = float(np.mean(np.abs(f - a)))
    under = f < a - 1e-6 * (1.0 + np.abs(a))
    mase = mae / scale if scale > 0 and math.isfinite(scale) else math.nan
    return mae, mase, float(np.mean(under)), float(np.mean(np.where(under, a - f, 0.0)))


def split_boundary(series: Series, train_frac: float) -> int:
    if not 0 < train_frac < 1:
        raise ValueError(f"train fraction {train_frac} must be between 0 and 1")
    return int(series.minutes * train_frac)


def holdout_origins(series: Series, split_k: int, stride: int,
                    horizons: Sequence[int] = HORIZONS) -> np.ndarray:
    return np.arange(split_k, series.minutes - max(horizons) + 1, max(1, stride), dtype=np.int64)


def evaluate_pool(series: Series, pool: str, train_frac: float = 0.7, horizons: Sequence[int] = HORIZONS,
                  params: ForecastParams | None = None, tz: str | None = None,
                  test_stride: int = 5, methods: Sequence[Method] = METHODS,
                  capacity: float | None = None) -> list[Score]:
    """Scores of every method for one pool, trained before the split, tested after it;
    with `capacity`, also the errors of forecast and actual both capped at it (a power saver
    can wake at most every node: demand above capacity is queue, not nodes)."""
    params = params or ForecastParams()
    split_k = split_boundary(series, train_frac)
    model = train(series, float(series.time(split_k)), [pool], horizons, params, tz) \
        if "lightgbm" in methods else None
    feats = PoolFeatures(series, pool, tz)
    k = holdout_origins(series, split_k, test_stride, horizons)
    out: list[Score] = []
    for h in horizons:
        actual = feats.target(k, h)
        preds = {m: predict(m, feats, k, h, model, pool) for m in methods}
        common = np.isfinite(actual)
        for f in preds.values():
            common &= np.isfinite(f)
        tk = train_origins(series, h, split_k, params.stride, first_k=DAY)
        in_sample = np.abs(feats.seasonal(tk, h, DAY) - feats.target(tk, h))
        scale = float(np.nanmean(in_sample)) if np.isfinite(in_sample).any() else math.nan
        for m, f in preds.items():
            mae, mase, under, short = errors(actual[common], f[common], scale)
            cap_mae = cap_under = math.nan
            if capacity is not None:
                cap_mae, _, cap_under, _ = errors(np.minimum(actual[common], capacity),
                                                  np.minimum(f[common], capacity), scale)
            out.append(Score(pool, h, m, int(common.sum()), mae, mase, under, short, cap_mae, cap_under))
    return out
