"""What a forecast made at boundary k of a pool's series sees, and what it must predict.

Everything at origin k comes from bins < k and boundary values at k, never later: the
target is the peak of the bins k..k+H-1; the seasonal features use the same window one day
(1440 bins) or one week earlier, which ends before k for every H <= 1440.

Features (`FEATURES`, in order):
    level, running, pending      in-system amount at k, and its split (the queue)
    mean5/15/60/240              mean of the last 5..240 bins
    max60, min60                 extremes of the last hour
    arrivals15, arrivals60       amount submitted in the last 15 / 60 minutes
    ending                       running amount whose time limit ends it within H
    day_peak, week_peak          the target's window one day / one week earlier
    day_level                    the level one day earlier, at k - 1440
    *_rel                        the above minus `level` (the model predicts a change)
    day_change, week_change      peak - level of the window one day / one week earlier
    profile_change               mean of peak - level at this time of day, last 7 days
    profile_arrivals             mean amount submitted in this window of the day, last 7 days
    minute_of_day, day_of_week   local time of the origin
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slurm_hetero.forecast.demand import PoolSeries, Series

DAY = 1440
WEEK = 7 * DAY
FEATURES = (
    "level", "running", "pending", "mean5", "mean15", "mean60", "mean240", "max60", "min60",
    "arrivals15", "arrivals60", "ending", "day_peak", "week_peak", "day_level",
    "mean60_rel", "max60_rel", "day_peak_rel", "week_peak_rel", "day_level_rel",
    "day_change", "week_change", "profile_change", "profile_arrivals",
    "minute_of_day", "day_of_week",
)
PROFILE_DAYS = 7


def forward_peak(values: np.ndarray, width: int) -> np.ndarray:
    """out[k] = max(values[k:k+width]); NaN where the window runs past the end.

    >>> forward_peak(np.array([1.0, 3.0, 2.0, 0.0]), 2).tolist()
    [3.0, 3.0, 2.0, nan]
    """
    n = len(values)
    out = np.full(n, np.nan)
    if width <= 0 or n < width:
        return out
    win = np.lib.stride_tricks.sliding_window_view(values, width)
    out[: n - width + 1] = win.max(axis=1)
    return out


def forward_min(values: np.ndarray, width: int) -> np.ndarray:
    n = len(values)
    out = np.full(n, np.nan)
    if width <= 0 or n < width:
        return out
    out[: n - width + 1] = np.lib.stride_tricks.sliding_window_view(values, width).min(axis=1)
    return out


def _at(values: np.ndarray, k: np.ndarray) -> np.ndarray:
    """values[k], NaN where k is outside the array."""
    ok = (k >= 0) & (k < len(values))
    out = np.full(len(k), np.nan)
    out[ok] = values[k[ok]]
    return out


def _past_mean(csum: np.ndarray, k: np.ndarray, width: int) -> np.ndarray:
    """Mean of bins k-width..k-1 from csum (csum[0] = 0, csum[i] = sum of bins < i)."""
    lo = k - width
    ok = lo >= 0
    out = np.full(len(k), np.nan)
    out[ok] = (csum[k[ok]] - csum[lo[ok]]) / width
    return out


def calendar(times: np.ndarray, tz: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(minute of day, day of week 0=Monday) of epoch seconds in time zone `tz` (None: UTC).

    >>> calendar(np.array([0.0, 86400 * 3 + 3600]), None)
    (array([ 0., 60.]), array([3., 6.]))
    """
    idx = pd.DatetimeIndex(pd.to_datetime(times, unit="s", utc=True))
    if tz:
        idx = idx.tz_convert(tz)
    minute = (idx.hour * 60 + idx.minute).to_numpy(dtype="float64")
    return minute, idx.day_of_week.to_numpy(dtype="float64")


class PoolFeatures:
    """Feature rows and targets of one pool, with the per-series arrays computed once."""

    def __init__(self, series: Series, pool: str, tz: str | None = None):
        self.series, self.tz = series, tz
        self.p: PoolSeries = series.pools[pool]
        self.csum = np.concatenate([[0.0], np.cumsum(self.p.mean)])
        self.acsum = np.concatenate([[0.0], np.cumsum(self.p.arrivals)])
        self._peaks: dict[int, np.ndarray] = {}
        self.max60 = forward_peak(self.p.mean, 60)
        self.min60 = forward_min(self.p.mean, 60)

    def peak(self, horizon: int) -> np.ndarray:
        if horizon not in self._peaks:
            self._peaks[horizon] = forward_peak(self.p.mean, horizon)
        return self._peaks[horizon]

    def target(self, k: np.ndarray, horizon: int) -> np.ndarray:
        """The peak of bins k..k+H-1; NaN where the series ends before k + H."""
        return _at(self.peak(horizon), np.asarray(k, dtype=np.int64))

    def persistence(self, k: np.ndarray) -> np.ndarray:
        return _at(self.p.level, np.asarray(k, dtype=np.int64))

    def seasonal(self, k: np.ndarray, horizon: int, lag: int = DAY) -> np.ndarray:
        """The target's window `lag` bins earlier (lag >= horizon: it ended before k)."""
        if lag < horizon:
            raise ValueError(f"seasonal lag {lag} min is shorter than the horizon {horizon} min")
        return _at(self.peak(horizon), np.asarray(k, dtype=np.int64) - lag)

    def change(self, k: np.ndarray, horizon: int) -> np.ndarray:
        """peak - level at origins k (NaN outside the data): what the model predicts."""
        return np.asarray(self.target(k, horizon) - self.persistence(k), dtype="float64")

    def profile(self, k: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean change and mean arrivals of this window of the day over the last
        PROFILE_DAYS days (the days with data)."""
        changes, arrivals = [], []
        for d in range(1, PROFILE_DAYS + 1):
            past = k - d * DAY
            changes.append(self.change(past, horizon))
            hi = past + horizon
            ok = (past >= 0) & (hi < len(self.acsum))
            a = np.full(len(k), np.nan)
            a[ok] = self.acsum[hi[ok]] - self.acsum[past[ok]]
            arrivals.append(a)
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no history yet
                return np.nanmean(np.vstack(changes), axis=0), np.nanmean(np.vstack(arrivals), axis=0)

    def matrix(self, k: np.ndarray, horizon: int) -> np.ndarray:
        """Feature rows (len(k) rows, len(FEATURES) columns) for origins k."""
        k = np.asarray(k, dtype=np.int64)
        p = self.p
        level = _at(p.level, k)
        day_peak = self.seasonal(k, horizon, DAY)
        week_peak = self.seasonal(k, horizon, WEEK)
        day_level = _at(p.level, k - DAY)
        mean60 = _past_mean(self.csum, k, 60)
        max60 = _at(self.max60, k - 60)
        minute, weekday = calendar(self.series.time(k), self.tz)
        ending = p.ending.get(horizon)
        cols = [
            level, _at(p.running, k), _at(p.pending, k),
            _past_mean(self.csum, k, 5), _past_mean(self.csum, k, 15), mean60,
            _past_mean(self.csum, k, 240), max60, _at(self.min60, k - 60),
            _past_mean(self.acsum, k, 15) * 15, _past_mean(self.acsum, k, 60) * 60,
            _at(ending, k) if ending is not None else np.full(len(k), np.nan),
            day_peak, week_peak, day_level,
            mean60 - level, max60 - level, day_peak - level, week_peak - level, day_level - level,
            self.change(k - DAY, horizon), self.change(k - WEEK, horizon), *self.profile(k, horizon),
            minute, weekday,
        ]
        return np.column_stack(cols) if len(k) else np.empty((0, len(FEATURES)))
