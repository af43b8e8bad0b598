"""The bridge daemon's pure parts: SiteFactor, limit extension, the jobs it reads from
`squeue --json`, and surviving a bad job or a dead slurmctld."""

from __future__ import annotations

import doctest
import json
import time
from pathlib import Path

import pytest

from slurm_hetero.bridge import daemon
from slurm_hetero.bridge.daemon import ExtendPolicy, job_row, user_limit
from slurm_hetero.jobs.sitefactor import FactorPolicy
from slurm_hetero.slurm.squeue import parse_squeue_json

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured"


def test_doctests() -> None:
    assert doctest.testmod(daemon).failed == 0


def test_site_factor_shorter_is_higher_and_capped() -> None:
    f = FactorPolicy()
    values = [f.site_factor(s, 0) for s in (30, 300, 3600, 86400, 7 * 86400, 30 * 86400)]
    assert values == sorted(values, reverse=True)
    assert values[0] <= f.cap and values[-1] == 0 and values[-2] == 0
    raw = 10_000 * (1 - 1.791759469228055 / 9.218407870525316)  # 8056.3
    assert f.site_factor(5 * 60, 0) == 8100  # in steps of 100
    assert FactorPolicy(step=1).site_factor(5 * 60, 0) == round(raw)
    assert all(v % f.step == 0 for v in values)


def test_aging_changes_a_value_only_every_step() -> None:
    f = FactorPolicy()
    seen = {f.site_factor(30 * 86400, t) for t in range(0, 3600, 5)}  # an hour of 5 s rounds
    assert len(seen) <= 5  # 100 per 864 s of waiting: a handful of updates an hour, not 720


def test_aging_lifts_long_jobs_so_nothing_starves() -> None:
    f = FactorPolicy()
    assert f.site_factor(30 * 86400, 12 * 3600) == 5000  # half-way through age_full_s
    assert f.site_factor(30 * 86400, 2 * 86400) == f.cap  # waited long enough: the cap
    assert f.site_factor(60, 2 * 86400) == f.cap


@pytest.mark.parametrize(("limit", "elapsed", "user", "new"), [
    (10, 60, 60, None),        # 9 minutes left: nothing to do
    (10, 8 * 60 + 30, 60, 20),  # 90 s left < 120 s margin: doubled
    (40, 37 * 60, 60, 60),      # doubling would pass the user's limit: the user's limit
    (60, 59 * 60, 60, None),    # already at the user's limit: Slurm enforces it as usual
    (1, 10, 5, 5),              # the next step covers elapsed + 2 margins, capped by the user's
])
def test_extension_steps(limit: int, elapsed: float, user: int, new: int | None) -> None:
    assert ExtendPolicy().new_limit_min(limit, elapsed, user) == new


@pytest.mark.parametrize(("limit", "elapsed", "user", "new"), [
    (10, 60, 600, None),         # 9 minutes left: nothing to do
    (10, 8 * 60 + 30, 600, 15),  # the next step after 10 that covers 8.5 min + 2 margins
    (1, 10, 600, 5),             # 1 -> 5: steps, not doubling
    (15, 14 * 60, 600, 30),
    (200, 198 * 60, 600, 300),
    (500, 498 * 60, 540, 540),   # the next step (600) passes the user's limit: the user's limit
    (6000, 5998 * 60, 9000, 9000),  # past the last step: the user's limit
])
def test_tsafrir_correction_steps(limit: int, elapsed: float, user: int, new: int | None) -> None:
    assert ExtendPolicy().new_limit_min(limit, elapsed, user, "tsafrir") == new


