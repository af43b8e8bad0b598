"""Capacity that is true: node events and maintenance reservations captured on the dev
cluster (22.05: h100-01 drained with a `|` in its reason, cpu-arm-01 down, npu-02
drained and still open, v100-01 in a MAINT reservation), taken off the report's capacity;
and the report fixes: top users by the metric that exists, user estimates that are only
partition defaults, a site that does not describe the cluster."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from slurm_hetero.errors import InputError
from slurm_hetero.jobs.capacity import site_capacity
from slurm_hetero.reports.build import sacct_report, site_mismatch
from slurm_hetero.reports.metrics import build_report
from slurm_hetero.reports.outages import lost_by_pool, outages
from slurm_hetero.reports.period import Period
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.events import NodeEvent, parse_events, parse_reservations, unusable_seconds
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import FIELDS
from tests.fakeslurm import FakeSlurm, sacct_names
from tests.unit.test_report_metrics import T0, H, frame_of, job, table

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"
EVENTS = (CAPTURED / "sacctmgr-event-22.05.txt").read_text()
RESV = (CAPTURED / "sacctmgr-reservation-22.05.txt").read_text()
T_CAP = 1796166300.0  # just before the capture's first event
NOW = 1796166542.0  # npu-02 (drained at 1796166442) has been out 100 s


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(ROOT / "site" / "demo" / "site.yaml")


def test_captured_events_and_reservations_parse() -> None:
    ev = parse_events(EVENTS)
    assert [(e.node, e.state, e.end) for e in ev] == [
        ("cpu-arm-01", "DOWN", 1796166343.0), ("h100-01", "DRAIN", 1796166440.0), ("npu-02", "DRAIN", None)]
    assert ev[1].reason == "maint: fan | swap"  # the admin's `|` stays in the last field
    assert ev[1].devices() == {"gpu:h100": 8} and ev[0].devices() == {}
    (r,) = parse_reservations(RESV)
    assert r.end is not None
    assert (r.name, r.maintenance, r.nodes, r.end - r.start) == ("maint1", True, "v100-01", 60.0)
    with pytest.raises(ValueError, match="expected 6"):
        parse_events("h100-01|1|2|DRAIN\n")


def test_unusable_time_is_clipped_and_overlaps_count_once() -> None:
    ev = [NodeEvent("n1", 100, 200, "DRAIN", "", ""), NodeEvent("n1", 150, 300, "DOWN", "", ""),
          NodeEvent("n2", 250, None, "DOWN", "", "")]
    assert unusable_seconds(ev, 120, 1000, now=400) == {"n1": 180.0, "n2": 150.0}
    assert unusable_seconds(ev, 120, 1000, now=400, extra=[("n1", 290, 350)]) == {"n1": 230.0, "n2": 150.0}


def test_outages_per_pool_on_the_demo_site(site: Site) -> None:
    o = outages(site, parse_events(EVENTS), parse_reservations(RESV), T_CAP, NOW, NOW)
    assert o.device_s == {("h100", "x86_64"): 8 * 108.0, ("ascend-910b", "aarch64"): 8 * 100.0,
                          ("v100", "x86_64"): 4 * 60.0}
    assert o.cpu_s == {"aarch64": 128 * 11.0 + 192 * 100.0, "x86_64": 96 * 108.0 + 80 * 60.0}
    assert set(o.rows["cause"]) == {"down", "drain", "maintenance"} and o.unknown_nodes == []
    cap = site_capacity(site)
    lost = lost_by_pool(o, cap.devices, NOW - T_CAP).set_index("pool")
    assert lost.loc["h100@x86_64", "lost_drain_hours"] == pytest.approx(8 * 108 / 3600)
    assert lost.loc["v100@x86_64", "lost_maintenance_hours"] == pytest.approx(4 * 60 / 3600)
    assert lost.loc["a100-80gb@x86_64", "lost_device_hours"] == 0
    # Only the gpu partition's nodes count when the report is about that partition.
    gpu = outages(site, parse_events(EVENTS), [], T_CAP, NOW, NOW, partition="gpu")
    assert set(gpu.device_s) == {("h100", "x86_64")} and "aarch64" not in gpu.cpu_s


def test_report_capacity_is_what_was_usable(site: Site) -> None:
    o = outages(site, parse_events(EVENTS), parse_reservations(RESV), T_CAP, NOW, NOW)
    period = Period(T_CAP, NOW, True, True)
    jobs = table([job(1, 0, 0.01, model="h100", accel_class="h100", devices=8.0, units=8 * 2.43,
                      start=T_CAP, end=T_CAP + 36, runtime_s=36.0)])
    rep = build_report(jobs, site_capacity(site), period, "t", outages=o)
    by_model = frame_of(rep, "utilisation_by_model").set_index("model")
    hours = (NOW - T_CAP) / 3600
    assert by_model.loc["h100", "capacity_device_hours"] == pytest.approx(8 * hours - 8 * 108 / 3600)
    assert by_model.loc["h100", "util_pct"] == pytest.approx(100 * 8 * 36 / (8 * (NOW - T_CAP) - 8 * 108))
    assert by_model.loc["a100-80gb", "capacity_device_hours"] == pytest.approx(8 * hours)
    assert set(frame_of(rep, "capacity_lost")["pool"]) == {"h100@x86_64", "ascend-910b@aarch64", "v100@x86_64"}
    assert "while their nodes could run jobs" in next(t.note for t in rep.tables()
                                                       if t.slug == "utilisation_by_model")
    plain = build_report(jobs, site_capacity(site), period, "t")
    assert frame_of(plain, "utilisation_by_model").set_index("model").loc["h100", "capacity_device_hours"] \
        == pytest.approx(8 * hours)
    assert "capacity_lost" not in [t.slug for t in plain.tables()]


def test_top_users_on_a_cpu_only_trace_rank_by_cpu_hours(site: Site) -> None:
    cpu = {"model": "", "accel_class": "cpu", "devices": 0.0, "units": 0.0}
    jobs = table([job(1, 0, 1, user="a", ncpus=2.0, **cpu), job(2, 0, 1, user="b", ncpus=8.0, **cpu)])
    rep = build_report(jobs, site_capacity(site), Period(T0, T0 + 2 * H, True, True), "t")
    top = next(t for t in rep.tables() if t.slug == "top_users")
    assert top.title == "Top users by CPU-hours"
    assert top.frame["user"].tolist() == ["b", "a"]
    assert not {"unit_hours", "device_hours", "share_of_units_pct"} & set(top.frame.columns)
    gpu = table([job(1, 0, 1, user="a", ncpus=64.0), job(2, 0, 2, user="b", ncpus=1.0)])
    rep = build_report(gpu, site_capacity(site), Period(T0, T0 + 3 * H, True, True), "t")
    top = next(t for t in rep.tables() if t.slug == "top_users")
    assert top.title == "Top users by normalized-unit-hours" and top.frame["user"].tolist() == ["b", "a"]


def test_partition_default_limits_are_not_user_estimates(site: Site) -> None:
    # Both jobs ran 2 s under the gpu partition's DefaultTime (1 h): nobody estimated.
    jobs = table([job(i, 0, 2 / H, req_time_s=3600.0) for i in (1, 2)])
    rep = build_report(jobs, site_capacity(site), Period(T0, T0 + H, True, True), "t",
                       default_limits={"gpu": 3600.0})
    sec = next(s for s in rep.sections if s.key == "prediction")
    assert any("2 finished job(s) ran under their partition's DefaultTime" in n for n in sec.notes)
    assert any("n/a: no finished job set a time limit of its own" in n for n in sec.notes)
    assert not sec.tables  # no 0.001 accuracy of a limit nobody chose
    mixed = table([job(1, 0, 2 / H, req_time_s=3600.0), job(2, 0, 0.5, req_time_s=3600.0 * 2)])
    rep = build_report(mixed, site_capacity(site), Period(T0, T0 + H, True, True), "t",
                       default_limits={"gpu": 3600.0})
    acc = frame_of(rep, "prediction_accuracy").iloc[0]
    assert (acc["jobs"], acc["accuracy"]) == (1, pytest.approx(0.25))


def _sacct_line(node: str, tres: str) -> str:
    values = {f: "" for f in FIELDS}
    values.update({"JobIDRaw": "7", "JobID": "7", "User": "u", "Partition": "gpu",
                   "State": "COMPLETED", "Submit": str(int(T0)), "Start": str(int(T0)),
                   "End": str(int(T0 + 60)), "ElapsedRaw": "60", "NCPUS": "1", "AllocTRES": tres,
                   "NodeList": node})
    return "\x1f".join(values[f] for f in FIELDS) + "\n"


def test_a_site_that_does_not_match_the_cluster_is_named(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = pd.DataFrame({"NodeList": ["gpu-[07-08]", "a100-01", "None assigned"],
                        "AllocTRES": ["cpu=1,gres/gpu:l4=2", "gres/gpu:a100-80gb=1", ""]})
    msg = site_mismatch(raw, site)
    assert msg is not None and "nodes gpu-07, gpu-08" in msg and "GRES types gpu:l4" in msg
    assert site_mismatch(raw.iloc[1:], site) is None
    FakeSlurm(monkeypatch).on("sacct", sacct_names(lambda argv, env: _sacct_line("gpu-07", "cpu=1,gres/gpu:l4=1")
                               if argv[argv.index("-S") + 1][:10] == _day(T0) else "")).on("sacctmgr", "")
    warned: list[str] = []
    period = Period(T0 - 60, T0 + H, True, True)
    rep = sacct_report(site, Runner(), period, now=T0 + 2 * H, warn=warned.append)
    assert len(warned) == 1 and warned[0].startswith("warning: site demo does not describe nodes gpu-07")
    assert any("gpu-07" in n for n in rep.notes)
    with pytest.raises(InputError, match="--site: site demo does not describe nodes gpu-07"):
        sacct_report(site, Runner(), period, now=T0 + 2 * H, strict=True)


def _day(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%d", time.localtime(t))


def test_captured_24_11_events() -> None:
    (ev,) = parse_events((CAPTURED / "sacctmgr-event-24.11.txt").read_text())
    assert ev.end is not None
    assert (ev.node, ev.state, ev.end - ev.start, ev.reason) == ("n01", "DRAIN", 3.0, "maint: fan | swap")
    assert ev.devices() == {"npu:910b": 8}
    (r,) = parse_reservations((CAPTURED / "sacctmgr-reservation-24.11.txt").read_text())
    assert r.maintenance and r.nodes == "g01"


def test_an_idle_period_still_says_what_capacity_was_lost(site: Site) -> None:
    from slurm_hetero.jobs import table as J

    o = outages(site, parse_events(EVENTS), [], T_CAP, NOW, NOW)
    rep = build_report(J.empty(), site_capacity(site), Period(T_CAP, NOW, True, True), "t", outages=o)
    assert rep.empty is not None and rep.empty.startswith("no jobs in range")
    assert "device-hours lost to down, drained or maintenance nodes: ascend-910b@aarch64 0.222, " \
           "h100@x86_64 0.24" in rep.empty
