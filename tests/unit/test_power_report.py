"""The report's "Power saving" section on a fixture history (numbers worked out by hand)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from slurm_hetero.jobs import table
from slurm_hetero.power.history import PowerHistory
from slurm_hetero.reports.html import render_html, write_html
from slurm_hetero.reports.model import Report
from slurm_hetero.reports.period import Period
from slurm_hetero.reports.power import (
    actual_peak,
    default_history,
    demand_rows,
    held_s,
    level,
    pool_frames,
    power_section,
)
from slurm_hetero.site import load_site
from slurm_hetero.site.power import IdlePower
from tests.unit.test_report_browser import needs_chromium, open_in_chromium

ROOT = Path(__file__).resolve().parents[2]
T = 1_796_111_520.0  # a whole minute
CPU = "cpu@x86_64"


def jobs() -> pd.DataFrame:
    """Three CPU jobs and one accelerator job (4 normalized units):
    a: 8 cores, in the system [T, T+600); b: 4 cores, [T+120, T+300); c: 2 cores, pending
    since T+240 (not started, no end: in the system until further notice); g: a100, [T, T+60)."""
    return table.build({
        "job_id": ["a", "b", "c", "g"], "arch": ["x86_64"] * 4, "model": ["", "", "", "a100"],
        "submit": [T, T + 120, T + 240, T], "start": [T + 10, T + 130, math.nan, T],
        "end": [T + 600, T + 300, math.nan, T + 60], "ncpus": [8, 4, math.nan, 2],
        "req_cpus": [8, 4, 2, 2], "units": [math.nan, math.nan, math.nan, 4.0],
    }, 4)


def test_demand_rows_and_level() -> None:
    rows = demand_rows(jobs())
    assert sorted(rows["pool"]) == ["a100@x86_64", CPU, CPU, CPU]
    cpu = rows[rows["pool"] == CPU]
    at = [T - 1, T, T + 120, T + 240, T + 299, T + 300, T + 600, T + 9999]
    # a=8 from T; b=4 from T+120 to T+300; c=2 from T+240 on
    assert level(cpu, pd.Series(at).to_numpy()).tolist() == [0, 8, 12, 14, 14, 10, 2, 2]


def test_actual_peak_over_the_horizon() -> None:
    cpu = demand_rows(jobs()).query("pool == @CPU")
    t = pd.Series([T, T + 300, T + 600]).to_numpy()
    # [T, T+5min]: 14 at T+240; [T+300, T+600]: 10 until T+600 (a ends at T+600: 2 then);
    # [T+600, T+900]: only c
    assert actual_peak(cpu, t, 5).tolist() == [14, 10, 2]


def test_held_until_the_next_record_at_most_the_gap() -> None:
    assert held_s(pd.Series([0.0, 60, 120, 1000]).to_numpy(), 300).tolist() == [60, 60, 300, 0]


@pytest.fixture
def history(tmp_path: Path) -> Path:
    h = PowerHistory(tmp_path / "hetero-power-history.jsonl")
    for i, (asleep, fc) in enumerate([(3, 12.0), (3, 16.0), (1, 10.0), (0, None)]):
        h.append([{"t": T + 60 * i, "pool": CPU, "asleep": asleep, "nodes": 4,
                   "forecast": None if fc is None else {"5": fc, "15": fc, "60": fc},
                   "wake": ["n1"] if i == 2 else [], "sleep": ["n2", "n3"] if i == 0 else []}])
    return h.path


def test_section_figures(history: Path) -> None:
    sec = power_section(history, jobs(), {CPU: IdlePower(1000.0, False)}, horizon=5)
    (t,) = sec.tables
    row = t.frame.iloc[0].to_dict()
    # asleep node-seconds: 3*60 + 3*60 + 1*60 (the last record holds 0 s) = 420 s
    assert row["pool"] == CPU and row["records"] == 4
    assert row["asleep node-hours"] == round(420 / 3600, 2)
    assert row["energy saved kWh"] == round(420 / 3600 * 1000 / 1000, 2)
    assert (row["idle W per node"], row["measured"]) == (1000.0, True)
    assert "as the site measured it (node_groups[].idle_watts)" in sec.notes[-1]
    assert row["mean nodes asleep"] == round(420 / 180, 2)
    # actual 5-min peaks at T, T+60, T+120: 14, 14, 14 (c arrives at T+240 <= t+300);
    # forecasts 12, 16, 10 -> errors -2, +2, -4: MAE 8/3, two of three under
    assert actual_peak(demand_rows(jobs()).query("pool == @CPU"),
                       pd.Series([T, T + 60, T + 120]).to_numpy(), 5).tolist() == [14, 14, 14]
    assert row["forecast MAE 5 min"] == round(8 / 3, 2)
    assert row["under-forecast share"] == round(2 / 3, 3)
    assert (row["wake-ups"], row["power-downs"]) == (1, 2)
    assert [p.slug for p in sec.plots] == ["power_demand_cpu_x86_64", "power_asleep"]
    f = pool_frames([{"t": T, "pool": CPU, "asleep": 1}], jobs())[CPU]
    assert math.isnan(f["forecast"].iloc[0])  # no forecast given: not plotted as zero


def test_energy_saved_says_what_was_estimated(history: Path) -> None:
    estimated = power_section(history, jobs(), {CPU: IdlePower(250.0, True)}, horizon=5)
    assert estimated.tables[0].frame.iloc[0]["energy saved kWh"] == round(420 / 3600 * 250 / 1000, 2)
    assert f"estimated for {CPU} (no idle_watts in the site file: host 50 W + 50 W per socket" in \
        estimated.notes[-1]
    no_site = power_section(history, jobs(), None, horizon=5)
    assert no_site.tables[0].frame.iloc[0]["idle W per node"] == 150.0
    assert "150 W per idle node (assumed: no site given)" in no_site.notes[-1]


def test_no_history_says_so(tmp_path: Path) -> None:
    sec = power_section(tmp_path / "missing.jsonl", jobs())
    assert not sec.tables and not sec.plots
    assert sec.notes and sec.notes[0].startswith("no power-saving history at ")
    assert power_section(None, jobs()).notes[0].startswith("no power-saving history:")


def test_section_renders_in_html(history: Path) -> None:
    rep = Report("r", "test", Period(T, T + 3600), [("source", "test")], [power_section(history, jobs())])
    html = render_html(rep)
    assert "Power saving" in html and html.count("data:image/svg+xml;base64,") == 2
    empty = render_html(Report("r", "test", Period(T, T + 3600), [], [power_section(None, jobs())]))
    assert "no power-saving history" in empty


@needs_chromium
def test_section_in_chromium(history: Path, tmp_path: Path) -> None:
    rep = Report("r", "test", Period(T, T + 3600), [("source", "test")], [power_section(history, jobs())])
    page = open_in_chromium(write_html(rep, tmp_path / "power.html"), tmp_path)
    assert page.console == []
    assert page.plots == 2 and page.drawn == 2


def test_report_cli_adds_the_section(history: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from slurm_hetero.cli import main

    trace = ROOT / "tests" / "data" / "replay" / "kth-window.swf"
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", "--trace", str(trace), "--power-history", str(history), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "Power saving per pool" in out.read_text()
    r = CliRunner().invoke(main, ["report", "--trace", str(trace), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "Power saving" not in out.read_text()  # a trace has no keeper: no section unless asked


def test_default_history_is_beside_the_snapshot() -> None:
    site = load_site(ROOT / "tests" / "data" / "sites" / "power.yaml")
    assert site.power.enabled
    assert default_history(site) == Path("/var/spool/slurmctld/hetero-power-history.jsonl")
    assert default_history(load_site(ROOT / "tests" / "data" / "sites" / "tiny.yaml")) is None


def test_sacct_report_adds_the_section(history: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_hetero.reports.build import sacct_report
    from slurm_hetero.slurm.runner import Runner
    from slurm_hetero.slurm.sacct import FIELDS
    from tests.fakeslurm import FakeSlurm, sacct_names

    site = load_site(ROOT / "tests" / "data" / "sites" / "power.yaml")
    values = {f: "" for f in FIELDS}
    values.update({"JobIDRaw": "7", "JobID": "7", "User": "u", "Partition": "main",
                   "State": "COMPLETED", "Submit": str(int(T)), "Start": str(int(T)), "End": str(int(T + 120)),
                   "ElapsedRaw": "120", "NCPUS": "2", "ReqCPUS": "2", "AllocTRES": "cpu=2",
                   "NodeList": "pw-cpu01"})
    line = "\x1f".join(values[f] for f in FIELDS) + "\n"
    FakeSlurm(monkeypatch).on("sacct", sacct_names(lambda argv, env: line)).on("sacctmgr", "").on("squeue", "")
    period = Period(T - 60, T + 3600, True, True)
    rep = sacct_report(site, Runner(), period, now=T + 7200, power=True, power_history=history)
    sec = next(s for s in rep.sections if s.key == "power")
    row = sec.tables[0].frame.iloc[0]
    # the 2-core job is in the system over [T, T+120): the 15-min peaks at T, T+60, T+120 are
    # 2, 2, 0 against forecasts 12, 16, 10 (the record at T+180 has none)
    assert row["pool"] == CPU and row["records"] == 4
    assert row["forecast MAE 15 min"] == round((10 + 14 + 10) / 3, 2)
    assert row["under-forecast share"] == 0.0
    rep = sacct_report(site, Runner(), period, now=T + 7200)
    assert all(s.key != "power" for s in rep.sections)  # not asked (e.g. another caller): no section
