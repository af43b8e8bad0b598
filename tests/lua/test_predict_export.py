"""The exported Lua model under Lua 5.1 (lupa): parity with LightGBM, users, job_desc."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import lightgbm as lgb
import lupa.lua51 as lua51
import numpy as np
import pandas as pd
import pytest

from slurm_hetero.jobs import table as jobtable
from slurm_hetero.predict import export_lua, synthetic
from slurm_hetero.predict import features as F
from slurm_hetero.predict.train import Model, TrainParams, train

# Deployed shape (depth, leaves, student sizes) with fewer teacher rounds, to stay quick.
PARAMS = TrainParams(rounds=60, quantile_rounds=40, threads=1)
SANDBOX = ("local text = ...\nlocal chunk = assert(loadstring(text, 'predict'))\n"
           "setfenv(chunk, { math = math, string = string, tonumber = tonumber, tostring = tostring,\n"
           "                 ipairs = ipairs, unpack = unpack })\nreturn chunk()")


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    df = synthetic.workload(jobs=14_000, users=60, seed=7)
    df.loc[df.index % 13 == 0, "req_time_s"] = -1  # jobs without a time limit
    df.loc[df.index % 17 == 0, "partition"] = "debug"  # a partition the model never saw
    return df


@pytest.fixture(scope="module")
def model(table: pd.DataFrame) -> Model:
    return train(table.iloc[:10_000], PARAMS)


@pytest.fixture(scope="module")
def lua() -> Any:
    rt = lua51.LuaRuntime(unpack_returned_tuples=True)
    assert rt.eval("_VERSION") == "Lua 5.1"
    return rt


@pytest.fixture(scope="module")
def exported(model: Model, table: pd.DataFrame) -> str:
    return export_lua.export_text(model, table.iloc[:10_000], generated_at=1)


@pytest.fixture(scope="module")
def lmodel(lua: Any, exported: str) -> Any:
    return lua.execute(SANDBOX, exported)


BULK = """
local M, cols, n, nstate = ...
local c, u = {}, {}
for i = 1, n do
    local state = {}
    for k = 1, nstate do state[k] = cols.state[k][i] end
    local job = { user = cols.user[i], time_limit_s = cols.req[i], cpus = cols.cpus[i],
                  accel = cols.accel[i], partition = cols.part[i], submit = cols.submit[i] }
    c[i], u[i] = M.predict_with(state, job)
