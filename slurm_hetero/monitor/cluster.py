"""The cluster exporter (60 s tier): one `squeue --json` and two `sinfo` per round.

Per pool (a (model, arch) pair, as the bridge chooses between them) and tier (QoS): pending
and running jobs, normalized units requested and allocated, devices and node states, the
wait of every job that started (a histogram) and pending jobs by Slurm's reason;
the bridge's decisions by reason (the `why` of the admin-comment JSON), the capacity
snapshot's age (the bridge daemon's heartbeat, read at every scrape), the accuracy of the
runtime predictions of jobs that finished, and, with `sacct_every`, the energy the node
agent metered per energy policy (from slurmdbd, not slurmctld).

Free devices per node and the pools' fragmentation (fragmentation.py) come from the cheap
`sinfo` (GRES in use per node) every `fast_every` seconds (10 s), measured against the
waiting requests of the last round's queue: a job ending frees devices at once, while the
queue changes little within a round and costs `squeue --json` (~5 KB a job) to re-read.

Everything comes from structured fields (`squeue --json`, the fixed-field sinfo formats,
`sacct -P` with the unit separator) through the project's runner; the reduction is pure
(`summarize`, `node_free`, `waiting_requests`) and tested on captured output.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from slurm_hetero.bridge.snapshot import read_forecast
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.monitor.fragmentation import Fragmentation, by_pool
from slurm_hetero.monitor.serve import serve
from slurm_hetero.monitor.waits import WAITING_FOR_DEVICES, WaitHistograms, reason_label
from slurm_hetero.monitor.web import WebConfig
from slurm_hetero.site.model import Site
from slurm_hetero.site.pools import pools
from slurm_hetero.slurm import hostlist
from slurm_hetero.slurm.commands import (
    sacct_ended_argv,
    sacctmgr_events_argv,
    sacctmgr_ping_argv,
    sinfo_capacity_argv,
    sinfo_nodes_argv,
)
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.events import NodeEvent, parse_events, unusable_seconds
from slurm_hetero.slurm.parse import (
    SACCT_DELIMITER,
    NodeInfo,
    parse_gres,
    parse_sacct,
    parse_sinfo_nodes,
)
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import MAX_JSON_BYTES, QueuedJob, json_number, parse_job, squeue_json_argv

log = logging.getLogger("slurm-hetero.monitor")
ACCOUNTING_TIMEOUT_S = 10.0  # slurmdbd answers `sacctmgr list cluster` in milliseconds
ARCHES = ("x86_64", "aarch64")
NODE_STATES = ("idle", "alloc", "mix", "drain", "down", "maint", "other")
LOST_WINDOW_S = 86400.0  # hetero_pool_lost_device_seconds looks back this far
FINISHED_OK = "COMPLETED"
SACCT_FIELDS = ["JobID", "State", "End", "AdminComment"]
ENDED_STATES = ("CD", "F", "TO", "CA", "NF", "OOM", "PR")
FAST_EVERY_S = 10.0  # the free-device/fragmentation tier
_SNAPSHOT_GEN = re.compile(rb"generated_at\s*=\s*(\d+)")


# ---- parsing ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueueEntry:
    """One `squeue --json` job: the project's parsed job plus the fields it does not keep."""

    job: QueuedJob
    qos: str
    tres_alloc: str
    end_time: float | None
    eligible_time: float | None = None


def parse_queue(text: str) -> tuple[list[QueueEntry], list[str]]:
    """Like `parse_squeue_json` (one parse of the document, `parse_job` per entry, a bad
    entry skipped and named), keeping `qos`, `tres_alloc_str`, `end_time` and
    `eligible_time` too."""
    if len(text) > MAX_JSON_BYTES:
        raise ValueError(f"squeue --json answer of {len(text)} bytes is too large")
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ValueError("squeue --json answer has no jobs list")
    out, problems = [], []
    for i, j in enumerate(doc["jobs"]):
        try:
            job = parse_job(j)
        except ValueError as e:
            problems.append(f"job entry {i}: {e}")
            continue
        end, eligible = json_number(j.get("end_time")), json_number(j.get("eligible_time"))
        out.append(QueueEntry(job=job, qos=_text(j.get("qos")), tres_alloc=_text(j.get("tres_alloc_str")),
                              end_time=end if end else None, eligible_time=eligible if eligible else None))
    return out, problems


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def node_state(state: str) -> str:
    """sinfo's long state → idle, alloc, mix, drain, down or other.

    A node in a maintenance reservation cannot run jobs (`maint`); one in another
    reservation can, for the reservation's users (counted as idle).

    >>> [node_state(s) for s in ("idle", "mixed", "allocated+", "draining", "drained", "down*", "idle*")]
    ['idle', 'mix', 'alloc', 'drain', 'drain', 'down', 'down']
    >>> node_state("maint"), node_state("reserved")
    ('maint', 'idle')
    """
    s = state.lower()
    if "drain" in s:
        return "drain"
    if s.startswith("maint"):
        return "maint"
    if s.startswith("reserved"):
        return "idle"
    if s.endswith("*") or any(w in s for w in ("down", "fail", "not_responding", "unknown")):
        return "down"
    for prefix, name in (("mix", "mix"), ("alloc", "alloc"), ("completing", "alloc"), ("idle", "idle")):
        if s.startswith(prefix):
            return name
    return "other"


