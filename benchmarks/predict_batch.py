"""Batch runtime prediction in Python: jobs per second (target >= 200,000/s).

Trains the default model on the SDSC-BLUE trace, then predicts the 1,000,000-job table of
predict_train_1m.py twice: from ready feature rows (both boosters and the clamping), and
end to end from job-table rows (each user's history state at the job's submit time,
features, both boosters). Best of three runs each. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time

from predict_train_1m import NAMES, million, trace

from slurm_hetero.jobs.swf import read_swf
from slurm_hetero.predict import features as F
from slurm_hetero.predict.train import DEFAULT_PARAMS, train


def best_of(n: int, fn: object) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--threads", type=int, default=DEFAULT_PARAMS.threads)
    args = ap.parse_args()
    if not trace(NAMES[2]).exists():
        sys.exit(f"trace not found: {trace(NAMES[2])} (set $TRACES to its folder)")
    model = train(read_swf(trace(NAMES[2])).jobs, DEFAULT_PARAMS)
    df = million(args.jobs)
    history = F.History.build(df)
    x, base = F.table_features(df, history, model.partitions, model.default_runtime)
    req = F.JobRequest.from_table(df, model.partitions).req
    trees = f"{model.central.num_trees()} + {model.upper.num_trees()} trees"
    t = best_of(3, lambda: model.predict_x(x, base, req, threads=args.threads))
    print(f"from feature rows: {len(df):,} jobs in {t:.2f} s = {len(df) / t:,.0f} jobs/s "
          f"({trees}, {args.threads} threads; target >= 200,000/s)")
    t = best_of(3, lambda: model.predict(history, df, threads=args.threads))
    print(f"end to end (history state + features + models): {len(df) / t:,.0f} jobs/s")
    t = best_of(1, lambda: F.History.build(df))
    print(f"building the history index of {len(df):,} jobs: {t:.2f} s (once per batch)")


if __name__ == "__main__":
    main()
