"""Terminal, CSV and HTML renderings, and the `report` command's exit codes (CliRunner)."""

from __future__ import annotations

import base64
import csv
import gzip
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from slurm_hetero.errors import InputError
from slurm_hetero.jobs.capacity import site_capacity
from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.reports import print_report, write_csv, write_html
from slurm_hetero.reports.cli import report as report_cmd
from slurm_hetero.reports.files import spreadsheet_safe
from slurm_hetero.reports.fmt import cell, duration, header
from slurm_hetero.reports.metrics import build_report
from slurm_hetero.reports.model import Report
from slurm_hetero.reports.period import Period
from slurm_hetero.site import load_site
from tests.fakeslurm import FakeSlurm
from tests.report_fixture import DATA, psv_jobs

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"


@pytest.fixture(scope="module")
def rep() -> Report:
    site = load_site(DEMO)
    jobs = psv_jobs(site, "sacct-22.05.psv", "sacct-handwritten.psv")
    return build_report(jobs, site_capacity(site), Period(1796033000, 1796046000, True, True), "test data")


def test_terminal_prints_every_section(rep: Report) -> None:
    console = Console(record=True, width=160)
    print_report(rep, console)
    text = console.export_text()
    for title in ("Accelerators by model and architecture", "Wait by QoS tier", "Jobs still waiting",
                  "Energy by policy", "Accuracy: mean of", "Where --accel requests went", "Top users",
                  "CPU efficiency"):
        assert title in text
    assert "jobs in range: 19" in text


def test_csv_has_every_table_with_all_rows(rep: Report, tmp_path: Path) -> None:
    paths = write_csv(rep, tmp_path / "csv")
    assert {p.name for p in paths} == {f"{t.slug}.csv" for t in rep.tables()}
    with (tmp_path / "csv" / "waits_by_partition.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows[0].keys() >= {"partition", "jobs", "wait_p50_s", "wait_p90_s", "wait_p99_s"}
    assert sum(int(r["jobs"]) for r in rows) == 17  # 19 jobs, one pending, one cancelled while pending
    assert not list((tmp_path / "csv").glob(".*"))  # no temp file left behind


def test_html_is_self_contained_with_one_image_per_plot(rep: Report, tmp_path: Path) -> None:
    path = write_html(rep, tmp_path / "r.html")
    html = path.read_text()
    plots = [p for s in rep.sections for p in s.plots]
    imgs = re.findall(r'<img alt="[^"]*" src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert len(imgs) == len(plots) >= 8
    assert all(base64.b64decode(i).startswith(b"<?xml") for i in imgs)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched from anywhere
    assert "<script>" in html and html.count("<table>") == sum(1 for t in rep.tables() if len(t.frame)) - 1


def test_text_from_the_data_is_escaped(tmp_path: Path) -> None:
    site = load_site(DEMO)
    text = (DATA / "sacct-handwritten.psv").read_text().replace("alice", "<b>alice</b>&")
    jobs = psv_jobs(site, texts=[text])
    rep = build_report(jobs, site_capacity(site), Period(1796040000, 1796046000, True, True), "t")
    html = write_html(rep, tmp_path / "r.html").read_text()
    assert "&lt;b&gt;alice&lt;/b&gt;&amp;" in html and "<b>alice" not in html


@pytest.mark.parametrize("formula", ["+cmd|' /C calc'!A0", "@SUM(1+1)", "-2+3+cmd|' /C calc'!A0",
                                     '=HYPERLINK("http://x","y")', "\t=1+1"])
def test_csv_cells_from_the_data_never_run_as_formulas(tmp_path: Path, formula: str) -> None:
    site = load_site(DEMO)
    text = (DATA / "sacct-handwritten.psv").read_text().replace("alice", formula)
    jobs = psv_jobs(site, texts=[text])
    rep = build_report(jobs, site_capacity(site), Period(1796040000, 1796046000, True, True), "t")
    cells = []
    for path in write_csv(rep, tmp_path / "csv"):
        with path.open(newline="") as f:
            cells += [c for row in list(csv.reader(f))[1:] for c in row]
    assert "'" + formula in cells  # the user's text is there, as text
    risky = [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))]
    assert all(re.fullmatch(r"-?[\d.]+(e[+-]?\d+)?", c) for c in risky), risky  # numbers stay numbers


