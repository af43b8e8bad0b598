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
  and the O_EXCL create makes two incarnations with the same count impossible. The claim
  comes first and the base is chosen after it: from then on the older incarnation cannot
  start a commit, so nothing it prunes later can be the base (its one commit already past
  `owns` keeps its predecessor, and prunes nothing once it sees the newer epoch). Until
  the base is recorded, the claim is "pending" and readers look one lineage further back.
- `commit` renames a finished temp checkpoint to `ckpt-<epoch>-<seq>` only while no newer
  epoch exists, and every name carries its epoch, so a commit can never replace a newer
  incarnation's checkpoint, even if the newer epoch appears between the check and the
  rename.
- `latest` (what a restart resumes from) reads only the newest epoch's lineage: its own
  newest checkpoint, else the base it resumed from. A stale incarnation's later commits
  are never resumed from. It only ever names a checkpoint that exists.

Who may write: DIR, DIR/epochs and every epoch and checkpoint entry must belong to the
user running the command (the job's user) and must not be writable by group or others;
DIR is created 0700 and epoch records 0600, and a committed checkpoint loses group/other
write. Anything else, or a symbolic link at any of those names, is refused (UnsafeFolder)
rather than skipped: another user who could plant an epoch could fence the job out for
good, and a planted checkpoint would become what the job resumes from.

What the filesystem must give: atomic O_EXCL create and atomic rename within a folder, as
POSIX local filesystems, NFSv3+ (O_EXCL is atomic on the server since v3; rename is one
RPC), Lustre and GPFS do. Close-to-open consistency is enough: a node that has not yet seen
a newer epoch may still commit under its own epoch's name, which readers then ignore.
Not enough: object stores or FUSE filesystems without atomic rename (s3fs, gcsfuse).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

from slurm_hetero.errors import InputError, RuntimeFailure

_CKPT = re.compile(r"^ckpt-(\d{8})-(\d{8})$")
_EPOCH = re.compile(r"^\d{8}$")
MAX_EPOCH = 99_999_999
# O_NOFOLLOW on every open: a symlink at any name we use is refused, never followed.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


class FencedOut(RuntimeFailure):
    """A newer incarnation of the job owns the checkpoint folder: this one must stop."""


class UnsafeFolder(InputError):
    """The checkpoint folder, or an entry in it, is not the job user's alone.

    Exit status 2 (bad input), not 1: nothing failed while running; the folder the user
    named (FOLDER or --checkpoint=DIR) cannot be trusted, and running the same command
    again fails the same way. The fix is the user's: a folder of their own that group and
    others cannot write.
    """


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


@dataclass
class _Scan:
    """One listing of the folder, every entry in it already checked."""

    epochs: list[int] = field(default_factory=list)                 # ascending
    commits: dict[int, list[int]] = field(default_factory=dict)     # epoch -> seqs, ascending

    @property
    def newest(self) -> int | None:
        return self.epochs[-1] if self.epochs else None


def _name(epoch: int, seq: int) -> str:
    return f"ckpt-{epoch:08d}-{seq:08d}"


def _who(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


class CheckpointDir:
    def __init__(self, path: str, uid: int | None = None):
        """`uid`: whose folder this must be; the effective uid running us unless given."""
        if not os.path.isabs(path):
            raise InputError(f"checkpoint folder {path!r}: give an absolute path")
        self.path = path
        self.epochs = os.path.join(path, "epochs")
        self.uid = os.geteuid() if uid is None else uid

    # ---- trust --------------------------------------------------------------------------------
    def _check(self, shown: str, st: os.stat_result, *, folder: bool, file: bool,
               shared_write_ok: bool = False) -> None:
        """Refuse anything at `shown` that is not the job user's own, unshared file/folder."""
        kind = "a folder" if folder and not file else "a file" if file and not folder else \
            "a file or a folder"
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeFolder(f"{shown}: is a symbolic link; allowed: {kind}, not a link to one "
                               "(a link, maybe another user's, could send the checkpoints anywhere)")
        if not ((folder and stat.S_ISDIR(st.st_mode)) or (file and stat.S_ISREG(st.st_mode))):
            raise UnsafeFolder(f"{shown}: is not {kind}")
        if st.st_uid != self.uid:
            raise UnsafeFolder(
                f"{shown}: owned by {_who(st.st_uid)}, not by the job's user, {_who(self.uid)}; "
                "a checkpoint folder and its epochs and checkpoints must all belong to the job's "
                "user: use a folder of your own, or remove what another user put there")
        if st.st_mode & _SHARED_WRITE and not shared_write_ok:
            raise UnsafeFolder(
                f"{shown}: mode {stat.S_IMODE(st.st_mode):04o} lets group or others write to it; "
                f"allowed: writable by its owner only (chmod go-w {shown})")

    def _open_folder(self, name: str, shown: str, parent: int | None, create: bool) -> int | None:
        """An fd of the checked folder `name` (relative to `parent`), None if it is missing."""
        if create:
            with contextlib.suppress(FileExistsError):  # whatever is there is checked below
                if parent is None:
                    os.makedirs(name, mode=0o700, exist_ok=True)  # parents keep the umask's mode
                else:
                    os.mkdir(name, 0o700, dir_fd=parent)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if create:
                raise RuntimeFailure(f"{shown}: removed while the checkpoint folder was being set up") \
                    from None
            return None
        except OSError as e:
            # A link (ELOOP), not a folder (ENOTDIR), another user's 0700 folder (EACCES):
            # say which, from what is there; anything else as it came.
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except OSError:
                raise e from None
            self._check(shown, st, folder=True, file=False)
            raise
        try:
            self._check(shown, os.fstat(fd), folder=True, file=False)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _opened(self, create: bool) -> Iterator[tuple[int, int] | None]:
        """Fds of the checked DIR and DIR/epochs (None if either is missing). Everything
        below works relative to them, so a name swapped after the check changes nothing."""
        dfd = self._open_folder(self.path, self.path, None, create)
        if dfd is None:
            yield None
            return
        try:
            efd = self._open_folder("epochs", self.epochs, dfd, create)
            if efd is None:
                yield None
                return
            try:
                yield dfd, efd
            finally:
                os.close(efd)
        finally:
            os.close(dfd)

    # ---- reading ------------------------------------------------------------------------------
    def _scan(self, dfd: int, efd: int) -> _Scan:
        """Epochs and checkpoints in the folder; UnsafeFolder on any entry not the user's."""
        scan = _Scan()
        for n in os.listdir(efd):
            if _EPOCH.match(n):
                try:
                    st = os.stat(n, dir_fd=efd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                self._check(os.path.join(self.epochs, n), st, folder=False, file=True)
                scan.epochs.append(int(n))
        for n in os.listdir(dfd):
            m = _CKPT.match(n)
            if m:
                try:
                    st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:  # pruned meanwhile
                    continue
                self._check(os.path.join(self.path, n), st, folder=True, file=True)
                scan.commits.setdefault(int(m.group(1)), []).append(int(m.group(2)))
        scan.epochs.sort()
        for seqs in scan.commits.values():
            seqs.sort()
        return scan

    def _record(self, efd: int, number: int) -> dict[str, object] | None:
        """The epoch's record; None if it is gone or not (yet) a complete record."""
        name = f"{number:08d}"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=efd)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            self._check(os.path.join(self.epochs, name), os.fstat(fd), folder=False, file=True)
            data = f.read()
        try:
            rec = json.loads(data)
        except ValueError:  # a claim being written, or not JSON (bad UTF-8 included)
            return None
        return rec if isinstance(rec, dict) else None

    def _head(self, efd: int, scan: _Scan, numbers: list[int]) -> str | None:
        """Where the newest of `numbers` resumes: its newest checkpoint, else its base. A
        claim whose base is not recorded yet (its begin is under way), or a base that is gone,
        defers to the lineage before it; only an existing, checked checkpoint is returned."""
        for n in reversed(numbers):
            if scan.commits.get(n):
                return os.path.join(self.path, _name(n, scan.commits[n][-1]))
            rec = self._record(efd, n)
            if rec is not None and "base" in rec and rec["base"] is None:
                return None  # that incarnation started from nothing
            base = rec.get("base") if rec is not None else None
            m = _CKPT.match(base) if isinstance(base, str) else None
            if m and int(m.group(1)) < n and int(m.group(2)) in scan.commits.get(int(m.group(1)), ()):
                return os.path.join(self.path, m.group(0))
        return None

    def _owns(self, dfd: int, efd: int, epoch: Epoch) -> tuple[bool, _Scan]:
        scan = self._scan(dfd, efd)
        if scan.newest != epoch.number:
            return False, scan
        rec = self._record(efd, epoch.number)
        return rec is not None and rec.get("token") == epoch.token, scan

    def newest_epoch(self) -> int | None:
        with self._opened(create=False) as h:
            return self._scan(*h).newest if h else None

    def latest(self) -> str | None:
        """The checkpoint a new incarnation resumes from (a path), None if there is none."""
        with self._opened(create=False) as h:
            if h is None:
                return None
            scan = self._scan(*h)
            return self._head(h[1], scan, scan.epochs)

    # ---- writing ------------------------------------------------------------------------------
    def begin(self, restart_count: int, job_id: str = "", host: str = "") -> tuple[Epoch, str | None]:
        """Claim the epoch for this incarnation; returns it and the checkpoint to resume from."""
        if not 0 <= restart_count <= MAX_EPOCH:
            raise InputError(f"restart count {restart_count}: expected 0..{MAX_EPOCH}")
        with self._opened(create=True) as h:
            assert h is not None  # created above, or an error
            dfd, efd = h
            newest = self._scan(dfd, efd).newest
            if newest is not None and newest >= restart_count:
                raise FencedOut(f"{self.path}: epoch {newest} is already claimed; this incarnation "
                                f"(restart {restart_count}) is not the newest")
            epoch = Epoch(restart_count, secrets.token_hex(16))
            claim: dict[str, object] = {"token": epoch.token, "job": job_id, "host": host}
            name = f"{restart_count:08d}"
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=efd)
            except FileExistsError as e:
                raise FencedOut(f"{self.path}: another incarnation claimed epoch {restart_count}") from e
            _write(fd, claim)
            # Only now choose the base: the older incarnation is fenced, so it can no longer
            # prune what we pick (reading it before the claim let two stale commits delete it).
            scan = self._scan(dfd, efd)
            base = self._head(efd, scan, [n for n in scan.epochs if n < restart_count])
            tmp = f".rec-{epoch.token}"
            _write(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=efd),
                   {**claim, "base": os.path.basename(base) if base else None})
            os.replace(tmp, name, src_dir_fd=efd, dst_dir_fd=efd)  # our claimed name: ours to replace
            os.fsync(efd)
        return epoch, base

    def owns(self, epoch: Epoch) -> bool:
        """Is `epoch` still the newest, and ours (the token matches)?"""
        with self._opened(create=False) as h:
            return self._owns(*h, epoch)[0] if h else False

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
        tmp = os.path.basename(temp)
        fenced = f"{self.path}: a newer incarnation owns it (this is epoch {epoch.number}); " \
                 "checkpoint discarded"
        with self._opened(create=False) as h:
            if h is None:
                _remove(temp)
                raise FencedOut(fenced)
            dfd, efd = h
            owned, scan = self._owns(dfd, efd, epoch)
            if not owned:
                _remove_at(dfd, tmp)
                raise FencedOut(fenced)
            self._seal(dfd, tmp, temp)
            commits = scan.commits.get(epoch.number, [])
            target = _name(epoch.number, (commits[-1] + 1) if commits else 1)
            # The name carries the epoch: it never replaces a newer one's.
            os.rename(tmp, target, src_dir_fd=dfd, dst_dir_fd=dfd)
            # Prune only while still the newest: an epoch that appeared since chose its base
            # after it appeared, among these; leave them all to it.
            if self._owns(dfd, efd, epoch)[0]:
                for seq in commits[: max(0, len(commits) + 1 - keep)]:
                    _remove_at(dfd, _name(epoch.number, seq))
            os.fsync(dfd)
        return os.path.join(self.path, target)

    def _seal(self, dfd: int, name: str, shown: str) -> None:
        """Check the finished temp checkpoint is the user's own (no link), and drop group/other
        write from it (a umask of 002 is common) so that it passes the checks once committed."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            raise InputError(f"{shown}: no such temp checkpoint; write the checkpoint there "
                             "before committing it") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                self._check(shown, os.stat(name, dir_fd=dfd, follow_symlinks=False), folder=True, file=True)
            raise
        try:
            st = os.fstat(fd)
            self._check(shown, st, folder=True, file=True, shared_write_ok=True)
            if st.st_mode & _SHARED_WRITE:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~_SHARED_WRITE)
        finally:
            os.close(fd)


def _write(fd: int, record: dict[str, object]) -> None:
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())


def _remove_at(dfd: int, name: str) -> None:
    """Remove `name` in the folder `dfd` (a file or a folder; a link itself, never its target)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dfd)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
