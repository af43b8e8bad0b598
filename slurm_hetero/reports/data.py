"""Fetching accounting from Slurm: sacct in day chunks, cached on disk; squeue for waiters.

The cache holds the raw sacct text of one chunk, keyed by the accounting database it came
from (ClusterName, AccountingStorageHost/Port, slurm.conf path), the field list and the
chunk's bounds. A chunk is stored only once it can no longer change: it ended more than
SETTLE_S ago and every job in it has reached a terminal state. So a day still in progress
or holding a running job is fetched again each time, and a stored day is never stale
(short of slurmdbd replaying records after a long outage: --no-cache refetches).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.reports import accounting as A
from slurm_hetero.reports.files import write_atomic
from slurm_hetero.reports.jobs import TERMINAL
from slurm_hetero.reports.period import day_chunks, fmt_time
from slurm_hetero.slurm.runner import Runner, SlurmCommandError

CACHE_VERSION = 1
SETTLE_S = 3600.0
# sacct reads -S/-E in local time; it prints times as epoch seconds under this format.
_SACCT_TIME = "%Y-%m-%dT%H:%M:%S"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "slurm-hetero" / "sacct"


def epoch_runner(runner: Runner) -> Runner:
    """The same runner, with Slurm printing every time as epoch seconds (no TZ parsing)."""
    return dataclasses.replace(runner, extra_env={**runner.extra_env, "SLURM_TIME_FORMAT": "%s"})


def accounting_identity(runner: Runner) -> dict[str, str]:
    """What names the accounting database: from slurm.conf, as far as it is readable."""
    conf = runner.slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    ident = {"conf": str(Path(conf).resolve())}
    try:
        text = Path(conf).read_text(errors="replace")
    except OSError:
        return ident
    wanted = {"clustername", "accountingstoragehost", "accountingstorageport"}
    for line in text.splitlines():
        key, _, value = line.split("#", 1)[0].strip().partition("=")
        if key.strip().lower() in wanted:
            ident[key.strip().lower()] = value.strip()
    return ident


def sacct_argv(start: float, end: float) -> list[str]:
    return ["sacct", "-a", "-n", "-P", f"--delimiter={A.DELIM}",
            "-S", time.strftime(_SACCT_TIME, time.localtime(start)),
            "-E", time.strftime(_SACCT_TIME, time.localtime(end)),
            "-o", ",".join(A.FIELDS)]


def chunk_settled(text: str, end: float, now: float) -> bool:
    """True when a chunk's sacct text can no longer change (see the module doc)."""
    if end > now - SETTLE_S:
        return False
    state_col = A.FIELDS.index("State")
    for line in text.splitlines():
        fields = line.split(A.DELIM, len(A.FIELDS) - 1)
        if len(fields) != len(A.FIELDS):
            return False
        if fields[state_col].split(" ", 1)[0] not in TERMINAL:
            return False
    return True


class SacctSource:
    """sacct over a range, one local day at a time, through the one runner."""

    def __init__(self, runner: Runner, cache_dir: Path | None = None, now: float | None = None):
        self.runner = epoch_runner(runner)
        self.cache_dir = cache_dir
        self.now = time.time() if now is None else now
        self.hits = self.fetched = 0
        if cache_dir is not None:
            key = json.dumps({"v": CACHE_VERSION, "db": accounting_identity(runner),
                              "fields": A.FIELDS}, sort_keys=True)
            self.cache_dir = cache_dir / hashlib.sha256(key.encode()).hexdigest()[:16]

    def _path(self, start: float, end: float) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / f"{int(start)}-{int(end)}.psv.gz"

    def chunk(self, start: float, end: float) -> str:
        path = self._path(start, end)
        if path is not None and path.exists():
            try:
                self.hits += 1
                return gzip.decompress(path.read_bytes()).decode()
            except (OSError, EOFError, UnicodeDecodeError):
                self.hits -= 1  # damaged entry: fetch again and overwrite it
        text = self._sacct(start, end)
        self.fetched += 1
        if path is not None and chunk_settled(text, end, self.now):
            write_atomic(path, gzip.compress(text.encode(), compresslevel=5))
        return text

    def _sacct(self, start: float, end: float) -> str:
        try:
            return self.runner.out(sacct_argv(start, end), timeout=300)
        except SlurmCommandError as e:
            raise RuntimeFailure(
                f"cannot read job accounting for {fmt_time(start)} → {fmt_time(end)}: "
                f"sacct exited {e.returncode}: {_tail(e.stderr)}; is slurmdbd running and "
                "reachable at AccountingStorageHost/AccountingStoragePort of slurm.conf?") from e

    def texts(self, start: float, end: float, progress: bool = False,
              on_chunk: Callable[[int, int], None] | None = None) -> list[str]:
        """Every chunk's sacct text over [start, end), with a progress bar on a terminal."""
        chunks = list(day_chunks(start, end))
        out: list[str] = []
        console = Console(stderr=True)
        with Progress(TextColumn("sacct {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(), console=console, transient=True,
                      disable=not (progress and console.is_terminal)) as bar:
            task = bar.add_task("days", total=len(chunks))
            for i, (a, b) in enumerate(chunks):
                bar.update(task, description=time.strftime("%Y-%m-%d", time.localtime(a)))
                out.append(self.chunk(a, b))
                bar.advance(task)
                if on_chunk:
                    on_chunk(i + 1, len(chunks))
        return out

    def pending(self) -> str | None:
        """squeue's waiting jobs with their reasons, or None when slurmctld does not answer."""
        try:
            return self.runner.out(["squeue", "-h", "-t", "PD", "-o", A.SQUEUE_FORMAT], timeout=60)
        except RuntimeFailure:
            return None


def _tail(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-2:]) or "no message"
