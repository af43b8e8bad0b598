"""The bridge with a real exported runtime model compiled in, under Lua 5.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.bridge.snapshot import PoolCapacity, to_lua
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.errors import InputError
from slurm_hetero.jobs.sitefactor import FactorPolicy
from slurm_hetero.predict import export_lua
from slurm_hetero.site import Site
from slurm_hetero.site.pools import pools
from slurm_hetero.slurm.comment import parse_comment
from tests.predict_fixture import export_model, history


def fresh_snapshot(js: JobSubmit, site: Site, age: int = 1) -> None:
    caps = {p.key: PoolCapacity(p.devices, p.devices, p.per_node) for p in pools(site)}
    (js.state / "hetero-snapshot.lua").write_text(to_lua(caps, js.now - age))  # type: ignore[attr-defined]


def test_backfill_partition_gets_the_predicted_limit(js: JobSubmit, site: Site) -> None:
    fresh_snapshot(js, site)
    rc, desc = js.submit({"arch": "x86_64"}, user_name="root", time_limit=10, min_cpus=1)
    assert rc == 0 and js.logs[-1][0] != "error", js.logs
    d = parse_comment(desc["admin_comment"])
    assert 1 <= d["pred"]["p50"] <= d["pred"]["p90"] <= 600
    assert desc["time_limit"] == max(1, -(-d["pred"]["p90"] // 60)) < 10
    assert (d["shortened"], d["user_limit_min"]) == (True, 10)
    assert "ext" not in d  # the trained model's jobs are extended by doubling


def test_a_model_exported_with_the_central_limit_plans_with_its_p50(site: Site, tmp_path: Path) -> None:
    """`model export --limit central`: the same model, the job's limit made of its p50 (the
    upper quantile still recorded), extended by doubling like the upper one's."""
    central = export_model(tmp_path / "central.lua", limit="central").read_text()
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=central))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    fresh_snapshot(js, site)
    # user003's history (tests/predict_fixture.py): p50 and p90 hours apart for a 10-hour request
    rc, desc = js.submit({"arch": "x86_64"}, user_name="user003", time_limit=600, min_cpus=4)
    d = parse_comment(desc["admin_comment"])
    assert rc == 0 and -(-d["pred"]["p50"] // 60) < -(-d["pred"]["p90"] // 60), d
    assert desc["time_limit"] == max(1, -(-d["pred"]["p50"] // 60)) < 600
    assert (d["shortened"], d["user_limit_min"]) == (True, 600) and "ext" not in d
    with pytest.raises(InputError, match="--limit middle"):
        export_model(tmp_path / "bad.lua", limit="middle")


def submit_user003(site: Site, tmp_path: Path, name: str, **export: Any) -> dict[str, Any]:
    """user003's 10-hour, 4-CPU job through the bridge with a central-limit model exported with
    `export`; the job_desc as the bridge left it."""
    chunk = export_model(tmp_path / f"{name}.lua", limit="central", **export).read_text()
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=chunk))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    fresh_snapshot(js, site)
    rc, desc = js.submit({"arch": "x86_64"}, user_name="user003", time_limit=600, min_cpus=4)
    assert rc == 0, js.logs
    return dict(desc)


def test_shorten_when_sure_keeps_the_user_limit_of_a_job_the_model_is_unsure_of(site: Site,
                                                                                 tmp_path: Path) -> None:
    """`model export --shorten-when-sure SHARE`: a job whose p90 is above SHARE of its user's
    limit keeps that limit (a short guess would let a long job into the short jobs' holes);
    one at or below it is shortened to its p50 as without the option."""
    def submit(sure: float) -> tuple[int, dict[str, Any]]:
        desc = submit_user003(site, tmp_path, f"m{sure}", sure=sure)
        return desc.get("time_limit", 600), parse_comment(desc["admin_comment"])

    limit, d = submit(1.0)  # a p90 never exceeds the user's limit: every job as without it
    share = d["pred"]["p90"] / 36000
    assert limit == max(1, -(-d["pred"]["p50"] // 60)) < 600 and d["shortened"] is True and share < 0.99, d
    limit, d = submit(round(share - 0.01, 4))  # unsure by that share: the user's 10 hours
    assert limit == 600 and "shortened" not in d and d["pred"]["p90"] / 36000 == share, d
    limit, d = submit(round(share + 0.01, 4))
    assert limit < 600 and d["shortened"] is True, d
    for bad in (0.0, 1.5):
        with pytest.raises(InputError, match="--shorten-when-sure"):
            export_lua.render(None, {}, 0, sure=bad)  # type: ignore[arg-type]


def test_order_upper_makes_sitefactor_of_the_upper_quantile_and_tells_the_daemon(site: Site,
                                                                                  tmp_path: Path) -> None:
    """`model export --order upper`: SiteFactor from the p90, recorded as "sf_s" (the daemon
    keeps that order as the job waits); the limit is still the p50 with `--limit central`."""
    policy = FactorPolicy()
    got = {}
    for order in ("central", "upper"):
        desc = submit_user003(site, tmp_path, order, order=order)
        d = parse_comment(desc["admin_comment"])
        got[order] = (desc["site_factor"], desc["time_limit"], d)
    sf, limit, d = got["central"]
    assert sf == d["sf"] == policy.site_factor(d["pred"]["p50"], 0) and "sf_s" not in d
    sf, limit, d = got["upper"]
    assert d["sf_s"] == d["pred"]["p90"] > d["pred"]["p50"]  # user003: hours apart
    assert sf == d["sf"] == policy.site_factor(d["pred"]["p90"], 0) < got["central"][0]
    assert limit == got["central"][1] == max(1, -(-d["pred"]["p50"] // 60)) < 600  # still the p50
    with pytest.raises(InputError, match="--order middle: choose central, upper, area"):
        export_model(tmp_path / "bad.lua", order="middle")


def test_order_area_makes_sitefactor_of_the_p50_times_the_jobs_cpus(site: Site, tmp_path: Path) -> None:
    """`model export --order area`: SiteFactor from the CPU time the job will hold (its p50
    times its CPUs, however it asks for them), recorded as "sf_s" for the daemon; of two jobs
    with one prediction the wider ranks lower. The limit is still the p50."""
    policy = FactorPolicy()
    chunk = export_model(tmp_path / "area.lua", limit="central", order="area").read_text()
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=chunk))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    fresh_snapshot(js, site)

    def submit(**cpus: Any) -> tuple[int, dict[str, Any]]:
        rc, desc = js.submit({"arch": "x86_64"}, user_name="user003", time_limit=600, **cpus)
        assert rc == 0 and not any(level == "error" for level, *_ in js.logs), js.logs
        d = parse_comment(desc["admin_comment"])
        assert desc["site_factor"] == d["sf"] == policy.site_factor(d["sf_s"], 0)
        assert desc["time_limit"] == max(1, -(-d["pred"]["p50"] // 60)) < 600  # still the p50
        return d["sf_s"] // d["pred"]["p50"], d

    one, d1 = submit(min_cpus=1)
    assert one == 1 and d1["sf_s"] == d1["pred"]["p50"]  # one CPU: as `--order central`
    assert submit(num_tasks=8, cpus_per_task=4)[0] == 32  # -n 8 -c 4, min_cpus not said
    assert submit(min_nodes=2, ntasks_per_node=3)[0] == 6  # -N 2 --ntasks-per-node 3
    wide, d64 = submit(min_cpus=64)
    assert wide == 64 and d64["sf"] < d1["sf"], (d64, d1)


def test_the_easy_reference_asks_for_tsafrirs_correction(site: Site, tmp_path: Path) -> None:
    easy = export_lua.export_easy(history())
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=easy))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    fresh_snapshot(js, site)
    rc, desc = js.submit({"arch": "x86_64"}, user_name="root", time_limit=10, min_cpus=1)
    d = parse_comment(desc["admin_comment"])
    # root's last two jobs ran about 20 s: EASY++ predicts that, the limit becomes a minute
    assert rc == 0 and desc["time_limit"] == 1 and d["pred"]["p50"] == d["pred"]["p90"] <= 25
    assert (d["shortened"], d["user_limit_min"], d["ext"]) == (True, 10, "tsafrir")


def test_no_user_limit_means_the_partition_default(js: JobSubmit, site: Site) -> None:
    fresh_snapshot(js, site)
    rc, desc = js.submit(user_name="root", time_limit=4294967294, min_cpus=1)
    d = parse_comment(desc["admin_comment"])
    assert rc == 0 and d["user_limit_min"] == 60 and desc["time_limit"] < 60
    assert "partition" not in desc and "tres_per_node" not in desc  # a plain job's request


def test_stale_heartbeat_shortens_nothing(js: JobSubmit, site: Site) -> None:
    fresh_snapshot(js, site, age=31)
    rc, desc = js.submit(user_name="root", time_limit=10, min_cpus=1)
    d = parse_comment(desc["admin_comment"])
    assert rc == 0 and desc["time_limit"] == 10 and "shortened" not in d and d["pred"]["p90"] > 0


def test_other_partitions_only_record_the_prediction(js: JobSubmit, site: Site) -> None:
    fresh_snapshot(js, site)
    rc, desc = js.submit({"accel": "h100:1"}, user_name="root", time_limit=10)
    d = parse_comment(desc["admin_comment"])
    assert rc == 0 and desc["partition"] == "gpu" and desc["time_limit"] == 10
    assert d["model"] == "h100" and d["pred"]["p90"] <= 600


def test_failed_prediction_keeps_the_decision(js: JobSubmit, site: Site) -> None:
    rc, desc = js.submit({"accel": "h100:1"}, user_name="root", min_cpus=js.lua.table(), time_limit=10)
    assert rc == 0 and desc["tres_per_node"] == "gres:gpu:h100:1"
    assert "pred" not in parse_comment(desc["admin_comment"])
    assert js.logs[-1][0] == "error" and "runtime prediction failed" in js.logs[-1][1]


def test_broken_model_is_logged_and_ignored(site: Site, tmp_path: Path) -> None:
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua="return {"))["job_submit.lua"])
    assert js.logs[0][0] == "error" and "runtime model not loaded" in js.logs[0][1]
    rc, desc = js.submit({"tier": "gold"}, user_name="root", time_limit=10)
    assert rc == 0 and "pred" not in parse_comment(desc["admin_comment"])


