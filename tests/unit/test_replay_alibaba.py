"""Replay of the Alibaba GPU trace: its pods CSV read as replayable jobs (on the shipped head
files), the site shaped like its nodes list, fixed-model vs --accel requests, the bridge-migrate
arm's site."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.errors import InputError
from slurm_hetero.replay import alibaba
from slurm_hetero.replay.cli import replay_group
from slurm_hetero.replay.run import ARMS, migrating_site, parse_arms, request_for, unlimited_site
from slurm_hetero.replay.submit import sbatch_argv
from slurm_hetero.replay.trace import is_pods, read_trace, read_trace_counted, select_for
from slurm_hetero.replay.window import Capacity, ModelMix, ReplayJob, Window, select
from slurm_hetero.site import load_site
from slurm_hetero.site.load import load_site_text

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
REPLAY = Path(__file__).resolve().parents[1] / "data" / "replay"
PODS = TRACES / "alibaba-gpu-2023-head-pods.csv"
NODES = TRACES / "alibaba-gpu-2023-head-nodes.csv"
TRACE_MODELS = ("P100", "V100M16", "V100M32", "T4", "A10", "G2", "G3")


def test_the_pods_csv_is_known_by_its_header(tmp_path: Path) -> None:
    renamed = tmp_path / "whatever.csv"
    renamed.write_bytes(PODS.read_bytes())
    assert alibaba.is_pods_csv(PODS) and alibaba.is_pods_csv(renamed)
    assert not alibaba.is_pods_csv(NODES)
    df = read_trace(renamed)
    assert is_pods(df) and len(df) == 278


def test_pods_become_jobs_never_scheduled_ones_dropped_with_a_count() -> None:
    df, dropped = read_trace_counted(PODS)
    # The head has 300 pods, 22 of them Pending with no scheduled_time.
    assert dropped == Counter({"never scheduled (deleted while pending)": 22})
    assert len(df) == 278 and df["start"].notna().all()
    first = df.iloc[0]  # openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
    assert first["job_id"] == "openb-pod-0000"
    assert (first["submit"], first["runtime_s"], first["req_cpus"], first["req_accel"]) == (0, 12537496, 12, 1)
    # A fraction of a GPU (openb-pod-0001: gpu_milli 460) asks for a whole one.
    second = df.iloc[1]
    assert second["req_accel"] == 1 and second["devices"] == pytest.approx(0.46)
    # The derived limit: twice the runtime rounded up to 15 minutes, never below the runtime.
    assert (df["req_time_s"] >= df["runtime_s"]).all()
    assert (df["req_time_s"] % alibaba.LIMIT_ROUND_S == 0).all()
    assert df.loc[df["runtime_s"] == 382, "req_time_s"].tolist() == [900.0]
    assert alibaba.derived_limit_s(1000) == 2700


def test_gpu_spec_names_the_model_where_the_trace_gives_one(tmp_path: Path) -> None:
    lines = PODS.read_text().splitlines()
    head = lines[0].split(",")
    spec = head.index("gpu_spec")
    row = lines[1].split(",")
    row[spec] = "T4"
    other = lines[2].split(",")
    other[spec] = "V100M16|V100M32"
    f = tmp_path / "pods.csv"
    f.write_text("\n".join([lines[0], ",".join(row), ",".join(other), *lines[3:]]) + "\n")
    df = read_trace(f)
    assert df["model"].iloc[0] == "T4" and df["model"].iloc[1] == "V100M16|V100M32"
    site = load_site(REPLAY / "alibaba-site.yaml")
    mix = ModelMix(site)
    assert mix.choose("openb-pod-0000", 1, 12, "T4") == mix.pools["t4"]
    assert mix.choose("x", 1, 1, "V100M16|V100M32").model in ("v100-16gb", "v100")  # type: ignore[union-attr]
    assert mix.choose("x", 1, 1, "H100") is not None  # a model the site lacks: drawn like no name


def test_a_malformed_pods_file_names_the_line(tmp_path: Path) -> None:
    lines = PODS.read_text().splitlines()
    row = lines[5].split(",")
    row[8] = "soon"  # creation_time
    f = tmp_path / "pods.csv"
    f.write_text("\n".join([lines[0], *lines[1:5], ",".join(row)]) + "\n")
    with pytest.raises(InputError, match=r"pods.csv:6: field creation_time is 'soon', not a number"):
        read_trace(f)


def shares(groups: list[alibaba.ScaledGroup]) -> tuple[dict[str, float], dict[str, float]]:
    gpus = [g for g in groups if g.trace_model]
    t, s = sum(g.trace_gpus for g in gpus), sum(g.gpus for g in gpus)
    return ({g.trace_model: g.trace_gpus / t for g in gpus}, {g.trace_model: g.gpus / s for g in gpus})


def test_the_site_keeps_the_model_mix_and_loads() -> None:
    nodes = alibaba.read_nodes(NODES)
    assert set(nodes) == {"P100", "V100M16", "V100M32", "T4", "G2", "G3"}  # the head has no A10
    groups = alibaba.scale_groups(nodes, 1 / 10)
    trace, site = shares(groups)
    assert set(site) == set(trace)
    for m in trace:
        assert abs(site[m] - trace[m]) < 0.04, (m, trace[m], site[m])
    # Each model's most common node shape, kept whole where a node's worth is left.
    g2 = next(g for g in groups if g.trace_model == "G2")
    assert (g2.shape.gpus, g2.shape.cpus, g2.nodes) == (8, 96, 10)  # 99 nodes of 8 GPUs at 1/10
    text = alibaba.site_yaml(alibaba.site_data(nodes, 1 / 10, "ali"), NODES, "1/10", [])
    s = load_site_text(text, "generated")
    assert sum(g.node_count for g in s.node_groups) == sum(g.nodes for g in groups) <= 24
    models = {a.model.id: a.model for g in s.node_groups for a in g.accelerators}
    assert set(models) == {alibaba.MODELS[m][0] for m in trace}
    assert models["t4"].units < models["v100"].units < models["alibaba-g3"].units  # datasheet order
    assert "undisclosed" in models["alibaba-g2"].source


def test_the_shipped_sites_are_the_generator_s_and_hold_every_model() -> None:
    for name, n_nodes in (("alibaba-site.yaml", 14), ("alibaba-site-small.yaml", 8)):
        site = load_site(REPLAY / name)
        assert sum(g.node_count for g in site.node_groups) == n_nodes
        gres = {a.model.gres_type for g in site.node_groups for a in g.accelerators}
        assert gres == {"p100", "v100m16", "v100", "t4", "a10", "g2", "g3"}
    site = load_site(REPLAY / "alibaba-site.yaml")
    devices = Counter({p.model: p.devices for p in ModelMix(site).pools.values()})
    assert devices["alibaba-g2"] / sum(devices.values()) == pytest.approx(4392 / 6212, abs=0.03)


def test_bad_nodes_file_and_scale_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "nodes.csv"
    f.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,1024,2,H100\n")
    with pytest.raises(InputError, match=r"nodes.csv:2: GPU model 'H100' is not one of P100"):
        alibaba.read_nodes(f)
    for bad in ("0", "2", "x", "1/0"):
        with pytest.raises(InputError, match="--scale"):
            alibaba.parse_scale(bad)


def test_site_command_writes_a_valid_site_or_nothing(tmp_path: Path) -> None:
    cli = replay_group(lambda _w: None)
    out = tmp_path / "site.yaml"
    r = CliRunner().invoke(cli, ["site", "--nodes", str(NODES), "--pods", str(PODS), "--scale", "1/10",
                                 "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "G2" in r.output and "GPU load" in r.output
    load_site(out)
    bad = tmp_path / "bad.yaml"
    r = CliRunner().invoke(cli, ["site", "--nodes", str(NODES), "--name", "Not-Valid", "-o", str(bad)])
    assert r.exit_code == 2 and not bad.exists()


# --- requests per arm ---------------------------------------------------------------------

def test_plain_asks_a_fixed_model_the_bridge_asks_nvidia_any() -> None:
    site = load_site(REPLAY / "alibaba-site.yaml")
    df = read_trace(PODS)
    sel = select_for(df, Window(10017700, 0.25), site)
    measured = [j for j in sel.jobs if j.measured]
    assert len(measured) == 4 and all(j.one_node and j.fixed_gres for j in measured)
    j = measured[0]
    plain = sbatch_argv(j, request_for(site, ARMS["plain"]), Path("/w/j.sh"), Path("/w"))
    assert f"--gres={j.fixed_gres}:1" in plain and "--nodes=1" in plain
    assert not any(a.startswith("--accel") for a in plain)
    bridged = sbatch_argv(j, request_for(site, ARMS["bridge-nomodel"]), Path("/w/j.sh"), Path("/w"))
    assert "--accel=nvidia:1" in bridged and "--nodes=1" in bridged
    assert not any(a.startswith("--gres") for a in bridged)
    # A CPU-only pod asks no GRES in either arm.
    cpu = ReplayJob("c", 0, 60, 15, 4, 0, "", True, one_node=True)
    for arm in ("plain", "bridge-migrate"):
        argv = sbatch_argv(cpu, request_for(site, ARMS[arm]), Path("/j"), Path("/w"))
        assert not any(a.startswith(("--gres", "--accel")) for a in argv)


def test_the_fixed_model_is_a_seeded_draw_by_the_model_mix() -> None:
    site = load_site(REPLAY / "alibaba-site.yaml")
    mix = ModelMix(site)
    drawn = Counter(mix.choose(f"pod-{i}", 1, 4).model for i in range(4000))  # type: ignore[union-attr]
    total = sum(p.devices for p in mix.pools.values())
    for m, p in mix.pools.items():
        assert abs(drawn[m] / 4000 - p.devices / total) < 0.03, (m, drawn[m])
    assert mix.choose("pod-7", 1, 4) == mix.choose("pod-7", 1, 4)  # the same job, the same model
    # Eight GPUs fit only G2 nodes here; 120 CPUs only the 128-core A10 and G3 nodes.
    assert {mix.choose(f"p{i}", 8, 8).model for i in range(50)} == {"alibaba-g2"}  # type: ignore[union-attr]
    assert {mix.choose(f"p{i}", 1, 120).model for i in range(50)} <= {"a10", "alibaba-g3"}  # type: ignore[union-attr]
    assert mix.choose("p", 8, 120) is None


def test_pods_larger_than_every_node_are_skipped_with_a_reason() -> None:
    site = load_site(REPLAY / "alibaba-site-small.yaml")
    df = read_trace(PODS)
    big = df.copy()
    big.loc[:, "req_cpus"] = 200.0
    sel = select(big, Window(10017700, 0.25), Capacity.of(site), mix=ModelMix(site), one_node=True)
    assert not sel.jobs and sel.skipped == Counter({"larger than every node": 4})


def test_carried_over_pods_keep_what_was_left_and_are_not_measured() -> None:
    site = load_site(REPLAY / "alibaba-site.yaml")
    df = read_trace(PODS)
    w = Window(10017700, 0.25)
    sel = select_for(df, w, site)
    carried = [j for j in sel.jobs if not j.measured]
    assert sel.carried == len(carried) > 0
    running = df[(df["submit"] < w.first) & (df["end"] > w.first)]
    assert len(running) == len(carried) + sum(sel.skipped.values())
    pod0 = next(j for j in carried if j.trace_id == "openb-pod-0000")  # ran from 0 to 12537496
    assert (pod0.offset_s, pod0.runtime_s) == (0, 12537496 - 10017700)
    assert pod0.limit_min is not None and pod0.limit_min * 60 >= pod0.runtime_s
    plain = select(df, w, Capacity.of(site), mix=ModelMix(site), one_node=True)
    assert plain.carried == 0 and all(j.measured for j in plain.jobs)


# --- the bridge-migrate arm -----------------------------------------------------------------

def test_bridge_migrate_runs_on_the_site_with_pending_migration(tmp_path: Path) -> None:
    assert [a.name for a in parse_arms("plain,bridge-migrate")] == ["plain", "bridge-migrate"]
    arm = ARMS["bridge-migrate"]
    assert arm.bridge and arm.migrate and not arm.model
    site = load_site(REPLAY / "alibaba-site-small.yaml")
    assert not site.migration.pending
    moved = migrating_site(site, tmp_path / "arm.site.yaml")
    assert moved.migration.pending and moved.path == tmp_path / "arm.site.yaml"
    assert [g.names for g in moved.node_groups] == [g.names for g in site.node_groups]
    assert migrating_site(moved, tmp_path / "again.yaml") is moved  # already on: unchanged
    assert not (tmp_path / "again.yaml").exists()


def test_bridge_nolimits_keeps_the_model_but_every_users_limit(tmp_path: Path) -> None:
    from slurm_hetero.conf.render import render_site

    arm = ARMS["bridge-nolimits"]
    assert arm.bridge and arm.model and not arm.predicted_limits and ARMS["bridge"].predicted_limits
    site = load_site(REPLAY / "kth-site.yaml")
    assert [p.predicted_limits for p in site.partitions] == [True]
    off = unlimited_site(site, tmp_path / "arm.site.yaml")
    assert [p.predicted_limits for p in off.partitions] == [False]
    assert [(p.name, p.max_time) for p in off.partitions] == [(p.name, p.max_time) for p in site.partitions]
    assert unlimited_site(off, tmp_path / "again.yaml") is off and not (tmp_path / "again.yaml").exists()
    on_lua, off_lua = (render_site(s)["job_submit.lua"] for s in (site, off))
    assert 'local PREDICTED_LIMITS = { ["batch"] = true, }' in on_lua
    assert "local PREDICTED_LIMITS = { }" in off_lua


def test_utilisation_in_normalized_units_and_accelerator_waits() -> None:
    from dataclasses import replace

    from slurm_hetero.replay.metrics import ALL, Outcome, Pools, accel_wait_all, figures

    site = load_site(REPLAY / "alibaba-site-small.yaml")
    pools = Pools(site)
    t4, g2 = "t4@x86_64", "alibaba-g2@x86_64"
    assert pools.capacity[t4] == 2 and pools.capacity[g2] == 16

    def out(jid: str, pool: str, accel: int, start: float, end: float, due: float = 0.0) -> Outcome:
        return Outcome(jid, jid, True, due, due, start, end, "COMPLETED", int(end - start), int(end - start),
                       3600, 4, accel, pool)

    # One hour: a T4 busy all of it, a G2 half of it (waited 600 s), a CPU job (waited 60 s).
    outs = [out("a", t4, 1, 0, 3600), out("b", g2, 1, 600, 2400, due=0), out("c", "cpu@x86_64", 0, 60, 120)]
    figs = figures(outs, pools.capacity, 0.0, 1.0, 3600.0, units=pools.units)
    u_t4, u_g2 = pools.units[t4], pools.units[g2]
    assert figs[t4].units_used_h == pytest.approx(u_t4) and figs[t4].units_capacity_h == pytest.approx(2 * u_t4)
    assert figs[t4].units_utilisation == pytest.approx(0.5)
    assert figs[g2].units_used_h == pytest.approx(0.5 * u_g2)
    total = sum(pools.units[k] * pools.capacity[k] for k in pools.units)
    assert figs[ALL].units_utilisation == pytest.approx((u_t4 + 0.5 * u_g2) / total)
    assert (figs[ALL].accel_jobs, figs[ALL].accel_wait_mean) == (2, 300.0)
    # A GPU job never started counts its wait so far (3600 - 1000 s), not nothing.
    pending = Outcome("d", "d", True, 1000.0, 1000.0, None, None, "PENDING", 60, 60, 3600, 4, 1, "unassigned")
    figs = figures([*outs, pending], pools.capacity, 0.0, 1.0, 3600.0, units=pools.units)
    got: tuple[object, ...] = (figs[ALL].accel_jobs, figs[ALL].accel_wait_mean)  # pytest.approx in a tuple: mypy's strict equality sees no overlap
    assert got == (3, pytest.approx((0 + 600 + 2600) / 3))
    assert figs["cpu@x86_64"].units_used_h is None
    # Carried-over jobs too (not measured): one never started waits the whole replay.
    carried = replace(pending, trace_id="e", job_id="e", measured=False, due=0.0)
    assert accel_wait_all([*outs, pending, carried], 3600.0) == pytest.approx((0 + 600 + 2600 + 3600) / 4)
    assert figs[ALL].accel_wait_mean == pytest.approx((0 + 600 + 2600) / 3)  # measured only
    assert accel_wait_all([outs[2]], 3600.0) is None  # no accelerator job


def test_run_on_the_pods_file_reports_bad_windows_before_booting(tmp_path: Path) -> None:
    def no_cluster(_w: Path) -> object:
        raise AssertionError("no cluster may be booted here")

    base = ["run", "--trace", str(PODS), "--site", str(REPLAY / "alibaba-site-small.yaml"),
            "--arms", "plain,bridge-migrate", "--workdir", str(tmp_path)]
    r = CliRunner().invoke(replay_group(no_cluster), [*base, "--start", "busiest:9999"])
    assert r.exit_code == 2 and "non-overlapping windows" in r.output, r.output
    r = CliRunner().invoke(replay_group(no_cluster), [*base, "--start", "busiest:x"])
    assert r.exit_code == 2 and "--start" in r.output, r.output


def test_the_easy_arms_render_one_reservation_per_partition(tmp_path: Path) -> None:
    """plain-easy, central-easy and clairvoyant-easy: their site's slurm.conf sets backfill to
    reserve for each partition's first pending job only; a site that sets SchedulerParameters
    itself is refused (the arm would measure a mix)."""
    from slurm_hetero.conf.render import render_site
    from slurm_hetero.errors import InputError
    from slurm_hetero.replay.run import EASY_RESERVE, scheduler_site

    assert {n for n, a in ARMS.items() if a.scheduler == EASY_RESERVE} == {"plain-easy", "central-easy",
                                                                         "clairvoyant-easy"}
    assert (ARMS["central-easy"].predictor, ARMS["plain-easy"].bridge) == ("model-central", False)
    site = load_site(REPLAY / "kth-site.yaml")
    easy = scheduler_site(site, tmp_path / "arm.site.yaml", EASY_RESERVE)
    lines = render_site(easy)["slurm.conf"].splitlines()
    assert [x for x in lines if x.startswith("SchedulerParameters")] == ["SchedulerParameters=bf_job_part_count_reserve=1"]
    assert not any(x.startswith("SchedulerParameters") for x in render_site(site)["slurm.conf"].splitlines())
    assert [p.name for p in easy.partitions] == [p.name for p in site.partitions]
    with pytest.raises(InputError, match="sets SchedulerParameters already"):
        scheduler_site(easy, tmp_path / "twice.site.yaml", "bf_continue")


def test_the_tight_arms_differ_from_theirs_only_in_the_margin() -> None:
    """central-tight and clairvoyant-tight measure the daemon's margin alone: the same
    predictor, bridge and Slurm as bridge-central and clairvoyant."""
    import dataclasses

    from slurm_hetero.replay.run import TIGHT_ROUNDS

    for tight, base in (("central-tight", "bridge-central"), ("clairvoyant-tight", "clairvoyant")):
        assert ARMS[tight].margin_rounds == TIGHT_ROUNDS == 1.5
        assert dataclasses.replace(ARMS[tight], name=base, margin_rounds=None) == ARMS[base]


def test_the_area_arm_differs_from_bridge_central_only_in_its_predictors_order() -> None:
    import dataclasses

    from slurm_hetero.replay.run import MODEL_EXPORTS

    arm = ARMS["bridge-area"]
    assert dataclasses.replace(arm, name="bridge-central", predictor="model-central") == ARMS["bridge-central"]
    assert MODEL_EXPORTS[arm.predictor] == ("central", None, "area")
    assert MODEL_EXPORTS["model-central"] == ("central", None, "central")
