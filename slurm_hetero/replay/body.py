"""A replayed job that does work instead of sleeping: it runs as fast as the normalized units
it holds, checkpoints on SIGTERM and resumes from its last checkpoint (stdlib only: it starts
once per job incarnation).

    python -m slurm_hetero.replay.body WORK DEVICES UNITS_FILE

WORK is the job's work in unit-seconds (trace seconds x normalized units); on a node whose
devices are worth U units each, holding N of them, it takes WORK / (N x U) seconds of the
cluster's (accelerated) clock. N is the count of CUDA_VISIBLE_DEVICES that slurmd set (the
devices really allocated here; DEVICES, the count asked for, where the variable is absent);
U is the node's line in UNITS_FILE (`NODENAME UNITS`, written by the replay from the site).

With SLURM_HETERO_CHECKPOINT set (`sbatch --checkpoint=DIR`), the body claims its epoch in
DIR (`slurm_hetero.checkpoint`), resumes from the work done so far, and on SIGTERM (Slurm's
requeue or preemption) commits what it has done before it exits; a stale incarnation's commit
is fenced out. Without it, it is a job that loses its work when requeued.

This is the replay's model of a job, and the planner's (`bridge/migrate.py`: work runs as
fast as the units it holds); real jobs scale less well, and the figures say so.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from slurm_hetero.checkpoint import Checkpointer, FencedOut  # stdlib only, like this module

# Progress is written as text: one float, the unit-seconds done.
PROGRESS_FORMAT = "{:.3f}\n"


def node_units(text: str, node: str) -> float | None:
    """The node's units per device from UNITS_FILE text.

    >>> node_units("g-01 0.36\\ng-02 0.85\\n", "g-02")
    0.85
    >>> node_units("g-01 0.36\\n", "cpu-01") is None
    True
    """
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == node:
            return float(parts[1])
    return None


def devices_held(env: dict[str, str], asked: int) -> int:
    """
    >>> devices_held({"CUDA_VISIBLE_DEVICES": "0,3"}, 1), devices_held({}, 2)
    (2, 2)
    """
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible and visible.lower() not in ("none", "nodevfiles"):
        return len([d for d in visible.split(",") if d.strip()])
    return asked


def read_progress(path: str | None) -> float:
    """Unit-seconds done according to a checkpoint (0 without one)."""
    if not path:
        return 0.0
    try:
        return max(0.0, float(Path(path).read_text().strip() or 0))
    except (OSError, ValueError):
        return 0.0


class Work:
    """The job's progress: done so far (resumed) plus what this incarnation ran."""

    def __init__(self, total: float, rate: float, done: float, now: float):
        if rate <= 0:
            raise ValueError(f"rate {rate}: must be > 0")
        self.total, self.rate, self.done, self.since = total, rate, min(done, total), now

    def progress(self, now: float) -> float:
        return min(self.total, self.done + max(0.0, now - self.since) * self.rate)

    def left_s(self, now: float) -> float:
        return max(0.0, self.total - self.progress(now)) / self.rate


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m slurm_hetero.replay.body WORK DEVICES UNITS_FILE", file=sys.stderr)
        return 2
    total, asked, units_file = float(argv[1]), int(argv[2]), argv[3]
    env = dict(os.environ)
    node = env.get("SLURMD_NODENAME", "")
    units = node_units(Path(units_file).read_text(), node)
    if units is None or units <= 0:
        print(f"replay body: node {node!r} has no units in {units_file}", file=sys.stderr)
        return 2
    rate = devices_held(env, asked) * units
    folder = env.get("SLURM_HETERO_CHECKPOINT", "")
    ck = None
    done = 0.0
    if folder:
        try:
            ck = Checkpointer(folder)
        except FencedOut as e:
            print(f"replay body: {e}", file=sys.stderr)
            return 3
        done = read_progress(ck.resume)
    work = Work(total, rate, done, time.time())

    def save(signum: int, frame: FrameType | None) -> None:
        if ck is not None:
            try:
                with ck.writing() as tmp:
                    Path(tmp).write_text(PROGRESS_FORMAT.format(work.progress(time.time())))
            except FencedOut:
                os._exit(3)
        os._exit(0 if ck is not None else 143)

    signal.signal(signal.SIGTERM, save)
    # The clock is the cluster's (libfaketime, inherited): sleep is accelerated with it.
    while (left := work.left_s(time.time())) > 0:
        time.sleep(min(left, 3600.0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
