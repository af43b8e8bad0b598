"""The site's own job_submit.lua rules run inside the generated job_submit.lua (Lua 5.1):
loaded once, in their own environment, chained with the bridge in the configured order,
their return codes and user messages passed through, a failed load refusing jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.conf.bridge import SITERULES_LUA
from slurm_hetero.site import Site, load_site_text
from tests.lua.test_bridge_lua import LUAC, globals_of

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"

# A site's rules as sites write them: an account is required, partition "express" is an
# alias of gpu, a long job on gpu is refused with Slurm's own code, and what the function
# saw of the job is left in its comment (to tell the order).
SITE_RULES = """\
local seen = 0  -- a local of the site's script: one per load
slurm.log_info("site rules loaded")

local function route(job_desc)
    if job_desc.partition == "express" then job_desc.partition = "gpu" end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    seen = seen + 1
    if job_desc.account == nil then
        slurm.log_user("site: every job needs --account (e.g. --account=physics)")
        return slurm.ERROR
    end
    if job_desc.account == "boom" then error("site bug") end
    if job_desc.account == "nothing" then return end
    if job_desc.account == "closed" then
        slurm.user_msg("site: account closed")
        return slurm.ESLURM_INVALID_ACCOUNT
    end
    route(job_desc)
    job_desc.comment = "seen=" .. seen .. " tres=" .. tostring(job_desc.tres_per_node)
    MODELS = "the site's own global"  -- must not reach the bridge's tables
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    if job_desc.time_limit ~= nil and job_desc.time_limit > 60 then
        slurm.log_user("site: at most 60 minutes")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""


def site_with_rules(script: Path, order: str | None = None) -> Site:
    data: dict[str, Any] = yaml.safe_load(DEMO.read_text())
    rules: dict[str, str] = {"script": str(script)}
    if order:
        rules["order"] = order
    data.setdefault("slurm", {})["job_submit"] = rules
    return load_site_text(yaml.safe_dump(data), "<demo with site rules>")


def js_for(tmp_path: Path, text: str | None = SITE_RULES, order: str | None = None) -> JobSubmit:
    script = tmp_path / "job_submit.site.lua"
    if text is not None:
        script.write_text(text)
    site = site_with_rules(script, order)
    return JobSubmit(render_site(site, Profile(state_dir=str(tmp_path)))["job_submit.lua"])


def test_site_rejection_passes_through_with_its_message(tmp_path: Path) -> None:
    js = js_for(tmp_path)
    rc, desc = js.submit({"accel": "any:1"})
    assert rc == -1
    assert js.user_lines() == ["site: every job needs --account (e.g. --account=physics)"]
    assert "admin_comment" not in desc  # site-first: the bridge never ran


def test_site_return_code_passes_through(tmp_path: Path) -> None:
    js = js_for(tmp_path)
    rc, _ = js.submit({"accel": "any:1"}, account="closed")
    assert rc == 2045 and js.user_lines() == ["site: account closed"]


def test_site_routing_then_bridge(tmp_path: Path) -> None:
    js = js_for(tmp_path)
    rc, desc = js.submit({"accel": "nvidia:1"}, account="physics", partition="express")
    assert rc == 0, js.logs
    assert desc["partition"] == "gpu"
    assert desc["tres_per_node"] == "gres:gpu:v100:1"  # the bridge chose within the site's partition
    assert json.loads(desc["admin_comment"])["hetero"] == 1
    assert desc["comment"] == "seen=1 tres=nil"  # site-first: before the bridge set GRES
    rc, desc = js.submit({"accel": "any:1"}, account="physics")
    assert rc == 0 and desc["comment"] == "seen=2 tres=nil"
    # Loaded once, however many jobs: its local state carries over, one load line.
    assert [m for k, m in js.logs if m == "site rules loaded"] == ["site rules loaded"]