def arch_of(features: Iterable[str]) -> str:
    feats = set(features)
    return next((a for a in ARCHES if a in feats), "x86_64")


# ---- the site's view -------------------------------------------------------------------------

@dataclass(frozen=True)
class SiteView:
    model_of: dict[tuple[str, str], str]  # (gres name, gres type) → model id
    units: dict[str, float]  # model id → normalized units per device
    by_gres: dict[str, tuple[str, ...]]  # gres name → model ids, fewest units first
    arches: dict[str, tuple[str, ...]]  # model id → arches it exists on
    pools: tuple[str, ...]

    @classmethod
    def of(cls, site: Site) -> SiteView:
        ps = pools(site)  # cheapest first: the bridge's static order
        models = {m.id: m for m in site.models_in_use}
        by_gres: dict[str, list[str]] = {}
        arches: dict[str, list[str]] = {}
        for p in ps:
            g = models[p.model].gres_name
            if p.model not in by_gres.setdefault(g, []):
                by_gres[g].append(p.model)
            arches.setdefault(p.model, []).append(p.arch)
        return cls(model_of={(m.gres_name, m.gres_type): m.id for m in models.values()},
                   units={m.id: m.units for m in models.values()},
                   by_gres={k: tuple(v) for k, v in by_gres.items()},
                   arches={k: tuple(v) for k, v in arches.items()},
                   pools=tuple(p.key for p in ps))

    def model(self, name: str, gtype: str, decision: dict[str, Any]) -> str | None:
        if gtype:
            return self.model_of.get((name, gtype))
        chosen = decision.get("model")
        if isinstance(chosen, str) and chosen in self.by_gres.get(name, ()):
            return chosen
        cands = self.by_gres.get(name, ())
        return cands[0] if cands else None  # the static order's choice


@dataclass(frozen=True)
class Demand:
    pool: str
    devices: int
    units: float


def _gres_items(tres: str) -> Iterator[tuple[str, str, int]]:
    """(name, type, count) of `gres:gpu:h100:2,gres/npu:1`-style lists (22.05 and later)."""
    for item in tres.split(","):
        parts = item.strip().replace("gres/", "gres:").split(":")
        if len(parts) < 3 or parts[0] != "gres" or not parts[-1].isdigit():
            continue
        yield parts[1], parts[2] if len(parts) == 4 else "", int(parts[-1])


def requested(view: SiteView, job: QueuedJob, decision: dict[str, Any]) -> list[Demand]:
    """What a job asks for, per pool: its GRES per node times nodes, in normalized units."""
    out = []
    d_pool = decision.get("pool") if isinstance(decision.get("pool"), str) else ""
    d_model, _, d_arch = str(d_pool).partition("@")
    feats = set(re.split(r"[^\w.-]+", job.features))
    for name, gtype, n in _gres_items(job.tres_per_node):
        model = view.model(name, gtype, decision)
        if model is None:
            continue  # shards and GRES the bridge does not place
        arch = (d_arch if model == d_model and d_arch else
                next((a for a in ARCHES if a in feats), None) or
                (view.arches[model][0] if len(view.arches.get(model, ())) == 1 else "any"))
        count = n * max(1, job.node_count)
        out.append(Demand(f"{model}@{arch}", count, count * view.units[model]))
    return out


def allocated(view: SiteView, entry: QueueEntry, nodes: dict[str, NodeInfo]) -> list[Demand]:
    """What a running job got, per pool: typed GRES of its allocation, arch of its nodes."""
    job = entry.job
    try:
        names = hostlist.expand(job.nodes, limit=10_000) if job.nodes else []
    except hostlist.HostlistError:
        names = []
    arch = next((arch_of(nodes[n].features) for n in names if n in nodes), "any")
    counts: Counter[tuple[str, str]] = Counter()
    for item in entry.tres_alloc.split(","):
        key, _, value = item.partition("=")
        name, _, gtype = key.removeprefix("gres/").partition(":")
        if key.startswith("gres/") and gtype and value.isdigit():
            counts[(name, gtype)] += int(value)
    if not counts:  # no typed GRES in the allocation string: the per-node detail
        for detail in job.gres_detail:
            for name_type, n in parse_gres(detail).items():
                name, _, gtype = name_type.partition(":")
                counts[(name, gtype)] += n
    out = []
    for (name, gtype), n in counts.items():
        model = view.model_of.get((name, gtype))
        if model is not None:
            out.append(Demand(f"{model}@{arch}", n, n * view.units[model]))
    return out


