"""The report tests' sacct files (tests/data/reports) as a job table.

They hold the field list the reports asked sacct for before sacct's fields became one list
(`slurm.sacct.FIELDS`, a superset): `PSV_FIELDS`, with -P --delimiter=US under
SLURM_TIME_FORMAT=%s."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from slurm_hetero.jobs.sacct import from_sacct
from slurm_hetero.site import Site
from slurm_hetero.slurm.sacct import RawSacct, read_sacct

DATA = Path(__file__).resolve().parent / "data" / "reports"
PSV_FIELDS = ("JobIDRaw", "JobID", "JobName", "User", "Account", "Partition", "QOS", "State", "Reason",
              "Submit", "Eligible", "Start", "End", "ElapsedRaw", "TimelimitRaw", "NCPUS", "TotalCPU",
              "AllocTRES", "NodeList", "ConsumedEnergyRaw", "AdminComment")


def read_psv(texts: list[str]) -> RawSacct:
    return read_sacct(texts, PSV_FIELDS)


def psv_jobs(site: Site | None, *names: str, texts: list[str] | None = None) -> pd.DataFrame:
    """The job table of the named files (or of `texts`)."""
    return from_sacct(read_psv(texts if texts is not None else [(DATA / n).read_text() for n in names]).frame,
                      site)
