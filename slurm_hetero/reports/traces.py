"""Workload traces as job tables: SWF (Parallel Workloads Archive) and the Alibaba GPU trace.

Both are read line by line so that a malformed line is reported with its file and line
number (exit 2), never skipped silently.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.reports import jobs as J

SWF_FIELDS = ("job id", "submit time", "wait time", "run time", "allocated processors",
              "average CPU time", "used memory", "requested processors", "requested time",
              "requested memory", "status", "user id", "group id", "executable id", "queue",
              "partition", "preceding job", "think time")
SWF_STATUS = {1.0: "COMPLETED", 0.0: "FAILED", 5.0: "CANCELLED"}
ALIBABA_PODS = ("name", "cpu_milli", "num_gpu", "gpu_milli", "qos", "pod_phase", "creation_time",
                "deletion_time", "scheduled_time")
ALIBABA_NODES = ("sn", "cpu_milli", "gpu", "model")
ALIBABA_PHASE = {"Succeeded": "COMPLETED", "Failed": "FAILED", "Running": "RUNNING",
                 "Pending": "CANCELLED"}  # a Pending pod was deleted before it was scheduled
TRACE_FORMS = "an SWF file (.swf or .swf.gz) or the Alibaba GPU trace (…-pods.csv, …-nodes.csv)"
NONE = "-"
ANY_GPU = "gpu (any model)"
ARCH = "unknown"  # neither format records the architecture


@dataclass
class Trace:
    jobs: pd.DataFrame
    capacity: J.Capacity
    source: str
    notes: list[str]


def read_trace(path: Path) -> Trace:
    """Read an SWF or Alibaba trace by its name and header."""
    if not path.is_file():
        raise InputError(f"--trace {path}: no such file; give {TRACE_FORMS}")
    name = path.name.lower()
    if name.endswith((".swf", ".swf.gz")):
        return read_swf(path)
    if name.endswith(".csv"):
        header = _open(path).readline()
        cols = {c.strip() for c in header.split(",")}
        if "pod_phase" in cols or "pods" in name:
            return read_alibaba(path, _sibling(path, "pods", "nodes"))
        if {"sn", "model"} <= cols:
            pods = _sibling(path, "nodes", "pods")
            if pods is None:
                raise InputError(f"--trace {path}: a nodes file; its pods file (…-pods.csv) is not beside it")
            return read_alibaba(pods, path)
    raise InputError(f"--trace {path}: unknown trace format; give {TRACE_FORMS}")


def _sibling(path: Path, this: str, other: str) -> Path | None:
    cand = path.with_name(path.name.replace(this, other))
    return cand if cand != path and cand.is_file() else None


def _open(path: Path) -> io.TextIOBase:
    try:
        if path.name.endswith(".gz"):
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
        return open(path, encoding="utf-8", errors="replace", newline="")
    except OSError as e:
        raise InputError(f"--trace {path}: cannot read: {e.strerror}") from e


def read_swf(path: Path) -> Trace:
    text = _read_text(path)
    header: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if s and not s.startswith(";"):
            break
        key, sep, value = s[1:].partition(":")
        if sep:
            header[key.strip().lower()] = value.strip()
    # Fast path: pandas' C parser. Any doubt (a bad number, a short or long line) falls
    # back to the line-by-line check, which names the first offending line.
    try:
        frame = pd.read_csv(io.StringIO(text), sep=r"\s+", comment=";", header=None, dtype="float64",
                            engine="c")
        ok = frame.shape[1] == len(SWF_FIELDS) and not frame.isna().to_numpy().any()
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        frame, ok = None, False
    if frame is None or not ok:
        _check_swf_lines(path, text)
        if frame is None:  # no job line at all
            frame = pd.DataFrame(np.empty((0, len(SWF_FIELDS))))
    a = frame.to_numpy(dtype="float64")
    notes: list[str] = []
    origin = _header_number(header, "unixstarttime")
    if origin is None:
        origin = 0.0
        notes.append("the trace has no UnixStartTime: times are relative to its start "
                     "(shown from 1970-01-01)")

    def col(i: int) -> np.ndarray:
        v = a[:, i].copy()
        v[v < 0] = np.nan  # SWF: -1 = unknown
        return v

    submit = origin + col(1)
    start = submit + col(2)
    elapsed = col(3)
    procs = np.where(a[:, 4] > 0, a[:, 4], a[:, 7]).astype("float64")
    procs[procs <= 0] = np.nan
    avg_cpu = col(5)
    n = len(a)
    jobs = J.finish({
        "job": [str(int(x)) for x in a[:, 0]], "name": [""] * n,
        "user": _labels("u", a[:, 11]), "account": _labels("g", a[:, 12]),
        "qos": _labels("q", a[:, 14]), "partition": _labels("p", a[:, 15]),
        "state": _states(a[:, 10]),
        "reason": [""] * n, "arch": [ARCH] * n, "model": [""] * n, "accel_class": [J.CPU_CLASS] * n,
        "submit": submit, "eligible": submit, "start": start, "end": start + elapsed,
        "elapsed": elapsed, "limit": col(8), "ncpus": procs,
        "cpu_time": avg_cpu * procs,  # SWF field 6 is per processor
        "devices": np.zeros(n), "units": np.zeros(n),
    }, n)
    max_procs = _header_number(header, "maxprocs") or _header_number(header, "maxnodes")
    if not max_procs:
        max_procs = float(np.nanmax(procs)) if n else 0.0
        notes.append("the trace header gives no MaxProcs: capacity is its largest job")
    cap = J.Capacity(cpus={ARCH: max_procs}, source=f"{path.name} header")
    return Trace(jobs, cap, f"SWF trace {path.name}", notes)


def _states(status: np.ndarray) -> np.ndarray:
    out = np.full(len(status), "UNKNOWN", dtype=object)
    for code, state in SWF_STATUS.items():
        out[status == code] = state
    return out


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise InputError(f"--trace {path}: cannot read: {e}") from e
    return raw.decode("utf-8", errors="replace")


def _check_swf_lines(path: Path, text: str) -> None:
    """Raise InputError naming the first line that is not 18 numbers."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        parts = line.split(";", 1)[0].split()
        if not parts:
            continue
        if len(parts) != len(SWF_FIELDS):
            raise InputError(f"{path}:{lineno}: expected {len(SWF_FIELDS)} whitespace-separated SWF "
                             f"fields, found {len(parts)}")
        for i, p in enumerate(parts):
            if not _is_number(p):
                raise InputError(f"{path}:{lineno}: field {i + 1} ({SWF_FIELDS[i]}) is {p!r}, "
                                 "not a number")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _header_number(header: dict[str, str], key: str) -> float | None:
    try:
        v = float(header.get(key, "").split()[0])
    except (ValueError, IndexError):
        return None
    return v if v > 0 else None


