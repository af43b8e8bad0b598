"""The Alibaba GPU trace (cluster-trace-gpu-v2023) for replay: its pods as replayable jobs,
and a small site shaped like its nodes list.

Pods (`jobs/alibaba.py` reads them into the job table; this adds what replay needs):
- never-scheduled pods (no scheduled_time: deleted while pending) have no runtime to
  replay: dropped, and counted;
- a fraction of a GPU (`gpu_milli` < 1000) asks for a **whole GPU**. Slurm 22.05 has
  `gres/shard`, but a shard is only a slot count, not a share of memory or compute, and the
  bridge's `--accel` has no fraction syntax, so the plain and bridge arms could not ask for
  the same thing; a whole device is what both can ask, and it over-states demand (the
  replay errs towards a busier cluster, never a kinder one);
- `gpu_spec` (the models a pod accepts, `|`-separated) is the job's model where it names
  one the site has; the 2023 trace leaves it empty on every pod;
- the user's limit: the trace has none, so each pod gets LIMIT_FACTOR x its runtime rounded
  up to LIMIT_ROUND_S (at least LIMIT_ROUND_S): deterministic, never below the runtime, so
  no job is killed before it ends, and loose like real users' limits.

Site (`site_data`): per GPU model of the nodes file, the most common node shape (CPUs,
memory, GPUs per node) kept whole, node count scaled by `scale` (at least one node per
model, so every model of the mix stays); a model whose scaled GPU count is below one node
of that shape gets one node with that many GPUs. Models the built-in catalog lacks get a
site-local catalog entry (`MODELS`, with sources); G2 and G3 are undisclosed in the trace
and are mapped to stated stand-in figures.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from slurm_hetero.errors import InputError
from slurm_hetero.jobs import traces
from slurm_hetero.jobs.trace import open_text

LIMIT_FACTOR = 2.0
LIMIT_ROUND_S = 900  # 15 minutes
MAX_TIME = "365-00:00:00"  # the site's MaxTime: above every derived limit of the 149-day trace
PARTITION = "gpu"

# Trace model name → (site catalog id, catalog entry the site adds; None: built in).
_V100_16 = {"vendor": "nvidia", "stack": "cuda", "resource_type": "GPU", "gres_type": "v100m16",
            "architectures": ["x86_64"], "device_memory": "16GB", "memory_bandwidth": "900GB/s",
            "fp16_tflops": 125, "fp32_tflops": 15.7, "tdp_watts": 300, "compute_units": 80,
            "supported_frameworks": ["pytorch", "tensorflow"],
            "source": "NVIDIA Tesla V100 GPU datasheet (SXM2 16GB), 2020"}
MODELS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "P100": ("p100", {"vendor": "nvidia", "stack": "cuda", "resource_type": "GPU", "gres_type": "p100",
                      "architectures": ["x86_64"], "device_memory": "16GB", "memory_bandwidth": "732GB/s",
                      "fp16_tflops": 18.7, "fp32_tflops": 9.3, "tdp_watts": 250, "compute_units": 56,
                      "supported_frameworks": ["pytorch", "tensorflow"],
                      "source": "NVIDIA Tesla P100 PCIe datasheet (16GB), 2016"}),
    "V100M16": ("v100-16gb", _V100_16),
    "V100M32": ("v100", None),  # the built-in V100 is the 32GB SXM2
    "T4": ("t4", {"vendor": "nvidia", "stack": "cuda", "resource_type": "GPU", "gres_type": "t4",
                  "architectures": ["x86_64"], "device_memory": "16GB", "memory_bandwidth": "320GB/s",
                  "fp16_tflops": 65, "fp32_tflops": 8.1, "tdp_watts": 70, "compute_units": 40,
                  "supported_frameworks": ["pytorch", "tensorflow"],
                  "source": "NVIDIA T4 Tensor Core GPU datasheet, 2019"}),
    "A10": ("a10", {"vendor": "nvidia", "stack": "cuda", "resource_type": "GPU", "gres_type": "a10",
                    "architectures": ["x86_64"], "device_memory": "24GB", "memory_bandwidth": "600GB/s",
                    "fp16_tflops": 125, "bf16_tflops": 125, "fp32_tflops": 31.2, "tdp_watts": 150,
                    "compute_units": 72, "supported_frameworks": ["pytorch", "tensorflow"],
                    "source": "NVIDIA A10 Tensor Core GPU datasheet, 2021"}),
    # Undisclosed in the trace: stand-in figures (the trace's own 8-GPU node shapes, 96 and
    # 128 cores, are those of A10- and A100-class servers). Utilisation in normalized units
    # of these two pools rests on this assumption.
    "G2": ("alibaba-g2", {"vendor": "nvidia", "stack": "cuda", "resource_type": "GPU", "gres_type": "g2",
                          "architectures": ["x86_64"], "device_memory": "24GB", "memory_bandwidth": "600GB/s",
                          "fp16_tflops": 125, "bf16_tflops": 125, "fp32_tflops": 31.2, "tdp_watts": 150,
                          "compute_units": 72, "supported_frameworks": ["pytorch", "tensorflow"],
                          "source": "Alibaba GPU trace model G2 (undisclosed): stand-in figures of the "
                                    "NVIDIA A10 datasheet, 2021 (an assumption, not a datasheet of G2)"}),
    "G3": ("alibaba-g3", {"vendor": "nvidia", "stack": "cuda", "resource_type": "GPU", "gres_type": "g3",
                          "architectures": ["x86_64"], "device_memory": "40GB",
                          "memory_bandwidth": "1555GB/s",
                          "fp16_tflops": 312, "bf16_tflops": 312, "fp32_tflops": 19.5, "tdp_watts": 400,
                          "compute_units": 108, "supported_frameworks": ["pytorch", "tensorflow"],
                          "source": "Alibaba GPU trace model G3 (undisclosed): stand-in figures of the "
                                    "NVIDIA A100 SXM4 40GB datasheet, 2021 (an assumption, not a "
                                    "datasheet of G3)"}),
}
POD_COLUMNS = ("name", "gpu_spec")


def is_pods_csv(path: Path) -> bool:
    """The pods file, known by its header (its name may be anything)."""
    if not path.name.lower().endswith((".csv", ".csv.gz")) or not path.is_file():
        return False
    with open_text(path) as f:
        cols = {c.strip() for c in f.readline().split(",")}
    return {"pod_phase", "num_gpu", "gpu_milli", "scheduled_time"} <= cols


def derived_limit_s(runtime_s: float) -> float:
    """The limit a pod's user is taken to have asked for (the trace records none).

    >>> derived_limit_s(10), derived_limit_s(600), derived_limit_s(3600)
    (900, 1800, 7200)
    """
    return max(LIMIT_ROUND_S, math.ceil(LIMIT_FACTOR * runtime_s / LIMIT_ROUND_S) * LIMIT_ROUND_S)


def _gpu_specs(path: Path) -> dict[str, str]:
    with open_text(path) as f:
        reader = csv.DictReader(f)
        if "gpu_spec" not in (reader.fieldnames or []):
            return {}
        return {row["name"]: (row.get("gpu_spec") or "").strip() for row in reader}


def read_pods(path: Path) -> tuple[pd.DataFrame, Counter[str]]:
    """The pods as job-table rows, with the replay's additions (module doc); the pods
    dropped, by reason."""
    df = traces.read_trace(path).jobs
    dropped: Counter[str] = Counter()
    never = df["start"].isna()
    if never.any():
        dropped["never scheduled (deleted while pending)"] = int(never.sum())
    df = df[~never].reset_index(drop=True)
    specs = _gpu_specs(path)
    df["model"] = [specs.get(str(j), "") if g > 0 else ""
                   for j, g in zip(df["job_id"], df["req_accel"], strict=True)]
    df["req_time_s"] = np.asarray([derived_limit_s(r) for r in df["runtime_s"]], dtype="float64")
    return df, dropped


# --- the site ---------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeShape:
    cpus: int
    memory_mib: int
    gpus: int


def read_nodes(path: Path) -> dict[str, Counter[NodeShape]]:
    """Per GPU model of the nodes file, how many nodes of each shape (CPU-only nodes: key "")."""
    out: dict[str, Counter[NodeShape]] = {}
    with open_text(path) as f:
        reader = csv.DictReader(f)
        need = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"--nodes {path}:1: header lacks column(s) {', '.join(missing)}; "
                             f"expected {', '.join(need)} (the Alibaba trace's nodes file)")
        for row in reader:
            try:
                shape = NodeShape(math.ceil(float(row["cpu_milli"]) / 1000), int(float(row["memory_mib"])),
                                  int(float(row["gpu"])))
            except (TypeError, ValueError):
                raise InputError(f"--nodes {path}:{reader.line_num}: cpu_milli, memory_mib and gpu "
                                 "must be numbers") from None
            model = (row["model"] or "").strip() if shape.gpus > 0 else ""
            if shape.gpus > 0 and model not in MODELS:
                raise InputError(f"--nodes {path}:{reader.line_num}: GPU model {model!r} is not one of "
                                 f"{', '.join(MODELS)}")
            if shape.cpus <= 0:
                raise InputError(f"--nodes {path}:{reader.line_num}: cpu_milli must be above 0")
            out.setdefault(model, Counter())[shape] += 1
    if not out:
        raise InputError(f"--nodes {path}: no nodes in it")
    return out


def parse_scale(text: str) -> float:
    """--scale: `1/100`, `0.01` or `1%`.

    >>> parse_scale("1/100"), parse_scale("0.05"), parse_scale("2%")
    (0.01, 0.05, 0.02)
    """
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(Fraction(t))
    except (ValueError, ZeroDivisionError):
        raise InputError(f"--scale {text!r}: give a fraction of the trace's nodes, e.g. 1/100, "
                         "0.01 or 1%") from None
    if not 0 < value <= 1:
        raise InputError(f"--scale {text!r}: must be above 0 and at most 1")
    return value


@dataclass(frozen=True)
class ScaledGroup:
    trace_model: str  # "" for CPU-only nodes
    shape: NodeShape
    nodes: int
    trace_gpus: int  # the trace cluster's GPUs of this model
    trace_nodes: int

    @property
    def gpus(self) -> int:
        return self.shape.gpus * self.nodes


def scale_groups(nodes: dict[str, Counter[NodeShape]], scale: float) -> list[ScaledGroup]:
    """One group per model (module doc); CPU-only nodes scaled the same way when the trace has any."""
    out = []
    for model in sorted(nodes, key=lambda m: (m == "", m)):
        shapes = nodes[model]
        shape = max(shapes, key=lambda s: (shapes[s], s.gpus, s.cpus))  # most common, then largest
        trace_gpus = sum(s.gpus * n for s, n in shapes.items())
        trace_nodes = sum(shapes.values())
        if not model:
            out.append(ScaledGroup("", shape, max(1, round(trace_nodes * scale)), 0, trace_nodes))
            continue
        target = trace_gpus * scale
        if target < shape.gpus:  # below one node of its shape: one node, fewer GPUs
            g = max(1, round(target))
            small = NodeShape(shape.cpus, shape.memory_mib, g)
            out.append(ScaledGroup(model, small, 1, trace_gpus, trace_nodes))
        else:
            out.append(ScaledGroup(model, shape, max(1, round(target / shape.gpus)), trace_gpus, trace_nodes))
    return out


def _cores(cpus: int) -> tuple[int, int]:
    """(sockets, cores per socket) for a node of `cpus` cores: two sockets when even."""
    return (2, cpus // 2) if cpus >= 2 and cpus % 2 == 0 else (1, cpus)


def site_data(nodes: dict[str, Counter[NodeShape]], scale: float, name: str) -> dict[str, Any]:
    """The site file's data (see the module doc)."""
    groups = scale_groups(nodes, scale)
    catalog = {MODELS[g.trace_model][0]: dict(MODELS[g.trace_model][1] or {})
               for g in groups if g.trace_model and MODELS[g.trace_model][1] is not None}
    node_groups = []
    for g in groups:
        prefix = MODELS[g.trace_model][0].removeprefix("alibaba-") if g.trace_model else "cpu"
        names = f"{prefix}-01" if g.nodes == 1 else f"{prefix}-[01-{g.nodes:02d}]"
        sockets, cores = _cores(g.shape.cpus)
        group: dict[str, Any] = {
            "names": names, "resource_type": "GPU" if g.trace_model else "CPU", "architecture": "x86_64",
            "sockets": sockets, "cores_per_socket": cores, "threads_per_core": 1,
            "memory": f"{max(1, g.shape.memory_mib // 1024)}GB", "memory_bandwidth": "200GB/s",
            "supported_frameworks": ["pytorch", "tensorflow"], "partitions": [PARTITION]}
        if g.trace_model:
            group["accelerators"] = [{"model": MODELS[g.trace_model][0], "count": g.shape.gpus}]
        node_groups.append(group)
    return {
        "name": name,
        "description": f"the Alibaba GPU trace's cluster at {scale:g} of its nodes, every GPU model kept",
        **({"catalog": catalog} if catalog else {}),
        "partitions": [{"name": PARTITION, "default": True, "max_time": MAX_TIME, "default_time": "1:00:00"}],
        "node_groups": node_groups,
        "node_agent": {"restore_interval": 0},
    }


