"""Bottlenecks from history: what made jobs wait long, as a handful of plain rules.

One shallow regression tree (LightGBM: one tree, depth 3) is fitted to each started job's
log(1 + wait in minutes), over what was known when the job was submitted:

- pool (the bridge's pool, else the allocated `model@arch`, `cpu@arch` for CPU work),
  tier (the bridge's --tier, else the QoS), partition;
- size: accelerator devices asked (0 for CPU work) and CPUs asked; time limit asked;
- the queue it joined: jobs already waiting in its pool at its submit time and the devices
  (accelerator pools) or CPUs (CPU pools) those jobs asked — one sort-and-search sweep
  over every job's waiting interval [max(submit, eligible), start) (`queue_at`).

Each leaf becomes one rule: the conditions of its path in words (thresholds on one feature
merged, snapped to values the history holds; categorical splits named by their values),
its support (jobs, share of started jobs), p50/p90 wait, and the reason Slurm recorded
most often for its jobs with that reason's share. Rules are ranked by jobs x median wait
(the wait they account for); the top TOP are shown, CSV and --json carry every leaf.

Choices, and why:
- target log(1 + minutes), not "waited more than the site's p75": a flag counts a
  20-minute and a 2-day wait alike and its cut moves with the site; the log keeps the
  magnitude while a few multi-day waits cannot outweigh everything (they would in
  seconds), and sub-minute waits (a scheduler cycle) all read as none.
- the recorded reason describes a leaf but is not split on: it is written while the job
  waits (an outcome, "Priority" or "Resources" for nearly every waiting job, "None" for the
  others), so a split on it would explain waits by themselves and crowd the causes known at
  submit out of a depth-3 tree.
- a split must explain MIN_GAIN_SHARE of the variance of the target and a leaf hold
  MIN_LEAF_SHARE of the jobs (at least MIN_LEAF_JOBS): noise does not become a rule, and
  every rule is about a group large enough to act on.
- wait as the report's Queue waits section counts it: start - max(submit, eligible), for
  jobs that started inside the period (replay: start - due, measured jobs).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import lightgbm as lgb
import numpy as np
import pandas as pd

from slurm_hetero.jobs import table as J
from slurm_hetero.reports import fmt
from slurm_hetero.reports.model import Section, Table
from slurm_hetero.reports.period import Period
from slurm_hetero.reports.whatif import Replay

Arr = np.ndarray
Status = Literal["rules", "not enough history", "no wait", "no split"]

MIN_JOBS = 200  # started jobs below which there is no model, only a line that says so
MAX_DEPTH = 3
MIN_LEAF_SHARE = 0.01
MIN_LEAF_JOBS = 20
MIN_GAIN_SHARE = 0.01
TOP = 5
TARGET = "log(1 + wait in minutes)"
NO_REASON = frozenset({"", "None", "none", "(null)"})
CATEGORICAL = ("pool", "tier", "partition")
NUMERIC = ("devices", "cpus", "req_time_s", "queue_jobs", "queue_units")
FEATURES = (*CATEGORICAL, *NUMERIC)
_NONE = "(none)"


# ---- queue state at submission -----------------------------------------------------------

def queue_at(key: Arr, enter: Arr, leave: Arr, weight: Arr, at_key: Arr, at: Arr) -> tuple[Arr, Arr]:
    """For each query k: how many intervals of key at_key[k] hold enter < at[k] < leave, and
    the sum of their weights (jobs already waiting when a job was submitted, and what they
    asked). One sort of every time, then binary searches: O(n log n), no loop over keys.

    >>> n, w = queue_at(np.array([0, 0, 1]), np.array([0., 5., 0.]), np.array([10., 8., 10.]),
    ...                 np.array([1., 2., 4.]), np.array([0, 0, 1]), np.array([6., 10., 5.]))
    >>> n.tolist(), w.tolist()
    ([2.0, 0.0, 1.0], [3.0, 0.0, 4.0])
    """
    ok = np.isfinite(enter) & np.isfinite(leave) & (leave > enter)
    key, enter, leave, weight = key[ok], enter[ok], leave[ok], np.nan_to_num(weight[ok])
    if not len(key) or not len(at):
        return np.zeros(len(at)), np.zeros(len(at))
    # Times as exact integer ranks so that (key, time) packs into one sortable int64.
    times = np.unique(np.concatenate([enter, leave, at]))
    span = np.int64(len(times) + 1)
    base = key.astype(np.int64) * span
    e = base + np.searchsorted(times, enter)
    lv = base + np.searchsorted(times, leave)
    q_base = at_key.astype(np.int64) * span
    q = q_base + np.searchsorted(times, at)
    eo, lo = np.argsort(e, kind="stable"), np.argsort(lv, kind="stable")
    e, lv = e[eo], lv[lo]
    ew = np.concatenate([[0.0], np.cumsum(weight[eo])])
    lw = np.concatenate([[0.0], np.cumsum(weight[lo])])
    first_e, first_l = np.searchsorted(e, q_base), np.searchsorted(lv, q_base)
    entered = np.searchsorted(e, q, side="left")  # enter < at
    left = np.searchsorted(lv, q, side="right")  # leave <= at (then enter < at too)
    count = (entered - first_e) - (left - first_l)
    total = (ew[entered] - ew[first_e]) - (lw[left] - lw[first_l])
    return count.astype("float64"), np.maximum(total, 0.0)


# ---- features ------------------------------------------------------------------------------

@dataclass
class Features:
    """One row per job to explain: its wait and what the tree may split on."""

    wait_s: Arr
    cats: dict[str, tuple[Arr, list[str]]]  # feature → (codes, names)
    nums: dict[str, Arr]
    reason: tuple[Arr, list[str]]  # described per leaf, not split on ("" = none recorded)
    accel_pools: frozenset[str] = frozenset()  # pools counted in devices (the others in CPUs)
    reasons_kept: bool = True  # the source records reasons (a replay's results do not)

    def __len__(self) -> int:
        return len(self.wait_s)

    def matrix(self) -> Arr:
        cols = [self.cats[c][0].astype("float64") for c in CATEGORICAL] + [self.nums[c] for c in NUMERIC]
        return np.column_stack(cols) if len(self) else np.zeros((0, len(FEATURES)))


def _factorize(values: Arr) -> tuple[Arr, list[str]]:
    codes, names = pd.factorize(pd.Series(values, dtype=object), sort=True)
    return codes.astype(np.int64), [str(v) for v in names]


def _combine(frame: pd.DataFrame, name: Any) -> tuple[Arr, list[str]]:
    """Label every row by `name(row values)`, computed once per distinct combination."""
    if not len(frame):
        return np.zeros(0, dtype=np.int64), []
    group = frame.groupby(list(frame.columns), observed=True, sort=False).ngroup().to_numpy()
    first = np.unique(group, return_index=True)[1]
    labels = np.asarray([name(*row) for row in frame.iloc[first].itertuples(index=False)], dtype=object)
    return _factorize(labels[group])


def _pool_name(pool: str, model: str, arch: str, started: bool) -> str:
    if pool:
        return pool
    if not started:
        return ""  # no decision, no allocation: known once it runs (see _fill_pools)
    return f"{model or 'cpu'}@{arch}" if arch else model or "cpu"


def _fill_pools(codes: Arr, names: list[str], partition: Arr, started: Arr) -> tuple[Arr, list[str]]:
    """A job that never ran and has no bridge decision waits in the pool its partition's
    started jobs ran in most; a partition with none gets a pool of its own."""
    unknown = np.asarray([n == "" for n in names] or [False])[codes] if len(codes) else np.zeros(0, bool)
    if not unknown.any():
        return codes, names
    part_codes, parts = _factorize(partition)
    known = started & ~unknown
    k = len(names)
    counts = np.bincount(part_codes[known] * k + codes[known], minlength=len(parts) * k)
    counts = counts.reshape(len(parts), k)
    mode = [names[int(c)] if counts[p, c] else f"partition {parts[p] or _NONE}"
            for p, c in enumerate(np.argmax(counts, axis=1))]
    label = np.asarray(names, dtype=object)[codes]
    label[unknown] = np.asarray(mode, dtype=object)[part_codes[unknown]]
    return _factorize(label)


def history_features(jobs: pd.DataFrame, period: Period, now: float) -> Features:
    """The started jobs of the period from a job table; the queue is read from every job."""
    num = {c: jobs[c].to_numpy(dtype="float64") for c in
           ("submit", "eligible", "start", "end", "req_accel", "devices", "req_cpus", "ncpus", "req_time_s")}
    started = ~np.isnan(num["start"])
    enter = np.fmax(num["submit"], num["eligible"])
    learn = started & (num["start"] >= period.start) & (num["start"] < period.end)
    horizon = min(now, period.end)
    leave = np.where(started, num["start"], np.where(np.isnan(num["end"]), horizon, num["end"]))
    devices = np.where(num["req_accel"] > 0, num["req_accel"], np.nan_to_num(num["devices"]))
    cpus = np.where(num["req_cpus"] > 0, num["req_cpus"], num["ncpus"])
    pool, names = _combine(jobs[["pool", "model", "arch"]].assign(started=started), _pool_name)
    pool, names = _fill_pools(pool, names, J.labels(jobs["partition"]), started)
    accel = np.bincount(pool, weights=(devices > 0).astype(float), minlength=len(names)) > \
        np.bincount(pool, minlength=len(names)) / 2
    unit = np.where(accel[pool], devices, np.nan_to_num(cpus, nan=1.0)) if len(pool) else np.zeros(0)
    queue_jobs, queue_units = queue_at(pool, enter, leave, unit, pool[learn], num["submit"][learn])
    tier = _combine(jobs[["tier", "qos"]], lambda t, q: t or q)
    part = _combine(jobs[["partition"]], str)
    reason = _combine(jobs[["reason"]], lambda r: "" if r in NO_REASON else r)
    return Features(
        wait_s=np.clip(num["start"][learn] - enter[learn], 0.0, None),
        cats={"pool": (pool[learn], names), "tier": (tier[0][learn], tier[1]),
              "partition": (part[0][learn], part[1])},
        nums={"devices": devices[learn], "cpus": cpus[learn], "req_time_s": num["req_time_s"][learn],
              "queue_jobs": queue_jobs, "queue_units": queue_units},
        reason=(reason[0][learn], reason[1]),
        accel_pools=frozenset(n for n, a in zip(names, accel, strict=True) if a))


def replay_features(windows: Sequence[tuple[Sequence[dict[str, Any]], float]]) -> Features:
    """One arm's jobs of each replayed window (with the window's end): wait start - due, the
    queue per window (windows are separate runs), measured jobs explained."""
    rows = [(w, j) for w, (jobs, _) in enumerate(windows) for j in jobs]
    ends = np.asarray([end for _, end in windows], dtype="float64")

    def col(name: str) -> Arr:
        return np.asarray([np.nan if j.get(name) is None else float(j[name]) for _, j in rows],
                          dtype="float64")

    window = np.asarray([w for w, _ in rows], dtype=np.int64)
    due, start, end = col("due"), col("start"), col("end")
    accel, cpus = np.nan_to_num(col("accel")), col("cpus")
    pool, names = _factorize(np.asarray([str(j.get("pool") or "") for _, j in rows], dtype=object))
    started = ~np.isnan(start)
    leave = np.where(started, start, np.where(np.isnan(end), ends[window], end))
    unit = np.where(accel > 0, accel, np.nan_to_num(cpus, nan=1.0))
    key = window * max(len(names), 1) + pool
    learn = started & np.asarray([bool(j.get("measured", True)) for _, j in rows], dtype=bool)
    queue_jobs, queue_units = queue_at(key, due, leave, unit, key[learn], due[learn])
    n = int(learn.sum())
    blank = (np.zeros(n, dtype=np.int64), [""])
    accel_pools = {names[int(p)] for p in np.unique(pool[accel > 0])}
    return Features(
        wait_s=np.clip(start[learn] - due[learn], 0.0, None),
        cats={"pool": (pool[learn], names), "tier": blank, "partition": blank},
        nums={"devices": accel[learn], "cpus": cpus[learn], "req_time_s": col("user_limit_s")[learn],
              "queue_jobs": queue_jobs, "queue_units": queue_units},
        reason=blank, accel_pools=frozenset(accel_pools), reasons_kept=False)


# ---- rules ---------------------------------------------------------------------------------

@dataclass
class Condition:
    """One feature's part of a rule: the values allowed (categorical) or a range (numeric,
    bounds inclusive and snapped to values in the history), with NaN allowed or not."""

    feature: str
    text: str
    values: list[str] | None = None
    low: float | None = None
    high: float | None = None
    or_missing: bool = False

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"feature": self.feature, "text": self.text}
        if self.values is not None:
            d["values"] = self.values
        else:
            d |= {"min": self.low, "max": self.high, "or_not_recorded": self.or_missing}
        return d


@dataclass
class Rule:
    conditions: list[Condition]
    jobs: int
    share_pct: float
    wait_p50_s: float
    wait_p90_s: float
    wait_share_pct: float  # of all the wait-seconds of the explained jobs
    reason: str  # the most recorded reason of its jobs ("" none recorded)
    reason_pct: float  # that reason's share of its jobs

    @property
    def score(self) -> float:
        return self.jobs * self.wait_p50_s

    @property
    def where(self) -> str:
        return ", ".join(c.text for c in self.conditions) or "all jobs"

    @property
    def text(self) -> str:
        """'pool a100@x86_64, tier silver, asking >= 4 devices: p50 wait 3h12m, p90 7h54m,
        81 % held by QOSGrpGRES (412 jobs, 9 % of all)'."""
        held = f", {_pct(self.reason_pct)} % held by {self.reason}" if self.reason else ""
        return (f"{self.where}: p50 wait {fmt.duration(self.wait_p50_s)}, p90 {fmt.duration(self.wait_p90_s)}"
                f"{held} ({self.jobs:,} jobs, {_pct(self.share_pct)} % of all)")

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "conditions": [c.as_dict() for c in self.conditions], "jobs": self.jobs,
                "share_pct": round(self.share_pct, 2), "wait_p50_s": round(self.wait_p50_s, 1),
                "wait_p90_s": round(self.wait_p90_s, 1), "wait_share_pct": round(self.wait_share_pct, 2),
                "reason": self.reason or None, "reason_pct": round(self.reason_pct, 2),
                "score_job_s": round(self.score, 1)}


