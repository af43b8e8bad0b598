"""Energy and time of a compute-bound and a memory-bound workload under each energy policy,
through the same device layer the node agent uses (NVML on a real NVIDIA GPU).

    python benchmarks/gpu_energy.py                       # real GPU 0, PyTorch or CuPy
    python benchmarks/gpu_energy.py --sweep               # also caps and clocks around the defaults
    python benchmarks/gpu_energy.py --devices fake:/tmp/f.json --stand-in   # no GPU: CPU stand-in

Each workload does a fixed amount of work (not a fixed time), sized once under
`performance` to take about --seconds, so a slower clock shows as more time. Energy comes
from NVML's total-energy counter. Prints what each policy could apply, then time, energy
and both as ratios to `performance`. Target: >= 20% less energy at < 5% slowdown on the
memory-bound workload under `efficiency`. Needs root on a real GPU (power limits, locked
clocks); a control the driver refuses is listed as not applied.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from slurm_hetero.energy.agent import apply_policy
from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.devices import ControlUnsupported, DeviceLayer
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.site.policies import DEFAULT_POLICIES, EnergyPolicy

Chunk = Callable[[int], None]  # runs n units of work and waits for the device


def gpu_workloads() -> tuple[str, dict[str, Chunk]]:
    """(library, {name: n -> run n units}) on the GPU with PyTorch, else CuPy.
    compute-bound: 8192^3 bf16 matrix products; memory-bound: a 4 GiB in-place scale
    (8 GiB moved per unit, no reuse in any cache)."""
    try:
        import torch

        dev = torch.device("cuda")
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        big = torch.ones(2**30, dtype=torch.float32, device=dev)

        def compute(n: int) -> None:
            for _ in range(n):
                a @ a
            torch.cuda.synchronize()

        def memory(n: int) -> None:
            for _ in range(n):
                big.mul_(1.0000001)
            torch.cuda.synchronize()

        return "torch", {"compute-bound": compute, "memory-bound": memory}
    except ImportError:
        import cupy as cp

        a = cp.random.randn(8192, 8192).astype(cp.float16)
        big = cp.ones(2**30, dtype=cp.float32)

        def compute_cp(n: int) -> None:
            for _ in range(n):
                a @ a
            cp.cuda.Device().synchronize()

        def memory_cp(n: int) -> None:
            for _ in range(n):
                cp.multiply(big, 1.0000001, out=big)
            cp.cuda.Device().synchronize()

        return "cupy", {"compute-bound": compute_cp, "memory-bound": memory_cp}


def cpu_stand_in() -> tuple[str, dict[str, Chunk]]:
    """Exercises the measuring code on a machine without a GPU (figures mean nothing)."""
    import numpy as np

    a = np.random.rand(300, 300)
    big = np.ones(2_000_000)

    def compute(n: int) -> None:
        for _ in range(n):
            a @ a

    def memory(n: int) -> None:
        for _ in range(n):
            big.__imul__(1.0000001)

    return "numpy (CPU stand-in)", {"compute-bound": compute, "memory-bound": memory}


def size(run: Chunk, seconds: float) -> int:
    """Units of work that take about `seconds` at the current settings."""
    run(2)  # warm-up: kernels compiled, clocks up
    n = 1
    while True:
        t0 = time.perf_counter()
        run(n)
        took = time.perf_counter() - t0
        if took >= min(0.5, seconds):
            return max(1, round(n * seconds / took))
        n *= 4


def measure(dev: DeviceLayer, index: int, run: Chunk, n: int) -> tuple[float, float]:
    run(max(1, n // 10))  # warm-up at the policy's settings
    e0, t0 = dev.read(index).energy_j, time.perf_counter()
    run(n)
    t1, e1 = time.perf_counter(), dev.read(index).energy_j
    if e0 is None or e1 is None:
        raise SystemExit("this device has no energy counter")
    return t1 - t0, e1 - e0


# --sweep: points around the defaults, to calibrate them on the hardware at hand.
SWEEP = (
    EnergyPolicy("cap50", gpu_power_cap="50%"),
    EnergyPolicy("cap70", gpu_power_cap="70%"),
    EnergyPolicy("clk-medium", gpu_freq="medium"),
    EnergyPolicy("clk-1400", gpu_freq="1400"),
    EnergyPolicy("clk-1100+cap60", gpu_freq="1100", gpu_power_cap="60%"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="nvml")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one measured run under performance")
    ap.add_argument("--sweep", action="store_true", help="also measure caps and clocks around the defaults")
    ap.add_argument("--point", action="append", default=[], metavar="NAME:CLOCK:CAP",
                    help="one more policy to measure: a GPU clock level or MHz and a power cap "
                         "(W or %%), either empty, e.g. clk1300-cap50:1300:50%%")
    ap.add_argument("--only-points", action="store_true", help="performance and the --point policies only")
    ap.add_argument("--stand-in", action="store_true", help="CPU workloads (no GPU): tests the script")
    args = ap.parse_args()
    try:
        points = [point(text) for text in args.point]
    except ValueError as e:
        ap.error(str(e))
    if args.devices.startswith("fake:") and not Path(args.devices[5:]).exists():
        FakeDevices.create(args.devices[5:], "gpu", 1, "fake", default_w=700)
    dev = open_devices(args.devices)
    infos = {d.index: d for d in dev.devices()}
    if args.index not in infos:
        raise SystemExit(f"no device {args.index} through {args.devices}")
    info = infos[args.index]
    lib, workloads = cpu_stand_in() if args.stand_in else gpu_workloads()
    print(f"device {args.index}: {info.name} (default limit {info.power_default_w:g} W, "
          f"range {info.power_min_w:g}-{info.power_max_w:g} W, clocks {info.clocks_mhz}), "
          f"workloads: {lib}, layer: {dev.name}", flush=True)
    defaults = [p for p in DEFAULT_POLICIES
                if p.name == "performance" or (not args.only_points and p.name != "auto")]
    policies = defaults + (list(SWEEP) if args.sweep else []) + points
    results: dict[tuple[str, str], tuple[float, float]] = {}
    try:
        _reset(dev, args.index)
        units = {name: size(run, args.seconds) for name, run in workloads.items()}
        print(f"  units per run: {units}", flush=True)
        for policy in policies:
            _reset(dev, args.index)
            applied = apply_policy(dev, "gpu", args.index, policy, info.power_default_w)
            wanted = (["cap"] if policy.gpu_power_cap else []) + (["clocks"] if policy.gpu_freq else [])
            missing = [w for w in wanted if not any(a.startswith(w) for a in applied)]
            print(f"  {policy.name}: {', '.join(applied) or 'defaults'}"
                  + (f" (NOT applied: {', '.join(missing)})" if missing else ""), flush=True)
            for name, run in workloads.items():
                results[(policy.name, name)] = measure(dev, args.index, run, units[name])
    finally:
        _reset(dev, args.index)
    print(f"{'policy':<12} {'workload':<14} {'time s':>8} {'energy J':>10} {'time/perf':>10} "
          f"{'energy/perf':>12}")
    for (policy, name), (secs, joules) in results.items():
        base_s, base_j = results[("performance", name)]
        print(f"{policy:<12} {name:<14} {secs:8.2f} {joules:10.1f} {secs / base_s:10.3f} "
              f"{joules / base_j if base_j else float('nan'):12.3f}")


def point(text: str) -> EnergyPolicy:
    """NAME:CLOCK:CAP (--point) as a policy."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"--point {text!r}: use NAME:CLOCK:CAP, e.g. clk1300-cap50:1300:50%")
    return EnergyPolicy(parts[0], gpu_freq=parts[1] or None, gpu_power_cap=parts[2] or None)


def _reset(dev: DeviceLayer, index: int) -> None:
    try:
        dev.reset(index)
    except ControlUnsupported as e:  # e.g. a driver that refuses clock locks in a VM
        print(f"  reset: {e}")


if __name__ == "__main__":
    main()
