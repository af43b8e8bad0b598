"""A workload trace by its name and header: SWF (Parallel Workloads Archive) or the Alibaba
GPU trace (its pods file, or its nodes file with the pods file beside it)."""

from __future__ import annotations

from pathlib import Path

from slurm_hetero.errors import InputError
from slurm_hetero.jobs.alibaba import read_alibaba
from slurm_hetero.jobs.swf import read_swf
from slurm_hetero.jobs.trace import Trace, open_text

TRACE_FORMS = "an SWF file (.swf or .swf.gz) or the Alibaba GPU trace (…-pods.csv, …-nodes.csv)"


def read_trace(path: Path) -> Trace:
    """Read an SWF or Alibaba trace by its name and header."""
    if not path.is_file():
        raise InputError(f"--trace {path}: no such file; give {TRACE_FORMS}")
    name = path.name.lower()
    if name.endswith((".swf", ".swf.gz")):
        return read_swf(path)
    if name.endswith(".csv"):
        with open_text(path) as f:
            header = f.readline()
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
