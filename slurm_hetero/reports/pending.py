"""Who waits now and why: `squeue -h -t PD` (argv apart from its pure parser)."""

from __future__ import annotations

import pandas as pd

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.slurm.commands import squeue_pending_argv
from slurm_hetero.slurm.runner import Runner

SQUEUE_FIELDS = ("job", "partition", "qos", "user", "account", "submit", "reason")


def parse_squeue_pending(text: str) -> pd.DataFrame:
    """`squeue -h -t PD -o PENDING_FORMAT` (SLURM_TIME_FORMAT=%s) → one row per waiting job."""
    rows = [ln.split("|", len(SQUEUE_FIELDS) - 1) for ln in text.splitlines() if ln.strip()]
    rows = [r for r in rows if len(r) == len(SQUEUE_FIELDS)]
    frame = pd.DataFrame(rows, columns=list(SQUEUE_FIELDS), dtype=object)
    frame["submit"] = pd.to_numeric(frame["submit"], errors="coerce").astype("float64")
    frame["reason"] = frame["reason"].str.strip("()")
    return frame


def pending_text(runner: Runner) -> str | None:
    """squeue's waiting jobs with their reasons, or None when slurmctld does not answer.
    `runner` should print times as epoch seconds (`slurm.sacct.epoch_runner`)."""
    try:
        return runner.out(squeue_pending_argv(), timeout=60)
    except RuntimeFailure:
        return None
