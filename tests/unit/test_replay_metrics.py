"""Replay metrics and fidelity statistics on synthetic sacct rows (no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetero.replay.fidelity import Fidelity, compare, measure, start_errors
from slurm_hetero.replay.metrics import (
    ALL,
    Outcome,
    PoolFigures,
    Pools,
    bsld,
    figures,
    outcomes,
    runtime_errors,
)
from slurm_hetero.replay.report import comparison
from slurm_hetero.replay.run import ArmResult
from slurm_hetero.replay.sacct import FIELDS, parse_rows
from slurm_hetero.replay.window import ReplayJob, Window
from slurm_hetero.site import Site, load_site

DATA = Path(__file__).resolve().parents[1] / "data"
T0 = 1_000_000


@pytest.fixture(scope="module")
def kth() -> Site:
    return load_site(DATA / "replay" / "kth-site.yaml")


@pytest.fixture(scope="module")
def demo() -> Site:
    return load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")


def row(jid: str, start: int | None, end: int | None, state: str = "COMPLETED", cpus: int = 1,
        nodes: str = "sp2-01", limit: int = 10, tres: str = "", admin: str = "") -> str:
    tres = tres or f"billing={cpus},cpu={cpus},mem={cpus}G,node=1"
    elapsed = (end - start) if start and end else 0
    return "|".join([jid, "batch", str(cpus), tres, nodes, str(T0), str(T0), str(start or "Unknown"),
                     str(end or "Unknown"), str(elapsed), str(limit), state, admin])


def rj(tid: str, offset: int, runtime: int, limit_min: int = 10, cpus: int = 1, measured: bool = True) -> ReplayJob:
    return ReplayJob(tid, offset, runtime, limit_min, cpus, 0, "1", measured)


def test_parse_rows_reads_epoch_times_states_and_the_bridge_comment_whole() -> None:
    text = "\n".join([
        row("1", T0 + 5, T0 + 65),
        row("2", None, None, state="PENDING"),
        row("3", T0, T0 + 600, state="CANCELLED by 0", tres="billing=16,cpu=1,gres/gpu=2,gres/gpu:h100=2"),
        row("4", T0, T0 + 60, admin='{"hetero":1,"pred":{"p50":30,"p90":120},"note":"a|b"}'),
    ]) + "\n"
    r = {x.job_id: x for x in parse_rows(text)}
    assert (r["1"].start, r["1"].end, r["1"].elapsed, r["1"].limit_min) == (T0 + 5, T0 + 65, 60, 10)
    assert r["2"].start is None and r["2"].state == "PENDING"
    assert r["3"].state == "CANCELLED" and (r["3"].accel, r["3"].accel_model) == (2, "h100")
    assert r["4"].predicted_s == 120.0 and r["4"].admin["note"] == "a|b"
    assert len(FIELDS) == 13


def test_sacct_is_read_again_until_slurmdbd_has_booked_every_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay whose jobs all left slurmctld's queue reads sacct until none shows RUNNING
    (slurmdbd hears of an end a moment after slurmctld), or gives up after wait_s."""
    from slurm_hetero.replay.sacct import fetch_settled, not_ended
    from slurm_hetero.slurm.runner import Runner
    from tests.fakeslurm import FakeSlurm

    booked = [row("1", T0, T0 + 60), row("2", T0, T0 + 30, state="REQUEUED"), row("2", T0 + 40, None, "RUNNING")]
    ended = [*booked[:2], row("2", T0 + 40, T0 + 90)]
    answers = iter(["\n".join(booked) + "\n"] * 2 + ["\n".join(ended) + "\n"])
    slurm = FakeSlurm(monkeypatch).on("sacct", lambda argv, env: next(answers))
    now = [0.0]
    naps: list[float] = []

    def nap(s: float) -> None:
        naps.append(s)
        now[0] += s

    text = fetch_settled(Runner(), T0, T0 + 100, wait_s=10, clock=lambda: now[0], sleep=nap)
    assert not_ended(text) == [] and naps == [1.0, 1.0] and len(slurm.argvs("sacct")) == 3
    assert not_ended("\n".join(booked) + "\n") == ["2"]
    # slurmdbd never catches up: the last text after wait_s, its job still RUNNING.
    FakeSlurm(monkeypatch).on("sacct", "\n".join(booked) + "\n")
    now[0], naps[:] = 0.0, []
    assert not_ended(fetch_settled(Runner(), T0, T0 + 100, wait_s=3, clock=lambda: now[0], sleep=nap)) == ["2"]
    assert naps == [1.0, 1.0, 1.0]


