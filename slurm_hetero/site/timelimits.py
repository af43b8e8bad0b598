"""A partition's time limits as numbers: MaxTime in minutes, and the OverTimeLimit that makes
a predicted (shortened) limit safe without the bridge daemon.

On a partition with `predicted_limits`, job_submit.lua sets a job's limit to its predicted
p90 (at least 1 minute) and records the user's own. Slurm kills a job at its limit plus the
partition's OverTimeLimit (slurmctld's job_time_limit), so an OverTimeLimit of MaxTime
minutes puts that kill past any limit a user may ask there, whatever is down; the bridge
daemon then ends each job at its user's own limit (bridge/daemon.py).

>>> from slurm_hetero.site.model import Partition
>>> over_time_limit(Partition("cpu", max_time="2-00:00:00", predicted_limits=True))
'2880'
>>> over_time_limit(Partition("cpu", max_time="UNLIMITED", predicted_limits=True))
'UNLIMITED'
>>> over_time_limit(Partition("cpu", max_time="60-00:00:00", predicted_limits=True))  # > 65533 min
'UNLIMITED'
>>> over_time_limit(Partition("gpu", max_time="2-00:00:00")) is None  # limits not predicted
True
"""

from __future__ import annotations

import math

from slurm_hetero.site.model import Partition
from slurm_hetero.slurm.parse import parse_duration_s

# slurm.conf(5): OverTimeLimit "May not exceed 65533 minutes" (65534 is NO_VAL16, "not set":
# the cluster-wide value would apply instead); UNLIMITED is allowed.
OVER_TIME_MAX_MIN = 65533


def max_time_min(p: Partition) -> int | None:
    """MaxTime in whole minutes (rounded up, as Slurm stores it); None for UNLIMITED."""
    seconds = parse_duration_s(p.max_time)
    return None if seconds is None else math.ceil(seconds / 60)


def over_time_limit(p: Partition) -> str | None:
    """The OverTimeLimit value for `p`'s PartitionName line, None where its limits are not
    predicted. A soft limit is at least one minute and no user may ask more than MaxTime, so
    soft limit + MaxTime is past every user's limit."""
    if not p.predicted_limits:
        return None
    m = max_time_min(p)
    return "UNLIMITED" if m is None or m > OVER_TIME_MAX_MIN else str(m)
