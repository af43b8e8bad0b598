"""`slurm-hetero why JOBID`: why a job waits, what holds the pool it waits for, when it
should start, and what would start it sooner, each suggestion checked against the live
queue and the site's rules.

Sources, all structured: `squeue --json` (the job, its reason, every job holding devices,
their admin comments with the bridge's predictions), `sinfo -N -O` (devices per node, as
the bridge daemon's capacity snapshot reads them), `sacctmgr -n -P show qos|assoc` (the
limits behind a limit reason: admin-written names and TRES lists), `squeue --start -j ID`
(ids and times only) and, for a job slurmctld no longer lists, `sacct --json -j ID`.
Fetching is `fetch` alone; everything else is a pure function of what it read.

Two start estimates: Slurm's (the backfill scheduler's plan: it counts every running job's
full time limit) and ours (the same queue replayed in priority order without backfill, the
jobs ahead running their p50): likely by, each running job ending by the bridge's p90
prediction (past it or without one, by its limit); with a range, not before (at their p50)
and at the latest (every job to its user's own limit). Ours is a guess about the work;
Slurm's is a plan about the limits.

A job that asks no GPUs/NPUs gets the same answer in CPUs: its pool is the site's CPU-only
nodes of its partition (`cpu@ARCH`, as site.pools.group_pool names them), free CPUs per node
are the site's CPUs less what squeue shows the running jobs holding there, and a job asking
`-n N` with no node count is packed as Slurm packs it, onto the nodes with the most free.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import json
import math
import os
import pwd
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from slurm_hetero.bridge.snapshot import PoolCapacity, build_snapshot
from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.reports import fmt
from slurm_hetero.reports.jobid import BRIDGE_WHY, check_job_id
from slurm_hetero.site.catalog import AccelModel
from slurm_hetero.site.model import NodeGroup, Site
from slurm_hetero.site.pools import Pool, pools
from slurm_hetero.site.tiers import tier_views
from slurm_hetero.slurm.commands import (
    ASSOC_LIMIT_FIELDS,
    QOS_LIMIT_FIELDS,
    admin_level_argv,
    sacct_job_json_argv,
    sacctmgr_assoc_limits_argv,
    sacctmgr_qos_limits_argv,
    show_config_argv,
    sinfo_capacity_argv,
    squeue_start_argv,
)
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.hostlist import HostlistError, expand
from slurm_hetero.slurm.jobrecord import JobRecord, parse_admin_level, parse_sacct_job_json, tres_numbers
from slurm_hetero.slurm.parse import parse_duration_s, parse_gres
from slurm_hetero.slurm.runner import Runner, SlurmCommandError
from slurm_hetero.slurm.squeue import (
    MAX_JSON_BYTES,
    QueuedJob,
    json_number,
    parse_job,
    squeue_json_argv,
)

# States in which a job holds its allocation; everything neither pending nor holding has ended.
HOLDING = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "SIGNALING",
                     "STAGE_OUT", "RESIZING"})
PENDING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
ARCHES = ("x86_64", "aarch64")
_WORD = re.compile(r"[A-Za-z0-9_.-]+")
MIN_GAP_S = 120.0  # a backfill window shorter than this is not worth a suggestion
# Slurm's backfill defaults (SchedulerParameters): it plans in steps of bf_resolution, a job
# ahead's reservation starting at the beginning of its step, and starts a job only at a pass,
# the next one up to bf_interval away. A shorter --time must end before both.
BF_RESOLUTION_S = 60
BF_INTERVAL_S = 30
SHOW_RUNNING = 12  # rows of the pool's running jobs on the screen (JSON has them all)


# ---- Slurm's reasons in plain words ------------------------------------------------------------
# From Slurm's own list (job_reason_codes.html; the strings libslurm 22.05 prints). The limit
# families (Assoc|QOS)(Grp|Max|Min)<resource>[Minutes|RunMinutes][PerJob|...][Limit] are
# composed below from their parts, so each of their ~150 spellings reads right.
REASONS: dict[str, tuple[str, str]] = {  # code: (kind, words)
    "None": ("wait", "Slurm has not looked at it yet; the next scheduling pass will"),
    "Resources": ("wait", "what it asks for is in use by running jobs; it starts when enough frees up"),
    "Priority": ("wait", "jobs of a higher priority in its partition wait and go first; backfill "
                 "starts it sooner only where that delays none of them"),
    "Dependency": ("dependency", "it waits for the job(s) it depends on (--dependency)"),
    "DependencyNeverSatisfied": ("never", "a job it depends on ended in a way that can never satisfy "
                                 "the dependency: it will not start; cancel it"),
    "JobHeldUser": ("hold", "it is on hold, put there by its owner (sbatch -H or scontrol hold)"),
    "JobHeldAdmin": ("hold", "an administrator put it on hold; only an administrator releases it"),
    "JobHoldMaxRequeue": ("hold", "it was requeued too many times and is held; ask an administrator"),
    "BeginTime": ("time", "its earliest start time has not come yet (--begin, or a requeued job's "
                  "wait before it may start again)"),
    "ReqNodeNotAvail": ("nodes", "a node it needs is down, drained or reserved"),
    "NodeDown": ("nodes", "a node it needs is down"),
    "BadConstraints": ("never", "no node has all the features (-C) it asks for together"),
    "PartitionTimeLimit": ("never", "its time limit is longer than its partition allows: it will not "
                           "start as it is"),
    "PartitionNodeLimit": ("never", "it asks for more (or fewer) nodes than its partition allows"),
    "PartitionDown": ("nodes", "its partition is down"),
    "PartitionInactive": ("nodes", "its partition is inactive"),
    "PartitionConfig": ("never", "it asks for more than its partition offers (CPUs, memory, nodes)"),
    "AccountNotAllowed": ("never", "its account may not use this partition"),
    "QOSNotAllowed": ("never", "its QoS may not be used in this partition or by this account"),
    "InvalidAccount": ("never", "its account is not valid (removed, or not one of its user's)"),
    "InvalidQOS": ("never", "its QoS is not valid (removed, or not allowed for its account)"),
    "Reservation": ("time", "it waits for its advanced reservation to start"),
    "ReqResv": ("never", "it asks for a reservation it cannot use"),
    "RequiresReservation": ("never", "its partition or QoS needs a reservation and it names none"),
    "ResvDeleted": ("never", "the reservation it asked for was deleted"),
    "Licenses": ("wait", "the licenses it asks for are in use"),
    "JobArrayTaskLimit": ("wait", "its array's limit of tasks running at once (%N) is reached"),
    "Cleaning": ("wait", "it was requeued and Slurm is still cleaning up its last run"),
    "Prolog": ("wait", "its PrologSlurmctld is still running"),
    "PowerNotAvail": ("wait", "not enough power is available for it"),
    "PowerReserved": ("wait", "power it needs is reserved"),
    "FrontEndDown": ("nodes", "no front end node is available"),
    "JobLaunchFailure": ("hold", "its launch failed; it was requeued"),
    "SystemFailure": ("hold", "a system failure (file system, network) stopped it"),
    "Deadline": ("never", "its deadline (--deadline) passed"),
    "SchedDefer": ("wait", "the scheduler defers new jobs to its periodic pass (defer)"),
    "InactiveLimit": ("never", "it reached the inactivity limit"),
    "AccountingPolicy": ("limit", "an accounting limit holds it (Slurm names no more specific one)"),
    "QOSUsageThreshold": ("limit", "its account has used more than its QoS's usage threshold allows"),
    "QOSJobLimit": ("limit", "its QoS's job limit is reached"),
    "QOSResourceLimit": ("limit", "its QoS's resource limit is reached"),
    "QOSTimeLimit": ("limit", "its QoS's time limit is reached"),
    "AssociationJobLimit": ("limit", "its association's job limit is reached"),
    "AssociationResourceLimit": ("limit", "its association's resource limit is reached"),
    "AssociationTimeLimit": ("limit", "its association's time limit is reached"),
    "BurstBufferResources": ("wait", "the burst buffer it asks for is in use"),
    "BurstBufferStageIn": ("wait", "its burst buffer is staging data in"),
    "BurstBufferOperation": ("hold", "a burst buffer operation failed"),
}
_LIMIT = re.compile(
    r"^(?P<src>Assoc|QOS)?(?P<scope>Grp|Max|Min)(?P<res>BB|Billing|CPU|Cpu|Energy|GRES|Jobs|License|"
    r"Memory|Mem|Node|SubmitJobs|SubmitJob|Submit|Unknown|WallDuration|Wall)(?P<min>Minutes|RunMinutes)?"
    r"(?P<per>PerJob|PerNode|PerUser|PerAccount)?(?:Limit|NotSatisfied)?$")
_RESOURCE_WORDS = {
    "BB": "burst buffer", "Billing": "billing units", "CPU": "CPUs", "Cpu": "CPUs", "Energy": "energy",
    "GRES": "GPUs/NPUs (GRES)", "Jobs": "running jobs", "License": "licenses", "Mem": "memory",
    "Memory": "memory", "Node": "nodes", "Submit": "queued and running jobs",
    "SubmitJob": "queued and running jobs", "SubmitJobs": "queued and running jobs",
    "Unknown": "a resource", "Wall": "run time", "WallDuration": "run time",
}
_TRES_PREFIX = {"BB": "bb/", "Billing": "billing", "CPU": "cpu", "Cpu": "cpu", "Energy": "energy",
                "GRES": "gres/", "License": "license/", "Mem": "mem", "Memory": "mem", "Node": "node"}


@dataclass(frozen=True)
class LimitRef:
    """A limit reason taken apart: QOSMaxGRESPerUser → (QOS, Max, GRES, "", User)."""

    source: str  # "QOS" or "Assoc"
    scope: str  # "Grp", "Max" or "Min"
    resource: str  # as Slurm spells it: GRES, Cpu, Mem, Node, Jobs, Submit, Wall, ...
    minutes: str = ""  # "", "Minutes" or "RunMinutes"
    per: str = ""  # "", "Job", "Node", "User" or "Account"

    @property
    def tres_prefix(self) -> str | None:
        """The TRES keys the limit counts (`gres/` for all GRES), None for jobs/submit/wall."""
        return _TRES_PREFIX.get(self.resource)

    @property
    def sacctmgr_field(self) -> str:
        """The sacctmgr format field that holds this limit."""
        qos = self.source == "QOS"
        if self.resource in ("Wall", "WallDuration"):
            return "GrpWall" if self.scope == "Grp" else "MaxWall"
        if self.resource == "Jobs":
            return "GrpJobs" if self.scope == "Grp" else ("MaxJobsPU" if qos else "MaxJobs")
        if self.resource.startswith("Submit"):
            return "GrpSubmit" if self.scope == "Grp" else ("MaxSubmitPU" if qos else "MaxSubmit")
        if self.scope == "Min":
            return "MinTRES"
        if self.scope == "Grp":
            return {"": "GrpTRES", "Minutes": "GrpTRESMins", "RunMinutes": "GrpTRESRunMins"}[self.minutes]
        if self.minutes:
            return "MaxTRESMins"
        return {"": "MaxTRES", "Job": "MaxTRES", "Node": "MaxTRESPerNode", "User": "MaxTRESPU",
                "Account": "MaxTRESPA"}[self.per]

    @property
    def blocks_for_good(self) -> bool:
        """A per-job, per-node or minimum limit never frees up by waiting."""
        return self.scope == "Min" or (self.scope == "Max" and self.per in ("", "Job", "Node")
                                       and self.resource not in ("Jobs", "Submit", "SubmitJob", "SubmitJobs"))


@dataclass(frozen=True)
class Reason:
    code: str
    kind: str  # wait, limit, hold, time, dependency, nodes, never, other
    words: str
    limit: LimitRef | None = None


def limit_ref(code: str) -> LimitRef | None:
    """The parts of a limit reason, None for any other.

    >>> limit_ref("QOSMaxGRESPerUser")
    LimitRef(source='QOS', scope='Max', resource='GRES', minutes='', per='User')
    >>> limit_ref("AssocGrpCPUMinutesLimit").sacctmgr_field, limit_ref("MaxGRESPerAccount").source
    ('GrpTRESMins', 'QOS')
    >>> limit_ref("Resources") is None
    True
    """
    m = _LIMIT.match(code)
    if not m:
        return None
    return LimitRef(source=m["src"] or "QOS", scope=m["scope"], resource=m["res"], minutes=m["min"] or "",
                    per=(m["per"] or "").removeprefix("Per"))


def explain_reason(code: str) -> Reason:
    """Slurm's reason code in plain words; a code this table does not know is shown as it is.

    >>> explain_reason("QOSGrpGRES").words
    "its QoS's running jobs together hold all the GPUs/NPUs (GRES) it allows"
    """
    code = code.strip() or "None"
    if code in REASONS:
        kind, words = REASONS[code]
        return Reason(code, kind, words)
    ref = limit_ref(code)
    if ref is None:
        return Reason(code, "other", f"Slurm's reason {code!r} (see `man squeue`, JOB REASON CODES)")
    who = "its QoS" if ref.source == "QOS" else "its association (account/user)"
    what = _RESOURCE_WORDS[ref.resource]
    if ref.scope == "Min":
        words = f"it asks for fewer {what} than {who} requires: it will not start as it is"
    elif ref.scope == "Grp" and ref.minutes == "Minutes":
        words = f"{who}'s budget of {what}-minutes (past and running jobs) is spent"
    elif ref.scope == "Grp" and ref.minutes == "RunMinutes":
        words = (f"{who}'s running jobs together have as many {what}-minutes left as it allows; "
                 "it starts as they run down")
    elif ref.scope == "Grp" and ref.resource in ("Wall",):
        words = f"{who}'s total run time limit is reached"
    elif ref.scope == "Grp":
        words = f"{who}'s running jobs together hold all the {what} it allows"
    elif ref.per == "User":
        words = f"you already hold the most {what} one user may hold in {who}; it starts as your jobs end"
    elif ref.per == "Account":
        words = f"your account already holds the most {what} one account may hold in {who}"
    elif ref.per == "Node":
        words = f"it asks for more {what} per node than {who} allows: it will not start as it is"
    elif ref.minutes:
        words = f"it asks for more {what}-minutes (count x time limit) than {who} allows one job"
    else:
        words = f"it asks for more {what} than {who} allows one job: it will not start as it is"
    return Reason(code, "never" if ref.blocks_for_good else "limit", words, ref)


# ---- reading Slurm's output (pure) -----------------------------------------------------------


@dataclass(frozen=True)
class QJob:
    """One job of `squeue --json`, with what `why` reads of it."""

    job_id: int
    name: str
    state: str
    reason: str
    user: str
    user_id: int | None
    account: str
    qos: str
    partition: str
    priority: float
    submit: float | None
    eligible: float | None
    start: float | None  # holding: when it started; pending: slurmctld's expected start
    limit_s: float | None
    nodes: tuple[str, ...]
    node_count: int
    tres_per_node: str
    features: str
    tres_req: Mapping[str, float]
    tres_alloc: Mapping[str, float]
    gres_detail: tuple[str, ...]
    admin_comment: str
    dependency: str
    queued: QueuedJob = field(repr=False, compare=False)  # as the capacity snapshot reads it
    # A pending job's most nodes (-N N, -N A-B); 0: not set (22.05 packs 0 once the job started).
    max_nodes: int = 0
    cpus_by_node: tuple[tuple[str, int], ...] = ()  # holding: the CPUs it holds on each of its nodes
    last_eval: float | None = None  # when a scheduler last considered it (last_sched_evaluation)

    @property
    def pending(self) -> bool:
        return self.state in PENDING

    @property
    def holding(self) -> bool:
        return self.state in HOLDING

    @functools.cached_property
    def comment(self) -> dict[str, Any]:
        """The bridge's record, read once: every estimate reads it per scenario. Not to be changed."""
        return parse_comment(self.admin_comment)


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _alloc_cpus(raw: dict[str, Any], nodes: tuple[str, ...], total: float) -> tuple[tuple[str, int], ...]:
    """The CPUs a holding job has on each node: 24.11's `job_resources.nodes.allocation[].cpus.count`;
    22.05's `job_resources.allocated_nodes[]`, whose cores marked allocated are counted and
    scaled to the job's `total` allocated CPUs (a core brings its threads); else, where neither
    is there, `total` split evenly over `nodes` (the first nodes take the remainder).

    >>> res = {"allocated_nodes": [{"nodename": "a", "sockets": {"0": {"cores": {"0": "allocated",
    ...        "1": "allocated"}}}}, {"nodename": "b", "sockets": {"0": {"cores": {"3": "allocated"}}}}]}
    >>> _alloc_cpus({"job_resources": res}, ("a", "b"), 6.0), _alloc_cpus({}, ("a", "b", "c"), 7.0)
    ((('a', 4), ('b', 2)), (('a', 3), ('b', 2), ('c', 2)))
    """
    res = _obj(raw.get("job_resources"))
    got: dict[str, float] = {}
    alloc = _obj(res.get("nodes")).get("allocation")
    if isinstance(alloc, list):  # 24.11
        for a in alloc:
            name, n = _obj(a).get("name"), json_number(_obj(_obj(a).get("cpus")).get("count"))
            if isinstance(name, str) and name and n:
                got[name] = got.get(name, 0.0) + n
    else:  # 22.05: a list (or a map by index) of nodes, each socket's cores by state
        an = res.get("allocated_nodes")
        items = list(an.values()) if isinstance(an, dict) else an if isinstance(an, list) else []
        cores: dict[str, int] = {}
        for a in items:
            name = _obj(a).get("nodename")
            if not isinstance(name, str) or not name:
                continue
            cores[name] = cores.get(name, 0) + sum(
                1 for sock in _obj(_obj(a).get("sockets")).values()
                for v in _obj(_obj(sock).get("cores")).values()
                if isinstance(v, str) and v.lower().startswith("alloc"))
        whole = sum(cores.values())
        if whole and total:
            got = {n: total * c / whole for n, c in cores.items() if c}
    if got:
        return tuple((n, round(c)) for n, c in got.items())
    if not nodes or total <= 0:
        return ()
    # Per-node CPUs not in the answer: an even split (uneven layouts, -n 30 as 25 + 5, are off).
    base, extra = divmod(int(total), len(nodes))
    return tuple((n, base + (1 if i < extra else 0)) for i, n in enumerate(nodes))


