"""How far an accelerated replay is from the same replay at real speed, and whether two
arms differ by more than that.

`--check-fidelity` replays one short window at x1 and at the chosen speed (same arm,
same cluster definition). Per job, matched by trace id:
- start error = its wait at xK minus its wait at x1 (trace seconds);
- runtime error = (end - start) - its expected runtime, in each run;
and for the window as a whole, the AVEbsld at xK against x1.

Arms are comparable only when their difference exceeds that error: the AVEbsld ratio is
refused when |bsld_b - bsld_a| / bsld_a is within the relative AVEbsld error, and the
wait difference when |mean wait_b - mean wait_a| is within the p90 start error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurm_hetero.replay.metrics import ALL, Outcome, PoolFigures, distribution, runtime_errors


def runtime_bound_s(speed: float) -> float:
    """The runtime error (|end - start - runtime|, trace s) a replay at `speed` stays within:
    about 0.3 real s of fixed cost per job (launch, end, accounting), times K, doubled for
    a loaded machine, plus Slurm's 1 s time resolution and 1 s of slack (measured 1-2 s
    at x1, 3-7 s at x20, 10-23 s at x50; SLURM-FACTS, "Accelerated clock").

    >>> runtime_bound_s(1), runtime_bound_s(20)
    (2.6, 14.0)
    """
    return 2.0 + 0.6 * speed


@dataclass(frozen=True)
class Fidelity:
    speed: float
    jobs: int  # matched jobs
    start_error: dict[str, float | int | None]
    runtime_error_x1: dict[str, float | int | None]
    runtime_error_xk: dict[str, float | int | None]
    bsld_x1: float | None
    bsld_xk: float | None

    @property
    def bsld_rel_error(self) -> float | None:
        if not self.bsld_x1 or self.bsld_xk is None:
            return None
        return abs(self.bsld_xk - self.bsld_x1) / self.bsld_x1

    @property
    def wait_error_s(self) -> float | None:
        v = self.start_error.get("p90_abs")
        return None if v is None else float(v)

    def to_json(self) -> dict[str, Any]:
        return {"speed": self.speed, "jobs": self.jobs, "start_error": self.start_error,
                "runtime_error_x1": self.runtime_error_x1, "runtime_error_xk": self.runtime_error_xk,
                "bsld_x1": self.bsld_x1, "bsld_xk": self.bsld_xk,
                "bsld_rel_error": self.bsld_rel_error, "wait_error_s": self.wait_error_s}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Fidelity:
        return cls(float(d["speed"]), int(d["jobs"]), dict(d["start_error"]), dict(d["runtime_error_x1"]),
                   dict(d["runtime_error_xk"]), d.get("bsld_x1"), d.get("bsld_xk"))


def start_errors(x1: list[Outcome], xk: list[Outcome]) -> list[float]:
    """Per job started in both runs: wait at xK minus wait at x1.

    >>> a = Outcome("1", "1", True, 0.0, 0.0, 10.0, 20.0, "COMPLETED", 10, 10, 60, 1, 0, "p")
    >>> b = Outcome("1", "5", True, 100.0, 100.0, 113.0, 123.0, "COMPLETED", 10, 10, 60, 1, 0, "p")
    >>> start_errors([a], [b])
    [3.0]
    """
    base = {o.trace_id: o for o in x1 if o.wait is not None}
    return [o.wait - base[o.trace_id].wait  # type: ignore[operator]
            for o in xk if o.wait is not None and o.trace_id in base]


def measure(x1: list[Outcome], xk: list[Outcome], figs_x1: dict[str, PoolFigures],
            figs_xk: dict[str, PoolFigures], speed: float) -> Fidelity:
    errs = start_errors(x1, xk)
    return Fidelity(speed=speed, jobs=len(errs), start_error=distribution(errs),
                    runtime_error_x1=distribution(runtime_errors(x1)),
                    runtime_error_xk=distribution(runtime_errors(xk)),
                    bsld_x1=figs_x1[ALL].ave_bsld if ALL in figs_x1 else None,
                    bsld_xk=figs_xk[ALL].ave_bsld if ALL in figs_xk else None)


@dataclass(frozen=True)
class Verdict:
    comparable: bool
    why: str


def compare(a: PoolFigures, b: PoolFigures, fid: Fidelity | None) -> Verdict:
    """May b's figures be set against a's? Only where they differ by more than the replay's
    own error at this speed.

    >>> fa = PoolFigures("all", ave_bsld=2.0, wait_mean=600.0)
    >>> fb = PoolFigures("all", ave_bsld=1.5, wait_mean=300.0)
    >>> f = Fidelity(20, 30, {"p90_abs": 40.0}, {}, {}, 2.0, 2.1)
    >>> close = PoolFigures("all", ave_bsld=2.05, wait_mean=590.0)
    >>> compare(fa, fb, f).comparable, compare(fa, close, f).why[:22]
    (True, 'AVEbsld differs by 2.5')
    """
    if a.ave_bsld is None or b.ave_bsld is None:
        return Verdict(False, "an arm has no AVEbsld (no measured job started)")
    if fid is None:
        return Verdict(True, "fidelity not checked (run with --check-fidelity): the difference may be "
                             "within the replay's own error")
    rel = abs(b.ave_bsld - a.ave_bsld) / a.ave_bsld
    bound = fid.bsld_rel_error
    if bound is not None and rel <= bound:
        return Verdict(False, f"AVEbsld differs by {100 * rel:.1f}%, within the replay's own error at "
                              f"x{fid.speed:g} ({100 * bound:.1f}% against x1)")
    if a.wait_mean is not None and b.wait_mean is not None and fid.wait_error_s is not None:
        dw = abs(b.wait_mean - a.wait_mean)
        if dw <= fid.wait_error_s:
            return Verdict(False, f"mean waits differ by {dw:.0f} s, within the replay's start-time "
                                  f"error at x{fid.speed:g} (p90 {fid.wait_error_s:.0f} s)")
    return Verdict(True, f"difference beyond the replay's error at x{fid.speed:g}")
