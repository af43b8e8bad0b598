"""benchmarks/why_estimates.py's pure parts: the `squeue --start` parser on real output and
the figures from crafted samples."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from slurm_hetero.replay.metrics import Outcome
from slurm_hetero.slurm.commands import START_FORMAT, squeue_start_all_argv
from slurm_hetero.slurm.parse import StartEstimate, parse_squeue_start
from tests import benchmark

DATA = Path(__file__).resolve().parent / "data"


bench = benchmark.load("why_estimates")


def test_argv_asks_pending_jobs_with_the_reason_last() -> None:
    argv = squeue_start_all_argv()
    assert argv[:2] == ["squeue", "--start"] and argv[-1] == START_FORMAT
    assert START_FORMAT.endswith("%r")


def test_parse_captured_squeue_start() -> None:
    """Real output of a dev cluster replaying KTH-SP2 (SLURM_TIME_FORMAT=%s)."""
    text = (DATA / "squeue-start-kth.txt").read_text()
    got = parse_squeue_start(text)
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(got) == len(lines)
    with_start = [e for e in got.values() if e.start is not None]
    assert with_start and all(e.start > 1e9 for e in with_start)  # type: ignore[operator]
    assert all(e.reason and "|" not in e.job_id for e in got.values())
    assert {e.reason for e in got.values()} & {"Resources", "Priority"}
    assert got["19"] == StartEstimate("19", None, "JobHeldUser")  # held until its trace time: N/A
    assert bench.held(got["19"].reason) and not bench.held(got["16"].reason)


def test_parse_squeue_start_edges() -> None:
    text = "12|N/A|None\n13|0|Priority\n14_2|1796108800|QOSGrpGRES\ngarbage\n15|1796108900|a|b\n"
    got = parse_squeue_start(text)
    assert got["12"] == StartEstimate("12", None, "None")
    assert got["13"].start is None  # 0: no estimate
    assert got["14_2"].start == 1796108800.0 and got["14_2"].reason == "QOSGrpGRES"
    assert got["15"].reason == "a|b"  # the reason is last: a `|` in it stays in it
    assert "garbage" not in got


def _out(jid: str, due: float, start: float | None, measured: bool = True) -> Outcome:
    return Outcome(trace_id=f"t{jid}", job_id=jid, measured=measured, due=due, released=due, start=start,
                   end=None if start is None else start + 100, state="COMPLETED", runtime_s=100,
                   expected_s=100, user_limit_s=3600, cpus=1, accel=0, pool="cpu")


def _sample(jid: str, seen: float, cause: str | None, last: str | None, **est: float | None) -> object:
    s = bench.Sample(jid, seen, cause=cause, last_reason=last)
    for k, v in est.items():
        s.estimates[k] = v
    return s


def test_figures_on_crafted_samples() -> None:
    outs = [
        _out("1", 0.0, 1200.0),  # waited 20 min
        _out("2", 0.0, 3000.0),  # 50 min
        _out("3", 0.0, 300.0),  # 5 min: left out
        _out("4", 0.0, 2400.0),  # 40 min, never sampled
        _out("5", 0.0, None),  # never started, waited past the end
        _out("6", 0.0, 5000.0, measured=False),  # warm-up: left out
    ]
    samples = {
        "1": _sample("1", 10.0, "Resources", "Resources", why_slurm=1260.0, why_ours=1100.0,
                     squeue_start=1260.0),
        "2": _sample("2", 10.0, "Priority", "Resources", why_slurm=None, why_ours=3600.0, squeue_start=2000.0),
        "3": _sample("3", 10.0, "Resources", "Resources", why_slurm=0.0, why_ours=0.0, squeue_start=0.0),
        "6": _sample("6", 10.0, "Resources", "Resources", why_slurm=0.0),
    }
    fig = bench.figures(samples, outs, 600.0, end_now=4000.0)
    assert (fig["jobs"], fig["sampled"], fig["never_started"]) == (3, 2, 1)
    ws = fig["why_slurm"]
    assert ws["n"] == 1 and ws["p50_abs_s"] == 60.0 and ws["no_estimate"] == pytest.approx(2 / 3)
    wo = fig["why_ours"]
    assert wo["n"] == 2 and wo["p50_abs_s"] == pytest.approx(350.0)  # errors 100, 600
    assert wo["p90_abs_s"] == pytest.approx(550.0)  # numpy's linear p90 of (100, 600)
    assert wo["p50_signed_s"] == pytest.approx(250.0)  # -100, +600
    sq = fig["squeue_start"]
    assert sq["n"] == 2 and sq["p50_abs_s"] == pytest.approx(530.0)  # 60, 1000
    c = fig["cause"]
    assert c["n"] == 2 and c["match"] == 0.5 and c["kind_match"] == 1.0  # Priority, Resources: both "wait"
    assert c["no_cause"] == 1 and c["pairs"] == {"Resources -> Resources": 1, "Priority -> Resources": 1}
    assert ws["never_started_with_estimate"] == 0


def test_never_started_estimates_known_too_early() -> None:
    outs = [_out("1", 0.0, None), _out("2", 0.0, None), _out("3", 3900.0, None)]  # 3: waited < 10 min
    samples = {"1": _sample("1", 1.0, "Priority", "Priority", squeue_start=3000.0),
               "2": _sample("2", 1.0, "Priority", "Priority", squeue_start=9000.0),
               "3": _sample("3", 1.0, "Priority", "Priority", squeue_start=100.0)}
    sq = bench.figures(samples, outs, 600.0, end_now=4000.0)["squeue_start"]
    assert (sq["n"], sq["never_started_with_estimate"], sq["never_started_estimate_passed"]) == (0, 2, 1)


def test_figures_without_jobs() -> None:
    fig = bench.figures({}, [_out("1", 0.0, 10.0)], 600.0)
    assert fig["jobs"] == 0 and fig["why_ours"]["n"] == 0 and fig["why_ours"]["no_estimate"] is None
    assert fig["cause"]["match"] is None


def test_requeued_job_counts_from_its_first_start() -> None:
    o = Outcome(trace_id="t", job_id="9", measured=True, due=0.0, released=0.0, start=5000.0, end=5100.0,
                state="COMPLETED", runtime_s=100, expected_s=100, user_limit_s=None, cpus=1, accel=1,
                pool="gpu", earlier=((900.0, 1000.0, "gpu", 1),))
    fig = bench.figures({"9": _sample("9", 1.0, "Resources", "Resources", squeue_start=960.0)}, [o], 600.0)
    assert fig["squeue_start"]["p50_abs_s"] == pytest.approx(60.0)


def test_sample_keeps_the_first_estimate_and_the_last_reason() -> None:
    s = bench.Sample("1", 0.0)
    s.note("squeue_start", None, 10.0)
    s.note("squeue_start", 500.0, 20.0)
    s.note("squeue_start", 900.0, 30.0)
    assert s.estimates["squeue_start"] == 500.0 and s.estimated_at["squeue_start"] == 20.0
    for r in ("None", "Priority", "Priority", "Resources", "JobHeldUser", "None"):
        s.saw_reason(r)
    assert s.last_reason == "Resources" and s.reasons == ["Priority", "Resources"]


def test_range_figures_and_the_answer_kept() -> None:
    """Ours' range comes from the answer that gave ours, with what it was made from."""
    s = bench.Sample("1", 0.0)
    none = {"estimates": {"ours": None, "ours_earliest": None, "ours_basis": "none: held"}, "pool": None}
    bench.note_why(s, none, 5.0)
    assert s.ours_basis == "none: held" and s.estimates.get("why_ours_earliest") is None
    answer = {"estimates": {"ours": 2000.0, "ours_earliest": 900.0, "ours_latest": 3000.0, "slurm": 2500.0,
                            "ahead": 1, "ours_basis": "b"},
              "pool": {"key": "cpu@x86_64", "running": [{"job": 16, "devices": 80, "start": 0.0,
                                                          "expected_end": 900.0, "likely_end": 2000.0,
                                                          "user": "u"}]}}
    bench.note_why(s, answer, 10.0)
    later = {"estimates": {"ours": 99.0, "ours_earliest": 1.0, "ours_latest": 5.0}, "pool": None}
    bench.note_why(s, later, 20.0)
    assert (s.estimates["why_ours"], s.estimates["why_ours_earliest"], s.estimates["why_ours_latest"]) == (
        2000.0, 900.0, 3000.0)
    assert s.used is not None and s.used["ahead"] == 1 and s.used["running"][0]["job"] == 16
    assert "user" not in s.used["running"][0] and s.settled() is False  # no cause yet
    outs = [_out("1", 0.0, 2400.0), _out("2", 0.0, 800.0)]
    two = bench.Sample("2", 0.0)
    for k, v in (("why_ours", 1200.0), ("why_ours_earliest", 1000.0), ("why_ours_latest", 1500.0)):
        two.estimates[k] = v
    fig = bench.figures({"1": s, "2": two}, outs, 600.0)
    # Job 1 started at 2400: in [900, 3000], after ours; job 2 at 800: before its earliest.
    assert fig["range"] == {"n": 2, "in_earliest_latest": 0.5, "in_earliest_ours": 0.0, "before_earliest": 1}
    assert fig["why_ours_latest"]["n"] == 2 and fig["why_ours_earliest"]["p50_signed_s"] == pytest.approx(-650.0)


