"""Standard Workload Format logs (Parallel Workloads Archive) into the job table.

One job a line, 18 whitespace-separated fields, `;` header comments, -1 = unknown. Times
are relative to the `UnixStartTime` header when there is one (then we add it, giving
epoch seconds), else to the log's own start. Ids become labels: user 12 → `u12`, group
→ `g`, queue → `q`, partition → `p`, executable → `e`. Logs written by the pyss simulator
reuse the partition column as a "was backfilled" flag: no partition then.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table
from slurm_hetero.jobs.capacity import Capacity
from slurm_hetero.jobs.trace import ARCH, Trace, read_text

FIELDS = ("job id", "submit time", "wait time", "run time", "allocated processors",
          "average CPU time", "used memory", "requested processors", "requested time",
          "requested memory", "status", "user id", "group id", "executable id", "queue",
          "partition", "preceding job", "think time")
STATUS = {1.0: "COMPLETED", 0.0: "FAILED", 5.0: "CANCELLED"}


def source_name(path: Path) -> str:
    """`KTH-SP2-1996-2.1-cln.swf.gz` → `swf:KTH-SP2-1996-2.1-cln`."""
    return "swf:" + re.sub(r"\.swf(\.gz)?$", "", path.name)


def read_swf(path: Path, limit: int | None = None) -> Trace:
    """One log file (plain or .gz); `limit` keeps its first job lines only."""
    text = read_text(path)
    if limit is not None:
        text = _first_jobs(text, limit)
    return parse_swf(text, source_name(path), str(path), f"SWF trace {path.name}")


def _first_jobs(text: str, limit: int) -> str:
    kept, n = [], 0
    for line in text.splitlines():
        if not line.startswith(";") and line.strip():
            n += 1
            if n > limit:
                break
        kept.append(line)
    return "\n".join(kept)


def parse_swf(text: str, source: str, where: str = "<swf>", label: str | None = None) -> Trace:
    """SWF text → a Trace; InputError names the first line that is not 18 numbers."""
    header: dict[str, str] = {}
    simulated = False
    for line in text.splitlines():
        s = line.strip()
        if s and not s.startswith(";"):
            break
        simulated = simulated or "Pyss" in s
        key, sep, value = s[1:].partition(":")
        if sep:
            header[key.strip().lower()] = value.strip()
    a = _numbers(text, where)
    notes: list[str] = []
    origin = _header_number(header, "unixstarttime")
    if origin is None:
        origin = 0.0
        notes.append("the trace has no UnixStartTime: times are relative to its start "
                     "(shown from 1970-01-01)")

    def col(i: int) -> np.ndarray:
        v = a[:, i].copy()
        v[v < 0] = np.nan  # -1 = unknown
        return v

    submit = origin + col(1)
    start = submit + col(2)
    runtime = col(3)
    alloc, req = a[:, 4], a[:, 7]
    ncpus = np.where(alloc > 0, alloc, req)
    ncpus[ncpus <= 0] = np.nan
    req_cpus = np.where(req > 0, req, alloc)
    req_cpus[req_cpus <= 0] = np.nan
    limit = a[:, 8].copy()
    limit[limit <= 0] = np.nan
    n = len(a)
    jobs = table.build({
        "source": table.constant(n, source), "job_id": [str(int(x)) for x in a[:, 0]],
        "name": _labels("e", a[:, 13]), "user": _labels("u", a[:, 11]), "account": _labels("g", a[:, 12]),
        "qos": _labels("q", a[:, 14]),
        "partition": table.constant(n) if simulated else _labels("p", a[:, 15]),
        "state": _states(a[:, 10]), "arch": table.constant(n, ARCH),
        "accel_class": table.constant(n, table.CPU_CLASS),
        "submit": submit, "eligible": submit, "start": start, "end": start + runtime,
        "runtime_s": runtime, "req_time_s": limit, "req_cpus": req_cpus, "req_accel": np.zeros(n),
        "req_mem_mb": col(9) * req_cpus // 1024,  # field 10 is KB per processor
        "ncpus": ncpus, "cpu_time": col(5) * ncpus,  # field 6 is per processor
        "devices": np.zeros(n), "units": np.zeros(n),
    }, n)
    max_procs = _header_number(header, "maxprocs") or _header_number(header, "maxnodes")
    if not max_procs:
        max_procs = float(np.nanmax(ncpus)) if n and not np.isnan(ncpus).all() else 0.0
        notes.append("the trace header gives no MaxProcs: capacity is its largest job")
    name = where.rsplit("/", 1)[-1]
    cap = Capacity(cpus={ARCH: max_procs}, source=f"{name} header")
    return Trace(jobs, cap, label or f"SWF trace {name}", notes)


def _numbers(text: str, where: str) -> np.ndarray:
    """The job lines as an (n, 18) float array. Fast path: pandas' C parser; any doubt (a
    bad number, a short or long line) falls back to the line-by-line check, which names
    the first offending line."""
    try:
        frame = pd.read_csv(io.StringIO(text), sep=r"\s+", comment=";", header=None, dtype="float64",
                            engine="c")
        ok = frame.shape[1] == len(FIELDS) and not frame.isna().to_numpy().any()
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        frame, ok = None, False
    if frame is None or not ok:
        _check_lines(where, text)
        if frame is None:  # no job line at all
            return np.empty((0, len(FIELDS)))
    return frame.to_numpy(dtype="float64")


def _states(status: np.ndarray) -> pd.Categorical[Any]:
    out = np.full(len(status), table.UNKNOWN_STATE, dtype=object)
    for code, state in STATUS.items():
        out[status == code] = state
    return table.categorical(out)


def _check_lines(where: str, text: str) -> None:
    """Raise InputError naming the first line that is not 18 numbers."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        parts = line.split(";", 1)[0].split()
        if not parts:
            continue
        if len(parts) != len(FIELDS):
            raise InputError(f"{where}:{lineno}: expected {len(FIELDS)} whitespace-separated SWF "
                             f"fields, found {len(parts)}")
        for i, p in enumerate(parts):
            try:
                float(p)
            except ValueError:
                raise InputError(f"{where}:{lineno}: field {i + 1} ({FIELDS[i]}) is {p!r}, "
                                 "not a number") from None


def _header_number(header: dict[str, str], key: str) -> float | None:
    try:
        v = float(header.get(key, "").split()[0])
    except (ValueError, IndexError):
        return None
    return v if v > 0 else None


def _labels(prefix: str, values: np.ndarray) -> pd.Categorical[Any]:
    """SWF numeric ids as categorical labels (u12, g3, ...); -1 (unknown) → ""."""
    uniq, codes = np.unique(values, return_inverse=True)
    names = ["" if v < 0 else f"{prefix}{int(v)}" for v in uniq.tolist()]
    cats = list(dict.fromkeys(names))
    pos = {c: i for i, c in enumerate(cats)}
    mapped = np.asarray([pos[n] for n in names], dtype=np.int64)[codes.reshape(-1)]
    return pd.Categorical.from_codes(mapped, dtype=pd.CategoricalDtype(cats))