def started_wait(entry: QueueEntry) -> float | None:
    """Seconds from eligible (else submit) to start of a job that got an allocation; None for
    one that has not started. A pending job's start_time is Slurm's estimate, and a job
    cancelled while pending carries the cancel time as its start but no nodes (22.05)."""
    j = entry.job
    if j.state == "PENDING" or j.state.startswith("REQUEUE") or not j.start_time or not j.nodes:
        return None
    since = entry.eligible_time or j.submit_time
    return max(0.0, j.start_time - since) if since else None


def node_free(view: SiteView, text: str) -> dict[str, dict[str, int]]:
    """{pool: {node: free devices}} from `sinfo_capacity_argv()` output (name, long state,
    GRES, GRES in use, features; `|`-terminated fields admins and slurmctld write). A node
    that cannot run jobs (`node_state`: not idle, mix or alloc) has none free; a node listed
    once per partition counts once."""
    out: dict[str, dict[str, int]] = {}
    for node, features, name_type, free in gres_free(text):
        name, _, gtype = name_type.partition(":")
        model = view.model_of.get((name, gtype))
        if model is None:
            continue  # shards and GRES the bridge does not place
        out.setdefault(f"{model}@{arch_of(features)}", {})[node] = free
    return out


def gres_free(text: str) -> Iterator[tuple[str, list[str], str, int]]:
    """(node, features, GRES name:type, devices free) per GRES of each line of
    `sinfo_capacity_argv()` output; a node that cannot run jobs has none free.

    >>> list(gres_free("a1|mixed|gpu:a100:4(S:0)|gpu:a100:1(IDX:2)|x86_64|\\n"))
    [('a1', ['x86_64'], 'gpu:a100', 3)]
    """
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 5 or not fields[0]:
            continue
        node, state, gres, used, features = fields[:5]
        usable = node_state(state) in ("idle", "mix", "alloc")
        in_use = parse_gres(used)
        for name_type, count in parse_gres(gres).items():
            free = max(0, count - in_use.get(name_type, 0)) if usable else 0
            yield node, features.split(","), name_type, free


def request_pools(view: SiteView, job: QueuedJob) -> list[tuple[str, int]]:
    """(pool, devices per node) for each pool a job's `tres_per_node` could run in: a typed
    GRES in its model's pools, an untyped one in every model of that GRES name unless a
    feature names one model (as the bridge pins movable jobs); the arches its features name,
    else all. Feature words are only compared with model and arch names."""
    words = set(re.split(r"[^\w.-]+", job.features))
    arches = [a for a in ARCHES if a in words]
    out = []
    for name, gtype, n in _gres_items(job.tres_per_node):
        if gtype:
            model = view.model_of.get((name, gtype))
            models = [model] if model else []
        else:
            models = list(view.by_gres.get(name, ()))
            models = [m for m in models if m in words] or models
        for m in models:
            out += [(f"{m}@{a}", n) for a in view.arches.get(m, ()) if not arches or a in arches]
    return out


def waiting_requests(view: SiteView, entries: Iterable[QueueEntry]) -> dict[str, list[int]]:
    """{pool: per-node device counts of the jobs waiting for it}: pending jobs whose reason
    says they wait for devices or their turn (`WAITING_FOR_DEVICES`)."""
    out: dict[str, list[int]] = {}
    for e in entries:
        if e.job.state == "PENDING" and reason_label(e.job.reason) in WAITING_FOR_DEVICES:
            for pool, n in request_pools(view, e.job):
                out.setdefault(pool, []).append(n)
    return out


# ---- one round -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Started:
    key: tuple[int, float]  # (job id, start): a requeued job that starts again is another start
    pool: str
    tier: str
    wait_s: float


