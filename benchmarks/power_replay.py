"""Power saving on replayed trace windows, on the real Slurm under an accelerated clock:
energy of idle nodes saved against the wait it adds, for three arms over the same window.

    .venv/bin/python benchmarks/power_replay.py [--trace PATH] [--nodes N] [--hours 1]
        [--warmup-hours 0.5] [--drain-hours 0.5] [--speed 20] [--start EPOCH|auto] [--max-load 1.3]
        [--suspend-time 600] [--idle-watts 150] [--busy-watts 300] [--history-days 14]
        [--arms off,suspendtime,forecast] [--out FILE.json] [--workdir DIR]

Arms (each on a fresh dev cluster, all with the bridge daemon and job_submit.lua and no
runtime model, so only power saving differs):
- off: no power saving;
- suspendtime: Slurm's own SuspendTime (the partitions' SuspendTime=INFINITE taken out
  after boot, `scontrol reconfigure`), suspending through the same devcluster programs
  (which still refuse the last idle node of a pool); the keeper off (the daemon restarted
  on a copy of the site with power disabled);
- forecast: the keeper, fed each faked minute by a forecaster on the replay's clock: a
  LightGBM model trained only on the trace's jobs before the window, over the trace's
  history before the window plus the cluster's accounting since, published to
  StateSaveLocation/hetero-forecast.json for the daemon.
Nodes boot for 60 faked seconds (`boot_delay`). The site is `--nodes` nodes sharing the
trace's processors (KTH-SP2: 100, CTC-SP2: 338, from the SWF header's MaxProcs).

--start auto picks the trace's busiest window: the hour-aligned start whose replay (warm-up
included) is offered the most work up to `--max-load` times the machine (`offered`: CPU-seconds of
its submissions inside the span if each started at once), after `--history-days` of history.
(Choosing by the trace's own recorded waits picked hours whose jobs waited behind work
submitted before the warm-up, which a replay starting empty never sees: no queue at all.)

Measured over the window's hours only (faked clock), from `scontrol -o show node` about
once a real second: node-hours busy, idle awake (booting and refused-suspend nodes count
as awake), asleep. Energy of idle nodes = idle awake node-hours x the site's idle draw per
node (`node_groups[].idle_watts`, written from `--idle-watts`: an SWF trace does not say what
its nodes drew, so this is an assumption, printed); total at
`--busy-watts` per busy node. Per arm: that energy, saved vs off, mean/p90 wait, AVEbsld,
added wait vs off, the replay's real seconds, and the harness's fidelity figures
(runtime error and release lag, faked seconds). Needs root and `make deps`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.devcluster.cluster import bridge_every
from slurm_hetero.devcluster.replay import DevReplayCluster
from slurm_hetero.forecast.live import OnTraceClock, fit, history_before
from slurm_hetero.forecast.sources import fetch_sacct, swf_header
from slurm_hetero.forecast.sources import read_trace as read_demand
from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.power.program import REFUSED
from slurm_hetero.power.published import FORECAST_FILE, write_published
from slurm_hetero.power.states import parse_nodes
from slurm_hetero.replay.clockmap import ClockMap, calibrate
from slurm_hetero.replay.metrics import ALL
from slurm_hetero.replay.run import ARMS, ArmResult, run_arm
from slurm_hetero.replay.trace import read_trace
from slurm_hetero.replay.window import Capacity, Selection, Window, select
from slurm_hetero.site import load_site
from slurm_hetero.site.model import Site
from slurm_hetero.site.power import idle_power
from slurm_hetero.slurm.commands import nodes_oneliner_argv
from slurm_hetero.slurm.runner import Runner

POOL = "cpu@x86_64"
ARM_NAMES = ("off", "suspendtime", "forecast")


def site_text(name: str, nodes: int, procs: int, idle_watts: float, power: str) -> str:
    cores = math.ceil(procs / nodes)
    return (f"name: {name}\ndescription: {name} as {nodes} x {cores} CPUs, for power_replay\n"
            "partitions:\n  - {name: batch, default: true, max_time: \"3-00:00:00\", "
            "default_time: \"1:00:00\"}\n"
            f"node_groups:\n  - names: n[01-{nodes:02d}]\n    resource_type: CPU\n"
            "    architecture: x86_64\n    sockets: 1\n"
            f"    cores_per_socket: {cores}\n    threads_per_core: 1\n    memory: 64GB\n"
            "    memory_bandwidth: 10GB/s\n    supported_frameworks: [mpi]\n    partitions: [batch]\n"
            f"    idle_watts: {idle_watts:g}\n"
            "node_agent:\n  restore_interval: 0\n" + power)


def power_section(enabled: bool, suspend_time: int, speed: float) -> str:
    return ("power:\n" f"  enabled: {'true' if enabled else 'false'}\n  method: devcluster\n"
            f"  suspend_time: {suspend_time}\n  suspend_timeout: 60\n  resume_timeout: 600\n"
            f"  boot_delay: {60 / speed:g}\n  horizon: 15\n  headroom: 0.2\n")


def write_site(folder: Path, text: str) -> Site:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "site.yaml").write_text(text)
    return load_site(folder / "site.yaml")


def offered(df: pd.DataFrame, lo: float, hi: float, procs: int) -> float:
    """CPU-seconds the jobs submitted in [lo, hi) would hold inside [lo, hi) if each started
    at once, over the machine's: above 1 they cannot all run, and queue on the replay too."""
    sub, run, cpus = _work(df)
    i, j = np.searchsorted(sub, [lo, hi])
    held = np.minimum(sub[i:j] + run[i:j], hi) - sub[i:j]
    return float(np.sum(cpus[i:j] * held)) / (procs * (hi - lo))