def _qjob(raw: dict[str, Any], tres: Callable[[str], Mapping[str, float]] | None = None) -> QJob:
    """`tres`: reads a TRES string (parse_queue's shares one read among identical strings)."""
    tres = tres or tres_numbers
    q = parse_job(raw)  # the shared reader of both JSON shapes; ValueError without an id
    try:
        nodes = tuple(expand(q.nodes)) if q.nodes and q.state in HOLDING else ()
    except HostlistError:
        nodes = ()
    uid = json_number(raw.get("user_id"))
    limit = None if q.time_limit_min is None else q.time_limit_min * 60.0
    eligible = json_number(raw.get("eligible_time"))
    tres_alloc = tres(_text(raw.get("tres_alloc_str"))) if q.state in HOLDING else {}
    return QJob(
        job_id=q.job_id, name=q.name, state=q.state, reason=q.reason or "None", user=q.user,
        user_id=None if uid is None else int(uid), account=_text(raw.get("account")),
        qos=_text(raw.get("qos")), partition=q.partition, priority=json_number(raw.get("priority")) or 0.0,
        submit=q.submit_time, eligible=eligible or None, start=q.start_time, limit_s=limit, nodes=nodes,
        node_count=q.node_count, tres_per_node=q.tres_per_node, features=q.features,
        tres_req=tres(_text(raw.get("tres_req_str"))),
        tres_alloc=tres_alloc,
        gres_detail=q.gres_detail, admin_comment=q.admin_comment, dependency=_text(raw.get("dependency")),
        queued=q, max_nodes=int(json_number(raw.get("max_nodes")) or 0),
        cpus_by_node=_alloc_cpus(raw, nodes, tres_alloc.get("cpu") or json_number(raw.get("cpus")) or 0.0)
        if nodes else (), last_eval=json_number(raw.get("last_sched_evaluation")) or None)


def parse_queue(text: str) -> list[QJob]:
    """Every job of a `squeue --json` answer (a malformed entry costs that job only).

    >>> text = '{"jobs": [{"job_id": 7, "job_state": "PENDING", "state_reason": "Priority"}, {}]}'
    >>> parse_queue(text)[0].reason
    'Priority'
    """
    if len(text) > MAX_JSON_BYTES:
        raise ValueError(f"squeue --json answer of {len(text)} bytes is too large")
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ValueError("squeue --json answer has no jobs list")
    out = []
    # A queue repeats a few request strings thousands of times (arrays, scripted sweeps): each
    # is read once, and its numbers shared read-only.
    seen: dict[str, Mapping[str, float]] = {}

    def tres(text: str) -> Mapping[str, float]:
        got = seen.get(text)
        if got is None:
            got = seen[text] = MappingProxyType(tres_numbers(text))
        return got

    for raw in doc["jobs"]:
        if not isinstance(raw, dict):
            continue
        try:
            out.append(_qjob(raw, tres))
        except ValueError:
            continue
    return out


