"""Replacing a file whole: write a temp file in the same folder, then rename it over the
target, so a reader (slurmctld's Lua, a prolog, a browser) never sees half a file and a
failure leaves the previous file in place.

Standard library only, and neither `tempfile` nor `pathlib` imported: the node agent and
the container wrapper start on every job (pathlib alone is ~4 ms there). The temp name
holds the pid, so concurrent writers never share one.
"""

from __future__ import annotations

import json
import os
from typing import Any


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644,
                 sync: bool = False) -> None:
    """Replace `path` with `data`; `mode` exactly (not filtered by the umask); `sync`:
    on disk before the rename (files that must survive a power cut)."""
    folder, name = os.path.split(os.fspath(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(raw)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | os.PathLike[str], data: Any, indent: int | None = None,
                      mode: int = 0o644) -> None:
    text = json.dumps(data, indent=indent) + ("\n" if indent is not None else "")
    write_atomic(path, text, mode)
