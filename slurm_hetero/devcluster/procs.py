"""Process helpers for the dev cluster: pid files, liveness, ports, waiting."""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

# Ports handed to dev clusters come from below the kernel's ephemeral range (32768-60999 by
# default), so no outgoing connection holds one, and every process on the machine draws them
# through one registry: several clusters booting at once (parallel tests, replays side by side)
# once got the same "free" port, and the second slurmctld could not bind it.
PORT_RANGE = (20000, 32000)
PORT_DIR = Path("/run/slurm-hetero-dev")  # the registry's folder: the caller's alone (0700)
PORT_HOLD_S = 600.0  # a port handed out stays reserved this long: its daemon binds it by then


def free_ports(n: int, folder: Path | None = None, now: float | None = None,
               rng: random.Random | None = None) -> list[int]:
    """n distinct TCP ports free on loopback now and handed to no other caller in the last
    PORT_HOLD_S seconds (the registry is shared under an exclusive lock). Without a registry
    folder of our own (another user's, or none can be made), the kernel picks, as before."""
    folder = folder or PORT_DIR
    rng = rng or random.SystemRandom()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return _kernel_ports(n)
        fd = os.open(folder / "ports.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return _kernel_ports(n)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        t = time.time() if now is None else now
        registry = folder / "ports.json"
        try:
            held = {int(p): float(at) for p, at in json.loads(registry.read_text()).items()
                    if t - float(at) < PORT_HOLD_S}
        except (OSError, ValueError, AttributeError, TypeError):
            held = {}
        ports: list[int] = []
        for _ in range(50 * n):
            if len(ports) == n:
                break
            p = rng.randrange(*PORT_RANGE)
            if p not in held and p not in ports and _bindable(p):
                ports.append(p)
        if len(ports) < n:
            return _kernel_ports(n)
        held.update(dict.fromkeys(ports, t))
        tmp = folder / f"ports.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(held))
        os.replace(tmp, registry)
        return ports
    finally:
        os.close(fd)  # releases the lock


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_ports(n: int) -> list[int]:
    """n distinct free TCP ports on loopback as the kernel picks them (kept bound until all are picked)."""
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
    top = str(root.resolve())
    try:
        links = [os.readlink(f"/proc/{pid}/cwd")]
        links += [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return False
    return any(link == top or link.startswith(top + "/") for link in links)


def owned_by(pid: int, root: Path) -> bool:
    """Whether pid is a process of the cluster in `root`: its command line names the folder
    (a socket, a data dir, a pidfile) or its cwd or an open file lies in it. A pidfile's pid
    may have been reused by another cluster's daemon of the same name (pids wrap at 32768 on
    a busy machine): only this check keeps `down` from stopping that one."""
    return str(root.resolve()) in cmdline(pid) or is_under(pid, root)


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
