"""The capacity snapshot as the bridge loads it: every field checked once per load, a bad
pool left out (never the whole decision), a snapshot from the future not fresh."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.bridge.snapshot import FIT_MAX, PoolCapacity, build_snapshot, to_lua
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.conf.bridge import bridge_source
from slurm_hetero.site import Site, load_site
from slurm_hetero.site.pools import pools
from slurm_hetero.slurm.squeue import parse_squeue_json

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"
# A runtime model that always predicts 60 s (p50) and 120 s (p90).
FIXED_MODEL = ("return { predict = function() return 60, 120 end,\n"
               "         predict_desc = function() return 60, 120 end }\n")


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(DEMO)


@pytest.fixture
def js(site: Site, tmp_path: Path) -> JobSubmit:
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path)))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    return js


def snapshot_text(site: Site, at: int, busy: tuple[str, ...] = ()) -> str:
    """Every pool idle but the `busy` ones (all devices in use, one job pending)."""
    caps = {p.key: PoolCapacity(total=p.devices, free=0 if p.key in busy else p.devices,
                                free_max_node=0 if p.key in busy else p.per_node,
                                pending=1 if p.key in busy else 0) for p in pools(site)}
    return to_lua(caps, at)


def write(js: JobSubmit, text: str) -> None:
    (js.state / "hetero-snapshot.lua").write_text(text)  # type: ignore[attr-defined]


def with_row(text: str, key: str, row: str) -> str:
    """text with the pool `key`'s row replaced by `row` (None: the row removed)."""
    out, n = re.subn(rf'  \["{re.escape(key)}"\] = \{{[^\n]*\}},\n', row, text)
    assert n == 1, text
    return out


