"""A cluster's finished jobs from its accounting, for the runtime model's job table.

sacct is read a local day at a time (`slurm.sacct.SacctDays`); each day that can no longer
change is kept in `parts` (the table's `.parts` folder), so a rerun asks only for the days
still open. A job running over several days is listed on each; its last listing, on the
day it ended, is the one kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table
from slurm_hetero.jobs.sacct import from_sacct
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import Chunk, SacctDays, read_sacct, sacct_notes


def sacct_jobs(runner: Runner, since: float, until: float, parts: Path, *, cluster: str | None = None,
               now: float | None = None, on_chunk: Callable[[Chunk], None] | None = None,
               warn: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Jobs that ended (in a terminal state) between `since` and `until` (epoch seconds);
    what is odd about the accounting read (sacct_notes) goes to `warn`."""
    if until <= since:
        raise InputError(f"--since {_day(since)} must be before --until {_day(until)}")
    days = SacctDays(runner, parts, cluster=cluster, now=now, names=True)
    raw = read_sacct(days.texts(since, until, on_chunk))
    for note in sacct_notes(raw, days):
        if warn:
            warn(f"warning: {note}")
    jobs = from_sacct(raw.frame, cluster=cluster or "")
    done = jobs[table.finished(jobs) & (jobs["end"] >= since) & (jobs["end"] < until)]
    return done.reset_index(drop=True)


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))