def _pct(v: float) -> str:
    return f"{v:.0f}" if v >= 9.95 else f"{v:.1f}"


@dataclass
class Split:
    """One edge of a tree path: `feature` in (or, `negated`, not in) `codes` for a
    categorical split; low < x <= high for a numeric one."""

    feature: int
    codes: frozenset[int] | None = None
    negated: bool = False
    low: float = -math.inf
    high: float = math.inf
    missing: bool = False  # NaN follows this edge

    def allowed(self, k: int) -> frozenset[int]:
        codes = self.codes or frozenset()
        return frozenset(range(k)) - codes if self.negated else codes


def paths(node: dict[str, Any], edges: tuple[Split, ...] = ()) -> Iterator[tuple[int, tuple[Split, ...]]]:
    """(leaf index, the splits leading to it) of a tree of Booster.dump_model()."""
    if "split_feature" not in node:
        yield int(node.get("leaf_index", 0)), edges
        return
    f = int(node["split_feature"])
    nan_left = bool(node.get("default_left")) and node.get("missing_type") == "NaN"
    if node["decision_type"] == "==":  # categories listed go left, every other one right
        codes = frozenset(int(c) for c in str(node["threshold"]).split("||"))
        left, right = Split(f, codes=codes), Split(f, codes=codes, negated=True)
    else:
        t = float(node["threshold"])
        left, right = Split(f, high=t, missing=nan_left), Split(f, low=t, missing=not nan_left)
    yield from paths(node["left_child"], (*edges, left))
    yield from paths(node["right_child"], (*edges, right))