def parse_limit_rows(text: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    """`sacctmgr -n -P` rows as dicts; a line of another width is skipped.

    >>> parse_limit_rows("gold|500|gres/gpu:h100=4\\nbad\\n", ("Name", "Priority", "GrpTRES"))
    [{'Name': 'gold', 'Priority': '500', 'GrpTRES': 'gres/gpu:h100=4'}]
    """
    rows = []
    for line in text.splitlines():
        values = line.split("|")
        if len(values) == len(fields):
            rows.append(dict(zip(fields, (v.strip() for v in values), strict=True)))
    return rows


def parse_qos_limits(text: str) -> dict[str, dict[str, str]]:
    """`sacctmgr_qos_limits_argv()` output → {QoS name: {field: value}}."""
    return {r["Name"]: r for r in parse_limit_rows(text, QOS_LIMIT_FIELDS) if r["Name"]}


def parse_start(text: str, job_id: int) -> float | None:
    """slurmctld's expected start of `job_id` from `squeue --start -h -o "%i %S"` under
    SLURM_TIME_FORMAT=%s (`N/A` or nothing: no estimate).

    >>> parse_start("12 1796108800\\n13 N/A\\n", 12), parse_start("13 N/A", 13)
    (1796108800.0, None)
    """
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == str(job_id) and parts[1].isdigit() and int(parts[1]) > 0:
            return float(parts[1])
    return None


def parse_slurm_user_uid(text: str) -> int | None:
    """The SlurmUser's uid from `scontrol show config` (`SlurmUser = slurm(64030)`).

    >>> parse_slurm_user_uid("ClusterName = demo\\nSlurmUser               = root(0)\\n")
    0
    """
    m = re.search(r"^SlurmUser\s*=\s*\S*\((\d+)\)\s*$", text, re.MULTILINE)
    return int(m.group(1)) if m else None


# ---- the site as `why` reads it --------------------------------------------------------------


@dataclass(frozen=True)
class SiteView:
    site: Site
    models: dict[str, AccelModel]  # in use, by id
    by_gres: dict[tuple[str, str], str]  # (GRES name, type) → model id
    pools: dict[str, Pool]
    node_group: dict[str, NodeGroup]
    groups: dict[str, tuple[str, ...]]  # --accel group word → model ids, as the bridge has them


def site_view(site: Site) -> SiteView:
    models = {m.id: m for m in site.models_in_use}
    by_gres: dict[tuple[str, str], str] = {}
    for m in models.values():
        by_gres[(m.gres_name, m.gres_type)] = m.id
        by_gres.setdefault((m.gres_name, m.id), m.id)
    # conf/bridge.py's MODEL_GROUPS: every model, then each vendor's and each stack's.
    groups: dict[str, list[str]] = {"any": list(models)}
    for m in models.values():
        for word in (m.vendor, m.stack):
            groups.setdefault(word, []).append(m.id)
    node_group = {n: g for g in site.node_groups for n in g.nodes}
    return SiteView(site, models, by_gres, {p.key: p for p in pools(site)}, node_group,
                    {k: tuple(v) for k, v in groups.items()})


def _gres_items(tres_per_node: str) -> list[tuple[str, str, int]]:
    """(name, type, count per node) of `gres:gpu:h100:2` / `gres/npu:1` items.

    >>> _gres_items("gres:gpu:h100:2,gres/npu:1,license:x:1")
    [('gpu', 'h100', 2), ('npu', '', 1)]
    """
    out = []
    for item in tres_per_node.split(","):
        parts = item.strip().replace("gres/", "gres:", 1).split(":")
        if len(parts) in (3, 4) and parts[0] == "gres" and parts[-1].isdigit():
            out.append((parts[1], parts[2] if len(parts) == 4 else "", int(parts[-1])))
    return out


@dataclass(frozen=True)
class Need:
    """The devices a job asks for: `per_node` of one model on each of `nodes` nodes, in one of
    `pools` (several when the request leaves the model or arch open)."""

    pools: tuple[str, ...]
    per_node: int
    nodes: int
    gres: str  # the GRES name (gpu, npu)
    gres_type: str  # "" when untyped

    @property
    def devices(self) -> int:
        return self.per_node * self.nodes


def job_need(job: QJob, view: SiteView) -> Need | None:
    """What accelerators `job` waits for (None: none). The model comes from its GRES type, or
    from the model's node feature that pins an untyped request (the bridge's movable jobs);
    the arch from its features; the pools are those of its partition."""
    items = [i for i in _gres_items(job.tres_per_node) if any(g == i[0] for g, _ in view.by_gres)]
    if not items:
        return None
    name, gtype, count = items[0]
    words = set(_WORD.findall(job.features))
    if gtype:
        mids = [view.by_gres[(name, gtype)]] if (name, gtype) in view.by_gres else []
    else:
        mids = [m for (g, _), m in view.by_gres.items() if g == name]
        mids = list(dict.fromkeys([m for m in mids if m in words] or mids))
    arches = [a for a in ARCHES if a in words] or list(ARCHES)
    keys = [f"{m}@{a}" for m in mids for a in arches if f"{m}@{a}" in view.pools]
    parts = {p for p in job.partition.split(",") if p}
    in_part = [k for k in keys if parts & set(view.pools[k].partitions)]
    return Need(tuple(in_part or keys), count, max(1, job.node_count), name, gtype)


_DETAIL = re.compile(r"^(?P<name>[^:(]+)(?::(?P<type>[^:(]+))?(?::(?P<n>\d+))?(?:\((?P<paren>[^)]*)\))?$")


def _detail_count(item: str) -> tuple[str, str, int] | None:
    """One `gres_detail` item: `gpu:h100:2(IDX:0-1)` (22.05), `npu:910b(CNT:2)` (24.11).

    >>> _detail_count("gpu:h100:2(IDX:0-1)"), _detail_count("npu:910b(CNT:2)")
    (('gpu', 'h100', 2), ('npu', '910b', 2))
    """
    m = _DETAIL.match(item.strip())
    if not m:
        return None
    n = m["n"]
    if n is None and m["paren"] and m["paren"].startswith("CNT:"):
        n = m["paren"][4:]
    return (m["name"], m["type"] or "", int(n)) if n and n.isdigit() else None


def held_devices(job: QJob, view: SiteView) -> list[tuple[str, str, int]]:
    """(node, pool, devices) a job holds: its per-node `gres_detail` where it lines up with its
    nodes, else its allocated TRES split evenly over them, else its per-node request."""
    if not job.nodes:
        return []
    out: list[tuple[str, str, int]] = []

    def add(node: str, name: str, gtype: str, n: int) -> None:
        mid = view.by_gres.get((name, gtype))
        g = view.node_group.get(node)
        if mid is None or g is None or n <= 0:
            return
        key = f"{mid}@{g.architecture}"
        if key in view.pools:
            out.append((node, key, n))

    if len(job.gres_detail) == len(job.nodes):
        for node, detail in zip(job.nodes, job.gres_detail, strict=True):
            for item in re.split(r",(?![^(]*\))", detail):
                got = _detail_count(item)
                if got:
                    add(node, *got)
        if out:
            return out
    typed = {k[5:]: v for k, v in job.tres_alloc.items() if k.startswith("gres/") and ":" in k}
    for name_type, total in typed.items():
        name, _, gtype = name_type.partition(":")
        for node in job.nodes:
            add(node, name, gtype, round(total / len(job.nodes)))
    if out:
        return out
    for name, gtype, n in _gres_items(job.tres_per_node):
        for node in job.nodes:
            add(node, name, gtype or _only_type(view, name, node), n)
    return out


def _only_type(view: SiteView, name: str, node: str) -> str:
    """The GRES type of `name` on `node` (an untyped request gets the node's one model)."""
    g = view.node_group.get(node)
    types = [a.model.gres_type for a in (g.accelerators if g else ()) if a.model.gres_name == name]
    return types[0] if len(types) == 1 else ""


@dataclass(frozen=True)
class NodeFree:
    """Devices of one pool on one node, as sinfo counts them (0 free when not usable)."""

    node: str
    pool: str
    total: int
    free: int


_UNUSABLE = ("drain", "down", "fail", "maint", "reserved", "unknown", "not_responding", "future", "power")


def node_capacity(view: SiteView, sinfo_text: str) -> list[NodeFree]:
    """Per node and pool from `sinfo_capacity_argv()` output: the same reading as the bridge
    daemon's snapshot (bridge/snapshot.py), kept per node for the start estimate."""
    out = []
    seen: set[str] = set()
    for line in sinfo_text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 5:
            continue
        node, state, gres, used, features = fields[:5]
        if node in seen:  # `sinfo -N` prints a node once per partition it is in
            continue
        seen.add(node)
        arch = "aarch64" if "aarch64" in features.split(",") else "x86_64"
        usable = not any(w in state.lower() for w in _UNUSABLE)
        in_use = parse_gres(used)
        for name_type, count in parse_gres(gres).items():
            name, _, gtype = name_type.partition(":")
            mid = view.by_gres.get((name, gtype))
            if mid is None or f"{mid}@{arch}" not in view.pools:
                continue
            free = max(0, count - in_use.get(name_type, 0)) if usable else 0
            out.append(NodeFree(node, f"{mid}@{arch}", count, free))
    return out


# ---- CPU pools: jobs that ask no GPUs/NPUs ------------------------------------------------------


@dataclass(frozen=True)
class CpuGroup:
    """A node group without accelerators, as a CPU job's pool reads it (`cpu@ARCH`, the name
    site.pools.group_pool gives it)."""

    pool: str
    arch: str
    partitions: frozenset[str]
    nodes: tuple[str, ...]
    cpus: int  # per node


def cpu_groups(view: SiteView) -> list[CpuGroup]:
    return [CpuGroup(f"cpu@{g.architecture}", g.architecture, frozenset(g.partitions), tuple(g.nodes), g.cpus)
            for g in view.site.node_groups if not g.accelerators]


@dataclass(frozen=True)
class CpuNeed:
    """The CPUs a job without GPUs/NPUs asks for, in one of `pools` (`cpu@ARCH`: the site's
    CPU-only nodes of that arch in its partition). `nodes` 0: no node count pinned (`-n N`
    alone): Slurm packs it onto the nodes with the most CPUs free, as many as it takes, so it
    can start once its pool has `cpus` free in all (`per_node` is then `cpus`). Else
    `per_node` CPUs on each of `nodes` nodes (-N 1; -N K with its CPUs split evenly)."""

    pools: tuple[str, ...]
    cpus: int
    per_node: int
    nodes: int

    @property
    def spread(self) -> bool:
        return self.nodes == 0


def cpu_need(job: QJob, groups: list[CpuGroup]) -> CpuNeed | None:
    """The CPU pools `job` waits for (None: it asks a GRES, or its partition has no CPU-only
    nodes). The arch from its features, as job_need reads it; other features are not looked at."""
    if _gres_items(job.tres_per_node):
        return None
    words = set(_WORD.findall(job.features)) if job.features else set()
    arches = [a for a in ARCHES if a in words] or list(ARCHES)
    parts = {p for p in job.partition.split(",") if p}
    keys = tuple(dict.fromkeys(g.pool for a in arches for g in groups
                               if g.arch == a and (not parts or parts & g.partitions)))
    if not keys:
        return None
    cpus = max(1, math.ceil(job.tres_req.get("cpu", 0.0) - 1e-9))
    n = max(1, job.node_count)
    if job.max_nodes == 1:
        return CpuNeed(keys, cpus, cpus, 1)
    if n > 1 and job.max_nodes == n:
        return CpuNeed(keys, cpus, math.ceil(cpus / n), n)
    # No node count pinned (or a range, or a minimum only, which this reading leaves out).
    return CpuNeed(keys, cpus, cpus, 0)


def cpu_pool_nodes(groups: list[CpuGroup], pool: str, partition: str) -> dict[str, int]:
    """The nodes of `pool` a job of `partition` may use, with their CPUs."""
    parts = {p for p in partition.split(",") if p}
    return {n: g.cpus for g in groups if g.pool == pool and (not parts or parts & g.partitions)
            for n in g.nodes}


def cpu_capacity(nodes: Mapping[str, int], pool: str, sinfo_text: str,
                 jobs: Iterable[QJob]) -> list[NodeFree]:
    """Free CPUs per node of a CPU pool: the node's CPUs (the site's) less those every holding
    job has there (squeue's allocation, whatever the job asked); 0 on a node sinfo shows in
    a state that takes no new job (down, drained, ...). A node sinfo does not list is left out."""
    held: dict[str, int] = {}
    for j in jobs:
        if j.holding:
            for node, n in j.cpus_by_node:
                if node in nodes:
                    held[node] = held.get(node, 0) + n
    usable = usable_nodes(sinfo_text)
    return [NodeFree(node, pool, nodes[node],
                     max(0, nodes[node] - held.get(node, 0)) if node in usable else 0)
            for node in _sinfo_states(sinfo_text) if node in nodes]


def _sinfo_states(sinfo_text: str) -> dict[str, str]:
    """Node → state of `sinfo_capacity_argv()` lines (a node once, as its first line shows it)."""
    out: dict[str, str] = {}
    for line in sinfo_text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 5 and fields[0] not in out:
            out[fields[0]] = fields[1]
    return out


def usable_nodes(sinfo_text: str) -> set[str]:
    """The nodes sinfo shows in a state that takes new jobs (node_capacity's reading).

    >>> sorted(usable_nodes("a|idle|||f|\\nb|drained|||f|\\nc|down*|||f|\\nd|mixed|||f|\\n"))
    ['a', 'd']
    """
    return {n for n, state in _sinfo_states(sinfo_text).items()
            if not any(w in state.lower() for w in _UNUSABLE)}


def cpu_holders(jobs: Iterable[QJob], nodes: Mapping[str, int], now: float) -> list[Holder]:
    """The jobs holding CPUs on `nodes`, earliest expected end first (`devices`: their CPUs there)."""
    out = []
    for j in jobs:
        if not j.holding:
            continue
        held = [(n, c) for n, c in j.cpus_by_node if n in nodes and c > 0]
        if held:
            out.append(_holder(j, held, now))
    return sorted(out, key=lambda h: (h.expected_end or math.inf, h.job_id))


# ---- times: by the limit, by the prediction ---------------------------------------------------


@dataclass(frozen=True)
class Holder:
    """A job holding devices of the pool."""

    job_id: int
    user: str
    qos: str
    devices: int
    nodes: tuple[str, ...]
    start: float | None
    ends_by_limit: float | None
    ends_p50: float | None
    ends_p90: float | None
    shortened_to_p90: bool  # the bridge set its limit to p90 and extends it on need
    expected_end: float | None  # see `expected_end`
    ends_by_own_limit: float | None = None  # its user's own limit (`own_limit_s`)
    ends: tuple[float | None, ...] = ()  # per SCENARIOS, see `end_by`

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job_id, "user": self.user, "qos": self.qos, "devices": self.devices,
                "nodes": list(self.nodes), "start": self.start, "ends_by_limit": self.ends_by_limit,
                "ends_by_own_limit": self.ends_by_own_limit, "ends_p50": self.ends_p50,
                "ends_p90": self.ends_p90, "limit_shortened_to_p90": self.shortened_to_p90,
                "expected_end": self.expected_end,
                "likely_end": self.ends[SCENARIOS.index("likely")] if self.ends else None}


