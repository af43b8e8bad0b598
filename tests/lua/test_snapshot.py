"""The capacity snapshot as the bridge loads it: every field checked once per load, a bad
pool left out (never the whole decision), a snapshot from the future not fresh."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.bridge.snapshot import PoolCapacity, to_lua
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.site import Site, load_site
from slurm_hetero.site.pools import pools

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
    (-31, "static", "stale: static order applies"),
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
    got, why = hetero.module.load_snapshot("for i = 1, 1e9 do end return {}")
    assert got is None and why == "runs too long"


def test_bridge_lua_alone_decides_with_a_snapshot(tmp_path: Path) -> None:
    hetero = JobSubmit.bridge({**TABLES, "SNAPSHOT_PATH": str(tmp_path / "snap.lua")})
    assert decision(hetero.submit({"accel": "any:2"})[1])["model"] == "m1"  # static: smallest first
    caps = {"m1@x86_64": PoolCapacity(4, 0, 0, 3), "m2@x86_64": PoolCapacity(4, 4, 4, 0)}
    (tmp_path / "snap.lua").write_text(to_lua(caps, hetero.now))
    hetero.now += 2
    rc, desc = hetero.submit({"accel": "any:2"})
    assert (rc, desc["tres_per_node"], decision(desc)["why"]) == (0, "gres:gpu:m2:2", "starts-now")
