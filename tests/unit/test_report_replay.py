"""The report's "What-if replay" section: a replay.json (or a merged file) as tables and
plots, checked in headless Chromium like the other sections; the curves' numbers by hand;
files saved before arms kept their pools' sizes still draw the same curves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner

from slurm_hetero.replay import merge
from slurm_hetero.reports.cli import report
from slurm_hetero.reports.whatif import load, replay_section, utilisation_plots, wait_cdf
from tests.unit.test_replay_merge import two_windows, window_file
from tests.unit.test_report_browser import needs_chromium, open_in_chromium

TRACE = Path(__file__).resolve().parents[1] / "data" / "replay" / "kth-window.swf"


def test_curves_are_the_jobs_use_over_the_pools_size(tmp_path: Path) -> None:
    # plain: jobs wait 100 and 300 s then run 600 s on 4 of 10 CPUs; bridge waits 50 and 100 s.
    rep = load(window_file(tmp_path / "w.json", 0.0, [100, 300], [50, 100]))
    cdf: Any = wait_cdf(rep).frame  # pandas-stubs reject a float row label in .loc[row, col]
    assert cdf.loc[0.0, "plain"] == 0.0 and cdf.loc[100 / 60, "plain"] == 0.5
    assert cdf.loc[300 / 60, "plain"] == 1.0 and cdf.loc[100 / 60, "bridge"] == 1.0
    (plot,), notes = utilisation_plots(rep)
    assert notes == [] and plot.slug == "replay_util_cpu_x86_64"
    util = plot.frame  # one-minute buckets (an hour in 60), index in hours
    at = {round(cast(float, h) * 60): v for h, v in util["plain"].items()}
    assert at[0] == 0.0 and at[2] == pytest.approx(40.0) and at[5] == pytest.approx(80.0)
    assert at[10] == pytest.approx(80.0) and at[12] == pytest.approx(40.0) and at[15] == 0.0
    assert at[11] == pytest.approx(100 * (4 * 40 + 4 * 60) / (10 * 60))  # job 1 ends at 700 s
    # bridge's [60, 120): job 1 (from 50 s) all of it, job 2 from 100 s.
    assert util["bridge"].iloc[1] == pytest.approx(100 * (4 * 60 + 4 * 20) / (10 * 60))


def test_old_files_without_pool_sizes_draw_the_same_curves(tmp_path: Path) -> None:
    path = window_file(tmp_path / "w.json", 0.0, [100, 300], [50, 100])
    new = utilisation_plots(load(path))[0][0].frame
    d = json.loads(path.read_text())
    for a in d["arms"]:
        del a["capacity"]
    old_path = tmp_path / "old.json"
    old_path.write_text(json.dumps(d))
    old = utilisation_plots(load(old_path))[0][0].frame
    assert old.to_numpy() == pytest.approx(new.to_numpy())


def test_a_merged_file_averages_windows_and_shows_the_interval(tmp_path: Path) -> None:
    out = tmp_path / "merged.json"
    merge.write(merge.merge(two_windows(tmp_path)), out)
    rep = load(out)
    sec = replay_section(rep)
    tables = {t.slug: t.frame for t in sec.tables}
    assert set(tables) == {"replay_arms", "replay_comparison", "replay_windows"}
    assert len(tables["replay_windows"]) == 2
    cmp = tables["replay_comparison"].iloc[0]
    assert cmp["AVEbsld_ci95"].startswith("-0.37 to 1.88") and cmp["comparable"]
    ratios = next(pl for pl in sec.plots if pl.slug == "replay_window_ratios").frame
    r1 = (650 / 600 + 700 / 600) / (700 / 600 + 900 / 600)  # the windows' AVEbsld ratios (test_replay_merge)
    r2 = (1200 / 600) / (1800 / 600)
    assert list(ratios.columns) == ["bridge ÷ plain", "bridge mean", "bridge 95% low", "bridge 95% high"]
    assert list(ratios["bridge ÷ plain"]) == pytest.approx([r1, r2])  # in trace order
    assert list(ratios["bridge mean"]) == pytest.approx([(r1 + r2) / 2] * 2)
    assert [ratios["bridge 95% low"].iloc[0], ratios["bridge 95% high"].iloc[1]] == pytest.approx([-0.37, 1.88],
                                                                                               abs=0.005)
    (plot,), _ = utilisation_plots(rep)
    # Minute 5: window 1 has both jobs on (80%), window 2 its one job from 1200 s (0%); mean 40%.
    assert plot.frame["plain"].iloc[5] == pytest.approx(40.0)
    assert plot.frame["plain"].iloc[25] == pytest.approx((0.0 + 40.0) / 2)


def _report(args: list[str]) -> str:
    r = CliRunner().invoke(report, args, terminal_width=200)
    assert r.exit_code == 0, r.output
    return r.output


@needs_chromium
def test_the_section_loads_cleanly_and_every_plot_draws(tmp_path: Path) -> None:
    single = window_file(tmp_path / "w.json", 0.0, [100, 300], [50, 100])
    merged = tmp_path / "merged.json"
    merge.write(merge.merge(two_windows(tmp_path)), merged)
    for name, path, extra in (("single", single, []), ("merged", merged, []),
                              ("with-trace", merged, ["--trace", str(TRACE)])):
        html = tmp_path / f"{name}.html"
        _report(["--replay", str(path), "-o", str(html), *extra])
        page = open_in_chromium(html, tmp_path / name)
        assert page.console == [], name
        assert page.plots == page.drawn > 0, name
        if not extra:  # the wait CDF and the one pool's utilisation (merged: the per-window ratios too)
            assert page.plots == (2 if name == "single" else 3), name
        text = html.read_text()
        assert '<section id="replay">' in text and "What-if replay" in text
        ave = "1.33" if name == "single" else "1.89"  # plain's AVEbsld: window 1, or pooled
        assert re.search(rf'<td class="n">{re.escape(ave)}</td>', text), name
        assert 'id="plot-replay_wait_cdf"' in text and 'id="plot-replay_util_cpu_x86_64"' in text
        if extra:
            assert '<section id="utilisation">' in text  # the trace's own sections come first
            assert text.index('<section id="utilisation">') < text.index('<section id="replay">')
    assert "-0.37 to 1.88" in (tmp_path / "merged.html").read_text()


def test_terminal_and_bad_input(tmp_path: Path) -> None:
    out = _report(["--replay", str(window_file(tmp_path / "w.json", 0.0, [100, 300], [50, 100]))])
    assert "What-if replay" in out and "cpu@x86_64" in out and "1.12" in out
    (tmp_path / "x.json").write_text(json.dumps({"format": "other"}))
    r = CliRunner().invoke(report, ["--replay", str(tmp_path / "x.json"), "-o", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "--replay" in r.output and "x.json" in r.output
    assert not (tmp_path / "x.html").exists()
    r = CliRunner().invoke(report, ["--job", "12", "--replay", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "--replay" in r.output