def _work(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(submit, runtime, CPUs) in submit order."""
    order = np.argsort(df["submit"].to_numpy(dtype="float64"), kind="stable")
    sub = df["submit"].to_numpy(dtype="float64")[order]
    run = np.nan_to_num(np.clip(df["runtime_s"].to_numpy(dtype="float64")[order], 0, None))
    cpus = np.nan_to_num(np.clip(df["req_cpus"].to_numpy(dtype="float64")[order], 1, None), nan=1.0)
    return sub, run, cpus


def busiest(df: pd.DataFrame, hours: float, warmup_hours: float, history_days: float, procs: int,
            max_load: float = 1.3) -> int:
    """The hour-aligned window start whose replay (warm-up included) is offered the most
    work, up to `max_load` times the machine (beyond it the queue only grows), after
    `history_days` of history for the forecast."""
    sub, run, cpus = _work(df)
    span = (hours + warmup_hours) * 3600
    lo = math.ceil((sub.min() + history_days * 86400 + warmup_hours * 3600) / 3600) * 3600
    first = np.arange(lo, sub.max() - hours * 3600, 3600.0) - warmup_hours * 3600
    i, j = np.searchsorted(sub, first), np.searchsorted(sub, first + span)
    # inside [first, first + span): submit to min(submit + run, end), summed per window
    end = sub + run
    load = np.array([np.sum(cpus[a:b] * (np.minimum(end[a:b], f + span) - sub[a:b])) if b - a >= 5 else -1.0
                     for a, b, f in zip(i, j, first, strict=True)]) / (procs * span)
    load[load > max_load] = -1.0
    return int(first[int(np.argmax(load))] + warmup_hours * 3600)


@dataclass
class Shared:
    """What the window's start (run_arm's on_start) tells the sampler and the forecaster."""

    clock: ClockMap | None = None
    t0: float | None = None


class Sampler:
    """Node-seconds busy / idle awake / asleep inside [t0, t0 + hours) of the faked clock."""

    def __init__(self, runner: Runner, state: Path, shared: Shared, hours: float):
        self.runner, self.refused, self.shared, self.hours = runner, state / REFUSED, shared, hours
        self.trail = state.parent / "power-samples.tsv"
        self.s = {"busy": 0.0, "idle": 0.0, "asleep": 0.0}
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def left_on(self) -> set[str]:
        try:
            return set(json.loads(self.refused.read_text()))
        except (OSError, ValueError):
            return set()

    def loop(self) -> None:
        last = time.time()
        while not self.stop.wait(1.0):
            now = time.time()
            c, t0 = self.shared.clock, self.shared.t0
            if c is None or t0 is None or not t0 <= c.faked(now) < t0 + self.hours * 3600:
                last = now if c is None or t0 is None else max(now, c.real(t0))
                continue
            try:
                nodes = parse_nodes(self.runner.out(nodes_oneliner_argv()))
            except Exception:  # slurmctld busy: the next answer covers this second too
                continue
            dt, last = now - last, now  # since the last answer (or the window's start)
            on = self.left_on()
            self.samples += 1
            counts = {"busy": 0, "idle": 0, "asleep": 0}
            states = " ".join(f"{n.name}={n.base}+{'+'.join(sorted(n.flags))}" for n in nodes.values())
            for n in nodes.values():
                kind = "busy" if n.busy else ("asleep" if "POWERED_DOWN" in n.flags and n.name not in on
                                              else "idle")
                counts[kind] += 1
                self.s[kind] += dt * c.speed
            with self.trail.open("a") as f:  # one line a sample: what the figures were summed from
                f.write(f"{c.faked(now):.0f}\t{dt:.2f}\t{counts['busy']}\t{counts['idle']}\t{counts['asleep']}\t{states}\n")


class Publisher:
    """The forecast arm's forecaster on the replay clock, once a faked minute."""

    def __init__(self, forecaster: Callable[[], dict[str, dict[int, float]]], path: Path,
                 shared: Shared, speed: float):
        self.f, self.path, self.shared, self.every = forecaster, path, shared, 60.0 / speed
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.published = 0
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stop.wait(self.every):
            c = self.shared.clock
            if c is None or self.shared.t0 is None:
                continue
            try:
                write_published(self.path, self.f(), c.now())
                self.published += 1
            except Exception as e:  # counted and shown: a missing forecast means one idle node kept
                self.errors.append(f"{type(e).__name__}: {e}")