def decision(desc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(desc["admin_comment"])
    return out


def errors(js: JobSubmit) -> list[str]:
    return [m for k, m in js.logs if k == "error"]


# ---- a bad pool is left out, once per load ----------------------------------------------

BAD_ROWS = [
    ('  ["v100@x86_64"] = { total = 8, free = 8, pending = 0 },\n', "free_max_node is nil"),
    ('  ["v100@x86_64"] = { total = 8, free = "8", free_max_node = 4, pending = 0 },\n', "free is string"),
    ('  ["v100@x86_64"] = { total = -1, free = 0, free_max_node = 0, pending = 0 },\n', "total is not a device count"),
    ('  ["v100@x86_64"] = { total = 8, free = 0/0, free_max_node = 4, pending = 0 },\n', "free is not a device count"),
    ('  ["v100@x86_64"] = { total = 1/0, free = 8, free_max_node = 4, pending = 0 },\n', "total is not a device count"),
    ('  ["v100@x86_64"] = { total = 8, free = 8, free_max_node = 4, pending = 0.5 },\n', "pending is not a device count"),
    ('  ["v100@x86_64"] = { total = 8, free = 9, free_max_node = 4, pending = 0 },\n', "more devices free than there are"),
    ('  ["v100@x86_64"] = { total = 8, free = 2, free_max_node = 4, pending = 0 },\n', "more devices free than there are"),
    ('  ["v100@x86_64"] = { total = 8, free = 8, free_max_node = true, pending = 0 },\n', "free_max_node is boolean"),
    ('  ["v100@x86_64"] = 8,\n', "not a table"),
    ('  ["v100@x86_64"] = { 8, 8, 4, 0 },\n', "total is nil"),
    ('  ["v100@x86_64"] = { total = 8, free = 8, free_max_node = 2, pending = 0, fit = 3 },\n', "fit is number"),
    ('  ["v100@x86_64"] = { total = 8, free = 8, free_max_node = 2, pending = 0, fit = { { 4, 0 } } },\n',
     "fit entry 2 is not two counts"),
    ('  ["v100@x86_64"] = { total = 8, free = 8, free_max_node = 1, pending = 0, fit = { { 4, -1 } } },\n',
     "fit entry 1 is not two counts"),
    ('  ["v100@x86_64"] = { total = 8, free = 8, free_max_node = 1, pending = 0, fit = { "4, 0" } },\n',
     "fit entry 1 is not two counts"),
    ('  ["v100@x86_64"] = { total = 8, free = 8, free_max_node = 1, pending = 0, fit = { { 4, 0 }, { 4, 0 } } },\n',
     "fit has more entries than 1"),
]


@pytest.mark.parametrize(("row", "why"), BAD_ROWS)
def test_a_bad_pool_is_left_out_not_the_decision(js: JobSubmit, site: Site, row: str, why: str) -> None:
    write(js, with_row(snapshot_text(site, js.now), "v100@x86_64", row))
    for accel in ("any:1", "nvidia:2", "v100:1"):
        rc, desc = js.submit({"accel": accel})
        assert rc == 0 and re.fullmatch(r"gres:(gpu|npu):[a-z0-9-]+:[1-9]", desc["tres_per_node"]), js.logs
        d = decision(desc)
        assert d["why"] in ("starts-now", "least-backlog") and d["snapshot_age"] == 0
    # v100 has no data: the other pools start now; v100 is still placed when asked for by name
    assert decision(js.submit({"accel": "any:1"})[1])["model"] == "ascend-910b"
    assert decision(js.submit({"accel": "v100:1"})[1])["why"] == "least-backlog"
    assert errors(js) == [f"slurm-hetero: capacity snapshot {js.state}/hetero-snapshot.lua: "  # type: ignore[attr-defined]
                          f"1 pool(s) left out: v100@x86_64 ({why})"]


def test_bad_pools_are_logged_once_per_load(js: JobSubmit, site: Site) -> None:
    def bad_snapshot() -> str:  # a new generation each time
        text = with_row(snapshot_text(site, js.now), "v100@x86_64", BAD_ROWS[0][0])
        text = with_row(text, "h100@x86_64", '  ["h100@x86_64"] = {},\n')
        return text.replace("\n} }", '\n  [7] = {}, ["x@y"] = "z",\n} }')

    write(js, bad_snapshot())
    for _ in range(20):
        assert js.submit({"accel": "any:2"})[0] == 0
    assert errors(js) == [f"slurm-hetero: capacity snapshot {js.state}/hetero-snapshot.lua: "  # type: ignore[attr-defined]
                          "4 pool(s) left out: 7 (its key is not a string), h100@x86_64 (total is nil), "
                          "v100@x86_64 (free_max_node is nil), x@y (not a table)"]
    js.now += 2  # re-checked, same generation: not loaded again, not logged again
    js.submit({"accel": "any:2"})
    assert len(errors(js)) == 1
    write(js, bad_snapshot())  # a new generation with the same problem: loaded, logged once more
    js.now += 2
    js.submit({"accel": "any:2"})
    js.submit({"accel": "any:2"})
    assert len(errors(js)) == 2


@pytest.mark.parametrize("change", [
    lambda t: t.replace("generated_at = ", "generated_at = 'x' .. "),
    lambda t: t.replace("generated_at = ", "generated = "),
    lambda t: re.sub(r"generated_at = \d+", "generated_at = 0/0", t),
    lambda t: re.sub(r"generated_at = \d+", "generated_at = 1/0", t),
    lambda t: t.replace("pools = {", "pools = 3, p = {"),
    lambda t: t.split("\n", 1)[1],  # no generation line
    lambda t: t.split("\n", 1)[0] + "\nwhile true do end\n",  # a chunk that never ends
    lambda t: t.split("\n", 1)[0] + "\nreturn ('x'):rep(10)\n",
])
def test_a_snapshot_without_a_usable_time_is_unreadable(js: JobSubmit, site: Site, change: Any) -> None:
    write(js, change(snapshot_text(site, js.now, busy=("v100@x86_64",))))
    rc, desc = js.submit({"accel": "any:2"})
    assert rc == 0 and decision(desc)["why"] == "static" and desc["tres_per_node"] == "gres:gpu:v100:2"
    info = [m for k, m in js.logs if k == "info"]
    assert len(info) == 1 and info[0].startswith("slurm-hetero: capacity snapshot unreadable ("), info
    assert info[0].endswith("): static order applies") and re.fullmatch(r"[ -~]+", info[0])
    js.submit({"accel": "any:2"})
    assert len(js.logs) == 1  # one line per state change, not per job


# ---- freshness: neither too old nor from the future ----------------------------------------

@pytest.mark.parametrize(("offset", "why", "state"), [
    (0, "starts-now", "fresh"),
    (-30, "starts-now", "fresh"),
    (-31, "stale-backlog", "stale: pools by its backlog and what was placed since"),
    (5, "starts-now", "fresh"),  # a few seconds of clock skew between hosts
    (6, "static", "from the future (6 s ahead of this clock): static order applies"),
    (86400 * 365, "static", "from the future (31536000 s ahead of this clock): static order applies"),
])
def test_freshness(js: JobSubmit, site: Site, offset: int, why: str, state: str) -> None:
    write(js, snapshot_text(site, js.now + offset, busy=("v100@x86_64",)))
    rc, desc = js.submit({"accel": "any:2"})
    d = decision(desc)
    assert rc == 0 and d["why"] == why and d["snapshot_age"] == -offset
    assert d["model"] == ("v100" if why == "static" else "ascend-910b")
    assert js.logs == [("info", f"slurm-hetero: capacity snapshot {state}")]


@pytest.mark.parametrize(("offset", "shortened"), [(0, True), (-31, False), (100, False)])
def test_only_a_fresh_heartbeat_shortens_limits(site: Site, tmp_path: Path, offset: int, shortened: bool) -> None:
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=FIXED_MODEL))["job_submit.lua"])
    (tmp_path / "hetero-snapshot.lua").write_text(snapshot_text(site, js.now + offset))
    rc, desc = js.submit(user_name="root", time_limit=10, min_cpus=1)  # the cpu partition: backfill mode
    assert rc == 0 and desc["time_limit"] == (2 if shortened else 10)
    assert ("shortened" in decision(desc)) == shortened


