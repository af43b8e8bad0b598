"""`conf render` on a generated 10,000-node site: seconds and slurm.conf line count.

Targets (issue: foundation): under 2 s, slurm.conf under 200 lines thanks to hostlist
folding. Prints the figures; asserts nothing (machines are noisy).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from slurm_hetero.conf import render_site, write_files
from slurm_hetero.site import load_site_text

KINDS = [  # (prefix, arch, accelerator model or None, count per node)
    ("cx", "x86_64", None, 0), ("ca", "aarch64", None, 0), ("a8", "x86_64", "a100-80gb", 4),
    ("a4", "x86_64", "a100-40gb", 8), ("h", "x86_64", "h100", 8), ("hh", "x86_64", "h200", 8),
    ("l", "x86_64", "l40s", 4), ("gh", "aarch64", "gh200", 1), ("mi", "x86_64", "mi300x", 8),
    ("mx", "x86_64", "mi250x", 4), ("n", "aarch64", "ascend-910b", 8), ("np", "aarch64", "ascend-310p", 4),
    ("v", "x86_64", "v100", 4),
]


def big_site(nodes: int = 10_000, groups: int = 40) -> str:
    per = nodes // groups
    site: dict[str, object] = {"name": "big", "partitions": [
        {"name": "cpu", "default": True}, {"name": "gpu"}, {"name": "npu"}]}
    ngroups = []
    for i in range(groups):
        prefix, arch, model, count = KINDS[i % len(KINDS)]
        g: dict[str, object] = {
            "names": f"{prefix}{i:02d}n[{0:05d}-{per - 1:05d}]", "architecture": arch, "sockets": 2,
            "cores_per_socket": 32, "memory": "512GB", "memory_bandwidth": "400GB/s",
            "partitions": ["cpu" if model is None else ("npu" if "ascend" in model else "gpu")]}
        if model:
            g["accelerators"] = [{"model": model, "count": count}]
        ngroups.append(g)
    site["node_groups"] = ngroups
    return yaml.safe_dump(site)


def main() -> None:
    text = big_site()
    times, lines = [], 0
    for _ in range(5):
        t0 = time.perf_counter()
        site = load_site_text(text, "big.yaml")
        files = render_site(site)
        with tempfile.TemporaryDirectory() as d:
            write_files(files, Path(d) / "conf")
        times.append(time.perf_counter() - t0)
        lines = files["slurm.conf"].count("\n")
    print(f"nodes: {len(site.all_nodes)}  node groups: {len(site.node_groups)}")
    print(f"validate+render+write: median {statistics.median(times):.3f} s, "
          f"max {max(times):.3f} s over {len(times)} runs (target < 2 s)")
    print(f"slurm.conf lines: {lines} (target < 200); gres.conf lines: "
          f"{files['gres.conf'].count(chr(10))}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