def _pred(comment: dict[str, Any]) -> tuple[float | None, float | None]:
    pred = comment.get("pred")
    if not isinstance(pred, dict):
        return None, None
    return tuple(  # type: ignore[return-value]
        float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None
        for v in (pred.get("p50"), pred.get("p90")))


def holders(jobs: Iterable[QJob], view: SiteView, pool: str, now: float) -> list[Holder]:
    """The jobs holding devices of `pool`, earliest expected end first."""
    out = []
    for j in jobs:
        if not j.holding:
            continue
        held = [(n, c) for n, p, c in held_devices(j, view) if p == pool]
        if not held:
            continue
        out.append(_holder(j, held, now))
    return sorted(out, key=lambda h: (h.expected_end or math.inf, h.job_id))


def _holder(j: QJob, held: list[tuple[str, int]], now: float) -> Holder:
    comment = j.comment
    p50, p90 = _pred(comment)
    start = j.start
    own = own_limit_s(j)
    return Holder(
        j.job_id, j.user, j.qos, sum(c for _, c in held), tuple(n for n, _ in held), start,
        start + j.limit_s if start and j.limit_s else None,
        start + p50 if start and p50 else None, start + p90 if start and p90 else None,
        _asked_min(comment) is not None, expected_end(j, now), start + own if start and own else None,
        tuple(end_by(j, now, sc) for sc in SCENARIOS))


def simulate_starts(free: dict[str, int], releases: Iterable[tuple[float, str, int]],
                    queue: list[tuple[int, int, float | None]], now: float) -> list[float | None]:
    """When each job of `queue` (per node, nodes, duration or None for no end), in priority
    order, could start on nodes with `free` units (devices, CPUs) now and `releases` (time,
    node, units) to come, if none may pass another (no backfill). None: never, as far as these
    ends tell. `nodes` 0: `per_node` units in all, on any nodes, those with the most free
    first (Slurm's packing of `-n N` with no node count).

    >>> simulate_starts({"a": 0, "b": 1}, [(100.0, "a", 2)], [(2, 1, 50.0), (2, 1, None), (1, 1, None)], 0.0)
    [100.0, 150.0, 150.0]
    >>> simulate_starts({"a": 3, "b": 2}, [(100.0, "a", 5)], [(4, 0, 50.0), (4, 1, None), (6, 0, None),
    ...                                                  (1, 0, None)], 0.0)
    [0.0, 100.0, 100.0, None]
    """
    free = dict(free)
    events = [(t, i, node, n) for i, (t, node, n) in enumerate(releases)]
    heapq.heapify(events)
    seq = len(events)
    cursor = now
    starts: list[float | None] = []
    for per_node, nodes, duration in queue:
        if nodes == 0:  # spread: enough in all
            while sum(v for v in free.values() if v > 0) < per_node:
                if not events:
                    return starts + [None] * (len(queue) - len(starts))
                t, _, node, n = heapq.heappop(events)
                cursor = max(cursor, t)
                free[node] = free.get(node, 0) + n
            left = per_node
            for node in sorted((n for n, v in free.items() if v > 0), key=lambda n: (-free[n], n)):
                take = min(free[node], left)
                free[node] -= take
                left -= take
                if duration is not None:
                    seq += 1
                    heapq.heappush(events, (cursor + duration, seq, node, take))
                if left <= 0:
                    break
            starts.append(cursor)
            continue
        while sum(1 for v in free.values() if v >= per_node) < nodes:
            if not events:
                # Nothing frees enough: this job and every one after it waits on ends we cannot see.
                return starts + [None] * (len(queue) - len(starts))
            t, _, node, n = heapq.heappop(events)
            cursor = max(cursor, t)
            free[node] = free.get(node, 0) + n
        chosen = sorted((n for n, v in free.items() if v >= per_node), key=lambda n: (free[n], n))[:nodes]
        for node in chosen:
            free[node] -= per_node
            if duration is not None:
                seq += 1
                heapq.heappush(events, (cursor + duration, seq, node, per_node))
        starts.append(cursor)
    return starts


# ---- limits behind a limit reason -------------------------------------------------------------


@dataclass(frozen=True)
class LimitFact:
    """One limit that may hold the job: where it is set, its value, and its use now."""

    where: str  # "QoS gold", "account root", "user alice in account root"
    field: str  # the sacctmgr field, e.g. GrpTRES
    value: str  # as sacctmgr prints it
    use: dict[str, float]  # per TRES key (or "jobs"): held now in the limit's scope
    need: dict[str, float]  # per TRES key: what this job asks
    binding: tuple[str, ...]  # keys where use + need passes the cap
    # When enough of the running jobs it counts end (p50, else limit) for the job to fit under
    # it; None where not foreseeable (per-job limits, minutes slurmdbd keeps, no end known).
    frees_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "field": self.field, "value": self.value, "use": self.use,
                "need": self.need, "binding": list(self.binding), "frees_at": self.frees_at}

    def text(self) -> str:
        parts = []
        for key, cap in tres_numbers(self.value).items():
            if key in self.use or key in self.need:
                parts.append(f"{key}={cap:g} ({self.use.get(key, 0):g} in use, this job asks "
                             f"{self.need.get(key, 0):g})" + (" ← full" if key in self.binding else ""))
        if "jobs" in self.use:
            parts.append(f"{self.value} ({self.use['jobs']:g} now)")
        return f"{self.where} {self.field}: " + ("; ".join(parts) or self.value)


def _scope_jobs(jobs: Iterable[QJob], job: QJob, qos: str | None, per: str, account: str | None,
                user: str | None) -> list[QJob]:
    return [j for j in jobs if j.job_id != job.job_id and j.holding
            and (qos is None or j.qos == qos) and (account is None or j.account == account)
            and (user is None or j.user == user)
            and (per != "User" or j.user == job.user) and (per != "Account" or j.account == job.account)]


def _need_for(job: QJob, field_name: str) -> dict[str, float]:
    need = dict(job.tres_req)
    minutes = (job.limit_s or 0.0) / 60.0
    if field_name == "MaxTRESPerNode":
        return {k: v / max(1, job.node_count) for k, v in need.items()}
    if field_name.endswith(("Mins", "RunMins")):
        return {k: v * minutes for k, v in need.items()}
    return need


def _use_for(scope: list[QJob], field_name: str, now: float) -> dict[str, float]:
    use: dict[str, float] = {}
    for j in scope:
        left = max(0.0, (j.start or now) + (j.limit_s or 0.0) - now) / 60.0
        for k, v in j.tres_alloc.items():
            use[k] = use.get(k, 0.0) + (v * left if field_name == "GrpTRESRunMins" else v)
    return use


def tres_fact(where: str, field_name: str, value: str, job: QJob, scope: list[QJob] | None,
              now: float, prefix: str | None = None) -> LimitFact | None:
    """How a TRES limit stands for `job` (None when it sets nothing the job asks for). `scope`:
    the jobs whose use counts (None for per-job limits and for minutes slurmdbd keeps)."""
    caps = tres_numbers(value)
    need = _need_for(job, field_name)
    keys = [k for k in caps if k in need and (prefix is None or k.startswith(prefix))]
    if not keys:
        return None
    use = _use_for(scope, field_name, now) if scope is not None else {}
    binding = tuple(k for k in keys if use.get(k, 0.0) + need[k] > caps[k] + 1e-9)
    frees_at = None
    if binding and scope is not None and field_name in ("GrpTRES", "MaxTRESPU", "MaxTRESPA"):
        left = {k: use.get(k, 0.0) for k in binding}
        for end, j in sorted(((e, j) for j in scope if (e := expected_end(j, now)) is not None),
                             key=lambda x: (x[0], x[1].job_id)):
            for k in binding:
                left[k] -= j.tres_alloc.get(k, 0.0)
            if all(left[k] + need[k] <= caps[k] + 1e-9 for k in binding):
                frees_at = end
                break
    return LimitFact(where, field_name, value, {k: use.get(k, 0.0) for k in keys},
                     {k: need[k] for k in keys}, binding, frees_at)


# Our three estimates, each from its own end of every running job (`end_by`) and its own
# length of every job ahead (`_duration`). "likely" is the one shown as ours: measured on a
# KTH-SP2 replay and the campaigns' 2,048 predicted jobs, a running job ends after its p50
# end 40 % of the time (at most as often as it ends before) but after its p90 end 23 %, and
# the one job in the way decides the start of every job behind it: an estimate from p50 ends
# was hours early for 20 of 28 jobs when one such job ran past its p90
# (benchmarks/results/why-estimates-kth.json). The jobs ahead run their p50: their lengths add
# up, and a sum of many is near the sum of their typical lengths.
SCENARIOS = ("earliest", "likely", "latest")


def _asked_min(comment: Mapping[str, Any]) -> float | None:
    """The limit the user asked, in minutes, where the bridge shortened it (bridge.lua records
    `"shortened":true,"user_limit_min":N` beside `pred`); None for a job it did not shorten."""
    asked = json_number(comment.get("user_limit_min")) if comment.get("shortened") is True else None
    return asked if asked and asked > 0 else None


def own_limit_s(j: QJob) -> float | None:
    """The user's own time limit: where the bridge shortened the job's limit to its p90 (the
    daemon extends it on need, up to this) the one the user asked, else the job's limit."""
    asked = _asked_min(j.comment)
    return max(j.limit_s or 0.0, asked * 60.0 if asked else 0.0) or None


def end_by(j: QJob, now: float, scenario: str = "earliest") -> float | None:
    """A running job's end still ahead, in one of SCENARIOS: earliest, its p50 end, then its
    p90's, its limit's, its own limit's (`own_limit_s`); likely, from its p90 end on; latest,
    its own limit's end. Now when every one has passed; None without a start or a limit.

    >>> c = '{"hetero": 1, "pred": {"p50": 600, "p90": 1800}, "shortened": true, "user_limit_min": 60}'
    >>> j = parse_queue(json.dumps({"jobs": [{"job_id": 1, "job_state": "RUNNING", "start_time": 1000,
    ...                                       "time_limit": 30, "admin_comment": c}]}))[0]
    >>> [end_by(j, 1100.0, s) for s in SCENARIOS], [end_by(j, 1900.0, s) for s in SCENARIOS]
    ([1600.0, 2800.0, 4600.0], [2800.0, 2800.0, 4600.0])
    >>> end_by(j, 3000.0), end_by(j, 5000.0)
    (4600.0, 5000.0)
    """
    if not j.start:
        return None
    p50, p90 = _pred(j.comment)
    own = own_limit_s(j)
    limit_end = j.start + j.limit_s if j.limit_s else None
    own_end = j.start + own if own else None
    preds = {"earliest": (p50, p90), "likely": (p90,), "latest": ()}[scenario]
    ends = (*(j.start + p for p in preds if p), limit_end) if scenario != "latest" else ()
    for t in (*ends, own_end):
        if t is not None and t > now:
            return t
    return now if own_end is not None else None


def expected_end(j: QJob, now: float) -> float | None:
    """A running job's earliest end still ahead (`end_by`'s earliest: p50, then p90, then its
    limit, then its user's own), now when all have passed; None without a limit or a start."""
    return end_by(j, now, "earliest")


_TRES_FIELDS = ("GrpTRES", "GrpTRESRunMins", "MaxTRES", "MaxTRESPerNode", "MaxTRESPU", "MaxTRESPA",
                "GrpTRESMins", "MaxTRESMins", "MinTRES")


def qos_facts(qos: str, row: dict[str, str], job: QJob, jobs: list[QJob], now: float,
              fields: Iterable[str] = _TRES_FIELDS, prefix: str | None = None) -> list[LimitFact]:
    """The TRES limits of QoS `qos` (a `parse_qos_limits` row) as they stand for `job`."""
    out = []
    for f in fields:
        value = row.get(f, "")
        if not value:
            continue
        per = {"MaxTRESPU": "User", "MaxTRESPA": "Account"}.get(f, "")
        scope = (None if f in ("MaxTRES", "MaxTRESPerNode", "MaxTRESMins", "GrpTRESMins", "MinTRES")
                 else _scope_jobs(jobs, job, qos, per, None, None))
        fact = tres_fact(f"QoS {qos}", f, value, job, scope, now, prefix)
        if fact is not None:
            out.append(fact)
    return out


