"""Training the runtime models on 1,000,000 jobs built from the shared SWF traces.

Targets (issue 4): at most 120 s and 4 GB on the 2-core machine. The three traces (KTH,
CTC, SDSC-BLUE: 338k jobs) are repeated as separate sources (their users never mix) until
there are a million jobs. Prints the figures; asserts nothing (machines are noisy).
Peak memory is the process's RSS high-water mark, traces and job table included.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time
from pathlib import Path

import pandas as pd

from slurm_hetero.predict import jobtable
from slurm_hetero.predict.ingest_swf import read_swf
from slurm_hetero.predict.train import DEFAULT_PARAMS, train

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
NAMES = ("KTH-SP2-1996-2.1-cln", "CTC-SP2-pyss-easy", "SDSC-BLUE-pyss-easy")


def million(n: int = 1_000_000) -> pd.DataFrame:
    base = jobtable.merge(*(read_swf(TRACES / f"{name}.swf.gz") for name in NAMES))
    copies = []
    for k in range(-(-n // len(base))):
        c = base.copy()
        c["source"] = c["source"] + f"#{k}"
        copies.append(c)
    return pd.concat(copies, ignore_index=True).iloc[:n].reset_index(drop=True)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--threads", type=int, default=DEFAULT_PARAMS.threads)
    args = ap.parse_args()
    if not (TRACES / f"{NAMES[0]}.swf.gz").exists():
        sys.exit(f"traces not found in {TRACES}")
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
