"""Merge one log's replay campaign: windows replayed one per run of replay_kth.py (each its
own JSON, so a killed session loses one window at most) into per-window figures, ratios and intervals.

    .venv/bin/python benchmarks/replay_campaign.py --log KTH-SP2 PART.json... \
        --out benchmarks/results/replay-kth-band.json [--merged MERGED.json]

Per window: each arm's AVEbsld, mean wait, measured jobs never started when the replay stopped
looking, jobs killed before / at their limit, and the replay's own fidelity (release lag and
runtime error, trace seconds); over windows: each arm ÷ plain and bridge ÷ easy++ (AVEbsld and
mean wait), the mean of the per-window ratios with a 95% Student t-interval, and their
geometric mean with its interval (pairs that never ran together are left out); and the accelerator
jobs' mean wait pooled over every window's pods, with a 95% interval from resampling windows
(`accel_wait_pooled`: a window weighs by its pods, not one vote each). `--merged` also
writes the windows as one `replay merge` document, which `slurm-hetero report --replay FILE`
turns into the report's "What-if replay" section (wait CDF per arm, per-window ratios).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from slurm_hetero.errors import InputError
from slurm_hetero.fileio import write_json_atomic
from slurm_hetero.replay import merge, report
from slurm_hetero.replay.clockmap import PAUSE_S
from slurm_hetero.replay.metrics import ALL, accel_wait_all, slowdown
from slurm_hetero.replay.run import ArmResult

PAIRS = (("bridge", "plain"), ("easy++", "plain"), ("bridge", "easy++"), ("bridge-central", "plain"),
         ("bridge-central", "easy++"), ("bridge-central", "bridge"),
         # central limits, the queue ordered by the upper quantile (--order upper)
         ("bridge-order90", "plain"), ("bridge-order90", "easy++"), ("bridge-order90", "bridge-central"),
         # central limits, the queue ordered by CPU time (--order area), and the ceiling so ordered
         ("bridge-area", "plain"), ("bridge-area", "bridge-central"), ("clairvoyant-area", "plain"),
         ("clairvoyant-area", "clairvoyant"), ("bridge-area", "clairvoyant-area"),
         # and limits shortened only where the p90 is at most 0.9 of the user's (--shorten-when-sure)
         ("bridge-cautious", "plain"), ("bridge-cautious", "easy++"), ("bridge-cautious", "bridge-order90"),
         # the model's order alone (SiteFactor), every job keeping its user's limit
         ("bridge-nolimits", "plain"), ("bridge", "bridge-nolimits"),
         # long-job lanes, with central limits and alone (arms removed at the commit after
         # ef7caf2, measured worse; their results stay in benchmarks/results)
         ("bridge-lanes", "plain"), ("bridge-lanes", "easy++"), ("bridge-lanes", "bridge-central"),
         ("lanes-only", "plain"), ("bridge-lanes", "lanes-only"),
         # the GPU pods: --accel (start soonest, no model) against fixed models, and with migration
         ("bridge-nomodel", "plain"), ("bridge-migrate", "plain"),
         # and with floating placement (a pod may start in any equal pool of its request)
         ("bridge-float", "plain"), ("bridge-float", "bridge-nomodel"),
         # and with "starts now" counting each node's free CPUs and memory (placement.node_fit;
         # bridge-nomodel is without it in the runs before it was the default, 2026-12-07, and
         # the same as bridge-fit after: compare bridge-fit with bridge-nofit then)
         ("bridge-fit", "plain"), ("bridge-fit", "bridge-nomodel"), ("bridge-nofit", "plain"),
         ("bridge-fit", "bridge-nofit"),
         # the ceiling: each job's own runtime as its prediction (replay/oracle.py)
         ("clairvoyant", "plain"), ("clairvoyant", "easy++"), ("bridge-central", "clairvoyant"),
         # EASY backfill (bf_job_part_count_reserve=1): plain Slurm with it, central limits and
         # the ceiling's with it
         ("plain-easy", "plain"), ("central-easy", "plain"), ("central-easy", "plain-easy"),
         ("clairvoyant-easy", "plain"), ("clairvoyant-easy", "plain-easy"),
         # the daemon extending limits 1.5 rounds before their end, not 150 s and 10% (x50)
         ("central-tight", "plain"), ("central-tight", "bridge-central"), ("clairvoyant-tight", "plain"),
         ("clairvoyant-tight", "clairvoyant"), ("central-tight", "clairvoyant-tight"))
# AVEbsld over every measured job, over those started in every arm (paired), mean wait, the
# mean wait of the measured jobs that asked for accelerators, and of every accelerator job,
# those carried over into the window too (a placement that starts the carried-over backlog
# sooner and one that keeps holes for newcomers differ there in opposite directions).
KEYS = ("ave_bsld", "ave_bsld_started_in_all", "wait_mean", "accel_wait_mean", "accel_wait_all_mean")


def _fig(r: ArmResult, name: str) -> float | None:
    f = r.figures.get(ALL)
    return getattr(f, name) if f is not None else None


def common_bsld(res: dict[str, ArmResult]) -> tuple[dict[str, float | None], int]:
    """Per arm, AVEbsld over the measured jobs that started in every arm, and how many were left
    out: a job no arm started within the drain waits the same lower bound in all of them (the
    replay's stop), and one such job can pin every arm's AVEbsld to the same value."""
    started = [{o.trace_id for o in r.outcomes if o.measured and o.start is not None} for r in res.values()]
    both = set.intersection(*started) if started else set()
    out: dict[str, float | None] = {}
    for name, r in res.items():
        sl = [slowdown(o, r.end_now) for o in r.outcomes if o.measured and o.trace_id in both]
        out[name] = statistics.mean(sl) if sl else None
    measured = {o.trace_id for r in res.values() for o in r.outcomes if o.measured}
    return out, len(measured - both)


def window_row(start: int, res: dict[str, ArmResult]) -> dict[str, Any]:
    common, left_out = common_bsld(res)
    arms = {}
    for name, r in res.items():
        measured = [o for o in r.outcomes if o.measured]
        saved = r.to_json()  # every job serialised: once per arm, not once per figure
        lag, err = saved["release_lag"], saved["runtime_error"]
        arms[name] = {
            "ave_bsld": _fig(r, "ave_bsld"), "wait_mean": _fig(r, "wait_mean"),
            "accel_jobs": _fig(r, "accel_jobs"), "accel_wait_mean": _fig(r, "accel_wait_mean"),
            "accel_wait_all_mean": accel_wait_all(r.outcomes, r.end_now),
            # busy share per pool (devices, or CPUs for cpu@ARCH) over the replay
            "utilisation": {p: f.utilisation for p, f in r.figures.items() if f.utilisation is not None},
            "ave_bsld_started_in_all": common[name],
            "measured": len(measured), "never_started": sum(o.start is None for o in measured),
            "killed_early": _fig(r, "killed_early"), "killed_at_limit": _fig(r, "killed_at_limit"),
            "all_ended": r.all_ended, "real_s": r.seconds.get("total"),
            # this machine stopped during the arm (a VM snapshot): its jobs then running or
            # waiting gained speed x this in trace s; None in files older than the check
            "paused_s": r.seconds.get("paused"),
            # The replay's own error, trace seconds: release after due, run beyond the trace's.
            "fidelity": {"release_lag_p90_s": lag.get("p90_abs"), "runtime_error_p50_s": err.get("p50_abs"),
                         "runtime_error_p90_s": err.get("p90_abs")},
        }
    return {"start": start, "hours": next(iter(res.values())).window.hours, "arms": arms,
            "measured_not_started_in_some_arm": left_out}


def geometric(per: list[float]) -> tuple[float | None, list[float] | None]:
    """The geometric mean of per-window ratios and its 95% interval (the t-interval of their
    logarithms, taken back): a window at 2.0 and one at 0.5 cancel, where their arithmetic
    mean says 1.25 — so a/b and b/a tell the same story. None where a ratio is 0 (no log).

    >>> g, ci = geometric([2.0, 0.5]); round(g, 6), ci is not None
    (1.0, True)
    >>> geometric([1.0, 0.0])
    (None, None)
    """
    if not per or min(per) <= 0:
        return None, None
    logs = [math.log(x) for x in per]
    ci = merge.t_interval(logs)
    return math.exp(statistics.mean(logs)), ([math.exp(ci[0]), math.exp(ci[1])] if ci else None)


def ratios(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Per pair of arms that ran together in at least one window: the per-window ratios, their
    arithmetic mean with its t-interval (as earlier results state them) and their geometric
    mean with its interval (the fair summary of ratios: one window's small denominator cannot
    dominate it)."""
    out = {}
    for a, b in PAIRS:
        per = [r["arms"][a][key] / r["arms"][b][key] for r in rows
               if a in r["arms"] and b in r["arms"] and r["arms"][b][key] and r["arms"][a][key] is not None]
        if not per:
            continue
        ci = merge.t_interval(per)
        geo, geo_ci = geometric(per)
        out[f"{a}/{b}"] = {"per_window": per, "mean": statistics.mean(per), "median": statistics.median(per),
                           "ci95": list(ci) if ci else None, "geomean": geo, "geo_ci95": geo_ci,
                           "windows": len(per)}
    return out


def _pooled_ratio(ws: list[tuple[int, float, int, float]]) -> float | None:
    """(jobs a, mean a, jobs b, mean b) per window: a's mean over all its jobs ÷ b's."""
    na, nb = sum(w[0] for w in ws), sum(w[2] for w in ws)
    num, den = sum(w[0] * w[1] for w in ws), sum(w[2] * w[3] for w in ws)
    return (num / na) / (den / nb) if na and nb and den else None


def pooled(rows: list[dict[str, Any]], key: str = "accel_wait_mean", count: str = "accel_jobs",
           draws: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Per pair of arms: the ratio of their means over every measured job of every window (a
    window weighs by its jobs, not one vote each: three pods that waited a minute in plain
    cannot outweigh a window of sixteen), with a 95% percentile interval from resampling whole
    windows, the arms kept paired. Beside the per-window ratios, not instead of them."""
    out: dict[str, Any] = {}
    for a, b in PAIRS:
        per = [(r["arms"][a][count] or 0, r["arms"][a][key], r["arms"][b][count] or 0, r["arms"][b][key])
               for r in rows if a in r["arms"] and b in r["arms"]
               and r["arms"][a][key] is not None and r["arms"][b][key] is not None]
        whole = _pooled_ratio(per)
        if whole is None:
            continue
        ci = None
        if len(per) > 1:
            rng = random.Random(seed)  # the same interval on every merge of the same windows
            drawn = (_pooled_ratio([rng.choice(per) for _ in per]) for _ in range(draws))
            boot = sorted(x for x in drawn if x is not None)
            ci = [boot[int(0.025 * (len(boot) - 1))], boot[int(0.975 * (len(boot) - 1))]]
        out[f"{a}/{b}"] = {"ratio": whole, "ci95_bootstrap": ci, "windows": len(per),
                           "jobs": sum(w[0] for w in per)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("parts", nargs="+", type=Path)
    p.add_argument("--log", required=True, help="the log's name, as the results say it")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--merged", type=Path, default=None)
    p.add_argument("--note", action="append", default=[],
                   help="a line stored with the figures (e.g. the commit the windows ran at)")
    a = p.parse_args()
    commands = []
    # A window's arms may come from several runs (an arm added later): joined by the window's start.
    by_start: dict[int, tuple[Path, dict[str, ArmResult]]] = {}
    for path in sorted(a.parts):
        try:
            doc = json.loads(path.read_text())
            if isinstance(doc, list) or "arms" in doc:  # replay_alibaba.py: one window, its arms in a list
                arms = doc if isinstance(doc, list) else doc["arms"]
                res = {v["arm"]: ArmResult.from_json(v) for v in arms}
                found = [(int(next(iter(res.values())).window.start), res)]  # one arm per run, too
            else:
                found = [(int(w["start"]), {k: ArmResult.from_json(v) for k, v in w["arms"].items()})
                         for w in doc["windows"]]
            for start, res in found:
                first, have = by_start.setdefault(start, (path, {}))
                twice = sorted(set(have) & set(res))
                if twice:
                    print(f"{path}: window {start} arms {', '.join(twice)} are in {first} too",
                          file=sys.stderr)
                    return 2
                have.update(res)
            commands.append(doc.get("command") if isinstance(doc, dict) else None)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print(f"{path}: not a replay_kth.py or replay_alibaba.py result: {e}", file=sys.stderr)
            return 2
    windows = [by_start[s] for s in sorted(by_start)]
    rows = [window_row(s, res) for s, (_, res) in zip(sorted(by_start), windows, strict=True)]
    summary = {"log": a.log, "windows": len(rows), "commands": commands, "notes": a.note,
               "merge_command": " ".join(sys.argv),
               "ratios": {key: ratios(rows, key) for key in KEYS},
               # accelerator jobs' mean wait over every window's measured pods at once
               "accel_wait_pooled": pooled(rows),
               "killed_early": {k: sum(r["arms"][k]["killed_early"] or 0 for r in rows if k in r["arms"])
                                for k in dict.fromkeys(k for r in rows for k in r["arms"])},
               # arms this machine paused during (rerun their windows): [window start, arm, s]
               "paused": [[r["start"], k, v["paused_s"]] for r in rows for k, v in r["arms"].items()
                          if (v["paused_s"] or 0) > PAUSE_S],
               "per_window": rows}
    write_json_atomic(str(a.out), summary, indent=1)
    if a.merged:
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            # `replay merge` wants the same arms in every window: those all windows have.
            common = [k for k in windows[0][1] if all(k in res for _, res in windows)]
            for i, (_, res) in enumerate(windows):
                meta = {"site": a.log, "speed": res["plain"].speed}
                d = report.document([res[k] for k in common], None, None, meta)
                paths.append(Path(tmp) / f"window-{i}" / "replay.json")
                report.write(d, paths[-1])
            try:
                merged = merge.merge(paths)
            except InputError as e:
                print(e, file=sys.stderr)
                return 2
            for w, (part, _) in zip(merged["windows"], windows, strict=True):
                w["file"] = str(part)
            merge.write(merged, a.merged)
    for key in KEYS:
        for pair, r in summary["ratios"][key].items():
            ci = f"[{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]" if r["ci95"] else "(no interval)"
            gci = f" [{r['geo_ci95'][0]:.2f}, {r['geo_ci95'][1]:.2f}]" if r["geo_ci95"] else ""
            geo = "-" if r["geomean"] is None else f"{r['geomean']:.2f}{gci}"
            print(f"{a.log} {key} {pair}: mean {r['mean']:.2f} {ci}, geometric {geo} "
                  f"over {r['windows']} window(s)")
    for pair, r in summary["accel_wait_pooled"].items():
        b = r["ci95_bootstrap"]
        ci = f"[{b[0]:.2f}, {b[1]:.2f}]" if b else "(no interval)"
        print(f"{a.log} accel_wait_mean {pair}, pooled over {r['jobs']} jobs: {r['ratio']:.2f} {ci} "
              f"(windows resampled) over {r['windows']} window(s)")
    print(f"killed before their user's limit: {summary['killed_early']}")
    for start, arm, paused in summary["paused"]:
        print(f"window {start} arm {arm}: this machine paused {paused} s during it: rerun the window")
    return 0


if __name__ == "__main__":
    sys.exit(main())
