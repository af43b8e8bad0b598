"""The Alibaba GPU trace (cluster-trace-gpu-v2023) into the job table: one job per pod of
the pods file; the nodes file beside it gives the cluster's capacity.

Times are seconds from the trace's start; a pod runs from scheduled_time to deletion_time.
Pods name no GPU model, so their GPUs are counted as one pool; `gpu_milli` is the share
of one GPU a pod holds (1000 = the whole device).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import table
from slurm_hetero.jobs.capacity import Capacity
from slurm_hetero.jobs.trace import ARCH, Trace, open_text

PODS = ("name", "cpu_milli", "num_gpu", "gpu_milli", "qos", "pod_phase", "creation_time",
        "deletion_time", "scheduled_time")
NODES = ("sn", "cpu_milli", "gpu", "model")
PHASE = {"Succeeded": "COMPLETED", "Failed": "FAILED", "Running": "RUNNING",
         "Pending": "CANCELLED"}  # a Pending pod was deleted before it was scheduled
ANY_GPU = "gpu (any model)"


def source_name(pods: Path) -> str:
    """`alibaba-gpu-2023-pods.csv` → `alibaba:alibaba-gpu-2023`."""
    return "alibaba:" + pods.name.removesuffix(".gz").removesuffix(".csv").removesuffix("-pods")


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    with open_text(path) as f:
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
    cols: dict[str, list[object]] = {c: [] for c in ("job_id", "qos", "state", "submit", "start", "end",
                                                     "ncpus", "req_accel", "devices", "accel_class", "model")}
    for lineno, row in _rows(pods, PODS):
        phase = row["pod_phase"].strip()
        if phase not in PHASE:
            raise InputError(f"{pods}:{lineno}: pod_phase {phase!r} is not one of {', '.join(PHASE)}")
        gpus = _number(pods, lineno, row, "num_gpu")
        milli = _number(pods, lineno, row, "gpu_milli", empty_ok=True)
        devices = gpus * (milli / 1000.0 if gpus and not math.isnan(milli) else 1.0)
        cols["job_id"].append(row["name"])
        cols["qos"].append(row["qos"].strip())
        cols["state"].append(PHASE[phase])
        cols["submit"].append(_number(pods, lineno, row, "creation_time"))
        cols["start"].append(_number(pods, lineno, row, "scheduled_time", empty_ok=True))
        cols["end"].append(_number(pods, lineno, row, "deletion_time", empty_ok=True))
        cols["ncpus"].append(_number(pods, lineno, row, "cpu_milli") / 1000.0)
        cols["req_accel"].append(gpus)
        cols["devices"].append(devices)
        cols["accel_class"].append(table.CPU_CLASS if not gpus else "gpu/shared" if devices < gpus else "gpu")
        cols["model"].append(ANY_GPU if gpus else "")
    n = len(cols["job_id"])
    start = np.asarray(cols["start"], dtype="float64")
    end = np.asarray(cols["end"], dtype="float64")
    jobs = table.build({
        **{c: table.categorical(cols[c]) for c in ("qos", "state", "accel_class", "model")},
        "job_id": cols["job_id"], "source": table.constant(n, source_name(pods)),
        "arch": table.constant(n, ARCH), "submit": cols["submit"], "eligible": cols["submit"],
        "start": start, "end": end, "runtime_s": end - start, "ncpus": cols["ncpus"],
        "req_cpus": cols["ncpus"], "req_accel": cols["req_accel"], "devices": cols["devices"],
        "units": np.full(n, np.nan)}, n)
    notes = ["Alibaba trace: times are relative to its start (shown from 1970-01-01); pods name no "
             "GPU model, so GPUs are counted as one pool; gpu/shared = a fraction of one GPU"]
    cap = Capacity(source=nodes.name if nodes else "none (no nodes file beside the pods file)")
    if nodes is None:
        notes.append(f"no nodes file beside {pods.name}: capacity unknown")
        return Trace(jobs, cap, f"Alibaba GPU trace {pods.name}", notes)
    total_gpus = 0.0
    for lineno, row in _rows(nodes, NODES):
        g = _number(nodes, lineno, row, "gpu")
        cap.cpus[ARCH] = cap.cpus.get(ARCH, 0.0) + _number(nodes, lineno, row, "cpu_milli") / 1000.0
        cap.nodes[ARCH] = cap.nodes.get(ARCH, 0) + 1
        if g > 0:
            model = row["model"].strip() or "unknown"
            cap.inventory[model] = cap.inventory.get(model, 0.0) + g
            total_gpus += g
    cap.devices[(ANY_GPU, ARCH)] = total_gpus
    return Trace(jobs, cap, f"Alibaba GPU trace {pods.name} + {nodes.name}", notes)