def conditions(edges: Sequence[Split], f: Features, rows: Arr | None = None) -> list[Condition]:
    """A path's splits as one condition per feature (thresholds on one feature merged), in
    FEATURES order; the queue's unit named once the rule's pools are all of one kind.
    `rows`: the leaf's jobs, whose categories alone are named (a split may send a category
    left that a later split on another feature empties: CPU work down an "asking >= 4
    devices" path)."""
    out = []
    for i, name in enumerate(FEATURES):
        mine = [e for e in edges if e.feature == i]
        if not mine:
            continue
        if name in CATEGORICAL:
            codes, names = f.cats[name]
            allowed = frozenset(range(len(names)))
            for e in mine:
                allowed &= e.allowed(len(names))
            present = set(np.unique(codes).tolist())  # a category no job holds is not named
            held = set(np.unique(codes[rows]).tolist()) & allowed if rows is not None else present & allowed
            out.append(_category(name, [names[c] for c in sorted(held)],
                                 [names[c] for c in sorted(present - held)]))
        else:
            low, high = max(e.low for e in mine), min(e.high for e in mine)
            out.append(_range(name, low, high, all(e.missing for e in mine), f))
    pools = next((c.values for c in out if c.feature == "pool"), None)
    kinds = {p in f.accel_pools for p in (pools if pools is not None else f.cats["pool"][1])}
    unit = "devices" if kinds == {True} else "CPUs" if kinds == {False} else "devices or CPUs"
    for c in out:
        if c.feature == "queue_units":
            c.text = c.text.replace("{unit}", unit)
    return out