def test_no_file_io_per_job(js: JobSubmit, site: Site) -> None:
    write(js, snapshot_text(site, js.now))
    js.lua.execute("HETERO_OPENS = 0; local open = io.open; "
                   "io.open = function(...) HETERO_OPENS = HETERO_OPENS + 1; return open(...) end")
    for _ in range(50):
        js.submit({"accel": "any:1"})
    js.now += 1
    js.submit({"accel": "any:1"})
    assert js.lua.globals().HETERO_OPENS == 1
    js.now += 1
    js.submit({"accel": "any:1"})
    assert js.lua.globals().HETERO_OPENS == 2


# ---- bridge.lua on its own, with test tables --------------------------------------------

TABLES = {
    "MODELS": {"m1": {"gres": "gpu", "type": "m1", "units": 1.0, "mem_mib": 1024},
               "m2": {"gres": "gpu", "type": "m2", "units": 2.0, "mem_mib": 4096}},
    "MODEL_GROUPS": {"any": {"m1": True, "m2": True}},
    "POOLS": [{"key": "m1@x86_64", "model": "m1", "arch": "x86_64", "per_node": 4, "partitions": "gpu"},
              {"key": "m2@x86_64", "model": "m2", "arch": "x86_64", "per_node": 4, "partitions": "gpu"}],
}


def test_bridge_lua_alone_checks_a_snapshot() -> None:
    hetero = JobSubmit.bridge(TABLES)
    data = hetero.to_lua({"generated_at": 5, "pools": {
        "m1@x86_64": {"total": 4, "free": 4, "free_max_node": 4, "pending": 0},
        "m2@x86_64": {"total": 4, "free": 4, "pending": 0}}})
    checked, bad = hetero.module.check_snapshot(data)
    assert checked.generated_at == 5 and list(checked.pools) == ["m1@x86_64"]
    assert list(bad.values()) == ["m2@x86_64 (free_max_node is nil)"]
    assert hetero.module.load_snapshot("return 42") == (None, "not a table with pools")
    assert hetero.module.load_snapshot("return nil") == (None, "not a table with pools")
    got, why = hetero.module.load_snapshot("for i = 1, 1e9 do end return {}")
    assert got is None and why == "not data: 'for' at byte 1 is not a field name"


def test_bridge_lua_alone_decides_with_a_snapshot(tmp_path: Path) -> None:
    hetero = JobSubmit.bridge({**TABLES, "SNAPSHOT_PATH": str(tmp_path / "snap.lua")})
    assert decision(hetero.submit({"accel": "any:2"})[1])["model"] == "m1"  # static: smallest first
    caps = {"m1@x86_64": PoolCapacity(4, 0, 0, 3), "m2@x86_64": PoolCapacity(4, 4, 4, 0)}
    (tmp_path / "snap.lua").write_text(to_lua(caps, hetero.now))
    hetero.now += 2
    rc, desc = hetero.submit({"accel": "any:2"})
    assert (rc, desc["tres_per_node"], decision(desc)["why"]) == (0, "gres:gpu:m2:2", "starts-now")