def test_recompute_from_captured_inputs(tmp_path: Path) -> None:
    """--recompute builds why's answers again from the inputs --capture kept."""
    from slurm_hetero.site import load_site
    from tests.unit.test_why_cpu import NOW, SQUEUE_2205, cpu_job, pred, sinfo

    big = cpu_job(16, cpus=80, on={"sp2-01": 20, "sp2-02": 20, "sp2-03": 20, "sp2-04": 20}, start=NOW - 300,
                  limit_min=60, comment=pred(600, 1800))
    mine = cpu_job(25, state="PENDING", reason="Resources", cpus=42)
    text = json.dumps({"meta": SQUEUE_2205["meta"], "errors": [], "jobs": [big, mine]})
    with gzip.open(tmp_path / bench.INPUTS, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"now": NOW, "due": ["25", "99"], "squeue_json": text, "sinfo": sinfo(), "qos": None,
                            "assoc": {}, "starts": {"25": NOW + 3300}}) + "\n")
    old = bench.Sample("25", NOW - 1.0, last_reason="Resources", reasons=["Resources"])
    old.estimates["squeue_start"] = NOW + 3300
    saved = {"samples": {"25": dataclasses.asdict(old)}}
    got = bench.recompute(tmp_path, saved, load_site(bench.SITES["kth"]))["25"]
    assert got.estimates["why_ours"] == NOW + 1500 and got.estimates["why_ours_earliest"] == NOW + 300
    assert got.estimates["why_ours_latest"] == NOW + 3300 and got.estimates["why_slurm"] == NOW + 3300
    assert got.estimates["squeue_start"] == NOW + 3300 and got.cause == "Resources"
    assert got.last_reason == "Resources" and got.used is not None and got.used["running"][0]["job"] == 16
