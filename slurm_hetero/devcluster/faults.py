"""Injecting a soak's faults (`replay/faults.py`) into a replay's dev cluster, each at its
trace time, each undone when it is over, each with the evidence that it happened.

How each is done and undone (only this cluster's processes, found by its pid files, each
checked against its command line before a signal):
- bridge-kill: SIGKILL to the daemon; its supervisor starts a new one (a new pid).
- bridge-stop: SIGSTOP to the daemon (its /proc state reads `T`), SIGCONT when it is over;
  the snapshot (its heartbeat) goes stale meanwhile and is fresh again after.
- slurmctld-restart: SIGTERM, then a new slurmctld (a new pid) on the cluster's clock.
- slurmctld-kill: SIGKILL; a new slurmctld when it is over.
- slurmdbd-stop: SIGTERM (its port closes); a new slurmdbd when it is over. slurmctld keeps
  what accounting must hear meanwhile (sdiag's DBD agent queue) and sends it then.
- slurmd-kill: SIGKILL to one node's slurmd (its jobs' slurmstepds run on); a new slurmd when
  it is over, and the node answers slurmctld again.
- state-readonly: StateSaveLocation (where the snapshot and slurmctld's state live) bound
  onto itself read-only (`mount --bind`, `mount -o remount,ro,bind`: writes fail with
  EROFS), then unmounted. Needs root (CAP_SYS_ADMIN); no systemd involved.
- state-full (a `SoakCluster(state_tmpfs_mb=...)`: StateSaveLocation on a tmpfs of its own,
  mounted before slurmctld first starts, its contents copied out before `down` unmounts it):
  a root-owned filler file takes every free byte (posix_fallocate, then writes until ENOSPC),
  topped up twice a real second while the fault lasts (slurmctld frees pages as it replaces
  its files), so every new write in the folder fails with ENOSPC; undone: the filler removed.
  Refused on any other file system (it would fill a real disk).
- clock-skew: one node's slurmd restarted with its own FAKETIME offset on the shared
  libfaketime clock (same speed, `skew_s` apart: slurmctld records the node's SlurmdStartTime
  that far off), then restarted on the cluster's clock.
- agent-fail (a cluster with the node agent's hooks, `DevReplayCluster(hooks=True)`): a
  root-owned switch file beside one node's fake devices (energy/fake.py FAIL_SWITCH) makes a
  policy write fail once a Prolog has changed one of a job's devices; a probe job asking two of
  that node's devices and `--energy=efficiency` then meets it (the agent logs the Prolog's ERROR,
  one device left changed). Undone: the switch removed; by then the probe's Epilog has put
  every device its Prolog changed back (its owner records name them: `_restore_owned`; the
  health check does not run on a replay clock), and a second probe shows the policy applied
  whole and restored again. The probes are not trace jobs (the audit counts them as strays).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_hetero.conf.monitoring import RULES, PrometheusSettings, render_prometheus
from slurm_hetero.devcluster import procs
from slurm_hetero.devcluster.clock import ClockSpec
from slurm_hetero.devcluster.cluster import Cluster, bridge_every, daemon_margin
from slurm_hetero.devcluster.replay import MARK, DevReplayCluster
from slurm_hetero.energy.fake import FAIL_SWITCH
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.monitor.cluster import gres_free
from slurm_hetero.replay.clockmap import ClockMap, calibrate
from slurm_hetero.replay.faults import Fault, alert_spans, dbd_queue, scrape_gaps
from slurm_hetero.site import Site
from slurm_hetero.slurm.commands import (
    cancel_argv,
    node_jobs_argv,
    node_names,
    node_state_argv,
    sacct_state_argv,
    sbatch_wrap_argv,
    sdiag_argv,
    show_node_argv,
    sinfo_capacity_argv,
    squeue_state_argv,
)
from slurm_hetero.slurm.parse import parse_kv_record
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.scontrol import parse_job_devices, show_job_argv, show_one_job

Say = Callable[[str], None]
Undo = Callable[[], None]
_FAKETIME = re.compile(r"^([+-]\d+) x(\S+)$")


def proc_state(pid: int | None) -> str:
    """The one-letter state in /proc/PID/stat (`T`: stopped), "" when gone."""
    if not pid:
        return ""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def environ(pid: int | None) -> dict[str, str]:
    """A process's environment (empty when gone or unreadable)."""
    if not pid:
        return {}
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def skewed_faketime(faketime: str, skew_s: int) -> str:
    """The FAKETIME of a process `skew_s` seconds off the holder's clock, at its speed.

    >>> skewed_faketime("+0 x50", -90), skewed_faketime("-60 x2.5", 30)
    ('-90 x50', '-30 x2.5')
    """
    m = _FAKETIME.match(faketime.strip())
    if m is None:
        raise RuntimeFailure(f"clock-skew: cannot read the cluster's FAKETIME {faketime!r}")
    return f"{int(m.group(1)) + skew_s:+d} x{m.group(2)}"


def _mount(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *argv], capture_output=True, text=True, check=False, timeout=30)


def read_only(folder: Path) -> None:
    """Bind `folder` onto itself read-only (undo: `writable`)."""
    r = _mount("--bind", str(folder), str(folder))
    if r.returncode != 0:
        raise RuntimeFailure(f"mount --bind {folder}: {r.stderr.strip() or r.returncode} (needs root)")
    r = _mount("-o", "remount,ro,bind", str(folder))
    if r.returncode != 0:
        writable(folder)
        raise RuntimeFailure(f"mount -o remount,ro,bind {folder}: {r.stderr.strip() or r.returncode}")


def writable(folder: Path) -> None:
    """Take `read_only`'s bind mount away (lazily when something holds it open)."""
    r = subprocess.run(["umount", str(folder)], capture_output=True, text=True, check=False, timeout=30)
    if r.returncode != 0:
        r = subprocess.run(["umount", "-l", str(folder)], capture_output=True, text=True, check=False,
                           timeout=30)
        if r.returncode != 0:
            raise RuntimeFailure(f"umount {folder}: {r.stderr.strip() or r.returncode}")


def write_error(folder: Path) -> str:
    """Try to create a file in `folder` and write a byte to it: "" when it could (removed
    again), else the errno's name (EROFS: a read-only folder; ENOSPC: a full one, where the
    file itself is made, as a tmpfs has inodes left, and its first byte finds no room)."""
    probe = folder / f".soak-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, str(e.errno))
    try:
        os.write(fd, b"x")
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, str(e.errno))
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)
    return ""


def _mount_lines(folder: Path) -> list[list[str]]:
    """/proc/self/mountinfo's entries mounted on `folder`, the topmost last."""
    target = str(folder.absolute())
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    return [ln.split() for ln in lines if len(ln.split()) > 4 and ln.split()[4] == target]


