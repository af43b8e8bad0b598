"""`slurm-hetero replay` commands through click's CliRunner (no cluster: cut, show, and
the input errors `run` reports before booting anything)."""

from __future__ import annotations

import json
from pathlib import Path

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
