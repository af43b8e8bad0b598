"""`slurm-hetero conf diff`: what a render would change in a live configuration folder.

The rendered files are compared with the files of the same names in the folder (a render
writes only those: other files there are neither shown nor touched). A file the render
would create is diffed against nothing; a file whose mode would change says so the way git
does (`old mode` / `new mode`). Nothing is written.

A rendered slurm.conf is laid out anew, so `setting_changes` also says, setting by setting,
which value changes and why: from the rendered file's own comment on that setting (`# Key:
...`, e.g. AccountingStorageEnforce's added items), else from what slurm-hetero writes itself
(site/slurmlines.py).
"""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from slurm_hetero.errors import InputError
from slurm_hetero.site.slurmlines import (
    ADDED_WHY,
    OWNED_FIELDS,
    OWNED_REASONS,
    LineError,
    include_path,
    pairs,
)

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


# Slurm's own value of settings a live file may leave unset (as `scontrol show config` printed
# them on 22.05.8): rendering that value changes nothing, and the summary says so.
SLURM_DEFAULT_VALUES = {
    "jobrequeue": "1", "schedulertype": "sched/backfill", "jobacctgatherfrequency": "30",
    "slurmctlddebug": "info", "slurmddebug": "info", "slurmctldport": "6817", "slurmdport": "6818",
    "slurmduser": "root", "proctracktype": "proctrack/cgroup", "mpidefault": "none",
    "jobcomptype": "jobcomp/none", "returntoservice": "0",
}
# Record lines (nodes, partitions, ...) and Include: not settings of their own.
_RECORDS = frozenset({"nodename", "partitionname", "nodeset", "downnodes", "frontendname"})


def _settings(lines: list[str]) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """({lower key: (Key, value)}, {lower key: why}) of slurm.conf lines: repeated keys
    (SlurmctldHost) joined in order; `why` from `# Key: ...` comments right above a line."""
    out: dict[str, tuple[str, str]] = {}
    why: dict[str, str] = {}
    comments: list[str] = []
    for raw in lines:
        line = raw.strip()
        if line.startswith("#"):
            comments.append(line.lstrip("#").strip())
            continue
        text = line.split("#", 1)[0].strip()
        if not text or include_path(text) is not None:
            comments = []
            continue
        try:
            found = pairs(text)
        except LineError:
            comments = []
            continue
        key, value = found[0]
        low = key.lower()
        if low not in _RECORDS:
            said = [c.split(":", 1)[1].strip() for c in comments if c.lower().startswith(low + ":")]
            if said:
                why[low] = " ".join(said)
            seen = out.get(low)
            out[low] = (key, f"{seen[1]} {value}" if seen and low == "slurmctldhost" else value)
        comments = []
    return out, why


def setting_changes(rendered: str, live: str) -> list[str]:
    """`Key: old -> new (why)` for each slurm.conf setting whose value a render changes
    (`(not set)` for one only one side has), in the rendered file's order."""
    new, why = _settings(rendered.splitlines())
    old, _ = _settings(live.splitlines())
    out = []
    for low in [*new, *(k for k in old if k not in new)]:
        before, after = old.get(low), new.get(low)
        if before is not None and after is not None and before[1] == after[1]:
            continue
        key = (after or before or ("", ""))[0]
        if before is None and after is not None and SLURM_DEFAULT_VALUES.get(low) == after[1].lower():
            out.append(f"{key}: (not set) -> {after[1]} (Slurm's default: no change)")
            continue
        reason = why.get(low) or OWNED_REASONS.get(low) or ADDED_WHY.get(low) or (
            f"slurm-hetero writes it from {OWNED_FIELDS[low]}" if low in OWNED_FIELDS else "")
        out.append(f"{key}: {before[1] if before else '(not set)'} -> {after[1] if after else '(not set)'}"
                   + (f" ({reason})" if reason else ""))
    return out
