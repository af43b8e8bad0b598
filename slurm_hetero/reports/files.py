"""Writing report files: always to a temp file next to the target, then renamed, so a
reader never sees half a file and a failure leaves the previous file in place."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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


# A spreadsheet reads a cell that starts with one of these as a formula (OWASP's list, plus
# LF); a job name or account is user text, and `+cmd|' /C calc'!A0` must stay text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_safe(value: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula, prefixed with `'` (shown as
    text, the quote hidden); numbers, and text that is just a number, are left as they are.

    >>> [spreadsheet_safe(v) for v in ["=1+1", "@SUM(1)", "-2+3", "-2.5", "a=b", 7]]
    ["'=1+1", "'@SUM(1)", "'-2+3", '-2.5', 'a=b', 7]
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def unquoted(cell: str) -> str:
    """A cell as `spreadsheet_safe` had it, for programs that read the CSV back.

    >>> [unquoted(c) for c in ["'--energy", "'=1+1", "'plain", "-2.5"]]
    ['--energy', '=1+1', "'plain", '-2.5']
    """
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(_FORMULA_START) else cell


def csv_text(frame: pd.DataFrame) -> str:
    """The frame as CSV, every text cell spreadsheet-safe (numeric columns untouched)."""
    safe = frame.copy()
    for col in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[col]) or pd.api.types.is_bool_dtype(safe[col]):
            safe[col] = safe[col].astype(object).map(spreadsheet_safe)
    out: str = safe.to_csv(index=False, float_format="%.12g", lineterminator="\n")
    return out


def write_csv(report: Report, folder: Path) -> list[Path]:
    """One CSV per table (all rows), named after the table's slug."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--csv {folder}: exists and is not a folder")
    return [write_atomic(folder / f"{t.slug}.csv", csv_text(t.frame)) for t in report.tables()]
