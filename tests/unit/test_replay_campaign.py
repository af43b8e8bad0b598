"""benchmarks/replay_campaign.py on replayed windows committed in benchmarks/results: a
replay_kth.py document and the same window's arms as replay_alibaba.py writes them (a list
of arms, or a command beside them) merge into the same figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests import benchmark

ROOT = Path(__file__).resolve().parents[2]
WINDOW = ROOT / "benchmarks" / "results" / "replay-campaign" / "kth-v2-w0.json"


def campaign() -> ModuleType:
    return benchmark.load("replay_campaign")


def merge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *parts: Path) -> dict[str, Any]:
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["replay_campaign.py", "--log", "KTH-SP2", *map(str, parts), "--out", str(out)])
    assert campaign().main() == 0
    got: dict[str, Any] = json.loads(out.read_text())
    return got


def test_both_formats_give_the_same_window(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    doc = json.loads(WINDOW.read_text())
    arms = list(doc["windows"][0]["arms"].values())
    (tmp_path / "list.json").write_text(json.dumps(arms))
    (tmp_path / "cmd.json").write_text(json.dumps({"command": "benchmarks/replay_alibaba.py --skip 0", "arms": arms}))
    kth = merge(monkeypatch, tmp_path, WINDOW)
    row = kth["per_window"][0]
    plain, bridge = row["arms"]["plain"], row["arms"]["bridge"]
    # the figures the window's own JSON holds, and its command
    assert plain["ave_bsld"] == pytest.approx(doc["windows"][0]["arms"]["plain"]["figures"]["all"]["ave_bsld"])
    assert kth["ratios"]["ave_bsld"]["bridge/plain"]["per_window"] == [pytest.approx(bridge["ave_bsld"] /
                                                                                     plain["ave_bsld"])]
    assert kth["commands"] == [doc["command"]] and plain["utilisation"]["all"] > 0
    for name, command in (("list.json", None), ("cmd.json", "benchmarks/replay_alibaba.py --skip 0")):
        other = merge(monkeypatch, tmp_path, tmp_path / name)
        assert other["per_window"] == kth["per_window"] and other["commands"] == [command]


def test_not_a_result_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"windows": [{"start": 1}]}))
    monkeypatch.setattr(sys, "argv", ["replay_campaign.py", "--log", "x", str(bad), "--out", str(tmp_path / "o")])
    assert campaign().main() == 2
    assert "not a replay_kth.py or replay_alibaba.py result" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_geometric_mean_is_symmetric_and_absent_pairs_are_left_out(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    kth = merge(monkeypatch, tmp_path, WINDOW)
    ratios = kth["ratios"]["ave_bsld"]
    assert "bridge-nomodel/plain" not in ratios and "bridge-migrate/plain" not in ratios  # not in this window
    one = ratios["bridge/plain"]
    assert one["geomean"] == pytest.approx(one["per_window"][0]) and one["geo_ci95"] is None  # one window
    g = campaign().geometric
    up, ci = g([3.8, 0.9, 0.5])
    down, ci_inv = g([1 / 3.8, 1 / 0.9, 1 / 0.5])
    assert up * down == pytest.approx(1.0) and ci[0] * ci_inv[1] == pytest.approx(1.0)
    assert g([1.0, 0.0]) == (None, None) and g([]) == (None, None)


def test_a_windows_arms_from_two_runs_are_joined_and_none_counts_twice(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """An arm run later for the same window (its start) joins that window's row; the same arm
    in two runs of one window is refused, as it would be counted twice."""
    doc = json.loads(WINDOW.read_text())
    w = doc["windows"][0]
    first = {"command": "run 1", "windows": [{"start": w["start"], "arms": {"plain": w["arms"]["plain"]}}]}
    later = {"command": "run 2", "windows": [{"start": w["start"], "arms": {"bridge": w["arms"]["bridge"]}}]}
    (tmp_path / "a.json").write_text(json.dumps(first))
    (tmp_path / "b.json").write_text(json.dumps(later))
    joined = merge(monkeypatch, tmp_path, tmp_path / "a.json", tmp_path / "b.json")
    whole = merge(monkeypatch, tmp_path, WINDOW)
    assert joined["windows"] == 1 and joined["commands"] == ["run 1", "run 2"]
    assert joined["ratios"]["ave_bsld"]["bridge/plain"] == whole["ratios"]["ave_bsld"]["bridge/plain"]
    (tmp_path / "c.json").write_text(json.dumps(first))
    monkeypatch.setattr(sys, "argv", ["replay_campaign.py", "--log", "x", str(tmp_path / "a.json"),
                                      str(tmp_path / "c.json"), "--out", str(tmp_path / "o")])
    assert campaign().main() == 2 and "arms plain are in" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_replay_alibaba_runs_of_one_arm_each_join_by_the_windows_start(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """Lanes run each (window, arm) as its own replay_alibaba.py run: a file without plain is
    joined to its window by the arm's own start, not refused."""
    doc = json.loads(WINDOW.read_text())
    arms = doc["windows"][0]["arms"]
    (tmp_path / "w0-bridge.json").write_text(json.dumps({"command": "b", "arms": [arms["bridge"]]}))
    (tmp_path / "w0-plain.json").write_text(json.dumps({"command": "p", "arms": [arms["plain"]]}))
    joined = merge(monkeypatch, tmp_path, tmp_path / "w0-bridge.json", tmp_path / "w0-plain.json")
    whole = merge(monkeypatch, tmp_path, WINDOW)
    assert joined["windows"] == 1 and joined["commands"] == ["b", "p"]
    row, full = joined["per_window"][0], whole["per_window"][0]  # the window has easy++ too
    assert row["start"] == full["start"] and sorted(row["arms"]) == ["bridge", "plain"]
    for k in ("bridge", "plain"):  # figures of the arm alone (not those over the arms in common)
        assert [row["arms"][k][f] for f in ("ave_bsld", "wait_mean")] == [full["arms"][k][f]
                                                                         for f in ("ave_bsld", "wait_mean")]
    assert joined["ratios"]["ave_bsld"]["bridge/plain"] == whole["ratios"]["ave_bsld"]["bridge/plain"]


