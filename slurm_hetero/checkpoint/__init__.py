"""Checkpoints fenced by epoch, for jobs that Slurm may preempt, requeue or move.

A job calls `Checkpointer(DIR)` once at start (the restart count and job id come from
Slurm's environment), resumes from `.resume` if set, and writes each checkpoint with
`with ck.writing() as tmp: ...` — committed by rename only while this incarnation is the
newest (fence.py explains the protocol and what the filesystem must give). The folder and
everything in it must be the job user's alone (UnsafeFolder otherwise, exit status 2).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from slurm_hetero.checkpoint.fence import CheckpointDir, Epoch, FencedOut, UnsafeFolder

__all__ = ["CheckpointDir", "Checkpointer", "Epoch", "FencedOut", "UnsafeFolder"]


class Checkpointer:
    def __init__(self, path: str, restart_count: int | None = None, job_id: str | None = None):
        self.dir = CheckpointDir(path)
        restarts = restart_count if restart_count is not None else int(
            os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        self.epoch, self.resume = self.dir.begin(
            restarts, job_id if job_id is not None else os.environ.get("SLURM_JOB_ID", ""),
            socket.gethostname())

    @contextmanager
    def writing(self) -> Iterator[str]:
        """A temp path to write the checkpoint to (a file or a folder); committed on exit
        (FencedOut if a newer incarnation took over), discarded on an exception."""
        tmp = self.dir.temp_path(self.epoch)
        try:
            yield tmp
        except BaseException:
            from slurm_hetero.checkpoint.fence import _remove

            _remove(tmp)
            raise
        self.dir.commit(self.epoch, tmp)
