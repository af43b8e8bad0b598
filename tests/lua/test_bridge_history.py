"""The users' history online, as the bridge loads it under Lua 5.1: the daemon's file moves
that user's predictions only, and a bad file or entry never reaches the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hetero.bridge.history import HISTORY_FILE, to_lua
from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.predict import export_lua
from slurm_hetero.predict import features as F
from slurm_hetero.slurm.comment import parse_comment
from tests.predict_fixture import history

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"


Exported = tuple[dict[str, list[float]], int]  # users' STATE as exported, history_until


@pytest.fixture(scope="module")
def exported() -> Exported:
    return export_lua.users_state(history())


def p50(js: JobSubmit, user: str) -> int:
    rc, desc = js.submit(user_name=user, time_limit=120, min_cpus=4)
    assert rc == 0
    return int(parse_comment(desc["admin_comment"])["pred"]["p50"])


def publish(js: JobSubmit, text: str) -> None:
    (js.state / HISTORY_FILE).write_text(text)  # type: ignore[attr-defined]
    js.now += 11  # past HISTORY_CHECK_S: the bridge looks again


def test_a_users_fresh_history_moves_that_users_predictions_only(js: JobSubmit, exported: Exported) -> None:
    states, until = exported
    before = {u: p50(js, u) for u in ("user001", "user005", "user002")}
    assert before["user001"] != before["user005"]
    publish(js, to_lua({"user001": states["user005"]}, js.now, until))
    assert p50(js, "user001") == before["user005"]  # exactly what that history predicts
    assert p50(js, "user002") == before["user002"] and p50(js, "user005") == before["user005"]
    assert not [m for k, m in js.logs if k == "error"], js.logs


def test_a_new_file_is_read_once_per_check_and_only_when_its_generation_changes(
        js: JobSubmit, exported: Exported) -> None:
    states, until = exported
    first = p50(js, "user001")
    path = js.state / HISTORY_FILE  # type: ignore[attr-defined]
    path.write_text(to_lua({"user001": states["user005"]}, js.now, until))
    assert p50(js, "user001") == first  # read at the first job, then not for HISTORY_CHECK_S
    js.now += 11
    moved = p50(js, "user001")
    assert moved != first
    gen_line, rest = path.read_text().split("\n", 1)
    path.write_text(gen_line + "\n" + rest.replace('"user001"', '"user002"'))  # same generation
    js.now += 11
    assert p50(js, "user001") == moved


def _entries(states: dict[str, list[float]]) -> str:
    return "\n".join(f'  ["{u}"] = {{ {", ".join(repr(v) for v in s)} }},' for u, s in states.items())


def test_bad_entries_are_skipped_and_the_rest_applies(js: JobSubmit, exported: Exported) -> None:
    states, until = exported
    good, other = states["user005"], states["user006"]
    base = {u: p50(js, u) for u in ("user001", "user002", "user003", "user005")}
    rows = "\n".join([
        f'  ["user001"] = {{ {", ".join(map(repr, good))} }},',  # good
        f'  ["user002"] = {{ {", ".join(map(repr, other[:-1]))} }},',  # one number short
        f'  ["user003"] = {{ "1", {", ".join(map(repr, other[1:]))} }},',  # a string
        f'  ["a b"] = {{ {", ".join(map(repr, other))} }},',  # not a user name
        f'  ["{"x" * 65}"] = {{ {", ".join(map(repr, other))} }},',  # too long for one
        f'  [1] = {{ {", ".join(map(repr, other))} }},',  # not a name at all
    ])
    publish(js, f"-- hetero-history 7\nreturn {{ generated_at = {js.now}, history_until = {until}, "
                f"nstate = {len(F.STATE)}, users = {{\n{rows}\n}} }}\n")
    assert p50(js, "user001") == base["user005"]
    assert p50(js, "user002") == base["user002"] and p50(js, "user003") == base["user003"]
    assert any("5 entries skipped" in m for k, m in js.logs if k == "error"), js.logs


@pytest.mark.parametrize("body, why", [
    ("return { generated_at = 1, history_until = {until}, nstate = 3, users = {} }", "entries of 3 numbers"),
    ("return { generated_at = 1, history_until = {old}, nstate = {n}, users = {} }", "older than the model"),
    ("return { generated_at = 1, nstate = {n}, users = {} }", "older than the model"),
    ("return { generated_at = 1, history_until = {until}, nstate = {n} }", "no users table"),
    ("x = ('x'):rep(2^28) return { users = {} }", "not data"),
    ("return { users = { [\"user001\"] = { nan } } }", "not data"),
    ("-- {pad}\nreturn {}", "larger than"),
])
def test_a_bad_file_is_rejected_whole_and_the_last_good_one_stays(js: JobSubmit, exported: Exported,
                                                                  body: str, why: str) -> None:
    states, until = exported
    publish(js, to_lua({"user001": states["user005"]}, js.now, until))
    moved = p50(js, "user001")
    text = (body.replace("{until}", str(until)).replace("{old}", str(until - 1))
            .replace("{n}", str(len(F.STATE))).replace("{pad}", "x" * (2 * 1024 * 1024)))
    publish(js, f"-- hetero-history 99\n{text}\n")
    assert p50(js, "user001") == moved
    errors = [m for k, m in js.logs if k == "error"]
    assert errors and why in errors[-1] and "the last one applies" in errors[-1], errors
