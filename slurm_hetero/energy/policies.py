"""Named energy policies and the Slurm-native settings the bridge applies at submit time.

Slurm's job_desc carries the CPU governor as a flag word (slurm.h CPU_FREQ_*), and GPU
clocks as a `tres_freq` string (`gpu:low|medium|high|highm1|<MHz>`). The node agent applies
what Slurm cannot (power caps, NPU power modes).
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class EnergyPolicy:
    name: str
    cpu_governor: str | None
    gpu_freq: str | None  # Slurm --gpu-freq value: low, medium, high, highm1 or MHz
    description: str

    @property
    def cpu_freq_gov(self) -> int | None:
        return CPU_GOVERNORS[self.cpu_governor] if self.cpu_governor else None


DEFAULT_POLICIES: tuple[EnergyPolicy, ...] = (
    EnergyPolicy("performance", "performance", "high", "highest clocks"),
    EnergyPolicy("balanced", "schedutil", "medium", "default: clocks follow load"),
    EnergyPolicy("efficiency", "powersave", "low", "lowest clocks: less energy, slower"),
    # `auto` picks efficiency or balanced per job from its history (node agent, energy
    # issue); until that history exists the bridge applies balanced and says so.
    EnergyPolicy("auto", "schedutil", "medium", "efficiency for jobs known to be memory- or input-bound"),
)