@dataclass
class ArmSetup:
    name: str
    site: Site  # what the cluster is rendered from
    daemon_site: Site | None = None  # suspendtime: the daemon restarted on this (keeper off)
    forecast: Callable[[Runner, Shared, float], Callable[[], dict[str, dict[int, float]]]] | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def factory_for(setup: ArmSetup, shared: Shared, speed: float, hours: float,
                out: dict[str, Any]) -> Callable[[Path], DevReplayCluster]:
    class PowerCluster(DevReplayCluster):
        def _fresh(self) -> None:
            super()._fresh()
            if setup.daemon_site is None:
                return
            # Slurm's own SuspendTime from slurmctld's first start: the partitions lose their
            # SuspendTime=INFINITE as the files are written. (Editing slurm.conf and running
            # `scontrol reconfigure` later raced: slurmctld suspended nodes at the reconfigure
            # and then restored their earlier IDLE state with their slurmd stopped.)
            c = self.cluster
            write = c._write_confs

            def write_plain(site: Site, meta: Any) -> None:
                write(site, meta)
                c.conf.write_text(re.sub(r"(?m)^(PartitionName=.*) SuspendTime=INFINITE", r"\1",
                                         c.conf.read_text()))
            c._write_confs = write_plain  # type: ignore[method-assign]

        def up(self, site: Site, *, speed: float, bridge: bool, model: Path | None) -> float:
            boot = super().up(site, speed=speed, bridge=bridge, model=model)
            c = self.cluster
            if setup.daemon_site is not None:  # the keeper off: it never slept a node not yet busy
                c.runner.run(["scontrol", "setdebugflags", "+Power"], check=False)
                c.stop_bridge()
                every = bridge_every(c.clock())
                c.start_bridge(setup.daemon_site, every=every, margin=max(120.0, 3 * every))
            shared.clock = calibrate(c.runner, speed)
            self.sampler = Sampler(c.runner, c.state, shared, hours)
            self.sampler.thread.start()
            self.publisher = None
            if setup.forecast is not None:
                self.publisher = Publisher(setup.forecast(c.runner, shared, shared.clock.now()),
                                           c.state / FORECAST_FILE, shared, speed)
                self.publisher.thread.start()
            return boot

        def down(self) -> None:
            for part in (getattr(self, "sampler", None), getattr(self, "publisher", None)):
                if part is not None:
                    part.stop.set()
                    part.thread.join(timeout=30)
            s = getattr(self, "sampler", None)
            if s is not None:
                out["node_s"] = dict(s.s)
                out["samples"] = s.samples
            p = getattr(self, "publisher", None)
            if p is not None:
                out["forecasts_published"] = p.published
                out["forecast_errors"] = p.errors[:5]
            state = self.cluster.state
            if (state / "hetero-power-history.jsonl").exists():
                out["history_lines"] = sum(1 for _ in (state / "hetero-power-history.jsonl").open())
            super().down()

    return PowerCluster


def forecaster_for(site: Site, trace: Path, w: Window, days: float,
                   say: Callable[[str], None]) -> Callable[[Runner, Shared, float],
                                                           Callable[[], dict[str, dict[int, float]]]]:
    src = read_demand(trace)
    hist = history_before(src.table, w.first, POOL)
    hist = hist.loc[hist["end"] >= w.first - (days + 8) * 86400].reset_index(drop=True)
    t = time.monotonic()
    model = fit(hist, w.first, days, pools=[POOL], tz=src.tz)
    say(f"forecast model: {len(model.boosters)} booster(s) on {days:g} days before the window "
        f"({len(hist)} jobs, tz {src.tz}) in {time.monotonic() - t:.1f} s")

    def make(runner: Runner, shared: Shared, since: float) -> Callable[[], dict[str, dict[int, float]]]:
        def shift() -> float | None:
            return None if shared.t0 is None else shared.t0 - w.start

        clock = shared.clock
        assert clock is not None
        # now=b: the cluster's clock runs ahead of this machine's, and sacct's day split
        # must not take the faked present for the future.
        def fetch(a: float, b: float) -> pd.DataFrame:
            return fetch_sacct(runner, site, a, b, now=b)

        return OnTraceClock(model, hist, fetch, clock.now, shift, since - 60, [POOL], src.tz)
    return make


