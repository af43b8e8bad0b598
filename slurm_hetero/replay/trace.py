"""Traces for replay, read by the project's job-table readers (`slurm_hetero/jobs/`):
SWF logs (.swf, .swf.gz) and the Alibaba GPU trace (…-pods.csv with its nodes file).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import traces
from slurm_hetero.jobs.swf import FIELDS


def read_trace(path: Path) -> pd.DataFrame:
    """A trace as job-table rows (submit/start/end in trace epoch seconds)."""
    return traces.read_trace(path).jobs


def _lines(path: Path) -> list[str]:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
                return f.read().splitlines()
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except (OSError, EOFError) as e:
        raise InputError(f"{path}: cannot read SWF trace: {e}") from e


def cut_swf(src: Path, first: int, end: int, note: list[str]) -> str:
    """The lines of `src` whose jobs were submitted in [first, end) (trace epoch seconds),
    with its header, the `note` lines (provenance) added to it as comments.

    The header keeps `UnixStartTime`, so the cut reads back with the same times."""
    lines = _lines(src)
    header = [ln for ln in lines if ln.startswith(";")]
    offset = 0
    for ln in header:
        key, _, value = ln.lstrip("; ").partition(":")
        if key.strip() == "UnixStartTime" and value.strip().isdigit():
            offset = int(value.strip())
    kept = []
    for n, ln in enumerate(lines, 1):
        if ln.startswith(";") or not ln.strip():
            continue
        fields = ln.split()
        if len(fields) != len(FIELDS):
            raise InputError(f"{src}:{n}: SWF lines have {len(FIELDS)} fields, this one {len(fields)}")
        try:
            submit = int(float(fields[1])) + offset
        except ValueError as e:
            raise InputError(f"{src}:{n}: submit time {fields[1]!r} is not a number") from e
        if first <= submit < end:
            kept.append(ln)
    return "\n".join([*header, *(f"; {x}" for x in note), *kept]) + "\n"
