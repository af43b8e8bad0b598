"""Submit-time features: the job's own request plus its user's finished history.

Leakage rule: a job's history holds only the user's jobs that had *ended strictly before*
its submit time; jobs still running at submit time are invisible, however soon they end.

The computation is split in two so the bridge can do the second half in Lua:
  1. `History.state(user, t)`: a fixed record per user (`STATE` fields) summarizing the
     jobs that ended before t. Any arithmetic is allowed here (logs, windows): the bridge
     gets these numbers as exported data.
  2. `job_features(state, job)`: the state combined with the job's request using only
     +, -, *, / and comparisons, which Lua 5.1 doubles and numpy float64 compute bit for
     bit alike — so the exported trees see exactly the features LightGBM saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.predict.baselines import Arr, last_two

IArr = npt.NDArray[np.int64]

# Per-user state after the user's k-th finished job (ordered by end time). Sentinels, not
# NaN, for "no such job" (-1; -99 for log ratios, which are negative): Lua and LightGBM
# then take the same branch without any missing-value rules.
STATE = ("n", "r1", "r2", "r3", "q1", "c1", "e1", "m5", "gm5", "ratio5", "lratio5",
         "m20", "gm20", "ratio20", "lratio20", "lsd20", "hit20")
FEATURES = ("req", "cpus", "accel", "part", "n", "r1", "r2", "r3", "q1", "since", "l2c",
            "l2_req", "r1_req", "req_q1", "cpus_c1", "m5", "gm5", "ratio5", "lratio5", "m20",
            "gm20", "ratio20", "lratio20", "lsd20", "hit20", "m5_req", "gm5_req", "m20_req",
            "gm20_req")
NO_LOG_RATIO = -99.0
WINDOWS = (5, 20)
TIME_BITS = 34  # epoch seconds fit below 2**34 until the year 2514
KEY_SEP = "\x1f"  # user keys are "source<US>user": user ids of two traces never mix


def user_keys(df: pd.DataFrame) -> npt.NDArray[np.object_]:
    return (df["source"].astype(str) + KEY_SEP + df["user"].astype(str)).to_numpy(dtype=object)


def known(df: pd.DataFrame, col: str) -> Arr:
    """A number column with the -1 sentinel where the job table has NaN (unknown)."""
    values: Arr = np.nan_to_num(df[col].to_numpy(np.float64), nan=-1.0)
    return values


def epoch(df: pd.DataFrame, col: str) -> IArr:
    """A time column as integer epoch seconds, -1 where unknown."""
    return known(df, col).astype(np.int64)


def usable(df: pd.DataFrame) -> pd.Series:
    """Jobs that ran and ended with known times: the ones history and training use."""
    return (df["runtime_s"] >= 0) & (df["start"] >= 0) & (df["end"] >= 0) & (df["submit"] >= 0)


def _check_times(t: IArr, what: str) -> None:
    if len(t) and (t.min() < 0 or t.max() >= 1 << TIME_BITS):
        raise InputError(f"job table: {what} times must be epoch seconds in [0, 2**{TIME_BITS})")


@dataclass
class History:
    """Finished jobs sorted by (user, end), with prefix sums for windowed means."""

    users: pd.Index  # user key → code (position)
    keys: IArr  # code << TIME_BITS | end, sorted
    group_start: IArr  # first sorted position of each code
    runtime: Arr
    req: Arr
    cpus: Arr
    end: Arr
    prefix: dict[str, Arr]  # name → cumulative sums with a leading 0

    @classmethod
    def build(cls, df: pd.DataFrame) -> History:
        done = df[usable(df)]
        users = pd.Index(pd.unique(user_keys(done)))
        code = users.get_indexer(pd.Index(user_keys(done))).astype(np.int64)
        end = epoch(done, "end")
        _check_times(end, "end")
        # Ties on end time: submit, then table order, so every run sorts the same way.
        order = np.lexsort((np.arange(len(done)), epoch(done, "submit"), end, code))
        code, end = code[order], end[order]
        runtime = np.maximum(done["runtime_s"].to_numpy(np.float64)[order], 1.0)
        req_raw = known(done, "req_time_s")[order]
        # A job without a requested time counts as exactly estimated (ratio 1).
        req = np.where(req_raw > 0, req_raw, runtime)
        cpus = known(done, "req_cpus")[order]
        log_r = np.log(runtime)
        ratio = runtime / req
        series = {"r": runtime, "lr": log_r, "lr2": log_r * log_r, "ratio": ratio,
                  "lratio": np.log(ratio), "hit": ((req_raw > 0) & (runtime >= 0.99 * req_raw)) * 1.0}
        prefix = {k: np.concatenate(([0.0], np.cumsum(v))) for k, v in series.items()}
        keys = (code << TIME_BITS) | end
        group_start = np.searchsorted(keys, np.arange(len(users), dtype=np.int64) << TIME_BITS)
        return cls(users, keys, group_start.astype(np.int64), runtime, req, cpus,
                   end.astype(np.float64), prefix)

    def state(self, keys: npt.NDArray[np.object_], t: IArr) -> dict[str, Arr]:
        """STATE of each user `keys[i]` from the jobs that ended strictly before `t[i]`."""
        t = np.asarray(t, dtype=np.int64)
        _check_times(t, "submit")
        code = self.users.get_indexer(pd.Index(keys)).astype(np.int64)
        known = code >= 0
        base = np.where(known, self.group_start[np.maximum(code, 0)] if len(self.users) else 0, 0)
        pos = np.where(known, np.searchsorted(self.keys, (np.maximum(code, 0) << TIME_BITS) | t), 0)
        k = np.where(known, pos - base, 0)
        s: dict[str, Arr] = {"n": k.astype(np.float64)}

        def last(arr: Arr, back: int) -> Arr:
            if not len(arr):
                return np.full(len(k), -1.0)
            return np.where(k > back, arr[np.maximum(pos - 1 - back, 0)], -1.0)

        s["r1"], s["r2"], s["r3"] = last(self.runtime, 0), last(self.runtime, 1), last(self.runtime, 2)
        s["q1"], s["c1"], s["e1"] = last(self.req, 0), last(self.cpus, 0), last(self.end, 0)
        has = k > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            for w in WINDOWS:
                lo = np.maximum(pos - w, base)
                cnt = np.maximum(pos - lo, 1)

                def mean(name: str, lo: IArr = lo, cnt: IArr = cnt) -> Arr:
                    p = self.prefix[name]
                    return (p[pos] - p[lo]) / cnt

                s[f"m{w}"] = np.where(has, mean("r"), -1.0)
                s[f"gm{w}"] = np.where(has, np.exp(mean("lr")), -1.0)
                s[f"ratio{w}"] = np.where(has, mean("ratio"), -1.0)
                s[f"lratio{w}"] = np.where(has, mean("lratio"), NO_LOG_RATIO)
                s[f"hit{w}"] = np.where(has, mean("hit"), -1.0)
                if w == 20:
                    m = mean("lr")
                    s["lsd20"] = np.where(k > 1, np.sqrt(np.maximum(mean("lr2") - m * m, 0.0)), -1.0)
        return {name: s[name] for name in STATE}


@dataclass(frozen=True)
class JobRequest:
    """Submit-time fields of jobs (arrays): what job_submit.lua can read from job_desc."""

    req: Arr  # requested time in seconds, -1 when not set
    cpus: Arr
    accel: Arr
    part: Arr  # partition code (`partition_codes`), -1 when unknown
    submit: Arr

    @classmethod
    def from_table(cls, df: pd.DataFrame, partitions: Mapping[str, int]) -> JobRequest:
        names = pd.Index(list(partitions))
        at = names.get_indexer(pd.Index(df["partition"].astype(str)))
        codes = np.array([partitions[n] for n in names] + [-1], dtype=np.float64)
        part = codes[at]  # -1 indexes the trailing "unknown" code
        req = known(df, "req_time_s")
        return cls(req=np.where(req > 0, req, -1.0), cpus=known(df, "req_cpus"), accel=known(df, "req_accel"),
                   part=part, submit=known(df, "submit"))


def partition_codes(df: pd.DataFrame) -> dict[str, int]:
    """Partition name → small integer (sorted names); the empty name gets no code."""
    names = sorted(p for p in pd.unique(df["partition"].astype(str)) if p)
    return {p: i for i, p in enumerate(names)}


def job_features(s: Mapping[str, Arr], job: JobRequest, default_runtime: float) -> tuple[Arr, Arr]:
    """(feature matrix in FEATURES order, base runtime). Mirrored line by line in Lua.

    The base is the Tsafrir et al. predictor: mean of the user's last two finished runtimes
    (one if only one), clamped to the request; the request, else `default_runtime`, for a
    user without history. The models predict log(runtime / base).
    """
    n, req = s["n"], job.req
    has, known = n > 0, req > 0
    l2c = last_two(s, req, default_runtime)
    with np.errstate(divide="ignore", invalid="ignore"):
        hk = has & known
        cols: dict[str, Arr] = {
            "req": req, "cpus": job.cpus, "accel": job.accel, "part": job.part,
            "since": np.where(has, job.submit - s["e1"], -1.0),
            "l2c": l2c,
            "l2_req": np.where(known, l2c / req, -1.0),
            "r1_req": np.where(hk, s["r1"] / req, -1.0),
            "req_q1": np.where(hk, req / s["q1"], -1.0),
            "cpus_c1": np.where(has & (s["c1"] > 0) & (job.cpus > 0), job.cpus / s["c1"], -1.0),
        }
        for name in ("m5", "gm5", "m20", "gm20"):
            cols[f"{name}_req"] = np.where(hk, s[name] / req, -1.0)
    for name in STATE:
        cols.setdefault(name, s[name])
    # Column-major: each column is one contiguous write, and LightGBM reads it uncopied.
    x = np.empty((len(n), len(FEATURES)), dtype=np.float64, order="F")
    for j, f in enumerate(FEATURES):
        x[:, j] = cols[f]
    return x, np.maximum(l2c, 1.0)


def table_features(df: pd.DataFrame, history: History, partitions: Mapping[str, int],
                   default_runtime: float) -> tuple[Arr, Arr]:
    """Features of every job of `df` at its own submit time, from `history`."""
    state = history.state(user_keys(df), epoch(df, "submit"))
    return job_features(state, JobRequest.from_table(df, partitions), default_runtime)
