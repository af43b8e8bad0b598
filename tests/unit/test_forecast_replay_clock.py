"""The forecast on a replay's clock (forecast/live.py: history_before, OnTraceClock): trained
and fed on the trace's own clock, whatever the faked clock reads."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from slurm_hetero.forecast.demand import demand_table
from slurm_hetero.forecast.live import OnTraceClock, forecast_now, history_before, shifted

FIRST = 1_000_020.0  # the window's first submit (trace clock), a whole minute
D = 796_000_000.0  # faked clock minus trace clock


def trace() -> pd.DataFrame:
    return demand_table(job=["1", "2", "3"], pool=["cpu@unknown"] * 3, amount=[4.0, 2.0, 8.0],
                        submit=[FIRST - 600, FIRST - 300, FIRST + 60],
                        start=[FIRST - 600, FIRST - 100, FIRST + 60],
                        end=[FIRST - 120, FIRST + 900, FIRST + 400], limit=[math.nan] * 3)


def test_history_before_clips_at_the_window() -> None:
    h = history_before(trace(), FIRST, "cpu@x86_64")
    # job 3 is the window's own; job 2 was still running: the replay's empty cluster ends it at FIRST
    assert h["job"].tolist() == ["trace:1", "trace:2"]
    assert h["end"].tolist() == [FIRST - 120, FIRST]
    assert set(h["pool"]) == {"cpu@x86_64"}


def test_on_trace_clock_equals_the_forecast_in_trace_time() -> None:
    hist = history_before(trace(), FIRST, "cpu@x86_64")
    # what the replay cluster's accounting says, on its faked clock: two jobs of the window
    cluster = demand_table(job=["1", "2"], pool=["cpu@x86_64"] * 2, amount=[8.0, 3.0],
                           submit=[FIRST + 60 + D, FIRST + 120 + D], start=[FIRST + 60 + D, math.nan],
                           end=[math.nan, math.nan], limit=[600.0, 600.0])
    asked: list[tuple[float, float]] = []

    def fetch(a: float, b: float) -> pd.DataFrame:
        asked.append((a, b))
        return cluster

    shift: list[float | None] = [None]
    now = FIRST + 180 + D
    f = OnTraceClock(None, hist, fetch, lambda: now, lambda: shift[0], since=FIRST + D, pools=["cpu@x86_64"])
    assert f() == {}  # the mapping is not known yet: no forecast rather than a wrong one
    shift[0] = D
    got = f()
    assert asked == [(FIRST + D, now)]
    want = forecast_now(None, pd.concat([hist, shifted(cluster, -D)], ignore_index=True), FIRST + 180,
                        ["cpu@x86_64"])
    assert got == want
    # without a model: persistence, the in-system amount now (8 running + 3 pending; the
    # history's jobs ended at FIRST) on every horizon
    assert got["cpu@x86_64"] == {5: 11.0, 15: 11.0, 60: 11.0}
    assert np.isclose(shifted(cluster, -D)["submit"].to_numpy(), [FIRST + 60, FIRST + 120]).all()
