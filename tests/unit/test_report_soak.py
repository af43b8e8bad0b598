"""The report's "A day under faults" section (`report --soak`): a soak result as tables and
plots, from a small document written here (figures worked out by hand) and from the day
committed in benchmarks/results; bad files refused with exit 2 naming the option and the
file before any cluster is asked; the section in headless Chromium like the other sections."""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from slurm_hetero.errors import InputError
from slurm_hetero.reports import build
from slurm_hetero.reports.cli import report
from slurm_hetero.reports.faultday import load, load_with_baseline, soak_report, soak_section
from slurm_hetero.reports.model import Section
from slurm_hetero.reports.soak import timeline
from tests.unit.test_report_browser import needs_chromium, open_in_chromium

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
# The KTH day before the hooks, power and containers (the figures below are that run's).
FAULTED_DAY = RESULTS / "soak-kth-day-nohooks-faulted.json"
BASELINE_DAY = RESULTS / "soak-kth-day-nohooks-baseline.json"
TRACE = Path(__file__).resolve().parents[1] / "data" / "replay" / "kth-window.swf"

# Two faults in a 2-hour window: the daemon stopped 1000-1900 s (its alert fired 300 s in and
# cleared 90 s after its end), slurmdbd stopped 4000-4600 s (no alert meant); at x50 an alert
# that begins up to 500 s after a fault's end is near it (HeteroPoolWaitHigh), one at 6000 s not.
RECORDS: list[dict[str, Any]] = [
    {"kind": "bridge-stop", "at_s": 1000.0, "for_s": 900.0, "node": "", "skew_s": 0, "started_trace_s": 1000.0,
     "ok": True, "evidence": {"pid_before": 11, "state_stopped": "T", "past_margin": True,
                              "limits_due_jobs": ["4", "5"]},
     "problem": None, "undone_trace_s": 1900.0, "ended_trace_s": 1910.0},
    {"kind": "slurmdbd-stop", "at_s": 4000.0, "for_s": 600.0, "node": "", "skew_s": 0, "started_trace_s": 4000.0,
     "ok": True, "evidence": {"port_closed": True}, "problem": None, "undone_trace_s": 4600.0,
     "ended_trace_s": 4600.0},
]
MATCHES: list[dict[str, Any]] = [
    {"kind": "bridge-stop", "meant": "HeteroBridgeHeartbeatLost", "why_none": None, "fired": True,
     "fired_s": 1300.0, "cleared": True, "cleared_s": 2000.0, "fired_after_s": 300.0, "cleared_after_end_s": 90.0,
     "also": ["HeteroSnapshotStale"], "ok": True},
    {"kind": "slurmdbd-stop", "meant": None, "why_none": "no exporter says slurmdbd is down", "fired": False,
     "fired_s": None, "cleared": False, "cleared_s": None, "fired_after_s": None, "cleared_after_end_s": None,
     "also": [], "ok": True},
]
FIRED: list[dict[str, Any]] = [
    {"alert": "HeteroBridgeHeartbeatLost", "labels": {"severity": "critical"}, "start_s": 1300.0, "end_s": 2000.0},
    {"alert": "HeteroSnapshotStale", "labels": {"severity": "warning"}, "start_s": 1350.0, "end_s": 2000.0},
    {"alert": "HeteroPoolWaitHigh", "labels": {"severity": "warning", "pool": "cpu@any"}, "start_s": 4800.0,
     "end_s": 5400.0},
    {"alert": "HeteroPoolStarving", "labels": {"severity": "warning", "pool": "cpu@any"}, "start_s": 6000.0,
     "end_s": None},
]


def run_doc(ave_bsld: float, wait_mean: float, queue: list[tuple[float, int, int]],
            records: list[dict[str, Any]], matches: list[dict[str, Any]], fired: list[dict[str, Any]],
            without: list[str]) -> dict[str, Any]:
    """One run as benchmarks/soak.py writes it (the figures this section reads, and some it does not)."""
    return {
        "submitted": 20, "submit_failed": 0, "lost": 0, "records_missing_end": 0, "records_wrong": 0,
        "killed_early": 0, "killed_at_limit": 1, "measured": 20, "started": 19, "ave_bsld": ave_bsld,
        "wait_mean": wait_mean, "wait_p50": wait_mean / 2, "wait_p90": wait_mean * 2,
        "retries": {"sbatch": 3, "release": 0, "squeue": 0}, "dbd_queue_at_end": 0, "real_s": 150.0,
        "audit": {"compared_final": 18}, "monitored": True, "alerts": matches, "alerts_fired": fired,
        "alerts_without_fault": without, "scrape_gaps": 0,
        "timeline": timeline(records, fired, queue, []), "arm_result": {"jobs": []},
    }