end
return c, u
"""


def lua_predict(lua: Any, lmodel: Any, state: dict[str, np.ndarray], jobs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    cols = lua.table_from({
        "state": lua.table_from([lua.table_from(state[s].tolist()) for s in F.STATE]),
        "user": lua.table_from(jobs["user"].tolist()),
        "req": lua.table_from(jobs["req_time_s"].astype(float).tolist()),
        "cpus": lua.table_from(jobs["req_cpus"].astype(float).tolist()),
        "accel": lua.table_from(jobs["req_accel"].astype(float).tolist()),
        "part": lua.table_from(jobs["partition"].tolist()),
        "submit": lua.table_from(jobs["submit"].astype(float).tolist()),
    })
    c, u = lua.execute(BULK, lmodel, cols, len(jobs), len(F.STATE))
    return np.array([c[i + 1] for i in range(len(jobs))]), np.array([u[i + 1] for i in range(len(jobs))])


def test_parity_with_lightgbm_on_10000_rows(lua: Any, lmodel: Any, model: Model, table: pd.DataFrame) -> None:
    jobs = table.iloc[:10_000]  # from the start: users with zero, one, two ... finished jobs
    h = F.History.build(table)
    state = h.state(F.user_keys(jobs), jobs["submit"].to_numpy(np.int64))
    assert {0, 1, 2} <= set(state["n"].tolist())  # users without, with one, with two jobs
    central, upper = model.predict(h, jobs)
    lc, lu = lua_predict(lua, lmodel, state, jobs)
    np.testing.assert_allclose(lc, central, rtol=1e-6, atol=0)
    np.testing.assert_allclose(lu, upper, rtol=1e-6, atol=0)
    assert (jobs["req_time_s"] < 0).any() and (lu >= lc).all()
    # the raw tree scores too, on a sample, through the debugging entry point
    x, base = F.table_features(jobs.iloc[:300], h, model.partitions, model.default_runtime)
    raw = model.central.predict(x, raw_score=True)
    for i in range(300):
        j = jobs.iloc[i]
        st = lua.table_from([float(state[s][i]) for s in F.STATE])
        e = lmodel.explain(lua.table_from({"user": j["user"], "time_limit_s": float(j["req_time_s"]),
                                           "cpus": float(j["req_cpus"]), "accel": float(j["req_accel"]),
                                           "partition": j["partition"], "submit": float(j["submit"])}), st)
        assert [e[f] for f in F.FEATURES] == x[i].tolist()  # bit for bit
        assert e["base"] == base[i] and e["central_score"] == pytest.approx(raw[i], rel=1e-12, abs=1e-12)


def test_users_table_is_the_history_at_export(lua: Any, lmodel: Any, model: Model, table: pd.DataFrame) -> None:
    past = table.iloc[:10_000]
    until = int(past.loc[F.usable(past), "end"].max()) + 1
    later = table.iloc[10_000:10_400].copy()
    later["submit"] = until + np.arange(len(later))
    central, upper = model.predict(F.History.build(past), later)
    for i in range(len(later)):
        j = later.iloc[i]
        job = lua.table_from({"user": j["user"], "time_limit_s": float(j["req_time_s"]), "cpus": float(j["req_cpus"]),
                              "accel": float(j["req_accel"]), "partition": j["partition"], "submit": float(j["submit"])})
        c, u = lmodel.predict(job)
        assert c == pytest.approx(central[i], rel=1e-6) and u == pytest.approx(upper[i], rel=1e-6)
    stranger = lua.table_from({"user": "nobody", "time_limit_s": 3600, "cpus": 4, "submit": until})
    assert lmodel.predict(stranger) == lmodel.predict_with(None, stranger)
    assert lmodel.users["nobody"] is None and lmodel.users["user000"] is not None


def test_chunk_is_lua51_and_defines_no_globals(lua: Any, exported: str) -> None:
    before = set(lua.globals().keys())
    lua.execute(SANDBOX, exported)
    assert set(lua.globals().keys()) == before
    assert exported.startswith("-- hetero-predict 1\n")
    m = lua.execute(SANDBOX, exported)
    assert m.format == "slurm-hetero-predict" and m.quantile == 0.9
    assert list(m.features.values()) == list(F.FEATURES)


def test_predictions_never_exceed_the_request(lua: Any, lmodel: Any) -> None:
    for limit in (60, 600, 3600, 86400 * 7):
        for user in ("user000", "user001", "nobody"):
            c, u = lmodel.predict(lua.table_from({"user": user, "time_limit_s": limit, "cpus": 8, "submit": 2e9}))
            assert 1 <= c <= u <= limit
    bad = lua.table_from({"user": "user000", "time_limit_s": float("nan"), "cpus": float("nan"), "submit": "x"})
    c, u = lmodel.predict(bad)  # NaN and junk become "not set", never a NaN feature
    assert c == c and u == u and c >= 1


def test_job_from_desc(lua: Any, lmodel: Any) -> None:
    def job(**desc: Any) -> dict[str, Any]:
        return dict(lmodel.job_from_desc(lua.table_from(desc), 1234, "cpu"))

    j = job(user_name="ann", user_id=1000, time_limit=90, min_cpus=8, partition="gpu", tres_per_node="gres:gpu:2",
            min_nodes=2)
    assert j == {"user": "ann", "time_limit_s": 5400, "cpus": 8, "accel": 4, "partition": "gpu", "submit": 1234}
    j = job(user_id=1001, time_limit=4294967294, min_cpus=4294967294, num_tasks=4, cpus_per_task=65534,
            tres_per_job="gres/npu:910b:3")
    assert j == {"user": "1001", "cpus": 4, "accel": 3, "partition": "cpu", "submit": 1234}
    assert job(tres_per_node="gres:gpu:h100,gres:shard:4")["accel"] == 1
    assert job(tres_per_node="gres/gpu:a100:2", num_tasks=2, cpus_per_task=3)["cpus"] == 6
    assert job()["accel"] == 0 and job()["cpus"] == 1
    c, u = lmodel.predict(lmodel.job_from_desc(lua.table_from({"user_id": 5, "time_limit": 30}), 2e9))
    assert 1 <= c <= u <= 1800
    for desc in ({"user_name": "user003", "time_limit": 240, "num_tasks": 8, "tres_per_node": "gres/gpu:1"},
                 {"user_id": 77, "time_limit": 4294967294}, {}):
        d = lua.table_from(desc)
        assert lmodel.predict_desc(d, 2e9, "cpu") == lmodel.predict(lmodel.job_from_desc(d, 2e9, "cpu"))


def test_the_same_question_is_answered_once(lua: Any, lmodel: Any) -> None:
    # The per-job path keeps its last 4 answers: a burst of like jobs in one second runs the
    # trees once per question. Counted in VM instructions; every answer equals a fresh prediction.
    out = lua.execute("""
        local m = ...
        local function cost(desc, now)
            local n = 0
            debug.sethook(function() n = n + 1 end, "", 1)
            local c, u = m.predict_desc_as(desc, now, "cpu", nil, nil, nil)
            debug.sethook()
            local fc, fu = m.predict(m.job_from_desc(desc, now, "cpu"))
            return n, c == fc and u == fu
        end
        local a = { user_name = "user001", time_limit = 120, min_cpus = 4 }
        local rows = {}
        local function step(desc, now) local n, same = cost(desc, now); rows[#rows + 1] = { n, same } end
        step(a, 2e9); step(a, 2e9)                                   -- asked again: no trees
        step(a, 2e9 + 1)                                             -- a second later
        step({ user_name = "user001", time_limit = 120, min_cpus = 8 }, 2e9 + 1)  -- another job
        step({ user_name = "user002", time_limit = 120, min_cpus = 8 }, 2e9 + 1)  -- another user
        step({ user_name = "user002", time_limit = 120, min_cpus = 8 }, 2e9 + 1)
        step({ user_name = "user002", time_limit = 120, min_cpus = 8, tres_per_node = "gres:gpu:1" }, 2e9 + 1)
        step({ user_name = "user002", time_limit = 4294967294 }, 2e9 + 1)  -- no limit
        step(a, 2e9 + 1)                                             -- 4 others since: gone
        step({ user_name = "user002", time_limit = 120, min_cpus = 8 }, 2e9 + 1)  -- 3 since: kept
        return rows
    """, lmodel)
    rows = [(out[i][1], out[i][2]) for i in range(1, len(out) + 1)]
    assert all(same for _, same in rows)
    full = rows[0][0]
    repeated = [n for i, (n, _) in enumerate(rows) if i in (1, 5, 9)]
    asked = [n for i, (n, _) in enumerate(rows) if i in (0, 2, 3, 4, 6, 7, 8)]  # 8: 4 others since
    assert all(n < full / 3 for n in repeated), rows
    assert all(n > full / 2 for n in asked), rows


def test_user_name_looked_up_once_per_uid_and_hour(lua: Any, lmodel: Any) -> None:
    # slurmctld resolves job_desc.user_name through NSS at each read: once per uid and hour.
    reads = lua.execute("""
        local m = ...
        local n, names = 0, { [2001] = "ann", [2002] = "bob" }
        local function desc(uid)
            return setmetatable({}, { __index = function(_, k)
                if k == "user_id" then return uid end
                if k == "user_name" then n = n + 1; return names[uid] end
                if k == "time_limit" then return 60 end
            end })
        end
        local function user(uid, now) return m.job_from_desc(desc(uid), now).user end
        local out = {}
        local function step(uid, now) local u = user(uid, now); out[#out + 1] = u .. "/" .. n end
        step(2001, 1e9); step(2001, 1e9 + 10); step(2002, 1e9 + 20); step(2001, 1e9 + 30)
        step(2003, 1e9 + 40); step(2003, 1e9 + 50)   -- no such user: the uid, asked each time
        names[2003] = "cy"; step(2003, 1e9 + 60)      -- created since: seen at once
        names[2001] = "ann2"; step(2001, 1e9 + 100)   -- renamed: the old name within the hour
        step(2001, 1e9 + 3600)                        -- an hour on: asked again
        step(2001, 1e9 - 5)                           -- the clock went back: asked again
        return table.concat(out, " ")
    """, lmodel)
    assert reads.split() == ["ann/1", "ann/1", "bob/2", "ann/2", "2003/3", "2003/4", "cy/5", "ann/5", "ann2/6",
                             "ann2/7"]


def test_many_and_odd_user_names(lua: Any, model: Model) -> None:
    df = synthetic.workload(jobs=3000, users=20, seed=2)
    df["user"] = [f"u{i % 1200}" for i in range(len(df))]
    odd = 'o"brien\\ü\n--]]'
    df.loc[df["user"] == "u7", "user"] = odd
    text = export_lua.export_text(model, df)
    assert text.count("local function users_") >= 2  # split below Lua 5.1's constants limit
    m = lua.execute(SANDBOX, text)
    state, _ = export_lua.users_state(df)
    got = m.state(odd)
    assert got is not None and [got[i + 1] for i in range(len(F.STATE))] == state[odd]
    names = sorted(state)  # the first and the last user of the flat history
    assert [list(m.state(u).values()) for u in (names[0], names[-1])] == [state[names[0]], state[names[-1]]]
    assert m.state("nobody") is None
    with pytest.raises(Exception, match="several sources"):
        export_lua.users_state(jobtable.merge(df, synthetic.workload(100, 3, source="x")))


@pytest.mark.parametrize("zero_as_missing", [False, True])
def test_missing_value_rules_match_lightgbm(lua: Any, zero_as_missing: bool) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    x[rng.random(2000) < 0.2, 0] = np.nan
    x[rng.random(2000) < 0.2, 1] = 0.0
    y = np.nan_to_num(x[:, 0], nan=3.0) + (x[:, 1] == 0) * 2 + x[:, 2]
    b = lgb.train({"objective": "l2", "verbose": -1, "num_leaves": 15, "min_data_in_leaf": 5,
                   "zero_as_missing": zero_as_missing}, lgb.Dataset(x, y, feature_name=["a", "b", "c"]), 30)
    probe = np.vstack([x[:200], [[np.nan, 0.0, 0.5], [0.0, np.nan, -1.0], [1e-40, -1e-40, 0.0],
                                 [-0.3, 2.0, np.nan]]])
    want = b.predict(probe, raw_score=True)
    full = lua.execute(export_lua.compile_booster(b.dump_model(), "f", ("a", "b", "c"), nan_free=False)
                       + "\nreturn f")
    np.testing.assert_allclose([full(*row) for row in probe.tolist()], want, rtol=1e-12, atol=1e-12)
    # the lean form (the export's features never are NaN) agrees wherever the input has no NaN
    lean = lua.execute(export_lua.compile_booster(b.dump_model(), "f", ("a", "b", "c")) + "\nreturn f")
    clean = ~np.isnan(probe).any(axis=1)
    np.testing.assert_allclose([lean(*row) for row in probe[clean].tolist()], want[clean], rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(shutil.which("lua5.1") is None, reason="Debian's lua5.1 not installed")
def test_system_lua51_agrees(lua: Any, lmodel: Any, exported: str, tmp_path: Path) -> None:
    """Debian's liblua5.1 is the one slurmctld's job_submit/lua links."""
    path = tmp_path / "predict.lua"
    path.write_text(exported)
    script = (f"local m = dofile({export_lua.lua_string(str(path))})\n"
              "local c, u = m.predict_desc({ user_name = 'user001', time_limit = 120, min_cpus = 4 }, 2e9)\n"
              "io.write(string.format('%.17g %.17g', c, u))")
    out = subprocess.run(["lua5.1", "-e", script], capture_output=True, text=True, check=True).stdout
    want = lua.execute("local m = ...; return m.predict_desc({ user_name = 'user001', time_limit = 120, "
                       "min_cpus = 4 }, 2e9)", lmodel)
    assert [float(v) for v in out.split()] == list(want)


def test_a_source_name_cannot_end_the_comment_line(lua: Any, model: Model, table: pd.DataFrame) -> None:
    import dataclasses

    hostile = dataclasses.replace(model, info={**model.info, "sources": ["t.swf\nerror('ran')"]})
    text = export_lua.export_text(hostile, table)
    assert "\nerror('ran')" not in text
    assert lua.execute(SANDBOX, text) is not None  # loads, and nothing of the name ran


# ---- the EASY++ reference: the same chunk, no trees --------------------------------------

def _crafted() -> pd.DataFrame:
    """ann ran 100 s then 300 s (asking 10 min); bob one job of 50 s; cyd none."""
    rows = [("ann", 1000, 1010, 100, 600), ("ann", 2000, 2010, 300, 600), ("bob", 1500, 1500, 50, 600),
            ("dee", 100, 100, 40, 600), ("dee", 200, 200, 20, 600), ("dee", 300, 300, 9000, 600)]
    return pd.DataFrame({"source": "t", "job_id": [str(i) for i in range(len(rows))],
                         "user": [r[0] for r in rows], "submit": [float(r[1]) for r in rows],
                         "start": [float(r[2]) for r in rows], "end": [float(r[2] + r[3]) for r in rows],
                         "runtime_s": [float(r[3]) for r in rows], "req_time_s": [float(r[4]) for r in rows],
                         "req_cpus": 1.0, "req_accel": 0.0, "partition": "cpu", "state": "COMPLETED"})


@pytest.mark.parametrize("user, limit_s, expected", [
    ("ann", 3600, 200.0),  # the average of the last two runtimes
    ("ann", 120, 120.0),  # never above the job's own request
    ("bob", 3600, 50.0),  # one job: its runtime
    ("cyd", 900, 900.0),  # none: the user's request
    ("cyd", None, export_lua.EASY_DEFAULT_RUNTIME),  # none and no request
    ("dee", 3600, 3600.0),  # last two (20, 9000): 4510, capped at the request
])
def test_easy_predicts_the_last_two_average(lua: Any, user: str, limit_s: float | None, expected: float) -> None:
    m = lua.execute(SANDBOX, export_lua.export_easy(_crafted(), generated_at=1))
    job = lua.table_from({"user": user, "cpus": 1, "accel": 0, "partition": "cpu", "submit": 50_000,
                          **({"time_limit_s": limit_s} if limit_s else {})})
    assert tuple(m.predict(job)) == (expected, expected)


def test_easy_reads_the_online_history_first(lua: Any) -> None:
    m = lua.execute(SANDBOX, export_lua.export_easy(_crafted(), generated_at=1))
    fresh = [2.0, 15.0, 17.0, 100.0] + [-1.0] * (len(F.STATE) - 4)  # n, r1, r2, r3, ...
    m.set_overlay(lua.table_from({"ann": lua.table_from(fresh)}))
    job = lua.table_from({"user": "ann", "time_limit_s": 600, "cpus": 1, "partition": "cpu", "submit": 9e4})
    assert tuple(m.predict(job)) == (16.0, 16.0)
