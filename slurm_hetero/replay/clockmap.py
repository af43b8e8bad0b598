"""The cluster's accelerated clock seen from here (this process runs on real time).

libfaketime's clock is linear: faked = faked0 + speed * (real - real0). One reading of the
cluster's clock (`date` run the way clients run, on the shared clock) bracketed by two
real readings fixes it; a second reading checks the speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.slurm.runner import Runner


@dataclass(frozen=True)
class ClockMap:
    real0: float
    faked0: float
    speed: float

    def faked(self, real: float) -> float:
        """
        >>> ClockMap(100.0, 5000.0, 20.0).faked(101.5)
        5030.0
        """
        return self.faked0 + (real - self.real0) * self.speed

    def real(self, faked: float) -> float:
        """
        >>> ClockMap(100.0, 5000.0, 20.0).real(5030.0)
        101.5
        """
        return self.real0 + (faked - self.faked0) / self.speed

    def now(self) -> float:
        return self.faked(time.time())


# A pause of the whole machine longer than this (s) is reported with the arm it hit.
PAUSE_S = 1.0


def wall_offset() -> float:
    """The wall clock less the monotonic one (s). It holds still, but for NTP's slewing
    (milliseconds), unless the machine itself was paused: a VM paused for a host snapshot
    resumes with its monotonic clock where it stopped and its wall clock stepped forward.
    The whole cluster froze with it, so nothing ran late in real time; but the faked clock
    follows the wall clock and jumps `speed` times the pause. Jobs running across it then ran
    that much longer in trace time, and waiting ones waited that much longer: seen here as
    +240..283 trace s at x20 (VM snapshots of ~14 s, `random: crng reseeded due to virtual
    machine fork` in dmesg at the same minutes)."""
    return time.time() - time.monotonic()


def pause_words(paused: float, speed: float) -> str:
    """What a pause of `paused` real s did to an arm replayed at `speed`, or "" (none).

    >>> pause_words(14.0, 20.0).split(": ")[1]
    'jobs then running or waiting gained ~280 trace s; rerun this window'
    >>> pause_words(0.4, 20.0)
    ''
    """
    if paused <= PAUSE_S:
        return ""
    return (f"this machine was paused {paused:.1f} s during the replay: jobs then running or waiting "
            f"gained ~{paused * speed:.0f} trace s; rerun this window")


def parse_date(text: str) -> float:
    """`date +%s.%N` output.

    >>> parse_date("1796111562.500000000\\n")
    1796111562.5
    """
    try:
        return float(text.strip())
    except ValueError as e:
        raise RuntimeFailure(f"cannot read the cluster's clock: date said {text.strip()[:60]!r}") from e


def reading(runner: Runner, clock: Callable[[], float] = time.time) -> tuple[float, float, float]:
    """(real before, faked, real after) of one reading."""
    before = clock()
    faked = parse_date(runner.out(["date", "+%s.%N"], timeout=10))
    return before, faked, clock()


def _quickest(runner: Runner) -> tuple[float, float, float]:
    """The reading of three that took the least real time: the faked time is pinned best."""
    return min((reading(runner) for _ in range(3)), key=lambda r: r[2] - r[0])


def calibrate(runner: Runner, speed: float, check_after: float = 2.0) -> ClockMap:
    """Map the runner's clock; fail when it does not run at `speed` (not on the shared clock).
    Both ends of the check are the quickest of three readings, `check_after` s apart: on a
    loaded machine one `date` can take a tenth of a second, which over the half second this
    waited before read x58 for x50 (eight replays booting at once)."""
    best = _quickest(runner)
    mid = (best[0] + best[2]) / 2
    clock = ClockMap(mid, best[1], speed)
    time.sleep(check_after)
    b2, f2, a2 = _quickest(runner)
    measured = (f2 - best[1]) / (((b2 + a2) / 2) - mid)
    if abs(measured - speed) > max(0.1 * speed, 0.5):
        raise RuntimeFailure(f"the cluster's clock runs x{measured:.2f}, not x{speed:g}: clients are "
                             "not on its shared clock (is libfaketime installed and the holder up?)")
    return clock
