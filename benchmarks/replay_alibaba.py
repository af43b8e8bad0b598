"""Replay the loaded windows of the Alibaba GPU trace on the real Slurm, at a site shaped like
its nodes list: fixed GPU models (plain) vs the bridge's start-soonest `--accel=nvidia:N`
(bridge-nomodel), the bridge with pending-job migration (bridge-migrate) or with floating
placement (bridge-float: a pod may start in any equal pool, `placement.float`), or with
"starts now" needing a node's CPUs free too (bridge-fit, `placement.node_fit`, the default
since 2026-12-07) or not (bridge-nofit: free devices alone, bridge-nomodel before). With work
bodies (`--arms bridge-work,bridge-migrate-running[,bridge-migrate-work]`: a pod runs as fast
as the units it holds, checkpoints on SIGTERM and resumes, `replay/submit.WorkSpec`): without
migration, with running checkpointed jobs moved too, and with pending moves only; their mean
completion ratios answer "how much sooner do jobs complete with it, and without".

    .venv/bin/python benchmarks/replay_alibaba.py [--windows 2] [--hours 1] [--warmup-hours 0]
        [--drain-hours 0.5] [--speed 20] [--arms plain,bridge-nomodel,bridge-migrate] [--pods PATH]
        [--site tests/data/replay/alibaba-site.yaml] [--workdir DIR] [--json OUT]

Windows: the --windows non-overlapping windows of --hours with the highest demand ÷
capacity (`replay windows`), the pods still in the system at each window's start carried
over (unmeasured). With `--warmup-hours H` the pods submitted in the H hours before each
window are replayed too, unmeasured, and the carry-over is taken at the warm-up's start: each
arm meets the window with the queue and the devices its own scheduling left, not with the
trace's backlog piled up at the window's first instant (the same busiest hours are chosen
either way). Both bridge arms run without a runtime model (the trace has no users and
no limits: the ratio measures pool choice, not predictions). Prints per arm and pool: mean /
p50 / p90 wait, AVEbsld, utilisation (devices and normalized units), jobs killed before their
limit, the replay's cost (real s per trace hour) and its fidelity figures (runtime error,
release lag); then accelerator jobs' mean wait bridge ÷ plain and migrate ÷ bridge per window
with a 95% t-interval over windows (target: <= 0.6, issue 34). Needs root and the dev
cluster's packages (`make deps`). Figures are timing-noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurm_hetero.devcluster.replay import DevReplayCluster
from slurm_hetero.replay.clockmap import pause_words
from slurm_hetero.replay.metrics import (
    ALL,
    Pools,
    accel_wait_all,
    distribution,
    figures,
    release_lags,
    runtime_errors,
)
from slurm_hetero.replay.run import ARMS, ArmResult, parse_arms, run_arm
from slurm_hetero.replay.trace import read_trace_counted, select_for
from slurm_hetero.replay.window import Capacity, Window, busiest
from slurm_hetero.site import load_site

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "tests" / "data" / "replay" / "alibaba-site.yaml"
PODS = ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023-pods.csv"
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def interval(values: list[float]) -> str:
    if not values:
        return "no window gave one"
    if len(values) < 2:
        return f"{values[0]:.2f} (one window: no interval)"
    m, s = statistics.mean(values), statistics.stdev(values)
    h = T95.get(len(values) - 1, 2.0) * s / math.sqrt(len(values))
    return f"{m:.2f} [{m - h:.2f}, {m + h:.2f}] (95% t-interval over {len(values)} windows)"


def fmt(v: float | None, spec: str = "7.0f") -> str:
    width = spec.split(".")[0]
    return format(v, spec) if v is not None else " " * (int(width) - 1 if width else 0) + "-"


def paused_note(r: ArmResult) -> str:
    """What a pause of this machine during the arm did to it (clockmap.wall_offset), or ""."""
    words = pause_words(r.seconds.get("paused", 0.0), r.speed)
    return f"; {words.upper()}" if words else ""


def show(name: str, r: ArmResult) -> None:
    print(f"  [{name}] {r.real_s_per_trace_hour:.0f} real s / trace h, all ended {r.all_ended}, "
          f"submit failures {len(r.submit_failed)}")
    err, lag = distribution(runtime_errors(r.outcomes)), distribution(release_lags(r.outcomes))
    print(f"    fidelity: runtime error p50 {fmt(err['p50_abs'], '5.1f')} p90 {fmt(err['p90_abs'], '5.1f')} "
          f"max {fmt(err['max_abs'], '5.1f')} s (n {err['n']}); "
          f"release lag p90 {fmt(lag['p90_abs'], '5.1f')} "
          f"max {fmt(lag['max_abs'], '5.1f')} s{paused_note(r)}")
    print("    pool              jobs  wait mean   p50   p90  AVEbsld  util  units-util  early-kill  unfin")
    for pool, f in r.figures.items():
        util = f"{100 * f.utilisation:5.1f}%" if f.utilisation is not None else "     -"
        uu = f.units_utilisation
        units = f"{100 * uu:9.1f}%" if uu is not None else "         -"
        print(f"    {pool:17s} {f.jobs:4d}  {fmt(f.wait_mean, '9.0f')} {fmt(f.wait_p50, '5.0f')} "
              f"{fmt(f.wait_p90, '5.0f')} {fmt(f.ave_bsld, '8.2f')} {util} {units}  {f.killed_early:10d}  "
              f"{f.unfinished:5d}")


def turnaround(r: ArmResult) -> float | None:
    """Measured accelerator jobs' mean completion time (end - due); one not ended counts
    until the replay stopped looking (a lower bound, as for waits)."""
    t = [(o.end if o.end is not None else r.end_now) - o.due for o in r.outcomes if o.measured and o.accel]
    return statistics.mean(t) if t else None


def all_accel(r: ArmResult) -> tuple[float | None, int, int]:
    """Every accelerator job's mean wait, carried-over ones included (metrics.accel_wait_all),
    and how many of the measured / carried ones never started. A burst the bridge sends to
    one pool shows here."""
    never = [o for o in r.outcomes if o.accel and o.start is None]
    return (accel_wait_all(r.outcomes, r.end_now), sum(o.measured for o in never),
            sum(not o.measured for o in never))


PAIRS = (("bridge/plain", "bridge-nomodel", "plain"), ("migrate/bridge", "bridge-migrate", "bridge-nomodel"),
         ("float/bridge", "bridge-float", "bridge-nomodel"), ("float/plain", "bridge-float", "plain"),
         # bridge-nomodel had no node fit before 2026-12-07 (the two fit runs' fit/bridge)
         ("fit/bridge", "bridge-fit", "bridge-nomodel"), ("fit/plain", "bridge-fit", "plain"),
         ("fit/nofit", "bridge-fit", "bridge-nofit"), ("nofit/plain", "bridge-nofit", "plain"),
         # work bodies (a job on a faster pool ends sooner): moving running jobs too, and pending only
         ("running/work", "bridge-migrate-running", "bridge-work"),
         ("pending-work/work", "bridge-migrate-work", "bridge-work"))


def compare(res: dict[str, ArmResult], ratios: dict[str, list[float]]) -> None:
    waits = {k: r.figures[ALL].accel_wait_mean for k, r in res.items()}
    done = {k: turnaround(r) for k, r in res.items()}
    everyone = {k: all_accel(r) for k, r in res.items()}
    print("  every accelerator job, carried over too: mean wait (s) / never started (measured, carried): "
          + ", ".join(f"{k} {fmt(v[0], '.0f')} / {v[1]}, {v[2]}" for k, v in everyone.items()))
    for key, num, den in PAIRS:
        n, d = everyone[num][0] if num in everyone else None, everyone[den][0] if den in everyone else None
        if n is not None and d:
            ratios[key + " (all)"].append(n / d)
            print(f"  {key} (all accelerator jobs): {n / d:.2f}")
    print("  accelerator jobs' mean wait (s): " + ", ".join(f"{k} {fmt(v, '.0f')}" for k, v in waits.items()))
    print("  accelerator jobs' mean completion (s): "
          + ", ".join(f"{k} {fmt(v, '.0f')}" for k, v in done.items()))
    for key, num, den in PAIRS:
        n, d = waits.get(num), waits.get(den)
        if n is not None and d:
            ratios[key].append(n / d)
            print(f"  {key}: {n / d:.2f}")
        elif n is not None and d is not None:
            print(f"  {key}: no ratio ({den} waited 0 s on average)")
        n, d = done.get(num), done.get(den)
        if n is not None and d:
            ratios[key + " (completion)"].append(n / d)
            print(f"  {key} (mean completion): {n / d:.2f}")
    moved = {k: sum(1 for o in r.outcomes if o.accel and o.restarts) for k, r in res.items() if ARMS[k].work}
    if moved:
        print("  accelerator jobs requeued and resumed (running migration): "
              + ", ".join(f"{k} {v}" for k, v in moved.items()))


def summary(ratios: dict[str, list[float]]) -> None:
    for key, vals in ratios.items():
        if vals:
            what = "mean completion" if key.endswith("(completion)") else "mean wait"
            target = " (target <= 0.6)" if key.startswith("bridge/plain") and what == "mean wait" else ""
            print(f"accelerator jobs' {what} {key}: {interval(vals)}{target}")


def from_json(path: Path, site_path: Path, pods: Path) -> int:
    """Print the figures of a saved run again, recomputed by today's metrics (files written
    before outcomes kept a never-started job's request: it is taken from the trace again)."""
    site = load_site(site_path)
    pools = Pools(site)
    df, _ = read_trace_counted(pods)
    by: dict[int, dict[str, ArmResult]] = {}
    doc = json.loads(path.read_text())
    for d in doc["arms"] if isinstance(doc, dict) else doc:  # a list: written before the command was
        r = ArmResult.from_json(d)
        asked = {j.trace_id: j.accel for j in select_for(df, r.window, site).jobs}
        r.outcomes = [replace(o, accel=asked.get(o.trace_id, 0)) if o.start is None and not o.accel else o
                      for o in r.outcomes]
        r.figures = figures(r.outcomes, pools.capacity, r.t0, r.window.hours, r.end_now, units=pools.units)
        by.setdefault(r.window.start, {})[r.arm] = r  # in the order run
    ratios: dict[str, list[float]] = {k + x: [] for k, _, _ in PAIRS for x in ("", " (all)", " (completion)")}
    for i, (start, res) in enumerate(by.items()):
        print(f"window {i}: start {start}")
        for name, r in res.items():
            show(name, r)
        compare(res, ratios)
    summary(ratios)
    return 0