def test_live_jobs_get_their_admin_comment_from_slurmctld() -> None:
    """sacct (22.05) has no admin comment for a job that has not ended: the replay takes it
    from `squeue --json` (captured on the demo cluster: job 7 RUNNING with the bridge's)."""
    from slurm_hetero.replay.sacct import by_job, with_live_comments

    rows = by_job(parse_rows("\n".join([
        row("6", T0, None, state="RUNNING"), row("7", T0, None, state="RUNNING"),
        row("8", None, None, state="PENDING"), row("9", T0, T0 + 60, admin='{"hetero":1,"pred":{"p90":90}}'),
    ]) + "\n"))
    assert all(not rows[k].admin for k in "678")
    live = with_live_comments(rows, (DATA / "captured" / "squeue-json-22.05.json").read_text())
    assert live["7"].admin["pool"] == "v100@x86_64" and live["7"].admin["accel"] == "any:1"
    assert live["6"].admin == {} and live["8"].admin == {}  # none in slurmctld either
    assert live["9"] is rows["9"]  # ended: sacct's own comment stays


def test_figures_bsld_waits_utilisation_and_kills(kth: Site) -> None:
    jobs = [rj("a", 0, 60), rj("b", 0, 600, limit_min=5, cpus=50), rj("c", 100, 5), rj("d", 100, 100),
            rj("w", -500, 1000, cpus=25, measured=False)]
    sacct = parse_rows("\n".join([
        row("1", T0, T0 + 60),                                       # no wait, bsld 1
        row("2", T0 + 90, T0 + 90 + 300, "TIMEOUT", cpus=50, limit=5),  # killed at its own 5 min
        row("3", T0 + 130, T0 + 135),                                # wait 30, run 5 → bsld 3.5
        row("4", T0 + 100, T0 + 160, "TIMEOUT", limit=1),           # killed at 60 s, user asked 10 min
        row("5", T0 - 500, T0 + 100, cpus=25),                        # warm-up: used, not measured
    ]))
    subs = [(j, str(i + 1), float(T0 + j.offset_s), float(T0 + j.offset_s)) for i, j in enumerate(jobs)]
    outs = outcomes(subs, {r.job_id: r for r in sacct}, Pools(kth))
    f = figures(outs, Pools(kth).capacity, T0, 1.0, T0 + 3600)
    assert set(f) == {ALL, "cpu@x86_64"}
    a = f[ALL]
    assert (a.jobs, a.started, a.killed_at_limit, a.killed_early, a.failed, a.unfinished) == (4, 4, 2, 1, 0, 0)
    assert a.wait_mean == pytest.approx((0 + 90 + 30 + 0) / 4)
    assert a.ave_bsld == pytest.approx((1 + (90 + 300) / 300 + 35 / 10 + 1) / 4)
    used = 60 + 300 * 50 + 5 + 60 + 100 * 25
    assert a.utilisation == pytest.approx(used / (100 * 3600))
    assert sorted(runtime_errors(outs)) == [-40.0, 0.0, 0.0, 0.0, 0.0]  # d: 40 s short of its runtime


def test_a_job_the_daemon_ended_at_its_own_limit_counts_as_at_limit(kth: Site) -> None:
    """Where limits are soft (OverTimeLimit), the bridge daemon ends a job at its own limit
    with scancel: CANCELLED, its admin comment saying so. That is a kill at the limit (early
    when before the user's limit), not a failure; a user's own scancel stays a failure."""
    ended = '{"hetero":1,"shortened":true,"user_limit_min":5,"ended":"own_limit","own_limit_min":5}'
    jobs = [rj("a", 0, 600, limit_min=5), rj("b", 0, 600, limit_min=10), rj("c", 0, 600, limit_min=10)]
    sacct = parse_rows("\n".join([
        row("1", T0, T0 + 300, "CANCELLED by 0", limit=5, admin=ended),   # at its user's 5 min
        row("2", T0, T0 + 60, "CANCELLED by 0", limit=1, admin=ended),    # 60 s of the user's 10 min
        row("3", T0, T0 + 60, "CANCELLED by 0", limit=10),                # a user's scancel
    ]))
    outs = outcomes([(j, str(i + 1), float(T0), float(T0)) for i, j in enumerate(jobs)],
                    {r.job_id: r for r in sacct}, Pools(kth))
    assert [o.at_limit for o in outs] == [True, True, False]
    f = figures(outs, Pools(kth).capacity, T0, 1.0, T0 + 3600)[ALL]
    assert (f.killed_at_limit, f.killed_early, f.failed, f.bad_states) == (2, 1, 1, {"CANCELLED": 1})
    assert sorted(runtime_errors(outs)) == [-540.0, 0.0]  # a ran what its limit allowed; b 540 s short


def test_unstarted_and_missing_jobs_count_against_the_arm(kth: Site) -> None:
    jobs = [rj("a", 0, 60), rj("b", 0, 60)]
    sacct = parse_rows(row("1", None, None, state="PENDING") + "\n")
    outs = outcomes([(j, str(i + 1), float(T0), None) for i, j in enumerate(jobs)],
                    {r.job_id: r for r in sacct}, Pools(kth))
    f = figures(outs, Pools(kth).capacity, T0, 1.0, T0 + 600)[ALL]
    assert (f.started, f.unfinished, f.bad_states) == (0, 2, {"NOT_IN_SACCT": 1})
    assert f.ave_bsld == pytest.approx(600 / 60 + 1)  # waited 600 s so far, runs 60: a lower bound