# ---- memory: the snapshot is data only, and its size is capped ---------------------------
# The instruction cap bounds time, not memory: one string.rep or a few concatenations
# allocate hundreds of MiB. Memory is measured with the collector stopped, so everything the
# attempt allocated is still counted afterwards.

SNAPSHOT_MAX_BYTES = int(cast(re.Match[str], re.search(r"^local SNAPSHOT_MAX_BYTES = (\d+)$", bridge_source(), re.M))[1])
MEASURE = """function(f, ...)
    collectgarbage("collect"); collectgarbage("stop")
    local before = collectgarbage("count")
    local got, why = f(...)
    local used = collectgarbage("count") - before
    collectgarbage("restart"); collectgarbage("collect")
    return used / 1024, got, why
end"""
VALID = "return { generated_at = 1000000, pools = {} }\n"
ATTACKS = {
    "rep method": "x = ('x'):rep(2^28)\n" + VALID,
    "rep in the return": "return { generated_at = 1000000, pools = {}, x = ('x'):rep(2^28) }",
    "concat doublings": "x = 'xxxxxxxx'\n" + "x = x .. x\n" * 28 + VALID,
    "concat loop": "local x = 'x' for i = 1, 28 do x = x .. x end\n" + VALID,
    "literal concat": "x = 'xxxxxxxxxxxxxxxx' .. 'xxxxxxxxxxxxxxxx'\n" + VALID,
    "string.rep alias": "local r = string.rep\nx = r('x', 2^28)\n" + VALID,
    "rep through a string value": "s = 'x'\nr = s.rep\nx = r(s, 268435456)\n" + VALID,
    "string-call method": "s = 'x'\nx = s:rep'268435456'\n" + VALID,
    "string-call function": "f = {}\nx = f.rep'x'\n" + VALID,
    "table-call": "f = {}\nx = f{}\n" + VALID,
    "long-string call": "s = 'x'\nx = s.rep[[x]]\n" + VALID,
    "name read": "s = 'x'\nt = { s, s }\n" + VALID,
    "index read": "t = {}\nt.x = 1\n" + VALID,
    "recursion": "function f(n) return f(n) end\n" + VALID,
    "loop": "while true do end\n" + VALID,
    "repeat": "repeat until false\n" + VALID,
    "vararg": "return { generated_at = 1000000, pools = {}, ... }",
    "length": "return { generated_at = #'xx', pools = {} }",
    "comment closed early": "--[[ ]] x = ('x'):rep(2^28) --]]\n" + VALID,
    "level-2 comment closed early": "--[==[ ]==] x = ('x'):rep(2^28) ]]\n" + VALID,
    "nested long string": "x = [[ a [[ b ]] ('x'):rep(2^28) ]]\n" + VALID,
    "escaped quote": "x = 'a\\\\' .. ('x'):rep(2^28) .. 'b'\n" + VALID,
    "raw newline in a string": "x = 'a\n(1)'\n" + VALID,
    "precompiled": "\x1bLuaQ\x00\x01\x04\x08\x04\x08\x00",
    "not ASCII": "x\u00e9 = 1\n" + VALID,
}


def measure(js: JobSubmit, f: Any, *args: Any) -> tuple[float, Any, Any]:
    used, got, why = js.lua.eval(MEASURE)(f, *args)
    return float(used), got, why


def test_the_measure_sees_an_allocation() -> None:
    js = JobSubmit.bridge(TABLES)
    used, _, _ = measure(js, js.lua.eval("function(s) return loadstring(s)() end"),
                         "return ('x'):rep(2^22)")
    assert used >= 4


@pytest.mark.parametrize("chunk", ATTACKS.values(), ids=list(ATTACKS))
def test_code_in_a_snapshot_is_refused_before_it_runs(chunk: str) -> None:
    js = JobSubmit.bridge(TABLES)
    used, got, why = measure(js, js.module.load_snapshot, chunk)
    assert got is None and why.startswith("not data: "), why
    assert used < 0.1, used


def test_a_file_over_the_cap_is_not_read_whole(js: JobSubmit, site: Site) -> None:
    write(js, snapshot_text(site, js.now) + " " * (8 << 20))
    js.lua.execute('collectgarbage("collect"); collectgarbage("stop"); HETERO_KB = collectgarbage("count")')
    rc, desc = js.submit({"accel": "any:2"})
    used = js.lua.eval('(collectgarbage("count") - HETERO_KB) / 1024')
    js.lua.execute('collectgarbage("restart")')
    assert rc == 0 and decision(desc)["why"] == "static" and used < 4, used
    assert js.logs == [("info", f"slurm-hetero: capacity snapshot unreadable ({js.state}/hetero-snapshot.lua: "  # type: ignore[attr-defined]
                                f"larger than {SNAPSHOT_MAX_BYTES} bytes): static order applies")]


