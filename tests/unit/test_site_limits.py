"""Hostile or absurd site files: exit status 2, a message naming the file, the location and
what is allowed, in bounded time and memory, and nothing written.

The CLI cases run `slurm-hetero` in a child process (as an admin's shell would) under an
address-space limit, and read that child's own CPU time and peak memory from wait4().
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ClusterShell.NodeSet import NodeSet

from slurm_hetero.cli import main
from slurm_hetero.site import limits, load_site, load_site_text
from slurm_hetero.site.limits import HostlistError, hostlist_size
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.units import parse_bandwidth_gbs, parse_size_mib
from tests.unit.test_site_errors import BASE  # the same small valid site

ROOT = Path(__file__).resolve().parents[2]
CPU_BUDGET_S = 20.0  # measured: at most ~3.5 s on a shared 2-core machine
RSS_BUDGET_MIB = 400  # measured: at most ~130 MiB
AS_LIMIT = 2 << 30  # the child's address space: a regression fails, the machine stays usable


def _bomb(levels: int = 9, width: int = 9) -> str:
    out = 'l0: &a0 ["lol"' + ', "lol"' * (width - 1) + "]\n"
    for i in range(1, levels + 1):
        out += f"l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n"
    return out


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_cli(*args: str) -> tuple[int, str, float, float]:
    """(exit status, output, CPU seconds, peak RSS MiB) of `slurm-hetero ARGS` in a child."""
    p = subprocess.Popen([sys.executable, "-m", "slurm_hetero.cli", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, preexec_fn=_limit_child, cwd=ROOT)
    assert p.stdout is not None
    timer = threading.Timer(120, p.kill)  # a hang fails the test instead of the run
    timer.start()
    try:
        out = p.stdout.read()  # until the child exits
        _, status, usage = os.wait4(p.pid, 0)  # this child's own CPU time and peak memory
    finally:
        timer.cancel()
        p.stdout.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return p.returncode, out.decode("utf-8", "replace"), cpu, usage.ru_maxrss / 1024


HOSTILE: list[tuple[str, str | bytes, list[str]]] = [
    ("nodes-1e9", BASE.replace("c[1-2]", "cpu-[1-1000000000]"),
     [":6:12: node_groups[0].names: hostlist 'cpu-[1-1000000000]' names more than 100000 nodes",
      "at most 100000 nodes in a site"]),
    ("nodes-1e6", BASE.replace("c[1-2]", "cpu-[1-1000000]"),
     [":6:12: node_groups[0].names:", "at most 100000 nodes in a site"]),
    ("nodes-product", BASE.replace("c[1-2]", "r[1-1000]n[1-1000]"),
     [":6:12: node_groups[0].names:", "at most 100000 nodes in a site"]),
    ("nodes-sum", BASE.replace("c[1-2]", "c[1-60000]").replace("g[1-2]", "g[1-60000]"),
     [":6:3: node_groups: the node groups name 120000 nodes, more than 100000"]),
    ("count-1e9", BASE.replace("count: 4", "count: 1000000000"),
     [":20:35: node_groups[1].accelerators[0].count: 1000000000 is greater than the maximum of 64",
      "devices of this model on each node: at most 64"]),
    ("devices-sum", BASE.replace("{model: a100-80gb, count: 4}",
                                 "{model: a100-80gb, count: 40}\n      - {model: a100-40gb, count: 40}"),
     [":20:7: node_groups[1].accelerators: 80 devices per node are too many",
      "at most 64 accelerators on one node"]),
    ("memory-PB", BASE.replace("memory: 64GB", "memory: 99999999999999999999999PB"),
     [":10:13: node_groups[0].memory: size '99999999999999999999999PB' is out of range: "
      "must be at least 1 MiB and below 1 EiB"]),
    ("memory-int", BASE.replace("memory: 64GB", "memory: 1099511627776"),
     [":10:13: node_groups[0].memory: 1099511627776 is greater than or equal to the maximum of "
      "1099511627776", "below 1 EiB"]),
    ("device-memory", BASE + "catalog:\n  a100-80gb: {device_memory: 2000000T}\n",
     [":22:30: catalog.a100-80gb.device_memory: size '2000000T' is out of range", "below 1 EiB"]),
    ("billion-laughs", BASE + _bomb(),
     [": the document expands to more than 100000 values", "at most 100000 scalars"]),
    ("python-tag", BASE + 'description: !!python/object/apply:os.system ["touch /tmp/pwned"]\n',
     [":21:14: description: YAML tag '!!python/object/apply:os.system' is not allowed",
      "plain YAML only"]),
    ("python-name", BASE + "description: !!python/name:os.system\n",
     [":21:14: description: YAML tag '!!python/name:os.system' is not allowed"]),
    ("not-utf8", BASE.encode() + b"description: caf\xe9\n",
     [":21:17: not valid UTF-8: byte 0xe9", "save the site file as UTF-8"]),
    ("utf16", BASE.encode("utf-16"), [":1:1: not valid UTF-8: byte 0xff"]),
    ("nesting-5000", BASE + "description: " + "[" * 5000 + "]" * 5000 + "\n",
     [":21:45: description[0]", "values nest more than 32 levels deep", "at most 32 levels"]),
    ("nesting-alias", BASE + "a: &a " + "[" * 20 + "]" * 20 + "\nb: " + "[" * 15 + "*a" + "]" * 15 + "\n",
     [":22:19: b[0]", "alias *a nests values more than 32 levels deep"]),
    ("recursive-alias", BASE + "description: &r [*r]\n",
     [":21:18: description[0]: alias *r is used inside its own anchor &r",
      "cannot describe a recursive structure"]),
    ("many-values", BASE + "x: [" + ",".join(["1"] * 120_000) + "]\n",
     [": the document expands to more than 100000 values"]),
    ("huge-file", BASE + "#" + "x" * (5 << 20) + "\n",
     [": more than 4194304 bytes is too large for a site file", "at most 4 MiB"]),
    ("huge-integer", BASE.replace("count: 4", "count: " + "9" * 5000),
     [":20:35: node_groups[1].accelerators[0].count: a number of 5000 characters is too large",
      "at most 64 characters"]),
    ("base60-integer", BASE.replace("count: 4", "count: " + ":".join(["59"] * 20)),
     [":20:35: node_groups[1].accelerators[0].count:", "is too large a number", "below 2**63"]),
    ("infinite-bandwidth", BASE.replace("200GB/s", ".inf"),
     [":17:23: node_groups[1].memory_bandwidth: '.inf' is not a finite number", "no .inf or .nan"]),
    ("long-value", BASE + "description: " + "x" * 100_000 + "\n",
     [":21:14: description: a value of 100000 characters is too long", "at most 65536 characters"]),
    ("nul-byte", BASE + "description: a\0b\n",
     [":21:15: not valid YAML: character '\\x00' is not allowed", "control characters are not"]),
    ("diagonal-names", BASE.replace("c[1-2]", ",".join(f"n{i}x{i}" for i in range(600))),
     [":6:3: node_groups: the hostlists have 601 comma-separated terms, more than 512",
      "fold names into ranges"]),
    ("vendor-newline", BASE + 'catalog:\n  a100-80gb: {vendor: "nvidia\\nNodeName=evil"}\n',
     [":22:23: catalog.a100-80gb.vendor: 'nvidia\\nNodeName=evil' is not allowed: must match",
      "a node feature word"]),
    ("tiny-reference", BASE + "catalog:\n  a100-80gb: {device_memory: 1M, memory_bandwidth: 1MB/s}\n",
     [":22:14: catalog.a100-80gb: against reference a100-80gb, model", "at most 10000 units per device"]),
    ("cpus", BASE.replace("sockets: 2\n    cores_per_socket: 8\n    memory: 64GB",
                          "sockets: 64\n    cores_per_socket: 1024\n    threads_per_core: 8\n    memory: 64GB"),
     [":9:23: node_groups[0].cores_per_socket: sockets*cores_per_socket*threads_per_core = 524288 CPUs",
      "at most 65535"]),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in HOSTILE],
                         ids=[name for name, _, _ in HOSTILE])
def test_hostile_site_refused_in_bounds(tmp_path: Path, text: str | bytes, expected: list[str]) -> None:
    site = tmp_path / "site.yaml"
    if isinstance(text, bytes):
        site.write_bytes(text)
    else:
        site.write_text(text)
    code, out, cpu, rss = run_cli("site", "validate", str(site))
    assert code == 2, out
    assert "Traceback" not in out, out
    assert f"{site}:" in out, out  # the file, then line:column and the field path
    for part in expected:
        assert part in out, out
    assert cpu < CPU_BUDGET_S, f"{cpu:.1f} s of CPU"
    assert rss < RSS_BUDGET_MIB, f"{rss:.0f} MiB"


@pytest.mark.parametrize("case", ["nodes-1e9", "count-1e9", "billion-laughs", "python-tag"])
def test_render_refuses_and_writes_nothing(tmp_path: Path, case: str) -> None:
    text = next(t for name, t, _ in HOSTILE if name == case)
    site = tmp_path / "site.yaml"
    site.write_text(str(text))
    out = tmp_path / "out"
    code, output, cpu, rss = run_cli("conf", "render", str(site), "-o", str(out))
    assert code == 2, output
    assert f"{site}:" in output
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site.yaml"]
    assert cpu < CPU_BUDGET_S and rss < RSS_BUDGET_MIB


def test_device_files_are_read_with_a_cap(tmp_path: Path) -> None:
    link = tmp_path / "site.yaml"
    link.symlink_to("/dev/zero")
    code, out, cpu, rss = run_cli("site", "validate", str(link))
    assert code == 2 and "too large for a site file" in out, out
    assert cpu < CPU_BUDGET_S and rss < RSS_BUDGET_MIB


# --- in process: the loader's own bounds --------------------------------------------------------


def errors_of(text: str) -> list[str]:
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    return e.value.lines


def test_bomb_is_refused_before_it_grows() -> None:
    tracemalloc.start()
    try:
        t = time.process_time()
        lines = errors_of(BASE + _bomb(levels=30, width=30))
        took = time.process_time() - t
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == ["site.yaml:24:20: l3[2]: the document expands to more than 100000 values\n"
                     "    hint: at most 100000 scalars, lists and mappings, aliases (*name) counted as "
                     "what they repeat"]
    assert took < 5 and peak < 20 << 20, (took, peak)


def test_too_many_aliases() -> None:
    text = BASE + "x: [" + ",".join(f"&a{i} 1" for i in range(10_001)) + "]\n"
    text += "y: [" + ",".join(f"*a{i}" for i in range(10_001)) + "]\n"
    (line,) = errors_of(text)
    assert line.startswith("site.yaml:22:") and "y[10000]: more than 10000 aliases (*name)" in line


def test_a_legitimate_site_with_anchors_and_merge_keys_loads() -> None:
    text = BASE.replace("  - names: c[1-2]", "  - &cpu\n    names: c[1-2]") + (
        "  - {<<: *cpu, names: 'd[1-4]', memory: 128GB}\n")
    site = load_site_text(text, "site.yaml")
    assert [(g.names, g.memory_mib, g.cpus) for g in site.node_groups][-1] == ("d[1-4]", 131072, 16)


def test_a_site_at_the_limits_loads_and_renders_in_bounds(tmp_path: Path) -> None:
    text = (BASE.replace("c[1-2]", "c[1-50000]").replace("g[1-2]", "g[1-50000]")
            .replace("count: 4", "count: 64").replace("memory: 64GB", "memory: 1048575T"))
    site = tmp_path / "site.yaml"
    site.write_text(text)
    t = time.process_time()
    result = CliRunner().invoke(main, ["conf", "render", str(site), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert time.process_time() - t < CPU_BUDGET_S
    conf = (tmp_path / "out" / "slurm.conf").read_text()
    assert "NodeName=g[1-50000] " in conf and "Gres=gpu:a100-80gb:64 " in conf
    assert "RealMemory=1099510579200 " in conf
    assert len(load_site(site).all_nodes) == limits.MAX_NODES


def test_partition_folding_is_bounded(tmp_path: Path) -> None:
    """Names ClusterShell cannot fold (n0x0, n1x1, ...) cost time quadratic in their count
    each time a partition's node list is folded: at the limits, a render stays quick."""
    parts = ["p0", "p1", "p2", "p3"]
    text = "name: t\npartitions:\n" + "".join(f"  - {{name: {p}}}\n" for p in parts) + "node_groups:\n"
    for i in range(256):
        text += (f"  - {{names: 'n{2 * i}x{2 * i},n{2 * i + 1}x{2 * i + 1}', architecture: x86_64, "
                 f"sockets: 2, cores_per_socket: 8, memory: 64GB, partitions: [{', '.join(parts)}]}}\n")
    from slurm_hetero.conf import Profile, render_site

    t = time.process_time()
    files = render_site(load_site_text(text, "site.yaml"), Profile())
    assert time.process_time() - t < CPU_BUDGET_S
    assert "PartitionName=p3 Nodes=" in files["slurm.conf"]
    # One more partition for every group and the site is refused, before anything is folded.
    more = text.replace("partitions: [p0,", "partitions: [p4, p0,").replace(
        "  - {name: p3}\n", "  - {name: p3}\n  - {name: p4}\n")
    (line,) = errors_of(more)
    assert "node_groups: the partitions' node lists fold 2560 hostlist terms" in line
    assert "more than 2048" in line