def test_model_text_cannot_break_out_of_its_string(site: Site, model_lua: str) -> None:
    hostile = model_lua + "\n-- ]]  ]=] ]==] end of string?\n"
    lua = render_site(site, Profile(model_lua=hostile))["job_submit.lua"]
    assert "[===[\n" in lua  # the first level that does not occur in the text
    JobSubmit(lua)  # still loads


def test_the_first_site_factor_is_set_at_submit_as_the_daemon_computes_it(js: JobSubmit, site: Site) -> None:
    from slurm_hetero.jobs.sitefactor import FactorPolicy

    fresh_snapshot(js, site)
    for limit in (5, 120, 2880):
        rc, desc = js.submit({"arch": "x86_64"}, user_name="root", time_limit=limit, min_cpus=1)
        d = parse_comment(desc["admin_comment"])
        assert rc == 0 and desc["site_factor"] == d["sf"] == FactorPolicy().site_factor(d["pred"]["p50"], 0)
        assert 0 < d["sf"] <= FactorPolicy().cap


def test_the_replays_clairvoyant_chunk_plans_with_each_jobs_own_runtime(site: Site, tmp_path: Path) -> None:
    """replay/oracle.py: the bridge loads it like a model; a known job's limit is its runtime
    plus the margin in whole minutes, its SiteFactor that of its runtime; a job it does not
    know, or one that ran into its limit, keeps its user's limit."""
    from slurm_hetero.replay import oracle

    chunk = oracle.export_clairvoyant([("7", 100), ("9", 2000), ("11", 6000), ("bad name", 5)])
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=chunk))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    fresh_snapshot(js, site)

    def submit(name: str, limit: int = 600) -> tuple[int, dict[str, Any]]:
        rc, desc = js.submit({"arch": "x86_64"}, user_name="root", name=name, time_limit=limit, min_cpus=1)
        assert rc == 0 and not any(level == "error" for level, *_ in js.logs), js.logs
        return desc.get("time_limit", limit), {**parse_comment(desc["admin_comment"]), "sf": desc["site_factor"]}

    limit, d = submit("r7")
    assert d["pred"] == {"p50": 100 + oracle.MARGIN_S, "p90": 100 + oracle.MARGIN_S}
    assert limit == 3 and (d["shortened"], d["user_limit_min"]) == (True, 600) and "ext" not in d
    limit11, d11 = submit("r11")
    assert limit11 == 101 and d11["pred"]["p50"] == 6030 and d11["sf"] < d["sf"]  # longer: ranked lower
    limit, d = submit("r9", limit=30)  # ran into its limit in the trace: nothing shorter
    assert limit == 30 and d["pred"]["p50"] == 1800 and "shortened" not in d
    for unknown in ("r8", "bad name", "r7x"):
        limit, d = submit(unknown)
        assert limit == 600 and d["pred"]["p50"] == 36000 and "shortened" not in d, unknown
    # clairvoyant-area: ordered by its runtime times its CPUs, its limit as before
    area = oracle.export_clairvoyant([("7", 100)], order="area")
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=area))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    fresh_snapshot(js, site)
    rc, desc = js.submit({"arch": "x86_64"}, user_name="root", name="r7", time_limit=600, min_cpus=8)
    d = parse_comment(desc["admin_comment"])
    assert rc == 0 and desc["time_limit"] == 3 and d["sf_s"] == 8 * (100 + oracle.MARGIN_S), d