def mix_lines(nodes: dict[str, Counter[NodeShape]], scale: float) -> list[str]:
    """Per model: the trace cluster's GPUs and share, the site's, for people."""
    groups = [g for g in scale_groups(nodes, scale) if g.trace_model]
    tg, sg = sum(g.trace_gpus for g in groups), sum(g.gpus for g in groups)
    lines = []
    for g in groups:
        lines.append(f"{g.trace_model:8s} {MODELS[g.trace_model][0]:11s} trace {g.trace_nodes:4d} nodes "
                     f"{g.trace_gpus:5d} GPUs {100 * g.trace_gpus / tg:5.1f}%   site {g.nodes:2d} x "
                     f"{g.shape.gpus} GPUs ({g.shape.cpus} CPUs) = {g.gpus:3d} {100 * g.gpus / sg:5.1f}%")
    lines.append(f"total    trace {sum(g.trace_nodes for g in groups)} nodes {tg} GPUs; site "
                 f"{sum(g.nodes for g in scale_groups(nodes, scale))} nodes {sg} GPUs")
    return lines


def site_yaml(data: dict[str, Any], nodes_path: Path, scale_text: str, lines: list[str]) -> str:
    head = [f"# Made by `slurm-hetero replay site --nodes {nodes_path.name} --scale {scale_text}`:",
            "# a site shaped like the Alibaba GPU trace's nodes list (cluster-trace-gpu-v2023),",
            "# each model's most common node shape, node counts scaled; G2/G3 (undisclosed in",
            "# the trace) carry stand-in figures named in their catalog `source`.",
            *(f"#   {ln}" for ln in lines)]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False, width=110)


def load_ratio(df: pd.DataFrame, gpus: float) -> float:
    """The trace's GPU-seconds (whole GPUs, as replay asks) ÷ (gpus x the trace's span)."""
    started = df[df["start"].notna() & df["end"].notna()]
    if not len(started) or gpus <= 0:
        return 0.0
    span = float(started["end"].max() - started["submit"].min())
    used = float((started["req_accel"].fillna(0) * (started["end"] - started["start"])).sum())
    return used / (gpus * span) if span > 0 else 0.0
