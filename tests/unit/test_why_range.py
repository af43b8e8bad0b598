"""Our start estimate as a range: likely (the running jobs ending by their p90), earliest (at
their p50), latest (every job to its user's own limit). The case that made it: on a KTH-SP2
replay one 80-CPU job of p50 24 min ran 3.9 h, and every job behind it was told it would
start hours before it did (benchmarks/results/why-estimates-kth.json). Crafted inputs on the
KTH replay's site (4 nodes of 25 CPUs), with test_why_cpu's job builder."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from slurm_hetero.reports import why as W
from slurm_hetero.site import Site, load_site
from tests.unit.test_why_cpu import NOW, ROOT, cpu_job, inputs, pred

ALL = {"sp2-01": 20, "sp2-02": 20, "sp2-03": 20, "sp2-04": 20}


@pytest.fixture(scope="module")
def kth() -> Site:
    return load_site(ROOT / "tests" / "data" / "replay" / "kth-site.yaml")


def shortened(p50: int, p90: int, user_min: int) -> str:
    """The bridge's record of a job whose limit it shortened to its p90 (bridge.lua writes
    `shortened` and `user_limit_min` beside `pred`)."""
    return json.dumps({"hetero": 1, "pred": {"p50": p50, "p90": p90}, "shortened": True,
                       "user_limit_min": user_min}, separators=(",", ":"))


def running(jid: int, comment: str, start: float, limit_min: int, cpus: int = 80,
            on: dict[str, int] | None = None) -> dict[str, Any]:
    return cpu_job(jid, cpus=cpus, on=on or ALL, start=start, limit_min=limit_min, comment=comment)


def one(job: dict[str, Any]) -> W.QJob:
    return W.parse_queue(json.dumps({"jobs": [job]}))[0]


def test_end_by_each_scenario() -> None:
    j = one(running(10, shortened(1444, 11991, 240), NOW - 400, 200))
    assert W.own_limit_s(j) == 240 * 60  # the user's, not the shortened 200 minutes
    assert [W.end_by(j, NOW, s) for s in W.SCENARIOS] == [NOW - 400 + 1444, NOW - 400 + 11991,
                                                          NOW - 400 + 14400]
    assert W.expected_end(j, NOW) == NOW - 400 + 1444
    # Past its p50: earliest moves on to the p90; past the shortened limit (the daemon extends
    # it): the user's own, never "now".
    assert W.end_by(j, NOW + 2000, "earliest") == NOW - 400 + 11991
    assert W.end_by(j, NOW + 12500, "earliest") == W.end_by(j, NOW + 12500, "likely") == NOW - 400 + 14400
    assert W.end_by(j, NOW + 15000, "likely") == NOW + 15000  # past every end: ending now
    # A job the bridge did not shorten: its limit is its own; without a prediction every
    # scenario is its limit.
    plain = one(running(11, pred(600, 1200), NOW - 100, 60))
    assert W.own_limit_s(plain) == 3600.0
    assert [W.end_by(plain, NOW, s) for s in W.SCENARIOS] == [NOW + 500, NOW + 1100, NOW + 3500]
    bare = one(running(12, "", NOW - 100, 30))
    assert {W.end_by(bare, NOW, s) for s in W.SCENARIOS} == {NOW + 1700}
    # A `shortened` inside pred or a string count is no record of the bridge's.
    odd = one(running(13, json.dumps({"hetero": 1, "pred": {"p50": 60, "p90": 120, "shortened": True,
                                                             "user_limit_min": 240}}), NOW, 10))
    assert W.own_limit_s(odd) == 600.0


def test_jobs_ahead_run_their_p50_or_their_own_limit() -> None:
    ahead = one(cpu_job(20, state="PENDING", reason="Priority", limit_min=15, comment=shortened(120, 800, 60)))
    assert [W._duration(ahead, s) for s in W.SCENARIOS] == [120.0, 120.0, 3600.0]
    none = one(cpu_job(21, state="PENDING", reason="Priority", limit_min=15))
    assert [W._duration(none, s) for s in W.SCENARIOS] == [900.0, 900.0, 900.0]


def test_behind_one_long_job_the_range_spans_its_p50_to_its_own_limit(kth: Site) -> None:
    """The replay's case: an 80-CPU job 400 s into a p50 of 1,444 s, p90 11,991 s, its 240-minute
    limit shortened to 200; a 42-CPU job waits for it, a 41-CPU one behind that."""
    big = running(16, shortened(1444, 11991, 240), NOW - 400, 200)
    first = cpu_job(25, state="PENDING", reason="Resources", cpus=42, limit_min=15, priority=20000,
                    comment=shortened(123, 802, 15))
    mine = cpu_job(26, state="PENDING", reason="Priority", cpus=41, limit_min=15, priority=19000)
    w = W.build_why(inputs(mine, [big, first]), kth, now=NOW)
    e = w.estimates
    start = NOW - 400
    # 20 free now: neither fits until job 16 ends; then both fit side by side (42 + 41 <= 100).
    assert e["ours"] == start + 11991
    assert e["ours_earliest"] == start + 1444
    assert e["ours_latest"] == start + 240 * 60
    assert e["ours_earliest"] <= e["ours"] <= e["ours_latest"] and e["ahead"] == 1
    assert "by their p90" in e["ours_basis"] and "the 1 job(s) ahead" in e["ours_basis"]
    h = w.pool["running"][0] if w.pool else {}
    assert (h["job"], h["limit_shortened_to_p90"], h["ends_by_own_limit"], h["likely_end"]) == (
        16, True, start + 14400, start + 11991)
    assert w.as_dict()["estimates"]["ours_latest"] == start + 14400
    out = io.StringIO()
    W.print_why(w, Console(file=out, width=200, color_system=None))
    screen = out.getvalue()
    assert "ours likely by" in screen and "not before" in screen and "at the latest" in screen
    assert "(shortened to p90)" in screen


def test_a_job_that_must_wait_for_the_one_ahead_to_end(kth: Site) -> None:
    """Jobs ahead run their p50 in the likely and earliest estimates, their own limit in the
    latest: 60 + 60 CPUs do not fit together, so this one starts when the one ahead ends."""
    big = running(16, pred(600, 1800), NOW - 300, 60)
    first = cpu_job(25, state="PENDING", reason="Resources", cpus=60, limit_min=30, priority=20000,
                    comment=pred(300, 900))
    mine = cpu_job(26, state="PENDING", reason="Priority", cpus=60, limit_min=30, priority=19000)
    e = W.build_why(inputs(mine, [big, first]), kth, now=NOW).estimates
    assert e["ours_earliest"] == NOW + 300 + 300  # job 16's p50 end, then job 25's p50
    assert e["ours"] == NOW + 1500 + 300  # job 16's p90 end, then job 25's p50
    assert e["ours_latest"] == NOW + 3300 + 1800  # job 16's limit, then job 25's limit


def test_no_range_without_an_estimate(kth: Site) -> None:
    held = cpu_job(30, state="PENDING", reason="JobHeldUser", cpus=4)
    e = W.build_why(inputs(held, [running(16, pred(600, 1800), NOW - 300, 60)]), kth, now=NOW).estimates
    assert e["ours"] is None and e["ours_earliest"] is None and e["ours_latest"] is None
