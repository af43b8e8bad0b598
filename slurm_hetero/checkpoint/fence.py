"""Checkpoints that a stale incarnation of a job can never overwrite (standard library only).

Slurm requeues a job when its node fails; the new incarnation (SLURM_RESTART_COUNT + 1)
starts elsewhere while the old one may still run on a node that lost contact with
slurmctld. Both write to the same shared checkpoint folder. Fencing works the way
storage systems do it, by epochs, with only two filesystem guarantees: creating a file
with O_EXCL is atomic, and rename() within a folder is atomic.

Layout of the checkpoint folder DIR:

    DIR/epochs/00000003     one file per incarnation, created O_EXCL: its restart count
                            (the epoch), a random token only that incarnation knows, and
                            the checkpoint it resumed from (its base)
    DIR/ckpt-00000003-00000007   checkpoint 7 of epoch 3 (a file or a folder)
    DIR/.tmp-...            a checkpoint being written (never read)

- `begin` claims the epoch: the restart count must be above every epoch in the folder,
  and the O_EXCL create makes two incarnations with the same count impossible.
- `commit` renames a finished temp checkpoint to `ckpt-<epoch>-<seq>` only while no newer
  epoch exists, and every name carries its epoch, so a commit can never replace a newer
  incarnation's checkpoint, even if the newer epoch appears between the check and the
  rename.
- `latest` (what a restart resumes from) reads only the newest epoch's lineage: its own
  newest checkpoint, else the base it resumed from. A stale incarnation's later commits
  are never resumed from.

What the filesystem must give: atomic O_EXCL create and atomic rename within a folder, as
POSIX local filesystems, NFSv3+ (O_EXCL is atomic on the server since v3; rename is one
RPC), Lustre and GPFS do. Close-to-open consistency is enough: a node that has not yet seen
a newer epoch may still commit under its own epoch's name, which readers then ignore.
Not enough: object stores or FUSE filesystems without atomic rename (s3fs, gcsfuse).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass

from slurm_hetero.errors import InputError, RuntimeFailure

_CKPT = re.compile(r"^ckpt-(\d{8})-(\d{8})$")
_EPOCH = re.compile(r"^\d{8}$")
MAX_EPOCH = 99_999_999


class FencedOut(RuntimeFailure):
    """A newer incarnation of the job owns the checkpoint folder: this one must stop."""


@dataclass(frozen=True)
class Epoch:
    number: int  # the job's restart count when this incarnation started
    token: str   # random; only this incarnation knows it

    def __str__(self) -> str:
        return f"{self.number}:{self.token}"

    @classmethod
    def parse(cls, text: str) -> Epoch:
        n, _, token = text.partition(":")
        if not n.isdigit() or not re.fullmatch(r"[0-9a-f]{32}", token):
            raise InputError(f"HETERO_CKPT_EPOCH {text[:60]!r}: expected RESTARTS:TOKEN "
                             "from `checkpoint begin`")
        return cls(int(n), token)


def _name(epoch: int, seq: int) -> str:
    return f"ckpt-{epoch:08d}-{seq:08d}"


class CheckpointDir:
    def __init__(self, path: str):
        if not os.path.isabs(path):
            raise InputError(f"checkpoint folder {path!r}: give an absolute path")
        self.path = path
        self.epochs = os.path.join(path, "epochs")

    # ---- reading ------------------------------------------------------------------------------
    def _epoch_numbers(self) -> list[int]:
        try:
            return sorted(int(n) for n in os.listdir(self.epochs) if _EPOCH.match(n))
        except FileNotFoundError:
            return []

    def _epoch_record(self, number: int) -> dict[str, object]:
        with open(os.path.join(self.epochs, f"{number:08d}")) as f:
            rec = json.load(f)
        if not isinstance(rec, dict):
            raise RuntimeFailure(f"{self.epochs}/{number:08d}: not an epoch record")
        return rec

    def _commits(self, epoch: int) -> list[int]:
        out = []
        for n in os.listdir(self.path):
            m = _CKPT.match(n)
            if m and int(m.group(1)) == epoch:
                out.append(int(m.group(2)))
        return sorted(out)

    def newest_epoch(self) -> int | None:
        numbers = self._epoch_numbers()
        return numbers[-1] if numbers else None

    def latest(self) -> str | None:
        """The checkpoint a new incarnation resumes from (a path), None if there is none."""
        numbers = self._epoch_numbers()
        if not numbers:
            return None
        newest = numbers[-1]
        commits = self._commits(newest)
        if commits:
            return os.path.join(self.path, _name(newest, commits[-1]))
        base = self._epoch_record(newest).get("base")
        return os.path.join(self.path, base) if isinstance(base, str) and _CKPT.match(base) else None

    # ---- writing ------------------------------------------------------------------------------
    def begin(self, restart_count: int, job_id: str = "", host: str = "") -> tuple[Epoch, str | None]:
        """Claim the epoch for this incarnation; returns it and the checkpoint to resume from."""
        if not 0 <= restart_count <= MAX_EPOCH:
            raise InputError(f"restart count {restart_count}: expected 0..{MAX_EPOCH}")
        os.makedirs(self.epochs, exist_ok=True)
        newest = self.newest_epoch()
        if newest is not None and newest >= restart_count:
            raise FencedOut(f"{self.path}: epoch {newest} is already claimed; this incarnation "
                            f"(restart {restart_count}) is not the newest")
        base = self.latest()
        epoch = Epoch(restart_count, secrets.token_hex(16))
        record = {"token": epoch.token, "job": job_id, "host": host,
                  "base": os.path.basename(base) if base else None}
        try:
            fd = os.open(os.path.join(self.epochs, f"{restart_count:08d}"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError as e:
            raise FencedOut(f"{self.path}: another incarnation claimed epoch {restart_count}") from e
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        return epoch, base

    def owns(self, epoch: Epoch) -> bool:
        """Is `epoch` still the newest, and ours (the token matches)?"""
        if self.newest_epoch() != epoch.number:
            return False
        try:
            return self._epoch_record(epoch.number).get("token") == epoch.token
        except (OSError, ValueError):
            return False

    def temp_path(self, epoch: Epoch) -> str:
        """A fresh temp name in the folder (same filesystem, so commit is one rename)."""
        return os.path.join(self.path, f".tmp-{epoch.number:08d}-{secrets.token_hex(8)}")

    def commit(self, epoch: Epoch, temp: str, keep: int = 2) -> str:
        """Publish a finished checkpoint (file or folder at `temp`); FencedOut if a newer
        incarnation exists. Older checkpoints of this epoch beyond `keep` are removed;
        `keep` is at least 2: a newer epoch may have started from our newest checkpoint
        just before this commit's rename, and that base must survive it."""
        keep = max(2, keep)
        if os.path.dirname(os.path.abspath(temp)) != os.path.abspath(self.path) or \
                not os.path.basename(temp).startswith(".tmp-"):
            raise InputError(f"{temp!r}: write checkpoints to a temp_path() of {self.path}")
        if not self.owns(epoch):
            _remove(temp)
            raise FencedOut(f"{self.path}: a newer incarnation owns it (this is epoch {epoch.number}); "
                            "checkpoint discarded")
        commits = self._commits(epoch.number)
        target = os.path.join(self.path, _name(epoch.number, (commits[-1] + 1) if commits else 1))
        os.rename(temp, target)  # the name carries the epoch: it never replaces a newer one's
        for seq in commits[: max(0, len(commits) + 1 - keep)]:
            _remove(os.path.join(self.path, _name(epoch.number, seq)))
        _fsync_dir(self.path)
        return target


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
