"""The dev cluster's supervisor (the bridge daemon's): it waits for its child without polling,
and a child that ignores SIGTERM is killed once the stop's grace has passed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from slurm_hetero.devcluster.procs import read_pid, wait_until
from slurm_hetero.devcluster.supervise import Supervisor

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


def _switches(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def test_a_running_child_is_waited_for_without_waking(tmp_path: Path) -> None:
    pidfile = tmp_path / "sup.pid"
    proc = subprocess.Popen([sys.executable, "-m", "slurm_hetero.devcluster.supervise", "--name", "s",
                             "--pidfile", str(pidfile), "--", "sleep", "300"])
    try:
        assert wait_until(lambda: read_pid(pidfile) == proc.pid, 20)
        time.sleep(0.5)  # past its start
        before = _switches(proc.pid)
        time.sleep(2.0)
        # Polling (Popen.wait with a timeout) woke it about 40 times in 2 s.
        assert _switches(proc.pid) - before < 5
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    lines: list[str] = []
    sup = Supervisor("stubborn", [sys.executable, "-c", STUBBORN], log=lines.append, stop_timeout=0.5)
    done: list[float] = []

    def run() -> None:
        sup.run()
        done.append(time.monotonic())

    runner = threading.Thread(target=run)
    runner.start()
    assert wait_until(lambda: sup.child is not None, 20)
    child = sup.child
    assert child is not None
    time.sleep(0.5)  # its handler set
    t0 = time.monotonic()
    sup.stop()
    runner.join(timeout=20)
    assert not runner.is_alive() and done
    assert child.returncode == -9 and 0.4 <= done[0] - t0 < 10, (child.returncode, done[0] - t0)
    assert sup.starts == 1 and lines == []  # a stop is no death: nothing restarted, nothing logged
