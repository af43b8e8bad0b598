"""Replay's pure parts: the window, the scaling, which jobs go and how they ask."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table as jobtable
from slurm_hetero.replay.submit import Request, sbatch_argv
from slurm_hetero.replay.trace import cut_swf, read_trace
from slurm_hetero.replay.window import (
    Capacity,
    ReplayJob,
    Window,
    account_for,
    parse_start,
    real_seconds,
    select,
)
from slurm_hetero.site import load_site

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
WINDOW_START = 850956401  # tests/data/replay/README.md


def table(rows: list[dict[str, object]]) -> pd.DataFrame:
    """Job-table rows as a reader makes them: numbers as floats, NaN unknown."""
    df = pd.DataFrame([{"source": "swf:t", **r} for r in rows])
    return jobtable.build({c: df[c].to_numpy() for c in df.columns}, len(df))


def job(jid: str, submit: int, run: float = 60, req: float = 600, cpus: float = 1, user: str = "u1",
        accel: float = 0) -> dict[str, object]:
    return {"job_id": jid, "submit": submit, "runtime_s": run, "req_time_s": req, "req_cpus": cpus,
            "user": user, "req_accel": accel}


CAP = Capacity(cpus=100, accel=0, max_limit_min=3 * 1440)


def test_window_keeps_warmup_unmeasured_and_skips_what_cannot_run() -> None:
    df = table([job("1", 900), job("2", 1000), job("3", 2000, cpus=101), job("4", 2500, run=float("nan")),
                job("5", 2600, req=4 * 86400), job("6", 4599), job("7", 4600), job("8", 3000, accel=2)])
    sel = select(df, Window(1000, 1.0, warmup_hours=100 / 3600), CAP)
    assert [(j.trace_id, j.offset_s, j.measured) for j in sel.jobs] == [
        ("1", -100, False), ("2", 0, True), ("6", 3599, True)]
    assert dict(sel.skipped) == {"more than the default partition's 100 CPUs": 1, "runtime unknown": 1,
                                 "limit above the partition's MaxTime": 1,
                                 "more than the site's 0 accelerators": 1}


def test_limits_round_up_to_slurm_minutes_and_runs_past_the_limit_expect_the_limit() -> None:
    sel = select(table([job("1", 0, run=700, req=601), job("2", 0, run=30, req=float("nan"), cpus=0.5),
                        job("3", 0, req=float("nan"))]),
                 Window(0, 1), CAP)
    a, b, _ = sel.jobs
    assert (a.limit_min, a.limit_s, a.expected_s) == (11, 660, 660)
    # No limit in the trace: the partition's MaxTime (never its DefaultTime); a fraction of a
    # CPU asks for one.
    assert (b.limit_min, b.expected_s, b.cpus) == (3 * 1440, 30, 1)
    assert select(table([job("3", 0, req=float("nan"))]), Window(0, 1),
                  Capacity(100, 0, None)).jobs[0].limit_min is None


def test_one_account_per_trace_user_with_safe_names() -> None:
    assert account_for("12") == "t_12"
    odd = account_for("x;rm -rf /|`")
    assert re.fullmatch(r"t_h[0-9a-f]{12}", odd)
    assert account_for("x;rm -rf /|`") == odd and account_for("y") != odd
    sel = select(table([job("1", 0, user="u12"), job("2", 1, user="u12"), job("3", 2, user="u7")]), Window(0, 1), CAP)
    assert sel.accounts == ["t_u12", "t_u7"]


def test_scaling_and_start_forms() -> None:
    assert real_seconds(1800, 20) == 90.0
    assert Window(0, 0.5).end == 1800 and Window(100, 1, 0.5).first == 100 - 1800
    assert parse_start("+2d", 10) == 10 + 2 * 86400
    assert parse_start("1996-12-19T00:46:41", 0) == WINDOW_START
    with pytest.raises(InputError, match="--start"):
        parse_start("next tuesday", 0)
    with pytest.raises(InputError, match="--hours"):
        Window(0, 0)


def test_argv_carries_no_trace_text_and_the_bridge_asks_hardware_agnostically() -> None:
    j = ReplayJob("42", 0, 90, 5, 3, 0, "x;rm -rf /", True)
    plain = sbatch_argv(j, Request(False), Path("/w/job.sh"), Path("/w"))
    assert plain[-2:] == ["/w/job.sh", "90"] and "--ntasks=3" in plain and "--time=5" in plain
    assert f"--account={account_for('x;rm -rf /')}" in plain
    assert not any("rm -rf" in a for a in plain)
    gpu = ReplayJob("43", 0, 90, 5, 1, 2, "1", True)
    assert "--gres=gpu:2" in sbatch_argv(gpu, Request(False, "gpu", "gpu"), Path("/j"), Path("/w"))
    bridged = sbatch_argv(gpu, Request(True), Path("/j"), Path("/w"))
    assert "--accel=any:2" in bridged and "--arch=any" in bridged and not any("gres" in a for a in bridged)


def test_shipped_window_reads_back_through_the_job_table_reader() -> None:
    df = read_trace(DATA / "kth-window.swf")
    sel = select(df, Window(WINDOW_START, 0.5), Capacity.of(load_site(DATA / "kth-site.yaml")))
    assert len(sel.jobs) == 52 and not sel.skipped
    assert max(j.offset_s + j.runtime_s for j in sel.jobs) < 1800  # all can end inside the window
    assert (df["end"] < WINDOW_START).sum() > 1000  # history to train the bridge's model on


def test_cut_keeps_header_and_only_the_window(tmp_path: Path) -> None:
    src = tmp_path / "t.swf"
    src.write_text("; UnixStartTime: 1000\n; Note: x\n"
                   "1 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n"
                   "2 50 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n"
                   "3 100 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n")
    text = cut_swf(src, 1050, 1100, ["cut for a test"])
    assert text.splitlines()[:3] == ["; UnixStartTime: 1000", "; Note: x", "; cut for a test"]
    out = tmp_path / "cut.swf"
    out.write_text(text)
    assert read_trace(out)["job_id"].tolist() == ["2"]
    (tmp_path / "bad.swf").write_text("1 2 3\n")
    with pytest.raises(InputError, match=r"bad\.swf:1"):
        cut_swf(tmp_path / "bad.swf", 0, 1, [])


def test_local_users_mode_submits_as_the_users_account_name_and_needs_a_reachable_workdir(tmp_path: Path) -> None:
    from slurm_hetero.replay.run import check_reachable

    j = ReplayJob("1", 0, 60, 5, 1, 0, "u12", True)
    argv = sbatch_argv(j, Request(False, as_users=True), Path("/w/job.sh"), Path("/w"))
    assert "--uid=t_u12" in argv and "--account=t_u12" in argv
    assert not any(a.startswith("--uid") for a in sbatch_argv(j, Request(False), Path("/j"), Path("/w")))
    private = tmp_path / "private"
    (private / "work").mkdir(parents=True)
    private.chmod(0o700)
    with pytest.raises(InputError, match="not searchable by other users"):
        check_reachable(private / "work")
    private.chmod(0o755)
    if all(p.stat().st_mode & 0o001 for p in tmp_path.parents):
        check_reachable(private / "work")
