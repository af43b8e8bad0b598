"""What the node agent and the monitor do on a real NVIDIA GPU, through the code they run.

    python benchmarks/device_check.py [--index 0] [--seconds 6]

Run by benchmarks/device_check.sh on a lent device machine (root, PyTorch and nvidia-ml-py
there). Each line says what was checked and the figure it saw; a line starting `FAIL` is a
check that did not hold, `NOT APPLIED` a control the driver refused (the agent logs those
and goes on), and the exit status is 1 when any check failed.

  - inventory: the device layer's DeviceInfo, and the catalog id `node probe` would give it;
  - metering: NVML's energy counter over a loaded interval against the integral of the
    power readings sampled at 20 Hz (the agent's per-job energy is that counter's delta),
    and the driver's utilisation samples (the agent's mean utilisation) under load;
  - controls: each default policy applied with the agent's apply_policy, read back through
    NVML (enforced power limit, SM clock under load), then reset and read back again;
  - monitor: read_status (the exporter's per-device gauges) before and after a change.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from collections.abc import Callable

from slurm_hetero.energy.agent import apply_policy
from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, DeviceLayer
from slurm_hetero.energy.probe import match_model
from slurm_hetero.monitor.status import read_status
from slurm_hetero.site.catalog import builtin_catalog_data, model_from_fields
from slurm_hetero.site.policies import DEFAULT_POLICIES

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def gpu_load() -> Callable[[float], None]:
    """Runs bf16 matrix products for about `seconds` (the GPU busy all the while)."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def run(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    run(0.5)  # kernels loaded, clocks up
    return run


def sampled(fn: Callable[[], float], during: Callable[[], None],
            hz: float = 20.0) -> list[tuple[float, float]]:
    """(monotonic time, fn()) sampled at hz while `during` runs in this thread."""
    out: list[tuple[float, float]] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            out.append((time.monotonic(), fn()))
            stop.wait(1 / hz)

    t = threading.Thread(target=loop)
    t.start()
    try:
        during()
    finally:
        stop.set()
        t.join()
    return out


def integral(samples: list[tuple[float, float]]) -> float:
    return sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in itertools.pairwise(samples))


def metering(dev: DeviceLayer, index: int, load: Callable[[float], None], seconds: float) -> None:
    r0 = dev.read(index)
    samples = sampled(lambda: dev.read(index).power_w, lambda: load(seconds))
    r1 = dev.read(index)
    if r0.energy_j is None or r1.energy_j is None:
        check(False, "metering: NVML has no total-energy counter on this device")
        return
    counted = r1.energy_j - r0.energy_j
    integrated = integral(samples)
    span = samples[-1][0] - samples[0][0]
    mean_w = integrated / span if span else 0.0
    print(f"      {seconds:g} s of matrix products: counter {counted:.0f} J, power integral "
          f"{integrated:.0f} J over {span:.2f} s (mean {mean_w:.0f} W, {len(samples)} samples)")
    # The counter spans the whole interval, the samples the load only; the rest is reading lag.
    check(counted > 0 and abs(counted - integrated) / counted < 0.15,
          f"metering: energy counter {counted:.0f} J within 15% of the sampled power integral "
          f"{integrated:.0f} J (ratio {integrated / counted if counted else float('nan'):.3f})")
    util = dev.mean_util(index, r0.timestamp)
    print(f"      driver utilisation samples since the start: {util}")
    check(util is not None and util > 0.8,
          f"metering: mean utilisation from the driver's samples under load {util} > 0.8")