def test_bridge_first_order(tmp_path: Path) -> None:
    js = js_for(tmp_path, order="bridge-first")
    rc, desc = js.submit({"accel": "nvidia:1"}, account="physics")
    assert rc == 0, js.logs
    assert desc["comment"] == "seen=1 tres=gres:gpu:v100:1"  # the site saw the bridge's GRES
    # A user error the bridge catches is refused before the site's rules run.
    rc, desc = js.submit({"accel": "nosuchmodel"}, account="physics")
    assert rc == -1 and "comment" not in desc
    assert any("nosuchmodel" in m for m in js.user_lines())
    # ... and the site's rejection still rejects.
    rc, _ = js.submit({"accel": "any:1"})
    assert rc == -1 and js.user_lines()[-1].startswith("site: every job needs --account")


def test_site_globals_stay_apart(tmp_path: Path) -> None:
    js = js_for(tmp_path)
    js.submit({"accel": "any:1"}, account="physics")  # the site sets its global MODELS
    rc, desc = js.submit({"accel": "a100-80gb:1"}, account="physics")
    assert rc == 0 and desc["tres_per_node"] == "gres:gpu:a100-80gb:1"
    assert js.lua.globals().MODELS is None
    assert js.lua.eval("type(slurm_job_submit)") == "function"


def test_site_lua_error_fails_open_like_slurm(tmp_path: Path) -> None:
    js = js_for(tmp_path)
    rc, desc = js.submit({"accel": "any:1"}, account="boom")
    assert rc == 0  # slurmctld passes a job whose job_submit.lua raised an error
    assert json.loads(desc["admin_comment"])["hetero"] == 1  # the bridge still ran
    errors = [m for k, m in js.logs if k == "error"]
    assert len(errors) == 1 and "slurm_job_submit failed" in errors[0] and "site bug" in errors[0]
    rc, _ = js.submit({}, account="nothing")  # no return value: success, as Slurm reads it
    assert rc == 0 and any("non-numeric return code" in m for k, m in js.logs if k == "info")


def test_modify_chain(tmp_path: Path) -> None:
    js = js_for(tmp_path)
    assert js.modify({"time_limit": 30})[0] == 0
    rc, _ = js.modify({"time_limit": 120})
    assert rc == -1 and js.user_lines() == ["site: at most 60 minutes"]
    # A script without slurm_job_modify lets modifications through.
    (tmp_path / "other").mkdir()
    js2 = js_for(tmp_path / "other", "function slurm_job_submit() return slurm.SUCCESS end")
    assert js2.modify({"time_limit": 120})[0] == 0


BROKEN = [
    (None, "cannot open"),
    ("function slurm_job_submit(", "expected"),
    ("error('no database')", "no database"),
    ("return slurm.ERROR", "returned -1 while loading"),
    ("function other() end", "defines no function slurm_job_submit"),
]


@pytest.mark.parametrize(("text", "why"), BROKEN)
def test_rules_that_do_not_load_refuse_jobs(tmp_path: Path, text: str | None, why: str) -> None:
    js = js_for(tmp_path, text)
    errors = [m for k, m in js.logs if k == "error"]
    assert len(errors) == 1 and "did not load" in errors[0] and why in errors[0], errors
    assert str(tmp_path / "job_submit.site.lua") in errors[0]
    for opts in ({"accel": "any:1"}, {}):
        rc, desc = js.submit(opts, account="physics")
        assert rc == -1 and "admin_comment" not in desc
    assert js.user_lines()[-1].startswith("job_submit: the site's job submission rules (")
    assert js.modify({"time_limit": 5}, uid=1000)[0] == -1
    assert js.modify({"time_limit": 5}, uid=0)[0] == 0  # root can still hold, release, cancel


def test_no_site_rules_no_chain(tmp_path: Path) -> None:
    site = load_site_text(DEMO.read_text(), "<demo>")
    text = render_site(site, Profile(state_dir=str(tmp_path)))["job_submit.lua"]
    assert "local function site_rules" not in text and "siterules.lua" not in text


@pytest.mark.skipif(LUAC is None, reason="luac5.1 (Debian lua5.1) not installed")
def test_siterules_lua_is_plain_lua51_with_no_stray_globals() -> None:
    read, written = globals_of(SITERULES_LUA)
    assert written == {"slurm_job_submit", "slurm_job_modify"}
    assert read <= {"slurm", "_G", "loadfile", "setfenv", "setmetatable", "rawget", "pcall", "type",
                    "tostring", "string", "slurm_job_submit", "slurm_job_modify"}, read
