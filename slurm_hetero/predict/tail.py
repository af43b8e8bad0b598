"""Each user's last finished jobs, as `model export` leaves them beside the model.

The exported model holds each user's STATE (features.py) as of `history_until`; STATE's
windows reach back KEEP jobs. The tail (TAIL_SUFFIX, JSON) keeps, per user, the job count
and those last KEEP jobs, so that the bridge daemon (bridge/history.py) can add the jobs
that end later and recompute STATE exactly as an export made then would — without the job
table, and without counting a job twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.fileio import write_atomic
from slurm_hetero.predict import features as F

TAIL_SUFFIX = ".tail.json"
TAIL_FORMAT = "slurm-hetero-history-tail"
KEEP = max(F.WINDOWS)  # the longest window of STATE: older jobs change nothing but n

# A finished job as STATE needs it: end, submit, runtime, requested seconds (-1: none), cpus.
Job = tuple[float, float, float, float, float]


@dataclass
class UserJobs:
    n: int = 0  # every finished job, the export's included
    jobs: list[Job] = field(default_factory=list)  # the last KEEP, oldest first

    def add(self, job: Job) -> None:
        self.n += 1
        self.jobs.append(job)
        if len(self.jobs) > KEEP:
            self.jobs.sort()
            del self.jobs[:-KEEP]


# ---- the export's tail ------------------------------------------------------------------

def tail_doc(df: pd.DataFrame, until: int) -> dict[str, object]:
    """Each user's job count and last KEEP jobs that ended before `until` (the jobs the
    exported STATE summarizes), as `model export` writes them beside the model."""
    done = df[F.usable(df) & (df["end"] < until)]
    users: dict[str, dict[str, object]] = {}
    if len(done):
        req = F.known(done, "req_time_s")
        frame = pd.DataFrame({"user": done["user"].astype(str).to_numpy(), "end": F.epoch(done, "end"),
                              "submit": F.epoch(done, "submit"),
                              "runtime": np.maximum(done["runtime_s"].to_numpy(np.float64), 1.0),
                              "req": np.where(req > 0, req, -1.0), "cpus": F.known(done, "req_cpus")})
        frame = frame.sort_values(["user", "end", "submit"], kind="stable")
        for user, g in frame.groupby("user", sort=True):
            last = g.tail(KEEP)[["end", "submit", "runtime", "req", "cpus"]].to_numpy()
            users[str(user)] = {"n": len(g), "jobs": [[float(v) for v in row] for row in last]}
    return {"format": TAIL_FORMAT, "version": 1, "until": int(until), "users": users}


def tail_path(model: Path) -> Path:
    """Where the tail of an exported model lives: beside it (`predict.lua.tail.json`)."""
    return model.with_name(model.name + TAIL_SUFFIX)


def write_tail(df: pd.DataFrame, until: int, path: Path) -> None:
    write_atomic(path, json.dumps(tail_doc(df, until), separators=(",", ":")))


@dataclass(frozen=True)
class Tail:
    until: float
    users: dict[str, UserJobs]


def read_tail(path: Path) -> Tail:
    """A tail file; InputError naming the file and what is wrong."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read the model's history tail: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != TAIL_FORMAT \
            or not isinstance(doc.get("users"), dict) or not isinstance(doc.get("until"), int):
        raise InputError(f"{path}: not a history tail ({TAIL_FORMAT}, written by `model export`)")
    users = {}
    for name, u in doc["users"].items():
        try:
            jobs = [tuple(float(v) for v in j) for j in u["jobs"]][-KEEP:]
            if not all(len(j) == 5 and all(map(math.isfinite, j)) for j in jobs) or int(u["n"]) < len(jobs):
                raise ValueError
            users[str(name)] = UserJobs(int(u["n"]), jobs)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}: user {str(name)[:40]!r}: jobs must be [end, submit, runtime, req, "
                             "cpus] numbers and n at least their count") from e
    return Tail(float(doc["until"]), users)


# ---- state ------------------------------------------------------------------------------

def user_states(users: Mapping[str, UserJobs]) -> dict[str, list[float]]:
    """STATE of each user after all their jobs, exactly as features.History computes it
    (n: the user's whole count, the export's jobs included)."""
    names = sorted(users)
    rows = [(u, *j) for u in names for j in users[u].jobs]
    if not rows:
        return {}
    jobs = pd.DataFrame(rows, columns=["user", "end", "submit", "runtime_s", "req_time_s", "req_cpus"])
    jobs["req_time_s"] = jobs["req_time_s"].where(jobs["req_time_s"] > 0)
    jobs["req_cpus"] = jobs["req_cpus"].where(jobs["req_cpus"] >= 0)
    jobs["start"] = jobs["end"] - jobs["runtime_s"]
    jobs["source"] = ""
    history = F.History.build(jobs)
    probe = pd.DataFrame({"source": "", "user": names})
    until = np.full(len(names), int(jobs["end"].max()) + 1, dtype=np.int64)
    state = history.state(F.user_keys(probe), until)
    out = {}
    for i, u in enumerate(names):
        values = [float(state[s][i]) for s in F.STATE]
        values[0] = float(users[u].n)
        out[u] = values
    return out