def mounts(folder: Path) -> int:
    """How many mounts are stacked on `folder` (a tmpfs of its own, a read-only bind above)."""
    return len(_mount_lines(folder))


def mounted(folder: Path) -> bool:
    """Is `folder` a mount point (our read-only bind or tmpfs still there)?"""
    return mounts(folder) > 0


def fs_type(folder: Path) -> str:
    """The file system type of the topmost mount on `folder` ("" when none is)."""
    lines = _mount_lines(folder)
    if not lines or "-" not in lines[-1]:
        return ""
    fields = lines[-1]
    return fields[fields.index("-") + 1] if fields.index("-") + 1 < len(fields) else ""


def tmpfs_on(folder: Path, size_mb: int) -> None:
    """A tmpfs of `size_mb` MiB of its own on `folder` (made if missing), with whatever the
    folder held moved onto it, so nothing is hidden beneath it (undo: `tmpfs_off`)."""
    folder.mkdir(parents=True, exist_ok=True)
    stash = None
    if any(folder.iterdir()):
        stash = Path(tempfile.mkdtemp(prefix=f".{folder.name}-stash.", dir=folder.parent))
        for entry in folder.iterdir():
            entry.rename(stash / entry.name)
    r = _mount("-t", "tmpfs", "-o", f"size={int(size_mb)}m,mode=0755", "soak-state", str(folder))
    if stash is None:
        if r.returncode != 0:
            raise RuntimeFailure(f"mount -t tmpfs {folder}: {r.stderr.strip() or r.returncode} (needs root)")
        return
    if r.returncode != 0:  # the contents back where they were
        for entry in stash.iterdir():
            entry.rename(folder / entry.name)
        stash.rmdir()
        raise RuntimeFailure(f"mount -t tmpfs {folder}: {r.stderr.strip() or r.returncode} (needs root)")
    shutil.copytree(stash, folder, symlinks=True, dirs_exist_ok=True)
    shutil.rmtree(stash, ignore_errors=True)


def tmpfs_off(folder: Path) -> None:
    """Take `tmpfs_on`'s tmpfs away, its contents (the filler aside) copied to the folder
    beneath first, so what the daemons left there stays to read."""
    stash = Path(tempfile.mkdtemp(prefix=f".{folder.name}-stash.", dir=folder.parent))
    try:
        with contextlib.suppress(OSError, shutil.Error):
            shutil.copytree(folder, stash, symlinks=True, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(FILLER, ".soak-probe-*"))
        writable(folder)  # an umount, lazy when something holds it open
        if not mounted(folder):
            with contextlib.suppress(OSError, shutil.Error):
                shutil.copytree(stash, folder, symlinks=True, dirs_exist_ok=True)
    finally:
        shutil.rmtree(stash, ignore_errors=True)


FILLER = ".soak-filler"  # state-full's file: root's, in the full folder