def limit_facts(ref: LimitRef, job: QJob, jobs: list[QJob], qos_rows: dict[str, dict[str, str]],
                assoc_rows: list[dict[str, str]], now: float) -> list[LimitFact]:
    """The limits a limit reason points at, with their use now."""
    f = ref.sacctmgr_field
    out: list[LimitFact] = []
    if ref.source == "QOS":
        row = qos_rows.get(job.qos, {})
        scope = _scope_jobs(jobs, job, job.qos, ref.per, None, None)
        places = [(f"QoS {job.qos}", row, scope)] if row else []
    else:
        places = []
        for r in assoc_rows:
            if r.get("Account") != job.account or r.get("User") not in ("", job.user):
                continue
            user = r.get("User") or None
            where = f"user {user} in account {job.account}" if user else f"account {job.account}"
            places.append((where, r, _scope_jobs(jobs, job, None, "", job.account, user)))
    for where, row, scope in places:
        value = row.get(f, "")
        if not value:
            continue
        if ref.tres_prefix is not None:
            per_job = f in ("MaxTRES", "MaxTRESPerNode", "MaxTRESMins", "GrpTRESMins", "MinTRES")
            fact = tres_fact(where, f, value, job, None if per_job else scope, now, ref.tres_prefix)
            if fact is not None:
                out.append(fact)
        elif ref.resource == "Jobs" or ref.resource.startswith("Submit"):
            counted = [j for j in jobs if j.job_id != job.job_id
                       and (j.holding or (ref.resource != "Jobs" and j.pending))
                       and (ref.source != "QOS" or j.qos == job.qos)
                       and (ref.scope == "Grp" or j.user == job.user)]
            cap = json_number(_int_or_none(value))
            out.append(LimitFact(where, f, value, {"jobs": float(len(counted))}, {"jobs": 1.0},
                                 ("jobs",) if cap is not None and len(counted) + 1 > cap else ()))
        else:
            out.append(LimitFact(where, f, value, {}, {}, ()))
    return out


def _int_or_none(text: str) -> int | None:
    return int(text) if text.isdigit() else None


# ---- suggestions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    kind: str  # model, fewer, time, tier, release
    what: str
    command_hint: str
    options: tuple[str, ...]  # the options to use in place of the job's own (empty: none)
    checked_against: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "what": self.what, "command_hint": self.command_hint,
                "options": list(self.options), "checked_against": list(self.checked_against)}


@dataclass(frozen=True)
class Request:
    """What the user asked for, as `why` can tell: the option, the models it allows."""

    text: str  # "--accel=a100-80gb:2" or "--gres=gpu:h100:2"
    models: tuple[str, ...]
    arch: str  # "" for any
    mem_mib: int  # device memory floor (--accel ...,mem>=)
    units: float  # --accel=units=U, else 0
    bridge: bool


_MEM_FLOOR = re.compile(r",mem>=(\d+)([KMGT]?)B?$", re.IGNORECASE)


