"""Submit-time features and baselines: no leakage, windows right, last-two as published."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table as jobtable
from slurm_hetero.predict import features as F
from slurm_hetero.predict import synthetic
from slurm_hetero.predict.baselines import last_two, user_estimate


def jobs(*rows: tuple[str, int, int, int, int]) -> pd.DataFrame:
    """(user, submit, start, runtime, requested) rows → a job table."""
    return jobtable.normalize(pd.DataFrame([
        {"source": "t", "job_id": str(i), "user": u, "account": "", "submit": s, "start": st,
         "end": st + r, "runtime_s": r, "req_time_s": q, "req_cpus": 4, "req_accel": 0,
         "partition": "", "qos": "", "name": "", "state": "COMPLETED"}
        for i, (u, s, st, r, q) in enumerate(rows)]))


def features_of(df: pd.DataFrame, job_id: str) -> dict[str, float]:
    x, _ = F.table_features(df, F.History.build(df), {}, 600.0)
    row = x[df.index[df["job_id"] == job_id][0]]
    return dict(zip(F.FEATURES, row.tolist(), strict=True))


def test_history_ignores_jobs_that_end_after_submit() -> None:
    # job 2 (C) is submitted at 200: A ended at 100, B is still running until 5000.
    base = [("u", 0, 0, 100, 1000), ("u", 50, 60, 4940, 9000), ("u", 200, 210, 30, 1000)]
    f = features_of(jobs(*base), "2")
    assert (f["n"], f["r1"], f["r2"]) == (1, 100, -1)
    assert f["since"] == 100  # submit 200 - A's end 100
    # Changing the still-running job (runtime, request) changes nothing about C ...
    changed = [base[0], ("u", 50, 60, 10, 20), base[2]]
    f2 = features_of(jobs(*changed), "2")
    assert f2 != f  # ... except that B now ended at 70, before C's submit: it counts
    later = [base[0], ("u", 50, 60, 99_999, 200_000), base[2]]
    assert features_of(jobs(*later), "2") == f


def test_job_ending_exactly_at_submit_is_not_history() -> None:
    f = features_of(jobs(("u", 0, 0, 100, 1000), ("u", 100, 100, 5, 1000)), "1")
    assert f["n"] == 0


def test_other_users_and_sources_do_not_mix() -> None:
    df = jobs(("a", 0, 0, 100, 1000), ("b", 500, 500, 7, 1000))
    assert features_of(df, "1")["n"] == 0
    other = df.copy()
    other.loc[0, "source"] = "other"  # same user name "b" in another trace is someone else
    other.loc[0, "user"] = "b"
    assert features_of(other, "1")["n"] == 0


def test_state_matches_a_plain_loop() -> None:
    df = synthetic.workload(jobs=600, users=7, seed=3)
    h = F.History.build(df)
    state = h.state(F.user_keys(df), df["submit"].to_numpy(np.int64))
    for i in range(0, len(df), 37):
        user, t = df["user"].iloc[i], df["submit"].iloc[i]
        past = df[(df["user"] == user) & (df["end"] < t)].sort_values(["end", "submit"], kind="stable")
        r = np.maximum(past["runtime_s"].to_numpy(float), 1.0)[::-1]  # most recent first
        q = past["req_time_s"].to_numpy(float)[::-1]
        assert state["n"][i] == len(past)
        if len(past) == 0:
            assert state["r1"][i] == -1 and state["lratio20"][i] == F.NO_LOG_RATIO
            continue
        assert state["r1"][i] == r[0] and state["q1"][i] == q[0]
        assert state["r2"][i] == (r[1] if len(r) > 1 else -1)
        assert state["m5"][i] == pytest.approx(r[:5].mean(), rel=1e-9)
        assert state["gm20"][i] == pytest.approx(np.exp(np.log(r[:20]).mean()), rel=1e-9)
        assert state["ratio20"][i] == pytest.approx((r[:20] / q[:20]).mean(), rel=1e-9)
        assert state["e1"][i] == past["end"].iloc[-1]


def test_last_two_baseline() -> None:
    s = {"n": np.array([0.0, 1, 2, 2, 0]), "r1": np.array([-1.0, 50, 100, 900, -1]),
         "r2": np.array([-1.0, -1, 300, 900, -1])}
    req = np.array([1000.0, 1000, 1000, 600, -1])
    assert last_two(s, req, 77.0).tolist() == [1000, 50, 200, 600, 77]
    assert np.isnan(user_estimate(req)[-1]) and user_estimate(req)[0] == 1000


def test_features_need_epoch_times() -> None:
    df = jobs(("u", 0, 0, 10, 100))
    df.loc[0, "submit"] = -5
    df.loc[0, "start"] = 0
    with pytest.raises(InputError, match="submit"):
        F.table_features(df, F.History.build(df.iloc[:0]), {}, 1.0)


def test_unknown_request_and_cpus_use_sentinels() -> None:
    df = jobs(("u", 0, 0, 100, 1000), ("u", 500, 500, 10, -1))
    df.loc[1, "req_cpus"] = -1
    f = features_of(df, "1")
    assert f["req"] == -1 and f["l2c"] == 100 and f["r1_req"] == -1 and f["cpus_c1"] == -1
