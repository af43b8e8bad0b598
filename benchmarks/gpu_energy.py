"""Energy and time of a compute-bound and a memory-bound workload under each energy policy,
through the same device layer the node agent uses (NVML on a real NVIDIA GPU).

    python benchmarks/gpu_energy.py                       # real GPU 0, PyTorch or CuPy
    python benchmarks/gpu_energy.py --devices fake:/tmp/f.json --stand-in   # no GPU: CPU stand-in

Each workload does a fixed amount of work (not a fixed time), so a slower clock shows as
more time. Energy comes from NVML's total-energy counter. Prints time, energy and both as
ratios to `performance`. Target: >= 20% less energy at < 5% slowdown on the memory-bound
workload under `efficiency`. Needs root on a real GPU (power limits, locked clocks).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from slurm_hetero.energy.agent import apply_policy
from slurm_hetero.energy.devices import DeviceLayer, open_devices
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.energy.policies import DEFAULT_POLICIES


def gpu_workloads(scale: float) -> tuple[str, dict[str, Callable[[], None]]]:
    """(library, {name: one run}) on the GPU with PyTorch, else CuPy."""
    try:
        import torch

        dev = torch.device("cuda")
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        big = torch.empty(int(2**30 * scale), dtype=torch.float32, device=dev)  # 4 GiB at scale 1

        def compute() -> None:
            for _ in range(int(200 * scale)):
                a @ a
            torch.cuda.synchronize()

        def memory() -> None:
            for _ in range(int(60 * scale)):
                big.mul_(1.0001)
            torch.cuda.synchronize()

        return "torch", {"compute-bound": compute, "memory-bound": memory}
    except ImportError:
        import cupy as cp

        a = cp.random.randn(8192, 8192).astype(cp.float16)
        big = cp.empty(int(2**30 * scale), dtype=cp.float32)

        def compute_cp() -> None:
            for _ in range(int(200 * scale)):
                a @ a
            cp.cuda.Device().synchronize()

        def memory_cp() -> None:
            for _ in range(int(60 * scale)):
                cp.multiply(big, 1.0001, out=big)
            cp.cuda.Device().synchronize()

        return "cupy", {"compute-bound": compute_cp, "memory-bound": memory_cp}


def cpu_stand_in(scale: float) -> tuple[str, dict[str, Callable[[], None]]]:
    """Exercises the measuring code on a machine without a GPU (figures mean nothing)."""
    import numpy as np

    a = np.random.rand(400, 400)
    big = np.ones(int(4_000_000 * scale))

    def compute() -> None:
        for _ in range(int(20 * scale)):
            a @ a

    def memory() -> None:
        for _ in range(int(20 * scale)):
            big.__imul__(1.0001)

    return "numpy (CPU stand-in)", {"compute-bound": compute, "memory-bound": memory}


def measure(dev: DeviceLayer, index: int, run: Callable[[], None]) -> tuple[float, float]:
    run()  # warm-up at the policy's settings
    e0, t0 = dev.read(index).energy_j, time.perf_counter()
    run()
    t1, e1 = time.perf_counter(), dev.read(index).energy_j
    if e0 is None or e1 is None:
        raise SystemExit("this device has no energy counter")
    return t1 - t0, e1 - e0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="nvml")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="work per run (1.0: a few seconds on an H100)")
    ap.add_argument("--stand-in", action="store_true", help="CPU workloads (no GPU): tests the script")
    args = ap.parse_args()
    if args.devices.startswith("fake:") and not Path(args.devices[5:]).exists():
        FakeDevices.create(args.devices[5:], "gpu", 1, "fake", default_w=700)
    dev = open_devices(args.devices)
    infos = {d.index: d for d in dev.devices()}
    if args.index not in infos:
        raise SystemExit(f"no device {args.index} through {args.devices}")
    info = infos[args.index]
    lib, workloads = cpu_stand_in(args.scale) if args.stand_in else gpu_workloads(args.scale)
    print(f"device {args.index}: {info.name} (default limit {info.power_default_w:g} W), "
          f"workloads: {lib}, layer: {dev.name}")
    results: dict[tuple[str, str], tuple[float, float]] = {}
    try:
        for policy in [p for p in DEFAULT_POLICIES if p.name != "auto"]:
            dev.reset(args.index)
            applied = apply_policy(dev, "gpu", args.index, policy, info.power_default_w)
            print(f"  {policy.name}: {', '.join(applied) or 'defaults'}")
            for name, run in workloads.items():
                results[(policy.name, name)] = measure(dev, args.index, run)
    finally:
        dev.reset(args.index)
    print(f"{'policy':<12} {'workload':<14} {'time s':>8} {'energy J':>10} {'time/perf':>10} "
          f"{'energy/perf':>12}")
    for (policy, name), (secs, joules) in results.items():
        base_s, base_j = results[("performance", name)]
        print(f"{policy:<12} {name:<14} {secs:8.2f} {joules:10.1f} {secs / base_s:10.3f} "
              f"{joules / base_j if base_j else float('nan'):12.3f}")


if __name__ == "__main__":
    main()
