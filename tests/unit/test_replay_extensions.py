"""benchmarks/replay_extensions.py: the daemon's extensions per arm, from its bridge.log and
the window's jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests import benchmark

LOG = """\
[12:00:01] job 11: limit 3 -> 6 min (ran 1.6 min, own limit 10)
[12:00:09] job 11: limit 6 -> 10 min (ran 5.1 min, own limit 10)
[12:00:04] job 12: limit 2 -> 4 min (ran 0.2 min, own limit 30)
[12:00:05] job 13: limit not extended: gone
[12:00:06] job 14: ended at its own limit of 10 min (ran 10.0 min, limit 10)
"""
JOBS = [{"job_id": "11", "runtime_s": 400}, {"job_id": "12", "runtime_s": 100},
        {"job_id": "13", "runtime_s": 50}, {"job_id": "14", "runtime_s": None}]


def test_it_counts_extended_jobs_and_those_that_ended_within_their_first_limit() -> None:
    ext = benchmark.load("replay_extensions")
    assert ext.extensions(LOG) == {"11": (3, 2), "12": (2, 1)}
    # 11 ran 400 s, past its first 3 minutes; 12 ran 100 s of its first 2 minutes
    assert ext.arm_figures(JOBS, LOG) == {"jobs": 4, "extended": 2, "extensions": 3,
                                          "extended_but_ended_within_first_limit": 1}


def test_a_window_and_its_work_folder_give_per_arm_totals(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "w0" / "central-tight" / "log").mkdir(parents=True)
    (work / "w0" / "central-tight" / "log" / "bridge.log").write_text(LOG)
    window = {"command": f"benchmarks/replay_kth.py --arms plain,central-tight --workdir {work} --json x",
              "windows": [{"start": 5, "arms": {"plain": {"jobs": JOBS}, "central-tight": {"jobs": JOBS}}}]}
    (tmp_path / "w.json").write_text(json.dumps(window))
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["replay_extensions.py", "--log", "X", str(tmp_path / "w.json"),
                                      "--out", str(out)])
    assert benchmark.load("replay_extensions").main() == 0
    doc = json.loads(out.read_text())
    assert doc["totals"] == {"central-tight": {"jobs": 4, "extended": 2, "extensions": 3,
                                               "extended_but_ended_within_first_limit": 1}}
    assert doc["per_window"][0]["start"] == 5 and list(doc["per_window"][0]["arms"]) == ["central-tight"]