def figures(name: str, res: ArmResult, extra: dict[str, Any], a: argparse.Namespace,
            site: Site) -> dict[str, Any]:
    idle_w = idle_power(site.node_groups[0]).watts  # the site's node_groups[].idle_watts
    f = res.figures[ALL]
    ns = extra.get("node_s", {})
    h = {k: v / 3600 for k, v in ns.items()}
    d = res.to_json()
    return {"arm": name, "jobs": f.jobs, "started": f.started, "unfinished": f.unfinished,
            "wait_mean_s": f.wait_mean, "wait_p90_s": f.wait_p90, "ave_bsld": f.ave_bsld,
            "node_h_busy": h.get("busy", 0.0), "node_h_idle_awake": h.get("idle", 0.0),
            "node_h_asleep": h.get("asleep", 0.0),
            "idle_w": idle_w, "idle_kwh": h.get("idle", 0.0) * idle_w / 1000,
            "total_kwh": (h.get("idle", 0.0) * idle_w + h.get("busy", 0.0) * a.busy_watts) / 1000,
            "samples": extra.get("samples", 0), "history_lines": extra.get("history_lines", 0),
            "forecasts_published": extra.get("forecasts_published"),
            "forecast_errors": extra.get("forecast_errors"),
            "runtime_error_s": d["runtime_error"], "release_lag_s": d["release_lag"],
            "real_s": res.seconds, "all_ended": res.all_ended}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, default=KTH_SP2)
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--warmup-hours", type=float, default=0.5)
    p.add_argument("--drain-hours", type=float, default=0.5)
    p.add_argument("--speed", type=float, default=20.0)
    p.add_argument("--start", default="auto")
    p.add_argument("--max-load", type=float, default=1.3, help="--start auto: the most offered load to pick")
    p.add_argument("--suspend-time", type=int, default=600)
    p.add_argument("--idle-watts", type=float, default=150.0)
    p.add_argument("--busy-watts", type=float, default=300.0)
    p.add_argument("--history-days", type=float, default=14.0)
    p.add_argument("--arms", default=",".join(ARM_NAMES))
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--workdir", type=Path, default=None)
    a = p.parse_args()
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if not arms or any(x not in ARM_NAMES for x in arms):
        print(f"--arms {a.arms!r}: choose from {', '.join(ARM_NAMES)}", file=sys.stderr)
        return 2
    if not a.trace.exists():
        print(f"--trace {a.trace}: no such file", file=sys.stderr)
        return 2
    try:
        procs = int(swf_header(a.trace).get("maxprocs", "100"))
    except ValueError:
        procs = 100
    df = read_trace(a.trace)
    auto = a.start == "auto"
    start = busiest(df, a.hours, a.warmup_hours, a.history_days, procs, a.max_load) if auto else int(a.start)
    w = Window(start, a.hours, a.warmup_hours)
    base = a.workdir or Path(tempfile.mkdtemp(prefix="power-replay-", dir="/var/tmp"))
    name = re.sub(r"[^a-z0-9]", "", a.trace.name.split("-")[0].lower()) or "trace"
    def site_in(folder: str, power: str) -> Site:
        return write_site(base / folder, site_text(name, a.nodes, procs, a.idle_watts, power))

    off_site = site_in("site-off", "")
    sel: Selection = select(df, w, Capacity.of(off_site))
    if not sel.jobs:
        print(f"--start {start}: no job of the trace in this window", file=sys.stderr)
        return 2
    in_w = df[(df["submit"] >= w.start) & (df["submit"] < w.end)]
    load = offered(df, w.first, w.end, procs)
    print(f"{a.trace.name}: window {start} ({time.strftime('%Y-%m-%d %H:%M', time.gmtime(start))} UTC, "
          f"{a.hours:g} h + {a.warmup_hours:g} h warm-up), {len(sel.jobs)} jobs replayed "
          f"({sum(j.measured for j in sel.jobs)} measured), offered load {load:.2f} of {procs} CPUs "
          "(warm-up included), "
          f"trace mean wait {float((in_w['start'] - in_w['submit']).mean()):.0f} s; site {a.nodes} nodes; "
          f"x{a.speed:g}; in {base}", flush=True)
    say = lambda s: print(f"  {s}", flush=True)  # noqa: E731
    setups = {
        "off": lambda: ArmSetup("off", off_site),
        "suspendtime": lambda: ArmSetup(
            "suspendtime", site_in("site-st", power_section(True, a.suspend_time, a.speed)),
            daemon_site=site_in("site-st-daemon", power_section(False, a.suspend_time, a.speed))),
        "forecast": lambda: ArmSetup(
            "forecast", st := site_in("site-fc", power_section(True, a.suspend_time, a.speed)),
            forecast=forecaster_for(st, a.trace, w, a.history_days, say)),
    }
    results: list[dict[str, Any]] = []
    for arm in arms:
        setup = setups[arm]()
        shared, extra = Shared(), dict[str, Any]()

        def started(t0: float, shared: Shared = shared) -> None:
            shared.t0 = t0

        def progress(s: str, arm: str = arm) -> None:
            print(f"  [{arm}] {s}", flush=True)

        res = run_arm(factory_for(setup, shared, a.speed, a.hours, extra), base / arm / "cluster", setup.site,
                      sel, w, ARMS["bridge-nomodel"], a.speed, None, drain_hours=a.drain_hours,
                      say=progress, on_start=started)
        results.append(figures(arm, res, extra, a, setup.site))
        r = results[-1]
        print(f"{arm:11s} wait mean {r['wait_mean_s'] or 0:6.0f} s p90 {r['wait_p90_s'] or 0:6.0f} s  "
              f"AVEbsld {r['ave_bsld'] or 0:6.2f}  node-h busy {r['node_h_busy']:5.2f} idle-awake "
              f"{r['node_h_idle_awake']:5.2f} asleep {r['node_h_asleep']:5.2f}  idle energy "
              f"{r['idle_kwh']:5.2f} kWh  ({r['real_s'].get('total', 0):.0f} real s)", flush=True)
    ref = next((r for r in results if r["arm"] == "off"), None)
    if ref is not None:
        for r in results:
            r["idle_kwh_saved"] = ref["idle_kwh"] - r["idle_kwh"]
            r["idle_saved_pct"] = 100 * r["idle_kwh_saved"] / ref["idle_kwh"] if ref["idle_kwh"] else None
            r["total_saved_pct"] = (100 * (ref["total_kwh"] - r["total_kwh"]) / ref["total_kwh"]
                                    if ref["total_kwh"] else None)
            # None where an arm started no measured job: no wait to compare, not a zero one
            r["added_wait_mean_s"] = (None if r["wait_mean_s"] is None or ref["wait_mean_s"] is None
                                      else r["wait_mean_s"] - ref["wait_mean_s"])
            r["bsld_change_pct"] = (100 * ((r["ave_bsld"] or 0) / ref["ave_bsld"] - 1)
                                    if ref["ave_bsld"] else None)
    print(f"\nper arm, window hours only, {a.idle_watts:g} W per idle awake node (the site's idle_watts, "
          f"from --idle-watts: SWF traces do not say), {a.busy_watts:g} W per busy node (assumed):")
    for r in results:
        def pct(v: float | None) -> str:
            return "   n/a" if v is None else f"{v:+6.1f}%"

        rt, lag = r["runtime_error_s"], r["release_lag_s"]
        saved = (f"saved {r.get('idle_kwh_saved', 0):6.2f} ({pct(r.get('idle_saved_pct'))} of idle, "
                 f"{pct(r.get('total_saved_pct'))} of total)")
        added = r.get("added_wait_mean_s")
        print(f"  {r['arm']:11s} idle kWh {r['idle_kwh']:6.2f} {saved}  added mean wait "
              f"{'   n/a' if added is None else f'{added:+6.0f}'} s (started {r['started']}/{r['jobs']})  "
              f"AVEbsld {pct(r.get('bsld_change_pct'))}  asleep "
              f"{r['node_h_asleep']:5.2f} node-h  runtime error p50/max "
              f"{rt.get('p50_abs')}/{rt.get('max_abs')} s  release lag p50/max "
              f"{lag.get('p50_abs')}/{lag.get('max_abs')} s  real {r['real_s'].get('total')} s",
              flush=True)
    if a.out:
        a.out.write_text(json.dumps({"trace": a.trace.name, "window": start, "hours": a.hours,
                                     "speed": a.speed, "nodes": a.nodes, "offered_load": load,
                                     "arms": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