def main() -> int:
    # SIGTERM (a session's end, `kill`) unwinds like an error: the clusters, their Prometheus
    # and a fault in progress are taken down by the `finally`s, not left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--windows", type=int, default=2)
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--warmup-hours", type=float, default=0.0,
                   help="replay the H trace hours before each window too, unmeasured")
    p.add_argument("--drain-hours", type=float, default=0.5)
    p.add_argument("--speed", type=float, default=20.0)
    p.add_argument("--arms", default="plain,bridge-nomodel,bridge-migrate")
    p.add_argument("--pods", type=Path, default=PODS, help="the pods file [default: ../shared/traces]")
    p.add_argument("--site", type=Path, default=SITE)
    p.add_argument("--skip", type=int, default=0, help="leave out the N busiest windows (run others)")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="write every arm's result there")
    p.add_argument("--from-json", type=Path, default=None, help="print a saved --json run again")
    a = p.parse_args()
    if a.from_json:
        return from_json(a.from_json, a.site, a.pods)
    if not a.pods.exists():
        print(f"no pods file at {a.pods}: give --pods", file=sys.stderr)
        return 2
    arms = parse_arms(a.arms)
    site = load_site(a.site)
    df, dropped = read_trace_counted(a.pods)
    found = busiest(df, Capacity.of(site), a.hours, a.windows + a.skip, carry_over=True)[a.skip:]
    base = a.workdir or Path(tempfile.mkdtemp(prefix="replay-alibaba-", dir="/var/tmp"))
    print(f"Alibaba GPU replay: {len(found)} busiest window(s) of {a.hours:g} h "
          f"(+{a.warmup_hours:g} h warm-up) at x{a.speed:g} "
          f"on {a.site.name}; "
          f"dropped {dict(dropped)}; arms {', '.join(x.name for x in arms)}; in {base}")
    ratios: dict[str, list[float]] = {k + x: [] for k, _, _ in PAIRS for x in ("", " (all)", " (completion)")}
    saved: list[dict[str, Any]] = []
    for i, (start, demand) in enumerate(found):
        w = Window(start, a.hours, a.warmup_hours)
        sel = select_for(df, w, site)
        n_meas = sum(j.measured for j in sel.jobs)
        print(f"window {i}: start {start} (demand/capacity {demand:.2f}): {n_meas} jobs measured, "
              f"{sel.carried} carried over, skipped {dict(sel.skipped)}", flush=True)
        res: dict[str, ArmResult] = {}
        for arm in arms:
            t = time.monotonic()
            res[arm.name] = run_arm(DevReplayCluster, base / f"w{i}" / arm.name, site, sel, w, arm, a.speed,
                                    drain_hours=a.drain_hours)
            print(f"  window {i} {arm.name}: {time.monotonic() - t:.0f} s real", flush=True)
            show(arm.name, res[arm.name])
            saved.append(res[arm.name].to_json())
            if a.json:  # after each arm: a run cut short keeps what it measured
                doc = {"command": " ".join(["benchmarks/replay_alibaba.py", *sys.argv[1:]]), "arms": saved}
                a.json.write_text(json.dumps(doc, indent=1))
        compare(res, ratios)
    summary(ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