def free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def fill(folder: Path) -> int:
    """Grow root's filler file in `folder` (made if missing) until its file system has no
    room left: posix_fallocate of the free bytes, then writes of 1 MiB and 4 KiB until
    ENOSPC. Returns the bytes it grew by."""
    fd = os.open(folder / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        before = os.fstat(fd).st_size
        free = free_bytes(folder)
        if free > 0:
            with contextlib.suppress(OSError):  # ENOSPC: a daemon took a page meanwhile
                os.posix_fallocate(fd, before, free)
        for chunk in (1 << 20, 4096):
            block = b"\0" * chunk
            while True:
                try:
                    os.write(fd, block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        return os.fstat(fd).st_size - before
    finally:
        os.close(fd)


class Injector:
    """Applies `faults` to `cluster` at their trace times (a thread, from `start`), undoing each
    when it is over. `records` says, per fault, when it came, what was seen, and whether the
    evidence holds (`ok`). `abort` stops it and undoes a fault in progress; `wait` returns once
    every fault is done (or `abort`)."""

    def __init__(self, cluster: Cluster, faults: list[Fault], clock: ClockMap, t0: float,
                 margin_s: float, say: Say | None = None) -> None:
        self.c, self.faults, self.clock, self.t0 = cluster, faults, clock, t0
        self.margin_s = margin_s
        self.say = say or (lambda _: None)
        self.records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._undo: Undo | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="soak-faults", daemon=True)
        spec = cluster.clock()
        self.speed = spec.speed if spec else 1.0

    # ---- running the schedule ----------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def abort(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        with self._lock:
            undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def trace_now(self) -> float:
        return round(self.clock.now() - self.t0, 1)

    def _sleep_until(self, trace_s: float) -> bool:
        """Wait until the window's trace second `trace_s`; False once aborted."""
        while not self._stop.is_set():
            left = self.clock.real(self.t0 + trace_s) - time.time()
            if left <= 0:
                return True
            self._stop.wait(min(left, 1.0))
        return False

    def _run(self) -> None:
        for f in self.faults:
            if not self._sleep_until(f.at_s):
                return
            rec: dict[str, Any] = {**f.to_json(), "started_trace_s": self.trace_now(), "ok": False,
                                   "evidence": {}, "problem": None}
            self.records.append(rec)
            where = f" on {f.node}" if f.node else ""
            self.say(f"fault {f.kind}{where} at trace +{rec['started_trace_s']:.0f} s"
                     + (f" for {f.for_s:.0f} s" if f.for_s else ""))
            try:
                undo = getattr(self, "_" + f.kind.replace("-", "_"))(f, rec["evidence"])
                if rec["evidence"].get("node") and rec["evidence"]["node"] != f.node:
                    rec["node"] = rec["evidence"]["node"]  # agent-fail's probe went where devices were free
                with self._lock:
                    self._undo = undo
                if undo is not None:
                    if not self._sleep_until(f.until_s):
                        return  # abort undoes it
                    with self._lock:
                        self._undo = None
                    rec["undone_trace_s"] = self.trace_now()
                    undo()
                rec["ok"] = self._holds(f, rec["evidence"])
            except Exception as e:  # one fault that cannot be done costs itself, not the soak
                rec["problem"] = f"{type(e).__name__}: {e}"
                with self._lock:
                    undo, self._undo = self._undo, None
                if undo is not None:
                    with contextlib.suppress(Exception):
                        undo()
            rec["ended_trace_s"] = self.trace_now()
            try:  # the devices a job's policy was left on, once the fault is over
                rec["devices_left"] = devices_left(self.c)
            except Exception as e:  # a check that cannot read costs itself, not the soak
                rec["devices_left"] = {"problem": f"{type(e).__name__}: {e}"}
            self.say(f"fault {f.kind} done: {'ok' if rec['ok'] else 'NOT ok'} {rec['evidence']}"
                     + (f" ({rec['problem']})" if rec["problem"] else ""))

    def _holds(self, f: Fault, ev: dict[str, Any]) -> bool:
        """Did it happen, and is it over? (what the test and the JSON report rely on)"""
        if (f.kind not in ("bridge-stop", "state-readonly", "state-full", "agent-fail")
                and ev.get("on_clock") is not True):
            return False  # a daemon started again off the cluster's clock
        if f.kind == "bridge-kill":
            return bool(ev.get("pid_after")) and ev["pid_after"] != ev.get("pid_before")
        if f.kind == "bridge-stop":
            return (ev.get("state_stopped") == "T" and ev.get("state_before_cont") == "T"
                    and ev.get("state_after") not in ("T", "") and ev.get("pid_after") == ev.get("pid_before")
                    and ev.get("heartbeat_back_real_s") is not None)
        if f.kind in ("slurmctld-restart", "slurmctld-kill", "slurmdbd-stop"):
            ok = bool(ev.get("pid_after")) and ev["pid_after"] != ev.get("pid_before")
            return ok and (f.kind != "slurmdbd-stop" or ev.get("port_closed") is True)
        if f.kind == "slurmd-kill":
            return (bool(ev.get("pid_after")) and ev["pid_after"] != ev.get("pid_before")
                    and ev.get("node_back") is True)
        if f.kind == "state-readonly":
            return (ev.get("write_error") == "EROFS" and ev.get("write_error_after") == ""
                    and ev.get("still_mounted") is False
                    and ev.get("heartbeat_back_real_s") is not None)
        if f.kind == "state-full":
            return (ev.get("write_error") == "ENOSPC" and ev.get("write_error_at_end") == "ENOSPC"
                    and ev.get("filler_removed") is True and ev.get("write_error_after") == ""
                    and ev.get("heartbeat_back_real_s") is not None)
        if f.kind == "agent-fail":
            return (bool(ev.get("agent_error")) and (ev.get("changed_midway") or 0) >= 1
                    and ev.get("switch_removed") is True and ev.get("left_after") == 0
                    and ev.get("probe_state") == "COMPLETED" and (ev.get("applied_after") or 0) >= 2
                    and ev.get("probe_after_state") == "COMPLETED")
        if f.kind == "clock-skew":
            skewed, plain = ev.get("node_clock_offset_s"), ev.get("node_clock_offset_after_s")
            return (ev.get("skewed_env") is True and isinstance(skewed, int | float)
                    and isinstance(plain, int | float) and plain - skewed >= abs(f.skew_s) / 2)
        return False

    # ---- helpers -----------------------------------------------------------------------
    def _pid(self, name: str) -> int | None:
        return self.c.pid(self.c.daemon(name))

    def _on_clock(self, pid: int | None, faketime: str | None = None) -> bool:
        """Does `pid` read the cluster's shared clock (its FAKETIME_SHARED, and the cluster's
        FAKETIME or the one given)? A daemon started again must, or its times jump."""
        env, want = environ(pid), self.c.runner.extra_env
        if not want:
            return True  # a cluster on real time
        return (env.get("FAKETIME_SHARED") == want.get("FAKETIME_SHARED")
                and env.get("FAKETIME") == (faketime or want.get("FAKETIME")))

    def _new_pid(self, name: str, old: int | None, timeout: float = 60.0) -> int | None:
        found: list[int] = []

        def new() -> bool:
            pid = self._pid(name)
            if pid and pid != old:
                found.append(pid)
                return True
            return False

        procs.wait_until(new, timeout, 0.2)
        return found[-1] if found else None

    def _signal(self, name: str, sig: signal.Signals) -> int:
        d = self.c.daemon(name)
        pid = self.c.pid(d)
        if d is None or not pid:
            raise RuntimeFailure(f"{name} is not running")
        os.kill(pid, sig)
        return pid

    def _gone(self, pid: int, timeout: float = 30.0) -> bool:
        return procs.wait_until(lambda: not procs.alive(pid), timeout, 0.1)

    @property
    def snapshot(self) -> Path:
        return self.c.state / "hetero-snapshot.lua"

    def _snapshot_age_trace_s(self) -> float | None:
        """How long ago (trace seconds) the snapshot was last written (mtime is real time)."""
        try:
            return round((time.time() - self.snapshot.stat().st_mtime) * self.speed, 1)
        except OSError:
            return None

    def _heartbeat_back(self, since: float, timeout: float = 60.0) -> float | None:
        """Real seconds from `since` (time.time()) until the snapshot is written again."""
        def fresh() -> bool:
            try:
                return self.snapshot.stat().st_mtime > since
            except OSError:
                return False

        return round(time.time() - since, 1) if procs.wait_until(fresh, timeout, 0.2) else None

    def _runner(self) -> Runner:
        env = {**self.c.runner.extra_env, "SLURM_TIME_FORMAT": "%s"}
        return dataclasses.replace(self.c.runner, extra_env=env)

    def _node(self, node: str) -> dict[str, str]:
        r = self._runner().run(show_node_argv(node), check=False, timeout=20)
        return parse_kv_record(r.stdout) if r.returncode == 0 else {}

    def _node_state(self, node: str) -> str:
        r = self.c.runner.run(node_state_argv(node), check=False, timeout=20)
        return r.stdout.split()[0] if r.returncode == 0 and r.stdout.split() else ""

    def _slurmd_started(self, node: str, before: str, timeout: float = 60.0) -> int | None:
        """The node's SlurmdStartTime (epoch, the node's own clock) once it differs from
        `before`: the restarted slurmd registered."""
        got: list[int] = []

        def changed() -> bool:
            v = self._node(node).get("SlurmdStartTime", "")
            if v and v != before and v.isdigit():
                got.append(int(v))
                return True
            return False

        procs.wait_until(changed, timeout, 0.3)
        return got[-1] if got else None

    # ---- the faults: each returns its undo (None: nothing to undo) ---------------------
    def _bridge_kill(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        t = time.monotonic()
        ev["pid_before"] = self._signal("bridge", signal.SIGKILL)
        ev["pid_after"] = self._new_pid("bridge", ev["pid_before"])
        ev["restarted_real_s"] = round(time.monotonic() - t, 1)
        ev["on_clock"] = self._on_clock(ev["pid_after"])
        return None

    def _bridge_stop(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        pid = self._signal("bridge", signal.SIGSTOP)
        ev["pid_before"], ev["margin_s"] = pid, self.margin_s
        procs.wait_until(lambda: proc_state(pid) == "T", 10, 0.05)
        ev["state_stopped"] = proc_state(pid)

        def undo() -> None:
            ev["state_before_cont"] = proc_state(pid)
            ev["snapshot_age_s"] = self._snapshot_age_trace_s()
            ev["past_margin"] = (ev["snapshot_age_s"] or 0) > self.margin_s
            since = time.time()
            os.kill(pid, signal.SIGCONT)
            procs.wait_until(lambda: proc_state(pid) not in ("T", "t"), 10, 0.05)
            ev["state_after"] = proc_state(pid)
            ev["heartbeat_back_real_s"] = self._heartbeat_back(since)
            ev["pid_after"] = self._pid("bridge")

        return undo

    def _slurmctld_restart(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        ev["pid_before"] = self._pid("slurmctld")
        t = time.monotonic()
        self.c.restart_slurmctld(timeout=60)
        ev["down_real_s"] = round(time.monotonic() - t, 1)
        # It answers pings a moment before its pidfile names it (CI once read the old pid
        # there, gone, and called the restart not shown): wait for the new pid, as for slurmd.
        ev["pid_after"] = self._new_pid("slurmctld", ev["pid_before"], timeout=30)
        ev["on_clock"] = self._on_clock(ev["pid_after"])
        return None

    def _slurmctld_kill(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        pid = self._signal("slurmctld", signal.SIGKILL)
        ev["pid_before"], ev["gone"] = pid, self._gone(pid)

        def undo() -> None:
            self.c.start_slurmctld(timeout=60)
            ev["pid_after"] = self._new_pid("slurmctld", pid, timeout=30)  # as for a restart
            ev["on_clock"] = self._on_clock(ev["pid_after"])

        return undo

    def _slurmdbd_stop(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        d = self.c.daemon("slurmdbd")
        pid = self.c.pid(d)
        if d is None or not pid:
            raise RuntimeFailure("slurmdbd is not running")
        procs.stop(pid, d.expect)
        port = self.c.info().get("dbd_port", 0)
        ev["pid_before"], ev["port_closed"] = pid, not procs.port_open(port)

        def undo() -> None:
            r = self.c.runner.run(sdiag_argv(), check=False, timeout=20)
            ev["dbd_queue_before_return"] = dbd_queue(r.stdout) if r.returncode == 0 else None
            self.c.start_slurmdbd(timeout=60)
            ev["pid_after"] = self._pid("slurmdbd")
            ev["on_clock"] = self._on_clock(ev["pid_after"])

        return undo

    def _slurmd_kill(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        name = f"slurmd {f.node}"
        pid = self._signal(name, signal.SIGKILL)
        ev["pid_before"], ev["gone"] = pid, self._gone(pid)

        def undo() -> None:
            ev["node_state_while_down"] = self._node_state(f.node)
            self.c.start_slurmd(f.node)
            ev["pid_after"] = self._new_pid(name, pid)
            ev["on_clock"] = self._on_clock(ev["pid_after"])

            def back() -> bool:
                s = self._node_state(f.node)
                return bool(s) and not s.endswith("*") and not s.startswith(("down", "drain", "fail"))

            ev["node_back"] = procs.wait_until(back, 60, 0.5)
            ev["node_state_after"] = self._node_state(f.node)

        return undo

    def _state_readonly(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        folder = self.c.state
        below = mounts(folder)  # state-full's tmpfs may lie beneath the bind
        read_only(folder)
        ev["folder"] = str(folder)
        ev["write_error"] = write_error(folder)

        def undo() -> None:
            ev["snapshot_age_s"] = self._snapshot_age_trace_s()
            since = time.time()
            writable(folder)
            ev["write_error_after"] = write_error(folder)
            ev["still_mounted"] = mounts(folder) > below
            ev["heartbeat_back_real_s"] = self._heartbeat_back(since)

        return undo

    def _state_full(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        folder = self.c.state
        kind = fs_type(folder)
        if kind != "tmpfs":  # never fill a real disk
            raise RuntimeFailure(f"state-full: {folder} is not a tmpfs of its own ({kind or 'no mount'}): "
                                 "SoakCluster(state_tmpfs_mb=...) mounts one")
        st = os.statvfs(folder)
        ev["folder"], ev["size_bytes"] = str(folder), st.f_blocks * st.f_frsize
        try:
            ev["filled_bytes"] = fill(folder)
            ev["free_bytes"] = free_bytes(folder)
            ev["write_error"] = write_error(folder)
        except BaseException:
            (folder / FILLER).unlink(missing_ok=True)  # no undo is registered for a fault that never began
            raise
        stop = threading.Event()
        topped = [0]
        written: set[float] = set()  # the snapshot's mtimes seen while full, after the first

        def mtime() -> float | None:
            try:
                return self.snapshot.stat().st_mtime
            except OSError:
                return None

        first = mtime()

        def keep() -> None:
            # slurmctld frees pages as it purges ended jobs' scripts: the filler takes them
            # back within 20 ms, before the daemon's next snapshot (once a real second) fits.
            while not stop.wait(0.02):
                with contextlib.suppress(OSError):
                    if free_bytes(folder) > 0:
                        topped[0] += fill(folder)
                m = mtime()
                if m is not None and m != first:
                    written.add(m)

        keeper = threading.Thread(target=keep, name="state-full-keeper", daemon=True)
        keeper.start()

        def undo() -> None:
            stop.set()
            keeper.join(timeout=10)
            with contextlib.suppress(OSError):
                topped[0] += fill(folder)
            ev["topped_up_bytes"] = topped[0]
            ev["snapshot_writes_while_full"] = len(written)
            ev["write_error_at_end"] = write_error(folder)
            ev["snapshot_age_s"] = self._snapshot_age_trace_s()
            since = time.time()
            (folder / FILLER).unlink(missing_ok=True)
            ev["filler_removed"] = not (folder / FILLER).exists()
            ev["write_error_after"] = write_error(folder)
            ev["free_bytes_after"] = free_bytes(folder)
            ev["heartbeat_back_real_s"] = self._heartbeat_back(since)

        return undo

    def _clock_skew(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        name = f"slurmd {f.node}"
        d = self.c.daemon(name)
        pid = self.c.pid(d)
        if d is None or not pid:
            raise RuntimeFailure(f"{name} is not running")
        faketime = self.c.runner.extra_env.get("FAKETIME", "")
        env = {"FAKETIME": skewed_faketime(faketime, f.skew_s)}
        before = self._node(f.node).get("SlurmdStartTime", "")
        procs.stop(pid, d.expect)
        now = self.clock.now()
        self.c.start_slurmd(f.node, env=env)
        started = self._slurmd_started(f.node, before)
        ev["faketime"] = env["FAKETIME"]
        ev["pid_before"], ev["pid_skewed"] = pid, self._pid(name)
        ev["skewed_env"] = self._on_clock(ev["pid_skewed"], env["FAKETIME"])
        # The node's clock at its slurmd's start, less the cluster's just before it: the skew
        # (plus the start's own latency, a few trace seconds).
        ev["node_clock_offset_s"] = None if started is None else round(started - now, 1)

        def undo() -> None:
            skewed = self._pid(name)
            if skewed:
                procs.stop(skewed, d.expect)
            again = self._node(f.node).get("SlurmdStartTime", "")
            now2 = self.clock.now()
            self.c.start_slurmd(f.node)
            started2 = self._slurmd_started(f.node, again)
            ev["node_clock_offset_after_s"] = None if started2 is None else round(started2 - now2, 1)
            ev["pid_after"] = self._pid(name)
            ev["on_clock"] = self._on_clock(ev["pid_after"])

        return undo

    def _agent_fail(self, f: Fault, ev: dict[str, Any]) -> Undo | None:
        """The switch on, a probe job on a node whose devices are free now (the schedule's
        node where it has two free, else another device node that has: a probe waiting
        behind a busy node's jobs proves nothing and used to hold the schedule). Nothing
        here waits for the probe: a watcher thread catches its Prolog's error and what the
        Prolog left changed, and the undo reads what the watcher saw."""
        node, devs = self._probe_node(f.node, ev)
        folder = self.c.dev / node
        switch = folder / FAIL_SWITCH
        fd = os.open(switch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as out:
            out.write("the soak's agent-fail: a policy write fails after a job's first device\n")
        ev["switch"] = str(switch)
        gres = f"{devs[0]['kind']}:2"  # two: the second is where it fails; few, so it starts soon
        log = self.c.agent_dir / "agent.log"
        try:
            jid = self._probe(node, gres, max(120, int(0.8 * f.for_s)))
        except RuntimeFailure:
            switch.unlink(missing_ok=True)  # no undo is registered for a fault that never began
            raise
        ev["probe"] = jid
        failed = re.compile(rf"ERROR prolog job {jid} on {re.escape(node)} failed: .*")
        # The watcher gives up at the fault's end (real seconds), when the undo needs its answer.
        budget = max(5.0, self.clock.real(self.t0 + f.until_s) - time.time() - 2.0)

        def watch() -> None:
            line = self._agent_line(log, failed, timeout=budget)
            ev["agent_error"] = line[-200:] if line else None
            # What the Prolog left changed while the probe runs: the job's first device only.
            ev["changed_midway"] = sum(1 for d in self._fake(node) if _non_default(d)) if line else 0

        watcher = threading.Thread(target=watch, name="agent-fail-watch", daemon=True)
        watcher.start()

        def undo() -> None:
            watcher.join(timeout=30)
            switch.unlink(missing_ok=True)
            ev["switch_removed"] = not switch.exists()
            ev["probe_state"] = self._ended_or_cancelled(jid)
            ev["left_after"] = devices_left(self.c, [node])["left"]  # other jobs' policies may stay
            # The agent works again: a second probe gets the whole policy, restored at its end,
            # on a node with free devices of the same kind now.
            again_node, _ = self._probe_node(node, {}, kind=devs[0]["kind"])
            again = self._probe(again_node, gres)
            ok = self._agent_line(log, re.compile(rf"prolog job {again} on {re.escape(again_node)}: "
                                                  r"policy \S+, (\d+) devices"), timeout=30)
            m = re.search(r"(\d+) devices", ok or "")
            ev["applied_after"] = int(m.group(1)) if m else 0
            ev["probe_after"], ev["probe_after_node"] = again, again_node
            ev["probe_after_state"] = self._ended_or_cancelled(again)
            ev["left_after"] += devices_left(self.c, sorted({node, again_node}))["left"]

        return undo

    def _probe_node(self, preferred: str, ev: dict[str, Any], kind: str | None = None
                    ) -> tuple[str, list[dict[str, Any]]]:
        """A node with two or more fake devices (of `kind`) and two of them free now: the
        preferred one if it qualifies, else the one with the most free (ties by name), else
        the preferred one (its probe waits: `probe_waits` says so). Its fake devices too."""
        r = self.c.runner.run(sinfo_capacity_argv(), check=False, timeout=20)
        free = free_devices(r.stdout) if r.returncode == 0 else {}
        candidates: list[tuple[int, str, list[dict[str, Any]]]] = []
        for folder in sorted(self.c.dev.iterdir()) if self.c.dev.is_dir() else []:
            devs = [d for d in self._fake(folder.name) if kind is None or d.get("kind") == kind]
            if len(devs) >= 2:
                n_free = free.get(folder.name, {}).get(str(devs[0].get("kind")), 0)
                candidates.append((n_free, folder.name, devs))
        if not candidates:
            raise RuntimeFailure("agent-fail: no node has two fake devices")
        mine = [c for c in candidates if c[1] == preferred]
        ready = [c for c in candidates if c[0] >= 2]
        pick = (mine if mine and mine[0][0] >= 2 else
                sorted(ready, key=lambda c: (-c[0], c[1]))[:1] or mine or candidates[:1])[0]
        ev["node"], ev["free_devices"] = pick[1], pick[0]
        if pick[1] != preferred:
            ev["scheduled_node"] = preferred
        ev["probe_waits"] = pick[0] < 2
        return pick[1], pick[2]

    def _fake(self, node: str) -> list[dict[str, Any]]:
        try:
            data: Any = json.loads((self.c.dev / node / "fake-devices.json").read_text())
        except (OSError, ValueError):
            return []
        return list(data.get("devices", [])) if isinstance(data, dict) else []

    def _probe(self, node: str, gres: str, sleep_s: int = 120) -> str:
        """A job asking `gres` on `node` with `--energy=efficiency` (in the node's partition),
        `sleep_s` trace seconds long: its id. Root's, outside the trace."""
        part = self._node(node).get("Partitions", "").split(",")[0]
        argv = sbatch_wrap_argv(
            ["-J", "soak-agent-probe", "-w", *node_names([node]), f"--gres={gres}",
             # The limit outlasts the sleep (trace minutes): a probe ends COMPLETED, not TIMEOUT.
             "--energy=efficiency", "-n", "1", "-t", str(int(sleep_s) // 60 + 10), "-o", "/dev/null",
             *(["-p", part] if part else [])],
            f"sleep {int(sleep_s)}")
        r = self.c.runner.run(argv, check=False, timeout=60)
        jid = r.stdout.strip().split(";")[0]
        if r.returncode != 0 or not jid.isdigit():
            raise RuntimeFailure(f"agent-fail: the probe job was refused: {r.stderr.strip()[-300:]}")
        return jid

    def _agent_line(self, log: Path, pattern: re.Pattern[str], timeout: float = 90.0) -> str | None:
        """The agent log's first line matching `pattern`, waited for (real seconds)."""
        got: list[str] = []

        def seen() -> bool:
            try:
                text = log.read_text(errors="replace")
            except OSError:
                return False
            m = pattern.search(text)
            if m:
                got.append(m.group(0))
            return m is not None

        procs.wait_until(seen, timeout, 0.3)
        return got[0] if got else None

    def _ended_or_cancelled(self, jid: str) -> str:
        """A probe's final state; one still pending (no devices came free) is cancelled and
        says so, rather than hold the fault schedule while it waits."""
        r = self.c.runner.run(squeue_state_argv(jid), check=False, timeout=20)
        if r.returncode == 0 and r.stdout.strip() == "PENDING":
            self.c.runner.run(cancel_argv([jid]), check=False, timeout=20)
            return "PENDING (cancelled: never started)"
        return self._ended(jid)

    def _ended(self, jid: str, timeout: float = 90.0) -> str:
        """The job's final state once slurmctld shows one, or accounting once slurmctld has
        forgotten the job (MinJobAge passes in a few real seconds at x50); waited for, real s."""
        state: list[str] = [""]

        def final() -> bool:
            r = self.c.runner.run(show_job_argv(jid), check=False, timeout=20)
            state[0] = parse_kv_record(r.stdout).get("JobState", "") if r.returncode == 0 else ""
            if r.returncode != 0:
                r = self.c.runner.run(sacct_state_argv(jid), check=False, timeout=20)
                state[0] = r.stdout.split()[0] if r.returncode == 0 and r.stdout.split() else ""
            return state[0] in ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL")

        procs.wait_until(final, timeout, 0.5)
        return state[0]


class SoakCluster(DevReplayCluster):
    """The dev cluster as replay's cluster, with a soak's injector: `down` first stops the
    injector and undoes a fault in progress (a stopped daemon continued, a mount taken away),
    then stops the cluster. `hooks`: the node agent's Prolog/Epilog kept; `boot_site`: the
    site booted instead of the replay's (the same with a probe node: the soak's `soak_site`).
    `state_tmpfs_mb`: StateSaveLocation on a tmpfs of that many MiB of its own (state-full
    fills it), mounted before slurmctld first starts; `down` unmounts it once every daemon has
    stopped, its contents copied to the folder beneath first."""

    def __init__(self, workdir: Path, timeout: float = 180.0, watch: Path | None = None,
                 hooks: bool = False, boot_site: Site | None = None, state_tmpfs_mb: int = 0) -> None:
        super().__init__(workdir, timeout, hooks=hooks)
        self.boot_site = boot_site
        self.state_tmpfs_mb = state_tmpfs_mb
        self.state_tmpfs = False  # ours is mounted
        self.injector: Injector | None = None
        self.monitoring: Monitoring | None = None
        self.watch = watch  # a site file: `up` starts the exporters and Prometheus (`monitor`)
        self.monitor_problem: str | None = None

    def up(self, site: Site, *, speed: float, bridge: bool, model: Path | None,
           margin_rounds: float | None = None) -> float:
        """The cluster, then (with `watch`) the monitoring, before the replay's clock map and
        its t0 are taken: the soak sets `monitoring.t0` once it knows it."""
        boot = super().up(self.boot_site or site, speed=speed, bridge=bridge, model=model,
                          margin_rounds=margin_rounds)
        if self.watch is not None:
            t = time.monotonic()
            try:
                self.monitor(self.watch, calibrate(self.runner, speed), 0.0)
            except RuntimeFailure as e:  # no alerts to check: the soak fails, the replay goes on
                self.monitor_problem = str(e)
            boot += time.monotonic() - t
        return boot

    def monitor(self, site_path: Path, clock: ClockMap, t0: float) -> Monitoring:
        """The exporters and a Prometheus with the shipped rules (`Monitoring`); `down` stops them."""
        self.monitoring = Monitoring(self.cluster, site_path, clock, t0)
        self.monitoring.start()
        return self.monitoring

    def inject(self, faults: list[Fault], clock: ClockMap, t0: float, margin_s: float,
               say: Say | None = None) -> Injector:
        self.injector = Injector(self.cluster, faults, clock, t0, margin_s, say)
        self.injector.start()
        return self.injector

    def _fresh(self) -> None:
        """As a replay's arm starts: a previous run's mounts on this workdir's state folder
        taken away before the folder goes, then (with `state_tmpfs_mb`) the new tmpfs."""
        state = self.cluster.state
        if (self.workdir / MARK).exists() and mounted(state):
            self.cluster.down(log=lambda *_: None)
            self._unmount_state(0)
        super()._fresh()
        if self.state_tmpfs_mb:
            tmpfs_on(self.cluster.state, self.state_tmpfs_mb)
            self.state_tmpfs = True

    def _unmount_state(self, keep: int) -> None:
        """Every mount on the state folder above the lowest `keep` (a read-only bind above our
        tmpfs); the tmpfs itself (keep 0) with its contents kept beneath."""
        state = self.cluster.state
        for _ in range(8):
            n = mounts(state)
            if n <= keep:
                return
            if n == 1 and self.state_tmpfs and fs_type(state) == "tmpfs":
                tmpfs_off(state)
                self.state_tmpfs = False
            else:
                writable(state)

    def down(self) -> None:
        if self.injector is not None:
            self.injector.abort()
        if self.monitoring is not None:
            self.monitoring.stop()
        # Never leave a read-only bind behind (above our tmpfs, which the daemons still use).
        with contextlib.suppress(RuntimeFailure):
            self._unmount_state(1 if self.state_tmpfs else 0)
        for switch in self.cluster.dev.glob(f"*/{FAIL_SWITCH}"):  # nor a failing device
            switch.unlink(missing_ok=True)
        try:
            super().down()
        finally:
            if self.state_tmpfs:  # nor our tmpfs, once every daemon has stopped
                with contextlib.suppress(RuntimeFailure, OSError):
                    self._unmount_state(0)


def bridge_margin_s(speed: float) -> float:
    """The margin a replay's bridge daemon runs with (`Cluster.up`: three rounds, 120 s at
    least), in trace seconds.

    >>> bridge_margin_s(50), bridge_margin_s(20)
    (150.0, 120.0)
    """
    return daemon_margin(bridge_every(ClockSpec(speed)))[0]


# ---- devices left with a job's policy --------------------------------------------------------
def _non_default(d: dict[str, Any]) -> bool:
    return (float(d.get("limit_w", 0)) != float(d.get("default_w", 0))
            or d.get("clock_level", "default") != "default" or d.get("npu_mode", "normal") != "normal")


def free_devices(text: str) -> dict[str, dict[str, int]]:
    """{node: {GRES name: devices free}} from `sinfo_capacity_argv()` output.

    >>> free_devices("a1|mixed|gpu:a100:4(S:0)|gpu:a100:1(IDX:2)|x|\\n"
    ...              "a2|drained|gpu:a100:4|gpu:a100:0(IDX:N/A)|x|\\n")
    {'a1': {'gpu': 3}, 'a2': {'gpu': 0}}
    """
    out: dict[str, dict[str, int]] = {}
    for node, _, name_type, free in gres_free(text):
        mine = out.setdefault(node, {})
        name = name_type.split(":", 1)[0]
        mine[name] = mine.get(name, 0) + free
    return out


def devices_left(c: Cluster, nodes: list[str] | None = None, settle_s: float = 2.0) -> dict[str, Any]:
    """Every node's fake devices (energy/fake.py) whose power/clock state is not the default
    while no job holds them (the node agent applies a job's policy at its prolog and restores
    it at its epilog): `left` must be 0. Held: what `scontrol show job -d` says each job on the
    node that is configuring (its prolog running), running, suspended or completing holds; a
    job whose record cannot be read holds every device of its node (nothing is counted against
    it). A device counts as left only when a second reading `settle_s` later finds it left
    again: the device files and the queue are read one after the other, and a prolog or an
    epilog can land between them. `nodes`: those only (default: every node)."""
    first = _left_once(c, nodes)
    out: dict[str, Any] = {"devices": first[0], "non_default": first[1], "left": 0, "examples": []}
    if not first[2]:
        return out
    time.sleep(settle_s)
    again = _left_once(c, sorted({node for node, _ in first[2]}))[2]
    for key, d in first[2].items():
        if key in again:
            out["left"] += 1
            if len(out["examples"]) < 10:
                out["examples"].append(d)
    return out


def _left_once(c: Cluster, nodes: list[str] | None) -> tuple[int, int, dict[tuple[str, str], dict[str, Any]]]:
    """(devices, devices not at their default, {(node, kind:index): the device} of those left)."""
    devices = non_default = 0
    left: dict[tuple[str, str], dict[str, Any]] = {}
    for node in c.info().get("nodes", []) if nodes is None else nodes:
        path = c.dev / node / "fake-devices.json"
        try:
            devs = json.loads(path.read_text())["devices"]
        except (OSError, ValueError, KeyError):
            continue
        devices += len(devs)
        changed = [d for d in devs if _non_default(d)]
        non_default += len(changed)
        if not changed:
            continue
        held: set[tuple[str, int]] = set()
        everything = False
        # %A: the plain id (an array task's or a het component's own), which scontrol takes.
        r = c.runner.run(node_jobs_argv(node), check=False, timeout=20)
        if r.returncode != 0:
            everything = True
        for jid in r.stdout.split() if r.returncode == 0 else []:
            try:
                got: dict[str, list[int]] | None = parse_job_devices(
                    show_one_job(lambda argv: c.runner.out(argv, timeout=20), jid, detail=True), node)
            except RuntimeFailure:
                got = None
            if got is None:
                everything = True
                break
            held |= {(kind, i) for kind, idx in got.items() for i in idx}
        if everything:
            continue
        for d in changed:
            if (str(d.get("kind")), int(d["index"])) not in held:
                left[(node, f"{d.get('kind')}:{d['index']}")] = {
                    "node": node, "kind": d.get("kind"), "index": d["index"], "limit_w": d.get("limit_w"),
                    "default_w": d.get("default_w"), "clock_level": d.get("clock_level")}
    return devices, non_default, left


_PROLOG_DONE = re.compile(r" INFO prolog job (\d+) on (\S+): policy (\S+), (\d+) devices")
_PROLOG_FAILED = re.compile(r" ERROR prolog job (\d+) on (\S+) failed: ")


def agent_figures(log_text: str) -> dict[str, int]:
    """From the node agent's log: Prologs that applied a policy, the devices they applied it
    to, and Prologs that failed (ERROR).

    >>> agent_figures("2026-12-06 15:00:00,1 INFO prolog job 7 on n1: policy efficiency, 2 devices, 3 ms\\n"
    ...               "2026-12-06 15:00:01,1 INFO prolog job 8 on n1: policy None, 0 devices, 2 ms\\n"
    ...               "2026-12-06 15:00:02,1 ERROR prolog job 9 on n1 failed: [Errno 5] fake\\n")
    {'prologs_with_policy': 1, 'devices_with_policy': 2, 'prologs_failed': 1}
    """
    done = [m for m in _PROLOG_DONE.finditer(log_text) if m.group(3) != "None"]
    return {"prologs_with_policy": len(done), "devices_with_policy": sum(int(m.group(4)) for m in done),
            "prologs_failed": len(_PROLOG_FAILED.findall(log_text))}


# The power programs' lines (power/program.py): "suspend NODE: powered down", "resume NODE:
# powered up" or "...: restarted (its suspend had been refused)", "...: refused: WHY",
# "...: failed: WHY", and ResumeFailProgram's "resume NODE: did not register ...".
_POWER_LINE = re.compile(r"\] (suspend|resume) (\S+): (powered down|powered up|restarted|refused|failed|"
                         r"did not register)")


def power_figures(log_text: str) -> dict[str, Any]:
    """From hetero-power.log (Slurm's log folder): the nodes powered down and up (a restart of
    a node whose suspend was refused counts as up), the suspends refused by the safety rules,
    the power actions that failed, the resumes that never registered, and which nodes slept.

    >>> power_figures("2026-12-06T15:00:00 [7] suspend sp2-04: powered down\\n"
    ...               "2026-12-06T15:00:09 [8] resume sp2-04: powered up\\n"
    ...               "2026-12-06T15:01:00 [9] suspend sp2-03: refused: it holds a job\\n"
    ...               "2026-12-06T15:02:00 [9] resume sp2-03: restarted (its suspend had been refused)\\n"
    ...               "2026-12-06T15:03:00 [9] resume sp2-02: did not register within resume_timeout\\n")
    {'down': 1, 'up': 2, 'refused': 1, 'failed': 0, 'resume_failed': 1, 'nodes_down': ['sp2-04']}
    """
    out: dict[str, Any] = {"down": 0, "up": 0, "refused": 0, "failed": 0, "resume_failed": 0}
    slept: set[str] = set()
    key = {"powered down": "down", "powered up": "up", "restarted": "up", "refused": "refused",
           "failed": "failed", "did not register": "resume_failed"}
    for m in _POWER_LINE.finditer(log_text):
        out[key[m.group(3)]] += 1
        if m.group(3) == "powered down":
            slept.add(m.group(2))
    out["nodes_down"] = sorted(slept)
    return out


# ---- exporters and Prometheus -----------------------------------------------------------------
CLOCK_ENV = ("LD_PRELOAD", "FAKETIME", "FAKETIME_SHARED", "FAKETIME_DONT_RESET")


def soak_settings(speed: float, node_targets: list[str], cluster_targets: list[str],
                  stale_s: int) -> PrometheusSettings:
    """The shipped rules for a cluster on a replay clock. What they compare, and in whose clock:
    the exporters run on the cluster's clock, so every value they publish (ages, timestamps) is
    in faked (trace) seconds, while Prometheus runs on real time (Go reads the clock without
    libc: libfaketime cannot move it). So limits on published values stay in trace seconds
    (the snapshot's staleness limit is the cluster's own, `stale_s`: the bridge writes once a
    real second, `speed` trace seconds, on a replay clock), while Prometheus's own durations
    (`for:`, range windows, scrape and rule intervals) are real seconds: trace ÷ speed, one
    second at least. `time()` is rewritten into the cluster's clock (`rules_on_clock`).

    >>> s = soak_settings(50, ["127.0.0.1:1"], ["127.0.0.1:2"], 250)
    >>> s.alert_for_s, s.heartbeat_lost_s, s.snapshot_stale_s, s.cluster_every_s, s.wait_window_s
    (1, 250, 250, 60, 72)
    """
    def real(trace_s: float) -> int:
        return max(1, round(trace_s / speed))

    return PrometheusSettings(
        node_targets=node_targets, cluster_targets=cluster_targets, node_scrape_s=1, cluster_scrape_s=1,
        cluster_every_s=60, fast_rules_s=1, slow_rules_s=2, alert_for_s=real(60), heartbeat_lost_s=stale_s,
        # agent errors: 5 trace minutes (not 10), so the alert of agent-fail clears before the
        # next fault may begin (300 trace s after its end, the short soak's gap).
        snapshot_stale_s=stale_s, stuck_for_s=real(900), agent_errors_window_s=real(300),
        starving_for_s=real(600), wait_window_s=real(3600), wait_for_s=real(900), fragmented_for_s=real(1800))


def rules_on_clock(rules: str, clock: ClockMap) -> str:
    """The rules with Prometheus's `time()` (real) replaced by the cluster's faked clock at the
    same instant, so `time() - <a timestamp an exporter published>` compares one clock.

    >>> rules_on_clock("expr: time() - x > 30", ClockMap(100.0, 5000.0, 50.0))
    'expr: (time() * 50 + (0.000)) - x > 30'
    """
    offset = clock.faked0 - clock.real0 * clock.speed
    return rules.replace("time()", f"(time() * {clock.speed:g} + ({offset:.3f}))")


class Monitoring:
    """The cluster's exporters on its clock and a Prometheus on real time with the shipped
    rules (`soak_settings`, `rules_on_clock`), for a soak: `start`, then `collect` (the alerts
    that fired and the exporters' scrape gaps, in trace seconds), then `stop`."""

    def __init__(self, cluster: Cluster, site_path: Path, clock: ClockMap, t0: float) -> None:
        self.c, self.clock, self.t0 = cluster, clock, t0
        self.site_path = site_path
        self.folder = cluster.workdir / "soak-monitor"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.started_real = 0.0
        self.settings: PrometheusSettings | None = None

    def trace(self, real: float) -> float:
        return self.clock.faked(real) - self.t0

    def start(self) -> None:
        from slurm_hetero.site import load_site

        if shutil.which("prometheus") is None:
            raise RuntimeFailure("prometheus is not installed (apt-get install prometheus)")
        speed = self.clock.speed
        stale = int(self.c.profile(self.c.info()).snapshot_stale_s)
        # A node exporter reads (and keeps its counters in) the node agent's folder of its node,
        # which the agent makes at its first prolog (none runs on a replay clock without hooks).
        for node in self.c.info().get("nodes", []):
            (self.c.agent_dir / node).mkdir(mode=0o755, parents=True, exist_ok=True)
        # The exporters' seconds are the clock's: a device sample once a real second, the
        # cluster's round once a trace minute, free devices once a round (not 10 trace s).
        ports = self.c.start_exporters(load_site(self.site_path), every=min(60.0, speed),
                                       tier_s=min(600.0, 10 * speed), cluster_every=60.0, sacct_every=0,
                                       fast_every=0)
        nodes = [n for n in ports if n != "cluster"]
        self.settings = soak_settings(speed, [f"127.0.0.1:{ports[n]}" for n in nodes],
                                      [f"127.0.0.1:{ports['cluster']}"], stale)
        files = render_prometheus(self.settings)
        files[RULES] = rules_on_clock(files[RULES], self.clock)
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (self.folder / name).write_text(text)
        (self.port,) = procs.free_ports(1)
        env = {k: v for k, v in os.environ.items() if k not in CLOCK_ENV}
        with open(self.folder / "prometheus.log", "ab") as log:
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={self.folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.folder / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=1d"],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.started_real = time.time()
        if not procs.wait_until(lambda: self._ready(), 60, 0.5):
            raise RuntimeFailure("prometheus did not answer in 60 s:\n"
                                 + (self.folder / "prometheus.log").read_text()[-2000:])

    def _ready(self) -> bool:
        try:
            return len(self.query('up{job=~"hetero-.*"} == 1')) == len(self._targets())
        except (OSError, ValueError, RuntimeFailure):
            return False

    def _targets(self) -> list[str]:
        s = self.settings
        return [] if s is None else [*s.node_targets, *s.cluster_targets]

    def get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=20) as r:
            doc = json.loads(r.read())
        if doc.get("status") != "success":
            raise RuntimeFailure(f"prometheus {path}: {doc}")
        return doc["data"]

    def query(self, q: str) -> list[dict[str, Any]]:
        res: list[dict[str, Any]] = self.get("/api/v1/query", query=q)["result"]
        return res

    def firing(self) -> set[str]:
        return {r["metric"].get("alertname", "") for r in self.query('ALERTS{alertstate="firing"}')}

    def collect(self, settle: set[str] | None = None, settle_s: float = 30.0) -> dict[str, Any]:
        """The alerts that fired and the scrape gaps since `start`, in trace seconds. First, for
        up to `settle_s` real seconds, until none of `settle` fires (the last fault's alert has
        time to clear)."""
        if settle:
            procs.wait_until(lambda: not (self.firing() & settle), settle_s, 1.0)
        end = time.time()
        step = max(1.0, math.ceil((end - self.started_real) / 10000))
        rng = {"start": f"{self.started_real:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        alerts = self.get("/api/v1/query_range", query='ALERTS{alertstate="firing"}', **rng)["result"]
        up = self.get("/api/v1/query_range", query='up{job=~"hetero-.*"}', **rng)["result"]
        spans = alert_spans(alerts, step, end, self.trace)
        return {"prometheus_from_s": round(self.trace(self.started_real), 1),
                "prometheus_to_s": round(self.trace(end), 1),
                "step_real_s": step, "targets": len(self._targets()),
                "settings": {k: v for k, v in dataclasses.asdict(self.settings).items() if k.endswith("_s")}
                if self.settings else {},
                "alerts": [s.to_json() for s in spans], "scrape_gaps": scrape_gaps(up, step, end, self.trace)}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
