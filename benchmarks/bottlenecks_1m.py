"""The report's "Bottlenecks" section on 1,000,000 synthetic jobs: time and peak memory.

The jobs (90 days, six pools of the demo site, three tiers, 2 % cancelled while pending,
0.5 % still pending) wait around 5 minutes, except a planted group: A100 jobs of tier
silver asking 4 or more devices wait around 3 hours. The job table is built first (not
timed: `report_1m.py` times sacct parsing); then the queue-state sweep with the feature
table, and the tree with its rules, are timed apart. Prints the figures and the rules;
asserts nothing (machines are noisy).

    .venv/bin/python benchmarks/bottlenecks_1m.py [--jobs N]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import pandas as pd

from slurm_hetero.jobs import table as J
from slurm_hetero.reports import bottlenecks as B
from slurm_hetero.reports.period import Period

T0 = 1_700_000_000.0
DAYS = 90
POOLS = ("a100-80gb@x86_64", "h100@x86_64", "gh200@aarch64", "910b@aarch64", "cpu@x86_64", "cpu@aarch64")


def jobs_of(n: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    pool = rng.choice(POOLS, n, p=[0.2, 0.15, 0.05, 0.1, 0.35, 0.15])
    model, _, arch = np.char.partition(pool.astype(str), "@").T
    gpu = model != "cpu"
    tier = rng.choice(["gold", "silver", "bronze"], n)
    devices = np.where(gpu, rng.choice([1, 2, 4, 8], n), 0).astype(float)
    cpus = np.where(gpu, devices * 8, rng.choice([1, 4, 16, 64, 128], n)).astype(float)
    submit = T0 + np.sort(rng.uniform(0, DAYS * 86400, n))
    hot = (pool == POOLS[0]) & (devices >= 4) & (tier == "silver")
    wait = np.where(hot, rng.lognormal(np.log(3 * 3600), 0.5, n), rng.lognormal(np.log(300), 1.0, n))
    start = submit + wait
    end = start + rng.lognormal(np.log(3600), 1.0, n)
    cancelled = rng.random(n) < 0.02
    pending = rng.random(n) < 0.005
    start[cancelled | pending] = np.nan
    end[cancelled] = submit[cancelled] + 600
    end[pending] = np.nan
    state = np.where(pending, "PENDING", np.where(cancelled, "CANCELLED", "COMPLETED"))
    reason = np.where(hot & (rng.random(n) < 0.8), "QOSGrpGRES", np.where(pending, "Priority", "None"))
    cat = J.categorical
    cols = {"source": J.constant(n, "sacct:bench"), "job_id": np.arange(n).astype(str).astype(object),
            "partition": cat(np.where(gpu, "gpu", "cpu")), "qos": cat(tier), "tier": cat(tier),
            "pool": cat(np.where(rng.random(n) < 0.5, pool, "")),  # half the jobs without the bridge
            "model": cat(np.where(gpu & ~np.isnan(start), model, "")),
            "arch": cat(np.where(np.isnan(start), "", arch)),
            "devices": np.where(np.isnan(start), 0, devices), "req_accel": devices, "ncpus": cpus,
            "req_cpus": cpus, "submit": submit, "start": start, "end": end,
            "req_time_s": rng.choice([3600.0, 4 * 3600, 12 * 3600, 48 * 3600], n), "state": cat(state),
            "reason": cat(reason)}
    return J.build(cols, n), hot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    args = ap.parse_args()
    t = time.perf_counter()
    jobs, hot = jobs_of(args.jobs)
    built = time.perf_counter() - t
    period = Period(T0, T0 + (DAYS + 2) * 86400, True, True)
    t = time.perf_counter()
    f = B.history_features(jobs, period, period.end)
    features = time.perf_counter() - t
    t = time.perf_counter()
    res = B.learn(f)
    learnt = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(jobs):,} jobs ({len(f):,} started; planted {int(hot.sum()):,}); "
          f"table built in {built:.1f} s (not counted)")
    print(f"features incl. queue sweep {features:.2f} s, tree + rules {learnt:.2f} s, "
          f"total {features + learnt:.2f} s; peak RSS {rss:,.0f} MB")
    print(res.message)
    for r in res.top():
        print("  " + r.text)


if __name__ == "__main__":
    main()
