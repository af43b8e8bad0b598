"""Power saving on a replayed trace window: node-hours asleep (energy saved at an assumed
idle draw) against the wait it adds, on the real Slurm under an accelerated clock.

    .venv/bin/python benchmarks/power_replay.py [--hours 1] [--warmup-hours 0.5] [--speed 20]
        [--start EPOCH] [--suspend-time 600] [--idle-watts 150] [--trace PATH] [--workdir DIR]

Two arms over the same window of the KTH-SP2 trace on tests/data/replay/kth-site.yaml, both
with the bridge daemon (the keeper runs in it) and no runtime model: power off, and power on
(method devcluster, `--suspend-time` faked seconds, a 60-faked-second boot). A sampler
reads `scontrol -o show node` every real second and integrates awake node-seconds on the
faked clock (real seconds x speed). Prints per arm: mean and p90 wait, AVEbsld, node-hours
awake and asleep, and the energy the asleep hours would save at `--idle-watts` per node.
Without `bridge run --forecast` on the replay clock, the keeper keeps one idle node per pool.
Needs root and the dev cluster's packages (`make deps`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from slurm_hetero.devcluster.replay import DevReplayCluster
from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.power.states import parse_nodes
from slurm_hetero.replay.metrics import ALL
from slurm_hetero.replay.run import ARMS, ArmResult, run_arm
from slurm_hetero.replay.trace import read_trace
from slurm_hetero.replay.window import Capacity, Selection, Window, select
from slurm_hetero.site import load_site
from slurm_hetero.slurm.commands import nodes_oneliner_argv
from slurm_hetero.slurm.runner import Runner

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "tests" / "data" / "replay" / "kth-site.yaml"


def power_site(folder: Path, suspend_time: int, speed: float) -> Path:
    """kth-site.yaml with power saving on (the daemon re-reads the site from this file)."""
    text = SITE.read_text() + (
        "\npower:\n  enabled: true\n  method: devcluster\n"
        f"  suspend_time: {suspend_time}\n  suspend_timeout: 60\n  resume_timeout: 600\n"
        f"  boot_delay: {60 / speed:g}\n  horizon: 15\n  headroom: 0.2\n")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "site.yaml"
    path.write_text(text)
    return path


class Awake:
    """Node-seconds awake/asleep on the faked clock, from one scontrol a real second."""

    def __init__(self, conf: Path, speed: float):
        self.runner, self.speed = Runner(slurm_conf=str(conf), timeout=10), speed
        self.awake_s = self.asleep_s = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stop.wait(1.0):
            try:
                nodes = parse_nodes(self.runner.out(nodes_oneliner_argv()))
            except Exception:  # the cluster is booting or going down: that second is not counted
                continue
            asleep = sum(1 for n in nodes.values() if "POWERED_DOWN" in n.flags)
            self.asleep_s += asleep * self.speed
            self.awake_s += (len(nodes) - asleep) * self.speed


def run(name: str, site_path: Path, workdir: Path, sel: Selection, w: Window,
        speed: float) -> tuple[ArmResult, Awake]:
    site = load_site(site_path)
    awake = Awake(workdir / "etc" / "slurm.conf", speed)
    awake.thread.start()
    try:
        res = run_arm(DevReplayCluster, workdir, site, sel, w, ARMS["bridge-nomodel"], speed,
                      None, drain_hours=0.5, say=lambda s: print(f"  [{name}] {s}", flush=True))
    finally:
        awake.stop.set()
    return res, awake


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--warmup-hours", type=float, default=0.5)
    p.add_argument("--speed", type=float, default=20.0)
    p.add_argument("--start", type=int, default=None,
                   help="window start (trace epoch) [default: 40%% into the trace]")
    p.add_argument("--suspend-time", type=int, default=600)
    p.add_argument("--idle-watts", type=float, default=150.0)
    p.add_argument("--trace", type=Path, default=KTH_SP2)
    p.add_argument("--workdir", type=Path, default=None)
    a = p.parse_args()
    if not a.trace.exists():
        print(f"no KTH trace at {a.trace}: give --trace", file=sys.stderr)
        return 2
    df = read_trace(a.trace)
    lo, hi = float(df["submit"].min()), float(df["submit"].max())
    start = a.start or int(lo + 0.4 * (hi - lo))  # mid-trace (0.5) is a quiet stretch of KTH
    w = Window(start, a.hours, a.warmup_hours)
    sel = select(df, w, Capacity.of(load_site(SITE)))
    if not sel.jobs:
        print(f"no job of the trace submitted in the window at {start}: give another --start",
              file=sys.stderr)
        return 2
    base = a.workdir or Path(tempfile.mkdtemp(prefix="power-replay-", dir="/var/tmp"))
    print(f"KTH-SP2 window {start} ({a.hours:g} h + {a.warmup_hours:g} h warm-up) at x{a.speed:g}, "
          f"{len(sel.jobs)} jobs, in {base}", flush=True)
    arms = {"power-off": SITE, "power-on": power_site(base / "site-power", a.suspend_time, a.speed)}
    for name, site_path in arms.items():
        t = time.monotonic()
        res, awake = run(name, site_path, base / name / "cluster", sel, w, a.speed)
        f = res.figures[ALL]
        asleep_h, awake_h = awake.asleep_s / 3600, awake.awake_s / 3600
        print(f"{name:9s} mean wait {f.wait_mean or 0:7.0f} s  p90 {f.wait_p90 or 0:7.0f} s  AVEbsld "
              f"{f.ave_bsld or 0:6.2f}  node-h awake {awake_h:6.1f} asleep {asleep_h:6.1f}  saved "
              f"{asleep_h * a.idle_watts / 1000:6.2f} kWh at {a.idle_watts:g} W idle  "
              f"({time.monotonic() - t:.0f} s real)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
