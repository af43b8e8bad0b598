"""Submitting, waiting for and accounting jobs through the runner."""

from __future__ import annotations

import time
from collections.abc import Sequence

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.slurm.commands import sbatch_wrap_argv
from slurm_hetero.slurm.parse import SACCT_DELIMITER, check_trusted, parse_sacct
from slurm_hetero.slurm.runner import Runner

SACCT_FIELDS = ["JobID", "Partition", "NodeList", "State", "ExitCode", "AllocTRES",
                "Elapsed", "QOS", "Submit", "Start", "End"]


def submit(runner: Runner, options: Sequence[str], wrap: str) -> int:
    """sbatch OPTIONS --wrap WRAP; returns the job id."""
    out = runner.out(sbatch_wrap_argv(options, wrap)).strip()
    return int(out.split(";")[0])


def wait_done(runner: Runner, ids: Sequence[int], timeout: float = 120.0) -> None:
    """Wait until none of the jobs is pending or running any more."""
    wanted = ",".join(map(str, ids))
    deadline = time.monotonic() + timeout
    while True:
        # A failed squeue (slurmctld busy) says nothing: only an answer without the jobs is done.
        r = runner.run(["squeue", "-h", "-j", wanted, "-o", "%i"], check=False)
        active = r.stdout.split() if r.returncode == 0 else [f"(squeue failed: {r.stderr.strip()[-200:]})"]
        if not active:
            return
        if time.monotonic() > deadline:
            raise RuntimeFailure(f"jobs {', '.join(active)} still queued or running after {timeout:.0f} s")
        time.sleep(0.5)


def sacct_jobs(runner: Runner, ids: Sequence[int], fields: Sequence[str] = SACCT_FIELDS,
               timeout: float = 30.0, require: Sequence[str] = ()) -> dict[int, dict[str, str]]:
    """Allocation lines (-X) of the jobs, once slurmdbd has recorded their end.

    slurmdbd learns a short job's details (partition, admin comment) after its end: wait
    for those too, and for any field in `require` to be non-empty."""
    argv = ["sacct", "-X", "-n", "-P", f"--delimiter={SACCT_DELIMITER}", "-j",
            ",".join(map(str, ids)), "-o", ",".join(check_trusted(fields))]
    deadline = time.monotonic() + timeout
    while True:
        rows = parse_sacct(runner.out(argv), list(fields), SACCT_DELIMITER)
        by_id = {int(r["JobID"]): r for r in rows if r["JobID"].isdigit()}
        ended = all(i in by_id and by_id[i].get("End", "x") not in ("Unknown", "")
                    and by_id[i].get("Partition", "x") != ""
                    and all(by_id[i].get(f) for f in require) for i in ids)
        if ended or time.monotonic() > deadline:
            return by_id
        time.sleep(0.5)
