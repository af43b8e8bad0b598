"""The time-ordered split never leaks the future: whatever happens at or after the split
(jobs submitted later, jobs that end later than they did, a different future altogether)
changes neither the training rows nor the trained model, and a live forecast at t reads
nothing after t."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from slurm_hetero.forecast import HORIZONS
from slurm_hetero.forecast.demand import build_series, demand_table
from slurm_hetero.forecast.evaluate import holdout_origins, split_boundary
from slurm_hetero.forecast.features import PoolFeatures
from slurm_hetero.forecast.live import fit, forecast_now
from slurm_hetero.forecast.models import ForecastParams, train, train_origins, training_rows

DAY_S = 86400.0
T1 = 12 * DAY_S
SPLIT = 9 * DAY_S + 7 * 60.0  # a whole minute, not a day boundary
PARAMS = ForecastParams(rounds=30, min_rows=50)


def jobs(seed: int, start: float = 0.0, stop: float = T1, n: int = 1500) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(start, stop, n))
    wait = rng.exponential(600, n)
    run = rng.exponential(3600, n)
    pools = rng.choice(["a100-80gb@x86_64", "cpu@aarch64"], n)
    return demand_table(job=[f"{seed}-{i}" for i in range(n)], pool=pools,
                        amount=rng.integers(1, 9, n).astype(float), submit=submit, start=submit + wait,
                        end=submit + wait + run, limit=np.ceil((wait + run) / 600) * 600 + 600)


def rewrite_future(t: pd.DataFrame, at: float, seed: int) -> pd.DataFrame:
    """Same past, another future: jobs submitted at or after `at` replaced by other ones, and
    every start or end after `at` moved elsewhere after `at`."""
    past = t.loc[t["submit"] < at].copy()
    rng = np.random.default_rng(seed)
    for col in ("start", "end"):
        later = past[col] >= at
        past.loc[later, col] = at + rng.uniform(1, 5 * 3600, int(later.sum()))
    past["end"] = np.maximum(past["end"], past["start"].fillna(past["submit"]))
    return pd.concat([past, jobs(seed, at, T1, 900)], ignore_index=True)


@pytest.fixture(scope="module")
def tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    t = jobs(1)
    other = rewrite_future(t, SPLIT, 99)
    assert not t.loc[t["submit"] >= SPLIT].equals(other.loc[other["submit"] >= SPLIT])
    return t, other


def test_training_origins_end_before_the_split() -> None:
    s = build_series(jobs(2), t0=0.0, t1=T1)
    split_k = s.boundary(SPLIT)
    for h in HORIZONS:
        k = train_origins(s, h, split_k, stride=5)
        assert len(k) and (k + h <= split_k).all()
        assert k[-1] == split_k - h  # the last window ends exactly at the split
    assert (holdout_origins(s, split_k, 5) >= split_k).all()


def test_another_future_changes_no_training_row(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    a, b = (build_series(t, t0=0.0, t1=T1) for t in tables)
    split_k = a.boundary(SPLIT)
    for pool in a.pools:
        fa, fb = PoolFeatures(a, pool), PoolFeatures(b, pool)
        for h in HORIZONS:
            ka, xa, ya = training_rows(fa, h, split_k, 5)
            kb, xb, yb = training_rows(fb, h, split_k, 5)
            np.testing.assert_array_equal(ka, kb)
            np.testing.assert_array_equal(xa, xb)
            np.testing.assert_array_equal(ya, yb)
        # ... while the rows after the split do differ: the check can see a leak
        k = holdout_origins(a, split_k, 5)
        assert not np.array_equal(fa.target(k, 60), fb.target(k, 60), equal_nan=True)


def test_another_future_trains_the_same_model(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    a, b = (build_series(t, t0=0.0, t1=T1) for t in tables)
    ma, mb = (train(s, SPLIT, None, HORIZONS, PARAMS) for s in (a, b))
    assert ma.boosters.keys() == mb.boosters.keys() and len(ma.boosters) == 2 * len(HORIZONS)
    x = np.random.default_rng(5).uniform(0, 50, (64, ma.boosters[("cpu@aarch64", 5)].num_feature()))
    for key, booster in ma.boosters.items():
        np.testing.assert_array_equal(booster.predict(x), mb.boosters[key].predict(x))


def test_a_live_forecast_reads_nothing_after_now(tables: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    a, b = tables
    model = fit(a, SPLIT, days=9, params=PARAMS)
    same = fit(b, SPLIT, days=9, params=PARAMS)
    fa, fb = forecast_now(model, a, SPLIT), forecast_now(same, b, SPLIT)
    assert fa == fb and set(fa) == {"a100-80gb@x86_64", "cpu@aarch64"}
    assert all(set(v) == set(HORIZONS) and all(math.isfinite(x) for x in v.values()) for v in fa.values())
    # later on, the futures differ and so do the forecasts
    assert forecast_now(model, a, SPLIT + 2 * 3600) != forecast_now(model, b, SPLIT + 2 * 3600)


def test_split_fraction_is_checked() -> None:
    s = build_series(jobs(3, n=50), t0=0.0, t1=DAY_S)
    assert split_boundary(s, 0.5) == 720
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_boundary(s, 1.0)