def soak_doc(baseline: bool = True) -> dict[str, Any]:
    """A fresh document each call (tests damage it)."""
    runs = {"faulted": run_doc(2.0, 600.0, [(0.0, 5, 2), (3600.0, 1, 3), (7000.0, 0, 1)], RECORDS,
                               copy.deepcopy(MATCHES), copy.deepcopy(FIRED), ["HeteroPoolStarving"])}
    if baseline:
        runs["baseline"] = run_doc(1.6, 400.0, [(0.0, 4, 2), (1800.0, 2, 3), (6000.0, 0, 2)], [], [], [], [])
    return {"command": "benchmarks/soak.py --short", "trace": "t.swf", "site": "site.yaml", "workload": "kth",
            "window": {"start": 1_000_000, "hours": 2.0, "warmup_hours": 0.0, "drain_hours": 0.5}, "jobs": 20,
            "speed": 50.0, "seed": 7, "short": True, "users": "root", "arm": "bridge",
            "faults": {"kinds": ["bridge-stop", "slurmdbd-stop"], "schedule": [],
                       "records": copy.deepcopy(RECORDS)},
            "runs": runs, "broken": []}


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def tables(sec: Section) -> dict[str, Any]:
    return {t.slug: t.frame for t in sec.tables}


def at(series: Any, hours: float) -> float:
    """The step line's value at `hours` (the last point at or before it, as steps-post draws it)."""
    return float(series.asof(hours))


# -- loading ---------------------------------------------------------------------------------

def _drop_lost(d: dict[str, Any]) -> None:
    del d["runs"]["faulted"]["lost"]


def _short_point(d: dict[str, Any]) -> None:
    d["runs"]["faulted"]["timeline"]["queue"][0] = [0.0, 5]


def _text_flag(d: dict[str, Any]) -> None:
    d["faults"]["records"][0]["ok"] = "yes"


def _one_match(d: dict[str, Any]) -> None:
    d["runs"]["faulted"]["alerts"] = d["runs"]["faulted"]["alerts"][:1]


def _other_run(d: dict[str, Any]) -> None:
    d["runs"]["other"] = d["runs"]["baseline"]


def _text_figure(d: dict[str, Any]) -> None:
    d["runs"]["faulted"]["ave_bsld"] = "high"


def _negative(d: dict[str, Any]) -> None:
    d["runs"]["faulted"]["lost"] = -1


def _no_records(d: dict[str, Any]) -> None:
    d["faults"]["records"] = []


@pytest.mark.parametrize(("damage", "says"), [
    (_drop_lost, "run faulted: no 'lost' field"), (_short_point, "run faulted: not enough values"),
    (_text_flag, "ok is 'yes'"), (_one_match, "1 alert matches for 2 faults"), (_other_run, "its runs are"),
    (_text_figure, "not a number: 'high'"), (_negative, "lost is -1"), (_no_records, "no fault records")])
def test_a_damaged_file_is_refused_naming_the_option_and_the_file(
        tmp_path: Path, damage: Callable[[dict[str, Any]], None], says: str) -> None:
    doc = soak_doc()
    load(write(tmp_path / "good.json", doc))  # the document as written loads
    damage(doc)
    path = write(tmp_path / "bad.json", doc)
    with pytest.raises(InputError, match=re.escape(f"--soak {path}: damaged soak result: ")) as e:
        load(path)
    assert says in str(e.value)


