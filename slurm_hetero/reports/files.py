"""Writing report files: always to a temp file next to the target, then renamed, so a
reader never sees half a file and a failure leaves the previous file in place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.reports.model import Report


def write_atomic(path: Path, data: bytes | str) -> Path:
    raw = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise InputError(f"{path}: cannot write here: {e.strerror}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def csv_text(frame: pd.DataFrame) -> str:
    out: str = frame.to_csv(index=False, float_format="%.12g", lineterminator="\n")
    return out


def write_csv(report: Report, folder: Path) -> list[Path]:
    """One CSV per table (all rows), named after the table's slug."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--csv {folder}: exists and is not a folder")
    return [write_atomic(folder / f"{t.slug}.csv", csv_text(t.frame)) for t in report.tables()]
