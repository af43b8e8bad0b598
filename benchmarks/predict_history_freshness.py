"""How much the runtime model's per-user history loses by being frozen at export: the same
model, on the measured jobs of the busiest KTH-SP2 windows (those `replay_kth.py --pick
busiest` replays), predicting from

  frozen: each user's state as exported when the window's warm-up began (what the bridge
          arm of the replay compiles in, and what a site has between two `model export`s);
  online: each user's state at the job's own submission (every job of the user that ended
          before it), which is what EASY++-style predictors use.

Per window: the p50's accuracy (mean of min(p, a) / max(p, a)), the p90 as a fraction of the
user's limit (the limit the bridge would set, median), the share of jobs that ran longer
than their p90 (whose shortened limit the bridge daemon must extend), and p90 / runtime
(median). The model is trained per window on the jobs that ended before its warm-up, as
the replay does. Prints figures only; no Slurm involved.

    .venv/bin/python benchmarks/predict_history_freshness.py [--windows 9] [--trace KTH.swf.gz]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.predict import features as F
from slurm_hetero.predict.train import train
from slurm_hetero.replay.trace import read_trace
from slurm_hetero.replay.window import Window
from slurm_hetero.site import load_site

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_kth import busiest_windows  # the windows replay_kth.py --pick busiest replays

SITE = Path(__file__).resolve().parents[1] / "tests" / "data" / "replay" / "kth-site.yaml"
Arr = np.ndarray


def figures_of(p50: Arr, p90: Arr, runtime: Arr, req: Arr) -> tuple[float, ...]:
    """p50 accuracy, median p90 / user limit, % of jobs that ran past p90, median p90 / runtime."""
    limit = np.where(req > 0, req, 1.0)
    return (float(np.mean(np.minimum(p50, runtime) / np.maximum(np.maximum(p50, runtime), 1.0))),
            float(np.median(np.where(req > 0, p90 / limit, 1.0))),
            100.0 * float(np.mean(p90 < runtime)),
            float(np.median(p90 / np.maximum(runtime, 1.0))))


def text(row: tuple[float, ...]) -> str:
    f, o = row[:4], row[4:]
    return (f"p50 accuracy {f[0]:.2f} -> {o[0]:.2f}; p90 / user limit {f[1]:.2f} -> {o[1]:.2f}; "
            f"ran past p90 {f[2]:.0f}% -> {o[2]:.0f}%; p90 / runtime {f[3]:.1f} -> {o[3]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=9)
    ap.add_argument("--min-jobs", type=int, default=30)
    ap.add_argument("--warmup-hours", type=float, default=1.0)
    ap.add_argument("--trace", type=Path, default=KTH_SP2)
    ap.add_argument("--site", type=Path, default=SITE)
    a = ap.parse_args()
    df = read_trace(a.trace)
    site = load_site(a.site)
    found = busiest_windows(df, site, 1.0, a.windows, a.min_jobs, a.warmup_hours)
    online_history = F.History.build(df[F.usable(df)])
    figures = []
    print(f"{a.trace.name}: frozen (exported at the warm-up's start) -> online (at each submission)")
    for start, demand in found:
        w = Window(start, 1.0, a.warmup_hours)
        before = df[(df["end"] >= 0) & (df["end"] < w.first)]
        model = train(before, until=w.first)
        jobs = df[(df["submit"] >= start) & (df["submit"] < start + 3600)]
        jobs = jobs[F.usable(jobs)]
        # As `model export` computes it (export_lua.users_state): every job ended before the warm-up.
        frozen = F.History.build(before[F.usable(before)]).state(
            F.user_keys(jobs), np.full(len(jobs), w.first, dtype=np.int64))
        request = F.JobRequest.from_table(jobs, model.partitions)
        x, base = F.job_features(frozen, request, model.default_runtime)
        req = x[:, F.FEATURES.index("req")]
        c_f, u_f = model.predict_x(x, base, req, threads=1)
        c_o, u_o = model.predict(online_history, jobs, threads=1)
        rt = jobs["runtime_s"].to_numpy(float)
        row = figures_of(c_f, u_f, rt, req) + figures_of(c_o, u_o, rt, req)
        figures.append(row)
        print(f"  window {start} (demand {demand:.2f}, {len(jobs)} jobs): " + text(row), flush=True)
    print(f"mean over {len(figures)} windows: " + text(tuple(np.array(figures).mean(axis=0))))


if __name__ == "__main__":
    main()