def test_many_problems_are_cut_short() -> None:
    group = ("  - {{names: 'x{i}-[1-2]', architecture: x86_64, sockets: 2, cores_per_socket: 8, "
             "memory: 0, partitions: [cpu]}}\n")
    text = BASE + "".join(group.format(i=i) for i in range(150))
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    assert len(e.value.lines) == 150
    report = str(e.value).splitlines()
    assert report[0] == "site.yaml: 150 problems"
    assert report[-1] == "site.yaml: ... and 50 more problems"
    assert "node_groups[2].memory: size 0 is out of range: must be at least 1 MiB" in report[1]


def test_schema_errors_stop_being_collected() -> None:
    text = BASE.replace("partitions: [cpu]", "partitions: [cpu]\n    features: [" + ",".join(['"!"'] * 5000) + "]")
    lines = errors_of(text)
    assert len(lines) == limits.MAX_SCHEMA_PROBLEMS + 1
    assert "node_groups[0].features: 5000 items are too many: at most 64" in lines[0]
    assert lines[-1] == ("site.yaml:1:1: (top level): more problems not listed: checking stopped after 1000\n"
                         "    hint: fix these and validate again")


@pytest.mark.parametrize(("text", "expected"), [
    (BASE + "1: x\n", "site.yaml:21:1: 1: key '1' is not a string"),
    (BASE + "? [a, b]\n: c\n", "site.yaml:21:3: <key>: key (a list or mapping) is not a string"),
    (BASE + "description: !!binary aGk=\n", "site.yaml:21:14: description: YAML tag '!!binary' is not allowed"),
    (BASE + "description: !!set {a}\n", "site.yaml:21:14: description: YAML tag '!!set' is not allowed"),
    (BASE + "description: !local x\n", "site.yaml:21:14: description: YAML tag '!local' is not allowed"),
    (BASE + "description: !!int abc\n",
     "site.yaml:21:14: description: cannot read 'abc': invalid literal for int() with base 10: 'abc'"),
    (BASE.replace("name: t\n", "name: t\ndescription: 2024-13-45\n"),
     "site.yaml:2:14: description: cannot read '2024-13-45': month must be in 1..12"),
    (BASE + "normalization: {weights: {tensor: .nan}}\n",
     "site.yaml:21:35: normalization.weights.tensor: '.nan' is not a finite number"),
    (BASE + "---\nname: u\n",
     "site.yaml:21:1: not valid YAML: expected a single document in the stream, but found another document"),
    (BASE.replace("c[1-2]", "c[1-" + "9" * 30 + "]"),
     "site.yaml:6:12: node_groups[0].names: bad hostlist 'c[1-999999999999999999999999999999]': number "
     "'999999999999999999999999999999' is too long (at most 18 digits)"),
    (BASE.replace("c[1-2]", "'@all'"),
     "site.yaml:6:12: node_groups[0].names: '@all' is not allowed: must match"),
    (BASE + "catalog:\n  a100-80gb: {device_memory: 0}\n",
     "site.yaml:22:30: catalog.a100-80gb.device_memory: size 0 is out of range: must be at least 1 MiB"),
    (BASE + "catalog:\n  a100-80gb: {memory_bandwidth: 0}\n",
     "site.yaml:22:33: catalog.a100-80gb.memory_bandwidth: bandwidth 0 is out of range: must be above 0 "
     "and at most 1000TB/s"),
    (BASE + "catalog:\n  a100-80gb: {fp16_tflops: null, bf16_tflops: null, fp32_tflops: null}\n",
     "site.yaml:22:14: catalog.a100-80gb: model 'a100-80gb' has no fp16, bf16 or fp32 throughput"),
    (BASE + "energy_policies:\n  - {name: efficiency, gpu_power_cap: lots}\n  - {name: balanced}\n",
     "site.yaml:22:39: energy_policies[0].gpu_power_cap: 'lots' is not allowed: must match"),
    (BASE + 'containers: {images_root: "/srv/\\nimages"}\n',
     "site.yaml:21:27: containers.images_root: '/srv/\\nimages' is not allowed: must match"),
    (BASE + "description: " + "x" * 5000 + "\n",
     "site.yaml:21:14: description: '" + "x" * 58 + "… is too long (5000 characters): at most 4096"),
    (BASE.replace("name: t", 'name: "t\\n"'),  # Python's `$` matches before a final newline
     "site.yaml:1:7: name: 't\\n' is not allowed: must match ^[a-z][a-z0-9_]{0,39}$"),
    (BASE.replace("partitions: [cpu]", 'partitions: [cpu]\n    features: ["ib\\nNodeName=x"]'),
     "site.yaml:12:16: node_groups[0].features[0]: 'ib\\nNodeName=x' is not allowed: must match"),
], ids=["int-key", "list-key", "binary", "set", "local-tag", "bad-int", "bad-date", "nan", "two-docs",
        "long-range", "group-resolver", "zero-device-memory", "zero-bandwidth", "no-tflops", "power-cap",
        "newline-path", "long-description", "newline-name", "newline-feature"])
