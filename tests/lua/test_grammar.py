"""ONE grammar on both sides: the shared case file through the bridge's own parsers
(bridge.lua, as the SPANK plugin's C checkers run it in `make -C spank test`), and every
case through the rendered job_submit.lua, where a user who bypasses the plugin lands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.site import load_site
from tests.lua import grammar_cases as G

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"
CASES = G.load()


@pytest.fixture(scope="module")
def lua() -> G.LuaGrammar:
    return G.LuaGrammar()


@pytest.fixture(scope="module")
def js() -> JobSubmit:
    return JobSubmit(render_site(load_site(DEMO), Profile(state_dir="/nonexistent"))["job_submit.lua"])


def test_the_case_file_covers_every_option() -> None:
    assert len(CASES) >= 300
    for option in G.OPTIONS:
        assert {c.ok for c in CASES if c.option == option} == {True, False}, option
    assert any(c.allowed() is None for c in CASES if c.option == "tier")  # syntax only too


def test_bridge_parsers_agree_with_the_case_file(lua: G.LuaGrammar) -> None:
    wrong = []
    for case in CASES:
        got, why = lua.parse(case.option, case.value, case.allowed())
        problem = G.mismatch(case, got)
        if problem:
            wrong.append(f"options.cases:{case.line}: --{case.option}={case.value!r}: {problem} {why}")
        elif got is None:  # the reason is a clean part of a one-line message
            assert why and re.fullmatch(r"[ -~]+", why), (case.line, why)
    assert not wrong, "\n".join(wrong)


def test_a_wrong_expectation_is_caught(lua: G.LuaGrammar) -> None:
    flipped = G.parse('accel "units=2." ok kind=units units_milli=2000\n'
                      'accel "units=2.5" ok kind=units units_milli=2501\n'
                      'accel "units=1.0001" ok kind=units units_milli=1000\n')
    assert [G.mismatch(c, lua.parse(c.option, c.value)[0]) for c in flipped] == [
        "rejected, want accepted",
        "meaning {'kind': 'units', 'name': '', 'count': 0, 'units_milli': 2500, 'mem_mib': 0}, want "
        "{'kind': 'units', 'name': '', 'count': 0, 'units_milli': 2501, 'mem_mib': 0}",
        "rejected, want accepted",
    ]


@pytest.mark.parametrize(("text", "error"), [
    ('accel "a\\q" reject', "unknown escape"),
    ('accel "a\\x00" reject', "not 00"),
    ('accel "\\{3}" reject', "byte before"),
    ('accel "a" maybe', "RESULT"),
    ('accel "a" reject kind=name', "no meaning"),
    ('accel "a" ok colour=red', "KEY=VALUE"),
    ('accel a ok', "quoted"),
    ('gres "a" ok', "unknown option"),
    ("@list energy=a", "unknown directive"),
    ("@lists power=a", "bad @lists"),
])
def test_case_file_errors_name_the_line(text: str, error: str) -> None:
    with pytest.raises(G.CaseFileError, match=f"x:1: .*{error}"):
        G.parse(text + "\n", "x")


def _submit(js: JobSubmit, case: G.Case) -> tuple[int, dict[str, object]]:
    js.logs.clear()
    opts = {f"_SLURM_SPANK_OPTION_hetero_{case.option}": case.value}
    if case.option == "migratable":  # valid only with --checkpoint: the case is its value
        opts["_SLURM_SPANK_OPTION_hetero_checkpoint"] = b"/shared/ckpt"
    env = js.lua.table_from(opts)
    desc = js.lua.table_from({"environment": env, "script": "#!/bin/sh\ntrue\n"})
    rc = int(js.lua.globals().slurm_job_submit(desc, js.lua.table(), 0))
    return rc, {k: v for k, v in dict(desc).items() if k != "environment"}


DEMO_LISTS = {"energy": ("performance", "balanced", "efficiency", "auto"), "tiers": ("diamond", "gold", "silver")}


def test_every_case_through_the_rendered_bridge(js: JobSubmit) -> None:
    """Without the plugin: what the grammar rejects is rejected with one line, never passed
    unchanged (fail open) nor half-applied; what it accepts is decided or refused for its
    meaning (unknown model, no pool), with a whole positive device count."""
    wrong = []
    for case in CASES:
        if case.option in ("energy", "tier") and case.lists != DEMO_LISTS:
            continue  # the demo site's lists are the bridge's
        rc, desc = _submit(js, case)
        lines, errors = js.user_lines(), [m for k, m in js.logs if k == "error"]
        where = f"options.cases:{case.line}: --{case.option}={case.value!r}"
        if errors or rc not in (0, -1):
            wrong.append(f"{where}: rc {rc}, errors {errors}")
        elif rc == -1 and not (len(lines) == 1 and lines[0].startswith(f"hetero: --{case.option}=")
                               and re.fullmatch(r"[ -~]+", lines[0])):
            wrong.append(f"{where}: rejected with {lines}")
        elif not case.ok and rc != -1:
            wrong.append(f"{where}: accepted as {desc}")
        elif case.ok and case.option in ("arch", "energy", "tier") and rc != 0:
            wrong.append(f"{where}: refused: {lines}")
        # An accepted job may hear what its tier allows ("hetero: tier NAME: ..."), nothing else.
        elif rc == 0 and ("admin_comment" not in desc or any(not ln.startswith("hetero: tier ") for ln in lines)):
            wrong.append(f"{where}: passed without a decision: {desc}")
        elif rc == 0 and case.option == "accel":
            m = re.fullmatch(r"gres:[a-z]+:[a-z0-9.-]+:([1-9][0-9]*)", str(desc["tres_per_node"]))
            if not m:
                wrong.append(f"{where}: tres_per_node {desc['tres_per_node']}")
    assert not wrong, "\n".join(wrong)


def test_the_bypass_that_ran_without_a_gpu_is_refused(js: JobSubmit) -> None:
    js.logs.clear()
    rc, desc = js.submit({"accel": "units=0.0000000001"})
    assert rc == -1 and "tres_per_node" not in desc
    assert js.user_lines() == ["hetero: --accel=units=0.0000000001: units has more than 3 decimals"]


@pytest.mark.parametrize(("value", "tres"), [
    ("units=0.001", "gres:gpu:v100:1"),   # the smallest request still asks for a device
    ("units=0.41", "gres:gpu:v100:1"),
    ("units=0.411", "gres:gpu:v100:2"),   # more than one V100 (0.41 units each)
    ("nvidia:1,mem>=1K", "gres:gpu:v100:1"),
    ("any:1,mem>=32768M", "gres:gpu:v100:1"),
    ("any:1,mem>=32769M", "gres:npu:910b:1"),
])
def test_accepted_values_ask_for_whole_devices(js: JobSubmit, value: str, tres: str) -> None:
    js.logs.clear()
    rc, desc = js.submit({"accel": value})
    assert (rc, desc.get("tres_per_node")) == (0, tres), js.logs


@pytest.mark.parametrize(("opts", "message"), [
    ({"accel": "units=2."}, "hetero: --accel=units=2.: units must be a decimal number like 2.5 (no sign, "
     "exponent, leading zero or trailing dot) of at most 100000"),
    ({"accel": "units=1.0001"}, "hetero: --accel=units=1.0001: units has more than 3 decimals"),
    ({"accel": "units=100000.001"}, "hetero: --accel=units=100000.001: units must be at most 100000"),
    ({"accel": "nvidia:0001"}, "hetero: --accel=nvidia:0001: the count must be 1 to 1024"),
    ({"accel": "h100,mem>=80b"}, "hetero: --accel=h100,mem>=80b: bad memory floor: use ,mem>=SIZE (e.g. ,mem>=80G)"),
    ({"accel": "h100,mem>=1048577T"}, "hetero: --accel=h100,mem>=1048577T: the memory floor is too large"),
    ({"accel": "a" * 65}, "hetero: --accel=" + "a" * 64 + "...: the name is longer than 64 characters"),
    ({"image": "a//b"}, "hetero: --image=a//b: use NAME[:TAG], NAME being '/'-separated components of "
     "letters, digits, '.', '_' or '-' that start with a letter or digit; this site has: busybox:1.35, "
     "pytorch:24.05"),
    ({"tier": "a" * 33}, "hetero: --tier=" + "a" * 33 + ": use one of diamond, gold, silver"),
])
def test_grammar_rejections_are_one_clear_line(js: JobSubmit, opts: dict[str, str], message: str) -> None:
    js.logs.clear()
    rc, _ = js.submit(opts, script="#!/bin/sh\n")
    assert rc == -1 and js.user_lines() == [message]


def test_parsed_values_are_remembered_within_bounds(js: JobSubmit) -> None:
    first = js.submit({"accel": "nvidia:2,mem>=80G"})[1]
    for i in range(1, 1200):  # more distinct values than the memo keeps
        rc, _ = js.submit({"accel": f"units=0.{i:03d}" if i < 1000 else f"any:{i - 998}"})
        assert rc == 0 or "no pool" in js.user_lines()[-1]
    again = js.submit({"accel": "nvidia:2,mem>=80G"})[1]
    assert again == first and again["tres_per_node"] == "gres:gpu:a100-80gb:2"
    assert js.submit({"accel": "nvidia:0002"})[0] == -1  # rejections are never remembered
