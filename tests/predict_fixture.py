"""A small real runtime model for tests: synthetic history plus a user `root` whose jobs
ask for 10 minutes and run about 20 seconds (the tests' jobs run as root)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from slurm_hetero.predict import export_lua, synthetic
from slurm_hetero.predict.tail import tail_path, write_tail
from slurm_hetero.predict.train import TrainParams, train

PARAMS = TrainParams(rounds=60, quantile_rounds=40, threads=2)


def history(jobs: int = 6000, root_jobs: int = 400) -> pd.DataFrame:
    df = synthetic.workload(jobs=jobs, users=40, seed=3, partitions=("cpu", "gpu"))
    root = df.iloc[:root_jobs].copy()
    rng = np.random.default_rng(5)
    root["user"] = "root"
    root["req_time_s"] = 600
    root["runtime_s"] = rng.integers(15, 25, root_jobs)
    root["state"] = "COMPLETED"
    root["partition"] = "cpu"
    root["req_accel"] = 0
    root["req_cpus"] = 1
    root["job_id"] = [f"r{i}" for i in range(root_jobs)]
    root["start"] = root["submit"]
    root["end"] = root["submit"] + root["runtime_s"]
    return pd.concat([df, root]).sort_values("submit", kind="stable").reset_index(drop=True)


def export_model(path: Path, table: pd.DataFrame | None = None, limit: str = "upper",
                 sure: float | None = None, order: str = "central") -> Path:
    """The model trained on `table` (default: `history()`), exported to `path` with its
    users' tail beside it, as `model export` writes them."""
    table = history() if table is None else table
    users, until = export_lua.users_state(table)
    export_lua.write(export_lua.render(train(table, PARAMS), users, until, limit=limit,
                                       sure=sure, order=order), path)
    write_tail(table, until, tail_path(path))
    return path