def test_odd_yaml_is_located(text: str, expected: str) -> None:
    lines = errors_of(text)
    assert len(lines) == 1, lines
    assert lines[0].startswith(expected), lines[0]


def test_zero_device_memory_does_not_divide_by_zero() -> None:
    # The reference model's memory is a divisor of every model's units: 0 must be refused
    # (above) and a broken reference must not also be "unknown" or crash normalization.
    for fields in ("device_memory: 0", "memory_bandwidth: 0GB/s", "device_memory: 0, memory_bandwidth: 0"):
        lines = errors_of(BASE + f"catalog:\n  a100-80gb: {{{fields}}}\n")
        assert len(lines) == 1 and ": catalog.a100-80gb." in lines[0], lines
        assert "out of range" in lines[0], lines


# --- the pieces ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("expr", "terms"), [
    ("gpu[001-128]", 1), ("a100-[01-02],h100-01", 2), ("r[1-4]n[01-32]", 1), ("x[1-2]-[3-4]", 1),
    ("c[1-3,7,9-10]", 1), ("a[1-3,2-4]", 1), ("login", 1), ("a,b,c", 3), ("n[0-10],m[1-2]", 2),
    ("[1-3]", 1), ("a[009-010]", 1), ("cpu-x86-[01-02]", 1),
])
def test_hostlist_size_bounds_clustershell(expr: str, terms: int) -> None:
    nodes, counted = hostlist_size(expr)
    assert nodes >= len(NodeSet(expr)) and counted == terms


