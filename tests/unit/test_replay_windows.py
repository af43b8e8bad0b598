"""Replay's loaded windows: demand ÷ capacity from the trace alone, the busiest found."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table as jobtable
from slurm_hetero.replay.cli import replay_group
from slurm_hetero.replay.trace import resolve_start
from slurm_hetero.replay.window import Capacity, busiest, busiest_rank, demand_ratios, in_band
from slurm_hetero.site import load_site

DATA = Path(__file__).resolve().parents[1] / "data"

CAP = Capacity(cpus=100, accel=10, max_limit_min=None)


def trace(rows: list[tuple[float, float, float, float]], source: str = "swf:t") -> pd.DataFrame:
    """(submit, runtime, cpus, gpus) rows, started at submit."""
    df = pd.DataFrame([{"job_id": str(i), "submit": s, "start": s, "end": s + r, "runtime_s": r,
                        "req_cpus": c, "req_accel": g, "source": source} for i, (s, r, c, g) in enumerate(rows)])
    return jobtable.build({c: df[c].to_numpy() for c in df.columns}, len(df))


def quiet_day_with_one_busy_hour(busy_at: int) -> pd.DataFrame:
    rows = [(h * 3600.0, 600.0, 1.0, 0.0) for h in range(24)]  # one small job an hour
    rows += [(busy_at + 60.0 * i, 3000.0, 2.0, 1.0) for i in range(20)]  # 20 one-GPU jobs
    return trace(rows)


def test_the_busy_hour_is_found_first() -> None:
    df = quiet_day_with_one_busy_hour(busy_at=15 * 3600)
    found = busiest(df, CAP, 1.0, 3)
    assert found[0][0] == 15 * 3600
    assert found[0][1] > 1.0  # 20 GPUs x ~50 min in an hour of 10 GPUs
    assert all(r < 0.2 for _, r in found[1:])
    starts = [s for s, _ in found]
    assert all(abs(a - b) >= 3600 for i, a in enumerate(starts) for b in starts[i + 1:])


def test_min_jobs_and_not_before_skip_windows_without_a_choice() -> None:
    # 06:00: one 10-GPU job filling the hour (ratio 1, one job); 15:00: 20 one-GPU jobs.
    df = trace([(h * 3600.0, 600.0, 1.0, 0.0) for h in range(24)] + [(6 * 3600.0, 3600.0, 1.0, 10.0)]
               + [(15 * 3600 + 60.0 * i, 3000.0, 2.0, 1.0) for i in range(20)])
    assert [s for s, _ in busiest(df, CAP, 1.0, 2)] == [15 * 3600, 6 * 3600]
    assert next(s for s, _ in busiest(df, CAP, 1.0, 2, min_jobs=3)) == 15 * 3600
    assert 6 * 3600 not in [s for s, _ in busiest(df, CAP, 1.0, 5, min_jobs=3)]
    assert all(s >= 16 * 3600 for s, _ in busiest(df, CAP, 1.0, 3, not_before=16 * 3600))
    with pytest.raises(InputError, match="--min-jobs -1"):
        busiest(df, CAP, 1.0, 1, min_jobs=-1)


def test_ratio_counts_work_inside_the_window_only() -> None:
    # One 2-hour job of 10 GPUs: half of it falls in a 1-hour window that starts with it.
    df = trace([(0.0, 7200.0, 1.0, 10.0), (7200.0, 60.0, 1.0, 0.0)])
    starts, ratio = demand_ratios(df, CAP, 1.0, step_s=3600)
    assert list(starts[:3]) == [0.0, 3600.0, 7200.0]
    assert ratio[0] == pytest.approx(1.0)
    assert ratio[1] == 0.0  # nothing submitted in it; the running job is not carried over
    _, carried = demand_ratios(df, CAP, 1.0, step_s=3600, carry_over=True)
    assert carried[1] == pytest.approx(1.0)  # with carry-over it is: still running all hour


def test_cpu_work_counts_where_it_is_the_larger_share() -> None:
    df = trace([(0.0, 3600.0, 100.0, 0.0)])
    _, ratio = demand_ratios(df, CAP, 1.0, step_s=3600)
    assert ratio[0] == pytest.approx(1.0)


def test_bad_counts_and_starts() -> None:
    df = quiet_day_with_one_busy_hour(3600)
    with pytest.raises(InputError, match="--count 0"):
        busiest(df, CAP, 1.0, 0)
    with pytest.raises(InputError, match="--hours"):
        busiest(df, CAP, 0.0, 1)
    with pytest.raises(InputError, match="counts from 1"):
        busiest_rank("busiest:0")


def test_run_start_busiest_resolves_to_that_window() -> None:
    site = load_site(DATA / "replay" / "kth-site.yaml")
    rows = [(h * 3600.0, 600.0, 1.0, 0.0) for h in range(24)]
    rows += [(9 * 3600.0 + 60 * i, 3000.0, 50.0, 0.0) for i in range(10)]
    rows += [(20 * 3600.0 + 60 * i, 3000.0, 20.0, 0.0) for i in range(10)]
    df = trace(rows)
    assert resolve_start("busiest", df, site, 1.0) == 9 * 3600
    assert resolve_start("busiest:2", df, site, 1.0) == 20 * 3600
    assert resolve_start("+2h", df, site, 1.0) == 7200
    with pytest.raises(InputError, match="only"):
        resolve_start("busiest:99", df, site, 1.0)
    # 09:00 and 20:00 hold 11 submissions each, every other hour 1: with --min-jobs 2 only those
    # two rank, and a third is not there.
    assert resolve_start("busiest:2", df, site, 1.0, min_jobs=2) == 20 * 3600
    with pytest.raises(InputError, match=r"only 2 .* 2 or more submissions"):
        resolve_start("busiest:3", df, site, 1.0, min_jobs=2)
    assert resolve_start("busiest:3", df, site, 1.0) not in (9 * 3600, 20 * 3600)


def test_windows_command_prints_the_busiest() -> None:
    data = DATA
    r = CliRunner().invoke(replay_group(lambda _w: None), [
        "windows", "--trace", str(data / "traces" / "alibaba-gpu-2023-head-pods.csv"),
        "--site", str(data / "replay" / "alibaba-site-small.yaml"), "--hours", "1", "--count", "2"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) == 2 and lines[0].startswith("busiest:1  start ")
    first, second = (float(ln.split()[-3]) for ln in lines)
    assert first >= second > 0
    jobs = [int(ln.split()[-1]) for ln in lines]
    r = CliRunner().invoke(replay_group(lambda _w: None), [
        "windows", "--trace", str(data / "traces" / "alibaba-gpu-2023-head-pods.csv"),
        "--site", str(data / "replay" / "alibaba-site-small.yaml"), "--hours", "1", "--count", "2",
        "--min-jobs", str(max(jobs) + 1)])
    assert r.exit_code == 0, r.output
    more = [int(ln.split()[-1]) for ln in r.output.splitlines()]
    assert len(more) == 2 and min(more) > max(jobs), r.output  # 14 and 13 jobs, not 10 and 9
    r = CliRunner().invoke(replay_group(lambda _w: None), [
        "windows", "--trace", str(data / "traces" / "alibaba-gpu-2023-head-pods.csv"),
        "--site", str(data / "replay" / "alibaba-site-small.yaml"), "--min-jobs", "1000"])
    assert r.exit_code == 0 and r.output == "no window of 1 h has 1000 or more submissions\n", r.output


def test_band_windows_are_spread_over_the_loaded_hours_never_the_idle_or_flooded_ones() -> None:
    """in_band keeps windows whose replayed load (warm-up + window, what the replay submits)
    lies in the band, spreads the count evenly over them in time order, and refuses a bad band;
    a long job submitted before the warm-up (not replayed) does not count."""
    rows = [(h * 3600.0, 600.0, 1.0, 0.0) for h in range(48)]  # idle: ~0.0 of 100 CPUs
    loaded = (6, 14, 22, 30, 38)
    for h in loaded:  # 100 CPUs busy for the hour: ratio about 1
        rows += [(h * 3600.0 + 60 * i, 3600.0, 10.0, 0.0) for i in range(10)]
    rows += [(44 * 3600.0 + 60 * i, 3600.0, 100.0, 0.0) for i in range(10)]  # 10x flooded
    rows.append((0.0, 47 * 3600.0, 100.0, 0.0))  # the whole machine all along: before any warm-up
    df = trace(rows)
    cap = Capacity(cpus=100, accel=0, max_limit_min=None)
    found = in_band(df, cap, 1.0, 10, (0.8, 1.5), not_before=3600)
    assert {s // 3600 for s, _ in found} == set(loaded), found
    assert all(0.8 <= r <= 1.5 for _, r in found)
    three = in_band(df, cap, 1.0, 3, (0.8, 1.5), not_before=3600)
    assert [s // 3600 for s, _ in three] == [6, 22, 38]  # first, middle, last of the five
    assert [s // 3600 for s, _ in in_band(df, cap, 1.0, 10, (0.8, 1.5), not_before=20 * 3600)] == [22, 30, 38]
    # With an hour of warm-up the span is two hours: a loaded hour alone is half the load...
    assert in_band(df, cap, 1.0, 10, (0.8, 1.5), not_before=7200, warmup_hours=1.0) == []
    # ... and the measured window starts after its warm-up.
    assert {s // 3600 for s, _ in in_band(df, cap, 1.0, 10, (0.4, 0.6), not_before=7200, warmup_hours=1.0)} \
        >= {7, 15, 23, 31, 39}
    with pytest.raises(InputError, match="--band"):
        in_band(df, cap, 1.0, 3, (1.5, 0.8))