def clock_under_load(index: int, load: Callable[[float], None]) -> float:
    import pynvml

    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    samples = sampled(lambda: float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                      lambda: load(2.0))
    values = sorted(v for _, v in samples[len(samples) // 4:])  # past the ramp
    return values[len(values) // 2]


def enforced_w(index: int) -> float:
    import pynvml

    return float(pynvml.nvmlDeviceGetEnforcedPowerLimit(pynvml.nvmlDeviceGetHandleByIndex(index))) / 1000


def settle(index: int, watts: float, within: float = 10.0) -> tuple[float, float]:
    """(enforced limit, seconds until it read `watts`): the driver applies a new limit after
    the call returns (seen on an H200: the old limit read back at once)."""
    t0 = time.monotonic()
    while True:
        limit = enforced_w(index)
        took = time.monotonic() - t0
        if abs(limit - watts) <= 1.0 or took > within:
            return limit, took
        time.sleep(0.05)


def controls(dev: DeviceLayer, info: DeviceInfo, load: Callable[[float], None]) -> None:
    i = info.index
    base_clock = clock_under_load(i, load)
    print(f"      defaults: enforced limit {enforced_w(i):.0f} W, SM clock under load {base_clock:.0f} MHz")
    for p in DEFAULT_POLICIES:
        if p.name == "auto":
            continue
        _reset(dev, i)
        applied = apply_policy(dev, "gpu", i, p, info.power_default_w)
        cap = p.power_cap_watts(info.power_default_w)
        wanted = (["cap"] if cap else []) + (["clocks"] if p.gpu_freq else [])
        refused = [w for w in wanted if not any(a.startswith(w) for a in applied)]
        limit, took = settle(i, cap or info.power_default_w)
        clock = clock_under_load(i, load)
        print(f"      {p.name}: applied {applied or 'nothing'}"
              + (f", NOT APPLIED: {refused}" if refused else "")
              + f"; enforced limit {limit:.0f} W after {took:.2f} s, SM clock under load {clock:.0f} MHz")
        if cap and "cap" not in refused:
            check(abs(limit - cap) <= 1.0, f"controls: {p.name} cap {cap:.0f} W enforced within 10 s "
                  f"({limit:.0f} W after {took:.2f} s)")
        if p.gpu_freq == "medium" and "clocks" not in refused:
            check(clock < base_clock - 50, f"controls: {p.name} clocks 'medium' lower the SM clock under "
                  f"load ({clock:.0f} < {base_clock:.0f} MHz)")
        st = read_status(dev, info)
        if cap and "cap" not in refused:
            shown = st.power_limit_w
            check(st.non_default is True and shown is not None and abs(shown - cap) <= 1.0,
                  f"monitor: {p.name} shows power limit {shown} W and non_default={st.non_default}")
    _reset(dev, i)
    limit, took = settle(i, info.power_default_w)
    clock = clock_under_load(i, load)
    check(abs(limit - info.power_default_w) <= 1.0,
          f"controls: reset restores the default limit {info.power_default_w:g} W "
          f"({limit:.0f} W after {took:.2f} s)")
    check(clock >= base_clock - 50, f"controls: reset restores the SM clock under load ({clock:.0f} MHz)")
    check(read_status(dev, info).non_default is False, "monitor: non_default is False after the reset")


def _reset(dev: DeviceLayer, index: int) -> None:
    try:
        dev.reset(index)
    except ControlUnsupported as e:
        print(f"      reset: NOT APPLIED: {e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=6.0, help="length of the metering run")
    args = ap.parse_args()
    dev = open_devices("nvml")
    infos = {d.index: d for d in dev.devices()}
    check(args.index in infos, f"inventory: NVML device {args.index} "
          f"(layer says: {infos.get(args.index) or getattr(dev, 'why', 'no devices')})")
    if args.index not in infos:
        return 1
    info = infos[args.index]
    catalog = {k: model_from_fields(k, v) for k, v in builtin_catalog_data().items()}
    model = match_model(info.name, info.memory_mib, catalog)
    check(model is not None, f"inventory: {info.name!r} with {info.memory_mib} MiB is catalog model {model}")
    check(info.power_default_w > 0 and info.power_min_w < info.power_default_w <= info.power_max_w,
          f"inventory: power default {info.power_default_w:g} W "
          f"in range {info.power_min_w:g}-{info.power_max_w:g} W")
    st = read_status(dev, info)
    print(f"      monitor status at rest: {st}")
    check(st.temperature_c is not None and st.power_limit_w is not None,
          "monitor: temperature and limit read")
    load = gpu_load()
    try:
        metering(dev, args.index, load, args.seconds)
        controls(dev, info, load)
    finally:
        _reset(dev, args.index)
    print(f"{len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
