"""What `slurm-hetero job` and `slurm-hetero why` share about one job: its JOBID argument
and the bridge's reasons for a choice in plain words. Standard library only: `why` stays
light (jobpage.py loads pandas)."""

from __future__ import annotations

import re

from slurm_hetero.errors import InputError

JOB_ID_FORMS = "the number sbatch printed, e.g. 1234"
_JOB_ID = re.compile(r"[1-9]\d{0,11}")
# The bridge's "why" in its decision record (bridge.lua), in words.
BRIDGE_WHY = {
    "starts-now": "a pool could start it at once (one node with its devices, CPUs and memory free, "
    "no queue); the cheapest "
    "in normalized units of those",
    "least-backlog": "no pool could start it at once: the pool with the shortest backlog",
    "stale-backlog": "the capacity snapshot was stale (the bridge daemon was not writing it): the pool "
    "with the shortest backlog by that snapshot and the jobs placed since",
    "static": "no capacity snapshot: the smallest model that satisfies the request",
}


def check_job_id(text: str) -> int:
    """A JOBID argument as a number; InputError (exit 2) naming what is allowed.

    >>> check_job_id(" 42 ")
    42
    """
    t = text.strip()
    if not _JOB_ID.fullmatch(t):
        raise InputError(f"JOBID {text!r}: not a job id; give {JOB_ID_FORMS}")
    return int(t)
