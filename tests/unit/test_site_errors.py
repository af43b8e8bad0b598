"""Bad site files → the exact messages (with YAML positions and hints) and exit status 2."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.site import load_site_text
from slurm_hetero.site.load import SiteError

BASE = """\
name: t
partitions:
  - {name: cpu, default: true}
  - {name: gpu}
node_groups:
  - names: c[1-2]
    architecture: x86_64
    sockets: 2
    cores_per_socket: 8
    memory: 64GB
    partitions: [cpu]
  - names: g[1-2]
    architecture: x86_64
    sockets: 2
    cores_per_socket: 8
    memory: 256GB
    memory_bandwidth: 200GB/s
    partitions: [gpu]
    accelerators:
      - {model: a100-80gb, count: 4}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    return e.value.lines


def test_base_is_valid() -> None:
    site = load_site_text(BASE, "site.yaml")
    assert [g.names for g in site.node_groups] == ["c[1-2]", "g[1-2]"]


CASES = [
    (  # unknown model → nearest names
        BASE.replace("a100-80gb", "a100-80"),
        ["site.yaml:20:17: node_groups[1].accelerators[0].model: unknown accelerator model "
         "'a100-80'\n    hint: did you mean: a100-80gb, a100-40gb?"],
    ),
    (  # overlapping hostlists
        BASE.replace("g[1-2]", "c[2-3]"),
        ["site.yaml:12:12: node_groups[1].names: node c2 is also in node_groups[0]\n"
         "    hint: hostlists of node groups must not overlap"],
    ),
    (  # a node group in no partition
        BASE.replace("partitions: [gpu]", "partitions: []").replace("  - {name: gpu}\n", ""),
        ["site.yaml:17:17: node_groups[1].partitions: node group is in no partition\n"
         "    hint: list at least one of: cpu"],
    ),
    (  # zero count
        BASE.replace("count: 4", "count: 0"),
        ["site.yaml:20:35: node_groups[1].accelerators[0].count: 0 is less than the minimum of 1"],
    ),
    (  # a stack with no build for that arch
        BASE.replace("model: a100-80gb", "model: mi300x").replace(
            "    memory: 256GB", "    memory: 256GB").replace(
            "  - names: g[1-2]\n    architecture: x86_64", "  - names: g[1-2]\n    architecture: arm64"),
        ["site.yaml:20:17: node_groups[1].accelerators[0].model: model mi300x (stack rocm) has "
         "no build for aarch64\n    hint: mi300x supports: x86_64"],
    ),
    (  # unparsable bandwidth
        BASE.replace("200GB/s", "fast"),
        ["site.yaml:17:23: node_groups[1].memory_bandwidth: cannot parse bandwidth 'fast': use a "
         "number with MB/s, GB/s or TB/s (e.g. 120GB/s)"],
    ),
    (  # unknown architecture
        BASE.replace("architecture: x86_64", "architecture: sparc", 1),
        ["site.yaml:7:19: node_groups[0].architecture: unknown architecture 'sparc'\n"
         "    hint: allowed: x86_64, aarch64 (aliases arm64, ARMv8)"],
    ),
    (  # unknown partition in a node group
        BASE.replace("partitions: [cpu]", "partitions: [cpux]"),
        ["site.yaml:11:18: node_groups[0].partitions[0]: unknown partition 'cpux'\n"
         "    hint: did you mean: cpu?",
         "site.yaml:3:12: partitions[0].name: partition 'cpu' has no nodes\n"
         "    hint: add it to some node group's partitions, or remove it"],
    ),
    (  # a misspelt key
        BASE.replace("cores_per_socket: 8\n    memory: 64GB", "cores_per_sockets: 8\n    memory: 64GB"),
        ["site.yaml:6:5: node_groups[0]: Additional properties are not allowed "
         "('cores_per_sockets' was unexpected)\n    hint: allowed keys: accelerators, architecture, "
         "compute_units, cores_per_socket, cpus, drivers, fabric, features, gres_autodetect, idle_watts, memory, "
         "memory_bandwidth, mig, names, options, partitions, resource_type, sockets, supported_frameworks, "
         "threads_per_core",
         "site.yaml:6:5: node_groups[0]: 'cores_per_socket' is a required property\n"
         "    hint: see site/demo/site.yaml for a complete example"],
    ),
    (  # a duplicate key
        BASE.replace("    memory: 64GB\n", "    memory: 64GB\n    memory: 32GB\n"),
        ["site.yaml:11:13: node_groups[0].memory: duplicate key 'memory'\n"
         "    hint: each key may appear once; the later one would win"],
    ),
    (  # resource_type that contradicts the accelerators
        BASE.replace("    memory_bandwidth: 200GB/s\n",
                     "    memory_bandwidth: 200GB/s\n    resource_type: NPU\n"),
        ["site.yaml:18:20: node_groups[1].resource_type: resource_type NPU does not match its "
         "accelerators (GPU)\n    hint: CPU for no accelerators, else GPU or NPU as the models are"],
    ),
    (  # sharding an NPU
        BASE.replace("{model: a100-80gb, count: 4}",
                     "{model: ascend-910b, count: 4, shards_per_device: 2}").replace(
            "  - names: g[1-2]\n    architecture: x86_64", "  - names: g[1-2]\n    architecture: aarch64"),
        ["site.yaml:20:59: node_groups[1].accelerators[0].shards_per_device: sharding needs a GPU "
         "(Slurm's gres/shard slices gres/gpu)"],
    ),
    (  # bad hostlist
        BASE.replace("c[1-2]", "c[2-1"),
        ["site.yaml:6:12: node_groups[0].names: bad hostlist 'c[2-1': '[' at character 2 is not closed\n"
         "    hint: use names like gpu[001-128] or a,b,c"],
    ),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[
    "unknown-model", "overlap", "no-partition", "zero-count", "arch-stack", "bandwidth",
    "arch", "unknown-partition", "misspelt-key", "duplicate-key", "resource-type",
    "npu-shards", "bad-hostlist"])
