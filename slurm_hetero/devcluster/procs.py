"""Process helpers for the dev cluster: pid files, liveness, ports, waiting."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on loopback (kept bound until all are picked)."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def unix_socket_open(path: Path) -> bool:
    """Does something accept connections on this unix socket?"""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int | None, expect: str = "") -> bool:
    """True when pid runs and its command line contains `expect` (guards against reuse)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = ""
    return state != "Z" and expect in cmdline(pid)


def wait_until(pred: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def stop(pid: int, expect: str, timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL: returns when the process is gone."""
    if not alive(pid, expect):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not wait_until(lambda: not alive(pid, expect), timeout, 0.1):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        wait_until(lambda: not alive(pid, expect), 5.0, 0.1)


def processes_under(root: Path) -> list[int]:
    """Pids whose cwd or an open file lies under root (leftover slurmstepds)."""
    me = os.getpid()
    return [int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and int(e.name) != me and is_under(int(e.name), root)]


def is_under(pid: int, root: Path) -> bool:
    """Whether the process's cwd or an open file lies under root: whose cluster it is, when
    several run on one machine (job ids repeat across them)."""
    prefix = str(root.resolve()) + "/"
    try:
        links = [os.readlink(f"/proc/{pid}/cwd")]
        links += [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return False
    return any(link.startswith(prefix) for link in links)


def command_name(pid: int) -> str:
    """The process's comm ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text(errors="replace").strip()
    except OSError:
        return ""


def stop_session(pid: int) -> None:
    """SIGKILL the process group of pid (a job's processes), never our own group."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        if pgid != os.getpgid(0) and pgid > 1:
            os.killpg(pgid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_until(lambda: not alive(pid), 5.0, 0.1)
