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
from slurm_hetero.replay.metrics import ALL, release_lags, runtime_errors
from slurm_hetero.replay.run import ARMS, ArmResult, run_arm, train_model
from slurm_hetero.replay.trace import read_trace
from slurm_hetero.replay.window import Capacity, ModelMix, Selection, Window, select
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
    work = tmp_path_factory.mktemp("replay")
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
    bad = [(o.trace_id, o.state) for o in r.outcomes if o.state != "COMPLETED"]
    assert bad == [], f"{arm}: jobs that did not complete: {bad}"
    errors = runtime_errors(r.outcomes)
    assert len(errors) == 52
    assert max(abs(e) for e in errors) <= runtime_bound_s(SPEED), sorted(errors)
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
    work = tmp_path_factory.mktemp("replay-alibaba")
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
