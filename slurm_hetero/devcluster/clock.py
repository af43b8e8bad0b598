"""An accelerated clock for the dev cluster (replay): libfaketime, one shared clock.

`faketime -m -f "+OFF xK" python -m slurm_hetero.devcluster.clock --out F --pidfile P`
starts the *clock holder*: a process that only keeps the clock alive. faketime gives it a
shared-memory clock (its name in `FAKETIME_SHARED`); the holder writes that name and the
preload settings to F and sleeps until SIGTERM. Every Slurm process of the cluster —
slurmdbd, slurmctld, each slurmd (and so every slurmstepd and job), the bridge daemon, the
client commands — is started with

    LD_PRELOAD=.../libfaketimeMT.so.1  FAKETIME="+OFF xK"  FAKETIME_SHARED=<the holder's>
    FAKETIME_DONT_RESET=1

and so reads the holder's clock: one clock, started once, running K times real speed
(checked: a process joining this way a second after the holder reads the same time as the
holder's own children). Without `FAKETIME_DONT_RESET` or without the shared name, each
process's clock would start at its own launch and they would drift apart by (K-1) s per
real second between launches. munged and MariaDB stay on real time (one munged signs and
checks every credential, so its TTL never trips; slurmdbd computes every time it stores).

When the holder stops, faketime removes the shared segment (a process joining then would
silently start a clock of its own): stop it last, and join only while it runs.

What cannot run on that clock is configured away by `accelerate_conf` (see there).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.fileio import write_atomic

HOLDER_MODULE = "slurm_hetero.devcluster.clock"
SHM_DIR = "/dev/shm"
# libfaketime's clock: a semaphore and a segment named by the creating process's pid.
SEGMENT = re.compile(r"^(?:sem\.faketime_sem|faketime_shm)_(\d+)$")
CLOCK_ENV = ("LD_PRELOAD", "FAKETIME", "FAKETIME_SHARED", "FAKETIME_DONT_RESET")
MAX_SPEED = 1000.0


def libfaketime() -> str:
    """The multi-threaded preload library of Debian's libfaketime package."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not found:
        raise RuntimeFailure("libfaketime is not installed (apt-get install faketime)")
    return found[0]


@dataclass(frozen=True)
class ClockSpec:
    """K times real speed, starting OFF seconds from the real time of the holder's start.
    `hooks`: keep the node agent's Prolog and Epilog in slurm.conf (`accelerate_conf`)."""

    speed: float
    offset_s: int = 0
    hooks: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "speed", float(self.speed))
        if not 1.0 <= self.speed <= MAX_SPEED:
            raise InputError(f"--speed {self.speed:g}: use a value from 1 to {MAX_SPEED:g}")

    @property
    def faketime(self) -> str:
        """The FAKETIME value.

        >>> ClockSpec(20).faketime, ClockSpec(2.5, -60).faketime
        ('+0 x20', '-60 x2.5')
        """
        return f"{self.offset_s:+d} x{self.speed:g}"

    def scaled(self, seconds: float) -> int:
        """A real-time duration in faked seconds (what a timeout must say to last as long).

        >>> ClockSpec(20).scaled(10)
        200
        """
        return round(seconds * self.speed)


def from_meta(c: Mapping[str, float] | None) -> ClockSpec | None:
    """The clock a cluster.json records (None: real time).

    >>> from_meta({"speed": 50, "offset_s": 0, "hooks": 1}), from_meta(None)
    (ClockSpec(speed=50.0, offset_s=0, hooks=True), None)
    """
    return ClockSpec(float(c["speed"]), int(c.get("offset_s", 0)), bool(c.get("hooks", 0))) if c else None


def to_meta(spec: ClockSpec) -> dict[str, float]:
    """What cluster.json records of a clock (`from_meta` reads it back)."""
    out: dict[str, float] = {"speed": spec.speed, "offset_s": spec.offset_s}
    if spec.hooks:
        out["hooks"] = 1.0
    return out


def holder_argv(spec: ClockSpec, out: str, pidfile: str, python: str = sys.executable) -> list[str]:
    return ["faketime", "-m", "-f", spec.faketime, python, "-m", HOLDER_MODULE,
            "--out", out, "--pidfile", pidfile]


