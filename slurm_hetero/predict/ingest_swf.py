"""Standard Workload Format traces (Parallel Workloads Archive) into the job table.

One job a line, 18 whitespace-separated fields, `;` header comments, -1 = unknown. Times in
a trace are relative to its `UnixStartTime` header when it has one (then we add it, giving
epoch seconds), else to the trace's own start.
"""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.predict import jobtable

FIELDS = ("job", "submit", "wait", "run", "alloc_procs", "cpu_time", "used_mem", "req_procs",
          "req_time", "req_mem_kb", "status", "user", "group", "exe", "queue", "partition",
          "preceding", "think")
STATUS = {1: "completed", 0: "failed", 5: "cancelled"}


def source_name(path: Path) -> str:
    """`KTH-SP2-1996-2.1-cln.swf.gz` → `swf:KTH-SP2-1996-2.1-cln`."""
    return "swf:" + re.sub(r"\.swf(\.gz)?$", "", path.name)


def _text(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
                return f.read()
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, EOFError) as e:
        raise InputError(f"{path}: cannot read SWF trace: {e}") from e


def parse_swf(text: str, source: str, where: str = "<swf>") -> pd.DataFrame:
    """SWF text → job table rows (every job line, unknown fields as -1 / "")."""
    header = [line for line in text.splitlines()[:200] if line.startswith(";")]
    offset = 0
    for line in header:
        m = re.match(r";\s*UnixStartTime:\s*(\d+)", line)
        if m:
            offset = int(m.group(1))
    # The pyss simulator reuses the partition column as its "was backfilled" flag.
    simulated = any("Pyss" in line for line in header)
    body = "\n".join(line for line in text.splitlines() if line.strip() and not line.startswith(";"))
    if not body:
        return jobtable.empty()
    try:
        raw = np.loadtxt(io.StringIO(body), dtype=np.float64, ndmin=2)
    except ValueError as e:
        raise InputError(f"{where}: not an SWF trace (18 numeric fields a line): {e}") from e
    if raw.shape[1] != len(FIELDS):
        raise InputError(f"{where}: SWF lines have {raw.shape[1]} fields, expected {len(FIELDS)}")
    f = {name: raw[:, i].astype(np.int64) for i, name in enumerate(FIELDS)}
    known = f["submit"] >= 0
    submit = np.where(known, f["submit"] + offset, -1)
    start = np.where(known & (f["wait"] >= 0), submit + f["wait"], -1)
    end = np.where((start >= 0) & (f["run"] >= 0), start + f["run"], -1)
    cpus = np.where(f["req_procs"] > 0, f["req_procs"], f["alloc_procs"])
    mem = np.where((f["req_mem_kb"] >= 0) & (cpus > 0), f["req_mem_kb"] * cpus // 1024, -1)

    def label(col: np.ndarray) -> list[str]:
        return ["" if v < 0 else str(v) for v in col.tolist()]

    df = pd.DataFrame({
        "source": source,
        "job_id": [str(v) for v in f["job"].tolist()],
        "user": label(f["user"]),
        "account": label(f["group"]),
        "submit": submit, "start": start, "end": end,
        "runtime_s": np.where(f["run"] >= 0, f["run"], -1),
        "req_time_s": np.where(f["req_time"] > 0, f["req_time"], -1),
        "req_cpus": np.where(cpus > 0, cpus, -1),
        "req_accel": 0,
        "req_mem_mb": mem,
        "partition": [""] * len(raw) if simulated else label(f["partition"]),
        "qos": label(f["queue"]),
        "name": label(f["exe"]),
        "status": [STATUS.get(v, "unknown") for v in f["status"].tolist()],
    })
    return jobtable.normalize(df)


def read_swf(path: Path, limit: int | None = None) -> pd.DataFrame:
    """One trace file (plain or .gz); `limit` keeps its first job lines only."""
    text = _text(path)
    if limit is not None:
        kept, n = [], 0
        for line in text.splitlines():
            if not line.startswith(";") and line.strip():
                n += 1
                if n > limit:
                    break
            kept.append(line)
        text = "\n".join(kept)
    return parse_swf(text, source_name(path), str(path))