def test_an_arm_the_machine_paused_during_is_listed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A window whose arm ran across a pause of this machine (a VM snapshot: the faked clock
    jumps speed x the pause) is named, to be rerun; files from before the check say None."""
    doc = json.loads(WINDOW.read_text())
    arms = doc["windows"][0]["arms"]
    assert "paused" not in arms["plain"]["seconds"]
    arms["bridge"]["seconds"]["paused"] = 13.6
    arms["plain"]["seconds"]["paused"] = 0.4  # under PAUSE_S: NTP's slewing, not a pause
    (tmp_path / "w.json").write_text(json.dumps(doc))
    got = merge(monkeypatch, tmp_path, tmp_path / "w.json")
    start = doc["windows"][0]["start"]
    assert got["paused"] == [[start, "bridge", 13.6]]
    assert got["per_window"][0]["arms"]["plain"]["paused_s"] == 0.4
    assert f"window {start} arm bridge: this machine paused 13.6 s during it: rerun the window" in \
        capsys.readouterr().out
    old = merge(monkeypatch, tmp_path, WINDOW)
    assert old["paused"] == [] and old["per_window"][0]["arms"]["plain"]["paused_s"] is None


def test_pooled_accelerator_wait_weighs_windows_by_their_pods() -> None:
    """Three pods at 64 s in plain and 3,348 s with the bridge (ratio 52) beside sixteen at 1,334
    and 1,077 s: the per-window mean says 26.6, the pooled ratio what the 19 pods waited."""
    def row(n: int, bridge: float, plain: float) -> dict[str, Any]:
        return {"arms": {"bridge-nomodel": {"accel_jobs": n, "accel_wait_mean": bridge},
                         "plain": {"accel_jobs": n, "accel_wait_mean": plain}}}
    rows = [row(3, 3348.0, 64.0), row(16, 1077.0, 1334.0)]
    got = campaign().pooled(rows)["bridge-nomodel/plain"]
    assert got["ratio"] == pytest.approx((3 * 3348 + 16 * 1077) / (3 * 64 + 16 * 1334))
    assert got["jobs"] == 19 and got["windows"] == 2
    lo, hi = got["ci95_bootstrap"]
    # resampling two windows: each alone, or both: the interval spans window 2 alone to window 1 alone
    assert lo == pytest.approx(1077 / 1334) and hi == pytest.approx(3348 / 64)
    assert campaign().pooled(rows) == campaign().pooled(rows)  # seeded: the same on every merge
    assert campaign().pooled([row(3, 10.0, 0.0)]) == {}  # no wait in plain: no ratio
    assert campaign().pooled([row(3, 10.0, 5.0)])["bridge-nomodel/plain"]["ci95_bootstrap"] is None