def read_env(path: str) -> dict[str, str]:
    """The join settings a holder wrote (empty when there is none)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(v) for k, v in data.items() if k in CLOCK_ENV}


def join_env(holder_env: Mapping[str, str], library: str) -> dict[str, str]:
    """What a process needs to read the holder's clock.

    >>> join_env({"FAKETIME": "+0 x20", "FAKETIME_SHARED": "/s /m"}, "/lib/ft.so")
    {'LD_PRELOAD': '/lib/ft.so', 'FAKETIME': '+0 x20', 'FAKETIME_SHARED': '/s /m', 'FAKETIME_DONT_RESET': '1'}
    """
    if not holder_env.get("FAKETIME_SHARED") or not holder_env.get("FAKETIME"):
        raise RuntimeFailure("the clock holder wrote no FAKETIME_SHARED (is faketime's -m given?)")
    return {"LD_PRELOAD": library, "FAKETIME": holder_env["FAKETIME"],
            "FAKETIME_SHARED": holder_env["FAKETIME_SHARED"], "FAKETIME_DONT_RESET": "1"}


# ---- slurm.conf for an accelerated clock -----------------------------------------------
# Hooks slurmd runs with a clean environment (so at real speed) while its own timeouts on
# them run K times faster; and they do nothing a replayed `sleep` needs.
REMOVED_KEYS = ("Prolog", "Epilog", "PrologFlags", "HealthCheckProgram", "HealthCheckInterval",
                "HealthCheckNodeState", "TaskProlog")
# What a clock with `hooks` keeps: the node agent's Prolog/Epilog, so energy policies are
# applied and restored (the soak). Each runs at real speed, so a job's body starts about the
# Prolog's real time x K trace seconds after its allocation (PrologFlags=Alloc).
HOOK_KEYS = ("Prolog", "Epilog", "PrologFlags")
# Timeouts (faked seconds) scaled by K, so each lasts as long in real time as Slurm's
# default does at x1: Slurm's work (a message, a launch) takes real time.
SCALED_DEFAULTS = {"MessageTimeout": 10, "BatchStartTimeout": 10, "TCPTimeout": 2,
                   "SlurmdTimeout": 300, "SlurmctldTimeout": 120, "UnkillableStepTimeout": 60,
                   "JobAcctGatherFrequency": 30}
# Scaled only where set (unset: slurmd waits for the Prolog/Epilog indefinitely); a kept hook
# runs at real speed and must not be killed K times too early.
SCALED_IF_SET = ("PrologEpilogTimeout",)
_UINT16_MAX = 65533


def accelerate_conf(text: str, spec: ClockSpec) -> str:
    """slurm.conf for a cluster on `spec`'s clock: hooks removed (with `spec.hooks`, all
    but the Prolog and Epilog), timeouts scaled.

    >>> out = accelerate_conf("Prolog=/p\\nMessageTimeout=5\\nFoo=1\\n", ClockSpec(20))
    >>> [ln for ln in out.splitlines() if not ln.startswith("#")][:3]
    ['MessageTimeout=100', 'Foo=1', 'BatchStartTimeout=200']
    >>> conf = "Prolog=/p\\nPrologFlags=Alloc\\nTaskProlog=/t\\nPrologEpilogTimeout=30\\n"
    >>> out = accelerate_conf(conf, ClockSpec(20, hooks=True))
    >>> [ln for ln in out.splitlines() if not ln.startswith("#")][:3]
    ['Prolog=/p', 'PrologFlags=Alloc', 'PrologEpilogTimeout=600']
    """
    removed = tuple(k for k in REMOVED_KEYS if not (spec.hooks and k in HOOK_KEYS))
    kept: list[str] = []
    seen: dict[str, int] = {}
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip() if "=" in line and not line.lstrip().startswith("#") else ""
        if key in removed:
            continue
        if key in SCALED_DEFAULTS or (key in SCALED_IF_SET and spec.hooks):
            value = re.sub(r"\D.*", "", line.split("=", 1)[1].strip()) or str(SCALED_DEFAULTS.get(key, 0))
            seen[key] = int(value)
            line = f"{key}={min(spec.scaled(int(value)), _UINT16_MAX)}"
        kept.append(line)
    kept.append(f"# Replay clock ({spec.faketime}): {', '.join(removed)} removed (they "
                "would run at real speed under accelerated timeouts);")
    if spec.hooks:
        kept.append("# the node agent's Prolog/Epilog kept: each delays a job by its real time x "
                    f"{spec.speed:g} trace seconds;")
    kept.append("# these timeouts scaled so each lasts as long in real time as at x1:")
    for key, default in SCALED_DEFAULTS.items():
        if key not in seen:
            kept.append(f"{key}={min(spec.scaled(default), _UINT16_MAX)}")
    return "\n".join(kept) + "\n"


def remove_stale_segments(shm_dir: str = SHM_DIR) -> int:
    """Remove libfaketime clocks whose process is gone; how many files were removed.

    The faketime wrapper creates its pair with O_EXCL and exits at once when one with its
    pid is left over, and pairs are left over: libfaketime removes its own only on a clean
    exit, and every job process makes one (it cannot open the holder's root-only clock, so
    it starts a private one: durations still run at the cluster's speed) and is killed at
    its end. With a few hundred left, a new holder met its pid about once in fifty starts."""
    removed = 0
    try:
        names = os.listdir(shm_dir)
    except FileNotFoundError:
        return 0
    for name in names:
        m = SEGMENT.match(name)
        if m is None or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.unlink(os.path.join(shm_dir, name))
            removed += 1
    return removed


# ---- the holder -----------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {HOLDER_MODULE}",
                                description="Hold a faketime shared clock until SIGTERM.")
    p.add_argument("--out", required=True, help="Where to write the clock's join settings (JSON).")
    p.add_argument("--pidfile", required=True)
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    env = {k: os.environ[k] for k in CLOCK_ENV if k in os.environ}
    if "FAKETIME_SHARED" not in env:
        print("clock holder: FAKETIME_SHARED is not set: run me under `faketime -m`", file=sys.stderr)
        return 2
    # Block the stop signals first and wait for one with sigwait: no clock involved (a
    # sleep loop would wake K times as often as it says) and no race with the handler.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    write_atomic(a.pidfile, f"{os.getpid()}\n")  # first: joining checks the holder runs
    write_atomic(a.out, json.dumps(env) + "\n")
    try:
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    finally:
        for path in (a.pidfile, a.out):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