def job_request(job: QJob, need: Need, view: SiteView) -> Request:
    """The user's request behind `need`: the bridge's record of --accel where it has one."""
    comment = job.comment
    arch = str(comment["arch"]) if isinstance(comment.get("arch"), str) else ""
    accel = comment.get("accel")
    if comment.get("hetero") == 1 and isinstance(accel, str):
        mem = 0
        m = _MEM_FLOOR.search(accel)
        if m:  # the bridge records the floor as it read it (bridge.lua MEM_MIB): MiB, k rounded up
            n, unit = int(m.group(1)), m.group(2).upper()
            mem = -(-n // 1024) if unit == "K" else n * {"": 1, "M": 1, "G": 1024, "T": 1 << 20}[unit]
        head = _MEM_FLOOR.sub("", accel)
        if head.startswith("units="):
            try:
                units = float(head[6:])
            except ValueError:
                units = 0.0
            return Request(f"--accel={accel}", view.groups.get("any", ()), arch, mem, units, True)
        name = head.split(":")[0].lower()
        alias = {m.gres_type: m.id for m in view.models.values()}
        mid = alias.get(name, name)
        models = (mid,) if mid in view.models else view.groups.get(name, ())
        return Request(f"--accel={accel}", models, arch, mem, 0.0, True)
    models = tuple(dict.fromkeys(view.pools[k].model for k in need.pools))
    return Request(f"--gres={_gres_spec(need, need.per_node)}", models, "", 0, 0.0, False)


def _gres_spec(need: Need, n: int) -> str:
    return f"{need.gres}:{need.gres_type}:{n}" if need.gres_type else f"{need.gres}:{n}"


def _broader(models: tuple[str, ...], view: SiteView) -> tuple[str, tuple[str, ...]]:
    """The narrowest --accel group the site defines that holds every model of a request
    and at least one more: its vendor's, then its stack's. ("", ()) when none does. Never
    `any`: a program built for one stack (CUDA) does not run on another's devices (CANN)."""
    first = view.models.get(models[0]) if models else None
    if first is None:
        return "", ()
    for word in (first.vendor, first.stack):
        group = view.groups.get(word, ())
        if set(models) <= set(group) and len(group) > len(models):
            return word, group
    return "", ()


def _fits_now(cap: list[NodeFree], pool: str, per_node: int, nodes: int) -> list[NodeFree]:
    """The nodes of `pool` with `per_node` devices free now, if there are `nodes` of them."""
    ok = sorted((c for c in cap if c.pool == pool and c.free >= per_node), key=lambda c: (-c.free, c.node))
    return ok if len(ok) >= nodes else []


def _group_fits(g: NodeGroup, job: QJob) -> bool:
    """Can one node of `g` hold the job's CPUs and memory per node?"""
    n = max(1, job.node_count)
    cpus, mem = job.tres_req.get("cpu", 0.0) / n, job.tres_req.get("mem", 0.0) / n
    return cpus <= g.cpus and mem <= g.memory_mib


def _pool_groups(view: SiteView, pool: str) -> list[NodeGroup]:
    p = view.pools[pool]
    return [g for g in view.site.node_groups if g.architecture == p.arch
            and any(a.model.id == p.model for a in g.accelerators)]


def suggest_models(job: QJob, need: Need, req: Request, view: SiteView, caps: dict[str, PoolCapacity],
                   cap: list[NodeFree], checked: str,
                   limits_for: Callable[[QJob], list[LimitFact]] | None = None) -> list[Suggestion]:
    """Pools of other models (or the other arch) that the job's own request, or the site's
    next broader --accel group, allows and that have the devices free on one node now;
    with `limits_for` (a GRES limit holds the job), only where that limit has room for the
    job on the other model."""
    own = set(need.pools)
    word, group = _broader(req.models, view)
    allowed = list(dict.fromkeys([*req.models, *group]))
    found = []
    for key, p in view.pools.items():
        m = view.models[p.model]
        if key in own or p.model not in allowed or (req.arch and p.arch != req.arch):
            continue
        if req.mem_mib and m.device_memory_mib < req.mem_mib:
            continue
        n = max(1, math.ceil(req.units / m.units - 1e-9)) if req.units else need.per_node
        if n > p.per_node:
            continue  # the bridge's rule: a job's devices per node must fit on one node
        free_nodes = _fits_now(cap, key, n, need.nodes)
        groups = [g for g in _pool_groups(view, key) if _group_fits(g, job)]
        if not free_nodes or not groups:
            continue
        room: list[str] = []
        if limits_for is not None:
            # The same job on this model: its GRES counted under the model's TRES names.
            devices = float(n * need.nodes)
            tres = {k: v for k, v in job.tres_req.items() if not k.startswith(f"gres/{need.gres}")}
            tres |= {f"gres/{m.gres_name}": devices, f"gres/{m.gres_name}:{m.gres_type}": devices}
            facts = limits_for(dataclasses.replace(job, tres_req=tres))
            if any(f.binding for f in facts):
                continue
            room = [f.text() for f in facts]
        found.append((n * m.units, key, p, m, n, free_nodes, groups, room))
    out = []
    for _, key, p, m, n, free_nodes, groups, room in sorted(found, key=lambda f: (f[0], f[1])):
        c = caps.get(key, PoolCapacity())
        options = [f"--accel={m.id}:{n}"]
        if sum(1 for q in view.pools.values() if q.model == p.model) > 1:
            options.append(f"--arch={p.arch}")
        parts = {x for x in job.partition.split(",") if x}
        if parts and not parts & set(p.partitions):
            options.append(f"--partition={p.partitions[0]}")
        within = p.model in req.models
        first = free_nodes[0]
        what = (f"{key} has {c.free} of {c.total} {m.id} free now ({first.free} on {first.node})"
                + (f"; {c.pending} device(s) of it are asked by waiting jobs" if c.pending else "")
                + f": {' '.join(options)} would start there"
                + ("" if within else f"; --accel={word}:{need.per_node} lets the bridge choose among the "
                   f"site's {word} models ({', '.join(group)})")
                + f" — in place of {req.text}")
        source = "your request" if within else f"the --accel={word} group"
        why_ok = [checked, f"site: {m.id} is one of {source}; {n} device(s) per node fit its nodes "
                  f"({p.per_node} per node)"]
        if req.mem_mib:
            why_ok.append(f"site: {m.id} has {m.memory_gb} GB per device (you asked at least "
                          f"{req.mem_mib // 1024} GB)")
        cpu, mem = job.tres_req.get("cpu"), job.tres_req.get("mem")
        if cpu or mem:
            g = groups[0]
            why_ok.append(f"site: {g.names} have {g.cpus} CPUs and {g.memory_mib // 1024} GB per node for "
                          f"the job's {cpu or 0:g} CPUs and {(mem or 0) / 1024:g} GB")
        why_ok += room
        out.append(Suggestion("model", what, f"sbatch {' '.join(options)} ... (your script and other "
                              f"options, without {req.text.split('=')[0]})", tuple(options), tuple(why_ok)))
    return out


def suggest_fewer(job: QJob, need: Need, req: Request, cap: list[NodeFree], facts: list[LimitFact],
                  checked: str) -> list[Suggestion]:
    """The most devices below what it asks that one of its pools has free on a node now,
    and that its GRES limits (when one holds it) leave room for."""
    if need.per_node <= 1 or req.units:
        return []
    room = math.inf
    for f in facts:
        for key in f.binding:
            if key.startswith("gres/"):
                top = tres_numbers(f.value).get(key, math.inf)
                room = min(room, (top - f.use.get(key, 0.0)) / max(1, need.nodes))
    best, where = 0, ""
    for pool in need.pools:
        per = sorted((c for c in cap if c.pool == pool), key=lambda c: -c.free)
        if len(per) >= need.nodes and min(per[need.nodes - 1].free, need.per_node - 1) > best:
            best = min(per[need.nodes - 1].free, need.per_node - 1)
            where = f"{pool}: " + ", ".join(f"{c.free} free on {c.node}" for c in per[:need.nodes])
    k = int(min(best, room))
    if k < 1:
        return []
    if req.bridge:
        name = req.text.removeprefix("--accel=").split(":")[0].split(",")[0]
        opt = f"--accel={name}:{k}"
    else:
        opt = f"--gres={_gres_spec(need, k)}"
    what = (f"{k} device(s) per node are free now where it may run (it asks {need.per_node}): "
            f"{opt} may start at once, if your program can use {k}")
    why_ok = [f"{checked} ({where})"] + ([f.text() for f in facts if f.binding] if room < math.inf else [])
    return [Suggestion("fewer", what, f"sbatch {opt} ... (in place of {req.text})", (opt,), tuple(why_ok))]


def _minutes_text(seconds: float) -> str:
    """A --time value: whole minutes, `H:MM:00` from an hour.

    >>> _minutes_text(3000), _minutes_text(5400)
    ('50', '1:30:00')
    """
    m = int(seconds // 60)
    return str(m) if m < 60 else f"{m // 60}:{m % 60:02d}:00"


def suggest_time(job: QJob, reason: Reason, need: Need | CpuNeed | None, cap: list[NodeFree], ahead: int,
                 ahead_starts: list[float], pool_holders: list[Holder], facts: list[LimitFact],
                 view: SiteView, now: float, checked: str, fits_now: bool | None = None,
                 unit: str = "devices") -> list[Suggestion]:
    """A time limit that lets it start: the partition's or QoS's maximum when its limit is
    above it; or a backfill window: devices (`unit`) are free now but kept for `ahead` jobs
    ahead of it in its pool (`ahead_starts`: Slurm's planned starts of those that have one).
    `fits_now`: whether what it asks is free now (None: `cap` tells, per node)."""
    out = []
    hint = f"scontrol update jobid={job.job_id} TimeLimit="
    if reason.code == "PartitionTimeLimit":
        part = next((p for p in view.site.partitions if p.name in job.partition.split(",")), None)
        top = parse_duration_s(part.max_time) if part else None
        if part and top and job.limit_s and job.limit_s > top:
            t = _minutes_text(top)
            out.append(Suggestion("time", f"partition {part.name} allows at most {part.max_time}: ask "
                                  f"--time={t} or less", hint + t, (f"--time={t}",),
                                  (f"site: partition {part.name} max_time {part.max_time}",)))
    for f in facts:
        if f.field == "MaxWall":
            top = parse_duration_s(f.value)
            if top and job.limit_s and job.limit_s > top:
                t = _minutes_text(top)
                out.append(Suggestion("time", f"{f.where} allows at most {f.value} per job: ask "
                                      f"--time={t} or less", hint + t, (f"--time={t}",),
                                      (f"{f.where} MaxWall {f.value}",)))
    if need is None or reason.code not in ("Resources", "Priority") or not job.limit_s or not ahead:
        return out  # with no job ahead in its pool, free devices are kept for nobody
    if fits_now is None:
        fits_now = any(_fits_now(cap, p, need.per_node, need.nodes) for p in need.pools)
    if not fits_now:
        return out  # nothing free: no shorter limit starts it before the devices come back
    # Backfill plans with time limits: the free devices are promised to the job ahead at
    # Slurm's estimate of its start, else when the next limit in the pool runs out.
    ends = [h.ends_by_limit for h in pool_holders if h.ends_by_limit and h.ends_by_limit > now]
    window_end = min(ahead_starts) if ahead_starts else (min(ends) if ends else None)
    if window_end is None:
        return out
    gap = window_end // BF_RESOLUTION_S * BF_RESOLUTION_S - BF_INTERVAL_S - now
    p50 = _pred(job.comment)[0]
    if gap < MIN_GAP_S or job.limit_s <= gap or (p50 is not None and p50 > gap):
        return out
    t = _minutes_text(gap)
    basis = ("Slurm's estimated start of the job ahead" if ahead_starts
             else "the next time limit there runs out")
    what = (f"may start sooner with --time={t}: {unit} it needs are free now until about "
            f"{_clock(window_end)} ({basis}); backfill may start a job that ends by then, if Slurm's "
            "next backfill pass finds it fits (Slurm's decision, not ours)")
    if p50 is not None:
        what += f"; your predicted run is {fmt.duration(p50)}"
    return [*out, Suggestion("time", what, hint + t, (f"--time={t}",),
                             (checked, "squeue: time limits and expected starts in the pool"))]


def suggest_tiers(job: QJob, reason: Reason, need: Need | None, jobs: list[QJob],
                  qos_rows: dict[str, dict[str, str]], allowed: set[str] | None, view: SiteView,
                  now: float) -> list[Suggestion]:
    """Other tiers of the site whose caps leave room for this job now (for QoS-limit reasons)."""
    ref = reason.limit
    if ref is None or ref.source != "QOS" or ref.tres_prefix is None:
        return []
    out = []
    views = {v.name: v for v in tier_views(view.site)}
    for tier in sorted(view.site.qos, key=lambda t: -t.priority):
        if tier.name == job.qos or tier.name not in qos_rows:
            continue
        if allowed is not None and tier.name not in allowed:
            continue
        facts = qos_facts(tier.name, qos_rows[tier.name], job, jobs, now,
                          fields=("GrpTRES", "MaxTRES", "MaxTRESPerNode", "MaxTRESPU", "MaxTRESPA"))
        if any(f.binding for f in facts):
            continue
        v = views[tier.name]
        what = (f"tier {tier.name} has room now (priority {tier.priority}, usage factor "
                f"{tier.usage_factor:g}; {v.fate()})")
        checked = [f.text() for f in facts] or [f"QoS {tier.name}: no TRES limit on what this job asks"]
        checked.append("site: the tier is one of " + ", ".join(t.name for t in view.site.qos))
        if allowed is not None:
            checked.append("sacctmgr: your association may use QoS " + ", ".join(sorted(allowed)))
        out.append(Suggestion("tier", what, f"sbatch --tier={tier.name} ... (or --qos={tier.name})",
                              (f"--tier={tier.name}",), tuple(checked)))
    return out


# ---- the answer -------------------------------------------------------------------------------


@dataclass
class Why:
    job_id: int
    name: str
    user: str
    state: str
    partition: str
    qos: str
    reason: Reason | None
    limits: list[LimitFact] = field(default_factory=list)
    pool: dict[str, Any] | None = None
    estimates: dict[str, Any] = field(default_factory=dict)
    suggestions: list[Suggestion] = field(default_factory=list)
    waited_s: float | None = None
    bridge: dict[str, Any] | None = None
    times: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    checked_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        reason: dict[str, Any] | None = None
        if self.reason is not None:
            reason = {"code": self.reason.code, "kind": self.reason.kind, "words": self.reason.words}
            if self.limits:
                reason["limit"] = [f.as_dict() for f in self.limits]
        return {"job": self.job_id, "name": self.name, "user": self.user, "state": self.state,
                "partition": self.partition, "qos": self.qos, "reason": reason, "pool": self.pool,
                "estimates": self.estimates, "suggestions": [s.as_dict() for s in self.suggestions],
                "waited_s": self.waited_s, "bridge": self.bridge, "times": self.times, "notes": self.notes,
                "checked_at": self.checked_at}


def bridge_facts(comment: dict[str, Any]) -> dict[str, Any] | None:
    """What the bridge chose for a job and why, from its admin-comment record."""
    if comment.get("hetero") != 1:
        return None
    out: dict[str, Any] = {k: comment[k] for k in ("accel", "arch", "tier", "model", "pool", "n", "units",
                                                   "why", "candidates", "cands") if k in comment}
    if isinstance(comment.get("why"), str):
        out["why_words"] = BRIDGE_WHY.get(comment["why"], "")
    p50, p90 = _pred(comment)
    if p50 is not None:
        out["pred"] = {"p50": p50, "p90": p90}
        if (asked := _asked_min(comment)) is not None:
            out["user_limit_min"] = asked
    return out


@dataclass(frozen=True)
class Inputs:
    """Everything `why` read (the pure part's arguments)."""

    job: QJob | None  # slurmctld's view, while it lists the job
    record: JobRecord | None  # slurmdbd's, for a job slurmctld no longer lists (or ended)
    jobs: list[QJob]  # the whole queue
    sinfo_text: str | None = None
    qos_rows: dict[str, dict[str, str]] | None = None
    assoc_rows: list[dict[str, str]] | None = None
    start_text: str | None = None


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def when(t: float | None, now: float) -> str:
    """A time as people read it beside now: `14:05:00 (in 12m30s)`."""
    if t is None:
        return fmt.MISSING
    same_day = time.localtime(t)[:3] == time.localtime(now)[:3]
    day = "" if same_day else time.strftime("%Y-%m-%d ", time.localtime(t))
    rel = f"in {fmt.duration(t - now)}" if t >= now else f"{fmt.duration(now - t)} ago"
    return f"{day}{_clock(t)} ({rel})"


def build_why(inp: Inputs, site: Site, now: float | None = None) -> Why:
    """Pure: the answer for one job from what `fetch` read."""
    now = time.time() if now is None else now
    view = site_view(site)
    job, rec = inp.job, inp.record
    if job is None or not (job.pending or job.holding):
        return _ended(job, rec, now)
    w = Why(job.job_id, job.name, job.user, job.state, job.partition, job.qos, None, checked_at=now)
    comment = job.comment
    w.bridge = bridge_facts(comment)
    w.times = {"submit": job.submit, "eligible": job.eligible, "start": job.start if job.holding else None,
               "limit_s": job.limit_s}
    need = job_need(job, view)
    if job.holding:
        since = job.eligible or job.submit
        w.waited_s = max(0.0, job.start - since) if job.start and since else None
        if need is not None:
            w.pool = {"key": need.pools[0] if len(need.pools) == 1 else None, "candidates": list(need.pools)}
        elif (cpu := cpu_need(job, cpu_groups(view))) is not None:
            w.pool = {"key": cpu.pools[0] if len(cpu.pools) == 1 else None, "candidates": list(cpu.pools),
                      "unit": "CPUs"}
        p50, p90 = _pred(comment)
        w.estimates = {"ends_by_limit": job.start + job.limit_s if job.start and job.limit_s else None,
                       "ends_p50": job.start + p50 if job.start and p50 else None,
                       "ends_p90": job.start + p90 if job.start and p90 else None}
        return w

    since = job.eligible or job.submit
    w.waited_s = max(0.0, now - since) if since else None
    reason = explain_reason(job.reason)
    if reason.code == "None" and job.last_eval and job.last_eval >= (since or 0):
        # Slurm clears the reason while a pass looks at a job: "not looked at yet" would be wrong.
        words = (f"Slurm's scheduler has looked at it (last at {_clock(job.last_eval)}) and set no "
                 "reason yet: the reason shows once its pass is over")
        reason = Reason("None", "wait", words)
    w.reason = reason
    if reason.limit is not None:
        w.limits = limit_facts(reason.limit, job, inp.jobs, inp.qos_rows or {}, inp.assoc_rows or [], now)
        if not w.limits:
            w.notes.append(f"the limit behind {reason.code} could not be read (sacctmgr gave no "
                           f"{reason.limit.sacctmgr_field} for this job's "
                           f"{'QoS' if reason.limit.source == 'QOS' else 'association'})")
    if reason.code == "Dependency" and job.dependency:
        w.notes.append(f"depends on: {job.dependency}")
    if reason.code == "BeginTime" and job.eligible:
        w.notes.append(f"may start from {when(job.eligible, now)}")

    cap, caps = [], {}
    if inp.sinfo_text is not None:
        cap = node_capacity(view, inp.sinfo_text)
        caps = build_snapshot(site, inp.sinfo_text, [j.queued for j in inp.jobs])
    checked = f"live capacity: sinfo and squeue at {_clock(now)}"
    slurm_est = job.start if job.start and job.start > 0 else (
        parse_start(inp.start_text, job.job_id) if inp.start_text else None)
    w.estimates = {"slurm": slurm_est,
                   "slurm_source": ("squeue --json start_time (the scheduler's plan)" if job.start
                                    else "squeue --start" if slurm_est else None),
                   "ours": None, "ours_basis": None}
    if need is None:
        return _why_cpu(w, job, reason, inp, view, now, checked)
    if inp.sinfo_text is None:
        w.notes.append("sinfo did not answer: free devices unknown, so no estimate of ours and no "
                       "suggestion that needs them")

    # The pool: each candidate's holders and our estimate; the earliest is the one shown.
    best: tuple[dict[str, float], str, list[Holder], list[float], str, int] | None = None
    blocked = reason.kind in ("hold", "never", "dependency", "time")
    # Jobs ahead of it that could start (held or blocked ones do not take devices first).
    ahead = [(j, job_need(j, view)) for j in sorted(inp.jobs, key=lambda j: (-j.priority, j.job_id))
             if j.pending and j.job_id != job.job_id and _ahead(j, job)
             and explain_reason(j.reason).kind not in ("hold", "never", "dependency", "time")]
    for pool in need.pools:
        hs = holders(inp.jobs, view, pool, now)
        ahead_here = [(j, n) for j, n in ahead if n is not None and n.pools == (pool,)]
        free = {c.node: c.free for c in cap if c.pool == pool}
        releases = {sc: [(t, node, h.devices // max(1, len(h.nodes)))
                         for h in hs if (t := h.ends[i]) is not None for node in h.nodes]
                    for i, sc in enumerate(SCENARIOS)}
        starts, ahead_starts, basis = _pool_start(free, releases, ahead_here, need.per_node, need.nodes,
                                                  bool(cap), now)
        if best is None or starts["likely"] < best[0]["likely"]:
            best = (starts, pool, hs, ahead_starts, basis, len(ahead_here))
    assert best is not None
    starts, pool, hs, ahead_starts, basis, n_ahead = best
    c = caps.get(pool, PoolCapacity())
    w.pool = {"key": pool, "candidates": list(need.pools), "per_node": need.per_node, "nodes": need.nodes,
              "free": c.free, "total": c.total, "free_max_node": c.free_max_node, "pending": c.pending,
              "running": [h.as_dict() for h in hs]}
    _set_ours(w, reason, blocked, starts, basis, now)
    w.estimates["ahead"] = n_ahead

    if reason.code == "JobHeldUser":
        w.suggestions.append(Suggestion("release", "release the hold: it then waits like any other job",
                                        f"scontrol release {job.job_id}", (),
                                        ("squeue: held by its owner (JobHeldUser)",)))
    req = job_request(job, need, view)
    gres_limit = reason.limit is not None and reason.limit.tres_prefix == "gres/"
    own_free = any(_fits_now(cap, p, need.per_node, need.nodes) for p in need.pools)
    if reason.kind in ("wait", "limit") and (gres_limit or not own_free):
        # Its own pool has the devices: another pool helps only past a per-model GRES limit.
        ref = reason.limit

        def limits_for(alt: QJob) -> list[LimitFact]:
            assert ref is not None
            return limit_facts(ref, alt, inp.jobs, inp.qos_rows or {}, inp.assoc_rows or [], now)

        w.suggestions += suggest_models(job, need, req, view, caps, cap, checked,
                                        limits_for if gres_limit else None)
    if reason.code == "Resources" or gres_limit:
        w.suggestions += suggest_fewer(job, need, req, cap, w.limits, checked)
    if reason.code == "Priority" and own_free:
        first = [j for j, _ in ahead if j.partition == job.partition][:3]
        w.notes.append("the devices it needs are free now: "
                       + (f"job(s) {', '.join(str(j.job_id) for j in first)} ahead of it in partition "
                          f"{job.partition} hold back Slurm's main scheduler; " if first else "")
                       + "the backfill scheduler starts it at a next pass if it delays none of them")
    w.suggestions += suggest_time(job, reason, need, cap, n_ahead, ahead_starts, hs, w.limits, view, now,
                                  checked)
    allowed = _allowed_qos(inp.assoc_rows, job)
    w.suggestions += suggest_tiers(job, reason, need, inp.jobs, inp.qos_rows or {}, allowed, view, now)
    return w


def _set_ours(w: Why, reason: Reason, blocked: bool, starts: Mapping[str, float], basis: str,
              now: float) -> None:
    """Our estimate (`ours`: the likely start) and its range (`ours_earliest`: the running jobs
    ending at their p50; `ours_latest`: every job running to its user's own limit) from the
    pool's simulated starts (SCENARIOS, inf: none) and the limits that hold the job: a limit
    frees when enough of the jobs it counts end (at their earliest ends)."""
    full = [f for f in w.limits if f.binding]
    frees = [f.frees_at for f in full]
    w.estimates.update(ours_earliest=None, ours_latest=None)
    if blocked:
        w.estimates["ours_basis"] = f"none: it cannot start until its {reason.code} is resolved"
    elif starts["likely"] == math.inf:
        w.estimates["ours_basis"] = "none: no end of the jobs in the pool can be foreseen (no time limits)"
    elif any(t is None for t in frees):
        w.estimates["ours_basis"] = (f"none: when {full[0].where} {full[0].field} frees up cannot be "
                                     "foreseen from the queue")
    else:
        at = [now, *(t for t in frees if t is not None)]
        w.estimates["ours"] = max(starts["likely"], *at)
        w.estimates["ours_earliest"] = max(starts["earliest"], *at)
        if starts["latest"] < math.inf:
            w.estimates["ours_latest"] = max(starts["latest"], *at)
        w.estimates["ours_basis"] = basis + "".join(f"; and when {f.where} {f.field} leaves room"
                                                    for f in full)


_BLOCKED = ("hold", "never", "dependency", "time")


def _why_cpu(w: Why, job: QJob, reason: Reason, inp: Inputs, view: SiteView, now: float,
             checked: str) -> Why:
    """A pending job that asks no GPUs/NPUs: the same answer over CPUs. Its pool is the
    site's CPU-only nodes of its partition (per arch, `cpu@ARCH`); free CPUs per node come from
    the site's CPUs per node less the CPUs squeue shows running jobs holding there (a drained
    or down node: none); the running jobs release theirs at their expected ends; the jobs ahead
    of it for the same pool go first, with the CPUs they ask. Memory is not looked at."""
    groups = cpu_groups(view)
    need = cpu_need(job, groups)
    if need is None:
        w.notes.append("it asks for no GPUs/NPUs and its partition has no CPU-only nodes of the site"
                       if not _gres_items(job.tres_per_node) else
                       "it asks for no GPUs/NPUs the site places (another GRES): no pool to look at")
        return w
    if inp.sinfo_text is None:
        w.notes.append("sinfo did not answer: node states unknown, so no estimate of ours and no "
                       "suggestion that needs free CPUs")
    blocked = reason.kind in _BLOCKED
    pending = [(j, n) for j in inp.jobs if j.pending and (n := cpu_need(j, groups)) is not None]
    ahead = sorted(((j, n) for j, n in pending if j.job_id != job.job_id and _ahead(j, job)
                    and explain_reason(j.reason).kind not in _BLOCKED),
                   key=lambda jn: (-jn[0].priority, jn[0].job_id))
    best: tuple[dict[str, float], str, dict[str, int], list[NodeFree], list[Holder], list[float], str,
                int] | None = None
    for pool in need.pools:
        nodes = cpu_pool_nodes(groups, pool, job.partition)
        text = inp.sinfo_text or ""
        cap = cpu_capacity(nodes, pool, text, inp.jobs)
        usable = usable_nodes(text) & set(nodes)
        hs = cpu_holders(inp.jobs, nodes, now)
        ahead_here = [(j, n) for j, n in ahead if n.pools == (pool,)]
        free = {c.node: c.free for c in cap if c.node in usable}
        # A job's CPUs come back at its expected end, on the nodes that take new jobs.
        holding = [j for j in inp.jobs if j.holding and j.cpus_by_node]
        releases = {sc: [(t, node, n) for j in holding if (t := end_by(j, now, sc)) is not None
                         for node, n in j.cpus_by_node if node in usable] for sc in SCENARIOS}
        starts, ahead_starts, basis = _pool_start(free, releases, ahead_here, need.per_node, need.nodes,
                                                  bool(cap), now)
        basis += "; CPUs only"
        if best is None or starts["likely"] < best[0]["likely"]:
            best = (starts, pool, nodes, cap, hs, ahead_starts, basis, len(ahead_here))
    assert best is not None
    starts, pool, nodes, cap, hs, ahead_starts, basis, n_ahead = best
    biggest = max(nodes.values(), default=1)
    w.pool = {"key": pool, "candidates": list(need.pools), "unit": "CPUs", "cpus": need.cpus,
              "spread": need.spread,
              # spread: as packed onto whole free nodes of the pool's largest size
              "per_node": min(need.cpus, biggest) if need.spread else need.per_node,
              "nodes": math.ceil(need.cpus / biggest) if need.spread else need.nodes,
              "free": sum(c.free for c in cap), "total": sum(c.total for c in cap),
              "free_max_node": max((c.free for c in cap), default=0),
              "pending": sum(n.cpus for j, n in pending if j.state == "PENDING" and pool in n.pools),
              "running": [h.as_dict() for h in hs]}
    _set_ours(w, reason, blocked, starts, basis, now)
    w.estimates["ahead"] = n_ahead

    if reason.code == "JobHeldUser":
        w.suggestions.append(Suggestion("release", "release the hold: it then waits like any other job",
                                        f"scontrol release {job.job_id}", (),
                                        ("squeue: held by its owner (JobHeldUser)",)))
    own_free = bool(cap) and _cpus_fit(cap, need)
    if reason.code == "Priority" and own_free:
        first = [j for j, _ in ahead if j.partition == job.partition][:3]
        w.notes.append("the CPUs it needs are free now: "
                       + (f"job(s) {', '.join(str(j.job_id) for j in first)} ahead of it in partition "
                          f"{job.partition} hold back Slurm's main scheduler; " if first else "")
                       + "the backfill scheduler starts it at a next pass if it delays none of them")
    w.suggestions += suggest_time(job, reason, need, cap, n_ahead, ahead_starts, hs, w.limits, view, now,
                                  checked, fits_now=own_free, unit="CPUs")
    allowed = _allowed_qos(inp.assoc_rows, job)
    w.suggestions += suggest_tiers(job, reason, None, inp.jobs, inp.qos_rows or {}, allowed, view, now)
    return w


def _cpus_fit(cap: list[NodeFree], need: CpuNeed) -> bool:
    """Are the CPUs `need` asks free now on the nodes `cap` counts?"""
    if need.spread:
        return sum(c.free for c in cap) >= need.cpus
    return sum(1 for c in cap if c.free >= need.per_node) >= need.nodes


def _pool_start(free: dict[str, int], releases: Mapping[str, list[tuple[float, str, int]]],
                ahead_here: Sequence[tuple[QJob, Need | CpuNeed]], per_node: int, nodes: int, known: bool,
                now: float) -> tuple[dict[str, float], list[float], str]:
    """Our starts for a job of `per_node` units on `nodes` nodes (0: spread) in one pool, one
    per SCENARIOS: the jobs ahead of it there first, in priority order, each running job's
    units back at its end in that scenario (`releases`); inf when it cannot be foreseen
    (`known`: the pool's capacity was read). Returns (the starts, the planned starts of the
    jobs ahead, how the likely one was made)."""
    starts: dict[str, float] = {}
    for sc in SCENARIOS:
        queue: list[tuple[int, int, float | None]] = [(n.per_node, n.nodes, _duration(j, sc))
                                                      for j, n in ahead_here]
        queue.append((per_node, nodes, None))
        got = simulate_starts(free, releases[sc], queue, now)[-1] if known else None
        starts[sc] = got if got is not None else math.inf
    ahead_starts = [j.start for j, _ in ahead_here if j.start and j.start > now]
    before = (f"the {len(ahead_here)} job(s) ahead of it for this pool running their p50 (else their limit)"
              if ahead_here else "no job ahead of it")
    basis = (f"the running jobs ending by their p90 (past it or without one, by their limit), {before}; "
             "in priority order, without backfill")
    return starts, ahead_starts, basis


def _ahead(other: QJob, job: QJob) -> bool:
    """Does `other` come before `job` in Slurm's priority order?"""
    return (other.priority, -other.job_id) > (job.priority, -job.job_id)


def _duration(j: QJob, scenario: str = "likely") -> float | None:
    """How long a job ahead runs in one of SCENARIOS: its p50 (else its limit); latest, its own limit."""
    if scenario == "latest":
        return own_limit_s(j)
    p50 = _pred(j.comment)[0]
    return p50 if p50 is not None else j.limit_s


def _allowed_qos(rows: list[dict[str, str]] | None, job: QJob) -> set[str] | None:
    """The QoS the job's user may use in its account (None: not known)."""
    for r in rows or []:
        if r.get("Account") == job.account and r.get("User") == job.user and r.get("QOS"):
            return {q for q in r["QOS"].split(",") if q}
    return None


def _ended(job: QJob | None, rec: JobRecord | None, now: float) -> Why:
    """A job that no longer waits or runs: how long it waited and what the bridge chose."""
    if rec is not None:
        w = Why(rec.job_id, rec.name, rec.user, rec.state, rec.partition, rec.qos, None, checked_at=now)
        since = rec.eligible or rec.submit
        w.waited_s = max(0.0, rec.start - since) if rec.start and since else None
        w.bridge = bridge_facts(parse_comment(rec.admin_comment) or (job.comment if job else {}))
        w.times = {"submit": rec.submit, "eligible": rec.eligible, "start": rec.start, "end": rec.end,
                   "limit_s": rec.limit_s}
        if rec.state in PENDING or rec.state in HOLDING:
            w.notes.append("slurmctld does not list it (or did not answer): this is slurmdbd's record, "
                           "without the queue around it")
        elif rec.start is None:
            w.notes.append("it ended without starting")
        return w
    assert job is not None
    w = Why(job.job_id, job.name, job.user, job.state, job.partition, job.qos, None, checked_at=now)
    since = job.eligible or job.submit
    w.waited_s = max(0.0, job.start - since) if job.start and since else None
    w.bridge = bridge_facts(job.comment)
    w.times = {"submit": job.submit, "eligible": job.eligible, "start": job.start, "limit_s": job.limit_s}
    w.notes.append("slurmdbd has no record of it yet: the figures are slurmctld's")
    return w


# ---- who may ask -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    uid: int
    name: str | None


def current_caller() -> Caller:
    """Who runs this command: the process's real uid (never a name a user could type)."""
    uid = os.getuid()
    try:
        name: str | None = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = None
    return Caller(uid, name)


def may_see(runner: Runner, caller: Caller, owner_uid: int | None, owner: str) -> bool:
    """The owner, root, the SlurmUser and accounting operators/administrators may ask."""
    if caller.uid == 0:
        return True
    if owner_uid is not None and caller.uid == owner_uid:
        return True
    if owner_uid is None and caller.name is not None and caller.name == owner:
        return True
    try:
        if parse_slurm_user_uid(runner.out(show_config_argv(), timeout=30)) == caller.uid:
            return True
    except RuntimeFailure:
        pass
    if caller.name is None:
        return False
    try:
        level = parse_admin_level(runner.out(admin_level_argv(caller.name), timeout=30))
    except (RuntimeFailure, ValueError):
        return False
    return level.lower() in ("operator", "administrator")


# ---- fetching ----------------------------------------------------------------------------------


def fetch(runner: Runner, job_id: int, caller: Caller | None = None) -> Inputs:
    """Read what `build_why` needs for `job_id`, as `caller` may see it. InputError (exit 2)
    for a job neither slurmctld nor slurmdbd knows, or another user's; RuntimeFailure (1)
    when Slurm cannot be asked at all."""
    caller = caller or current_caller()
    queue_error: RuntimeFailure | None = None
    try:
        jobs = parse_queue(runner.out(squeue_json_argv(), timeout=60))
    except RuntimeFailure as e:
        jobs, queue_error = [], e
    except ValueError as e:
        raise RuntimeFailure(f"squeue --json: unreadable answer: {e}") from e
    job = next((j for j in jobs if j.job_id == job_id), None)
    rec = None
    if job is None or not (job.pending or job.holding):
        try:
            rec = parse_sacct_job_json(runner.out(sacct_job_json_argv(job_id), timeout=60), job_id)
        except SlurmCommandError:
            rec = None
        except ValueError as e:
            raise RuntimeFailure(f"sacct --json -j {job_id}: unreadable answer: {e}") from e
        except RuntimeFailure:
            if queue_error is not None:
                raise RuntimeFailure(f"cannot ask Slurm about job {job_id}: {queue_error}") from queue_error
    if job is None and rec is None:
        if queue_error is not None:
            raise RuntimeFailure(f"cannot ask slurmctld about job {job_id}: {queue_error}")
        raise InputError(f"JOBID {job_id}: no such job (neither squeue nor sacct knows it; it may be older "
                         "than the accounting database keeps)")
    owner_uid = job.user_id if job is not None else None
    owner = job.user if job is not None else rec.user if rec is not None else ""
    if not may_see(runner, caller, owner_uid, owner):
        raise InputError(f"JOBID {job_id}: another user's job; only its owner, root, the SlurmUser and "
                         "accounting operators/administrators may ask why it waits")
    if job is None or not job.pending:
        return Inputs(job, rec, jobs)
    return Inputs(job, rec, jobs, *_pending_extras(runner, job))


def _pending_extras(runner: Runner, job: QJob) -> tuple[str | None, dict[str, dict[str, str]] | None,
                                                         list[dict[str, str]] | None, str | None]:
    """Capacity, limits and Slurm's start estimate of a pending job; each None when its
    command fails (the answer then says less, it still comes)."""
    def out(argv: list[str], r: Runner = runner) -> str | None:
        try:
            return r.out(argv, timeout=60)
        except (RuntimeFailure, ValueError):
            return None

    sinfo = out(sinfo_capacity_argv())
    ref = limit_ref(job.reason)
    qos_text = out(sacctmgr_qos_limits_argv()) if ref is not None else None
    assoc = None
    if ref is not None:
        try:
            assoc_text = out(sacctmgr_assoc_limits_argv(job.account)) if job.account else None
        except ValueError:
            assoc_text = None
        assoc = parse_limit_rows(assoc_text, ASSOC_LIMIT_FIELDS) if assoc_text is not None else None
    # Times as epoch seconds, as slurm.sacct.epoch_runner asks (that module loads pandas).
    epoch = dataclasses.replace(runner, extra_env={**runner.extra_env, "SLURM_TIME_FORMAT": "%s"})
    start = None if job.start else out(squeue_start_argv(job.job_id), epoch)
    return sinfo, parse_qos_limits(qos_text) if qos_text is not None else None, assoc, start


def why_job(runner: Runner, job_text: str, site: Site, now: float | None = None,
            caller: Caller | None = None) -> Why:
    """The answer for JOBID as the caller may see it."""
    job_id = check_job_id(job_text)
    return build_why(fetch(runner, job_id, caller), site, now)


# ---- the screen -------------------------------------------------------------------------------


def print_why(w: Why, console: Any) -> None:
    """One screen of plain words (rich): the reason, the pool, the estimates, the suggestions."""
    from rich.table import Table as RichTable
    from rich.text import Text

    now = w.checked_at or time.time()
    pending = w.state == "PENDING"
    waited = f", waiting {fmt.duration(w.waited_s)}" if w.waited_s is not None and pending else ""
    console.rule(Text(f"job {w.job_id} · {w.name} · {w.user} · {w.state.lower()}{waited}", style="bold"))
    if w.reason is not None:
        console.print(Text.assemble(("why: ", "bold"), (w.reason.code, "bold yellow"), " — ", w.reason.words))
        for f in w.limits:
            console.print(Text("  limit: " + f.text()))
    if w.reason is None:  # running or ended
        _print_done(w, console, now)
        return
    p = w.pool
    if p is not None:
        more = f" (it may also run in {', '.join(k for k in p['candidates'] if k != p['key'])})" \
            if len(p["candidates"]) > 1 else ""
        unit = p.get("unit", "devices")
        if p.get("spread"):
            asks = (f"it asks {p['cpus']} CPU(s) on any nodes, as many as it takes"
                    + (f" (at least {p['nodes']}: {p['per_node']} per node)" if p["nodes"] > 1 else ""))
        else:
            asks = (f"it asks {p['per_node']} {'device(s)' if unit == 'devices' else unit}"
                    + (f" on each of {p['nodes']} nodes" if p["nodes"] > 1 else " on one node"))
        console.print(Text.assemble(
            ("pool: ", "bold"), f"{p['key']}{more}: {asks}"
            + f"; {p['free']} of {p['total']} free now ({p['free_max_node']} on one node)"
            + (f"; waiting jobs ask {p['pending']} (this one included)" if p["pending"] else "")))
        if p["running"]:
            t = RichTable(title=Text("held by", style="bold"), title_justify="left", box=None, padding=(0, 2))
            for col in ("job", "user", unit, "nodes", "ends by its limit", "predicted end (p50 / p90)"):
                t.add_column(col)
            for h in p["running"][:SHOW_RUNNING]:
                p90 = _clock(h["ends_p90"]) if h["ends_p90"] else fmt.MISSING
                pred = f"{when(h['ends_p50'], now)} / {p90}" if h["ends_p50"] else "no prediction"
                limit = when(h["ends_by_limit"], now)
                if h["limit_shortened_to_p90"]:
                    limit += " (shortened to p90)"
                t.add_row(str(h["job"]), Text(h["user"]), str(h["devices"]), Text(",".join(h["nodes"])),
                          limit, pred)
            console.print(t)
            if len(p["running"]) > SHOW_RUNNING:
                more_rows = len(p["running"]) - SHOW_RUNNING
                console.print(Text(f"  … and {more_rows} more (--json lists them all)"))
    e = w.estimates
    if e:
        slurm = (f"{when(e['slurm'], now)} ({e['slurm_source']})" if e.get("slurm")
                 else "none yet (the backfill scheduler has not planned it)")
        console.print(Text.assemble(("start: ", "bold"), f"Slurm's estimate {slurm}"))
        ours = (f"likely by {when(e['ours'], now)}, from {e['ours_basis']}" if e.get("ours")
                else e.get("ours_basis") or "none: no end in the pool can be foreseen")
        console.print(Text.assemble(("       ", ""), f"ours {ours}"))
        # The range, where it is one: "not before" at the p50 ends, "at the latest" by own limits.
        span = []
        if e.get("ours") and (e.get("ours_earliest") or e["ours"]) < e["ours"]:
            span.append(f"not before {when(e['ours_earliest'], now)} (the running jobs ending at their p50)")
        if e.get("ours") and (e.get("ours_latest") or e["ours"]) > e["ours"]:
            span.append(f"at the latest {when(e['ours_latest'], now)} (every job to its own limit; later "
                        "only if jobs of a higher priority come)")
        if span:
            console.print(Text("       " + "; ".join(span)))
    for n in w.notes:
        console.print(Text("note: " + n, style="dim"))
    if w.suggestions:
        console.print(Text("what may start it sooner (each checked just now):", style="bold"))
        for i, s in enumerate(w.suggestions, 1):
            console.print(Text(f" {i}. {s.what}"))
            console.print(Text(f"    → {s.command_hint}", style="cyan"))
            console.print(Text("    checked against: " + "; ".join(s.checked_against), style="dim"))
    elif w.reason is not None:
        console.print(Text("no suggestion: nothing else the site offers would start it sooner right now",
                           style="dim"))


def _print_done(w: Why, console: Any, now: float) -> None:
    from rich.text import Text

    t = w.times
    if w.waited_s is not None:
        console.print(Text.assemble(("waited: ", "bold"), fmt.duration(w.waited_s),
                                    f" (from {'eligible' if t.get('eligible') else 'submit'} to start)"))
    if t.get("start"):
        console.print(Text.assemble(("started: ", "bold"), when(t["start"], now)))
    if t.get("end"):
        console.print(Text.assemble(("ended: ", "bold"), when(t["end"], now)))
    elif w.estimates.get("ends_by_limit"):
        e = w.estimates
        pred = f"; predicted p50 {when(e['ends_p50'], now)}" if e.get("ends_p50") else ""
        ends = f"by its limit {when(e['ends_by_limit'], now)}{pred}"
        console.print(Text.assemble(("ends: ", "bold"), ends))
    b = w.bridge
    if b:
        chose = f"{b.get('n', '?')} x {b.get('model', '?')} in {b['pool']}" if b.get("pool") else "no pool"
        said = f"asked {b.get('accel', fmt.MISSING)}, chose {chose}"
        if b.get("why"):
            said += f" ({b['why']}: {b.get('why_words', '')})"
        console.print(Text.assemble(("bridge: ", "bold"), said))
        if b.get("pred"):
            pr = b["pred"]
            console.print(Text(f"        predicted p50 {fmt.duration(pr['p50'])}"
                               + (f", p90 {fmt.duration(pr['p90'])}" if pr.get("p90") else "")))
    else:
        console.print(Text("bridge: no decision recorded (plain Slurm options)", style="dim"))
    for n in w.notes:
        console.print(Text("note: " + n, style="dim"))
