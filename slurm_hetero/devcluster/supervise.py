"""Keep one of the dev cluster's own daemons running (the bridge daemon): start it, and when
it dies start it again after a pause that doubles with each quick death (1 s up to 30 s;
a run of a minute or more starts the count again). Every restart is one log line.

    python -m slurm_hetero.devcluster.supervise --name bridge --pidfile RUN/bridge-supervisor.pid \\
        -- python -m slurm_hetero.cli bridge run ...

SIGTERM (or SIGINT) stops the supervisor: it passes SIGTERM on, waits for the child (then
SIGKILL), removes its pid file and exits 0. On a real controller systemd does this job
(templates/hetero-bridge.service.j2, Restart=always).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

from slurm_hetero.fileio import write_atomic


@dataclass(frozen=True)
class Backoff:
    """The pause before restart n+1, from the one before restart n and how long it ran."""

    first: float = 1.0
    factor: float = 2.0
    most: float = 30.0
    stable: float = 60.0  # a run at least this long counts as healthy: back to `first`

    def next(self, pause: float | None, ran_s: float) -> float:
        """
        >>> b = Backoff()
        >>> [b.next(p, 0.5) for p in (None, 1.0, 16.0, 30.0)], b.next(30.0, 90.0)
        ([1.0, 2.0, 30.0, 30.0], 1.0)
        """
        if pause is None or ran_s >= self.stable:
            return self.first
        return min(pause * self.factor, self.most)


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


class Supervisor:
    def __init__(self, name: str, argv: Sequence[str], log: Callable[[str], None] | None = None,
                 backoff: Backoff | None = None, stop_timeout: float = 5.0,
                 env: dict[str, str] | None = None) -> None:
        if not argv:
            raise ValueError("nothing to supervise: the command is empty")
        self.name, self.argv, self.env = name, list(argv), env
        self.log = log or (lambda line: print(line, flush=True))
        self.backoff = backoff or Backoff()
        self.stop_timeout = stop_timeout
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def stop(self, *_: object) -> None:
        """Ask the child to stop and the loop to end (a signal handler); a child still running
        `stop_timeout` seconds later is killed (by a timer: the loop is blocked in its wait)."""
        self.stopping = True
        child = self.child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
            timer = threading.Timer(self.stop_timeout, self._kill, (child,))
            timer.daemon = True
            timer.start()

    @staticmethod
    def _kill(child: subprocess.Popen[bytes]) -> None:
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()

    def _start(self) -> subprocess.Popen[bytes] | None:
        self.starts += 1
        try:
            return subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, env=self.env)
        except OSError as e:
            self.log(f"{_stamp()} supervise {self.name}: cannot start {self.argv[0]}: {e.strerror}")
            return None

    @staticmethod
    def _wait(child: subprocess.Popen[bytes]) -> int:
        # Blocked in waitpid, not polling: Popen.wait(timeout) wakes every 50 ms, and under a
        # replay's faked clock (its sleeps shortened by the speed) that cost each supervisor
        # about 4 % of a core, beside the replays it shares the machine with.
        return child.wait()

    def _pause(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))

    def run(self, max_starts: int | None = None) -> int:
        """Run until stopped (or `max_starts` starts, for tests); returns 0."""
        pause: float | None = None
        while not self.stopping:
            t0 = time.monotonic()
            self.child = self._start()
            if self.stopping and self.child is not None:
                self.stop()  # a signal came between the start and here
            rc = self._wait(self.child) if self.child is not None else None
            self.child = None
            if self.stopping:
                break
            ran = time.monotonic() - t0
            pause = self.backoff.next(pause, ran)
            how = "could not start" if rc is None else (
                f"killed by signal {-rc}" if rc < 0 else f"exited with status {rc}")
            if max_starts is not None and self.starts >= max_starts:
                self.log(f"{_stamp()} supervise {self.name}: {how} after {ran:.1f} s; "
                         f"not restarted ({max_starts} starts)")
                break
            self.log(f"{_stamp()} supervise {self.name}: {how} after {ran:.1f} s; "
                     f"restart {self.starts} in {pause:g} s")
            self._pause(pause)
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m slurm_hetero.devcluster.supervise",
                                description="Restart a daemon when it dies (with backoff).")
    p.add_argument("--name", required=True, help="What the log lines call the daemon.")
    p.add_argument("--pidfile", help="Where the supervisor writes its own pid.")
    p.add_argument("--first", type=float, default=Backoff.first, help="First pause, seconds.")
    p.add_argument("--most", type=float, default=Backoff.most, help="Longest pause, seconds.")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("COMMAND is missing: ... -- COMMAND [ARG...]")
    sup = Supervisor(a.name, command, backoff=Backoff(first=a.first, most=max(a.first, a.most)))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        sup.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if a.pidfile:
        write_atomic(a.pidfile, f"{os.getpid()}\n")
    try:
        return sup.run()
    finally:
        if a.pidfile:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(a.pidfile)


if __name__ == "__main__":
    sys.exit(main())
