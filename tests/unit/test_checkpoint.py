"""Checkpoint fencing: a stale incarnation (a node cut off from slurmctld while Slurm
restarted its job elsewhere) can never overwrite or be resumed instead of the newer one."""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.checkpoint import Checkpointer, FencedOut
from slurm_hetero.checkpoint.cli import checkpoint
from slurm_hetero.checkpoint.fence import CheckpointDir, Epoch, UnsafeFolder
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


# ---- the folder is the job user's alone ---------------------------------------------------------
# Tests run as root: "another user" is `nobody`, made the owner with chown; the fake-uid test
# needs no root (the folder is checked against `uid`, the effective uid unless given).
try:
    OTHER = pwd.getpwnam("nobody").pw_uid
except KeyError:
    OTHER = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def commit_text(d: CheckpointDir, epoch: Epoch, text: str) -> str:
    t = d.temp_path(epoch)
    Path(t).write_text(text)
    return d.commit(epoch, t)


def begin_cli(folder: Path, monkeypatch: pytest.MonkeyPatch, restarts: int) -> tuple[int, str]:
    monkeypatch.setenv("SLURM_RESTART_COUNT", str(restarts))
    r = CliRunner().invoke(checkpoint, ["begin", str(folder)])
    return r.exit_code, r.output


@as_root
def test_a_folder_another_user_made_for_the_job_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reported attack: another user pre-creates the job's folder with an epoch far ahead
    (every begin would be fenced, exit 3) and a checkpoint (it would become the resume path)."""
    d = tmp_path / "job"
    (d / "epochs").mkdir(parents=True)
    (d / "epochs" / "99999998").write_text(json.dumps({"token": "0" * 32, "base": None}))
    (d / "ckpt-00000000-00000001").write_text("planted")
    for p in (d, d / "epochs", d / "epochs" / "99999998", d / "ckpt-00000000-00000001"):
        os.chown(p, OTHER, -1)
        os.chmod(p, 0o700 if p.is_dir() else 0o600)
    code, out = begin_cli(d, monkeypatch, 0)
    assert code == 2, out  # refused as bad input, with the path and the reason; not 3 (fenced)
    assert f"{d}: owned by uid {OTHER}" in out and "must all belong to the job's user" in out
    assert "HETERO_CKPT" not in out
    r = CliRunner().invoke(checkpoint, ["latest", str(d)])
    assert r.exit_code == 2 and "planted" not in r.output and "ckpt-" not in r.output, r.output
    with pytest.raises(UnsafeFolder, match="owned by uid"):
        CheckpointDir(str(d)).latest()


def test_the_folder_must_belong_to_the_uid_running(tmp_path: Path) -> None:
    d = CheckpointDir(str(tmp_path / "job"))
    first, _ = d.begin(0)
    commit_text(d, first, "1")
    someone_else = CheckpointDir(d.path, uid=os.geteuid() + 1)  # as if run by another user
    with pytest.raises(UnsafeFolder, match=r"owned by uid \d+.*not by the job's user"):
        someone_else.latest()
    with pytest.raises(UnsafeFolder):
        someone_else.begin(1)
    assert sorted(os.listdir(d.epochs)) == ["00000000"]  # it claimed nothing


@pytest.mark.parametrize("mode", [0o770, 0o720, 0o702, 0o777, 0o1777], ids=oct)
def test_a_folder_group_or_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    os.chmod(folder, mode)
    with pytest.raises(UnsafeFolder, match=rf"{folder}: mode {mode:04o} lets group or others write.*"
                                           rf"chmod go-w {folder}"):
        CheckpointDir(str(folder)).begin(0)
    assert not (folder / "epochs").exists()


def test_an_epochs_folder_group_or_others_can_write_is_refused(tmp_path: Path) -> None:
    d = CheckpointDir(str(tmp_path / "job"))
    d.begin(0)
    os.chmod(d.epochs, 0o777)
    with pytest.raises(UnsafeFolder, match="epochs: mode 0777"):
        d.latest()
    with pytest.raises(UnsafeFolder, match="epochs: mode 0777"):
        d.begin(1)


@as_root
def test_an_epoch_planted_by_another_user_never_fences_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "job"
    d = CheckpointDir(str(folder))
    first, _ = d.begin(0)
    commit_text(d, first, "1")
    planted = folder / "epochs" / "99999998"
    planted.write_text(json.dumps({"token": "0" * 32, "base": None}))
    os.chown(planted, OTHER, -1)
    with pytest.raises(UnsafeFolder, match=f"{planted}: owned by uid {OTHER}"):
        d.begin(1)  # not FencedOut: the job is told what is wrong, not that it is stale
    code, out = begin_cli(folder, monkeypatch, 1)
    assert code == 2 and str(planted) in out, out
    assert not (folder / "epochs" / "00000001").exists()


@as_root
@pytest.mark.parametrize("as_folder", [False, True])
def test_a_checkpoint_planted_by_another_user_is_never_resumed(tmp_path: Path, as_folder: bool) -> None:
    folder = tmp_path / "job"
    d = CheckpointDir(str(folder))
    d.begin(0)  # no checkpoint yet: a planted ckpt-...-1 would be epoch 0's newest
    planted = folder / "ckpt-00000000-00000001"
    if as_folder:
        planted.mkdir(mode=0o700)
    else:
        planted.write_text("planted")
    os.chown(planted, OTHER, -1)
    with pytest.raises(UnsafeFolder, match=f"{planted}: owned by uid {OTHER}"):
        d.latest()
    with pytest.raises(UnsafeFolder, match=f"{planted}: owned by uid {OTHER}"):
        d.begin(1)


def test_symlinks_are_refused_never_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "job"
    link.symlink_to(real)
    with pytest.raises(UnsafeFolder, match=f"{link}: is a symbolic link"):
        CheckpointDir(str(link)).begin(0)
    assert list(real.iterdir()) == []  # nothing was written through the link

    folder = tmp_path / "job2"
    d = CheckpointDir(str(folder))
    first, _ = d.begin(0)
    commit_text(d, first, "1")
    # A link in place of the newest checkpoint, of an epoch record, of epochs/ itself.
    ckpt = folder / "ckpt-00000000-00000002"
    ckpt.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeFolder, match=f"{ckpt}: is a symbolic link"):
        d.latest()
    ckpt.unlink()
    epoch = folder / "epochs" / "00000005"
    epoch.symlink_to(folder / "epochs" / "00000000")
    with pytest.raises(UnsafeFolder, match=f"{epoch}: is a symbolic link"):
        d.begin(6)
    epoch.unlink()
    os.rename(folder / "epochs", tmp_path / "epochs-real")
    (folder / "epochs").symlink_to(tmp_path / "epochs-real")
    with pytest.raises(UnsafeFolder, match="epochs: is a symbolic link"):
        d.begin(1)


def test_new_folders_records_and_checkpoints_are_private(tmp_path: Path) -> None:
    old = os.umask(0)  # the loosest umask: the modes come from us, not from it
    try:
        d = CheckpointDir(str(tmp_path / "job"))
        e, _ = d.begin(0)
        t = d.temp_path(e)
        Path(t).write_text("1")
        os.chmod(t, 0o666)
        file_ckpt = d.commit(e, t)
        t = d.temp_path(e)
        os.mkdir(t, 0o777)
        dir_ckpt = d.commit(e, t)
    finally:
        os.umask(old)

    def mode(p: str) -> int:
        return stat.S_IMODE(os.lstat(p).st_mode)

    assert (mode(d.path), mode(d.epochs), mode(os.path.join(d.epochs, "00000000"))) == (0o700, 0o700, 0o600)
    assert (mode(file_ckpt), mode(dir_ckpt)) == (0o644, 0o755)  # group/other write dropped
    assert d.latest() == dir_ckpt


# ---- the race: a stale incarnation commits while the new one begins ------------------------------
def test_stale_commits_between_begins_read_and_its_claim_never_remove_the_base(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reported race, as one fixed interleaving: the new incarnation (restart 1) has read
    the folder and is about to create its epoch file; right then the old one, still the newest,
    commits twice (each commit prunes beyond two). The hook runs at that create (the O_EXCL
    open of epochs/00000001), whichever order begin reads in."""
    d = CheckpointDir(str(tmp_path))
    old, _ = d.begin(0)
    for text in ("1", "2"):
        commit_text(d, old, text)
    real_open = os.open
    fired: list[str] = []

    def open_hook(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if os.path.basename(path) == "00000001" and flags & os.O_EXCL and not fired:
            fired.extend(commit_text(d, old, text) for text in ("3", "4"))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(os, "open", open_hook)
        _, base = d.begin(1)
    assert fired, "the hook never ran: begin no longer claims its epoch with an O_EXCL open"
    assert base and Path(base).read_text() == "4"  # the newest when the epoch appeared, and it exists
    assert d.latest() == base
    assert json.loads((tmp_path / "epochs" / "00000001").read_text())["base"] == "ckpt-00000000-00000004"


def test_a_stale_commit_in_flight_across_the_new_epoch_keeps_the_base(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old incarnation passed its ownership check, then the new one began (whole), then
    the old one's rename and prune ran: the base the new one chose survives it."""
    d = CheckpointDir(str(tmp_path))
    old, _ = d.begin(0)
    for text in ("1", "2"):
        commit_text(d, old, text)
    real_rename = os.rename
    began: list[str | None] = []

    def rename_hook(src: str, dst: str, *args: object, **kwargs: object) -> None:
        if os.path.basename(dst) == "ckpt-00000000-00000003" and not began:
            began.append(d.begin(1)[1])
        real_rename(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    t = d.temp_path(old)
    Path(t).write_text("3-stale")
    with monkeypatch.context() as m:
        m.setattr(os, "rename", rename_hook)
        d.commit(old, t)  # it renames (the check passed first), and must not prune the base
    base = began[0]
    assert base and Path(base).read_text() == "2"
    assert d.latest() == base


def test_latest_never_names_a_missing_base(tmp_path: Path) -> None:
    """A folder where the race already happened (epoch 1 names a base the old incarnation
    pruned), and a claim whose begin has not recorded its base yet: latest() and the next
    begin take the lineage before it, and only a checkpoint that exists."""
    d = CheckpointDir(str(tmp_path))
    old, _ = d.begin(0)
    for text in ("1", "2", "3", "4"):
        commit_text(d, old, text)
    assert not (tmp_path / "ckpt-00000000-00000002").exists()
    record = tmp_path / "epochs" / "00000001"
    record.write_text(json.dumps({"token": "1" * 32, "base": "ckpt-00000000-00000002"}))
    os.chmod(record, 0o600)
    assert Path(d.latest() or "").read_text() == "4"
    record.write_text("")  # claimed, nothing written yet
    assert Path(d.latest() or "").read_text() == "4"
    record.write_text(json.dumps({"token": "1" * 32, "job": "", "host": ""}))  # claimed, no base yet
    assert Path(d.latest() or "").read_text() == "4"
    _, base = d.begin(2)
    assert base and Path(base).read_text() == "4"