@dataclass
class Round:
    t: float
    jobs: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (state, pool, tier)
    units_requested: defaultdict[tuple[str, str, str], float] = field(
        default_factory=lambda: defaultdict(float))
    units_allocated: defaultdict[tuple[str, str], float] = field(
        default_factory=lambda: defaultdict(float))  # (pool, tier)
    devices_allocated: Counter[str] = field(default_factory=Counter)
    devices: Counter[tuple[str, str]] = field(default_factory=Counter)  # (pool, total|usable)
    nodes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (pool, state)
    oldest_pending_s: dict[str, float] = field(default_factory=dict)
    decisions: Counter[str] = field(default_factory=Counter)  # why → jobs slurmctld holds
    pending_reasons: Counter[tuple[str, str]] = field(default_factory=Counter)  # (pool, reason label)
    started: list[Started] = field(default_factory=list)  # every job in the queue that has started
    requests: dict[str, list[int]] = field(default_factory=dict)  # `waiting_requests`
    problems: list[str] = field(default_factory=list)


def summarize(view: SiteView, entries: list[QueueEntry], nodes: dict[str, NodeInfo], now: float,
              comments: list[dict[str, Any]] | None = None) -> Round:
    """Pure: the 60 s tier from one queue and one node list (`comments`: each entry's
    admin-comment JSON when the caller has parsed them already)."""
    r = Round(t=now)
    if comments is None:
        comments = [parse_comment(e.job.admin_comment) for e in entries]
    for info in nodes.values():
        state = node_state(info.state)
        arch = arch_of(info.features)
        usable = state in ("idle", "mix", "alloc")
        node_pools = []
        for name_type, count in parse_gres(info.gres).items():
            name, _, gtype = name_type.partition(":")
            model = view.model_of.get((name, gtype))
            if model is None:
                continue
            pool = f"{model}@{arch}"
            node_pools.append(pool)
            r.devices[(pool, "total")] += count
            r.devices[(pool, "usable")] += count if usable else 0
        for pool in dict.fromkeys(node_pools or [f"cpu@{arch}"]):
            r.nodes[(pool, state)] += 1
    for e, decision in zip(entries, comments, strict=True):
        j = e.job
        why = decision.get("why")
        if decision.get("hetero") == 1 and isinstance(why, str) and why:
            r.decisions[why[:40]] += 1
        wait = started_wait(e)
        if j.state not in ("PENDING", "RUNNING") and wait is None:
            continue
        tier = e.qos or "unknown"
        state = j.state.lower()
        want = requested(view, j, decision)
        got = allocated(view, e, nodes) if j.state != "PENDING" else []
        arch = next((a for a in ARCHES if a in j.features), "any")
        pool = (got or want)[0].pool if (got or want) else f"cpu@{arch}"
        if wait is not None and j.start_time:
            r.started.append(Started((j.job_id, j.start_time), pool, tier, wait))
        if j.state not in ("PENDING", "RUNNING"):
            continue  # ended within MinJobAge: its wait counts, the rest is the past
        r.jobs[(state, pool, tier)] += 1
        for d in want:
            r.units_requested[(state, d.pool, tier)] += d.units
        for d in got:
            r.units_allocated[(d.pool, tier)] += d.units
            r.devices_allocated[d.pool] += d.devices
        if j.state == "PENDING":
            r.pending_reasons[(pool, reason_label(j.reason))] += 1
        if j.state == "PENDING" and j.submit_time:
            r.oldest_pending_s[pool] = max(r.oldest_pending_s.get(pool, 0.0), now - j.submit_time)
    r.requests = waiting_requests(view, entries)
    return r


def prediction(entry: QueueEntry, comment: dict[str, Any] | None = None) -> tuple[float, float, float] | None:
    """(p50, p90, runtime) of a job that completed with the bridge's prediction, else None."""
    j = entry.job
    if j.state != FINISHED_OK or not j.start_time or not entry.end_time:
        return None
    pred = (parse_comment(j.admin_comment) if comment is None else comment).get("pred")
    if not isinstance(pred, dict):
        return None
    p50, p90 = json_number(pred.get("p50")), json_number(pred.get("p90"))
    runtime = entry.end_time - j.start_time
    if p50 is None or p90 is None or p50 <= 0 or runtime < 0:
        return None
    return p50, p90, runtime


def policy_energy(rows: list[dict[str, str]]) -> dict[str, tuple[str, float]]:
    """{job id: (policy, J)} from sacct rows whose admin comment holds the agent's figures."""
    out: dict[str, tuple[str, float]] = {}
    for row in rows:
        c = parse_comment(row.get("AdminComment", ""))
        per_node = c.get("node_energy")
        if not isinstance(per_node, dict):
            continue
        total, policy = 0.0, None
        for summary in per_node.values():
            if not isinstance(summary, dict):
                continue
            e = json_number(summary.get("energy_j"))
            total += e or 0.0
            if isinstance(summary.get("policy"), str):
                policy = summary["policy"]
        requested_policy = c.get("energy") if isinstance(c.get("energy"), str) else None
        out[row["JobID"]] = ((policy or requested_policy or "none")[:40], total)
    return out


