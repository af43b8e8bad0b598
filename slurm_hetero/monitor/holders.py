"""Who holds a device now: the node agent's own records, never text a user can write.

The prolog (energy/agent.py) writes `job-<id>.json` into the node's agent state folder
(root's, not the user's) before the job runs: the job id and user come from what slurmd
hands the Prolog (SLURM_JOB_ID, SLURM_JOB_USER) and the devices from SLURM_JOB_GPUS or the
strict `scontrol show job -d` parser that refuses records a comment or work dir imitates.
The epilog deletes it. `dev-<kind><idx>.json` marks a device the agent changed (a policy
applied) and has not restored yet.

Devices by identity (energy/identity.py), never by number: `idx` in both records is Slurm's
GRES index on the node, which need not be the backend's index of the same device (NVML
counts in PCI bus order, /dev/nvidiaN in the driver's probe order). The prolog notes the
device it matched each index to: its identity (`minor:1`, `pci:0000:c1:00.0`) and the
backend's index then (`dev`). A holder is found again by that identity among the devices
the backend reports now; by `dev` where the backend reports no identity; by `idx` only in a
record written before identities (that agent used `idx` as the backend's index). A device the
prolog refused (no match, MIG) or whose identity no single device reports now is held by
nobody here: its power is never put on another job.

A record left behind by a crashed epilog can name a device a newer job holds: the newest
prolog (its device entry's time) wins.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from slurm_hetero.energy.devices import DeviceInfo
from slurm_hetero.energy.identity import device_with_identity

JOB_FILE = re.compile(r"job-(\d{1,12})\.json")
OWNER_FILE = re.compile(r"dev-(gpu|npu)(\d{1,4})\.json")
KINDS = ("gpu", "npu")
MAX_RECORD_BYTES = 256 * 1024  # an agent record is well under 4 KB per device
MAX_LABEL = 64  # a Slurm user name is at most 32 characters; a longer value is not one
MAX_IDENTITY = 128  # "pci:0000:c1:00.0" and the like

DeviceKey = tuple[str, int]  # (kind, the backend's index of the device: DeviceInfo.index)


@dataclass(frozen=True)
class Holder:
    job: str
    user: str
    policy: str  # the energy policy the prolog applied; "" when none
    since: float  # when the prolog took the device (epoch s)
    start_energy_j: float | None = None  # the device's counter when the prolog read it


@dataclass(frozen=True)
class HeldDevice:
    """One device of an agent record, as the prolog matched it."""

    kind: str
    idx: int  # Slurm's GRES index on the node
    dev: int | None = None  # the backend's index the prolog used; None: refused
    identity: str = ""  # what the device is; "" where the backend reports no identity
    since: float = 0.0
    start_energy_j: float | None = None

    def key(self, infos: Sequence[DeviceInfo]) -> DeviceKey | None:
        """The backend device it is now (see the module's note); None: none can be told."""
        if self.identity:
            info = device_with_identity(infos, self.kind, self.identity)
            return (self.kind, info.index) if info is not None else None
        return (self.kind, self.dev) if self.dev is not None else None


@dataclass(frozen=True)
class JobRecord:
    job: str
    user: str
    policy: str
    devices: tuple[HeldDevice, ...]


def _number(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _held(kind: str, idx: int, d: dict[str, Any], since: float = 0.0,
          start: float | None = None) -> HeldDevice:
    """An entry of a job record or an owner record; one from before identities (neither
    `dev`, `identity` nor `refused`) named the backend's device by `idx`."""
    ident = d.get("identity", "")
    if d.get("refused") or not isinstance(ident, str) or len(ident) > MAX_IDENTITY:
        ident, dev = "", None  # refused by the prolog, or not an identity the agent writes
    elif not any(k in d for k in ("dev", "identity", "refused")):
        dev = idx
    else:
        dev = _number(d.get("dev"))
    return HeldDevice(kind, idx, dev, ident, since, start)


def parse_job_record(job_id: str, data: Any) -> JobRecord | None:
    """One prolog record, or None when it is not one (wrong id, wrong shapes).

    >>> r = parse_job_record("7", {"job": "7", "user": "ann", "policy": "efficiency",
    ...     "devices": [{"kind": "gpu", "idx": 1, "dev": 0, "identity": "minor:1", "t": 5.0,
    ...                  "energy_j": 10.5}]})
    >>> r.devices
    (HeldDevice(kind='gpu', idx=1, dev=0, identity='minor:1', since=5.0, start_energy_j=10.5),)
    """
    if not isinstance(data, dict) or str(data.get("job")) != job_id:
        return None
    user = data.get("user")
    policy = data.get("policy")
    devices = []
    for d in data.get("devices") or []:
        if not isinstance(d, dict) or d.get("kind") not in KINDS:
            continue
        idx, t, e = _number(d.get("idx")), d.get("t"), d.get("energy_j")
        if idx is None:
            continue
        since = float(t) if isinstance(t, int | float) and not isinstance(t, bool) else 0.0
        start = float(e) if isinstance(e, int | float) and not isinstance(e, bool) else None
        devices.append(_held(str(d["kind"]), idx, d, since, start))
    return JobRecord(job=job_id, user=user[:MAX_LABEL] if isinstance(user, str) else "",
                     policy=policy[:MAX_LABEL] if isinstance(policy, str) else "",
                     devices=tuple(devices))


class Holders:
    """Reads a node's agent records; a file is parsed again only when it changed."""

    def __init__(self, node_dir: Path):
        self.dir = node_dir
        self._cache: dict[str, tuple[int, JobRecord | None]] = {}
        self._owners: dict[str, tuple[int, HeldDevice | None]] = {}

    def jobs(self) -> list[JobRecord]:
        self._cache = _scan(self.dir, JOB_FILE, self._cache,
                            lambda f, m, size: _read_record(f, m.group(1), size))
        return [r for _, r in self._cache.values() if r is not None]

    def devices(self, infos: Sequence[DeviceInfo] = (),
                jobs: list[JobRecord] | None = None) -> dict[DeviceKey, Holder]:
        """Who holds each backend device (`infos`: the devices the backend reports now)."""
        out: dict[DeviceKey, Holder] = {}
        for r in self.jobs() if jobs is None else jobs:
            for d in r.devices:
                key = d.key(infos)
                if key is not None and (key not in out or d.since > out[key].since):
                    out[key] = Holder(r.job, r.user, r.policy, d.since, d.start_energy_j)
        return out

    def changed(self, infos: Sequence[DeviceInfo] = ()) -> set[DeviceKey]:
        """Backend devices the agent changed and has not restored (an owner file exists),
        found by the identity the owner file notes, as the agent's own restore finds them."""
        self._owners = _scan(self.dir, OWNER_FILE, self._owners,
                             lambda f, m, size: _read_owner(f, m.group(1), int(m.group(2)), size))
        keys = (held.key(infos) for _, held in self._owners.values() if held is not None)
        return {k for k in keys if k is not None}


_T = TypeVar("_T")


def _scan(folder: Path, pattern: re.Pattern[str], cache: dict[str, tuple[int, _T | None]],
          read: Callable[[Path, re.Match[str], int], _T | None]) -> dict[str, tuple[int, _T | None]]:
    """The records of `folder` whose names match `pattern`, each read again only when its
    mtime changed (`cache`: the last call's); the new cache ({} when the folder is unreadable)."""
    seen: dict[str, tuple[int, _T | None]] = {}
    try:
        files = list(folder.iterdir())
    except OSError:
        return seen
    for f in files:
        m = pattern.fullmatch(f.name)
        if not m:
            continue
        try:
            st = f.stat()
        except OSError:
            continue
        cached = cache.get(f.name)
        if cached is None or cached[0] != st.st_mtime_ns:
            cached = (st.st_mtime_ns, read(f, m, st.st_size))
        seen[f.name] = cached
    return seen


def _read_owner(path: Path, kind: str, idx: int, size: int) -> HeldDevice | None:
    if size > MAX_RECORD_BYTES:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return _held(kind, idx, data) if isinstance(data, dict) else None


def _read_record(path: Path, job_id: str, size: int) -> JobRecord | None:
    if size > MAX_RECORD_BYTES:
        return None
    try:
        return parse_job_record(job_id, json.loads(path.read_text()))
    except (OSError, ValueError, RecursionError):
        return None  # being replaced, or not ours: the next round reads it again
