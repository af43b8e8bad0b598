"""A synthetic job table with the structure real logs have, for tests and demos.

Users repeat a few kinds of job (a requested time, a CPU count, a typical runtime); each
run varies around its kind's runtime, some crash early, some hit their limit. Users
over-request, as real users do. Deterministic for a given seed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from slurm_hetero.jobs import table

LIMITS = np.array([600, 1800, 3600, 7200, 14400, 43200, 86400])


def workload(jobs: int = 5000, users: int = 40, seed: int = 0, source: str = "synthetic",
             start: int = 1_700_000_000, partitions: tuple[str, ...] = ("cpu", "gpu")) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    kinds_per_user = 3
    n_kinds = users * kinds_per_user
    kind_limit = rng.choice(LIMITS, n_kinds)
    kind_runtime = kind_limit * rng.uniform(0.05, 0.9, n_kinds)
    kind_cpus = rng.choice([1, 2, 4, 8, 16, 32, 64], n_kinds)
    kind_accel = np.where(rng.random(n_kinds) < 0.3, rng.choice([1, 2, 4, 8], n_kinds), 0)
    user = rng.zipf(1.6, jobs) % users  # a few heavy users, many light ones
    kind = user * kinds_per_user + rng.integers(0, kinds_per_user, jobs)
    submit = start + np.cumsum(rng.exponential(120.0, jobs)).astype(np.int64)
    runtime = kind_runtime[kind] * rng.lognormal(0.0, 0.35, jobs)
    crash = rng.random(jobs) < 0.08
    runtime = np.where(crash, rng.uniform(1, 120, jobs), runtime)
    limit = kind_limit[kind]
    runtime = np.minimum(runtime, limit).astype(np.int64)
    wait = rng.exponential(600.0, jobs).astype(np.int64)
    state = np.where(crash, "FAILED", np.where(runtime >= limit, "TIMEOUT", "COMPLETED"))
    accel = kind_accel[kind]
    df = pd.DataFrame({
        "source": source, "job_id": [str(i + 1) for i in range(jobs)],
        "user": [f"user{u:03d}" for u in user], "account": "acct",
        "submit": submit, "start": submit + wait, "end": submit + wait + runtime,
        "runtime_s": runtime, "req_time_s": limit, "req_cpus": kind_cpus[kind], "req_accel": accel,
        "partition": np.where(accel > 0, partitions[-1], partitions[0]),
        "qos": "normal", "name": [f"job{k}" for k in kind], "state": state,
    })
    return table.normalize(df)
