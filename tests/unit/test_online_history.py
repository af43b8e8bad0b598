"""The users' history online: the export's tail plus the jobs that end later give exactly
the STATE an export made then would hold; each job counts once; only what Slurm writes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from slurm_hetero.bridge.history import FIELDS, OnlineHistory, to_lua, user_ok
from slurm_hetero.errors import InputError
from slurm_hetero.predict import features as F
from slurm_hetero.predict.export_lua import users_state
from slurm_hetero.predict.synthetic import workload
from slurm_hetero.predict.tail import KEEP, UserJobs, read_tail, tail_doc, user_states, write_tail
from slurm_hetero.slurm.parse import SACCT_DELIMITER, check_trusted
from slurm_hetero.slurm.runner import Runner


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    return workload(jobs=3000, users=25, seed=3)


def _cut(jobs: pd.DataFrame, q: float) -> int:
    return int(np.quantile(jobs["end"].dropna(), q))


def test_the_tail_gives_the_exported_state(jobs: pd.DataFrame, tmp_path: Path) -> None:
    until = _cut(jobs, 0.7)
    exported, _ = users_state(jobs, until)
    write_tail(jobs, until, tmp_path / "m.tail.json")
    tail = read_tail(tmp_path / "m.tail.json")
    assert tail.until == until and all(len(u.jobs) <= KEEP for u in tail.users.values())
    got = user_states(tail.users)
    assert set(got) == set(exported)
    for u, values in got.items():
        # The export takes windowed means as differences of prefix sums over every job
        # (features.History): the last bits differ from sums over the tail alone.
        np.testing.assert_allclose(values, exported[u], rtol=1e-9, err_msg=u)


def _rows(df: pd.DataFrame) -> str:
    """What `sacct_ended_argv(..., FIELDS)` prints for these jobs (epoch times)."""
    lines = []
    r: Any  # a row: its fields typed by the frame's columns, which the stubs cannot know
    for i, r in enumerate(df.itertuples()):
        v = {"JobIDRaw": str(1000 + i), "User": r.user, "State": "COMPLETED", "Submit": str(int(r.submit)),
             "Start": str(int(r.start)), "End": str(int(r.end)), "ElapsedRaw": str(int(r.runtime_s)),
             "TimelimitRaw": str(int(r.req_time_s // 60)) if r.req_time_s > 0 else "UNLIMITED",
             "ReqCPUS": str(int(r.req_cpus)), "NodeList": "n1"}
        lines.append(SACCT_DELIMITER.join(v[f] for f in FIELDS))
    return "\n".join(lines) + "\n"


def test_jobs_after_the_export_give_the_state_a_later_export_would(jobs: pd.DataFrame, tmp_path: Path) -> None:
    # Requested times in whole minutes, as sacct gives them.
    jobs = jobs.assign(req_time_s=(jobs["req_time_s"] // 60) * 60)
    until, later = _cut(jobs, 0.6), _cut(jobs, 0.8)
    write_tail(jobs, until, tmp_path / "m.tail.json")
    online = OnlineHistory(Runner(), tmp_path / "h.lua", tmp_path / "m.tail.json", clock=lambda: later)
    after = jobs[(jobs["end"] >= until) & (jobs["end"] < later)]
    text = _rows(after)
    assert online.take(text) == len(after)
    assert online.take(text) == 0  # the slack window reads some jobs again: each counts once
    fresh, _ = users_state(jobs, later)
    got = user_states(online.users)
    assert set(got) == set(after["user"])
    for u, values in got.items():
        np.testing.assert_allclose(values, fresh[u], rtol=1e-9, err_msg=u)


def test_only_slurm_written_fields_are_read() -> None:
    assert check_trusted(FIELDS) == list(FIELDS)


def test_rows_a_user_could_not_have_made_are_skipped(tmp_path: Path) -> None:
    online = OnlineHistory(Runner(), tmp_path / "h.lua", None, clock=lambda: 2e9, lookback_s=3e9)
    good = SACCT_DELIMITER.join(["7", "ann", "COMPLETED", "100", "110", "200", "90", "5", "2", "n[1-2]"])
    # A job cancelled while pending: Slurm gives it Start = End, ElapsedRaw 0 and no nodes.
    never_ran = SACCT_DELIMITER.join(["8", "ann", "CANCELLED by 0", "100", "200", "200", "0", "5", "2",
                                      "None assigned"])
    bad = [good.replace("ann", 'x"]=1,[[y'), good.replace("7", "7.batch", 1), good.replace("200", "Unknown"),
           good.replace("110", "0"), good.replace("ann", "a" * 65), never_ran]
    assert online.take("\n".join([*bad, good])) == 1
    assert list(online.users) == ["ann"] and online.users["ann"].n == 1


def test_the_published_file_is_data(tmp_path: Path) -> None:
    text = to_lua({"ann": [1.0] * len(F.STATE)}, 1796000000, 1795000000)
    assert text.startswith("-- hetero-history ") and '["ann"] = { 1.0,' in text
    assert f"nstate = {len(F.STATE)}" in text
    with pytest.raises(AssertionError):
        to_lua({'a"] = os.exit() --': [1.0] * len(F.STATE)}, 0, 0)
    assert user_ok("t_u12") and user_ok("first.last@EXAMPLE") and not user_ok("a b") and not user_ok("")


def test_a_bad_tail_is_an_input_error(jobs: pd.DataFrame, tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text('{"format": "other"}')
    with pytest.raises(InputError, match="not a history tail"):
        read_tail(p)
    doc = tail_doc(jobs, _cut(jobs, 0.5))
    user = next(iter(doc["users"]))  # type: ignore[call-overload]
    doc["users"][user]["jobs"][0] = [1, 2]  # type: ignore[index]
    p.write_text(__import__("json").dumps(doc))
    with pytest.raises(InputError, match=f"user '{user}'"):
        read_tail(p)


def test_a_re_export_starts_the_history_again_from_its_tail(jobs: pd.DataFrame, tmp_path: Path) -> None:
    jobs = jobs.assign(req_time_s=(jobs["req_time_s"] // 60) * 60)
    first, second, later = _cut(jobs, 0.5), _cut(jobs, 0.7), _cut(jobs, 0.8)
    tail = tmp_path / "m.tail.json"
    write_tail(jobs, first, tail)
    logs: list[str] = []
    online = OnlineHistory(Runner(), tmp_path / "h.lua", tail, clock=lambda: later, log=logs.append)
    online.take(_rows(jobs[(jobs["end"] >= first) & (jobs["end"] < later)]))
    write_tail(jobs, second, tail)  # the site exported again
    tail.write_text(tail.read_text() + " ")  # a size the stamp sees even within one mtime tick
    online.reload_tail()
    assert online.until == second and online.users == {}  # rebuilt: nothing counts twice
    online.take(_rows(jobs[(jobs["end"] >= first) & (jobs["end"] < later)]))  # the same read again
    fresh, _ = users_state(jobs, later)
    for u, values in user_states(online.users).items():
        np.testing.assert_allclose(values, fresh[u], rtol=1e-9, err_msg=u)
    tail.write_text("{broken")
    online.reload_tail()
    assert online.until == second and any("the last tail stays" in m for m in logs)


def test_only_the_users_whose_jobs_changed_are_computed_again(jobs: pd.DataFrame, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_hetero.bridge.history as H

    jobs = jobs.assign(req_time_s=(jobs["req_time_s"] // 60) * 60)
    until, later = _cut(jobs, 0.6), _cut(jobs, 0.8)
    write_tail(jobs, until, tmp_path / "m.tail.json")
    online = OnlineHistory(Runner(), tmp_path / "h.lua", tmp_path / "m.tail.json", clock=lambda: later)
    after = jobs[(jobs["end"] >= until) & (jobs["end"] < later)]
    online.take(_rows(after))
    online.publish(later)
    computed: list[set[str]] = []
    real = user_states  # what the history module imports and calls by that name

    def counting(users: Mapping[str, UserJobs]) -> dict[str, list[float]]:
        computed.append(set(users))
        return real(users)

    monkeypatch.setattr(H, "user_states", counting)
    one = after[after["user"] == after["user"].iloc[0]].iloc[:1].assign(end=later - 1)
    online.take(_rows(one).replace("1000", "99999", 1))  # a new job id of that user
    online.publish(later)
    assert computed == [{one["user"].iloc[0]}]
    fresh = user_states(online.users)
    assert set(fresh) == set(online.states)
    for u, values in fresh.items():  # prefix sums over other users: the last bits may differ
        np.testing.assert_allclose(online.states[u], values, rtol=1e-9, err_msg=u)
