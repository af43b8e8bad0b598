"""The replay's clairvoyant predictor: which runtimes it knows, and that the arm gets it."""

from __future__ import annotations

from pathlib import Path

import lupa.lua51 as lua51
import pandas as pd

from slurm_hetero.predict import synthetic
from slurm_hetero.replay import oracle, run
from slurm_hetero.replay.window import Window


def _trace() -> pd.DataFrame:
    # submit, runtime, limit; the window is [1000, 4600) with 1,000 s of warm-up before it.
    rows = [(1, -100, 50, 600), (2, 100, 700, 600), (3, 999, 40, -1), (4, 2000, 30, 60),
            (5, 4599, float("nan"), 60), (6, 4600, 10, 60), (7, 3000, 5, float("nan"))]
    df = synthetic.workload(jobs=len(rows), users=2, seed=1)  # a jobs table's columns
    for column, values in zip(("job_id", "submit", "runtime_s", "req_time_s"), zip(*rows, strict=True),
                              strict=True):
        df[column] = [str(v) for v in values] if column == "job_id" else values
    df["start"], df["end"] = df["submit"], df["submit"] + df["runtime_s"]
    return df


def test_runtimes_are_the_windows_jobs_capped_at_their_limit() -> None:
    window = Window(1000, 1.0, 1000 / 3600)
    assert oracle.runtimes(_trace(), window) == [("2", 600), ("3", 40), ("4", 30), ("7", 5)]


def test_the_clairvoyant_arm_gets_a_chunk_of_its_windows_jobs(tmp_path: Path) -> None:
    window = Window(1000, 1.0, 1000 / 3600)
    files = run.predictor_files(_trace(), window, tmp_path, ["clairvoyant"])
    assert run.ARMS["clairvoyant"].predictor == "clairvoyant" and run.ARMS["clairvoyant"].bridge
    lua = lua51.LuaRuntime()
    m = lua.execute("local chunk = assert(loadstring(..., 'predict'))\n"
                    "setfenv(chunk, { math = math, tonumber = tonumber })\nreturn chunk()",
                    files["clairvoyant"].read_text())
    job = lua.table_from({"name": "r2", "time_limit": 10})
    assert tuple(m.predict_desc_as(job, 0, None, 10)) == (600, 600)  # 600 + margin, capped at 10 min
    assert tuple(m.predict_desc_as(lua.table_from({"name": "r3"}), 0, None, 4294967294)) == (70, 70)
    assert tuple(m.predict_desc_as(lua.table_from({"name": "r6"}), 0, None, 4294967294)) == (3600, 3600)


def test_the_clairvoyant_area_arm_is_the_ceiling_ordered_by_cpu_time(tmp_path: Path) -> None:
    import dataclasses

    import pytest

    window = Window(1000, 1.0, 1000 / 3600)
    files = run.predictor_files(_trace(), window, tmp_path, ["clairvoyant", "clairvoyant-area"])
    text = {k: p.read_text() for k, p in files.items()}
    assert 'order = "area",' in text["clairvoyant-area"] and 'order = "central",' in text["clairvoyant"]
    # the same runtimes, the same chunk but its order (the first line is the export's time)
    same = text["clairvoyant-area"].replace('order = "area",', 'order = "central",')
    assert same.splitlines()[1:] == text["clairvoyant"].splitlines()[1:]
    assert dataclasses.replace(run.ARMS["clairvoyant-area"], name="clairvoyant",
                               predictor="clairvoyant") == run.ARMS["clairvoyant"]
    with pytest.raises(ValueError, match="order 'upper'"):
        oracle.export_clairvoyant([], order="upper")