def test_not_json_or_not_a_soak_result(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(InputError, match=r"--soak .*x\.json: cannot read it"):
        load(tmp_path / "x.json")
    with pytest.raises(InputError, match=r"--soak .*missing\.json: cannot read it"):
        load(tmp_path / "missing.json")
    others: list[Any] = [[1, 2], {"format": "slurm-hetero-replay", "arms": []}, {"runs": {}}]
    for doc in others:
        path = write(tmp_path / "other.json", doc)
        with pytest.raises(InputError, match=re.escape(f"--soak {path}: not a soak result")):
            load(path)
    with pytest.raises(InputError, match=r"^--soak-baseline .*x\.json: cannot read it"):
        load_with_baseline(write(tmp_path / "s.json", soak_doc(baseline=False)), tmp_path / "x.json")


def test_the_baseline_file_must_be_a_baseline_of_the_same_window(tmp_path: Path) -> None:
    faulted = write(tmp_path / "f.json", soak_doc(baseline=False))
    both = write(tmp_path / "both.json", soak_doc())
    base_doc = soak_doc()
    del base_doc["runs"]["faulted"]
    base_doc["faults"]["records"] = []
    base = write(tmp_path / "b.json", base_doc)
    soak = load_with_baseline(faulted, base)
    assert list(soak.runs) == ["faulted", "baseline"] and soak.baseline_from == base
    with pytest.raises(InputError, match="holds its own baseline run already"):
        load_with_baseline(both, base)
    with pytest.raises(InputError, match=r"--soak-baseline .*f\.json: holds no baseline run"):
        load_with_baseline(faulted, faulted)
    base_doc["window"]["start"] += 3600
    with pytest.raises(InputError, match="not the window of --soak"):
        load_with_baseline(faulted, write(tmp_path / "b2.json", base_doc))


# -- the section's tables and plots ------------------------------------------------------------

def test_the_section_from_a_small_soak(tmp_path: Path) -> None:
    sec = soak_section(load(write(tmp_path / "s.json", soak_doc())))
    t = tables(sec)
    assert list(t) == ["soak_figures", "soak_faults", "soak_evidence", "soak_alerts"]
    fig = t["soak_figures"].set_index("figure")
    assert list(fig.columns) == ["faulted", "baseline", "faulted ÷ baseline"]
    assert fig.loc["jobs lost", "faulted"] == 0 and fig.loc["seed", "baseline"] == 7
    assert fig.loc["ended at their own limit", "faulted"] == 1 and fig.loc["sbatch retries", "faulted"] == 3
    assert fig.loc["alerts fired", "faulted"] == 4 and fig.loc["alerts fired", "baseline"] == 0
    assert fig.loc["AVEbsld", "faulted ÷ baseline"] == pytest.approx(2.0 / 1.6)
    assert fig.loc["mean wait, trace s", "faulted ÷ baseline"] == pytest.approx(600 / 400)
    assert math.isnan(fig.loc["jobs lost", "faulted ÷ baseline"])  # only AVEbsld and waits are compared

    faults = t["soak_faults"]
    assert list(faults["fault"]) == ["bridge-stop", "slurmdbd-stop"]
    first, second = faults.iloc[0], faults.iloc[1]
    assert (first["start_s"], first["end_s"], first["happened"]) == (1000.0, 1910.0, True)
    assert first["alert"] == "HeteroBridgeHeartbeatLost" and first["also_fired"] == "HeteroSnapshotStale"
    assert (first["fired_after_start_s"], first["cleared_after_end_s"]) == (300.0, 90.0)
    assert second["alert"] == "none meant" and pd.isna(second["fired_after_start_s"])
    ev = t["soak_evidence"]
    assert ev.iloc[0]["evidence"] == "pid_before=11; state_stopped=T; past_margin=yes; limits_due_jobs=4,5"
    assert list(ev["why_no_alert"]) == ["", "no exporter says slurmdbd is down"]

    alerts = t["soak_alerts"]
    assert list(alerts["alert"]) == ["HeteroBridgeHeartbeatLost", "HeteroSnapshotStale", "HeteroPoolWaitHigh",
                                     "HeteroPoolStarving"]
    assert list(alerts["during_fault"]) == ["#1 bridge-stop", "#1 bridge-stop", "#2 slurmdbd-stop", ""]
    assert alerts.iloc[0]["lasted_s"] == 700.0 and pd.isna(alerts.iloc[3]["end_s"])
    assert not any("BROKEN" in n for n in sec.notes)
    assert any("alerts with no fault near: HeteroPoolStarving" in n for n in sec.notes)

    spans, queue = sec.plots
    assert list(spans.frame.columns) == [
        "6: fault bridge-stop", "5: fault slurmdbd-stop", "4: alert HeteroBridgeHeartbeatLost",
        "3: alert HeteroPoolStarving", "2: alert HeteroPoolWaitHigh", "1: alert HeteroSnapshotStale"]
    stop, dbd = spans.frame["6: fault bridge-stop"], spans.frame["5: fault slurmdbd-stop"]
    assert at(stop, 999 / 3600) == 6.0 and at(stop, 1000 / 3600) == 6.6 and at(stop, 1909 / 3600) == 6.6
    assert at(stop, 1910 / 3600) == 6.0 and at(dbd, 4300 / 3600) == 5.6 and at(dbd, 4700 / 3600) == 5.0
    heartbeat = spans.frame["4: alert HeteroBridgeHeartbeatLost"]
    assert at(heartbeat, 1299 / 3600) == 4.0 and at(heartbeat, 1500 / 3600) == 4.6
    starving = spans.frame["3: alert HeteroPoolStarving"]  # still firing when the run ended
    assert at(starving, 5999 / 3600) == 3.0 and starving.iloc[-1] == 3.6
    assert spans.frame.index[0] == 0.0 and spans.frame.index[-1] == pytest.approx(7000 / 3600)

    q: Any = queue.frame  # pandas-stubs reject a float row label in .loc[row, col]
    assert list(q.columns) == ["pending (faulted)", "running (faulted)", "pending (baseline)",
                               "running (baseline)"]
    assert q.loc[0.5, "pending (faulted)"] == 5 and q.loc[0.5, "pending (baseline)"] == 2
    assert q.loc[1.0, "running (faulted)"] == 3 and q.loc[1.0, "running (baseline)"] == 3
    assert q["pending (faulted)"].iloc[-1] == 0 and q["pending (baseline)"].isna().iloc[-1]  # after its end


def test_an_alert_that_did_not_clear_breaks_the_soak(tmp_path: Path) -> None:
    doc = soak_doc(baseline=False)
    doc["runs"]["faulted"]["alerts"] = copy.deepcopy(MATCHES)
    doc["runs"]["faulted"]["alerts"][0].update(cleared=False, cleared_after_end_s=None, ok=False)
    doc["broken"] = ["faulted: fault bridge-stop: HeteroBridgeHeartbeatLost did not clear"]
    sec = soak_section(load(write(tmp_path / "s.json", doc)))
    row = tables(sec)["soak_faults"].iloc[0]
    assert row["alert"] == "HeteroBridgeHeartbeatLost (did not clear)" and pd.isna(row["cleared_after_end_s"])
    assert list(tables(sec)["soak_figures"].columns) == ["figure", "faulted"]  # no baseline: no ratio
    assert any(n.startswith("the soak's own verdict: BROKEN: faulted: fault bridge-stop") for n in sec.notes)
    assert any("--soak-baseline FILE" in n for n in sec.notes)


def test_the_committed_day() -> None:
    soak = load_with_baseline(FAULTED_DAY, BASELINE_DAY)
    rep = soak_report(soak)
    sec = rep.sections[-1]
    t = tables(sec)
    fig = t["soak_figures"].set_index("figure")
    for figure in ("jobs lost", "killed before their user's limit", "records missing an end", "records wrong"):
        assert fig.loc[figure, "faulted"] == 0 and fig.loc[figure, "baseline"] == 0, figure
    assert fig.loc["seed", "faulted"] == 36 and fig.loc["records compared", "faulted"] == 114
    assert fig.loc["measured jobs started", "faulted"] == 119 and fig.loc["measured jobs", "faulted"] == 121
    assert round(fig.loc["AVEbsld", "faulted"], 1) == 25.7 and round(fig.loc["AVEbsld", "baseline"], 1) == 25.5
    assert fig.loc["AVEbsld", "faulted ÷ baseline"] == pytest.approx(1.0078, abs=1e-4)  # the faults cost 1 %
    assert fig.loc["ended at their own limit", "baseline"] == 1

    faults = t["soak_faults"].set_index("fault")
    assert list(faults.index) == ["bridge-stop", "slurmdbd-stop", "slurmctld-kill", "clock-skew on sp2-03 (-108 s)",
                                  "slurmctld-restart", "state-readonly", "bridge-kill", "slurmd-kill on sp2-04"]
    assert faults["happened"].all()
    mapped = faults[faults["alert"] != "none meant"]
    assert list(mapped["alert"]) == ["HeteroBridgeHeartbeatLost", "HeteroClusterExporterStale",
                                     "HeteroSnapshotStale"]
    assert list(mapped["fired_after_start_s"]) == [300.8, 237.6, 341.7]  # the README's 301, 238, 342 s
    assert list(mapped["cleared_after_end_s"]) == [90.6, 95.6, 51.7]
    assert faults.loc["bridge-stop", "start_s"] == 18301.9
    why = t["soak_evidence"].set_index("fault")["why_no_alert"]
    assert why["slurmdbd-stop"].startswith("no shipped exporter metric") and why["bridge-stop"] == ""
    assert "dbd_queue_before_return=106" in t["soak_evidence"].set_index("fault").loc["slurmdbd-stop", "evidence"]

    alerts = t["soak_alerts"]
    assert len(alerts) == 10 + 3 and list(alerts["run"]).count("baseline") == 3
    starving = alerts[(alerts["run"] == "faulted") & (alerts["alert"] == "HeteroPoolStarving")]
    assert list(starving["during_fault"]) == ["", ""] and starving["end_s"].isna().iloc[-1]
    assert rep.summary[-2][1].startswith("faulted: 0 lost, 0 killed before their limit")

    spans = sec.plots[0].frame
    assert len(spans.columns) == 8 + 5  # each fault, and the five alerts that fired
    stop = spans["13: fault bridge-stop"]
    assert at(stop, 5.5) == 13.6 and at(stop, 7.0) == 13.0
    stale = spans["4: alert HeteroClusterExporterStale"]
    assert at(stale, 12.2) == 4.0 and at(stale, 12.35) == 4.6 and at(stale, 12.5) == 4.0
    assert sec.plots[1].frame["pending (faulted)"].max() > 0


# -- the command ---------------------------------------------------------------------------------

def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(report, args, terminal_width=200)


def _no_cluster(*_a: object, **_kw: object) -> None:
    raise AssertionError("no cluster may be asked")


def test_bad_input_is_exit_2_before_any_cluster_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "sacct_report", _no_cluster)
    html = tmp_path / "r.html"
    (tmp_path / "x.json").write_text("not json at all")
    for bad in (tmp_path / "x.json", write(tmp_path / "replay.json", {"format": "slurm-hetero-replay"})):
        r = _invoke(["--soak", str(bad), "-o", str(html)])
        assert r.exit_code == 2 and "--soak" in r.output and bad.name in r.output, r.output
        assert not html.exists()
    good = write(tmp_path / "s.json", soak_doc(baseline=False))
    r = _invoke(["--soak", str(good), "--soak-baseline", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "--soak-baseline" in r.output and "x.json" in r.output
    r = _invoke(["--soak-baseline", str(good)])
    assert r.exit_code == 2 and "--soak-baseline goes with --soak" in r.output
    r = _invoke(["--job", "12", "--soak", str(good)])
    assert r.exit_code == 2 and "--soak" in r.output
    r = _invoke(["--soak", str(good), "-o", str(html)])  # the soak alone: sacct_report is never called
    assert r.exit_code == 0, r.output
    assert html.exists()


def test_terminal_json_and_csv(tmp_path: Path) -> None:
    path = write(tmp_path / "s.json", soak_doc())
    r = _invoke(["--soak", str(path)])
    assert r.exit_code == 0, r.output
    for text in ("A day under faults", "Faults and the alert meant for each", "HeteroBridgeHeartbeatLost",
                 "none meant", "no exporter says slurmdbd is down", "1.25", "16m40s"):  # 1000 s: the start
        assert text in r.output, text
    r = _invoke(["--soak", str(path), "--json", "--csv", str(tmp_path / "csv")])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["summary"]["soak"].startswith("faulted: 0 lost") and "(baseline 1.60)" in doc["summary"]["soak"]
    assert doc["summary"]["seed"] == "7"
    written = sorted(p.name for p in (tmp_path / "csv").iterdir())
    assert written == ["soak_alerts.csv", "soak_evidence.csv", "soak_faults.csv", "soak_figures.csv",
                       "summary.csv"]
    assert "1000,1910,True,HeteroBridgeHeartbeatLost,300,90,HeteroSnapshotStale" in (tmp_path / "csv" / "soak_faults.csv").read_text()


@needs_chromium
def test_the_section_loads_cleanly_and_every_plot_draws(tmp_path: Path) -> None:
    small = write(tmp_path / "small.json", soak_doc())
    cases = (("small", ["--soak", str(small)]),
             ("day", ["--soak", str(FAULTED_DAY), "--soak-baseline", str(BASELINE_DAY)]),
             ("with-trace", ["--soak", str(FAULTED_DAY), "--trace", str(TRACE)]))
    for name, args in cases:
        html = tmp_path / f"{name}.html"
        r = _invoke([*args, "-o", str(html)])
        assert r.exit_code == 0, r.output
        page = open_in_chromium(html, tmp_path / name)
        assert page.console == [], name
        assert page.plots == page.drawn > 0, name
        text = html.read_text()
        assert '<section id="soak">' in text and "A day under faults" in text, name
        assert 'id="plot-soak_spans_faulted"' in text and 'id="plot-soak_queue"' in text, name
        if name != "with-trace":
            assert page.plots == 2, name  # the timing diagram and the queue
        else:  # the trace's own sections come first
            assert page.plots > 2 and text.index('<section id="utilisation">') < text.index('<section id="soak">')
        if name != "small":
            # the daemon stopped: its alert fired 300.8 trace s in, cleared 90.6 s after
            assert re.search(r"<td>HeteroBridgeHeartbeatLost</td><td class=\"n\">5m00s</td>"
                             r"<td class=\"n\">1m30s</td>", text), name
    assert '<td class="n">1.01</td>' in (tmp_path / "day.html").read_text()  # AVEbsld faulted ÷ baseline
