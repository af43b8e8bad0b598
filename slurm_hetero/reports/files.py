"""Writing report files: always to a temp file next to the target, then renamed, so a
reader never sees half a file and a failure leaves the previous file in place."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from slurm_hetero import fileio
from slurm_hetero.errors import InputError
from slurm_hetero.reports.model import Report


def write_atomic(path: Path, data: bytes | str) -> Path:
    """fileio.write_atomic, synced, with a place that cannot be written an input error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{path}: cannot write here: {e.strerror}") from e
    try:
        fileio.write_atomic(path, data, sync=True)
    except (PermissionError, IsADirectoryError, NotADirectoryError) as e:
        raise InputError(f"{path}: cannot write here: {e.strerror}") from e
    return path


def csv_text(frame: pd.DataFrame) -> str:
    out: str = frame.to_csv(index=False, float_format="%.12g", lineterminator="\n")
    return out


def write_csv(report: Report, folder: Path) -> list[Path]:
    """One CSV per table (all rows), named after the table's slug."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--csv {folder}: exists and is not a folder")
    return [write_atomic(folder / f"{t.slug}.csv", csv_text(t.frame)) for t in report.tables()]
