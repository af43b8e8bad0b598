"""bridge.lua as a plain Lua 5.1 file, job_submit.lua as the site's tables + that file, and
the Lua string encoder the tables are written with."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import lupa.lua51 as lua51
import pytest

from slurm_hetero.bridge.luarun import OPTION_PREFIX, JobSubmit
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.conf.bridge import BRIDGE_LUA, SITE_TABLES, bridge_source
from slurm_hetero.site import load_site, load_site_text
from slurm_hetero.templating import lua_str

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"
LUAC = shutil.which("luac5.1")
# What the bridge may read from the global environment: Lua's own and slurmctld's `slurm`.
GLOBALS_READ = {"collectgarbage", "debug", "error", "io", "ipairs", "loadstring", "math", "next", "os",
                "pairs", "pcall", "setfenv", "setmetatable", "slurm", "string", "table", "tonumber",
                "tostring", "type", "unpack"}
GLOBALS_SET = {"slurm_job_submit", "slurm_job_modify"}


def globals_of(path: Path) -> tuple[set[str], set[str]]:
    """(globals read, globals set) by a Lua 5.1 file, from luac's listing."""
    assert LUAC is not None
    listing = subprocess.run([LUAC, "-p", "-l", str(path)], capture_output=True, text=True, check=True).stdout
    read = set(re.findall(r"\bGETGLOBAL\b.*; (\S+)", listing))
    written = set(re.findall(r"\bSETGLOBAL\b.*; (\S+)", listing))
    return read, written


@pytest.mark.skipif(LUAC is None, reason="luac5.1 (Debian lua5.1) not installed")
def test_bridge_lua_is_plain_lua51_with_no_stray_globals(tmp_path: Path) -> None:
    read, written = globals_of(BRIDGE_LUA)
    assert written == GLOBALS_SET and read <= GLOBALS_READ, (written, read - GLOBALS_READ)
    rendered = tmp_path / "job_submit.lua"
    rendered.write_text(render_site(load_site(DEMO))["job_submit.lua"])
    assert globals_of(rendered) == (read, written)


def test_no_lua52_syntax() -> None:
    code = "\n".join(re.sub(r"--.*$", "", ln) for ln in bridge_source().splitlines())
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', '""', code)
    for bad in ("//", "goto ", "::", "~", "<<", ">>", "&", "|"):
        assert bad not in code.replace("~=", ""), bad


def test_job_submit_is_the_tables_then_bridge_lua_verbatim() -> None:
    lua = render_site(load_site(DEMO))["job_submit.lua"]
    assert bridge_source().rstrip("\n") in lua
    tables, logic = lua.split("local function bridge(...)\n")
    assert "function" not in re.sub(r"--.*", "", tables)  # data only above the logic
    for name in SITE_TABLES:
        assert re.search(rf"^local {name} = ", tables, re.M), name
        assert f"\n    {name} = {name},\n" in logic
    names_read = set(re.findall(r'\bsite\("([A-Z_]+)"', bridge_source()))
    assert names_read == set(SITE_TABLES)
    assert lua.endswith("\nreturn slurm.SUCCESS\n")


def test_bridge_lua_alone_with_test_tables() -> None:
    js = JobSubmit.bridge({
        "MODELS": {"x1": {"gres": "gpu", "type": "x1", "units": 0.5, "mem_mib": 2048}},
        "MODEL_GROUPS": {"any": {"x1": True}, "acme": {"x1": True}},
        "POOLS": [{"key": "x1@aarch64", "model": "x1", "arch": "aarch64", "per_node": 2, "cpus": 8, "mem_mib": 16384, "partitions": "p1,p2"}],
        "TIERS": {"t1": True}, "GRES_PREFIX": "gres/",
    })
    rc, desc = js.submit({"accel": "units=1", "tier": "T1"})
    assert (rc, desc["tres_per_node"], desc["partition"], desc["qos"], desc["features"]) == (
        0, "gres/gpu:x1:2", "p1,p2", "t1", "aarch64")
    rc, _ = js.submit({"accel": "acme:3"})
    assert rc == -1 and js.user_lines()[-1] == "hetero: --accel=acme:3: no pool of this site satisfies it"
    assert JobSubmit.bridge().submit({"arch": "arm64"})[1]["features"] == "aarch64"  # no tables at all


# ---- lua_str: strings in rendered Lua ---------------------------------------------------

NASTY = ["", "plain", 'say "hi"', "back\\slash", "new\nline", "tab\tcr\r", "nul\0byte", "del\x7f",
         "esc\x1b[31m", "/données/ü", "日本語", "\\u00fc", "]]", "]=]", "\\", '"', "9\0019", "\x80\xff"]


@pytest.mark.parametrize("text", NASTY)
def test_lua_str_round_trips_under_lua51(text: str) -> None:
    lua = lua51.LuaRuntime(encoding=None)
    literal = lua_str(text)
    assert re.fullmatch(r'"[ -~]*"', literal)  # one printable ASCII line
    assert lua.eval(literal) == text.encode("utf-8")


def test_tojson_was_not_lua() -> None:
    """Why lua_str: JSON's \\u escape reads as the letter u in Lua 5.1."""
    lua = lua51.LuaRuntime(encoding=None)
    assert lua.eval('"/donn\\u00e9es"') == b"/donnu00e9es"
    assert lua.eval(lua_str("/données")) == "/données".encode()


def test_lua_str_takes_text_only() -> None:
    with pytest.raises(TypeError):
        lua_str(3)  # type: ignore[arg-type]


def test_non_ascii_mounts_and_image_root_reach_the_allowlist() -> None:
    text = DEMO.read_text()
    old = "- {source: /tmp, destination: /scratch, mode: rw}"
    assert old in text
    site = load_site_text(text.replace(old, '- {source: "/données/ü", destination: /scratch, mode: rw}'))
    lua = render_site(site, Profile(images_root="/srv/imágenes"))["job_submit.lua"]
    assert '{ source = "/donn\\195\\169es/\\195\\188", mode = "rw" }' in lua
    js = JobSubmit(lua)
    env = js.lua.table_from({OPTION_PREFIX + "image": "busybox:1.35", "SLURM_HETERO_MOUNTS": "/données/ü/x:/data"})
    desc = js.lua.table_from({"environment": env, "script": "#!/bin/sh\n"})
    assert js.lua.globals().slurm_job_submit(desc, js.lua.table(), 0) == 0, js.logs
    assert desc["container"] == "/srv/imágenes/busybox/1.35"
    env[OPTION_PREFIX + "image"] = "busybox:1.35"
    env["SLURM_HETERO_MOUNTS"] = "/données/x:/data"
    assert js.lua.globals().slurm_job_submit(js.lua.table_from({"environment": env, "script": "x"}),
                                             js.lua.table(), 0) == -1
    assert js.user_lines()[-1].endswith("outside the site's mount allowlist (allowed: /données/ü (rw), "
                                        "/usr/share/zoneinfo (ro))")
