"""SiteFactor of a pending job: short predicted jobs first, every job full after a day.

The bridge daemon keeps it up to date; the bridge (job_submit.lua) sets the first value at
submit from its prediction with the same formula and constants (rendered from `FactorPolicy()`
into the script), so a new job costs slurmctld no update RPC of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FactorPolicy:
    """SiteFactor = round(cap * max(short, age)), where

    short = 1 - ln(1 + p50_min) / ln(1 + horizon_min), clamped to [0, 1]: a 1-minute job
            gets nearly the cap, a job predicted at the horizon (7 days) or longer gets 0;
    age   = min(1, waited_s / age_full_s): after age_full_s (1 day) of waiting any job has
            the cap, so long jobs are never starved by a stream of short ones.
    p50 is the bridge's central prediction (from the admin comment), else the job's limit.
    The value is rounded to `step` (1% of the cap): the age term grows every second, and
    without steps every pending job would need an update RPC every round (20,000 pending
    jobs, 20,000 RPCs each round); with them a job changes about every age_full_s/100.
    """

    cap: int = 10_000
    horizon_min: float = 7 * 24 * 60
    age_full_s: float = 24 * 3600
    step: int = 100

    def site_factor(self, p50_s: float, waited_s: float) -> int:
        short = 1 - math.log1p(max(p50_s, 0) / 60) / math.log1p(self.horizon_min)
        age = min(1.0, max(waited_s, 0) / self.age_full_s)
        raw = self.cap * max(0.0, min(1.0, max(short, age)))
        # Half up, as the bridge's Lua rounds (math.floor(x + 0.5)).
        return min(self.cap, self.step * math.floor(raw / self.step + 0.5))
