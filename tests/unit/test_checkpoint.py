"""Checkpoint fencing: a stale incarnation (a node cut off from slurmctld while Slurm
restarted its job elsewhere) can never overwrite or be resumed instead of the newer one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.checkpoint import Checkpointer, FencedOut
from slurm_hetero.checkpoint.cli import checkpoint
from slurm_hetero.checkpoint.fence import CheckpointDir, Epoch
from slurm_hetero.errors import InputError


def save(ck: Checkpointer, text: str) -> str:
    with ck.writing() as tmp:
        Path(tmp).write_text(text)
    latest = ck.dir.latest()
    assert latest
    return latest


def test_resume_from_the_newest_incarnations_lineage(tmp_path: Path) -> None:
    d = str(tmp_path)
    first = Checkpointer(d, restart_count=0, job_id="7")
    assert first.resume is None
    for step in ("1", "2", "3"):
        save(first, step)
    second = Checkpointer(d, restart_count=1, job_id="7")  # requeued elsewhere
    assert second.resume and Path(second.resume).read_text() == "3"
    # The first incarnation still runs (its node lost contact) and tries to go on.
    with pytest.raises(FencedOut), first.writing() as tmp:
        Path(tmp).write_text("4-stale")
    assert not list(tmp_path.glob(".tmp-*"))  # the refused temp file is gone
    assert Path(CheckpointDir(d).latest() or "").read_text() == "3"  # still the base
    save(second, "4")
    assert Path(CheckpointDir(d).latest() or "").read_text() == "4"


def test_a_stale_commit_racing_the_new_epoch_is_never_resumed(tmp_path: Path) -> None:
    """The stale side checked `owns` just before the new epoch appeared, then renamed."""
    d = CheckpointDir(str(tmp_path))
    old, _ = d.begin(0)
    for text in ("1", "2"):
        t = d.temp_path(old)
        Path(t).write_text(text)
        d.commit(old, t)
    _, base = d.begin(1)
    assert base and Path(base).read_text() == "2"
    # Force the race: rename under the old epoch's name as `commit` would after its check.
    late = d.temp_path(old)
    Path(late).write_text("3-stale")
    os.rename(late, str(tmp_path / "ckpt-00000000-00000003"))
    assert Path(d.latest() or "").read_text() == "2"  # the newest epoch's base, not the stale 3
    assert (tmp_path / "ckpt-00000000-00000002").exists()  # the base survived the old GC


def test_an_epoch_is_claimed_once_and_only_upwards(tmp_path: Path) -> None:
    d = CheckpointDir(str(tmp_path))
    d.begin(2)
    with pytest.raises(FencedOut, match="already claimed"):
        d.begin(2)
    with pytest.raises(FencedOut):
        d.begin(1)
    e = Epoch(2, "0" * 32)  # right number, wrong token: not ours
    t = d.temp_path(e)
    Path(t).write_text("x")
    with pytest.raises(FencedOut):
        d.commit(e, t)


def test_old_checkpoints_are_pruned_and_folders_work(tmp_path: Path) -> None:
    ck = Checkpointer(str(tmp_path), restart_count=0)
    for i in range(5):
        with ck.writing() as tmp:
            os.mkdir(tmp)
            Path(tmp, "state").write_text(str(i))
    names = sorted(p.name for p in tmp_path.glob("ckpt-*"))
    assert names == ["ckpt-00000000-00000004", "ckpt-00000000-00000005"]
    assert Path(ck.dir.latest() or "", "state").read_text() == "4"


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="absolute"):
        CheckpointDir("rel/dir")
    d = CheckpointDir(str(tmp_path))
    e, _ = d.begin(0)
    with pytest.raises(InputError, match="temp_path"):
        d.commit(e, str(tmp_path / "elsewhere"))
    with pytest.raises(InputError, match="RESTARTS:TOKEN"):
        Epoch.parse("1:$(reboot)")


def test_shell_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    d = str(tmp_path / "c k")  # a space: the printed assignments must be quoted
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    r = runner.invoke(checkpoint, ["begin", d])
    assert r.exit_code == 0, r.output
    env = dict(line.removeprefix("export ").split("=", 1) for line in r.output.splitlines())
    assert env["HETERO_CKPT_RESUME"] == "''"
    monkeypatch.setenv("HETERO_CKPT_EPOCH", env["HETERO_CKPT_EPOCH"])
    tmp = runner.invoke(checkpoint, ["temp", d]).output.strip()
    Path(tmp).write_text("one")
    r = runner.invoke(checkpoint, ["commit", d, tmp])
    assert r.exit_code == 0 and r.output.strip().endswith("ckpt-00000000-00000001")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert runner.invoke(checkpoint, ["begin", d]).exit_code == 0  # the requeued incarnation
    tmp = runner.invoke(checkpoint, ["temp", d]).output.strip()  # the stale one, old epoch
    Path(tmp).write_text("two")
    r = runner.invoke(checkpoint, ["commit", d, tmp])
    assert r.exit_code == 3, r.output
    assert runner.invoke(checkpoint, ["latest", d]).output.strip().endswith("ckpt-00000000-00000001")


def test_folder_from_the_jobs_checkpoint_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without FOLDER the commands use $SLURM_HETERO_CHECKPOINT (sbatch --checkpoint=DIR)."""
    runner = CliRunner()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    monkeypatch.delenv("SLURM_HETERO_CHECKPOINT", raising=False)
    r = runner.invoke(checkpoint, ["begin"])
    assert r.exit_code == 2 and "SLURM_HETERO_CHECKPOINT is not set" in r.output
    d = tmp_path / "job"
    monkeypatch.setenv("SLURM_HETERO_CHECKPOINT", str(d))
    r = runner.invoke(checkpoint, ["begin"])
    assert r.exit_code == 0, r.output
    env = dict(line.removeprefix("export ").split("=", 1) for line in r.output.splitlines())
    monkeypatch.setenv("HETERO_CKPT_EPOCH", env["HETERO_CKPT_EPOCH"])
    tmp = runner.invoke(checkpoint, ["temp"]).output.strip()
    assert Path(tmp).parent == d
    Path(tmp).write_text("one")
    r = runner.invoke(checkpoint, ["commit", tmp])
    assert r.exit_code == 0, r.output
    assert runner.invoke(checkpoint, ["latest"]).output.strip() == r.output.strip()
    other = tmp_path / "given"  # a FOLDER on the command line wins over the variable
    assert runner.invoke(checkpoint, ["latest", str(other)]).output.strip() == ""
    assert runner.invoke(checkpoint, ["commit", "a", "b", "c"]).exit_code == 2
