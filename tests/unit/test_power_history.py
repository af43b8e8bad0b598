"""The keeper's history file (power/history.py) and the published forecast (power/published.py)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest

from slurm_hetero.power import rules
from slurm_hetero.power.history import PowerHistory, parse_history, read_history, records
from slurm_hetero.power.keeper import Keeper
from slurm_hetero.power.published import parse_published, reader, write_published
from slurm_hetero.site import Site
from tests.unit.test_power import NOW, FakeSlurm, line, site  # noqa: F401 - the site fixture

T = 1_796_111_562.0


def plan(asleep: int = 2, sleep: tuple[str, ...] = ("b",)) -> rules.Plan:
    return rules.Plan([rules.PoolPlan("cpu@x86_64", 12.0, 25.0, 1, 1, asleep, sleep=list(sleep),
                                      waking=0, nodes=4)])


def rec(t: float, pool: str = "cpu@x86_64", asleep: int = 1) -> dict[str, object]:
    return {"t": t, "pool": pool, "asleep": asleep}


def test_records_carry_the_forecast_and_actions() -> None:
    (r,) = records(plan(), {"cpu@x86_64": {5: 8.0, 15: 10.0, 60: float("nan")}}, T, failed=["power_down"])
    assert r["t"] == T and r["pool"] == "cpu@x86_64"
    assert r["forecast"] == {"5": 8.0, "15": 10.0}  # NaN is not written (it is not JSON)
    assert (r["nodes"], r["asleep"], r["idle"], r["sleep"], r["wake"]) == (4, 2, 1, ["b"], [])
    assert r["failed"] == ["power_down"]
    (r,) = records(plan(), None, T)
    assert r["forecast"] is None and r["failed"] == []


def test_append_and_read_back(tmp_path: Path) -> None:
    h = PowerHistory(tmp_path / "h.jsonl")
    h.append([rec(T + 60)])
    h.append([rec(T), rec(T, "a100@x86_64")])
    got = read_history(h.path)
    assert [(r["t"], r["pool"]) for r in got] == [(T, "cpu@x86_64"), (T, "a100@x86_64"), (T + 60, "cpu@x86_64")]
    # compact: one line per record, no spaces
    assert h.path.read_text().count("\n") == 3 and ", " not in h.path.read_text()


def test_rotation_keeps_the_file_bounded(tmp_path: Path) -> None:
    h = PowerHistory(tmp_path / "h.jsonl", max_bytes=400)
    size = len(json.dumps(rec(T), separators=(",", ":"))) + 1
    for i in range(40):
        h.append([rec(T + 60 * i)])
        assert h.path.stat().st_size <= 400
    assert h.rotated.exists() and h.rotated.stat().st_size <= 400
    got = read_history(h.path)
    # the newest records survive, in order, from both files; older ones were dropped
    per_file = 400 // size
    assert per_file < len(got) <= 2 * per_file
    assert [r["t"] for r in got] == [T + 60 * i for i in range(40 - len(got), 40)]


def test_a_torn_last_line_is_skipped_and_fenced_off(tmp_path: Path) -> None:
    h = PowerHistory(tmp_path / "h.jsonl")
    h.append([rec(T)])
    with h.path.open("a") as f:
        f.write('{"t": 1796111622.0, "pool": "cpu@x8')  # the daemon died mid-write
    assert [r["t"] for r in read_history(h.path)] == [T]
    h.append([rec(T + 120)])
    assert [r["t"] for r in read_history(h.path)] == [T, T + 120]


def test_foreign_lines_are_skipped() -> None:
    text = "\n".join(["not json", "[1, 2]", '{"t": "soon", "pool": "x"}', '{"t": true, "pool": "x"}',
                      '{"pool": "x"}', '{"t": 5, "pool": 7}', '{"t": 5, "pool": "ok"}', "x" * 70000])
    assert parse_history(text) == [{"t": 5, "pool": "ok"}]


def test_a_symlinked_history_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "h.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        PowerHistory(tmp_path / "h.jsonl").append([rec(T)])
    assert target.read_text() == ""


def test_no_history_reads_empty(tmp_path: Path) -> None:
    assert read_history(tmp_path / "none.jsonl") == []


def test_the_keeper_appends_a_record_per_round(site: Site, tmp_path: Path) -> None:  # noqa: F811
    nodes = "\n".join(line(n, "IDLE", busy="2026-12-01T20:00:00") for n in site.all_nodes)
    slurm = FakeSlurm(nodes)
    h = PowerHistory(tmp_path / "h.jsonl")
    k = Keeper(site, slurm, log=lambda _: None, clock=lambda: NOW, every=0.0, history=h)  # type: ignore[arg-type]
    fc = {p.pool: {15: 1.0} for p in k.plan(None).pools}
    k.round(fc)
    got = read_history(h.path)
    assert {r["pool"] for r in got} == {p.pool for p in k.plan(None).pools}
    assert all(r["t"] == NOW and r["forecast"] == {"15": 1.0} for r in got)
    slept = [n for r in got for n in r["sleep"]]
    assert slept and any(f"nodename={slept[0]}" in ",".join(argv) or slept[0] in argv[2] for argv in slurm.ran)
    assert all(r["nodes"] == r["idle"] + r["asleep"] for r in got)  # every node idle and awake


def test_published_forecast_round_trip_and_staleness(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    write_published(path, {"cpu@x86_64": {5: 3.0, 15: 4.5}}, T)
    now = [T + 10]
    read = reader(path, max_age_s=300, clock=lambda: now[0])
    assert read() == {"cpu@x86_64": {5: 3.0, 15: 4.5}}
    now[0] = T + 301  # its writer stopped: no forecast, the keeper keeps one idle node
    assert read() == {}
    assert reader(tmp_path / "missing.json")() == {}
    path.write_text("{torn")
    assert reader(path, clock=lambda: T)() == {}


def test_published_forecast_drops_bad_entries() -> None:
    doc = {"time": T, "forecast": {"a": {"5": 1, "15": -1, "x": 2, "60": True}, "b": [1], "c": {"5": "1"}}}
    assert parse_published(doc, T) == {"a": {5: 1.0}}
    assert parse_published({"time": True, "forecast": {"a": {"5": 1}}}, 1.0) == {}
    assert parse_published([], T) == {}


def test_history_file_mode(tmp_path: Path) -> None:
    h = PowerHistory(tmp_path / "h.jsonl")
    old = os.umask(0)
    try:
        h.append([rec(T)])
    finally:
        os.umask(old)
    assert h.path.stat().st_mode & 0o777 == 0o640


def test_a_node_never_busy_sleeps_after_suspend_time_from_first_sight(site: Site) -> None:  # noqa: F811
    # LastBusyTime=Unknown (no job since slurmctld started): idle from the first round that saw it
    nodes = "\n".join(line(n, "IDLE", busy="Unknown") for n in site.all_nodes)
    now = [NOW]
    k = Keeper(site, FakeSlurm(nodes), log=lambda _: None, clock=lambda: now[0], every=0.0)  # type: ignore[arg-type]
    assert k.plan(None).sleep == []
    now[0] = NOW + site.power.suspend_time - 1
    assert k.plan(None).sleep == []
    now[0] = NOW + site.power.suspend_time
    p = k.plan(None)
    assert p.sleep and all(len(pp.sleep) == pp.idle - 1 for pp in p.pools if pp.idle > 1)


def test_the_daemon_reads_a_published_forecast(site: Site, tmp_path: Path) -> None:  # noqa: F811
    from slurm_hetero.bridge.daemon import BridgeDaemon
    from slurm_hetero.power.published import FORECAST_FILE

    d = BridgeDaemon(site, FakeSlurm(""), tmp_path / "hetero-snapshot.lua", log=lambda _: None)  # type: ignore[arg-type]
    d.refresh_forecast()
    assert d.forecast == {}  # nothing published: no forecast (the keeper keeps one idle node)
    write_published(tmp_path / FORECAST_FILE, {"cpu@x86_64": {15: 7.5}}, time.time())
    d.forecast_t = -math.inf
    d.refresh_forecast()
    assert d.forecast == {"cpu@x86_64": {15: 7.5}}
    assert d.keeper is not None and d.keeper.history is not None
    assert d.keeper.history.path == tmp_path / "hetero-power-history.jsonl"
