"""The built-in catalog and normalization."""

from __future__ import annotations

import pytest

from slurm_hetero.site.catalog import (
    AccelModel,
    Normalization,
    builtin_catalog_data,
    model_from_fields,
    normalize,
)
from slurm_hetero.site.units import parse_bandwidth_gbs, parse_size_mib

REQUIRED = ["v100", "a100-40gb", "a100-80gb", "h100", "h200", "l40s", "gh200", "mi250x",
            "mi300x", "ascend-910b", "ascend-310p"]


def catalog() -> dict[str, AccelModel]:
    raw = builtin_catalog_data()
    return normalize({k: model_from_fields(k, v) for k, v in raw.items()}, Normalization())


def test_every_required_model_has_datasheet_figures() -> None:
    raw = builtin_catalog_data()
    assert set(REQUIRED) <= set(raw)
    for mid in REQUIRED:
        f = raw[mid]
        assert f["source"], mid
        for key in ("vendor", "stack", "device_memory", "memory_bandwidth", "tdp_watts"):
            assert f[key], (mid, key)
        assert f["fp16_tflops"] or f["bf16_tflops"], mid


def test_normalized_units() -> None:
    cat = catalog()
    units = {k: m.units for k, m in cat.items()}
    assert units["a100-80gb"] == 1.0  # the reference
    # h100: 0.6*989/312 + 0.2*80/80 + 0.2*3350/2039
    assert units["h100"] == round(0.6 * 989 / 312 + 0.2 + 0.2 * 3350 / 2039, 2) == 2.43
    # V100 has no bf16: its fp16 tensor throughput counts.
    assert units["v100"] == round(0.6 * 125 / 312 + 0.2 * 32 / 80 + 0.2 * 900 / 2039, 2)
    order = sorted(units, key=units.__getitem__)
    assert order[0] == "ascend-310p" and order[-1] == "mi300x"
    assert units["a100-40gb"] < units["a100-80gb"] < units["h100"] < units["h200"]


def test_other_reference_rescales() -> None:
    raw = builtin_catalog_data()
    models = {k: model_from_fields(k, v) for k, v in raw.items()}
    cat = normalize(models, Normalization(reference="h100", weights={"tensor": 1.0}))
    assert cat["h100"].units == 1.0
    assert cat["a100-80gb"].units == round(312 / 989, 2)


@pytest.mark.parametrize(("text", "mib"), [("80GB", 81920), ("80G", 81920), ("1T", 1048576),
                                           ("512M", 512), (1024, 1024), ("1.5GiB", 1536)])
def test_sizes(text: str | int, mib: int) -> None:
    assert parse_size_mib(text) == mib


@pytest.mark.parametrize(("text", "gbs"), [("120GB/s", 120.0), ("1.6TB/s", 1600.0),
                                           ("900 MB/s", 0.9), (204.8, 204.8)])
def test_bandwidths(text: str | float, gbs: float) -> None:
    assert parse_bandwidth_gbs(text) == pytest.approx(gbs)


@pytest.mark.parametrize("text", ["fast", "120GB", "GB/s", "-1GB/s", ""])
def test_bad_bandwidths(text: str) -> None:
    with pytest.raises(ValueError, match="cannot parse bandwidth"):
        parse_bandwidth_gbs(text)