@pytest.mark.parametrize(("limit", "elapsed", "user", "shipped", "tight"), [
    (10, 8 * 60 + 30, 60, 20, None),  # 90 s left: inside 120 s, outside 75 s
    (10, 9 * 60 + 10, 60, 20, 20),    # 50 s left: inside both; doubled either way
    (60, 55 * 60, 600, 120, None),    # 5 min left of 60: within 10% only
    (3, 200, 10, 8, 6),               # past its limit: at once, to cover two margins more
])
def test_a_tight_margin_extends_only_in_its_last_rounds(limit: int, elapsed: float, user: int,
                                                        shipped: int | None, tight: int | None) -> None:
    """The replay's *-tight arms (75 s at x50, no share of the limit): a job that ends inside
    the shipped margin, within its limit, keeps the limit backfill plans with."""
    assert ExtendPolicy().new_limit_min(limit, elapsed, user) == shipped
    assert ExtendPolicy(margin_s=75, share=0.0).new_limit_min(limit, elapsed, user) == tight


def test_rows_from_captured_squeue_json() -> None:
    jobs, _ = parse_squeue_json((CAPTURED / "squeue-json-22.05.json").read_text())
    rows = {r.job_id: r for r in (job_row(j, now=1796109000.0) for j in jobs)}
    # Job 7's comment says `AdminComment={"shortened":true,"user_limit_min":100000}`: the
    # decision is the bridge's own admin comment, which holds neither.
    assert rows["7"].decision["model"] == "v100" and "shortened" not in rows["7"].decision
    assert rows["7"].limit_min == 10 and rows["7"].state == "RUNNING" and rows["7"].elapsed_s > 0
    assert rows["8"].limit_min == 5 and rows["8"].elapsed_s == 0 and rows["8"].waited_s > 0


@pytest.mark.parametrize(("value", "expected"), [
    (90, 90), (0, None), (-5, None), (True, None), ("600", None), (10**12, None), (2.5, None),
])
def test_user_limit_must_be_sane_minutes(value: object, expected: int | None) -> None:
    assert user_limit({"user_limit_min": value}) == expected


def test_deep_or_huge_admin_comments_do_not_raise() -> None:
    from slurm_hetero.slurm.comment import parse_comment

    assert parse_comment("{" + '"a":[' * 100_000 + "]" * 100_000 + "}") == {}
    assert parse_comment('{"x":"' + "y" * 200_000 + '"}') == {}