@pytest.mark.parametrize(("expr", "message"), [
    ("c[2-1", "'[' at character 2 is not closed"),
    ("c]", "']' at character 2 closes nothing"),
    ("c[1-[2]]", "'[' at character 5 inside another '['"),
    ("a,,b", "empty name at character 3"),
    ("a,", "empty name at the end"),
    ("c[5-1]", "range '5-1' goes down"),
    ("c[]", "empty range"),
    ("c[1-x]", "'x' is not a number"),
])
def test_hostlist_size_refuses(expr: str, message: str) -> None:
    with pytest.raises(HostlistError, match=message.replace("[", r"\[").replace("]", r"\]")):
        hostlist_size(expr)


def test_hostlist_size_is_linear_and_saturates() -> None:
    t = time.process_time()
    nodes, terms = hostlist_size("c" + "[1-99999]" * 7000)
    assert (nodes, terms) == (limits.MAX_NODES + 1, 1)
    nodes, terms = hostlist_size(",".join(f"n{i}" for i in range(10_000)))
    assert (nodes, terms) == (10_000, 10_000)
    assert time.process_time() - t < 2


@pytest.mark.parametrize(("text", "mib"), [("80GB", 81920), ("512M", 512), ("1T", 1 << 20),
                                           (1023, 1023), ("1048575T", (1 << 40) - (1 << 20))])
