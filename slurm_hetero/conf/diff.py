"""`slurm-hetero conf diff`: what a render would change in a live configuration folder.

The rendered files are compared with the files of the same names in the folder (a render
writes only those: other files there are neither shown nor touched). A file the render
would create is diffed against nothing; a file whose mode would change says so the way git
does (`old mode` / `new mode`). Nothing is written.
"""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from slurm_hetero.errors import InputError

MAX_LIVE_BYTES = 64 << 20  # a job_submit.lua with a compiled model is a few MiB


@dataclass(frozen=True)
class ConfDiff:
    """The unified diff (text) and the names of the files a render would change."""

    text: str
    changed: tuple[str, ...]


def _live(path: Path) -> tuple[str | None, int | None]:
    """(text, mode) of a live file; (None, None) when there is none."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None, None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: not a regular file (a render would replace it)")
    if st.st_size > MAX_LIVE_BYTES:
        raise InputError(f"{path}: {st.st_size} bytes is more than a Slurm config file "
                         f"(at most {MAX_LIVE_BYTES >> 20} MiB)")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    return raw.decode("utf-8", errors="replace"), stat.S_IMODE(st.st_mode)


def diff_files(files: dict[str, str], against: str | os.PathLike[str],
               modes: dict[str, int] | None = None) -> ConfDiff:
    """Unified diff of `files` ({name: text}, as render_site returns them) against the
    files in `against`; `modes`: the modes a render gives (default 0644)."""
    live_dir = Path(against)
    if not live_dir.is_dir():
        raise InputError(f"--against {live_dir}: not a folder (the live Slurm configuration, "
                         "e.g. /etc/slurm)")
    out: list[str] = []
    changed: list[str] = []
    for name, text in files.items():
        path = live_dir / name
        old, old_mode = _live(path)
        new_mode = (modes or {}).get(name, 0o644)
        header: list[str] = []
        if old is None:
            header.append(f"new file mode {new_mode:o}\n")
        elif old_mode != new_mode:
            header += [f"old mode {old_mode:o}\n", f"new mode {new_mode:o}\n"]
        body = list(difflib.unified_diff(
            (old or "").splitlines(keepends=True), text.splitlines(keepends=True),
            fromfile=str(path) if old is not None else "/dev/null", tofile=f"rendered/{name}"))
        if not body and not header:
            continue
        changed.append(name)
        out.append(f"diff {path} rendered/{name}\n")
        out += header
        for line in body:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return ConfDiff("".join(out), tuple(changed))