def test_a_huge_first_line_is_not_read_whole(js: JobSubmit, site: Site) -> None:
    write(js, "-- hetero-snapshot 1" + "0" * (8 << 20) + "\n" + snapshot_text(site, js.now))
    js.lua.execute('collectgarbage("collect"); collectgarbage("stop"); HETERO_KB = collectgarbage("count")')
    rc, desc = js.submit({"accel": "any:2"})
    used = js.lua.eval('(collectgarbage("count") - HETERO_KB) / 1024')
    js.lua.execute('collectgarbage("restart")')
    assert rc == 0 and decision(desc)["why"] == "static" and used < 0.5, used
    assert "no generation line" in js.logs[0][1]


def test_a_string_over_the_cap_is_refused_unscanned() -> None:
    js = JobSubmit.bridge(TABLES)
    text = VALID + " " * SNAPSHOT_MAX_BYTES
    assert js.module.load_snapshot(text) == (None, f"larger than {SNAPSHOT_MAX_BYTES} bytes")
    assert js.module.load_snapshot(text[:SNAPSHOT_MAX_BYTES])[0] is not None


def test_a_rejected_file_keeps_the_last_good_snapshot(js: JobSubmit, site: Site) -> None:
    write(js, snapshot_text(site, js.now, busy=("v100@x86_64",)))
    assert decision(js.submit({"accel": "any:2"})[1])["why"] == "starts-now"
    head = snapshot_text(site, js.now).split("\n", 1)[0]
    write(js, head + "\n" + ATTACKS["string-call method"])
    js.now += 10
    rc, desc = js.submit({"accel": "any:2"})
    d = decision(desc)
    assert rc == 0 and d["why"] == "starts-now" and d["snapshot_age"] == 10
    assert errors(js) == [f"slurm-hetero: capacity snapshot {js.state}/hetero-snapshot.lua rejected "  # type: ignore[attr-defined]
                          "(not data: 's' at byte 13 is not a field name): the previous one applies until stale"]
    js.now += 21  # the last good one grows stale as usual
    assert decision(js.submit({"accel": "any:2"})[1])["why"] == "stale-backlog"
    assert len(errors(js)) == 1 and js.logs[-1] == (
        "info", "slurm-hetero: capacity snapshot stale: pools by its backlog and what was placed since")


# Strings and comments are data: what not_data refuses in code, they may hold.
DATA = [
    "-- a comment: ('x'):rep(2^28) .. function() end #x a.b\n" + VALID,
    "--[[ (\n) : .. ]] --[==[ ]] ]=] ]==]\n" + VALID,
    "--[==x line comment with ( and ..\n" + VALID,
    "return { generated_at = 1000000, pools = {}, note = \"f(x) .. s:rep'9' \\\" ( --\" }",
    "return { generated_at = 1000000, pools = {}, note = 'it\\'s (x) \\\\', n2 = '\\65\\066\\0' }",
    "return { generated_at = 1000000, pools = {}, note = \"a\\\nb\" }",  # an escaped newline
    "return { generated_at = 1000000, pools = {}, n = [==[ ( ]] ]=] .. ]==], m = [[\n(x)]] }",
    "return { generated_at = 1e6, pools = { }, a = -2.5e-3, b = 0x1F, c = .5, d = 1E+5, e = 3.,"
    " f = true, g = false, h = nil, [1] = -1, [\"k\"] = 2; 'list' }",
    "x = 1 y = { 1, 2 }\nreturn { generated_at = 2000000 / 2, pools = {} }",
]


@pytest.mark.parametrize("chunk", DATA)
def test_strings_and_comments_may_hold_anything(chunk: str) -> None:
    js = JobSubmit.bridge(TABLES)
    assert js.module.not_data(chunk) is None
    got, why = js.module.load_snapshot(chunk)
    assert got is not None and got.generated_at == 1000000, why


