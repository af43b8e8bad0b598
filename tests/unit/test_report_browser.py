"""The HTML report in headless Chromium: no console message, every plot decoded, a screenshot.

`open_in_chromium` is shared with the integration test (the report of the real cluster).
Chromium prints every console message, errors included, as an INFO:CONSOLE log line;
the report's own script records how many plots it has and how many decoded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_hetero.jobs.capacity import site_capacity
from slurm_hetero.reports import write_html
from slurm_hetero.reports.metrics import build_report
from slurm_hetero.reports.period import Period
from slurm_hetero.site import load_site
from tests.report_fixture import psv_jobs

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=5000"]


@dataclass
class PageCheck:
    console: list[str]  # console messages (errors and logs alike)
    plots: int
    drawn: int
    screenshot: Path


def open_in_chromium(html: Path, out: Path) -> PageCheck:
    """Load html in headless Chromium (its own profile under out), dump the DOM, screenshot it."""
    assert CHROMIUM, "chromium is not installed (Debian package: chromium)"
    out.mkdir(parents=True, exist_ok=True)
    base = [CHROMIUM, *FLAGS, f"--user-data-dir={out / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", html.resolve().as_uri()], capture_output=True, text=True,
                         timeout=120, check=True)
    shot = out / f"{html.stem}.png"
    subprocess.run([*base, "--window-size=1400,5000", "--hide-scrollbars", f"--screenshot={shot}",
                    html.resolve().as_uri()], capture_output=True, text=True, timeout=120, check=True)
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln]
    body = re.search(r'<body[^>]*data-plots="(\d+)"[^>]*data-plots-drawn="(\d+)"', dom.stdout)
    plots, drawn = (int(body.group(1)), int(body.group(2))) if body else (-1, -1)
    return PageCheck(console, plots, drawn, shot)


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


@needs_chromium
def test_report_loads_cleanly_and_every_plot_draws(tmp_path: Path) -> None:
    site = load_site(DEMO)
    jobs = psv_jobs(site, "sacct-22.05.psv", "sacct-handwritten.psv")
    rep = build_report(jobs, site_capacity(site), Period(1796033000, 1796046000, True, True), "test data")
    html = write_html(rep, tmp_path / "report.html")
    page = open_in_chromium(html, tmp_path)
    assert page.console == []
    assert page.plots == sum(len(s.plots) for s in rep.sections) >= 8
    assert page.drawn == page.plots
    assert page.screenshot.stat().st_size > 20_000


@needs_chromium
def test_the_check_catches_errors_and_broken_plots(tmp_path: Path) -> None:
    """The detector itself: a script error and an undecodable plot must both show."""
    site = load_site(DEMO)
    jobs = psv_jobs(site, "sacct-22.05.psv")
    rep = build_report(jobs, site_capacity(site), Period(1796033000, 1796034000, True, True), "t")
    html = write_html(rep, tmp_path / "broken.html")
    text = html.read_text()
    text = re.sub(r'src="data:image/svg\+xml;base64,[^"]+"', 'src="data:image/svg+xml;base64,bm90IHN2Zw=="',
                  text, count=1)
    html.write_text(text.replace("</body>", "<script>undefinedFunction();</script></body>"))
    page = open_in_chromium(html, tmp_path)
    assert any("undefinedFunction is not defined" in m for m in page.console)
    assert page.drawn == page.plots - 1
