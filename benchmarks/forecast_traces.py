"""Demand forecast on the shared traces: LightGBM vs seasonal-naive vs persistence.

Per trace and pool: the minute series of in-system demand (running + pending; cores for
SWF, GPUs and cores for the Alibaba pods), from the time the trace's 5th-percentile job
was submitted (the Alibaba trace's first 118 days hold 5% of its pods: a near-empty
stretch that would be all of the training data) to its last known time. Train on the
first 70% of that span (origins every 5 minutes whose whole target window ends before the
split), test every `--stride` minutes after it. Target: the peak of the minute-mean
demand over the next H = 5, 15, 60 minutes.

Columns: MAE (pool units), MASE (MAE / in-sample MAE of seasonal-naive-day), under (share
of origins forecast below the actual), short (mean missing amount), vsP (MAE / MAE of
persistence, < 1 beats it), and MAE/under of both capped at the pool's capacity (MaxProcs,
the Alibaba nodes file): the part a power saver acts on. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/forecast_traces.py [--traces DIR] [--stride 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from slurm_hetero.forecast import HORIZONS
from slurm_hetero.forecast.demand import build_series
from slurm_hetero.forecast.evaluate import Score, evaluate_pool
from slurm_hetero.forecast.models import METHODS, ForecastParams
from slurm_hetero.forecast.sources import read_trace

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
FILES = ("KTH-SP2-1996-2.1-cln.swf.gz", "CTC-SP2-pyss-easy.swf.gz", "SDSC-BLUE-pyss-easy.swf.gz",
         "alibaba-gpu-2023-pods.csv")


def _row(trace: str, s: Score, persistence_mae: float) -> str:
    rel = s.mae / persistence_mae if persistence_mae > 0 else float("nan")
    return (f"{trace:<22} {s.pool:<12} {s.horizon:>3} {s.method:<14} {s.n:>6} {s.mae:>9.2f} "
            f"{s.mase:>7.3f} {s.under:>6.3f} {s.shortfall:>8.2f} {rel:>6.3f} {s.cap_mae:>8.2f} "
            f"{s.cap_under:>6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--stride", type=int, default=5, help="minutes between test origins")
    ap.add_argument("--train-stride", type=int, default=5, help="minutes between training origins")
    ap.add_argument("--train-frac", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated substrings of trace names")
    ap.add_argument("--objective", default="l1", help="LightGBM objective: l1 (default), l2, quantile")
    ap.add_argument("--alpha", type=float, default=0.5, help="the quantile, with --objective quantile")
    args = ap.parse_args()
    params = ForecastParams(threads=args.threads, stride=args.train_stride, objective=args.objective,
                            alpha=args.alpha)
    print(f"{'trace':<22} {'pool':<12} {'H':>3} {'method':<14} {'n':>6} {'MAE':>9} {'MASE':>7} "
          f"{'under':>6} {'short':>8} {'vsP':>6} {'capMAE':>8} {'capU':>6}")
    for name in FILES:
        if args.only and not any(o in name for o in args.only.split(",")):
            continue
        path = args.traces / name
        if not path.exists():
            sys.exit(f"{path}: not found (the shared traces live in ../shared/traces)")
        t0 = time.perf_counter()
        src = read_trace(path)
        start = float(src.table["submit"].quantile(0.05))
        series = build_series(src.table, t0=start)
        short = name.split(".")[0][:22]
        for pool in series.pools:
            scores = evaluate_pool(series, pool, args.train_frac, HORIZONS, params, src.tz, args.stride,
                                   METHODS, src.capacity.get(pool))
            for h in HORIZONS:
                by = {s.method: s for s in scores if s.horizon == h}
                for m in METHODS:
                    print(_row(short, by[m], by["persistence"].mae), flush=True)
        print(f"# {name}: {series.minutes:,} minutes, {len(src.table):,} jobs, capacity "
              f"{src.capacity or 'unknown'}, {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