@pytest.mark.parametrize(("chunk", "why"), [
    ("return x", "'x' at byte 8 is not a field name"),
    ("return {a = b}", "'b' at byte 13 is not a field name"),
    ("x == 1", "'x' at byte 1 is not a field name"),
    ("x, y = 1, 2", "'x' at byte 1 is not a field name"),
    ("x --c\n= 1", "'x' at byte 1 is not a field name"),
    ("return 1 and 2", "'and' at byte 10 is not a field name"),
    ("return 1 .. 2", "byte 10 ('.') outside a string"),
    ("return 1 < 2", "byte 10 ('<') outside a string"),
    ("return {}\f", "byte 10 (code 12) outside a string"),
    ("return [=x", "a bad long bracket at byte 8"),
    ("return [[a [[b]] c]]", "[[ inside [[...]] at byte 8"),
    ("return [==[a]=]", "an unfinished long bracket at byte 8"),
    ("--[[ open", "an unfinished long bracket at byte 1"),
    ('return "open', "an unfinished string at byte 8"),
    ('return "a\\', "an unfinished string at byte 8"),
    ('return "a\\\r\nb"', "an unfinished string at byte 8"),  # Lua takes it; refusing is safe
])
def test_not_data_says_why(chunk: str, why: str) -> None:
    assert JobSubmit.bridge(TABLES).module.not_data(chunk) == why


def test_the_daemons_snapshot_round_trips(site: Site, tmp_path: Path) -> None:
    """What snapshot.py writes (captured sinfo and queue, a forecast, negative values too)."""
    captured = DEMO.parents[2] / "tests" / "data" / "captured"
    jobs, _ = parse_squeue_json((captured / "squeue-json-24.11.json").read_text())
    caps = build_snapshot(site, (captured / "sinfo-snapshot-24.11.txt").read_text(), jobs)
    fc = {k: {5: 1.5, 15: -0.25, 60: 1e9} for k in caps}
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path)))["job_submit.lua"])
    text = to_lua(caps, js.now, fc)
    (tmp_path / "hetero-snapshot.lua").write_text(text)
    rc, desc = js.submit({"accel": "any:1"})
    assert rc == 0 and decision(desc)["snapshot_age"] == 0 and js.logs == [
        ("info", "slurm-hetero: capacity snapshot fresh")]
    hetero = JobSubmit.bridge(TABLES)
    used, got, bad = measure(hetero, hetero.module.load_snapshot, text.split("\n", 1)[1])
    assert got is not None and list(bad.values()) == [] and used < 1
    assert {k: (p.total, p.free, p.free_max_node, p.pending) for k, p in got.pools.items()} == {
        k: (c.total, c.free, c.free_max_node, c.pending) for k, c in caps.items()}


def test_the_largest_site_fits_under_the_cap() -> None:
    """256 added models and the catalog, 64-character ids, 10-digit counts, a forecast."""
    big = 2**31 - 1
    caps = {f"{i:03d}{'x' * 61}@{a}": PoolCapacity(big, big, big, big)
            for i in range(256 + 24) for a in ("x86_64", "aarch64")}
    text = to_lua(caps, 1.7e9, {k: {5: 1e9, 15: 1e9, 60: 1e9} for k in caps})
    assert len(text) < SNAPSHOT_MAX_BYTES / 2
    hetero = JobSubmit.bridge(TABLES)
    got, bad = hetero.module.load_snapshot(text.split("\n", 1)[1])
    assert got is not None and len(list(got.pools)) == len(caps), bad
    # with placement.node_fit: FIT_MAX entries of a 5-digit CPU count and 8-digit MiB each
    for c in caps.values():
        c.fit = [(65535, 99_999_999)] * FIT_MAX
    text = to_lua(caps, 1.7e9, {k: {5: 1e9, 15: 1e9, 60: 1e9} for k in caps})
    assert len(text) < SNAPSHOT_MAX_BYTES * 3 / 4
    got, bad = hetero.module.load_snapshot(text.split("\n", 1)[1])
    assert got is not None and len(list(got.pools)) == len(caps), bad
    assert [tuple(e.values()) for e in got.pools[next(iter(caps))].fit.values()] == caps[next(iter(caps))].fit


def test_a_data_only_file_at_the_cap_stays_bounded() -> None:
    """The worst data-only chunk measured: a table per 2 bytes, each in another table."""
    js = JobSubmit.bridge(TABLES)
    n = (SNAPSHOT_MAX_BYTES - len(VALID) - 20) // 7
    chunk = "x = {" + "{{{}}}," * n + "}\n" + VALID
    used, got, why = measure(js, js.module.load_snapshot, chunk)
    assert got is not None and used < 24, (used, why)
