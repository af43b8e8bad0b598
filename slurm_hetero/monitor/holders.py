"""Who holds a device now: the node agent's own records, never text a user can write.

The prolog (energy/agent.py) writes `job-<id>.json` into the node's agent state folder
(root's, not the user's) before the job runs: the job id and user come from what slurmd
hands the Prolog (SLURM_JOB_ID, SLURM_JOB_USER) and the devices from SLURM_JOB_GPUS or the
strict `scontrol show job -d` parser that refuses records a comment or work dir imitates.
The epilog deletes it. `dev-<kind><idx>.json` marks a device the agent changed (a policy
applied) and has not restored yet.

A record left behind by a crashed epilog can name a device a newer job holds: the newest
prolog (its device entry's time) wins.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOB_FILE = re.compile(r"job-(\d{1,12})\.json")
OWNER_FILE = re.compile(r"dev-(gpu|npu)(\d{1,4})\.json")
KINDS = ("gpu", "npu")
MAX_RECORD_BYTES = 256 * 1024  # an agent record is well under 4 KB per device
MAX_LABEL = 64  # a Slurm user name is at most 32 characters; a longer value is not one

DeviceKey = tuple[str, int]  # (kind, index)


@dataclass(frozen=True)
class Holder:
    job: str
    user: str
    policy: str  # the energy policy the prolog applied; "" when none
    since: float  # when the prolog took the device (epoch s)
    start_energy_j: float | None = None  # the device's counter when the prolog read it


@dataclass(frozen=True)
class JobRecord:
    job: str
    user: str
    policy: str
    devices: tuple[tuple[DeviceKey, float, float | None], ...]  # (device, since, start energy)


def parse_job_record(job_id: str, data: Any) -> JobRecord | None:
    """One prolog record, or None when it is not one (wrong id, wrong shapes).

    >>> r = parse_job_record("7", {"job": "7", "user": "ann", "policy": "efficiency",
    ...     "devices": [{"kind": "gpu", "idx": 1, "t": 5.0, "energy_j": 10.5}]})
    >>> r.devices
    ((('gpu', 1), 5.0, 10.5),)
    """
    if not isinstance(data, dict) or str(data.get("job")) != job_id:
        return None
    user = data.get("user")
    policy = data.get("policy")
    devices = []
    for d in data.get("devices") or []:
        if not isinstance(d, dict) or d.get("kind") not in KINDS:
            continue
        idx, t, e = d.get("idx"), d.get("t"), d.get("energy_j")
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            continue
        since = float(t) if isinstance(t, int | float) and not isinstance(t, bool) else 0.0
        start = float(e) if isinstance(e, int | float) and not isinstance(e, bool) else None
        devices.append(((str(d["kind"]), idx), since, start))
    return JobRecord(job=job_id, user=user[:MAX_LABEL] if isinstance(user, str) else "",
                     policy=policy[:MAX_LABEL] if isinstance(policy, str) else "",
                     devices=tuple(devices))


class Holders:
    """Reads a node's agent records; a file is parsed again only when it changed."""

    def __init__(self, node_dir: Path):
        self.dir = node_dir
        self._cache: dict[str, tuple[int, JobRecord | None]] = {}

    def jobs(self) -> list[JobRecord]:
        seen: dict[str, tuple[int, JobRecord | None]] = {}
        try:
            files = list(self.dir.iterdir())
        except OSError:
            files = []
        for f in files:
            m = JOB_FILE.fullmatch(f.name)
            if not m:
                continue
            try:
                st = f.stat()
            except OSError:
                continue
            cached = self._cache.get(f.name)
            if cached and cached[0] == st.st_mtime_ns:
                seen[f.name] = cached
                continue
            seen[f.name] = (st.st_mtime_ns, _read_record(f, m.group(1), st.st_size))
        self._cache = seen
        return [r for _, r in seen.values() if r is not None]

    def devices(self, jobs: list[JobRecord] | None = None) -> dict[DeviceKey, Holder]:
        out: dict[DeviceKey, Holder] = {}
        for r in self.jobs() if jobs is None else jobs:
            for key, since, start in r.devices:
                if key not in out or since > out[key].since:
                    out[key] = Holder(r.job, r.user, r.policy, since, start)
        return out

    def changed(self) -> set[DeviceKey]:
        """Devices the agent changed and has not restored (an owner file exists)."""
        out: set[DeviceKey] = set()
        try:
            names = [f.name for f in self.dir.iterdir()]
        except OSError:
            return out
        for name in names:
            m = OWNER_FILE.fullmatch(name)
            if m:
                out.add((m.group(1), int(m.group(2))))
        return out


def _read_record(path: Path, job_id: str, size: int) -> JobRecord | None:
    if size > MAX_RECORD_BYTES:
        return None
    try:
        return parse_job_record(job_id, json.loads(path.read_text()))
    except (OSError, ValueError, RecursionError):
        return None  # being replaced, or not ours: the next round reads it again