def test_sizes_in_range(text: str | int, mib: int) -> None:
    assert parse_size_mib(text) == mib


@pytest.mark.parametrize("text", ["1048576T", "1024P", "9" * 60 + "P", 1 << 40, -1, "x" * 65])
def test_sizes_out_of_range(text: str | int) -> None:
    with pytest.raises(ValueError, match=r"out of range|too long|cannot parse"):
        parse_size_mib(text)


@pytest.mark.parametrize("text", ["1001TB/s", float("inf"), float("nan"), -1, "9" * 70 + "GB/s"])
def test_bandwidths_out_of_range(text: str | float) -> None:
    with pytest.raises(ValueError, match=r"out of range|too long"):
        parse_bandwidth_gbs(text)
    assert parse_bandwidth_gbs("1000TB/s") == 1e6
    with pytest.raises(ValueError, match="above 0"):
        parse_bandwidth_gbs("0GB/s", positive=True)


def _walk(schema: Any) -> list[dict[str, Any]]:
    out = []
    if isinstance(schema, dict):
        out.append(schema)
        for v in schema.values():
            out += _walk(v)
    elif isinstance(schema, list):
        for v in schema:
            out += _walk(v)
    return out


def test_schema_and_limits_agree() -> None:
    schema = json.loads(resources.files("slurm_hetero.site").joinpath("schema.json").read_text())
    defs, props = schema["$defs"], schema["properties"]
    group = defs["node_group"]["properties"]
    assert defs["accelerator"]["properties"]["count"]["maximum"] == limits.MAX_DEVICES_PER_NODE
    assert props["node_groups"]["maxItems"] == limits.MAX_NODE_GROUPS
    assert group["cpus"]["maximum"] == limits.MAX_CPUS_PER_NODE
    assert group["names"]["maxLength"] == limits.MAX_SCALAR_CHARS
    assert defs["size"]["exclusiveMaximum"] == limits.MAX_SIZE_MIB
    assert defs["bandwidth"]["maximum"] == limits.MAX_BANDWIDTH_GBS
    # Every string the schema accepts is bounded, by its own length, a pattern, or an enum.
    for node in _walk(schema):
        if node.get("type") == "string" or node.get("type") == ["string", "number"]:
            assert "maxLength" in node or "{" in node.get("pattern", "") or "enum" in node, node
        if node.get("type") == "array":
            assert "maxItems" in node, node
        if node.get("type") == "object" and "additionalProperties" in node and \
                isinstance(node["additionalProperties"], dict):
            assert "maxProperties" in node or "propertyNames" in node, node
