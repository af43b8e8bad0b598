"""Replacing a file whole: write a temp file in the same folder, then rename it over the
target, so a reader (slurmctld's Lua, a prolog, a browser) never sees half a file and a
failure leaves the previous file in place.

Standard library only, and neither `tempfile` nor `pathlib` imported: the node agent and
the container wrapper start on every job (pathlib alone is ~4 ms there).

The writer is often root, in folders others may write (a job's spool folder, a shared
state folder), so the temp file must never be one someone else prepared:
- its name carries a random token (not the pid, which anyone can guess), and
- it is created with O_CREAT|O_EXCL|O_NOFOLLOW: an existing name, symlink or not, is never
  opened, truncated or chmod-ed; the writer simply draws another name;
- its mode is set on the open descriptor (fchmod), exactly, whatever the umask;
- the folder is opened once and both the create and the rename are relative to that
  descriptor, so they happen in the same folder even if its path is swapped meanwhile;
- on any failure (or KeyboardInterrupt) the temp file is removed, by name in that folder
  (unlink never follows a symlink) and the old target stays as it was.
The final rename replaces whatever the target name is, a symlink included: the link
itself is replaced, the file it pointed at is not touched. In a folder that others may
write without the sticky bit they could still rename our temp file away before the rename
(its content, not another file, is then at stake): keep such targets in folders only their
owner can write, or sticky ones like /tmp.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

TOKEN_BYTES = 12  # 96 random bits per name
_TRIES = 64
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME_ROOM = 255 - (2 + 2 * TOKEN_BYTES + 4)  # NAME_MAX less ".", ".", the token, ".tmp"


def temp_name(name: str, token: bytes) -> str:
    """'.NAME.<hex token>.tmp', NAME shortened so the whole fits in NAME_MAX."""
    return f".{name[:_NAME_ROOM]}.{token.hex()}.tmp"


def _create_temp(dir_fd: int, name: str, mode: int) -> tuple[str, int]:
    """A new file of ours in the folder: (its name, an fd open for writing)."""
    for _ in range(_TRIES):
        tmp = temp_name(name, os.urandom(TOKEN_BYTES))
        try:
            return tmp, os.open(tmp, _FLAGS, mode & 0o777, dir_fd=dir_fd)
        except FileExistsError:
            continue  # taken (by anyone, a planted symlink included): draw another name
    raise FileExistsError(f"no free temp name for {name!r} after {_TRIES} tries")


def _unlink_quietly(tmp: str, dir_fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp, dir_fd=dir_fd)


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644,
                 sync: bool = False) -> None:
    """Replace `path` with `data`; `mode` exactly (not filtered by the umask); `sync`:
    data and rename on disk before returning (files that must survive a power cut)."""
    folder, name = os.path.split(os.fspath(path))
    raw = data.encode() if isinstance(data, str) else data
    dir_fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp, fd = _create_temp(dir_fd, name, mode)
        try:
            try:
                os.fchmod(fd, mode)
                view = memoryview(raw)
                while view:
                    view = view[os.write(fd, view):]
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            _unlink_quietly(tmp, dir_fd)
            raise
        if sync:
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json_atomic(path: str | os.PathLike[str], data: Any, indent: int | None = None,
                      mode: int = 0o644) -> None:
    text = json.dumps(data, indent=indent) + ("\n" if indent is not None else "")
    write_atomic(path, text, mode)
