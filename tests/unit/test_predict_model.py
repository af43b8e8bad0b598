"""Training, evaluation and the `model` commands, on a small synthetic workload."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table as jobtable
from slurm_hetero.predict import features as F
from slurm_hetero.predict import synthetic
from slurm_hetero.predict.cli import model as model_group
from slurm_hetero.predict.evaluate import evaluate, metrics, split
from slurm_hetero.predict.train import Model, TrainParams, train
from slurm_hetero.slurm.sacct import DELIM, FIELDS
from tests.fakeslurm import FakeSlurm, sacct_by_day, sacct_names

FAST = TrainParams(rounds=40, quantile_rounds=20, student_rounds=15, student_quantile_rounds=10,
                   min_data_in_leaf=20, threads=1)
FAST_ARGS = ["--rounds", "40", "--quantile-rounds", "20", "--threads", "1"]
SWF = "".join(f"{i} {i * 300} 5 {100 + (i % 7) * 50} 4 -1 -1 4 {1800 if i % 2 else 3600} -1 1 {i % 5} 1 -1 -1 -1 -1 -1\n"
              for i in range(1, 400))


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return synthetic.workload(jobs=3000, users=25, seed=1)


@pytest.fixture(scope="module")
def trained(table: pd.DataFrame) -> Model:
    return train(table, FAST)


def test_metrics() -> None:
    m = metrics(np.array([100.0, 50, 0]), np.array([50.0, 50, 0.4]))
    assert m["accuracy"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert m["under"] == 0 and m["mae_s"] == pytest.approx(50 / 3)


def test_predictions_stay_within_the_request(trained: Model, table: pd.DataFrame) -> None:
    df = table
    h = F.History.build(df)
    central, upper = trained.predict(h, df)
    req = df["req_time_s"].to_numpy(float)
    assert (central >= 1).all() and (upper >= central).all()
    assert (upper <= req).all() and (central <= req).all()
    no_limit = df.iloc[:50].copy()
    no_limit["req_time_s"] = -1
    c2, u2 = trained.predict(h, no_limit)
    assert np.isfinite(c2).all() and (u2 >= c2).all()


def test_save_and_load(trained: Model, table: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    trained.save(path)
    back = Model.load(path)
    h = F.History.build(table)
    a, b = trained.predict(h, table), back.predict(h, table)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert (back.quantile, back.upper_shift, back.partitions) == (0.9, trained.upper_shift, {"cpu": 0, "gpu": 1})
    assert back.central.num_trees() == FAST.student_rounds  # the lean student is what is kept
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(InputError, match="not a slurm-hetero runtime model"):
        Model.load(tmp_path / "bad.json")


def test_training_rejects_bad_params_and_tiny_tables(table: pd.DataFrame) -> None:
    with pytest.raises(InputError, match="--quantile"):
        train(table, TrainParams(quantile=1.5))
    with pytest.raises(InputError, match="usable jobs"):
        train(table.iloc[:10], FAST)


def test_evaluate_time_ordered(table: pd.DataFrame) -> None:
    df = table
    cut, test = split(df, 0.25)
    assert (test["submit"] >= cut).all() and len(test) == pytest.approx(750, abs=5)
    [r] = evaluate(df, params=FAST)
    assert r["train_jobs"] == int((F.usable(df) & (df["end"] < cut)).sum())
    assert set(r["predictors"]) == {"user_estimate", "last_two", "model"}
    for m in r["predictors"].values():
        assert 0 < m["accuracy"] <= 1 and 0 <= m["under"] <= 1
    assert r["predictors"]["user_estimate"]["under"] == 0  # runtimes never exceed the request here
    u = r["upper"]
    assert u["coverage"] == pytest.approx(1 - u["under"]) and 0 < u["mean_upper_over_request"] <= 1
    # the model learns the users' habits, which the baselines cannot
    assert r["predictors"]["model"]["accuracy"] > r["predictors"]["last_two"]["accuracy"]
    with pytest.raises(InputError, match="--source nope"):
        evaluate(df, ["nope"], FAST)
    with pytest.raises(InputError, match="--test-fraction"):
        split(df, 1.5)


def test_cli_ingest_train_eval_export(tmp_path: Path) -> None:
    swf = tmp_path / "tiny.swf"
    swf.write_text(SWF)
    jobs = tmp_path / "jobs.parquet"
    run = CliRunner()
    r = run.invoke(model_group, ["ingest", "-o", str(jobs), "--swf", str(swf)])
    assert r.exit_code == 0, r.output
    assert "399 jobs" in r.output and len(jobtable.read(jobs)) == 399
    model_file = tmp_path / "model.json"
    r = run.invoke(model_group, ["train", str(jobs), "-o", str(model_file), *FAST_ARGS])
    assert r.exit_code == 0, r.output
    assert Model.load(model_file).info["sources"] == ["swf:tiny"]
    out = tmp_path / "eval.json"
    r = run.invoke(model_group, ["eval", str(jobs), "--json", str(out), *FAST_ARGS])
    assert r.exit_code == 0, r.output
    assert "last_two" in r.output and json.loads(out.read_text())[0]["source"] == "swf:tiny"
    lua = tmp_path / "predict.lua"
    r = run.invoke(model_group, ["export", str(model_file), "--history", str(jobs), "-o", str(lua)])
    assert r.exit_code == 0, r.output
    assert lua.read_text().startswith("-- hetero-predict ") and "5 users with history" in r.output
    assert "sure = nil," in lua.read_text()  # any job's limit may be shortened
    r = run.invoke(model_group, ["export", str(model_file), "--history", str(jobs), "-o", str(lua),
                                 "--limit", "central", "--shorten-when-sure", "0.9", "--order", "upper"])
    assert r.exit_code == 0 and 'limit = "central",' in lua.read_text() and "sure = 0.9," in lua.read_text()
    assert 'order = "upper",' in lua.read_text()
    r = run.invoke(model_group, ["export", str(model_file), "--history", str(jobs), "-o", str(lua),
                                 "--shorten-when-sure", "0"])
    assert r.exit_code == 2 and "--shorten-when-sure" in r.output


def test_cli_errors(tmp_path: Path) -> None:
    run = CliRunner()
    r = run.invoke(model_group, ["train", str(tmp_path / "none.parquet"), "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and "no such job table" in r.output
    r = run.invoke(model_group, ["ingest", "-o", str(tmp_path / "j.parquet")])
    assert r.exit_code == 2 and "--swf" in r.output
    sacct = ["ingest", "-o", str(tmp_path / "j.parquet"), "--sacct", "--since", "2026-01-01", "--until",
             "2026-01-02", "--slurm-conf"]
    r = run.invoke(model_group, [*sacct, str(tmp_path / "no-slurm.conf")])
    assert r.exit_code == 2 and "--slurm-conf" in r.output
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")  # sacct fails on it at once (or is absent)
    r = run.invoke(model_group, [*sacct, str(tmp_path / "slurm.conf")])
    assert r.exit_code == 1 and "sacct" in r.output
    both = jobtable.merge(synthetic.workload(200, 5, source="a"), synthetic.workload(200, 5, source="b"))
    jobtable.write(both, tmp_path / "both.parquet")
    (tmp_path / "m.json").write_text("{}")
    r = run.invoke(model_group, ["export", str(tmp_path / "m.json"), "--history", str(tmp_path / "both.parquet"),
                                 "-o", str(tmp_path / "x.lua")])
    assert r.exit_code == 2 and "not a slurm-hetero runtime model" in r.output


def test_cli_ingest_from_sacct_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def job(i: int, end: float, state: str = "COMPLETED") -> str:
        row = dict.fromkeys(FIELDS, "")
        row.update({"JobIDRaw": str(i), "JobID": str(i), "Cluster": "demo", "User": "ann", "State": state,
                    "Submit": str(int(end) - 100), "Start": str(int(end) - 60), "End": str(int(end)),
                    "ElapsedRaw": "60", "TimelimitRaw": "10", "ReqCPUS": "2", "ReqTRES": "cpu=2,gres/gpu=1",
                    "NodeList": "n1"})
        return DELIM.join(row[f] for f in FIELDS)

    jan1 = datetime(2026, 1, 1).timestamp()
    slurm = FakeSlurm(monkeypatch).on("sacct", sacct_names(sacct_by_day({
        "2026-01-01": job(1, jan1 + 3600) + "\n" + job(2, jan1 + 7200),
        "2026-01-02": job(3, jan1 + 86400 + 60, "RUNNING")})))
    jobs = tmp_path / "jobs.parquet"
    (tmp_path / "slurm.conf").write_text("ClusterName=demo\n")
    args = ["ingest", "-o", str(jobs), "--sacct", "--since", "2025-12-31", "--until", "2026-01-03",
            "--slurm-conf", str(tmp_path / "slurm.conf")]
    r = CliRunner().invoke(model_group, args)
    assert r.exit_code == 0, r.output
    assert "sacct: 2 finished jobs" in r.output and "sacct:demo 2" in r.output
    df = jobtable.read(jobs)
    assert sorted(df["job_id"]) == ["1", "2"] and set(df["req_accel"]) == {1}
    assert len(slurm.calls) == 6 and {c.slurm_conf for c in slurm.calls} == {str(tmp_path / "slurm.conf")}
    r = CliRunner().invoke(model_group, args)
    assert r.exit_code == 0, r.output
    # settled days come from JOBS.parts; the one with a running job is asked again (rows, names)
    assert len(slurm.calls) == 8
    assert {c.argv[c.argv.index("-S") + 1] for c in slurm.calls[-2:]} == {"2026-01-02T00:00:00"}