def _names(values: list[str], cap: int = 4) -> str:
    shown = [v or _NONE for v in values[:cap]]
    more = f" and {len(values) - cap} more" if len(values) > cap else ""
    return (", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else shown[0]) + more


def _category(name: str, allowed: list[str], other: list[str]) -> Condition:
    if not allowed:
        return Condition(name, f"{name} none", values=[])
    if other and len(other) < len(allowed) and len(allowed) > 3:
        return Condition(name, f"{name} other than {_names(other)}", values=allowed)
    return Condition(name, f"{name} {_names(allowed)}", values=allowed)


def _snap(values: Arr, low: float, high: float) -> tuple[float | None, float | None]:
    """The range's bounds as values the history holds: (smallest > low, largest <= high)."""
    v = np.unique(values[np.isfinite(values)])
    lo = float(v[np.searchsorted(v, low, side="right")]) if low > -math.inf and \
        np.searchsorted(v, low, side="right") < len(v) else None
    i = np.searchsorted(v, high, side="right") - 1
    hi = float(v[i]) if high < math.inf and i >= 0 else None
    return lo, hi


def _count(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else fmt.number(v)


def _between(lo: float | None, hi: float | None, show: Any) -> str:
    if lo is not None and hi is not None:
        return show(lo) if lo == hi else f"{show(lo)}-{show(hi)}"
    return f">= {show(lo)}" if lo is not None else f"<= {show(hi)}"


def _range(name: str, low: float, high: float, missing: bool, f: Features) -> Condition:
    lo, hi = _snap(f.nums[name], low, high)
    missing = missing and bool(np.isnan(f.nums[name]).any())
    if name == "devices":
        text = ("asking no accelerator" if hi == 0 and lo is None
                else f"asking {_between(lo, hi, _count)} devices")
    elif name == "cpus":
        text = f"asking {_between(lo, hi, _count)} CPUs"
    elif name == "req_time_s":
        text = f"time limit {_between(lo, hi, fmt.duration)}"
    elif name == "queue_jobs":
        text = f"{_between(lo, hi, _count)} jobs already waiting in its pool at submit"
    else:
        text = f"jobs waiting in its pool at submit asking {_between(lo, hi, _count)} {{unit}}"
    if missing:
        text += " (or not recorded)"
    return Condition(name, text, low=lo, high=hi, or_missing=missing)


# ---- the model -----------------------------------------------------------------------------

@dataclass
class Bottlenecks:
    status: Status
    message: str
    jobs: int  # started jobs explained
    wait_p50_s: float = math.nan
    wait_p90_s: float = math.nan
    min_leaf: int = 0
    rules: list[Rule] = field(default_factory=list)  # ranked, every leaf

    def top(self, n: int = TOP) -> list[Rule]:
        return [r for r in self.rules if r.score > 0][:n]

    def sentences(self) -> list[str]:
        return [r.text for r in self.top()]

    def table(self) -> pd.DataFrame:
        t = pd.DataFrame([{"rank": i, "rule": r.where, "jobs": r.jobs, "share_pct": r.share_pct,
                           "wait_p50_s": r.wait_p50_s, "wait_p90_s": r.wait_p90_s,
                           "wait_share_pct": r.wait_share_pct, "reason": r.reason or "none recorded",
                           "reason_pct": r.reason_pct} for i, r in enumerate(self.rules, 1)])
        # Columns of nothing are left out (sacct of 22.05 keeps no reason once a job starts).
        return t if any(r.reason for r in self.rules) else t.drop(columns=["reason", "reason_pct"])

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "jobs": self.jobs, "min_jobs": MIN_JOBS,
                "target": TARGET, "wait_p50_s": _num(self.wait_p50_s), "wait_p90_s": _num(self.wait_p90_s),
                "model": {"trees": 1, "max_depth": MAX_DEPTH, "min_data_in_leaf": self.min_leaf,
                          "min_gain_share": MIN_GAIN_SHARE, "features": list(FEATURES)},
                "rules": [{"rank": i, **r.as_dict()} for i, r in enumerate(self.rules, 1)]}


def _num(v: float) -> float | None:
    return None if math.isnan(v) else v


def fit_tree(x: Arr, wait_s: Arr, min_leaf: int) -> lgb.Booster:
    """One depth-MAX_DEPTH regression tree on the target, LightGBM's own learner (columns of
    x in FEATURES order, the categorical ones as codes)."""
    y = np.log1p(wait_s / 60.0)
    # For L2, LightGBM's split gain is the drop in squared error: a share of the total is a
    # share of the variance explained.
    sse = float(np.sum((y - y.mean()) ** 2))
    params = {"objective": "regression", "learning_rate": 1.0, "max_depth": MAX_DEPTH,
              "num_leaves": 2 ** MAX_DEPTH, "min_data_in_leaf": min_leaf, "min_sum_hessian_in_leaf": 0.0,
              "min_data_per_group": min_leaf, "min_gain_to_split": MIN_GAIN_SHARE * sse,
              "lambda_l2": 0.0, "verbose": -1, "deterministic": True, "force_row_wise": True, "seed": 0}
    data = lgb.Dataset(x, label=y, feature_name=list(FEATURES),
                       categorical_feature=list(range(len(CATEGORICAL))), free_raw_data=True,
                       params={"verbose": -1, "feature_pre_filter": False})
    return lgb.train(params, data, num_boost_round=1)


def learn(f: Features) -> Bottlenecks:
    """The rules of `f`'s jobs, or a status that says why there are none."""
    n = len(f)
    if n < MIN_JOBS:
        return Bottlenecks("not enough history", f"not enough history to learn what made jobs wait: "
                           f"{n:,} started job(s), {MIN_JOBS} needed", n)
    wait = f.wait_s
    p50, p90 = float(np.median(wait)), float(np.quantile(wait, 0.9))
    head = f"{n:,} started jobs, p50 wait {fmt.duration(p50)}, p90 {fmt.duration(p90)}"
    if f.reasons_kept and not any(f.reason[1][c] for c in np.unique(f.reason[0])):
        head += " (Slurm recorded no pending reason for them)"
    min_leaf = max(MIN_LEAF_JOBS, math.ceil(MIN_LEAF_SHARE * n))
    if not (wait >= 60).any():
        return Bottlenecks("no wait", f"{head}: no job waited a minute, nothing to explain", n, p50, p90,
                           min_leaf)
    x = f.matrix()
    booster = fit_tree(x, wait, min_leaf)
    leaf = np.asarray(booster.predict(x, pred_leaf=True)).reshape(n, -1)[:, 0].astype(np.int64)
    tree = booster.dump_model()["tree_info"][0]["tree_structure"]
    codes, reasons = f.reason
    total_wait = float(wait.sum())
    rules = []
    for index, edges in paths(tree):
        m = leaf == index
        k = int(m.sum())
        if not k:
            continue
        counts = np.bincount(codes[m], minlength=len(reasons))
        counts[[i for i, r in enumerate(reasons) if r == ""]] = 0
        top = int(np.argmax(counts)) if counts.sum() else -1
        rules.append(Rule(conditions(edges, f, m), k, 100.0 * k / n,
                          float(np.median(wait[m])), float(np.quantile(wait[m], 0.9)),
                          100.0 * float(wait[m].sum()) / total_wait,
                          reasons[top] if top >= 0 else "", 100.0 * counts[top] / k if top >= 0 else 0.0))
    rules.sort(key=lambda r: (-r.score, -r.wait_p90_s))
    if len(rules) < 2:
        return Bottlenecks("no split", f"{head}: no group of jobs waited markedly longer than the rest (no "
                           "split by pool, tier, partition, size, time limit or queue at submit explains "
                           f"{100 * MIN_GAIN_SHARE:g} % of the variance of {TARGET})", n, p50, p90, min_leaf)
    return Bottlenecks("rules", f"{head}; {len(rules)} groups of jobs, ranked by jobs x median wait",
                       n, p50, p90, min_leaf, rules)


# ---- report sections -----------------------------------------------------------------------

@dataclass
class BottleneckSection(Section):
    """A Section that keeps its results for the HTML list of rules and `report --json`."""

    results: list[tuple[str, Bottlenecks]] = field(default_factory=list)  # (arm or "", its rules)


METHOD = (f"one LightGBM tree (depth {MAX_DEPTH}) on {TARGET}, over pool, tier (else QoS), partition, "
          "devices and CPUs asked, time limit asked, and the queue at submit (jobs already waiting in the "
          "same pool, what they asked); each split explains at least "
          f"{100 * MIN_GAIN_SHARE:g} % of that variance and each rule holds at least "
          f"{100 * MIN_LEAF_SHARE:g} % of the jobs; 'held by': the reason Slurm recorded most for the "
          "rule's jobs")


def _add(sec: BottleneckSection, name: str, slug: str, result: Bottlenecks, title: str) -> None:
    sec.results.append((name, result))
    sec.notes.append((f"arm {name}: " if name else "") + result.message)
    if result.rules:
        sec.tables.append(Table(slug, title, result.table(), show=TOP,
                                note=f"{METHOD}; wait share: of all the wait of the jobs explained"))


def bottleneck_section(jobs: pd.DataFrame, period: Period, now: float) -> BottleneckSection:
    """The "Bottlenecks" section of a report's jobs (those that started in the period)."""
    sec = BottleneckSection("bottlenecks", "Bottlenecks")
    _add(sec, "", "bottlenecks", learn(history_features(jobs, period, now)),
         "What made jobs wait, ranked by jobs x median wait")
    return sec


def replay_bottleneck_section(rep: Replay) -> BottleneckSection:
    """The same per arm of a replay, over the measured jobs of every window."""
    sec = BottleneckSection("replay_bottlenecks", "Bottlenecks in the replay")
    for arm in rep.arms:
        f = replay_features([(w[arm].jobs, w[arm].end_now) for w in rep.windows])
        _add(sec, arm, f"replay_bottlenecks_{arm}", learn(f), f"Arm {arm}: what made jobs wait")
    sec.notes.append("waits and times on the replay's clock; the replay keeps no tier, partition or reason")
    return sec
