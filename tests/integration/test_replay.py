"""`replay` on the real Slurm: a 30-minute window of the KTH trace (52 jobs, shipped in
tests/data/replay/) at x20, both arms, each on a fresh dev cluster under one accelerated
clock. The accounting must match the trace: every job submitted and released at its
time, ran for its runtime within the fidelity bound, none killed, none lost; the bridge
arm's jobs carry its decisions, the plain arm's none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_hetero.devcluster.replay import DevReplayCluster
from slurm_hetero.replay.fidelity import runtime_bound_s
from slurm_hetero.replay.metrics import ALL, Pools, release_lags, runtime_errors
from slurm_hetero.replay.run import ARMS, ArmResult, reference_units, run_arm, train_model
from slurm_hetero.replay.trace import read_trace
from slurm_hetero.replay.window import Capacity, ModelMix, ReplayJob, Selection, Window, select
from slurm_hetero.site import load_site

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
WINDOW = Window(850956401, 0.5)  # tests/data/replay/README.md
SPEED = 20.0


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ArmResult]:
    site = load_site(DATA / "kth-site.yaml")
    df = read_trace(DATA / "kth-window.swf")
    sel = select(df, WINDOW, Capacity.of(site))
    assert len(sel.jobs) == 52 and not sel.skipped
    work = tmp_path_factory.mktemp("rp")
    model = train_model(df, WINDOW, work / "predict.lua")
    out = {}
    for name in ("plain", "bridge"):
        t = time.monotonic()
        out[name] = run_arm(DevReplayCluster, work / name, site, sel, WINDOW, ARMS[name], SPEED, model,
                            say=print, drain_hours=1.0)
        print(f"{name}: {time.monotonic() - t:.0f} s real")
    return out


@pytest.mark.parametrize("arm", ["plain", "bridge"])
def test_every_job_ran_its_runtime_at_its_time(results: dict[str, ArmResult], arm: str) -> None:
    r = results[arm]
    assert r.submit_failed == [] and r.all_ended
    assert len(r.outcomes) == 52 and len({o.job_id for o in r.outcomes}) == 52
    assert {o.partition for o in r.outcomes} == {"batch"}  # sacct's, where each job ran
    bad = [(o.trace_id, o.state) for o in r.outcomes if o.state != "COMPLETED"]
    assert bad == [], f"{arm}: jobs that did not complete: {bad}"
    errors = runtime_errors(r.outcomes)
    assert len(errors) == 52
    # a pause of this machine (a VM snapshot) adds speed x its length to every running job
    assert "paused" in r.seconds
    assert max(abs(e) for e in errors) <= runtime_bound_s(SPEED), (sorted(errors), r.seconds)
    # Released at its trace time (never before, and within a real second after).
    lags = release_lags(r.outcomes)
    assert len(lags) == 52 and min(lags) >= 0 and max(lags) <= SPEED, sorted(lags)
    # Slurm started each one: no job started before it was due.
    assert all(o.start is not None and o.start >= o.due - 1 for o in r.outcomes)
    f = r.figures[ALL]
    assert (f.jobs, f.started, f.killed_at_limit, f.killed_early, f.failed, f.unfinished) == (52, 52, 0, 0, 0, 0)
    assert f.ave_bsld is not None and f.ave_bsld >= 1.0 and f.utilisation is not None and 0.05 < f.utilisation < 0.2


def test_the_bridge_decided_and_the_plain_arm_had_no_bridge(results: dict[str, ArmResult]) -> None:
    assert results["plain"].figures[ALL].predicted == 0
    assert results["bridge"].figures[ALL].predicted == 52
    # A predicted limit never goes below what the job then ran (none killed early, above).
    for o in results["bridge"].outcomes:
        assert o.limit_final_s is not None and o.user_limit_s is not None
        assert o.limit_final_s <= o.user_limit_s


# The Alibaba GPU trace: 4 pods of its head (tests/data/traces/) in a 15-minute window, on a
# site made from its nodes list at 1/300 (8 nodes, 23 GPUs, every model of the trace), plain
# (each pod asks its fixed model) and bridge (--accel=nvidia:N) arms.
ALIBABA_WINDOW = Window(10017700, 0.25)
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


@pytest.fixture(scope="module")
def alibaba(tmp_path_factory: pytest.TempPathFactory) -> tuple[Selection, dict[str, ArmResult]]:
    site = load_site(DATA / "alibaba-site-small.yaml")
    df = read_trace(TRACES / "alibaba-gpu-2023-head-pods.csv")
    sel = select(df, ALIBABA_WINDOW, Capacity.of(site), mix=ModelMix(site), one_node=True)
    assert len(sel.jobs) == 4 and not sel.skipped and all(j.accel == 1 and j.fixed_gres for j in sel.jobs)
    work = tmp_path_factory.mktemp("ra")
    out = {name: run_arm(DevReplayCluster, work / name, site, sel, ALIBABA_WINDOW, ARMS[name], SPEED,
                         say=print, drain_hours=0.5)
           for name in ("plain", "bridge-nomodel")}
    return sel, out


@pytest.mark.parametrize("arm", ["plain", "bridge-nomodel"])
def test_alibaba_pods_ran_their_runtime_on_a_gpu(alibaba: tuple[Selection, dict[str, ArmResult]],
                                                 arm: str) -> None:
    sel, results = alibaba
    r = results[arm]
    assert r.submit_failed == [] and r.all_ended
    assert len(r.outcomes) == len(sel.jobs)
    bad = [(o.trace_id, o.state) for o in r.outcomes if o.state != "COMPLETED"]
    assert bad == [], f"{arm}: pods that did not complete: {bad}"
    errors = runtime_errors(r.outcomes)
    assert len(errors) == len(sel.jobs)
    assert max(abs(e) for e in errors) <= runtime_bound_s(SPEED), sorted(errors)
    assert all(o.start is not None and o.start >= o.due - 1 for o in r.outcomes)
    f = r.figures[ALL]
    assert (f.killed_at_limit, f.killed_early, f.unfinished, f.accel_jobs) == (0, 0, 0, len(sel.jobs))
    # Each pod held one GPU of a model of the site (sacct's AllocTRES), in the plain arm the
    # model it was given.
    fixed = {j.trace_id: j.fixed_gres for j in sel.jobs}
    models = {p.gres: p.model for p in ModelMix(load_site(DATA / "alibaba-site-small.yaml")).pools.values()}
    for o in r.outcomes:
        assert o.accel == 1, (o.trace_id, o.accel)
        model = o.pool.split("@")[0]
        assert model in models.values(), o.pool
        if arm == "plain":
            assert model == models[fixed[o.trace_id] or ""], (o.trace_id, o.pool, fixed[o.trace_id])
    assert f.units_used_h is not None and f.units_used_h > 0


# Work bodies (running migration in the harness): one pod of 1 GPU that ran 600 s,
# i.e. 600 x the site's mean units of work. The bridge places it on the cheapest free model
# (the P100, 0.15 units); without migration it does its work there, with migration.running
# the daemon requeues it into a faster pool once that pays (restart included), and it resumes
# there from its checkpoint.
WORK_JOB = ReplayJob("1", 0, 600, 30, 1, 1, "u1", True, None, True)


@pytest.fixture(scope="module")
def work_arms(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, ArmResult]]:
    site = load_site(DATA / "alibaba-site-small.yaml")
    work = tmp_path_factory.mktemp("rw")
    out = {name: run_arm(DevReplayCluster, work / name, site, Selection([WORK_JOB]), Window(0, 0.25), ARMS[name],
                         SPEED, say=print, drain_hours=1.0)
           for name in ("bridge-work", "bridge-migrate-running")}
    return work, out


def test_work_bodies_run_at_their_pools_speed_and_a_moved_job_resumes(
        work_arms: tuple[Path, dict[str, ArmResult]]) -> None:
    work, res = work_arms
    site = load_site(DATA / "alibaba-site-small.yaml")
    units = Pools(site).units
    total = WORK_JOB.runtime_s * WORK_JOB.accel * reference_units(site)[0]
    bound = runtime_bound_s(SPEED)
    [stay] = res["bridge-work"].outcomes
    assert (stay.state, stay.pool, stay.restarts) == ("COMPLETED", "p100@x86_64", 0)
    assert stay.run is not None and abs(stay.run - total / units["p100@x86_64"]) <= bound, stay
    [moved] = res["bridge-migrate-running"].outcomes
    assert moved.state == "COMPLETED" and moved.restarts == 1, moved
    (s0, e0, pool0, _), = moved.earlier
    assert pool0 == "p100@x86_64" and units[moved.pool] > units[pool0], moved
    # It resumed: the last incarnation did only what the first had not (at its pool's speed).
    left = total - (e0 - s0) * units[pool0]
    assert moved.run is not None and abs(moved.run - left / units[moved.pool]) <= 2 * bound, (moved, left)
    assert moved.end is not None and stay.end is not None
    assert moved.end - moved.due < stay.end - stay.due  # and finished sooner than staying
    for r in res.values():
        f = r.figures[ALL]
        assert r.all_ended and (f.killed_at_limit, f.failed, f.unfinished) == (0, 0, 0)
    # Its one checkpoint, written by the first incarnation on SIGTERM, was the second's base.
    folder = work / "bridge-migrate-running" / "checkpoints" / "r1"
    assert [p.name for p in sorted(folder.glob("ckpt-*"))] == ["ckpt-00000000-00000001"]
    assert '"base": "ckpt-00000000-00000001"' in (folder / "epochs" / "00000001").read_text()