def test_spreadsheet_safe_cells() -> None:
    assert [spreadsheet_safe(v) for v in ("\r=1", "\n=1", "-1e5", "+.5", "1-2", "", None, -3.0)] == \
        ["'\r=1", "'\n=1", "-1e5", "+.5", "1-2", "", None, -3.0]


def test_formats() -> None:
    assert (header("wait_p50_s"), header("util_pct"), header("energy_kwh")) == ("wait p50", "util %", "energy kWh")
    assert (duration(59), duration(61), duration(7200), duration(90000)) == ("59 s", "1m01s", "2h00m", "1d01h")
    assert (cell("jobs", 1234), cell("util_pct", 12.345), cell("x", float("nan"))) == ("1,234", "12.3", "\u2013")


# ---- the command -------------------------------------------------------------------------

def test_trace_to_html_and_csv(tmp_path: Path) -> None:
    src = tmp_path / "kth.swf"
    with gzip.open(KTH_SP2, "rt") as f:
        src.write_text("".join(f.readlines()[:300]))
    r = CliRunner().invoke(report_cmd, ["--trace", str(src), "-o", str(tmp_path / "k.html"),
                                        "--csv", str(tmp_path / "csv")])
    assert r.exit_code == 0, r.output
    assert f"wrote {tmp_path / 'k.html'}" in r.output and (tmp_path / "csv" / "top_users.csv").exists()
    r = CliRunner().invoke(report_cmd, ["--trace", str(src)])
    assert r.exit_code == 0, r.output
    assert "Wait by partition" in r.output


def test_malformed_trace_line_exits_2_naming_the_line(tmp_path: Path) -> None:
    src = tmp_path / "bad.swf"
    src.write_text("; MaxProcs: 4\n1 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n1 0 0 10\n")
    r = CliRunner().invoke(report_cmd, ["--trace", str(src)])
    assert r.exit_code == 2, r.output
    assert f"{src}:3: expected 18 whitespace-separated SWF fields, found 4" in r.output


def test_empty_range_exits_0_and_says_so(tmp_path: Path) -> None:
    src = tmp_path / "one.swf"
    src.write_text("1 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n")
    r = CliRunner().invoke(report_cmd, ["--trace", str(src), "--since", "1999-01-01", "--until", "1999-01-02",
                                        "-o", str(tmp_path / "e.html"), "--csv", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert "no jobs in range 1999-01-01 00:00:00" in r.output
    assert "no jobs in range" in (tmp_path / "e.html").read_text()
    assert (tmp_path / "c" / "summary.csv").exists()


def test_bad_dates_exit_2() -> None:
    r = CliRunner().invoke(report_cmd, ["--since", "someday"])
    assert r.exit_code == 2 and "--since 'someday': not a date or time" in r.output


def test_unknown_partition_exits_2() -> None:
    r = CliRunner().invoke(report_cmd, ["--partition", "gpus"])
    assert r.exit_code == 2 and "--partition gpus: not a partition of site demo; use one of cpu, gpu, npu" in r.output


def test_unreachable_slurmdbd_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    FakeSlurm(monkeypatch).fail("sacct", "sacct: error: Problem talking to the database: Connection refused")
    r = CliRunner().invoke(report_cmd, ["--cache-dir", str(tmp_path)])
    assert r.exit_code == 1, r.output
    assert "cannot read job accounting" in r.output and "is slurmdbd running" in r.output


def test_output_is_written_atomically(rep: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.html"
    target.write_text("previous report")

    def boom(_: Report) -> str:
        raise RuntimeError("render failed")

    import slurm_hetero.reports.html as H

    monkeypatch.setattr(H, "render_html", boom)
    with pytest.raises(RuntimeError):
        H.write_html(rep, target)
    assert target.read_text() == "previous report"
    monkeypatch.undo()
    from slurm_hetero.reports.files import write_atomic

    with pytest.raises(InputError, match=r"r\.html/x: cannot write here"):
        write_atomic(tmp_path / "r.html" / "x", "x")  # a file where a folder should be
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
