"""Queue time: the wait of each job that started, per pool and tier, as a Prometheus
histogram; and Slurm's reason of each pending job as one of a fixed set of labels.

A wait runs from the moment a job became eligible (Slurm's `eligible_time`: past its
--begin, its dependencies and its holds) to its start, as `slurm-hetero why` counts it;
a job with no eligible time is counted from its submission.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

# HPC waits run from "started at once" to days: steps of 2 to 3 times from 10 s to a week
# (histogram_quantile interpolates inside a bucket, so its error stays within one step), and
# 1 s for jobs slurmctld starts at submission; 17 buckets (+Inf) per pool and tier.
WAIT_BUCKETS_S: tuple[float, ...] = (1, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800,
                                     43200, 86400, 172800, 345600, 604800)

# Slurm's reasons as labels. Anything else becomes "other": the label set stays this size
# whatever Slurm release or plugin invents (~150 limit spellings exist), and a string from
# slurmctld is compared, never echoed.
REASONS: tuple[str, ...] = ("None", "Resources", "Priority", "Dependency", "BeginTime", "JobHeldUser",
                            "JobHeldAdmin", "ReqNodeNotAvail", "Reservation", "PartitionTimeLimit",
                            "JobArrayTaskLimit", "QOSLimit", "AssocLimit", "other")
# Jobs that wait only for devices or their turn: the requests fragmentation is measured
# against (a held, dependent or limited job could not use a free device anyway).
WAITING_FOR_DEVICES = frozenset({"None", "Resources", "Priority"})
_QOS_LIMIT = re.compile(r"QOS(?:Grp|Max|Min)\w+|QOS(?:Job|Resource|Time)Limit|QOSUsageThreshold")
_ASSOC_LIMIT = re.compile(r"Assoc(?:Grp|Max|Min)\w+|Association(?:Job|Resource|Time)Limit")


def reason_label(reason: str) -> str:
    """Slurm's pending reason → one of REASONS.

    >>> [reason_label(r) for r in ("Resources", "QOSGrpGRES", "AssocMaxJobsLimit", "", "Whatever")]
    ['Resources', 'QOSLimit', 'AssocLimit', 'None', 'other']
    """
    if reason in REASONS and reason != "other":
        return reason
    if not reason:
        return "None"
    if _QOS_LIMIT.fullmatch(reason):
        return "QOSLimit"
    if _ASSOC_LIMIT.fullmatch(reason):
        return "AssocLimit"
    return "other"


class WaitHistograms:
    """Cumulative wait histograms per (pool, tier); safe to read while a round adds."""

    def __init__(self, buckets: Iterable[float] = WAIT_BUCKETS_S):
        self.buckets = tuple(sorted(buckets))
        self._counts: dict[tuple[str, str], list[int]] = {}  # per bucket, +Inf last (not cumulative)
        self._sums: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def observe(self, pool: str, tier: str, wait_s: float) -> None:
        with self._lock:
            counts = self._counts.setdefault((pool, tier), [0] * (len(self.buckets) + 1))
            counts[bisect_left(self.buckets, wait_s)] += 1  # le: a wait equal to a bound falls in it
            self._sums[(pool, tier)] = self._sums.get((pool, tier), 0.0) + wait_s

    def count(self, pool: str, tier: str) -> int:
        with self._lock:
            return sum(self._counts.get((pool, tier), ()))

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, documentation, labels=["pool", "tier"])
        with self._lock:
            rows = sorted((k, list(v), self._sums[k]) for k, v in self._counts.items())
        for (pool, tier), counts, total in rows:
            cumulative, running = [], 0
            for bound, n in zip([*map(floatToGoString, self.buckets), "+Inf"], counts, strict=True):
                running += n
                cumulative.append((bound, running))
            fam.add_metric([pool, tier], cumulative, total)
        return fam
