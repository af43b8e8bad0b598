"""The accelerator catalog and its normalization into comparable units.

Normalized units put different accelerators on one scale so that fairshare charges the
same for the same work, node weights prefer the cheaper pool, and `--accel=units=U` can be
met by any model. The formula (documented in the README) is a weighted blend relative to a
reference model (A100-80GB = 1.0 by default):

    units = w_t * tensor/tensor_ref + w_m * memory/memory_ref + w_b * bandwidth/bandwidth_ref

`tensor` is dense bf16 throughput, or fp16 where the model has no bf16 (V100, 310P).
Default weights: tensor 0.6, memory 0.2, bandwidth 0.2. Rounded to 2 decimals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from slurm_hetero.site.units import parse_bandwidth_gbs, parse_size_mib

STACK_VENDOR = {"cuda": "nvidia", "rocm": "amd", "cann": "huawei"}
DEFAULT_WEIGHTS = {"tensor": 0.6, "memory": 0.2, "bandwidth": 0.2}
DEFAULT_REFERENCE = "a100-80gb"


@dataclass(frozen=True)
class AccelModel:
    """One accelerator model, per device, with the datasheet it came from."""

    id: str
    vendor: str
    stack: str
    resource_type: str  # GPU or NPU
    gres_type: str
    architectures: tuple[str, ...]
    device_memory_mib: int
    memory_bandwidth_gbs: float
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp32_tflops: float | None
    tdp_watts: float
    compute_units: int
    supported_frameworks: tuple[str, ...]
    source: str
    units: float = 0.0  # normalized units, filled by normalize()
    idle_watts: float | None = None  # measured idle draw per device, where the site gives it

    @property
    def gres_name(self) -> str:
        """The Slurm GRES name: `gpu` has a Slurm plugin; NPUs use a plain `npu` GRES."""
        return "gpu" if self.resource_type == "GPU" else "npu"

    @property
    def tensor_tflops(self) -> float:
        return float(self.bf16_tflops or self.fp16_tflops or self.fp32_tflops or 0.0)

    @property
    def memory_gb(self) -> int:
        return round(self.device_memory_mib / 1024)


@dataclass(frozen=True)
class Normalization:
    reference: str = DEFAULT_REFERENCE
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))


def builtin_catalog_data() -> dict[str, dict[str, Any]]:
    """The raw built-in catalog (model id -> fields), as shipped in catalog.yaml."""
    text = resources.files("slurm_hetero.site").joinpath("catalog.yaml").read_text()
    data: dict[str, dict[str, Any]] = yaml.safe_load(text)["models"]
    return data


def model_from_fields(model_id: str, f: dict[str, Any]) -> AccelModel:
    """Build a model from validated fields; raises ValueError on unparsable quantities."""
    return AccelModel(
        id=model_id,
        vendor=str(f.get("vendor") or STACK_VENDOR.get(f["stack"], "unknown")),
        stack=f["stack"],
        resource_type=f["resource_type"],
        gres_type=str(f.get("gres_type") or model_id),
        architectures=tuple(f.get("architectures") or ("x86_64", "aarch64")),
        device_memory_mib=parse_size_mib(f["device_memory"], minimum=1),  # normalize() divides
        memory_bandwidth_gbs=parse_bandwidth_gbs(f["memory_bandwidth"], positive=True),
        fp16_tflops=f.get("fp16_tflops"),
        bf16_tflops=f.get("bf16_tflops"),
        fp32_tflops=f.get("fp32_tflops"),
        tdp_watts=float(f["tdp_watts"]),
        compute_units=int(f["compute_units"]),
        supported_frameworks=tuple(f.get("supported_frameworks") or ()),
        source=str(f.get("source", "site file")),
        idle_watts=float(f["idle_watts"]) if f.get("idle_watts") is not None else None,
    )


def normalize(models: dict[str, AccelModel], norm: Normalization) -> dict[str, AccelModel]:
    """Return the models with `units` filled in, relative to `norm.reference`."""
    from dataclasses import replace

    ref = models[norm.reference]
    w = norm.weights
    out = {}
    for mid, m in models.items():
        units = (
            w.get("tensor", 0.0) * m.tensor_tflops / ref.tensor_tflops
            + w.get("memory", 0.0) * m.device_memory_mib / ref.device_memory_mib
            + w.get("bandwidth", 0.0) * m.memory_bandwidth_gbs / ref.memory_bandwidth_gbs
        )
        out[mid] = replace(m, units=round(units, 2))
    return out