def test_a_job_still_running_counts_its_whole_runtime(kth: Site) -> None:
    """Started late, still running when the replay stops: its slowdown is over the runtime it
    will have (the trace's), not over the part seen, which would inflate it."""
    sacct = parse_rows(row("1", T0 + 3000, None, state="RUNNING") + "\n")
    outs = outcomes([(rj("a", 0, 3600, limit_min=120), "1", float(T0), float(T0))], {"1": sacct[0]}, Pools(kth))
    f = figures(outs, Pools(kth).capacity, T0, 1.0, T0 + 3600)[ALL]
    assert (f.started, f.unfinished) == (1, 1)
    assert f.ave_bsld == pytest.approx((3000 + 3600) / 3600)  # not (3000 + 600) / 600


def test_pools_of_a_heterogeneous_site(demo: Site) -> None:
    p = Pools(demo)
    assert p.capacity["h100@x86_64"] == 8 and p.capacity["ascend-910b@aarch64"] == 16
    assert p.capacity["cpu@x86_64"] == 256 and p.units["h100@x86_64"] > 1
    gpu = parse_rows(row("1", T0, T0 + 1, nodes="h100-01", tres="cpu=1,gres/gpu=1,gres/gpu:h100=1") + "\n")[0]
    npu = parse_rows(row("2", T0, T0 + 1, nodes="npu-[01-02]", tres="cpu=1,gres/npu=2,gres/npu:910b=2") + "\n")[0]
    cpu = parse_rows(row("3", T0, T0 + 1, nodes="cpu-arm-01") + "\n")[0]
    assert (p.of(gpu), p.of(npu), p.of(cpu), p.of(None)) == (
        "h100@x86_64", "ascend-910b@aarch64", "cpu@aarch64", "unassigned")


def test_bsld_bound() -> None:
    assert bsld(0, 1) == 1.0 and bsld(20, 1) == pytest.approx(2.1) and bsld(100, 100) == 2.0


def _out(tid: str, due: float, start: float, run: float, expected: int | None = None) -> Outcome:
    exp = int(run) if expected is None else expected
    return Outcome(tid, tid, True, due, due, start, start + run, "COMPLETED", exp, exp, 600, 1, 0, "p")


def test_fidelity_start_and_runtime_errors_and_the_refusal() -> None:
    x1 = [_out("1", 0, 0, 100), _out("2", 10, 110, 50), _out("3", 20, 25, 10)]
    xk = [_out("1", 1000, 1002, 103, 100), _out("2", 1010, 1140, 52, 50), _out("4", 5, 5, 1)]
    assert start_errors(x1, xk) == [2.0, 30.0]
    figs = {ALL: figures(x1, {"cpu@x": 1}, 0, 1, 200)[ALL]}
    figk = {ALL: figures(xk, {"cpu@x": 1}, 1000, 1, 1200)[ALL]}
    fid = measure(x1, xk, figs, figk, 20.0)
    assert fid.jobs == 2 and fid.start_error["max_abs"] == 30.0 and fid.runtime_error_xk["max_abs"] == 3.0
    assert Fidelity.from_json(fid.to_json()) == fid
    a = figs[ALL]
    assert fid.bsld_rel_error is not None and fid.bsld_rel_error > 0
    # An arm that differs less than the replay's own error is not compared...
    same = compare(a, a, fid)
    assert not same.comparable and "within the replay's own error" in same.why
    # ...nor one whose waits differ less than the p90 start error.
    assert a.ave_bsld is not None
    closer = PoolFigures(ALL, ave_bsld=a.ave_bsld * 10, wait_mean=(a.wait_mean or 0) + 1)
    v = compare(a, closer, fid)
    assert not v.comparable and "start-time error" in v.why
    far = PoolFigures(ALL, ave_bsld=a.ave_bsld * 10, wait_mean=(a.wait_mean or 0) + 10_000)
    assert compare(a, far, fid).comparable
    assert compare(a, far, None).comparable and "not checked" in compare(a, far, None).why


def test_comparison_gives_ratios_only_when_comparable() -> None:
    def arm(name: str, bsld_: float, wait: float) -> ArmResult:
        f = {ALL: PoolFigures(ALL, ave_bsld=bsld_, wait_mean=wait)}
        return ArmResult(name, 20, Window(0, 1), 0, 0, [], f, True)
    fid = Fidelity(20, 10, {"p90_abs": 60.0}, {}, {}, 2.0, 2.2)  # 10% AVEbsld error
    rows = comparison([arm("plain", 2.0, 600), arm("bridge", 1.4, 300), arm("b2", 1.9, 590)], fid)
    assert rows[0]["ave_bsld_ratio"] == pytest.approx(0.7) and rows[0]["wait_mean_ratio"] == 0.5
    assert rows[1]["comparable"] is False and "ave_bsld_ratio" not in rows[1]