def lost_device_seconds(view: SiteView, events: Iterable[NodeEvent], nodes: dict[str, NodeInfo],
                        start: float, end: float, now: float) -> dict[str, float]:
    """Per pool, device-seconds of [start, end) lost to down/drained nodes (sacctmgr
    events; each event's TRES says which devices the node holds)."""
    evs = list(events)
    by_node = {e.node: e for e in evs}
    out: dict[str, float] = {}
    for node, secs in unusable_seconds(evs, start, end, now).items():
        info = nodes.get(node)
        arch = arch_of(info.features) if info else "any"
        for name_type, count in by_node[node].devices().items():
            name, _, gtype = name_type.partition(":")
            model = view.model_of.get((name, gtype))
            if model is not None:
                pool = f"{model}@{arch}"
                out[pool] = out.get(pool, 0.0) + count * secs
    return out


def snapshot_generated_at(path: Path) -> float | None:
    """The snapshot's generation time (the bridge daemon's heartbeat), None if unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    m = _SNAPSHOT_GEN.search(head)
    return float(m.group(1)) if m else None


# ---- the exporter ----------------------------------------------------------------------------

class ClusterExporter:
    def __init__(self, site: Site, runner: Runner, snapshot: Path | None, every: float = 60.0,
                 sacct_every: float = 0.0, window: int = 500, sacct_delay_s: float = 120.0,
                 clock: Callable[[], float] = time.time, fast_every: float = FAST_EVERY_S,
                 accounting_timeout: float = ACCOUNTING_TIMEOUT_S):
        self.view = SiteView.of(site)
        # The exporter's own seconds: on a replay clock K times faster, the caller passes K x 10.
        self.accounting_timeout = accounting_timeout
        self.runner, self.snapshot, self.every = runner, snapshot, every
        self.fast_every = fast_every  # 0, or not below `every`: free devices once a round
        self.sacct_every, self.sacct_delay_s, self.clock = sacct_every, sacct_delay_s, clock
        self.last: Round | None = None
        self.last_nodes: dict[str, NodeInfo] | None = None
        self.round_seconds = 0.0
        self.errors = 0
        self.calls: Counter[str] = Counter()
        self.decisions_total: Counter[str] = Counter()
        self._decided: set[int] = set()
        self.predictions: OrderedDict[int, tuple[float, float, float]] = OrderedDict()
        self.window = window
        self.energy_by_policy: defaultdict[str, float] = defaultdict(float)
        self._energy_seen: OrderedDict[str, None] = OrderedDict()
        self._sacct_from: float | None = None
        self.lost: dict[str, float] | None = None  # pool → device-seconds lost in LOST_WINDOW_S
        self._sacct_at = -math.inf
        self.waits = WaitHistograms()
        self._started: set[tuple[int, float]] | None = None  # None until the first round
        self.frag: dict[str, Fragmentation] = {}  # replaced whole, never changed in place
        self.frag_t: float | None = None
        # Whether slurmdbd answered the last check (None: not asked yet), and when it last did.
        self.accounting_up: bool | None = None
        self.accounting_t: float | None = None

    def _out(self, argv: list[str], timeout: float | None = None) -> str:
        self.calls[argv[0]] += 1
        return self.runner.out(argv, timeout=timeout or max(10.0, min(60.0, self.every)))

    def round(self) -> Round:
        """One squeue --json and one sinfo, then the free devices (`fast_round`); the tier's
        figures replace the last round's."""
        t0 = time.monotonic()
        try:
            entries, problems = parse_queue(self._out(squeue_json_argv()))
        except ValueError as e:
            raise RuntimeFailure(f"squeue --json: unreadable answer: {e}") from e
        nodes = parse_sinfo_nodes(self._out(sinfo_nodes_argv()))
        self.last_nodes = nodes
        now = self.clock()
        comments = [parse_comment(e.job.admin_comment) for e in entries]
        r = summarize(self.view, entries, nodes, now, comments)
        r.problems = problems
        self.fast_round(r.requests)
        self._count_decisions(entries, comments)
        self._observe_waits(r.started)
        for entry, comment in zip(entries, comments, strict=True):
            p = prediction(entry, comment)
            if p is not None and entry.job.job_id not in self.predictions:
                self.predictions[entry.job.job_id] = p
                while len(self.predictions) > self.window:
                    self.predictions.popitem(last=False)
        if self.sacct_every > 0 and time.monotonic() - self._sacct_at >= self.sacct_every:
            self._sacct_at = time.monotonic()
            self.poll_sacct(now)
        self.last = r
        self.round_seconds = time.monotonic() - t0
        return r

    def check_accounting(self) -> bool:
        """Ask slurmdbd the cheapest question (sacctmgr, not through slurmctld): while it does
        not answer, slurmctld queues what accounting must hear (sdiag's DBD Agent queue, up to
        MaxDBDMsgs, then drops it) and sacct answers nothing new. Its own call, apart from
        the round: a slurmctld that does not answer says nothing about slurmdbd."""
        try:  # a cheap question: a slurmdbd that hangs (stopped, not gone) must not hold the round
            self._out(sacctmgr_ping_argv(), timeout=self.accounting_timeout)
        except RuntimeFailure as e:
            if self.accounting_up is not False:  # once per outage, not once a round
                log.warning("accounting (slurmdbd) does not answer: %s", e)
            self.accounting_up = False
            return False
        self.accounting_up, self.accounting_t = True, self.clock()
        return True

    def fast_round(self, requests: dict[str, list[int]] | None = None) -> None:
        """Free devices per node (one cheap sinfo) and each pool's fragmentation against the
        waiting requests of the last round (`requests`: this round's)."""
        if requests is None:
            if self.last is None:
                return  # no queue read yet: nothing to measure against
            requests = self.last.requests
        free = node_free(self.view, self._out(sinfo_capacity_argv()))
        self.frag = by_pool(self.view.pools, {p: list(n.values()) for p, n in free.items()}, requests)
        self.frag_t = self.clock()

    def _observe_waits(self, started: list[Started]) -> None:
        """Each start once. The first round only learns what had started already: after a
        restart, every running job counted again would swell the rate of waits."""
        keys = {s.key for s in started}
        if self._started is not None:
            for s in started:
                if s.key not in self._started:
                    self.waits.observe(s.pool, s.tier, s.wait_s)
        self._started = keys  # squeue keeps an ended job MinJobAge (300 s): longer than a round

    def _count_decisions(self, entries: list[QueueEntry], comments: list[dict[str, Any]]) -> None:
        """Each job's decision once (a counter); ids no longer in the queue are forgotten."""
        present = set()
        for e, c in zip(entries, comments, strict=True):
            present.add(e.job.job_id)
            if e.job.job_id in self._decided:
                continue
            why = c.get("why")
            if c.get("hetero") == 1 and isinstance(why, str) and why:
                self.decisions_total[why[:40]] += 1
                self._decided.add(e.job.job_id)
        self._decided &= present

    def poll_sacct(self, now: float) -> None:
        """Energy per policy of jobs that ended between the last poll and `sacct_delay_s`
        ago (the epilogs write their figures after the end)."""
        until = now - self.sacct_delay_s
        since = self._sacct_from if self._sacct_from is not None else until - 3600
        if until <= since:
            return
        argv = sacct_ended_argv(_sacct_time(since), _sacct_time(until), SACCT_FIELDS, ENDED_STATES)
        try:
            rows = parse_sacct(self._out(argv), SACCT_FIELDS, SACCT_DELIMITER)
        except (RuntimeFailure, ValueError) as e:
            log.warning("sacct: %s", e)
            return
        self.poll_events(now)
        for job, (policy, joules) in policy_energy(rows).items():
            if job in self._energy_seen:
                continue
            self._energy_seen[job] = None
            self.energy_by_policy[policy] += joules
        while len(self._energy_seen) > 100_000:
            self._energy_seen.popitem(last=False)
        self._sacct_from = until

    def poll_events(self, now: float) -> None:
        """Device-seconds per pool lost to down/drained nodes over the last LOST_WINDOW_S."""
        since = now - LOST_WINDOW_S
        try:
            text = self.runner.out(sacctmgr_events_argv(_sacct_time(since), _sacct_time(now)),
                                   timeout=max(10.0, min(60.0, self.every)))
            self.calls["sacctmgr"] += 1
            events = parse_events(text)
        except (RuntimeFailure, ValueError) as e:
            log.warning("sacctmgr show event: %s", e)
            return
        nodes: dict[str, NodeInfo] = {}
        if self.last_nodes is not None:
            nodes = self.last_nodes
        self.lost = lost_device_seconds(self.view, events, nodes, since, now, now)

    def run(self, stop: Callable[[], bool]) -> None:
        fast = 0 < self.fast_every < self.every
        next_round = time.monotonic()
        while not stop():
            t0 = time.monotonic()
            full = t0 >= next_round
            if full:
                next_round = t0 + self.every
                self.check_accounting()
            try:
                if full:
                    self.round()
                else:
                    self.fast_round()
            except Exception as e:  # a slurmctld that does not answer costs a round
                self.errors += 1
                log.warning("%s failed: %s", "round" if full else "fast round", e)
            due = min(next_round, t0 + self.fast_every) if fast else next_round
            while not stop() and time.monotonic() < due:
                time.sleep(min(0.2, self.every))

    # ---- Prometheus collector ------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        r = self.last
        yield from self._snapshot_metrics()
        jobs = GaugeMetricFamily("hetero_jobs", "Pending and running jobs per pool and tier (QoS)",
                                 labels=["state", "pool", "tier"])
        req = GaugeMetricFamily("hetero_units_requested",
                                "Normalized accelerator units requested by pending/running jobs",
                                labels=["state", "pool", "tier"])
        alloc = GaugeMetricFamily("hetero_units_allocated", "Normalized units allocated to running jobs",
                                  labels=["pool", "tier"])
        devs = GaugeMetricFamily("hetero_pool_devices",
                                 "Devices per pool: total, usable (node not down/drained), allocated",
                                 labels=["pool", "status"])
        nodes = GaugeMetricFamily("hetero_pool_nodes", "Nodes per pool and state (CPU-only: cpu@ARCH)",
                                  labels=["pool", "state"])
        oldest = GaugeMetricFamily("hetero_pool_oldest_pending_seconds",
                                   "How long the oldest pending job of a pool has waited", labels=["pool"])
        why = GaugeMetricFamily("hetero_bridge_decision_jobs",
                                "Jobs slurmctld holds, by the bridge decision's reason", labels=["why"])
        reasons = GaugeMetricFamily("hetero_pending_jobs",
                                    "Pending jobs per pool by Slurm's reason (rare reasons: other)",
                                    labels=["pool", "reason"])
        if r is not None:
            for (state, pool, tier), n in sorted(r.jobs.items()):
                jobs.add_metric([state, pool, tier], n)
            for (state, pool, tier), u in sorted(r.units_requested.items()):
                req.add_metric([state, pool, tier], round(u, 4))
            for (pool, tier), u in sorted(r.units_allocated.items()):
                alloc.add_metric([pool, tier], round(u, 4))
            for pool in self.view.pools:
                for status in ("total", "usable"):
                    devs.add_metric([pool, status], r.devices[(pool, status)])
                devs.add_metric([pool, "allocated"], r.devices_allocated[pool])
            for (pool, state), n in sorted(r.nodes.items()):
                nodes.add_metric([pool, state], n)
            for pool, s in sorted(r.oldest_pending_s.items()):
                oldest.add_metric([pool], round(s, 1))
            for reason, n in sorted(r.decisions.items()):
                why.add_metric([reason], n)
            for (pool, reason), n in sorted(r.pending_reasons.items()):
                reasons.add_metric([pool, reason], n)
        yield from (jobs, req, alloc, devs, nodes, oldest, why, reasons)
        yield self.waits.family("hetero_job_wait_seconds",
                                "Wait from eligible (else submit) to start of each job that started, "
                                "per pool and tier (QoS)")
        yield from self._fragmentation_metrics()
        lost = GaugeMetricFamily("hetero_pool_lost_device_seconds",
                                 "Device-seconds a pool lost to down/drained nodes over the last 24 h "
                                 "(sacctmgr show event; with --sacct-every)", labels=["pool"])
        if self.lost is not None:
            for pool in self.view.pools:
                lost.add_metric([pool], round(dict(self.lost).get(pool, 0.0), 1))
        yield lost
        total = CounterMetricFamily("hetero_bridge_decisions", "Bridge decisions seen, by reason",
                                    labels=["why"])
        for reason, n in sorted(dict(self.decisions_total).items()):  # copies: rounds run meanwhile
            total.add_metric([reason], n)
        yield total
        yield from self._prediction_metrics()
        pe = CounterMetricFamily("hetero_policy_energy_joules",
                                 "Energy the node agent metered for finished jobs, by energy policy (sacct)",
                                 labels=["policy"])
        for policy, joules in sorted(dict(self.energy_by_policy).items()):
            pe.add_metric([policy], joules)
        yield pe
        yield from self._self_metrics(r)

    def _snapshot_metrics(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("hetero_bridge_snapshot_up", "1 when the capacity snapshot can be read")
        gen = GaugeMetricFamily("hetero_bridge_snapshot_generated_timestamp_seconds",
                                "When the bridge daemon last wrote the snapshot (its heartbeat)")
        age = GaugeMetricFamily("hetero_bridge_snapshot_age_seconds", "Age of the capacity snapshot now")
        at = snapshot_generated_at(self.snapshot) if self.snapshot else None
        up.add_metric([], 0.0 if at is None else 1.0)
        if at is not None:
            gen.add_metric([], at)
            age.add_metric([], max(0.0, self.clock() - at))
        demand = GaugeMetricFamily("hetero_pool_demand_forecast_units",
                                   "Forecast peak running+pending demand over the next N minutes "
                                   "(normalized units; cores for cpu@ pools)", labels=["pool", "horizon_min"])
        for pool, by_h in sorted((read_forecast(self.snapshot) if self.snapshot else {}).items()):
            for h, units in sorted(by_h.items()):
                demand.add_metric([pool, str(h)], units)
        yield from (up, gen, age, demand)

    def _fragmentation_metrics(self) -> Iterator[Metric]:
        frag, at = self.frag, self.frag_t
        free = GaugeMetricFamily("hetero_pool_free_devices",
                                 "Devices no job holds on nodes that can run jobs (sinfo GresUsed)",
                                 labels=["pool"])
        lost = GaugeMetricFamily("hetero_pool_fragmented_devices",
                                 "Free devices on nodes with fewer free than the smallest per-node request "
                                 "of the pool's waiting jobs (0 when none waits)", labels=["pool"])
        ratio = GaugeMetricFamily("hetero_pool_fragmentation_ratio",
                                  "Fragmented / free devices of the pool (0 when none is free)",
                                  labels=["pool"])
        smallest = GaugeMetricFamily("hetero_pool_smallest_waiting_request_devices",
                                     "Smallest per-node device request among the pool's waiting jobs "
                                     "(Resources, Priority, None)", labels=["pool"])
        ts = GaugeMetricFamily("hetero_pool_fragmentation_timestamp_seconds",
                               "When the free devices behind the fragmentation figures were read")
        for pool, f in sorted(frag.items()):
            free.add_metric([pool], f.free)
            lost.add_metric([pool], f.fragmented)
            ratio.add_metric([pool], round(f.ratio, 4))
            if f.smallest_request is not None:
                smallest.add_metric([pool], f.smallest_request)
        if at is not None:
            ts.add_metric([], at)
        yield from (free, lost, ratio, smallest, ts)

    def _prediction_metrics(self) -> Iterator[Metric]:
        preds = list(dict(self.predictions).values())
        n = GaugeMetricFamily("hetero_prediction_jobs", "Completed jobs in the prediction window")
        acc = GaugeMetricFamily("hetero_prediction_accuracy",
                                "Mean of min(p50, runtime) / max(p50, runtime) over the window")
        under = GaugeMetricFamily("hetero_prediction_under_p90_ratio",
                                  "Share of the window's jobs that ran longer than their p90")
        n.add_metric([], len(preds))
        if preds:
            acc.add_metric([], sum(min(p, a) / max(p, a) if max(p, a) > 0 else 1.0 for p, _, a in preds)
                           / len(preds))
            under.add_metric([], sum(1 for _, p90, a in preds if a > p90) / len(preds))
        yield from (n, acc, under)

    def _self_metrics(self, r: Round | None) -> Iterator[Metric]:
        ts = GaugeMetricFamily("hetero_exporter_round_timestamp_seconds", "When the last round finished")
        dur = GaugeMetricFamily("hetero_exporter_round_seconds", "How long the last round took")
        if r is not None:
            ts.add_metric([], r.t)
            dur.add_metric([], self.round_seconds)
        errs = CounterMetricFamily("hetero_exporter_round_errors", "Rounds that failed")
        errs.add_metric([], self.errors)
        calls = CounterMetricFamily("hetero_exporter_slurm_calls", "Slurm commands run, by command",
                                    labels=["command"])
        for cmd, k in sorted(dict(self.calls).items()):
            calls.add_metric([cmd], k)
        bad = GaugeMetricFamily("hetero_exporter_skipped_jobs", "Job entries of the last round that could "
                                "not be read")
        bad.add_metric([], len(r.problems) if r else 0)
        acct = GaugeMetricFamily("hetero_accounting_up", "1 when slurmdbd answered the exporter's last "
                                 "check (sacctmgr, once a round), 0 when it did not")
        acct_t = GaugeMetricFamily("hetero_accounting_answer_timestamp_seconds",
                                   "When slurmdbd last answered the exporter's check")
        if self.accounting_up is not None:
            acct.add_metric([], 1.0 if self.accounting_up else 0.0)
        if self.accounting_t is not None:
            acct_t.add_metric([], self.accounting_t)
        yield from (ts, dur, errs, calls, bad, acct, acct_t)


def _sacct_time(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def serve_cluster(exporter: ClusterExporter, port: int, addr: str = "0.0.0.0",
                  stop: Callable[[], bool] | None = None, ready: Callable[[int], None] | None = None,
                  web: WebConfig | None = None) -> None:
    """Serve /metrics and run rounds until stop() (default: SIGTERM/SIGINT)."""
    serve(exporter, port, addr, stop, ready, web)
