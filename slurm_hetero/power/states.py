"""Parsers of what slurmctld says about nodes and reservations (`scontrol -o show node`,
`scontrol -o show reservation`, `squeue -o %N`), tested on captured 22.05 output.

22.05 writes a node's state as BASE+FLAG+FLAG (`IDLE+POWERED_DOWN`,
`IDLE+NOT_RESPONDING+POWERING_UP`, `DOWN+POWERED_DOWN+NOT_RESPONDING`, `IDLE+RESERVED`);
sinfo's short forms are `idle~` (powered down), `idle#` (powering up), `idle%` (powering
down), `idle!` (power down pending).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from slurm_hetero.slurm import hostlist

ASLEEP = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})
UNUSABLE = frozenset({"DRAIN", "FAIL", "MAINTENANCE", "NOT_RESPONDING", "REBOOT_REQUESTED",
                      "REBOOT_ISSUED", "INVALID_REG", "PLANNED"})
BUSY_BASES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


@dataclass(frozen=True)
class NodeState:
    name: str
    base: str  # IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: frozenset[str]
    cpu_alloc: int
    last_busy: float | None  # epoch seconds (slurmctld's local time), None if never
    partitions: tuple[str, ...]

    @property
    def asleep(self) -> bool:
        """Powered down, powering down, or marked to power down."""
        return bool(self.flags & ASLEEP)

    @property
    def waking(self) -> bool:
        return "POWERING_UP" in self.flags

    @property
    def busy(self) -> bool:
        """Holds (or is finishing) a job."""
        return self.base in BUSY_BASES or self.cpu_alloc > 0 or "COMPLETING" in self.flags

    @property
    def idle_awake(self) -> bool:
        """Up, idle and schedulable now: what a new job could start on."""
        return (self.base == "IDLE" and not self.busy and not self.asleep and not self.waking
                and not self.flags & UNUSABLE)

    @property
    def can_wake(self) -> bool:
        """Asleep and fit to be woken (not down, drained or already on its way up)."""
        return ("POWERED_DOWN" in self.flags and self.base == "IDLE" and not self.waking
                and not self.flags & (UNUSABLE - {"NOT_RESPONDING"}))


def _fields(line: str, keys: tuple[str, ...]) -> dict[str, str]:
    # Reason= (admin free text) comes last on a node line: nothing after it is read.
    line = re.split(r"\sReason=", line, maxsplit=1)[0]
    out = {}
    for key in keys:
        m = re.search(rf"(?:^|\s){key}=(\S*)", line)
        if m:
            out[key] = m.group(1)
    return out


def slurm_time(text: str) -> float | None:
    """`2026-12-01T23:13:06` (slurmctld's local time) in epoch seconds; None for None/Unknown."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_nodes(text: str) -> dict[str, NodeState]:
    """`scontrol -o show node` → {name: NodeState}; lines without a name or state are skipped."""
    out: dict[str, NodeState] = {}
    for line in text.splitlines():
        f = _fields(line, ("NodeName", "State", "CPUAlloc", "LastBusyTime", "Partitions"))
        if "NodeName" not in f or "State" not in f:
            continue
        base, *flags = f["State"].rstrip("*").split("+")
        try:
            alloc = int(f.get("CPUAlloc", "0"))
        except ValueError:
            alloc = 0
        parts = tuple(p for p in f.get("Partitions", "").split(",") if p and p != "(null)")
        out[f["NodeName"]] = NodeState(f["NodeName"], base, frozenset(flags), alloc,
                                       slurm_time(f.get("LastBusyTime", "")), parts)
    return out


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: tuple[str, ...]
    start: float | None
    end: float | None
    state: str  # ACTIVE or INACTIVE

    def holds(self, now: float, ahead_s: float) -> bool:
        """Active now, or starting within ahead_s (a node woken then would be late)."""
        if self.end is not None and self.end <= now:
            return False
        return self.state == "ACTIVE" or self.start is None or self.start <= now + ahead_s


def parse_reservations(text: str, limit: int = 100_000) -> list[Reservation]:
    """`scontrol -o show reservation` → reservations ("No reservations in the system" → [])."""
    out = []
    for line in text.splitlines():
        f = _fields(line, ("ReservationName", "Nodes", "StartTime", "EndTime", "State"))
        if "ReservationName" not in f:
            continue
        nodes = f.get("Nodes", "")
        try:
            names = tuple(hostlist.expand(nodes, limit=limit)) if nodes and nodes != "(null)" else ()
        except hostlist.HostlistError:
            names = ()
        out.append(Reservation(f["ReservationName"], names, slurm_time(f.get("StartTime", "")),
                               slurm_time(f.get("EndTime", "")), f.get("State", "")))
    return out


def parse_busy(text: str, limit: int = 100_000) -> set[str]:
    """`squeue -h -o %N` of jobs holding nodes → every node named."""
    out: set[str] = set()
    for line in text.split():
        if line and line != "(null)":
            try:
                out.update(hostlist.expand(line, limit=limit))
            except hostlist.HostlistError:
                continue
    return out
