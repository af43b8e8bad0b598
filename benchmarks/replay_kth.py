"""Replay windows of the KTH-SP2 trace on the real Slurm, plain vs bridge: bridge AVEbsld ÷
plain AVEbsld per window (with a 95% t-interval over windows), mean waits, utilisation,
jobs killed before their user's limit, and the replay's own cost in real seconds per
trace hour.

    .venv/bin/python benchmarks/replay_kth.py [--windows 3] [--pick spread|busiest|band] [--min-jobs 30]
        [--band 0.8,1.5 --of 10] [--first 0] [--hours 1] [--warmup-hours 1] [--drain-hours 0.5]
        [--drain-until ended|started] [--speed 20]
        [--users root|local] [--arms plain,bridge] [--trace PATH --site SITE] [--workdir DIR] [--json OUT]
    .venv/bin/python benchmarks/replay_kth.py --breakdown OUT.json   (a saved run, again)

Each arm of each window boots its own dev cluster (x--speed clock). The bridge arm gets a
runtime model trained on the trace's jobs that ended before the window's warm-up. With
`--users local` every trace user becomes a local system user (created when missing) so
the model's per-user history applies; `root` (the default) changes nothing on the machine
but then the bridge knows no user's history. Windows are spread evenly over the trace
(`--pick spread`, the default), or are the --windows non-overlapping windows with the highest
demand ÷ capacity (`--pick busiest`, `replay windows`) among those with at least --min-jobs
submissions: where a queue forms and a scheduler can make a difference), or (`--pick band`,
`window.in_band`) evenly spread over every window whose demand ÷ capacity, counting the work
already running at its start, lies within --band: a queue forms and can drain. Either way the first
tenth of the trace is left as the model's history. `--first K` skips the first K windows picked
(to rerun one). `--arms`: plain and any bridge arms (e.g. bridge-nolimits, the model's
priorities without its limits; easy++, the last-two-average reference with the same online
history); each is compared with plain. After each window, where the
difference is: AVEbsld and mean wait by job width and by runtime, and how the model's upper
quantile compared with what each job ran.
Other SWF logs run on a site of their machine's size: `--trace ../shared/traces/CTC-SP2-pyss-easy.swf.gz
--site benchmarks/sites/ctc-sp2.yaml`, or SDSC-BLUE-pyss-easy with sdsc-blue.yaml.
Needs root and the dev cluster's packages (`make deps`). Target: ratio <= 0.7.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from slurm_hetero.devcluster.replay import DevReplayCluster
from slurm_hetero.errors import InputError
from slurm_hetero.fileio import write_json_atomic
from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.replay.metrics import ALL, Outcome, slowdown
from slurm_hetero.replay.run import ArmResult, parse_arms, predictor_files, run_arm
from slurm_hetero.replay.submit import DRAIN_UNTIL
from slurm_hetero.replay.trace import read_trace
from slurm_hetero.replay.window import Capacity, Window, busiest, in_band, select
from slurm_hetero.site import Site, load_site

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "tests" / "data" / "replay" / "kth-site.yaml"
# Two-sided 95% Student t quantiles by degrees of freedom (1..10; beyond: about 2).
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def interval(values: list[float]) -> str:
    if len(values) < 2:
        return "(one window: no interval)"
    m, s = statistics.mean(values), statistics.stdev(values)
    h = T95.get(len(values) - 1, 2.0) * s / math.sqrt(len(values))
    return f"{m:.2f} [{m - h:.2f}, {m + h:.2f}] (95% t-interval over {len(values)} windows)"


def busiest_windows(df: pd.DataFrame, site: Site, hours: float, count: int, min_jobs: int,
                    warmup_hours: float) -> list[tuple[int, float]]:
    """`--pick busiest`: (start, demand ÷ capacity) of the `count` busiest windows with at least
    `min_jobs` submissions, none before the first tenth of the trace (the model's history)
    and its warm-up."""
    lo, hi = float(df["submit"].min()), float(df["submit"].max())
    return busiest(df, Capacity.of(site), hours, count, min_jobs=min_jobs,
                   not_before=lo + 0.1 * (hi - lo) + warmup_hours * 3600)


WIDTHS = ((1, 1), (2, 8), (9, 32), (33, 10**6))
RUNS = ((0, 600, "< 10 min"), (600, 3600, "10-60 min"), (3600, 10**9, ">= 1 h"))


def breakdown(res: dict[str, ArmResult]) -> None:
    """Per arm, where AVEbsld comes from (measured jobs by width and by runtime), and for
    arms with a model how its p90 compared with the runtime (under: the job ran longer, so
    its shortened limit had to be extended and backfill had planned with too short a job)."""
    def groups(outs: list[Outcome]) -> list[tuple[str, list[Outcome]]]:
        by_w = [(f"{lo}-{hi} CPUs" if hi < 10**6 else f">= {lo} CPUs",
                 [o for o in outs if lo <= o.cpus <= hi]) for lo, hi in WIDTHS]
        return by_w + [(name, [o for o in outs if lo <= o.runtime_s < hi]) for lo, hi, name in RUNS]

    measured = {k: [o for o in r.outcomes if o.measured] for k, r in res.items()}
    names = list(res)
    print("    " + " " * 12 + "".join(f"{n:>26s}" for n in names) + "   (jobs, AVEbsld, mean wait s)")
    for i, (label, _) in enumerate(groups(measured[names[0]])):
        cells = []
        for n in names:
            g = groups(measured[n])[i][1]
            sl = [slowdown(o, res[n].end_now) for o in g]
            waits = [o.wait for o in g if o.wait is not None]
            cells.append(f"{len(g):4d} {statistics.mean(sl) if sl else float('nan'):8.2f} "
                         f"{statistics.mean(waits) if waits else float('nan'):8.0f}    ")
        print(f"    {label:12s}" + "".join(f"{c:>26s}" for c in cells))
    for n, outs in measured.items():
        pred = [(o, o.predicted_s) for o in outs if o.predicted_s]
        if not pred:
            continue
        under = sum(1 for o, p90 in pred if o.runtime_s > p90)
        ratio = sorted(p90 / max(o.runtime_s, 1) for o, p90 in pred)
        print(f"    {n}: {len(pred)} predicted; ran longer than p90: {under} "
              f"({100 * under / len(pred):.0f}%); p90 / runtime median {ratio[len(ratio) // 2]:.2f},"
              f" p10 {ratio[len(ratio) // 10]:.2f}")


def main() -> int:
    # SIGTERM (a session's end, `kill`) unwinds like an error: the clusters, their Prometheus
    # and a fault in progress are taken down by the `finally`s, not left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--windows", type=int, default=1)
    p.add_argument("--pick", choices=("spread", "busiest", "band"), default="spread")
    p.add_argument("--band", default="0.8,1.5", help="--pick band: LOW,HIGH demand ÷ capacity")
    p.add_argument("--of", type=int, default=None,
                   help="--pick band: how many windows the rule spreads (default --first + --windows); "
                        "with --first K --windows 1, each run replays the K-th of the same --of")
    p.add_argument("--drain-until", choices=DRAIN_UNTIL, default="ended",
                   help="started: stop draining once every measured job has started")
    p.add_argument("--min-jobs", type=int, default=30,
                   help="--pick busiest: jobs submitted in the window, at least")
    p.add_argument("--first", type=int, default=0, help="skip the first K windows picked")
    p.add_argument("--arms", default="plain,bridge", help="plain first, then the arms to compare with it")
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--warmup-hours", type=float, default=1.0)
    p.add_argument("--drain-hours", type=float, default=0.5)
    p.add_argument("--speed", type=float, default=20.0)
    p.add_argument("--users", choices=("root", "local"), default="root")
    p.add_argument("--trace", type=Path, default=KTH_SP2, help="[default: the KTH log the package ships]")
    p.add_argument("--site", type=Path, default=SITE,
                   help="the cluster the trace runs on (benchmarks/sites/ has CTC-SP2's and SDSC-BLUE's) "
                        "[default: the KTH SP2's]")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None,
                   help="write every arm's result there, after each window")
    p.add_argument("--breakdown", type=Path, default=None,
                   help="print the breakdown of a run saved with --json, then exit")
    a = p.parse_args()
    if a.breakdown:
        import json

        for w in json.loads(a.breakdown.read_text())["windows"]:
            print(f"window {w['start']}:")
            breakdown({k: ArmResult.from_json(v) for k, v in w["arms"].items()})
        return 0
    if not a.trace.exists():
        print(f"--trace {a.trace}: no such file", file=sys.stderr)
        return 2
    try:
        arms = parse_arms(a.arms)
    except InputError as e:
        print(e, file=sys.stderr)
        return 2
    if arms[0].name != "plain" or len(arms) < 2:
        print("--arms: plain first, then at least one arm to compare with it", file=sys.stderr)
        return 2
    try:
        site = load_site(a.site)
    except InputError as e:
        print(f"--site: {e}", file=sys.stderr)
        return 2
    df = read_trace(a.trace)
    lo, hi = float(df["submit"].min()), float(df["submit"].max())
    # The first tenth of the trace is history for the model.
    if a.pick == "band":
        try:
            lo_b, hi_b = (float(x) for x in a.band.split(","))
            first_ok = lo + 0.1 * (hi - lo) + a.warmup_hours * 3600
            found = in_band(df, Capacity.of(site), a.hours, a.of or a.first + a.windows, (lo_b, hi_b),
                            min_jobs=a.min_jobs, not_before=first_ok, warmup_hours=a.warmup_hours,
                            gap_s=a.warmup_hours * 3600)
        except (ValueError, InputError) as e:
            print(f"--band {a.band}: {e}", file=sys.stderr)
            return 2
        starts = [s for s, _ in found][a.first:a.first + a.windows]
        print(f"windows with demand/capacity in [{a.band}]: "
              + ", ".join(f"{s} ({r:.2f})" for s, r in found if s in starts))
    elif a.pick == "busiest":
        found = busiest_windows(df, site, a.hours, a.first + a.windows, a.min_jobs, a.warmup_hours)
        starts = [s for s, _ in found][a.first:a.first + a.windows]
        print("busiest windows (demand/capacity): " + ", ".join(f"{s} ({r:.2f})" for s, r in found
                                                                if s in starts))
    else:
        n = a.first + a.windows
        starts = [int(lo + (hi - lo) * (0.1 + 0.8 * (i + 0.5) / n)) for i in range(a.first, n)]
    base = a.workdir or Path(tempfile.mkdtemp(prefix="replay-kth-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)  # --users local: jobs of other users run in here
    ratios: dict[str, list[float]] = {arm.name: [] for arm in arms[1:]}
    saved: list[dict[str, object]] = []
    print(f"{a.trace.name} replay: {len(starts)} {a.pick} window(s) of {a.hours:g} h (+{a.warmup_hours:g} h "
          f"warm-up, drain <= {a.drain_hours:g} h) at x{a.speed:g}, users={a.users}, in {base}")
    for i, start in enumerate(starts):
        w = Window(start, a.hours, a.warmup_hours)
        sel = select(df, w, Capacity.of(site))
        models = predictor_files(df, w, base / f"w{i}", {arm.predictor for arm in arms if arm.model},
                                 users=a.users, names={"model": "predict.lua"})
        res: dict[str, ArmResult] = {}
        for arm in arms:
            t = time.monotonic()
            res[arm.name] = run_arm(DevReplayCluster, base / f"w{i}" / arm.name, site, sel, w, arm, a.speed,
                                    models[arm.predictor] if arm.model else None, drain_hours=a.drain_hours,
                                    users=a.users, drain_until=a.drain_until)
            print(f"  window {i} ({w.start}) {arm.name}: {time.monotonic() - t:.0f} s real", flush=True)
        if a.json:
            saved.append({"start": w.start, "arms": {k: r.to_json() for k, r in res.items()}})
            write_json_atomic(str(a.json), {"trace": a.trace.name, "command": " ".join(sys.argv),
                                            "windows": saved}, indent=1)
        fp = res["plain"].figures[ALL]
        print(f"window {i} start {w.start}: {fp.jobs} jobs measured ({len(sel.jobs)} replayed)")
        for name, r in res.items():
            f = r.figures[ALL]
            bsld = f.ave_bsld if f.ave_bsld is not None else float("nan")
            print(f"  {name:15s} AVEbsld {bsld:7.2f}  mean wait {f.wait_mean or 0:7.0f} s"
                  f"  p90 {f.wait_p90 or 0:7.0f} s  util {100 * (f.utilisation or 0):5.1f}%"
                  f"  killed at limit {f.killed_at_limit}  early {f.killed_early}  unfinished {f.unfinished}"
                  f"  predicted {f.predicted}  {r.real_s_per_trace_hour:.0f} real s / trace h")
        for name in ratios:
            fb = res[name].figures[ALL]
            ratio = (fb.ave_bsld / fp.ave_bsld) if fp.ave_bsld and fb.ave_bsld is not None else float("nan")
            if not math.isnan(ratio):
                ratios[name].append(ratio)
            print(f"  {name} AVEbsld / plain AVEbsld = {ratio:.2f}")
        breakdown(res)
    for name, values in ratios.items():
        shown = interval(values) if len(values) > 1 else ", ".join(f"{r:.2f}" for r in values)
        print(f"{name} ÷ plain AVEbsld: {shown}" + (" (target <= 0.7)" if name == "bridge" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
