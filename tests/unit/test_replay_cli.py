"""`slurm-hetero replay` commands through click's CliRunner (no cluster: cut, show, and
the input errors `run` reports before booting anything)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from slurm_hetero.replay import report
from slurm_hetero.replay.cli import replay_group
from slurm_hetero.replay.metrics import ALL, Outcome, figures
from slurm_hetero.replay.run import ArmResult
from slurm_hetero.replay.window import Window

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"


def no_cluster(workdir: Path) -> object:
    raise AssertionError("no cluster may be booted in these tests")


CLI = replay_group(no_cluster)


def test_cut_writes_a_window_that_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "w.swf"
    r = CliRunner().invoke(CLI, ["cut", "--trace", str(DATA / "kth-window.swf"), "--start", "850956401",
                                 "--hours", "0.5", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "52 jobs" in r.output and "; UnixStartTime: 843480031" in out.read_text()


def test_run_rejects_bad_input_with_exit_2_before_booting(tmp_path: Path) -> None:
    base = ["run", "--trace", str(DATA / "kth-window.swf"), "--site", str(DATA / "kth-site.yaml"),
            "--workdir", str(tmp_path)]
    r = CliRunner().invoke(CLI, [*base, "--start", "850956401", "--arms", "plain,fast"])
    assert r.exit_code == 2 and "--arms" in r.output
    r = CliRunner().invoke(CLI, [*base, "--start", "someday"])
    assert r.exit_code == 2 and "--start" in r.output
    r = CliRunner().invoke(CLI, [*base, "--start", "850956401", "--speed", "5000", "--arms", "plain"])
    assert r.exit_code == 2 and "--speed" in r.output
    r = CliRunner().invoke(CLI, [*base, "--start", "1", "--arms", "plain"])  # no job in this window
    assert r.exit_code == 2 and "no job" in r.output


def test_show_prints_a_saved_result_and_refuses_other_files(tmp_path: Path) -> None:
    o = Outcome("1", "1", True, 0.0, 0.1, 5.0, 65.0, "COMPLETED", 60, 60, 600, 4, 0, "cpu@x86_64")
    figs = figures([o], {"cpu@x86_64": 100}, 0.0, 1.0, 100.0)
    arm = ArmResult("plain", 20.0, Window(0, 1), 0.0, 100.0, [o], figs, True, [], {"total": 9.0})
    path = tmp_path / "replay.json"
    report.write(report.document([arm], None, None, {"trace": "t"}), path)
    r = CliRunner().invoke(CLI, ["show", str(path)])
    assert r.exit_code == 0, r.output
    assert "plain" in r.output and "cpu@x86_64" in r.output
    back, _, _ = report.read(path)
    assert back[0].figures[ALL].ave_bsld == figs[ALL].ave_bsld and back[0].outcomes == [o]
    (tmp_path / "x.json").write_text(json.dumps({"format": "other"}))
    r = CliRunner().invoke(CLI, ["show", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "not a replay result" in r.output


def test_predictor_files_train_once_and_export_each_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay's model arms share one model trained on the jobs that ended before the
    window; each kind is its own export (limit, sure, order); easy++ trains nothing."""
    from slurm_hetero.predict import synthetic
    from slurm_hetero.predict import train as train_mod
    from slurm_hetero.replay import run
    from tests.predict_fixture import PARAMS

    calls: list[int] = []
    real = train_mod.train

    def fast(df: pd.DataFrame, until: int | None = None) -> train_mod.Model:
        calls.append(len(df))
        return real(df, PARAMS, until=until)

    monkeypatch.setattr(train_mod, "train", fast)
    trace = synthetic.workload(jobs=1500, users=12, seed=4)
    window = Window(int(trace["submit"].quantile(0.8)), 1.0, 0.5)
    kinds = ["model", "model-central", "model-cautious", "model-order90", "model-area", "easy++"]
    files = run.predictor_files(trace, window, tmp_path, kinds, names={"model": "predict.lua"})
    assert sorted(files) == sorted(kinds) and files["model"] == tmp_path / "predict.lua"
    assert calls == [int((trace["end"].between(0, window.first - 1)).sum())]  # once, on the past only
    text = {k: p.read_text() for k, p in files.items()}
    assert 'limit = "upper",' in text["model"] and "sure = nil," in text["model"]
    assert 'limit = "central",' in text["model-central"] and "sure = nil," in text["model-central"]
    assert "sure = 0.9," in text["model-cautious"] and 'order = "upper",' in text["model-cautious"]
    assert "EASY++" in text["easy++"]
    assert 'order = "upper",' in text["model-order90"] and 'order = "central",' in text["model-central"]
    assert 'order = "area",' in text["model-area"] and 'limit = "central",' in text["model-area"]
    assert all((tmp_path / f"{p.name}").exists() for p in files.values())
    with pytest.raises(ValueError, match="model-psychic"):
        run.predictor_files(trace, window, tmp_path, ["model-psychic"])
