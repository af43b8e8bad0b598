"""Training the runtime models on 1,000,000 jobs built from three SWF traces.

Targets: at most 120 s and 4 GB on the 2-core machine. The three traces (KTH,
CTC, SDSC-BLUE: 338k jobs) are repeated as separate sources (their users never mix) until
there are a million jobs. KTH ships with the package; CTC and SDSC-BLUE are read from
../shared/traces (override with $TRACES). Prints the figures; asserts nothing.
Peak memory is the process's RSS high-water mark, traces and job table included.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import time
from pathlib import Path

import pandas as pd

from slurm_hetero.jobs import table
from slurm_hetero.jobs.swf import read_swf
from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.predict.train import DEFAULT_PARAMS, train

TRACES = Path(os.environ.get("TRACES") or Path(__file__).resolve().parents[2] / "shared" / "traces")
NAMES = ("KTH-SP2-1996-2.1-cln", "CTC-SP2-pyss-easy", "SDSC-BLUE-pyss-easy")


def trace(name: str) -> Path:
    """The packaged KTH log, or a trace of TRACES."""
    return KTH_SP2 if KTH_SP2.name == f"{name}.swf.gz" else TRACES / f"{name}.swf.gz"


def million(n: int = 1_000_000) -> pd.DataFrame:
    base = table.merge(*(read_swf(trace(name)).jobs for name in NAMES))
    copies = []
    for k in range(-(-n // len(base))):
        c = base.copy()
        c["source"] = c["source"].astype(str) + f"#{k}"
        copies.append(c)
    return pd.concat(copies, ignore_index=True).iloc[:n].reset_index(drop=True)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--threads", type=int, default=DEFAULT_PARAMS.threads)
    args = ap.parse_args()
    missing = [str(trace(n)) for n in NAMES if not trace(n).exists()]
    if missing:
        sys.exit(f"traces not found: {', '.join(missing)} (set $TRACES to their folder)")
    t0 = time.perf_counter()
    df = million(args.jobs)
    t_load = time.perf_counter() - t0
    print(f"job table: {len(df):,} jobs from {len(NAMES)} traces in {t_load:.1f} s, "
          f"peak RSS so far {peak_mb():,.0f} MB")
    params = dataclasses.replace(DEFAULT_PARAMS, threads=args.threads)
    t0 = time.perf_counter()
    model = train(df, params)
    took = time.perf_counter() - t0
    print(f"train: {model.info['jobs']:,} jobs, features {model.info['seconds_features']:.1f} s, "
          f"total {took:.1f} s (target <= 120 s), {params.threads} threads")
    print(f"  teacher {params.rounds} + {params.quantile_rounds} trees, kept students "
          f"{model.central.num_trees()} + {model.upper.num_trees()} trees (depth <= {params.max_depth})")
    print(f"peak memory (RSS high-water, whole process): {peak_mb():,.0f} MB (target <= 4096 MB)")


if __name__ == "__main__":
    main()
