"""The bridge daemon's pure parts: SiteFactor, limit extension, parsing scontrol -o."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from slurm_hetero.bridge import daemon
from slurm_hetero.bridge.daemon import ExtendPolicy, FactorPolicy, parse_jobs

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured"


def test_doctests() -> None:
    assert doctest.testmod(daemon).failed == 0


def test_site_factor_shorter_is_higher_and_capped() -> None:
    f = FactorPolicy()
    values = [f.site_factor(s, 0) for s in (30, 300, 3600, 86400, 7 * 86400, 30 * 86400)]
    assert values == sorted(values, reverse=True)
    assert values[0] <= f.cap and values[-1] == 0 and values[-2] == 0
    assert f.site_factor(5 * 60, 0) == round(10_000 * (1 - 1.791759469228055 / 9.218407870525316))


def test_aging_lifts_long_jobs_so_nothing_starves() -> None:
    f = FactorPolicy()
    assert f.site_factor(30 * 86400, 12 * 3600) == 5000  # half-way through age_full_s
    assert f.site_factor(30 * 86400, 2 * 86400) == f.cap  # waited long enough: the cap
    assert f.site_factor(60, 2 * 86400) == f.cap


@pytest.mark.parametrize(("limit", "elapsed", "user", "new"), [
    (10, 60, 60, None),        # 9 minutes left: nothing to do
    (10, 8 * 60 + 30, 60, 20),  # 90 s left < 120 s margin: doubled
    (40, 37 * 60, 60, 60),      # doubling would pass the user's limit: the user's limit
    (60, 59 * 60, 60, None),    # already at the user's limit: Slurm enforces it as usual
    (1, 10, 5, 5),              # the next step covers elapsed + 2 margins, capped by the user's
])
def test_extension_steps(limit: int, elapsed: float, user: int, new: int | None) -> None:
    assert ExtendPolicy().new_limit_min(limit, elapsed, user) == new


def test_parse_jobs_on_captured_output() -> None:
    rows = parse_jobs((CAPTURED / "scontrol-job-o-pending-22.05.txt").read_text(), now=0.0)
    assert [r.job_id for r in rows] == ["89", "88"]
    assert rows[0].limit_min == 5 and rows[1].limit_min == 60
    assert rows[0].decision["model"] == "gh200" and rows[1].decision == {}
    assert rows[0].state == "COMPLETED" and rows[1].state == "RUNNING"


class FlakyRunner:
    """slurmctld down for the first calls, then answering with no jobs (unit-test fake)."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls: list[list[str]] = []

    def out(self, argv: list[str], **_: object) -> str:
        from slurm_hetero.errors import RuntimeFailure

        self.calls.append(argv)
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeFailure(f"{argv[0]}: no answer in 20 s")
        return "No jobs in the system\n" if argv[:2] == ["scontrol", "show"] else ""

    def run(self, argv: list[str], **_: object) -> object:
        self.calls.append(argv)
        return None


def test_daemon_survives_an_unreachable_slurmctld(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import BridgeDaemon
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    logs: list[str] = []
    runner = FlakyRunner(failures=3)
    d = BridgeDaemon(site, runner, tmp_path / "snap.lua", every=0.0, log=logs.append)  # type: ignore[arg-type]
    d.run(rounds=3)
    assert logs[0].startswith("startup repair skipped: scontrol: no answer")
    assert sum(line.startswith("round skipped") for line in logs) == 2
    assert (tmp_path / "snap.lua").exists()  # the third round wrote the snapshot
    assert logs[-1] == "bridge daemon stopped"
