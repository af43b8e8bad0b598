"""Traces for replay, read by the project's job-table readers (`slurm_hetero/jobs/`):
SWF logs (.swf, .swf.gz) and the Alibaba GPU trace (…-pods.csv with its nodes file).
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import traces
from slurm_hetero.jobs.swf import FIELDS
from slurm_hetero.replay import alibaba
from slurm_hetero.replay.window import (
    Capacity,
    ModelMix,
    Selection,
    Window,
    busiest,
    busiest_rank,
    parse_start,
    select,
)
from slurm_hetero.site.model import Site


def read_trace(path: Path) -> pd.DataFrame:
    """A trace as job-table rows (submit/start/end in trace epoch seconds); the Alibaba pods
    file (known by its header) with replay's additions (`replay/alibaba.py`)."""
    return read_trace_counted(path)[0]


def read_trace_counted(path: Path) -> tuple[pd.DataFrame, Counter[str]]:
    """`read_trace`, and the trace's records it dropped, by reason."""
    if alibaba.is_pods_csv(path):
        return alibaba.read_pods(path)
    return traces.read_trace(path).jobs, Counter()


def is_pods(df: pd.DataFrame) -> bool:
    """Jobs of the Alibaba pods file: one node each, GPU models the trace's cluster has."""
    return bool(len(df)) and str(df["source"].iloc[0]).startswith("alibaba:")


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


def select_for(df: pd.DataFrame, window: Window, site: Site) -> Selection:
    """`window.select` as the trace needs it: pods ask for one node each and, in the plain
    arm, for a fixed GPU model (`ModelMix`: the trace's where named, else a seeded draw by
    the site's model mix), and the pods still in the system at the replay's first instant
    are carried over (`select`: its pods run for weeks)."""
    pods = is_pods(df)
    return select(df, window, Capacity.of(site), mix=ModelMix(site) if pods else None, one_node=pods,
                  carry_over=pods)


def resolve_start(text: str, df: pd.DataFrame, site: Site, hours: float, min_jobs: int = 0) -> int:
    """--start, with `busiest[:K]`: the K-th busiest window of `hours` (`window.busiest`)
    among those with at least `min_jobs` submissions."""
    k = busiest_rank(text)
    if k is None:
        first = int(df.loc[df["submit"] >= 0, "submit"].min()) if len(df) else 0
        return parse_start(text, first)
    found = busiest(df, Capacity.of(site), hours, k, carry_over=is_pods(df), min_jobs=min_jobs)
    if len(found) < k:
        some = f" and {min_jobs} or more submissions" if min_jobs else ""
        raise InputError(f"--start {text}: the trace has only {len(found)} non-overlapping windows of "
                         f"{hours:g} h with work{some} in them")
    return found[k - 1][0]
