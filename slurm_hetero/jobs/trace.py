"""What every trace reader shares: the Trace it returns and reading its file (plain or gzip).

Readers go line by line where a value is off, so a malformed line is reported with its
file and line number (exit 2), never skipped silently.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.jobs.capacity import Capacity

ARCH = "unknown"  # no trace format records the architecture
# Logs shipped with the package (provenance in their README).
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "traces"
KTH_SP2 = SHIPPED / "KTH-SP2-1996-2.1-cln.swf.gz"


@dataclass
class Trace:
    jobs: pd.DataFrame  # the job table
    capacity: Capacity  # what the trace says about its machine
    label: str  # what it is, for people: "SWF trace KTH-SP2-1996-2.1-cln.swf.gz"
    notes: list[str]  # what it lacks


def open_text(path: Path) -> io.TextIOBase:
    try:
        if path.name.endswith(".gz"):
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
        return open(path, encoding="utf-8", errors="replace", newline="")
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e


def read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise InputError(f"{path}: cannot read: {e}") from e
    return raw.decode("utf-8", errors="replace")
