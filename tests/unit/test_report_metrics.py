"""Report numbers on small hand-made job tables, checked against arithmetic done by hand."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table as J
from slurm_hetero.jobs.capacity import Capacity, site_capacity
from slurm_hetero.reports.metrics import accuracy, build_report, usage_series
from slurm_hetero.reports.model import Report
from slurm_hetero.reports.period import Period, bucket_edges, bucket_step, resolve_period
from slurm_hetero.site import load_site
from slurm_hetero.slurm.sacct import day_chunks, parse_when
from tests.report_fixture import psv_jobs

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"
T0 = datetime(2026, 3, 2, 8, 0).timestamp()  # a Monday, 08:00 local
H = 3600.0


def table(rows: list[dict[str, object]]) -> pd.DataFrame:
    cols: dict[str, object] = {c: [r.get(c, np.nan if c in J.NUMBERS else "") for r in rows]
                               for c in (*J.TEXT, *J.NUMBERS)}
    cols["hetero"] = [bool(r.get("hetero", False)) for r in rows]
    return J.build(cols, len(rows))


def job(i: int, start_h: float, hours: float, **kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "job_id": str(i), "user": "u1", "account": "a1", "partition": "gpu", "qos": "gold",
        "state": "COMPLETED", "submit": T0, "eligible": T0, "start": T0 + start_h * H,
        "end": T0 + (start_h + hours) * H, "runtime_s": hours * H, "req_time_s": 2 * hours * H, "ncpus": 4.0,
        "cpu_time": 2.0 * hours * H, "arch": "x86_64", "model": "a100-80gb", "accel_class": "a100-80gb",
        "devices": 2.0, "units": 2.0}
    base.update(kw)
    return base


def frame_of(rep: Report, slug: str) -> pd.DataFrame:
    return next(t.frame for t in rep.tables() if t.slug == slug)


@pytest.fixture(scope="module")
def cap() -> Capacity:
    return site_capacity(load_site(DEMO))


def test_utilisation_counts_device_hours_inside_the_period(cap: Capacity) -> None:
    jobs = table([job(1, 0, 2), job(2, 1, 4), job(3, 0, 1, model="h100", accel_class="h100", devices=1.0,
                                                   units=2.43)])
    period = Period(T0, T0 + 4 * H, True, True)  # job 2 runs past the end: 3 of its 4 hours count
    rep = build_report(jobs, cap, period, "test")
    by_model = frame_of(rep, "utilisation_by_model").set_index(["model", "arch"])
    a100 = cast("pd.Series[Any]", by_model.loc[("a100-80gb", "x86_64")])  # a row: the stubs say any cell
    assert a100["device_hours"] == pytest.approx(2 * 2 + 2 * 3)
    assert a100["capacity_device_hours"] == pytest.approx(8 * 4)  # 2 nodes x 4 A100 x 4 h
    assert a100["util_pct"] == pytest.approx(100 * 10 / 32)
    assert by_model.loc[("h100", "x86_64"), "unit_hours"] == pytest.approx(2.43)
    assert by_model.loc[("gh200", "aarch64"), "jobs"] == 0  # installed, unused: still listed
    arch = frame_of(rep, "utilisation_by_arch").set_index("arch")
    assert arch.loc["x86_64", "cpu_hours"] == pytest.approx(4 * (2 + 3 + 1))
    assert arch.loc["x86_64", "cpus"] == 2 * 128 + 2 * 64 + 96 + 80  # cpu-x86, a100, h100, v100 nodes


def test_usage_series_matches_a_brute_force_integral() -> None:
    rng = np.random.default_rng(3)
    s = rng.uniform(0, 100, 200)
    e = s + rng.uniform(0, 30, 200)
    w = rng.integers(1, 5, 200).astype(float)
    edges = list(np.arange(0, 140, 10.0))
    got = usage_series(s, e, w, edges)
    for k in range(len(edges) - 1):
        a, b = edges[k], edges[k + 1]
        overlap = np.clip(np.minimum(e, b) - np.maximum(s, a), 0, None)
        assert got[k] == pytest.approx((w * overlap).sum() / (b - a))


def test_waits_percentiles_by_partition_qos_and_class(cap: Capacity) -> None:
    waits = [0, 60, 120, 600, 3600]
    rows = [job(i, w / H, 1, partition="cpu" if i % 2 else "gpu") for i, w in enumerate(waits)]
    rows.append(job(9, 0, 0, state="CANCELLED", start=np.nan, runtime_s=0.0))  # never started
    rows.append(job(10, 0, 1, eligible=T0 + 3000, start=T0 + 3060, end=T0 + 6660))  # held: waited 60 s
    rep = build_report(table(rows), cap, Period(T0, T0 + 10 * H, True, True), "test")
    by_part = frame_of(rep, "waits_by_partition").set_index("partition")
    gpu = np.array([0, 120, 3600, 60])
    assert by_part.loc["gpu", "jobs"] == 4 and by_part.loc["gpu", "never_started"] == 1
    assert by_part.loc["gpu", "wait_p50_s"] == pytest.approx(np.percentile(gpu, 50))
    assert by_part.loc["gpu", "wait_p90_s"] == pytest.approx(np.percentile(gpu, 90))
    assert by_part.loc["cpu", "wait_p99_s"] == pytest.approx(np.percentile([60, 600], 99))
    assert frame_of(rep, "waits_by_qos")["jobs"].sum() == 6
    assert list(frame_of(rep, "waits_by_accel_class")["accel_class"]) == ["a100-80gb"]


def test_pending_reasons_from_squeue(cap: Capacity) -> None:
    pending = pd.DataFrame({"job": ["7", "8", "9"], "partition": ["gpu", "gpu", "npu"],
                            "reason": ["Resources", "Resources", "Priority"],
                            "submit": [T0, T0 + 600, T0]})
    rep = build_report(table([job(1, 0, 1)]), cap, Period(T0, T0 + 2 * H, True, True), "t", pending,
                       now=T0 + 3600)
    t = frame_of(rep, "pending_reasons")
    first = t.iloc[0]
    assert (first["reason"], first["jobs"], first["longest_wait_s"], first["median_wait_s"]) == (
        "Resources", 2, 3600.0, 3300.0)


def test_prediction_accuracy_and_under_prediction() -> None:
    n, acc, under = accuracy(np.array([100.0, 50.0, 0.0, 200.0]), np.array([100.0, 100.0, 5.0, 100.0]))
    got: tuple[object, ...] = (n, acc, under)  # pytest.approx in a tuple: mypy's strict equality sees no overlap
    assert got == (3, pytest.approx((1 + 0.5 + 0.5) / 3), pytest.approx(100 / 3))


def test_prediction_section_compares_the_bridge_with_the_user(cap: Capacity) -> None:
    rows = [job(1, 0, 1, pred_p50=1800.0, pred_p90=4000.0), job(2, 0, 2, pred_p50=7200.0, pred_p90=8000.0),
            job(3, 0, 1)]
    rep = build_report(table(rows), cap, Period(T0, T0 + 4 * H, True, True), "t")
    acc = frame_of(rep, "prediction_accuracy").set_index("estimator")
    assert acc.loc["user estimate (time limit)", "accuracy"] == pytest.approx(0.5)
    bridge = acc.loc["bridge prediction p50"]
    assert (bridge["jobs"], bridge["accuracy"], bridge["under_predicted_pct"]) == (2, 0.75, 50.0)
    assert bridge["p90_covered_pct"] == 100.0


def test_energy_policy_comparison_and_per_unit_hour(cap: Capacity) -> None:
    rows = [job(1, 0, 1, name="train", policy="efficiency", energy_j=3.6e6),
            job(2, 0, 1.2, name="train", policy="efficiency", energy_j=3.6e6),
            job(3, 0, 0.8, name="train", policy="performance", energy_j=7.2e6),
            job(4, 0, 1, name="other", policy="performance", energy_j=1.8e6),
            job(5, 0, 1, name="npu-job", model="ascend-910b", accel_class="ascend-910b"),  # unmetered
            job(6, 0, 1, model="", accel_class="cpu", devices=0.0, units=0.0)]  # CPU: not counted
    rep = build_report(table(rows), cap, Period(T0, T0 + 4 * H, True, True), "t")
    notes = next(s for s in rep.sections if s.key == "energy").notes
    assert notes[0] == ("energy recorded for 4 of 5 accelerator jobs: 1 ran on nodes with no energy "
                        "counter or sampler (or before the node agent)")
    assert "sacct's ConsumedEnergy and sreport do not hold them" in notes[-1]  # and where to read why
    pol = frame_of(rep, "energy_by_policy").set_index("policy")
    assert pol.loc["efficiency", "energy_kwh"] == pytest.approx(2.0)
    assert pol.loc["efficiency", "wh_per_unit_hour"] == pytest.approx(2000 / (2 * 2.2))
    cmp = frame_of(rep, "energy_policy_comparison")
    assert list(cmp["name"]) == ["train"]
    assert cmp["energy_saved_pct"].iloc[0] == pytest.approx(50.0)
    assert cmp["slowdown_pct"].iloc[0] == pytest.approx(100 * (1.1 / 0.8 - 1))


def test_bridge_table_and_users(cap: Capacity) -> None:
    rows = [job(1, 0, 1, hetero=True, accel_spec="any:2", accel_kind="any", pool="v100@x86_64", model="v100",
                accel_class="v100", units=0.82, user="ann"),
            job(2, 0.5, 1, hetero=True, accel_spec="any:2", accel_kind="any", pool="ascend-910b@aarch64",
                model="ascend-910b", accel_class="ascend-910b", arch="aarch64", units=1.86, user="ann"),
            job(3, 0, 2, hetero=True, accel_spec="units=2", accel_kind="units", pool="a100-80gb@x86_64", user="bo"),
            job(4, 0, 1, model="", accel_class="cpu", devices=0.0, units=0.0, user="cy", cpu_time=3.6 * H)]
    rep = build_report(table(rows), cap, Period(T0, T0 + 4 * H, True, True), "t")
    where = frame_of(rep, "bridge_where").set_index(["req_kind", "model"])
    assert where.loc[("any", "v100"), "share_of_kind_pct"] == 50.0
    assert where.loc[("any", "ascend-910b"), "wait_p50_s"] == 1800.0
    assert where.loc[("units", "a100-80gb"), "unit_hours"] == 4.0
    users = frame_of(rep, "top_users")
    assert list(users["user"]) == ["bo", "ann", "cy"]
    assert users.set_index("user").loc["cy", "cpu_eff_pct"] == pytest.approx(90.0)


def test_empty_range_is_a_report_that_says_so(cap: Capacity) -> None:
    rep = build_report(J.empty(), cap, Period(T0, T0 + H, True, True), "t", partition="npu")
    assert rep.empty is not None and rep.empty.startswith("no jobs in range") and "npu" in rep.empty
    assert [t.slug for t in rep.tables()] == ["summary"]


def test_select_by_period_and_partition() -> None:
    jobs = table([job(1, 0, 1), job(2, 5, 1, partition="npu"), job(3, 0, 1, partition="cpu,gpu")])
    assert list(J.select(jobs, T0 + 4 * H, T0 + 9 * H)["job_id"]) == ["2"]
    assert list(J.select(jobs, T0, T0 + 9 * H, "gpu")["job_id"]) == ["1", "3"]


def test_report_of_the_handwritten_sacct_file(cap: Capacity) -> None:
    site = load_site(DEMO)
    jobs = psv_jobs(site, "sacct-handwritten.psv")
    rep = build_report(jobs, cap, Period(1796040000, 1796046000, True, True), "t")
    states = set(dict(rep.summary)["by state"].split(", "))
    assert states == {"completed 5", "running 1", "pending 1", "cancelled 1", "timeout 1"}
    assert frame_of(rep, "pending_reasons")["reason"].tolist() == ["Priority"]
    acc = frame_of(rep, "accelerator_utilisation").set_index("model")
    assert acc.loc["h100", "mean_util_pct"] == pytest.approx(80.0)


# ---- periods -----------------------------------------------------------------------------

def test_dates_and_relative_forms() -> None:
    now = datetime(2026, 3, 5, 15, 30).timestamp()
    assert parse_when("2026-03-01", "--since", now) == datetime(2026, 3, 1).timestamp()
    assert parse_when("2026-03-01T12:00", "--since", now) == datetime(2026, 3, 1, 12).timestamp()
    assert parse_when("today", "--since", now) == datetime(2026, 3, 5).timestamp()
    assert parse_when("yesterday", "--since", now) == datetime(2026, 3, 4).timestamp()
    assert parse_when("-2d", "--since", now) == now - 2 * 86400
    assert parse_when("6h", "--since", now) == now - 6 * 3600
    with pytest.raises(InputError, match=r"--until 'last tuesday': not a date or time; use YYYY-MM-DD"):
        parse_when("last tuesday", "--until", now)


def test_default_period_and_bad_order() -> None:
    now = datetime(2026, 3, 5, 15, 30).timestamp()
    p = resolve_period(None, None, now)
    assert (p.start, p.end, p.explicit_start) == (datetime(2026, 2, 27).timestamp(), now, False)
    with pytest.raises(InputError, match="--since 2026-03-05 is not before --until 2026-03-01"):
        resolve_period("2026-03-05", "2026-03-01", now)


def test_day_chunks_and_buckets() -> None:
    start, end = datetime(2026, 3, 1, 18).timestamp(), datetime(2026, 3, 3, 6).timestamp()
    chunks = list(day_chunks(start, end))
    assert [datetime.fromtimestamp(a).day for a, _ in chunks] == [1, 2, 3]
    assert chunks[1] == (datetime(2026, 3, 2).timestamp(), datetime(2026, 3, 3).timestamp())
    assert (bucket_step(300), bucket_step(86400), bucket_step(90 * 86400)) == (10, 900, 86400)
    step, edges = bucket_edges(Period(start, start + 30 * 86400))
    assert step == 6 * 3600 and datetime.fromtimestamp(edges[0]).hour in (18,)