def _labels(prefix: str, values: np.ndarray) -> pd.Categorical[Any]:
    """SWF numeric ids as categorical labels (u12, g3, ...); -1 (unknown) → "-"."""
    uniq, codes = np.unique(values, return_inverse=True)
    names = [NONE if v < 0 else f"{prefix}{int(v)}" for v in uniq.tolist()]
    cats = list(dict.fromkeys(names))
    pos = {c: i for i, c in enumerate(cats)}
    mapped = np.asarray([pos[n] for n in names], dtype=np.int64)[codes.reshape(-1)]
    return pd.Categorical.from_codes(mapped, dtype=pd.CategoricalDtype(cats))


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    with _open(path) as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{path}:1: header lacks column(s) {', '.join(missing)}; "
                             f"expected {', '.join(required)}")
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise InputError(f"{path}:{reader.line_num}: expected {len(reader.fieldnames or [])} "
                                 "comma-separated fields")
            yield reader.line_num, row


def _number(path: Path, lineno: int, row: dict[str, str], col: str, empty_ok: bool = False) -> float:
    text = row[col].strip()
    if not text and empty_ok:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{path}:{lineno}: field {col} is {text!r}, not a number") from None


def read_alibaba(pods: Path, nodes: Path | None) -> Trace:
    cols: dict[str, list[object]] = {c: [] for c in ("job", "qos", "state", "submit", "start", "end",
                                                     "ncpus", "devices", "accel_class", "model")}
    for lineno, row in _csv_rows(pods, ALIBABA_PODS):
        phase = row["pod_phase"].strip()
        if phase not in ALIBABA_PHASE:
            raise InputError(f"{pods}:{lineno}: pod_phase {phase!r} is not one of "
                             f"{', '.join(ALIBABA_PHASE)}")
        created = _number(pods, lineno, row, "creation_time")
        scheduled = _number(pods, lineno, row, "scheduled_time", empty_ok=True)
        deleted = _number(pods, lineno, row, "deletion_time", empty_ok=True)
        gpus = _number(pods, lineno, row, "num_gpu")
        milli = _number(pods, lineno, row, "gpu_milli", empty_ok=True)
        devices = gpus * (milli / 1000.0 if gpus and not math.isnan(milli) else 1.0)
        cols["job"].append(row["name"])
        cols["qos"].append(row["qos"].strip() or NONE)
        cols["state"].append(ALIBABA_PHASE[phase])
        cols["submit"].append(created)
        cols["start"].append(scheduled)
        cols["end"].append(deleted)
        cols["ncpus"].append(_number(pods, lineno, row, "cpu_milli") / 1000.0)
        cols["devices"].append(devices)
        cols["accel_class"].append(J.CPU_CLASS if not gpus else "gpu/shared" if devices < gpus else "gpu")
        cols["model"].append(ANY_GPU if gpus else "")
    n = len(cols["job"])
    start = np.asarray(cols["start"], dtype="float64")
    end = np.asarray(cols["end"], dtype="float64")
    jobs = J.finish({**cols, "user": [NONE] * n, "account": [NONE] * n, "partition": [NONE] * n,
                     "name": [""] * n, "reason": [""] * n, "arch": [ARCH] * n,
                     "eligible": cols["submit"], "elapsed": end - start,
                     "units": np.full(n, np.nan)}, n)
    notes = ["Alibaba trace: times are relative to its start (shown from 1970-01-01); pods name no "
             "GPU model, so GPUs are counted as one pool; gpu/shared = a fraction of one GPU"]
    cap = J.Capacity(source=nodes.name if nodes else "none (no nodes file beside the pods file)")
    if nodes is None:
        notes.append(f"no nodes file beside {pods.name}: capacity unknown")
        return Trace(jobs, cap, f"Alibaba GPU trace {pods.name}", notes)
    total_gpus = 0.0
    for lineno, row in _csv_rows(nodes, ALIBABA_NODES):
        g = _number(nodes, lineno, row, "gpu")
        cap.cpus[ARCH] = cap.cpus.get(ARCH, 0.0) + _number(nodes, lineno, row, "cpu_milli") / 1000.0
        cap.nodes[ARCH] = cap.nodes.get(ARCH, 0) + 1
        if g > 0:
            model = row["model"].strip() or "unknown"
            cap.inventory[model] = cap.inventory.get(model, 0.0) + g
            total_gpus += g
    cap.devices[(ANY_GPU, ARCH)] = total_gpus
    return Trace(jobs, cap, f"Alibaba GPU trace {pods.name} + {nodes.name}", notes)
