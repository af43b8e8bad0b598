"""Named energy policies: what each sets through Slurm and what the node agent applies.

Slurm carries the CPU governor as a flag word (slurm.h CPU_FREQ_*) and GPU clocks as a
`tres_freq` string (`gpu:low|medium|high|highm1|<MHz>`); the bridge sets those at submit.
Power caps and NPU power modes have no Slurm knob: the node agent applies them in Prolog.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# slurm.h: CPU_FREQ_* governor flags (stable since 15.08, unchanged through 24.11).
CPU_GOVERNORS = {
    "conservative": 0x88000000,
    "ondemand": 0x84000000,
    "performance": 0x82000000,
    "powersave": 0x81000000,
    "userspace": 0x80800000,
    "schedutil": 0x80400000,
}
_CAP = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|W)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class EnergyPolicy:
    name: str
    cpu_governor: str | None = None
    gpu_freq: str | None = None  # Slurm --gpu-freq value: a level or MHz
    gpu_power_cap: str | None = None  # "250W" or "60%" of the device's default limit
    npu_power_mode: str | None = None
    description: str = ""

    @property
    def cpu_freq_gov(self) -> int | None:
        return CPU_GOVERNORS[self.cpu_governor] if self.cpu_governor else None

    def power_cap_watts(self, default_w: float) -> float | None:
        """The cap for a device whose default limit is default_w (None: leave it)."""
        if not self.gpu_power_cap:
            return None
        value, unit = parse_power_cap(self.gpu_power_cap)
        return round(default_w * value / 100, 1) if unit == "%" else value


def parse_power_cap(text: str) -> tuple[float, str]:
    """`250W` → (250.0, "W"); `60%` → (60.0, "%").

    >>> parse_power_cap("60%")
    (60.0, '%')
    """
    m = _CAP.match(text)
    if not m:
        raise ValueError(f"cannot parse power cap {text!r}: use watts (250W) or a share of the default (60%)")
    value, unit = float(m.group(1)), m.group(2).upper()
    if unit == "%" and not 0 < value <= 100:
        raise ValueError(f"power cap {text!r}: a share must be above 0% and at most 100%")
    return value, unit


# GPU clocks: "low" is the lowest clock the part supports (a fraction of its maximum), far
# below where memory-bound kernels stop losing speed, so efficiency locks at the middle of
# the range and relies on the cap; balanced leaves clocks to the driver and trims only the
# top of the power range, where compute-bound work gains least per watt. These defaults are
# reasoned from published measurements, not yet from ours: benchmarks/gpu_energy.py checks
# them on a real GPU.
DEFAULT_POLICIES: tuple[EnergyPolicy, ...] = (
    EnergyPolicy("performance", "performance", "high", None, "high", "highest clocks, no cap"),
    EnergyPolicy("balanced", "schedutil", None, "85%", "normal",
                 "clocks follow load, power capped at 85% of the default limit"),
    EnergyPolicy("efficiency", "powersave", "medium", "60%", "low",
                 "GPU clocks at most mid-range and a 60% power cap: less energy for memory- or "
                 "input-bound work"),
    # `auto` is resolved per job by the node agent from the job's own history (see AutoRule);
    # until then the bridge applies balanced's Slurm settings.
    EnergyPolicy("auto", "schedutil", None, None, "normal",
                 "efficiency for jobs whose history shows low accelerator use or power draw, "
                 "else balanced"),
)


@dataclass(frozen=True)
class AutoRule:
    """`auto` → efficiency when the same user's jobs of the same name, over their last
    `window` metered runs (at least `min_jobs`), kept the accelerators under `util_below`
    busy on average (input-bound work, small models) or drew under `power_below` of the
    devices' default power limit (memory-bound kernels keep the units busy at low power);
    both lose little at lower clocks. Otherwise balanced. `power_below` stays under
    efficiency's cap, so a compute-bound job held at that cap reads above it and goes back
    to balanced next time.

    >>> AutoRule().choose([(0.9, 0.4), (0.95, 0.44)])
    ('efficiency', 'mean power 0.42 of the limit < 0.5 over 2 runs')
    """

    util_below: float = 0.5
    power_below: float = 0.5
    min_jobs: int = 2
    window: int = 5

    def choose(self, runs: Iterable[tuple[float | None, float | None]]) -> tuple[str, str]:
        """runs: (mean utilisation, mean power / default limit) of past runs, oldest first; None
        where a run's backend did not measure it."""
        recent = [r for r in runs if r[0] is not None or r[1] is not None][-self.window:]
        if len(recent) < self.min_jobs:
            return "balanced", f"{len(recent)} past runs < {self.min_jobs}: balanced"
        seen = []
        for i, (label, below) in enumerate((("mean accelerator use", self.util_below),
                                            ("mean power", self.power_below))):
            values = [float(v) for v in (r[i] for r in recent) if v is not None]
            if len(values) < self.min_jobs:
                continue
            mean = sum(values) / len(values)
            of = " of the limit" if i else ""
            if mean < below:
                return "efficiency", f"{label} {mean:.2f}{of} < {below} over {len(values)} runs"
            seen.append(f"{label} {mean:.2f}{of} >= {below} over {len(values)} runs")
        if not seen:
            return "balanced", (f"no figure measured in {self.min_jobs} of the last {len(recent)} "
                                "runs: balanced")
        return "balanced", ", ".join(seen)
