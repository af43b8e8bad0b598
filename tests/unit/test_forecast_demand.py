"""Demand series and their sources: minute means, running/pending at boundaries, known
departures, the view as of a time, and the readers (SWF, Alibaba pods, sacct)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from slurm_hetero.errors import InputError
from slurm_hetero.forecast.demand import as_of, build_series, concat, demand_table
from slurm_hetero.forecast.features import FEATURES, PoolFeatures, forward_peak
from slurm_hetero.forecast.sources import (
    TRACE_POOL_CPU,
    TRACE_POOL_GPU,
    PoolMap,
    parse_sacct_demand,
    read_trace,
)
from slurm_hetero.site import Site, load_site

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "forecast"
NAN = math.nan


def table(rows: list[tuple[str, str, float, float, float, float, float]]) -> pd.DataFrame:
    cols: list[Sequence[object]] = list(zip(*rows, strict=True)) if rows else [[]] * 7
    return demand_table(job=cols[0], pool=cols[1], amount=cols[2], submit=cols[3], start=cols[4],
                        end=cols[5], limit=cols[6])


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(ROOT / "site" / "demo" / "site.yaml")


def test_minute_means_count_partial_minutes() -> None:
    t = table([("a", "p", 6.0, 30.0, 30.0, 150.0, NAN),     # 30 s of bin 0, all of bin 1, 30 s of bin 2
               ("b", "p", 2.0, 200.0, 210.0, 220.0, NAN)])  # 20 s inside bin 3
    s = build_series(t, t0=0.0, t1=300.0)
    assert s.minutes == 5
    np.testing.assert_allclose(s.pools["p"].mean, [3.0, 6.0, 3.0, 2.0 * 20 / 60, 0.0])
    np.testing.assert_allclose(s.pools["p"].arrivals, [6.0, 0.0, 0.0, 2.0, 0.0])


def test_boundaries_split_running_and_pending() -> None:
    # submitted at 0, starts at 120, ends at 240; a second job never starts, leaves at 180
    t = table([("a", "p", 4.0, 0.0, 120.0, 240.0, NAN), ("b", "p", 1.0, 60.0, NAN, 180.0, NAN)])
    p = build_series(t, t0=0.0, t1=300.0).pools["p"]
    assert p.pending.tolist() == [4.0, 5.0, 1.0, 0.0, 0.0, 0.0]
    assert p.running.tolist() == [0.0, 0.0, 4.0, 4.0, 0.0, 0.0]
    assert p.level.tolist() == [4.0, 5.0, 5.0, 4.0, 0.0, 0.0]


def test_unknown_end_stays_in_the_system() -> None:
    t = table([("a", "p", 3.0, 0.0, 60.0, NAN, NAN)])
    p = build_series(t, t0=0.0, t1=600.0).pools["p"]
    assert p.mean.tolist() == [3.0] * 10
    assert p.level[-1] == 3.0


def test_time_limit_gives_known_departures() -> None:
    # runs from 0 with a 10-minute limit (ends at 7 min): within 5 min of its limit from boundary 5
    t = table([("a", "p", 2.0, 0.0, 0.0, 420.0, 600.0)])
    p = build_series(t, t0=0.0, t1=900.0, horizons=(5, 15)).pools["p"]
    assert p.ending[5].tolist()[:9] == [0, 0, 0, 0, 0, 2.0, 2.0, 0, 0]
    assert p.ending[15].tolist()[:8] == [2.0] * 7 + [0.0]


def test_as_of_hides_what_was_not_known() -> None:
    t = table([("a", "p", 1.0, 0.0, 100.0, 500.0, NAN), ("b", "p", 1.0, 50.0, 400.0, 450.0, NAN),
               ("c", "p", 1.0, 300.0, 310.0, 320.0, NAN)])
    k = as_of(t, 200.0)
    assert k["job"].tolist() == ["a", "b"]
    assert k["start"].tolist()[0] == 100.0 and math.isnan(k["start"].tolist()[1])
    assert k["end"].isna().all()


def test_concat_keeps_the_newer_view() -> None:
    old = table([("7", "p", 1.0, 0.0, NAN, NAN, NAN)])
    new = table([("7", "p", 1.0, 0.0, 60.0, NAN, NAN), ("8", "p", 2.0, 5.0, NAN, NAN, NAN)])
    both = concat([old, new])
    assert both["job"].tolist() == ["7", "8"] and both["start"].tolist()[0] == 60.0


def test_bad_rows_are_repaired_or_dropped() -> None:
    t = table([("a", "p", 1.0, 100.0, 50.0, 20.0, NAN), ("b", "p", 0.0, 0.0, 0.0, 10.0, NAN),
               ("c", "p", 1.0, NAN, 0.0, 10.0, NAN)])
    assert t["job"].tolist() == ["a"]
    assert (t["start"].iloc[0], t["end"].iloc[0]) == (100.0, 100.0)


def test_features_never_look_past_the_origin() -> None:
    rng = np.random.default_rng(3)
    n = 400
    sub = np.sort(rng.uniform(0, 9 * 86400, n))
    t = table([(str(i), "p", float(rng.integers(1, 5)), float(s), float(s + 30), float(s + rng.uniform(60, 7200)),
                NAN) for i, s in enumerate(sub)])
    s = build_series(t, t0=0.0, t1=9 * 86400.0)
    f = PoolFeatures(s, "p")
    k = np.array([8 * 1440 + 17])
    row = f.matrix(k, 60)
    assert row.shape == (1, len(FEATURES))
    # Change every bin from the origin on, and every boundary after it: no feature moves.
    p = s.pools["p"]
    for bins in (p.mean, p.arrivals):
        bins[k[0]:] += 1000.0
    for bounds in (p.running, p.pending, *p.ending.values()):
        bounds[k[0] + 1:] += 1000.0
    np.testing.assert_array_equal(PoolFeatures(s, "p").matrix(k, 60), row)
    # ... while the target does.
    assert f.target(k, 60)[0] != PoolFeatures(s, "p").target(k, 60)[0]


def test_forward_peak() -> None:
    v = np.array([0.0, 5.0, 1.0, 2.0])
    assert forward_peak(v, 1).tolist() == v.tolist()
    assert forward_peak(v, 3)[:2].tolist() == [5.0, 5.0] and np.isnan(forward_peak(v, 3)[2:]).all()


# ---- sources ----------------------------------------------------------------------------------

def test_swf_cut_of_kth() -> None:
    src = read_trace(DATA / "kth-10days.swf")
    assert src.tz == "Europe/Stockholm" and src.capacity == {TRACE_POOL_CPU: 100.0}
    t = src.table
    assert len(t) == 1020 and set(t["pool"]) == {TRACE_POOL_CPU}
    first = t.iloc[0]  # job 15: submit 599850 + UnixStartTime, wait 192180, run 3477, 4 procs
    assert first["job"] == "15" and first["amount"] == 4.0
    assert first["submit"] == 843480031 + 599850
    assert first["start"] - first["submit"] == 192180 and first["end"] - first["start"] == 3477
    assert first["limit"] == 53940


def test_alibaba_cut_pools_and_never_scheduled_pods() -> None:
    src = read_trace(DATA / "alibaba-cut-pods.csv")
    t = src.table.set_index("job")
    assert src.capacity[TRACE_POOL_GPU] == 14.0  # 7 nodes of 2 GPUs
    assert t.loc["openb-pod-5948", "pool"] == TRACE_POOL_GPU
    assert t.loc["openb-pod-5948", "amount"] == pytest.approx(0.46)
    assert t.loc["openb-pod-5957", "pool"] == TRACE_POOL_CPU and t.loc["openb-pod-5957", "amount"] == 32.0
    pending: Any = t.loc["openb-pod-5978"]  # a row: the stubs say any cell
    assert math.isnan(pending["start"]) and pending["end"] == 12336663
    assert src.tz is None and t["limit"].isna().all()


def test_alibaba_bad_number_names_the_line(tmp_path: Path) -> None:
    lines = (DATA / "alibaba-cut-pods.csv").read_text().splitlines()
    lines[3] = lines[3].replace(",1,", ",x,", 1)
    bad = tmp_path / "bad-pods.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"bad-pods.csv:4: .*num_gpu is 'x'"):
        read_trace(bad)


def test_unknown_trace_format(tmp_path: Path) -> None:
    f = tmp_path / "jobs.txt"
    f.write_text("1 2 3\n")
    with pytest.raises(InputError, match="unknown trace format"):
        read_trace(f)


def test_sacct_allocations_in_units_per_pool(site: Site) -> None:
    t = parse_sacct_demand((DATA / "sacct-22.05.psv").read_text(), site).set_index("job")
    units = {m.id: m.units for m in site.models_in_use}
    assert t.loc["1", "pool"] == "h100@x86_64" and t.loc["1", "amount"] == pytest.approx(units["h100"])
    assert t.loc["3", "amount"] == pytest.approx(2 * units["a100-80gb"])
    assert t.loc["2", "pool"] == "ascend-910b@aarch64"
    # a shard of a V100 (4 shards per device on v100-01) is a quarter of its units
    assert t.loc["6", "pool"] == "v100@x86_64" and t.loc["6", "amount"] == pytest.approx(units["v100"] / 4)
    assert t.loc["7", "pool"] == "cpu@aarch64" and t.loc["7", "amount"] == 4.0
    assert t.loc["11", "limit"] == 300.0


def test_sacct_queue_rows(site: Site) -> None:
    t: Any = parse_sacct_demand((DATA / "sacct-handwritten.psv").read_text(), site).set_index("job")  # cells: any scalar
    units = {m.id: m.units for m in site.models_in_use}
    # pending, untyped gres/gpu=2, no nodes: the cheapest GPU model (the bridge's static order)
    assert t.loc["101", "pool"] == "v100@x86_64" and t.loc["101", "amount"] == pytest.approx(2 * units["v100"])
    assert math.isnan(t.loc["101", "start"]) and math.isnan(t.loc["101", "end"])
    # running: its typed allocation on npu-01, still in the system
    assert t.loc["102", "pool"] == "ascend-910b@aarch64" and math.isnan(t.loc["102", "end"])
    assert t.loc["102", "amount"] == pytest.approx(4 * units["ascend-910b"])
    assert t.loc["103", "pool"].startswith("cpu@") and math.isnan(t.loc["103", "limit"])
    # cancelled while pending (sacct: Start = End, no nodes): pending from submit to end
    assert math.isnan(t.loc["104", "start"]) and t.loc["104", "end"] == 1796034005
    assert t.loc["104", "pool"] == "h100@x86_64"


def test_sacct_short_line_is_skipped(site: Site) -> None:
    text = "1\x1fRUNNING\n" + (DATA / "sacct-handwritten.psv").read_text()
    assert sorted(parse_sacct_demand(text, site)["job"]) == ["101", "102", "103", "104"]


def test_site_pools_include_empty_ones(site: Site) -> None:
    pools = PoolMap(site).pools()
    assert "gh200@aarch64" in pools and "cpu@x86_64" in pools and "cpu@aarch64" in pools
    s = build_series(parse_sacct_demand((DATA / "sacct-22.05.psv").read_text(), site), pools=pools)
    assert set(pools) <= set(s.pools) and s.pools["gh200@aarch64"].mean.sum() == 0.0