def test_bad_site_messages(text: str, expected: list[str]) -> None:
    assert errors_of(text) == expected


def test_all_problems_at_once() -> None:
    text = BASE.replace("a100-80gb", "h1000").replace("200GB/s", "fast").replace(
        "architecture: x86_64", "architecture: mips", 1)
    lines = errors_of(text)
    assert len(lines) == 3
    assert [ln.split(": ")[1] for ln in lines] == [
        "node_groups[0].architecture", "node_groups[1].accelerators[0].model",
        "node_groups[1].memory_bandwidth"]


def test_not_yaml() -> None:
    assert errors_of("name: [unclosed\n") == [
        "site.yaml:2:1: not valid YAML: expected ',' or ']', but got '<stream end>'"]


def test_cli_exit_2_and_nothing_written(tmp_path: Path) -> None:
    bad = tmp_path / "site.yaml"
    bad.write_text(BASE.replace("count: 4", "count: 0"))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["conf", "render", str(bad), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "node_groups[1].accelerators[0].count: 0 is less than the minimum of 1" in result.output
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [bad]  # no temp folder left behind either


def test_cli_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["site", "validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "nope.yaml: cannot read site file: No such file or directory" in result.output


def test_catalog_override_and_new_model() -> None:
    text = BASE.replace("model: a100-80gb", "model: my-npu") + textwrap.dedent("""\
        catalog:
          my-npu:
            stack: cann
            resource_type: NPU
            device_memory: 32GB
            memory_bandwidth: 1TB/s
            fp16_tflops: 156
            tdp_watts: 300
            compute_units: 16
          a100-80gb: {tdp_watts: 500}
        """)
    site = load_site_text(text, "site.yaml")
    assert site.catalog["a100-80gb"].tdp_watts == 500
    assert site.catalog["a100-80gb"].units == 1.0
    m = site.catalog["my-npu"]
    assert (m.vendor, m.gres_name, m.gres_type) == ("huawei", "npu", "my-npu")
    # 0.6*156/312 + 0.2*32/80 + 0.2*1000/2039
    assert m.units == round(0.6 * 0.5 + 0.2 * 0.4 + 0.2 * 1000 / 2039, 2)


def test_catalog_new_model_incomplete() -> None:
    text = BASE + "catalog:\n  my-gpu: {stack: cuda}\n"
    assert errors_of(text) == [
        "site.yaml:22:11: catalog.my-gpu: new model 'my-gpu' lacks resource_type, device_memory, "
        "memory_bandwidth, tdp_watts, compute_units\n"
        "    hint: a model not in the built-in catalog needs every datasheet field"]