class FlakyRunner:
    """slurmctld down for the first calls, then answering with no jobs (unit-test fake)."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls: list[list[str]] = []

    def out(self, argv: list[str], **_: object) -> str:
        from slurm_hetero.errors import RuntimeFailure

        self.calls.append(argv)
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeFailure(f"{argv[0]}: no answer in 20 s")
        return '{"jobs": []}' if argv[0] == "squeue" else ""

    def run(self, argv: list[str], **_: object) -> object:
        self.calls.append(argv)
        return None


def test_daemon_survives_an_unreachable_slurmctld(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import BridgeDaemon
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    logs: list[str] = []
    runner = FlakyRunner(failures=3)
    d = BridgeDaemon(site, runner, tmp_path / "snap.lua", every=0.0, log=logs.append)  # type: ignore[arg-type]
    d.run(rounds=3)
    assert logs[0].startswith("startup repair skipped: RuntimeFailure: squeue: no answer")
    assert sum(line.startswith("round skipped") for line in logs) == 2
    assert (tmp_path / "snap.lua").exists()  # the third round wrote the snapshot
    assert logs[-1] == "bridge daemon stopped"


class HostileRunner:
    """squeue answers with one job per trap, then one good job to extend (unit-test fake)."""

    def __init__(self, jobs: list[object]):
        self.doc = json.dumps({"jobs": jobs})
        self.updates: list[list[str]] = []
        self.reads = 0

    def out(self, argv: list[str], **_: object) -> str:
        if argv[0] != "squeue":
            return ""
        self.reads += 1
        return self.doc

    def run(self, argv: list[str], **_: object) -> object:
        if argv[:2] == ["scontrol", "update"]:
            self.updates.append(argv)
        return None


def test_one_bad_job_costs_itself_not_the_round(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import BridgeDaemon
    from slurm_hetero.site import load_site

    now = time.time()
    shortened = json.dumps({"hetero": 1, "shortened": True, "user_limit_min": 60})
    jobs: list[object] = [
        {"job_id": 1, "job_state": "RUNNING", "time_limit": "zz", "start_time": now - 600,
         "admin_comment": shortened},                                        # limit not a number
        {"job_id": 2, "job_state": "RUNNING", "time_limit": 10, "start_time": now - 590,
         "admin_comment": "{" + '"a":[' * 50_000 + "]" * 50_000 + "}"},     # nesting bomb
        {"job_id": 3, "job_state": "RUNNING", "time_limit": 10, "start_time": now - 590,
         "admin_comment": json.dumps({"hetero": 1, "shortened": True, "user_limit_min": 100_000_000})},
        {"job_id": "x"}, [1, 2],                                              # not jobs at all
        {"job_id": 4, "job_state": "RUNNING", "time_limit": 10, "start_time": now - 590,
         "admin_comment": shortened, "comment": 'AdminComment={"user_limit_min":100000}'},
    ]
    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    runner = HostileRunner(jobs)
    logs: list[str] = []
    d = BridgeDaemon(site, runner, tmp_path / "snap.lua", every=0.0, log=logs.append)  # type: ignore[arg-type]
    d.run(rounds=2)
    # Only job 4 is extended, to twice its limit (and never past the user's 60 minutes).
    assert {tuple(u) for u in runner.updates} == {("scontrol", "update", "JobId=4", "TimeLimit=20")}
    assert not any(line.startswith("round failed") for line in logs), logs
    # 2 bad entries at each read of the queue: the startup repair's and each full round's
    # (whether round 2 reads it again depends on how long round 1's read took: queue_gap).
    assert runner.reads >= 2 and sum("skipped job entry" in line for line in logs) == 2 * runner.reads


def test_a_failing_forecast_costs_no_heartbeat(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import BridgeDaemon
    from slurm_hetero.bridge.snapshot import read_forecast
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    calls: list[int] = []

    def forecaster() -> dict[str, dict[int, float]]:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("no history yet")
        return {"h100@x86_64": {5: 1.0, 15: 2.0, 60: 3.0}}

    logs: list[str] = []
    snap = tmp_path / "snap.lua"
    d = BridgeDaemon(site, HostileRunner([]), snap, every=0.0, log=logs.append,  # type: ignore[arg-type]
                     forecaster=forecaster)
    d.run(rounds=2)
    assert logs[0] == "forecast skipped: ValueError: no history yet" and snap.exists()
    assert len(calls) == 1  # once a minute, not once a round
    d.forecast_t -= 61
    d.round()
    assert read_forecast(snap) == {"h100@x86_64": {5: 1.0, 15: 2.0, 60: 3.0}}


def test_site_factors_go_out_one_command_per_value_and_only_when_they_change(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import FACTOR_BATCH, BridgeDaemon, JobRow
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    runner = HostileRunner([])
    d = BridgeDaemon(site, runner, tmp_path / "snap.lua", log=lambda _: None)  # type: ignore[arg-type]
    short = [JobRow(str(i), "PENDING", 10, 0.0, 0.0, {"pred": {"p50": 60}}) for i in range(1, 701)]
    long = [JobRow(str(i), "PENDING", 10, 0.0, 0.0, {"pred": {"p50": 7 * 86400}}) for i in range(701, 801)]
    running = [JobRow("900", "RUNNING", 10, 5.0, 0.0, {})]
    assert d.set_factors(short + long + running) == 800
    ids = [u[2].removeprefix("JobId=").split(",") for u in runner.updates]
    values = [u[3] for u in runner.updates]
    assert [len(i) for i in ids] == [100, FACTOR_BATCH, 200]  # 0 for the long ones, then the short
    assert values == ["SiteFactor=0", f"SiteFactor={d.factor.site_factor(60, 0)}", values[1]]
    assert sorted(int(j) for i in ids for j in i) == list(range(1, 801))  # the running job: none
    runner.updates.clear()
    assert d.set_factors(short + long) == 0 and runner.updates == []  # nothing changed: no RPC


def test_a_job_ordered_by_its_upper_quantile_keeps_that_order_as_it_waits(tmp_path: Path) -> None:
    """`model export --order upper`: the bridge records the p90 it ordered by ("sf_s"); the
    daemon's SiteFactor goes on from it, not from the shorter p50, or the job would jump ahead
    at the daemon's first round. A bad "sf_s" falls back to the p50."""
    from slurm_hetero.bridge.daemon import BridgeDaemon, JobRow
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    runner = HostileRunner([])
    d = BridgeDaemon(site, runner, tmp_path / "snap.lua", log=lambda _: None)  # type: ignore[arg-type]
    pred = {"p50": 420, "p90": 64800}
    jobs = [JobRow("1", "PENDING", 1080, 0.0, 3600.0, {"pred": pred, "sf_s": 64800}),
            JobRow("2", "PENDING", 1080, 0.0, 3600.0, {"pred": pred}),
            JobRow("3", "PENDING", 1080, 0.0, 3600.0, {"pred": pred, "sf_s": "64800; scancel"})]
    d.set_factors(jobs)
    got = {j: u[3] for u in runner.updates for j in u[2].removeprefix("JobId=").split(",")}
    assert got["1"] == f"SiteFactor={d.factor.site_factor(64800, 3600.0)}"
    assert got["2"] == got["3"] == f"SiteFactor={d.factor.site_factor(420, 3600.0)}" != got["1"]


def test_rounds_stretch_on_a_large_queue_but_stay_fresh(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import MAX_GAP_S, BridgeDaemon
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    logs: list[str] = []
    d = BridgeDaemon(site, HostileRunner([]), tmp_path / "snap.lua", every=2.0, log=logs.append)  # type: ignore[arg-type]
    assert d.gap(0.1) == 2.0 and logs == []
    assert d.gap(1.7) == pytest.approx(6.8)  # at most a quarter of a CPU
    assert d.gap(30.0) == MAX_GAP_S           # never so far apart that the snapshot goes stale
    assert d.gap(2.0) == 8.0 and len(logs) == 1  # said once, not every round
    assert d.gap(0.2) == 2.0 and d.gap(3.0) == 10.0 and len(logs) == 2


def test_a_factor_the_bridge_set_at_submit_costs_no_update(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import BridgeDaemon
    from slurm_hetero.site import load_site

    now = time.time()
    f = FactorPolicy()
    at_submit = f.site_factor(600, 0)

    def job(i: int, sf: int | None) -> dict[str, object]:
        rec: dict[str, object] = {"hetero": 1, "pred": {"p50": 600, "p90": 900}}
        if sf is not None:
            rec["sf"] = sf
        return {"job_id": i, "job_state": "PENDING", "time_limit": 60, "submit_time": now - 5,
                "admin_comment": json.dumps(rec)}

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    runner = HostileRunner([job(1, at_submit), job(2, None), job(3, at_submit - 100)])
    d = BridgeDaemon(site, runner, tmp_path / "snap.lua", every=0.0, log=lambda _: None)  # type: ignore[arg-type]
    d.run(rounds=1)
    # Job 1 holds the value already; job 2 has none recorded; job 3's recorded value is stale.
    factor_updates = [u for u in runner.updates if any(a.startswith("SiteFactor=") for a in u)]
    assert factor_updates == [["scontrol", "update", "JobId=2,3", f"SiteFactor={at_submit}"]]


def test_a_large_queue_is_read_less_often_than_the_heartbeat(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import MAX_QUEUE_GAP_S, BridgeDaemon
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    logs: list[str] = []

    class Counting(HostileRunner):
        reads = 0

        def out(self, argv: list[str], **kw: object) -> str:
            Counting.reads += argv[0] == "squeue"
            return super().out(argv, **kw)

    snap = tmp_path / "snap.lua"
    d = BridgeDaemon(site, Counting([]), snap, every=2.0, log=logs.append)  # type: ignore[arg-type]
    assert d.queue_gap(0.1) == 2.0 and d.queue_gap(4.6) == pytest.approx(46.0)
    assert d.queue_gap(30.0) == MAX_QUEUE_GAP_S and len(logs) == 1 and "read every 46 s" in logs[0]
    d.round()
    first = snap.stat().st_mtime_ns
    d.queue_due = time.monotonic() + 30  # as after a slow read
    time.sleep(0.01)
    d.round()
    # The heartbeat was written again, from the last read's queue: squeue was not asked.
    assert Counting.reads == 1 and snap.stat().st_mtime_ns > first
    d.queue_due = time.monotonic() - 1
    d.round()
    assert Counting.reads == 2


def test_a_job_the_model_asks_tsafrirs_correction_for_is_extended_by_steps(tmp_path: Path) -> None:
    from slurm_hetero.bridge.daemon import BridgeDaemon, JobRow
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    runner = HostileRunner([])
    d = BridgeDaemon(site, runner, tmp_path / "snap.lua", log=lambda _: None)  # type: ignore[arg-type]
    shortened = {"shortened": True, "user_limit_min": 600}
    rows = [JobRow("1", "RUNNING", 10, 510.0, 0.0, {**shortened, "ext": "tsafrir"}),
            JobRow("2", "RUNNING", 10, 510.0, 0.0, dict(shortened)),
            JobRow("3", "RUNNING", 10, 510.0, 0.0, {**shortened, "ext": "anything else"})]
    assert d.extend_limits(rows) == 3
    assert [(u[2], u[3]) for u in runner.updates] == [
        ("JobId=1", "TimeLimit=15"), ("JobId=2", "TimeLimit=20"), ("JobId=3", "TimeLimit=20")]


def test_a_snapshot_that_cannot_be_written_costs_the_heartbeat_not_the_limits(tmp_path: Path) -> None:
    """The state folder full or read-only (here: the snapshot's folder is a file, which no
    root privilege writes through): the round logs it, and still extends a shortened job."""
    from slurm_hetero.bridge.daemon import BridgeDaemon
    from slurm_hetero.site import load_site

    now = time.time()
    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    runner = HostileRunner([{"job_id": 9, "job_state": "RUNNING", "time_limit": 10, "start_time": now - 590,
                             "partition": "cpu", "admin_comment": json.dumps(
                                 {"hetero": 1, "shortened": True, "user_limit_min": 60})}])
    (tmp_path / "state").write_text("not a folder")
    logs: list[str] = []
    d = BridgeDaemon(site, runner, tmp_path / "state" / "snap.lua", every=0.0, log=logs.append)  # type: ignore[arg-type]
    d.round()
    assert [u[2:] for u in runner.updates] == [["JobId=9", "TimeLimit=20"]]
    assert any(line.startswith("snapshot not written: NotADirectoryError") for line in logs), logs


def test_the_round_plans_requeues_on_the_capacity_its_moves_left(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """round(): the moves it applied are taken (devices, CPUs, memory) from the capacity before
    requeue_running plans on it (migrate.take_moves, tested on its own in test_migrate)."""
    from slurm_hetero.bridge.daemon import BridgeDaemon
    from slurm_hetero.bridge.migrate import Move
    from slurm_hetero.bridge.snapshot import PoolCapacity
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    caps = {"h100@x86_64": PoolCapacity(total=8, free=4, free_max_node=4, fit=[(32, 65536)] * 4),
            "v100@x86_64": PoolCapacity(total=4, free=0, free_max_node=0, fit=[])}
    monkeypatch.setattr(daemon, "take_snapshot", lambda *_, **__: caps)
    d = BridgeDaemon(site, HostileRunner([]), tmp_path / "snap.lua", every=0.0,  # type: ignore[arg-type]
                     log=lambda _: None)
    move = Move(7, "v100@x86_64", "h100@x86_64", 2, "gres/gpu:h100:2", "gpu", "h100", "{}", "room",
                cpus=12, mem_mib=4096)
    monkeypatch.setattr(d, "move_pending", lambda queue, c: [move])
    seen: list[tuple[int, int, list[tuple[int, int]] | None]] = []

    def requeue_running(queue: object, c: dict[str, PoolCapacity]) -> list[object]:
        h = c["h100@x86_64"]
        seen.append((h.free, h.free_max_node, h.fit))
        return []

    monkeypatch.setattr(d, "requeue_running", requeue_running)
    d.round()
    assert seen == [(2, 2, [(20, 61440)] * 2)]
