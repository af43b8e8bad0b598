"""`slurm-hetero conf import`: a running site's slurm.conf (+ gres.conf) as a site file.

The files are read as Slurm reads them: `Include` (relative to the including file, globs
allowed) read in place, comments and `\\` continuations, keys in any case, NodeName= and
PartitionName=DEFAULT lines applied to the lines after them, hostlists. Then:

- **Nodes**: NodeName lines with the same hardware, features, options and (modeled)
  partitions become one node group. Sockets/CoresPerSocket/ThreadsPerCore (or Boards x
  SocketsPerBoard, or CPUs alone, as Slurm infers them), RealMemory, Feature (a feature
  naming an architecture - x86_64, aarch64, arm64, ... - becomes `architecture`; the others,
  and a spelling other than the canonical one, stay features), `Gres=gpu|npu:TYPE:N` mapped
  to a catalog model by its GRES type, id or a unique match of its words (`nvidia_a100-sxm4-80gb`
  is a100-80gb; `--map TYPE=MODEL` decides the rest), `shard:N` as shards per device. Where
  the site's GRES type is not the model's (`a100` for a100-80gb) the site file's catalog keeps
  the site's type, so jobs' `--gres` and accounting names do not change. The other words
  (TmpDisk, State, CoreSpecCount, ...) become the group's options; Weight is replaced by
  slurm-hetero's (noted).
- **Kept as written** (`slurm.keep_nodes`), with a note saying why: nodes whose GRES is not
  a catalog model (mps, fpga, an unknown type), whose CPUs disagree with their topology,
  that are in no partition that could be modeled, or whose per-node addresses would have
  to be split.
- **Partitions**: name, Nodes (hostlists, ALL, NodeSets), Default, MaxTime, DefaultTime;
  every other word an option; TRESBillingWeights is replaced (noted). A partition that
  cannot be modeled (no nodes, a name or value the site file does not take) is kept whole
  (`slurm.keep_partitions`).
- **The site's own hooks**, which slurm-hetero's join instead of replacing: Prolog and
  Epilog (`slurm.prolog`/`slurm.epilog`: the node agent becomes one more file of their
  folder, site/hooks.py), TaskProlog (`slurm.task_prolog`, run first by slurm-hetero's),
  the lines of the site's plugstack.conf (PlugStackConfig, else the plugstack.conf beside
  slurm.conf: `slurm.plugstack_lines`, after the hetero plugin), and a job_submit.lua beside
  slurm.conf (`slurm.job_submit.script`: the rendered job_submit.lua runs its rules first,
  from job_submit.site.lua, where the site must copy it).
- **Everything else**: ClusterName, SlurmctldHost (or ControlMachine/BackupController),
  AccountingStorageHost/Port/TRES, HealthCheckProgram/Interval (the node agent chains the
  site's health check) go to their fields; keys slurm-hetero writes itself (JobSubmitPlugins,
  SelectType, ...) are noted as replaced; every other line is kept in `slurm.extra_lines`
  (NodeSet, DownNodes too).
- **gres.conf**: lines equal to what `conf render` generates are left to it; every other
  line (AutoDetect, Cores=, other device paths, lines of kept nodes) is kept in
  `slurm.gres_lines`.

The site file it writes is loaded back before it is returned, so what it writes validates.
"""

from __future__ import annotations

import glob
import posixpath
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_hetero.conf.nodefiles import NODE_DIR, NODE_FILES
from slurm_hetero.conf.slurmconf import ENFORCE_DEFAULT
from slurm_hetero.errors import InputError
from slurm_hetero.site.catalog import AccelModel, builtin_catalog_data, model_from_fields
from slurm_hetero.site.hooks import AGENT_ENTRY, glob_problem, is_glob
from slurm_hetero.site.installation import plugstack_problem
from slurm_hetero.site.limits import MAX_FILE_BYTES, MAX_NODES, HostlistError, hostlist_size, shown
from slurm_hetero.site.names import ARCH_ALIASES
from slurm_hetero.site.slurmlines import (
    NODE_ADDRESSING,
    NODE_OWNED,
    OWNED,
    OWNED_REASONS,
    PARTITION_OWNED,
    REPEATABLE,
    LineError,
    check_extra_line,
    check_option,
    include_path,
    is_configless,
    pairs,
    unquote,
)

MAX_INCLUDE_DEPTH = 8
MAX_LINES = 200_000
_SITE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
_PARTITION_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_SLURM_TIME = re.compile(r"^(UNLIMITED|INFINITE|(\d+-)?\d+(:\d{2}){0,2})$")
_FEATURE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_CONTROLLER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}(\([A-Za-z0-9.:-]{1,253}\))?$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
_TRES = re.compile(r"^[a-z][a-z_]{0,31}(/[A-Za-z0-9_.:-]{1,64})?$")
_HEALTH = re.compile(r"^/[A-Za-z0-9_./+-]+$")
_HOOK = re.compile(r"^/[A-Za-z0-9_./+*-]+$")  # schema.json's hook_path
# slurm-hetero's own programs and files, found in a slurm.conf it rendered before.
OWN_HOOKS = {"slurm-hetero-prolog", "slurm-hetero-epilog", "hetero-taskprolog", AGENT_ENTRY}
GENERATED = "generated by slurm-hetero"
SITE_RULES_NAME = "job_submit.site.lua"
ENFORCE_ITEMS = frozenset({"associations", "limits", "qos", "safe", "wckeys", "nojobs", "nosteps", "all"})
_COMMENT = re.compile(r"(?<!\\)#")
_VERSIONS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
# What the template writes for the keys it owns (a site's equal setting is no change).
RENDERED = {"selecttype": "select/cons_tres", "prioritytype": "priority/multifactor"}
# Slurm's own value of keys the template writes with slurm-hetero's greenfield choice: an
# imported file that does not set them gets these pinned, so nothing changes by omission
# (as `scontrol show config` printed them on Slurm 22.05.8 and 24.11.5; DefMemPerNode
# stands for "no default memory" and displaces the template's DefMemPerCPU: 0, which
# `scontrol show config` prints as UNLIMITED; the word UNLIMITED in slurm.conf reads as the
# largest number instead, and every job without --mem is refused, "Memory specification can
# not be satisfied", tests/integration/test_foreign_site.py).
SLURM_DEFAULTS = {
    "ReturnToService": "0", "MpiDefault": "none", "TaskPlugin": "task/none",
    "DefMemPerNode": "0", "PriorityWeightQOS": "0", "PriorityWeightFairshare": "0",
    "PriorityWeightAge": "0", "PriorityMaxAge": "7-0", "PriorityDecayHalfLife": "7-0",
    "PreemptType": "preempt/none", "PreemptMode": "OFF", "JobAcctGatherType": "jobacct_gather/none",
    "JobCompType": "jobcomp/none", "SlurmUser": "root", "SlurmdSpoolDir": "/var/spool/slurmd",
    "SlurmctldPidFile": "/run/slurmctld.pid", "SlurmdPidFile": "/run/slurmd.pid",
}
_PINNED_BY = {"defmempernode": ("defmempercpu", "defmempernode", "defmempergpu")}
Groups = dict[tuple[Any, ...], dict[str, Any]]  # node group entries by (hardware, partitions)


@dataclass(frozen=True)
class ConfLine:
    """One logical line: comment cut, continuations joined, `\\#` still escaped."""

    file: str
    line: int  # its first physical line
    text: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Record:
    """A NodeName or PartitionName line with its DEFAULT values applied."""

    name: str
    words: dict[str, tuple[str, str]]  # lower key -> (Key as written, value as written)
    at: ConfLine

    def get(self, key: str) -> str | None:
        word = self.words.get(key)
        return unquote(word[1]) if word else None

    def line(self, record: str, names: str | None = None) -> str:
        rest = [f"{k}={v}" for low, (k, v) in self.words.items() if low != record.lower()]
        return " ".join([f"{record}={names or self.name}", *rest])


@dataclass(frozen=True)
class Imported:
    """The site file (YAML text) and what the import changed or kept, one note a line."""

    text: str
    notes: tuple[str, ...]


# --- reading the files as Slurm does ---------------------------------------------------------


def _read(path: Path, source: str) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InputError(f"{source}: cannot read {path}: {e.strerror}") from e
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(f"{path}: more than {MAX_FILE_BYTES >> 20} MiB is too large for a Slurm config file")
    return raw.decode("utf-8", errors="replace")


def read_conf(path: str | Path, _depth: int = 0, _into: list[ConfLine] | None = None,
              _source: str = "") -> list[ConfLine]:
    """The logical lines of a Slurm config file, its Includes read in place."""
    p = Path(path)
    out = [] if _into is None else _into
    text = _read(p, _source or str(p))
    pending: list[str] = []
    start = 0
    for n, physical in enumerate(text.splitlines(), 1):
        cut = _COMMENT.search(physical)
        body = (physical[:cut.start()] if cut else physical).rstrip()
        if not pending:
            start = n
        if body.endswith("\\") and not body.endswith("\\\\"):
            pending.append(body[:-1])
            continue
        logical = "".join([*pending, body]).strip()
        pending = []
        if not logical:
            continue
        at = ConfLine(str(p), start, logical)
        if "\ufffd" in logical:
            raise InputError(f"{at.where}: not valid UTF-8 (save the file as UTF-8)")
        inc = include_path(logical)
        if inc is not None:
            if _depth >= MAX_INCLUDE_DEPTH:
                raise InputError(f"{at.where}: Include nested more than {MAX_INCLUDE_DEPTH} deep "
                                 "(does a file include itself?)")
            target = Path(inc) if inc.startswith("/") else p.parent / inc
            matches = sorted(glob.glob(str(target))) if glob.has_magic(str(target)) else [str(target)]
            for m in matches:
                read_conf(m, _depth + 1, out, at.where)
            continue
        out.append(at)
        if len(out) > MAX_LINES:
            raise InputError(f"{at.where}: more than {MAX_LINES} lines in all")
    if pending:
        out.append(ConfLine(str(p), start, "".join(pending).strip()))
    return out


def _pairs(at: ConfLine) -> list[tuple[str, str]]:
    try:
        return pairs(at.text)
    except LineError as e:
        raise InputError(f"{at.where}: {e}\n    hint: Slurm's lines are Key=Value words") from e


def _records(lines: Iterable[ConfLine], key: str) -> list[Record]:
    """The lines starting with `key=`, with `key=DEFAULT` lines applied to the later ones."""
    defaults: dict[str, tuple[str, str]] = {}
    out = []
    for at in lines:
        found = _pairs(at)
        if not found or found[0][0].lower() != key:
            continue
        words: dict[str, tuple[str, str]] = {}
        for k, v in found[1:]:
            words[k.lower()] = (k, v)
        if found[0][1].upper() == "DEFAULT":
            defaults.update(words)
            continue
        merged = {**defaults, **words}
        if "features" in merged and "feature" in merged:  # one of each from DEFAULT and the line
            merged.pop("features" if "features" in defaults and "features" not in words else "feature")
        out.append(Record(unquote(found[0][1]), merged, at))
    return out


def _nodeset(text: str, at: ConfLine) -> NodeSet:
    try:
        n, _ = hostlist_size(text)
        if n > MAX_NODES:
            raise InputError(f"{at.where}: {shown(text)} names more than {MAX_NODES} nodes")
        return NodeSet(text)
    except (HostlistError, NodeSetParseError) as e:
        raise InputError(f"{at.where}: bad hostlist {shown(text)}: {e}") from e


def _split_terms(text: str) -> list[str]:
    """Comma-separated terms of a hostlist, commas inside [] kept: 'a[1,2],b' → ['a[1,2]', 'b']."""
    terms: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t for t in terms if t]


# --- accelerators ------------------------------------------------------------------------------


def _catalog() -> dict[str, AccelModel]:
    return {mid: model_from_fields(mid, f) for mid, f in builtin_catalog_data().items()}


def _words_of(text: str) -> list[str]:
    return [w for w in re.split(r"[-_\s]+", text.lower()) if w]


def match_model(gres_name: str, gres_type: str, catalog: dict[str, AccelModel],
                gres_map: dict[str, str]) -> AccelModel | None:
    """The catalog model a `Gres=NAME:TYPE` names: --map, then GRES type or id, then the one
    model whose words are all in the type's (`nvidia_h100_80gb_hbm3` → h100).

    >>> cat = _catalog()
    >>> [match_model("gpu", t, cat, {}).id for t in ("a100_80gb", "nvidia_a100-sxm4-80gb")]
    ['a100-80gb', 'a100-80gb']
    >>> match_model("npu", "910b", cat, {}).id
    'ascend-910b'
    >>> match_model("gpu", "a100", cat, {}) is None  # 40 or 80 GB: --map a100=a100-80gb
    True
    """
    fits = {mid: m for mid, m in catalog.items() if m.gres_name == gres_name}
    mapped = gres_map.get(gres_type.lower()) or gres_map.get(gres_type)
    if mapped:
        return fits.get(mapped.lower())
    low = gres_type.lower()
    for m in fits.values():
        if low in (m.id, m.gres_type.lower()) or low.replace("_", "-") in (m.id, m.gres_type.lower()):
            return m
    have = set(_words_of(low))
    for prefix in ("nvidia", "tesla", "amd", "instinct", "huawei", "ascend"):
        have.discard(prefix)
    hits = [m for m in fits.values()
            if set(_words_of(m.id)) - {"ascend"} <= have or set(_words_of(m.gres_type)) <= have]
    best = max((len(_words_of(m.id)) for m in hits), default=0)
    top = [m for m in hits if len(_words_of(m.id)) == best]
    return top[0] if len(top) == 1 else None


@dataclass(frozen=True)
class Hardware:
    """What a node group says about a NodeName line's nodes."""

    sockets: int
    cores: int
    threads: int
    memory: int
    arch: str
    accels: tuple[tuple[str, int, int], ...]  # (model id, count, shards per device)
    site_types: tuple[tuple[str, str], ...]  # (model id, the site's GRES type), typed GRES only
    features: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    addressing: bool  # per-node NodeAddr/NodeHostname/Port lists that line up with NodeName
    resource_type: str  # CPU, GPU or NPU


def _int(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    m = re.fullmatch(r"(\d+)", value.strip())
    if not m:
        raise ValueError(f"{what}={value} is not a whole number")
    return int(m.group(1))


def _count(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"count {text!r}")
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2).upper()]


def _topology(r: Record) -> tuple[int, int, int]:
    """(sockets, cores per socket, threads per core) as Slurm infers them."""
    cpus = _int(r.get("cpus") or r.get("procs"), "CPUs")
    boards = _int(r.get("boards"), "Boards") or 1
    spb = _int(r.get("socketsperboard"), "SocketsPerBoard")
    sockets = _int(r.get("sockets"), "Sockets") or (spb * boards if spb else None)
    cores = _int(r.get("corespersocket"), "CoresPerSocket")
    threads = _int(r.get("threadspercore"), "ThreadsPerCore") or 1
    if sockets is None and cores is None:
        sockets, cores = (max(1, (cpus or 1) // threads), 1)
    elif sockets is None:
        assert cores is not None
        sockets = max(1, (cpus or cores * threads) // (cores * threads))
    elif cores is None:
        cores = max(1, (cpus or sockets * threads) // (sockets * threads))
    if cpus is not None and cpus != sockets * cores * threads:
        raise ValueError(f"CPUs={cpus} is not Sockets x CoresPerSocket x ThreadsPerCore = "
                         f"{sockets} x {cores} x {threads} (slurm-hetero counts every thread)")
    if not (1 <= sockets <= 64 and 1 <= cores <= 1024 and 1 <= threads <= 8):
        raise ValueError(f"{sockets} sockets x {cores} cores x {threads} threads is beyond the site "
                         "file's limits (64 sockets, 1024 cores, 8 threads)")
    return sockets, cores, threads


def _accelerators(gres: str, catalog: dict[str, AccelModel], gres_map: dict[str, str]
                  ) -> tuple[list[tuple[AccelModel, str, int]], int]:
    """([(model, the site's type, count)], shards) of a Gres= value; ValueError if any part
    is not a catalog model."""
    accels: list[tuple[AccelModel, str, int]] = []
    shards = 0
    for item in _split_terms(unquote(gres)):
        parts = item.split(":")
        name = parts[0].lower()
        if name == "shard" and len(parts) == 2:
            shards += _count(parts[1])
            continue
        if name not in ("gpu", "npu"):
            raise ValueError(f"GRES {item} has no catalog model (slurm-hetero models gpu and npu)")
        if len(parts) == 2 and parts[1].isdigit():
            typ, n = name, _count(parts[1])  # untyped: only --map NAME=MODEL says the model
        elif len(parts) == 3:
            typ, n = parts[1], _count(parts[2])
        else:
            raise ValueError(f"GRES {item} is not NAME:TYPE:COUNT")
        model = match_model(name, typ, catalog, gres_map)
        if model is None:
            raise ValueError(f"GRES type {item} matches no catalog model (or more than one): "
                             f"map it with --map {typ}=MODEL")
        if not 1 <= n <= 64:
            raise ValueError(f"GRES {item}: 1 to 64 devices of a model per node")
        accels.append((model, parts[1] if len(parts) == 3 else "", n))
    return accels, shards


def _hardware(r: Record, catalog: dict[str, AccelModel], gres_map: dict[str, str],
              notes: list[str]) -> Hardware:
    """The node group fields of a NodeName line; ValueError says why it cannot be one."""
    sockets, cores, threads = _topology(r)
    memory = _int(r.get("realmemory"), "RealMemory") or 1
    accels, shards = _accelerators(r.get("gres") or "", catalog, gres_map)
    words = [w for w in (r.get("features") or r.get("feature") or "").split(",") if w]
    bad = [w for w in words if not _FEATURE.match(w)]
    if bad:
        raise ValueError(f"feature {bad[0]!r} is not a plain word (letters, digits, '_', '.', '-')")
    arch = next((ARCH_ALIASES[w.lower()] for w in words if w.lower() in ARCH_ALIASES), None)
    if arch is None:
        arches = {a for m, _, _ in accels for a in m.architectures}
        arch = next(iter(arches)) if len(arches) == 1 else "x86_64"
        if not accels or len(arches) != 1:
            notes.append(f"{r.at.where}: NodeName={r.name}: no feature names the architecture: "
                         "x86_64 assumed (set architecture)")
    for m, _, _ in accels:
        if arch not in m.architectures:
            raise ValueError(f"model {m.id} has no build for {arch}")
    gpus = [(m, n) for m, _, n in accels if m.gres_name == "gpu"]
    per_device = 0
    if shards:
        if len(gpus) != 1 or shards % gpus[0][1]:
            raise ValueError("shards can be modeled on nodes with one GPU model and a whole number "
                             "of shards per GPU")
        per_device = shards // gpus[0][1]
    options = []
    for low, (key, value) in r.words.items():
        if low in NODE_OWNED or (low == "state" and unquote(value).upper() == "UNKNOWN"):
            continue
        problem = check_option(key, value, NODE_OWNED)
        if problem:
            raise ValueError(problem)
        options.append((key, value))
    addressing = any(k.lower() in NODE_ADDRESSING and ("[" in v or "," in v) for k, v in options)
    return Hardware(
        sockets=sockets, cores=cores, threads=threads, memory=memory, arch=arch,
        accels=tuple((m.id, n, per_device if m.gres_name == "gpu" else 0) for m, _, n in accels),
        site_types=tuple((m.id, t) for m, t, _ in accels if t),
        features=tuple(w for w in words if w != arch), options=tuple(options), addressing=addressing,
        resource_type=("NPU" if any(m.resource_type == "NPU" for m, _, _ in accels)
                       else "GPU" if accels else "CPU"))


# --- the import ----------------------------------------------------------------------------------


@dataclass
class _Partition:
    record: Record
    nodes: NodeSet
    modeled: bool = True
    data: dict[str, Any] = field(default_factory=dict)


def _partition_data(p: Record, notes: list[str]) -> dict[str, Any] | None:
    """The site file's entry of a partition; None if it must be kept as written."""
    if not _PARTITION_NAME.match(p.name):
        notes.append(f"{p.at.where}: partition {p.name}: kept as written (the site file's partition "
                     "names are letters, digits, '_', '-')")
        return None
    data: dict[str, Any] = {"name": p.name}
    if (p.get("default") or "NO").upper() == "YES":
        data["default"] = True
    for key, field_ in (("maxtime", "max_time"), ("defaulttime", "default_time")):
        value = p.get(key)
        if value is None:
            continue
        value = value.upper() if value.upper() in ("UNLIMITED", "INFINITE") else value
        if not _SLURM_TIME.match(value):
            notes.append(f"{p.at.where}: partition {p.name}: kept as written ({key}={value} is "
                         "not a time the site file takes)")
            return None
        data[field_] = value
    options: dict[str, str] = {}
    for low, (key, value) in p.words.items():
        if low in PARTITION_OWNED or (low == "state" and unquote(value).upper() == "UP"):
            continue
        problem = check_option(key, value, PARTITION_OWNED)
        if problem:
            notes.append(f"{p.at.where}: partition {p.name}: kept as written ({problem})")
            return None
        options[key] = value
    if "tresbillingweights" in p.words:
        notes.append(f"{p.at.where}: partition {p.name}: TRESBillingWeights replaced by billing in "
                     "normalized units")
    if options:
        data["options"] = options
    return data


def _resolve_nodes(p: Record, every: NodeSet, nodesets: dict[str, Record], by_feature: dict[str, NodeSet],
                   notes: list[str]) -> NodeSet:
    out = NodeSet()
    for term in _split_terms(p.get("nodes") or ""):
        if term.upper() == "ALL":
            out.update(every)
        elif term in nodesets:
            ns = nodesets[term]
            if ns.get("nodes"):
                out.update(_nodeset(ns.get("nodes") or "", ns.at) & every)
            for feat in (ns.get("feature") or ns.get("features") or "").split(","):
                out.update(by_feature.get(feat, NodeSet()))
        else:
            nodes = _nodeset(term, p.at)
            unknown = nodes - every
            if unknown:
                notes.append(f"{p.at.where}: partition {p.name}: node {unknown[0]} is not defined by a "
                             "NodeName line (ignored, as slurmctld would refuse it)")
            out.update(nodes & every)
    return out


@dataclass
class _Globals:
    cluster: str | None = None
    controllers: list[str] = field(default_factory=list)
    legacy: dict[str, str] = field(default_factory=dict)
    accounting: dict[str, Any] = field(default_factory=dict)
    tres: list[str] = field(default_factory=list)
    agent: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)  # lower key -> line (REPEATABLE: key#n)
    seen: set[str] = field(default_factory=set)  # owned keys the file sets
    hooks: dict[str, tuple[str, ConfLine]] = field(default_factory=dict)  # prolog, ... -> (value, line)
    parameters_at: ConfLine | None = None  # the SlurmctldParameters line Slurm takes (the last)


def _globals(lines: list[ConfLine], notes: list[str]) -> _Globals:
    g = _Globals()
    for at in lines:
        found = _pairs(at)
        if not found:
            continue
        low = found[0][0].lower()
        if low in ("nodename", "partitionname"):
            continue
        if low in REPEATABLE:  # NodeSet, DownNodes, FrontendName: the whole record line
            g.extra[f"{low}#{len(g.extra)}"] = " ".join(f"{k}={v}" for k, v in found)
            continue
        for key, value in found:
            _global(g, key, value, at, notes)
    return g


def _global(g: _Globals, key: str, value: str, at: ConfLine, notes: list[str]) -> None:
    low, plain = key.lower(), unquote(value)
    if low == "clustername":
        g.cluster = plain
    elif low == "slurmctldhost":
        g.controllers.append(plain)
    elif low in ("controlmachine", "controladdr", "backupcontroller", "backupaddr"):
        g.legacy[low] = plain
    elif low == "accountingstoragehost":
        g.accounting["host"] = plain
    elif low == "accountingstorageport":
        g.accounting["port"] = int(plain) if plain.isdigit() else plain
    elif low == "accountingstoragetres":
        g.tres += [t for t in plain.split(",") if t]
    elif low == "healthcheckprogram":
        g.seen.add(low)
        if _HEALTH.match(plain):
            g.agent["health_check"] = plain
        else:
            notes.append(f"{at.where}: HealthCheckProgram={plain}: not kept (node_agent.health_check "
                         "is an absolute path without arguments)")
    elif low == "healthcheckinterval":
        if plain.isdigit() and int(plain) <= 86400:
            g.agent["restore_interval"] = int(plain)
    elif low == "grestypes":
        pass  # derived from the nodes' GRES
    elif low in ("prolog", "epilog", "taskprolog", "plugstackconfig", "jobsubmitplugins"):
        g.seen.add(low)
        g.hooks[low] = (plain, at)  # the site's own: joined, not replaced (_site_hooks)
    elif low in OWNED:
        if RENDERED.get(low, "").lower() != plain.lower():
            notes.append(f"{at.where}: {key}={plain}: replaced ({OWNED_REASONS[low]})")
        g.seen.add(low)
    else:
        if low in g.extra:
            notes.append(f"{at.where}: {key} is set again: the later line is kept, as Slurm does")
        g.extra[low] = f"{key}={value}"
        if low == "slurmctldparameters":
            g.parameters_at = at


def _configless(g: _Globals, notes: list[str]) -> None:
    """A configless site's slurmd get slurm.conf and Slurm's other files from slurmctld, never
    slurm-hetero's: say where those go (conf/nodefiles.py)."""
    line = g.extra.get("slurmctldparameters")
    if line and g.parameters_at is not None and is_configless([line]):
        notes.append(f"{g.parameters_at.where}: SlurmctldParameters=enable_configless: a configless site "
                     "(kept): slurmd fetch slurm.conf, gres.conf, cgroup.conf, plugstack.conf, oci.conf from "
                     f"slurmctld, never slurm-hetero's files: {', '.join(NODE_FILES)} go to {NODE_DIR} on "
                     "every compute node (`conf render` names them, the Ansible role installs them there)")


def _pin_defaults(g: _Globals, conf: Path, notes: list[str]) -> None:
    """Pin Slurm's own values of what the file leaves unset and the template would set;
    note the unset keys whose Slurm default slurm-hetero changes."""
    for key, value in SLURM_DEFAULTS.items():
        if not any(k in g.extra for k in _PINNED_BY.get(key.lower(), (key.lower(),))):
            g.extra[key.lower()] = f"{key}={value}"

    def note_unset(key: str, kept: Collection[str], why: str) -> None:
        # Owned keys the file sets are in g.seen, the others in g.extra: `kept` says which.
        if key.lower() not in kept:
            notes.append(f"{conf}: {key} is not set{why}")

    note_unset("SelectType", g.seen, ": Slurm 22.05 then allocates whole nodes "
               "(select/linear; 24.11: select/cons_tres); rendered: select/cons_tres")
    note_unset("PriorityType", g.seen, ": Slurm 22.05 then orders by age "
               "(priority/basic; 24.11: priority/multifactor); rendered: priority/multifactor")
    note_unset("AccountingStorageType", g.extra, ": slurm-hetero needs slurmdbd (GRES "
               "TRES, QoS tiers): set slurm.accounting.host before deploying")
    note_unset("HealthCheckProgram", g.seen, ": slurm-hetero's device restore becomes "
               "the health check, every node_agent.restore_interval (300 s)")
    # Comma lists slurm-hetero adds items to (slurmlines.MERGED): say which, and why.
    flags = {i.lower() for i in unquote(g.extra.get("prologflags", "=").split("=", 1)[1]).split(",") if i}
    if not flags & {"alloc", "contain", "x11"}:  # Contain and X11 imply Alloc
        notes.append(f"{conf}: PrologFlags: Alloc added (the node agent sets the job's devices when its "
                     "allocation starts, before any step)")
    note_unset("CpuFreqGovernors", g.extra, " (Slurm allows OnDemand, Performance, "
               "UserSpace): rendered with PowerSave, SchedUtil, Conservative too (the energy "
               "policies ask for them)")
    cgroup = conf.parent / "cgroup.conf"
    notes.append(f"{cgroup}: " + ("not imported: " if cgroup.exists() else "none: ") + "the rendered "
                 "cgroup.conf constrains cores, RAM, swap and devices (check it against the site's)")
    for key in ("SlurmctldLogFile", "SlurmdLogFile"):
        note_unset(key, g.extra, ": Slurm logs to syslog; rendered: /var/log/slurm/")


def _site_hooks(g: _Globals, conf: Path, notes: list[str]) -> dict[str, Any]:
    """The site's own Prolog, Epilog, TaskProlog, plugstack.conf lines and job_submit.lua,
    as `slurm:` fields: slurm-hetero's hooks join them (site/hooks.py, bridge/siterules.lua)."""
    out: dict[str, Any] = {}
    for low, key, name in (("prolog", "Prolog", "prolog"), ("epilog", "Epilog", "epilog"),
                           ("taskprolog", "TaskProlog", "task_prolog")):
        if low not in g.hooks:
            continue
        value, at = g.hooks[low]
        if posixpath.basename(value) in OWN_HOOKS:
            notes.append(f"{at.where}: {key}={value}: slurm-hetero's own, rendered again")
            continue
        problem = (None if _HOOK.match(value) else "not an absolute path without blanks") or (
            glob_problem(value) if low != "taskprolog" else
            "TaskProlog takes one program, not a glob" if is_glob(value) else None)
        if problem:
            notes.append(f"{at.where}: {key}={value}: not kept ({problem}): slurm-hetero's node agent "
                         f"alone would run; set slurm.{name} to keep the site's")
            continue
        out[name] = value
        if low == "taskprolog":
            how = "slurm-hetero's TaskProlog, where it renders one, runs it first"
        elif is_glob(value):
            folder, pattern = posixpath.split(value)
            prefix, _, suffix = pattern.partition("*")
            how = (f"the node agent joins it as {folder}/{prefix}{AGENT_ENTRY}{suffix} (run first), "
                   "linked on every compute node")
        else:
            how = (f"rendered as a folder of slurm-hetero's ({key}=/etc/slurm/{low}.d/*) holding the node "
                   "agent and a link to it, which runs as it did")
        notes.append(f"{at.where}: {key}={value}: kept (slurm.{name}); {how}")
    out.update(_plugstack(g, conf, notes))
    out.update(_job_submit(g, conf, notes))
    return out


def _plugstack(g: _Globals, conf: Path, notes: list[str]) -> dict[str, Any]:
    """The site's plugstack.conf lines (PlugStackConfig, else Slurm's default beside slurm.conf)."""
    value, at = g.hooks.get("plugstackconfig", ("", None))
    # Slurm's default is plugstack.conf beside slurm.conf; a relative value is read from there too.
    path = conf.parent / (value or "plugstack.conf")
    where = at.where if at else str(conf)
    if not value and not path.is_file():
        return {}
    try:
        lines = read_plugstack(path)
    except InputError as e:
        notes.append(f"{where}: PlugStackConfig={path}: not read ({e}): set slurm.plugstack_lines "
                     "to keep its plugins")
        return {}
    kept = []
    for n, line in lines:
        words = line.split()
        if len(words) > 1 and posixpath.basename(words[1]) == "hetero.so":
            continue  # slurm-hetero's own plugin: the rendered line loads it
        problem = plugstack_problem(line)
        if problem:
            notes.append(f"{path}:{n}: not kept ({problem}): {line[:80]}")
        else:
            kept.append(line)
    if kept:
        notes.append(f"{path}: {len(kept)} line(s) kept (slurm.plugstack_lines): the rendered "
                     "plugstack.conf loads them after the hetero plugin")
    return {"plugstack_lines": kept} if kept else {}


def read_plugstack(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of a plugstack.conf, comments and blank lines left out."""
    text = _read(path, str(path))
    out = []
    for n, physical in enumerate(text.splitlines(), 1):
        line = physical.split("#", 1)[0].strip()
        if line:
            out.append((n, " ".join(line.split())))
    return out


def _job_submit(g: _Globals, conf: Path, notes: list[str]) -> dict[str, Any]:
    """The site's job_submit.lua, if JobSubmitPlugins has lua and one lies beside slurm.conf."""
    if "jobsubmitplugins" not in g.hooks:
        return {}
    value, at = g.hooks["jobsubmitplugins"]
    plugins = [p.strip() for p in value.split(",") if p.strip()]
    others = [p for p in plugins if p.lower() not in ("lua", "job_submit/lua")]
    if others:
        notes.append(f"{at.where}: JobSubmitPlugins={value}: {', '.join(others)} not rendered (slurm-hetero "
                     "renders JobSubmitPlugins=lua): carry their effect into the site's job_submit.lua")
    if len(others) == len(plugins):
        return {}
    script = conf.parent / "job_submit.lua"
    try:
        head = script.read_bytes()[:2048].decode("utf-8", errors="replace")
    except OSError:
        notes.append(f"{at.where}: JobSubmitPlugins=lua: no readable {script} here: if the controller has "
                     "its own job_submit.lua, name a copy of it in slurm.job_submit.script (its rules then "
                     "run inside the bridge's)")
        return {}
    if GENERATED in head:
        return {}  # the bridge's own, rendered before
    target = script.resolve().with_name(SITE_RULES_NAME)
    notes.append(f"{at.where}: JobSubmitPlugins=lua: the site's job_submit.lua keeps running, inside the "
                 f"bridge's, before it (slurm.job_submit): copy {script} to {target} on the controller "
                 "before deploying (the rendered job_submit.lua takes its name and loads it from there)")
    return {"job_submit": {"script": str(target)}}


def _controllers(g: _Globals, notes: list[str]) -> list[str]:
    hosts = list(g.controllers)
    if not hosts and "controlmachine" in g.legacy:
        hosts.append(g.legacy["controlmachine"] + (f"({g.legacy['controladdr']})"
                                                   if "controladdr" in g.legacy else ""))
        if "backupcontroller" in g.legacy:
            hosts.append(g.legacy["backupcontroller"] + (f"({g.legacy['backupaddr']})"
                                                         if "backupaddr" in g.legacy else ""))
    good = [h for h in hosts if _CONTROLLER.match(h)]
    for h in hosts:
        if h not in good:
            notes.append(f"SlurmctldHost={h}: not a host or host(addr) the site file takes: left out")
    return good


@dataclass
class _Nodes:
    records: list[Record]
    sets: list[NodeSet]
    hardware: list[Hardware | str]  # or why the line cannot be a node group
    every: NodeSet
    by_feature: dict[str, NodeSet]


def _read_nodes(lines: list[ConfLine], catalog: dict[str, AccelModel], gres_map: dict[str, str],
                notes: list[str]) -> _Nodes:
    """Every node once, with its line's hardware or why it cannot be modeled."""
    out = _Nodes(_records(lines, "nodename"), [], [], NodeSet(), {})
    for r in out.records:
        ns = _nodeset(r.name, r.at)
        if ns & out.every:
            raise InputError(f"{r.at.where}: node {(ns & out.every)[0]} is defined twice")
        out.every.update(ns)
        if len(out.every) > MAX_NODES:
            raise InputError(f"{r.at.where}: more than {MAX_NODES} nodes")
        out.sets.append(ns)
        for feat in (r.get("features") or r.get("feature") or "").split(","):
            if feat:
                out.by_feature.setdefault(feat, NodeSet()).update(ns)
        try:
            out.hardware.append(_hardware(r, catalog, gres_map, notes))
        except ValueError as e:
            out.hardware.append(str(e))
        if "weight" in r.words:
            notes.append(f"{r.at.where}: NodeName={r.name}: Weight={r.get('weight')} replaced "
                         "(slurm-hetero orders nodes by normalized units)")
    return out


def _site_types(groups: Groups, catalog: dict[str, AccelModel],
                conf: Path) -> dict[str, str]:
    """Model id -> the site's GRES type where it is not the catalog's."""
    types: dict[str, str] = {}
    for grp in groups.values():
        for mid, typ in grp["_types"]:
            if types.setdefault(mid, typ) != typ:
                raise InputError(f"{conf}: GRES types {types[mid]} and {typ} both name model {mid}: "
                                 "one GRES type per model (map the other to another model with --map)")
    return {mid: t for mid, t in types.items() if t != catalog[mid].gres_type}


def _site_name(cluster: str | None, name: str | None) -> str:
    low = (cluster or "").lower()
    site_name = name or (low if _SITE_NAME.match(low) else
                         re.sub(r"[^a-z0-9_]", "_", low)[:40] if low[:1].isalpha() else "imported")
    if not _SITE_NAME.match(site_name):
        raise InputError(f"--name {site_name}: a site name is lowercase letters, digits and '_' "
                         "(at most 40, starting with a letter)")
    return site_name


def import_site(slurm_conf: str | Path, gres_conf: str | Path | None = None, *, name: str | None = None,
                version: str | None = None, gres_map: dict[str, str] | None = None) -> Imported:
    """Read slurm.conf (and gres.conf) into a site file. Raises InputError (exit 2) for files
    Slurm could not read either, with file:line."""
    conf_path = Path(slurm_conf)
    if version is not None and version not in _VERSIONS:
        raise InputError(f"--slurm-version {version}: allowed: {', '.join(_VERSIONS)}")
    notes: list[str] = []
    lines = read_conf(conf_path)
    gres = read_conf(gres_conf) if gres_conf else []
    catalog = _catalog()
    nodes = _read_nodes(lines, catalog, {k.lower(): v for k, v in (gres_map or {}).items()}, notes)
    g = _globals(lines, notes)
    _configless(g, notes)
    _pin_defaults(g, conf_path, notes)

    # Partitions: their nodes (hostlists, ALL, NodeSets); which can be modeled.
    nodesets = {unquote(v): Record(unquote(v), {k.lower(): (k, w) for k, w in _pairs(at)[1:]}, at)
                for at in lines for k, v in _pairs(at)[:1] if k.lower() == "nodeset"}
    partitions = [_Partition(p, _resolve_nodes(p, nodes.every, nodesets, nodes.by_feature, notes))
                  for p in _records(lines, "partitionname")]
    for part in partitions:
        entry = _partition_data(part.record, notes)
        part.modeled, part.data = entry is not None, entry or {}

    # Node groups: the modeled nodes by (hardware, modeled partitions); the rest kept. A
    # partition left with no modeled node is kept as written, which may leave others so.
    while True:
        groups, kept, kept_sets, group_notes = _group(nodes, partitions)
        empty = [p for p in partitions if p.modeled
                 and not any(p.record.name in grp["partitions"] for grp in groups.values())]
        if not empty:
            break
        for p in empty:
            p.modeled = False
            notes.append(f"{p.record.at.where}: partition {p.record.name}: kept as written (none of its "
                         "nodes is modeled)")
    notes += group_notes
    if not groups:
        raise InputError(f"{conf_path}: no node could be modeled: " + "; ".join(notes[:5]))
    site_types = _site_types(groups, catalog, conf_path)
    kept_all = NodeSet.fromlist([str(s) for s in kept_sets]) if kept_sets else NodeSet()
    for p in partitions:
        if p.modeled and p.nodes & kept_all:
            p.data["extra_nodes"] = str(p.nodes & kept_all)

    site_name = _site_name(g.cluster, name)
    slurm: dict[str, Any] = {}
    if g.cluster is None:
        notes.append(f"{conf_path}: no ClusterName: the site's name {site_name} will be Slurm's ClusterName")
    elif g.cluster != site_name:
        if _CLUSTER_NAME.match(g.cluster):
            slurm["cluster_name"] = g.cluster
        else:
            notes.append(f"ClusterName={g.cluster}: Slurm's cluster names are lowercase: rendered as "
                         f"{site_name} (the accounting database must know it)")
    models_used = {a["model"] for grp in groups.values() for a in grp.get("accelerators", [])}
    slurm.update({
        "controllers": _controllers(g, notes),
        "accounting": _accounting(g, models_used, catalog, site_types, notes),
        "version": version,
        "extra_lines": [line for line in g.extra.values() if _passable(line, notes)],
        "keep_nodes": kept,
        "keep_partitions": [p.record.line("PartitionName") for p in partitions if not p.modeled],
        "gres_lines": _gres_lines(gres, groups, catalog, site_types, notes),
        **_site_hooks(g, conf_path, notes),
    })
    data: dict[str, Any] = {
        "name": site_name, "description": f"imported from {conf_path} by slurm-hetero conf import",
        "partitions": [p.data for p in partitions if p.modeled],
        "node_groups": [{k: v for k, v in grp.items() if not k.startswith("_")} for grp in groups.values()],
        "catalog": {mid: {"gres_type": typ} for mid, typ in sorted(site_types.items())},
        "node_agent": g.agent,
        "slurm": {k: v for k, v in slurm.items() if v},
    }
    text = _yaml({k: v for k, v in data.items() if v}, conf_path, gres_conf, notes)
    _check(text, conf_path)
    return Imported(text, tuple(notes))


def _group(nodes: _Nodes, partitions: list[_Partition]) -> tuple[Groups, list[str], list[NodeSet], list[str]]:
    """Node groups keyed by (hardware, partitions); the kept lines, their nodes; notes."""
    modeled = [p for p in partitions if p.modeled]
    groups: Groups = {}
    kept: list[str] = []
    kept_sets: list[NodeSet] = []
    notes: list[str] = []
    for r, ns, hw in zip(nodes.records, nodes.sets, nodes.hardware, strict=True):
        if isinstance(hw, str):
            notes.append(f"{r.at.where}: NodeName={r.name}: kept as written ({hw})")
            kept.append(r.line("NodeName"))
            kept_sets.append(ns)
            continue
        member: dict[str, tuple[str, ...]] = {}
        for p in modeled:
            for node in p.nodes & ns:
                member[node] = (*member.get(node, ()), p.record.name)
        by_parts: dict[tuple[str, ...], NodeSet] = {}
        for node in ns:
            by_parts.setdefault(member.get(node, ()), NodeSet()).add(node)
        if hw.addressing and (len(by_parts) > 1 or str(ns) != r.name):
            notes.append(f"{r.at.where}: NodeName={r.name}: kept as written (its per-node addresses line "
                         "up with the names as written, which a node group would split or reorder)")
            kept.append(r.line("NodeName"))
            kept_sets.append(ns)
            continue
        for parts_, sub in by_parts.items():
            if not parts_:
                notes.append(f"{r.at.where}: NodeName={sub}: kept as written (in no partition "
                             "slurm-hetero models)")
                kept.append(r.line("NodeName", str(sub)))
                kept_sets.append(sub)
                continue
            key = (hw, parts_, r.at.where if hw.addressing else "")
            grp = groups.get(key)
            if grp is None:
                groups[key] = _group_data(hw, parts_, sub)
            else:
                grp["_nodes"].update(sub)
                grp["names"] = str(grp["_nodes"])
    return groups, kept, kept_sets, notes


def _group_data(hw: Hardware, parts: tuple[str, ...], nodes: NodeSet) -> dict[str, Any]:
    data: dict[str, Any] = {
        "names": str(nodes), "_nodes": NodeSet(nodes), "_types": hw.site_types,
        "resource_type": hw.resource_type, "architecture": hw.arch, "sockets": hw.sockets,
        "cores_per_socket": hw.cores, "threads_per_core": hw.threads, "memory": hw.memory,
        "partitions": list(parts),
    }
    if hw.accels:
        data["accelerators"] = [{"model": mid, "count": n, **({"shards_per_device": s} if s else {})}
                                for mid, n, s in hw.accels]
    if hw.features:
        data["features"] = list(hw.features)
    if hw.options:
        data["options"] = {k: (int(v) if v.isdigit() and len(v) < 18 else v) for k, v in hw.options}
    return data


def _accounting(g: _Globals, models_used: set[str], catalog: dict[str, AccelModel],
                site_types: dict[str, str], notes: list[str]) -> dict[str, Any]:
    acct: dict[str, Any] = {}
    host, port = g.accounting.get("host"), g.accounting.get("port")
    if host is not None:
        if _HOST.match(str(host)):
            acct["host"] = host
        else:
            notes.append(f"AccountingStorageHost={host}: not a host name the site file takes: left out")
    if port is not None:
        if isinstance(port, int) and 1 <= port <= 65535:
            acct["port"] = port
        else:
            notes.append(f"AccountingStoragePort={port}: not a port: left out")
    rendered = {"gres/gpu", "gres/npu", "gres/shard"}
    for mid in models_used:
        m = catalog[mid]
        rendered.add(f"gres/{m.gres_name}:{site_types.get(mid, m.gres_type)}".lower())
    tres: list[str] = []
    for t in g.tres:
        if t.lower() in rendered or t.lower() in {x.lower() for x in tres}:
            continue
        if t.lower() in ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages"):
            tres.append(t)  # Slurm's own TRES: listed by sites, harmless
        elif _TRES.match(t):
            tres.append(t)
        else:
            notes.append(f"AccountingStorageTRES entry {t}: not a TRES name the site file takes: left out")
    if tres:
        acct["tres"] = tres
    acct.update(_enforce(g, notes))
    return acct


def _enforce(g: _Globals, notes: list[str]) -> dict[str, Any]:
    """AccountingStorageEnforce as slurm.accounting.enforce ([] where the file leaves it unset:
    Slurm then enforces nothing, and `none` is no value it takes)."""
    line = g.extra.get("accountingstorageenforce")
    if line is None:
        notes.append("AccountingStorageEnforce is not set (Slurm enforces nothing): kept so "
                     f"(slurm.accounting.enforce: []); a new site would get {','.join(ENFORCE_DEFAULT)}, "
                     "and limits is added only where a tier caps accelerators (the render says so)")
        return {"enforce": []}
    items = [i.strip().lower() for i in unquote(line.split("=", 1)[1]).split(",") if i.strip()]
    if not set(items) <= ENFORCE_ITEMS or len(set(items)) != len(items):
        return {}  # kept as written in extra_lines
    del g.extra["accountingstorageenforce"]
    if not {"limits", "safe", "all"} & set(items):
        notes.append(f"AccountingStorageEnforce={','.join(items)}: kept (slurm.accounting.enforce); "
                     "limits is added only where a tier caps accelerators (the render says so)")
    return {"enforce": items}


def _passable(line: str, notes: list[str]) -> bool:
    _, problem = check_extra_line(line)
    if problem:
        notes.append(f"{line[:80]}: not kept ({problem})")
    return problem is None


def _gres_lines(lines: list[ConfLine], groups: Groups,
                catalog: dict[str, AccelModel], site_types: dict[str, str], notes: list[str]) -> list[str]:
    """gres.conf lines to keep: all but those equal to what `conf render` writes for a group."""
    generated: dict[tuple[str, str, str, str], str] = {}  # (nodes, name, type, file or count)
    for grp in groups.values():
        first: dict[str, int] = {}
        for a in grp.get("accelerators", []):
            m = catalog[a["model"]]
            start = first.get(m.gres_name, 0)
            first[m.gres_name] = start + a["count"]
            prefix = {"cuda": "nvidia", "cann": "davinci", "rocm": "dri/renderD"}[m.stack]
            lo = start + (128 if m.stack == "rocm" else 0)
            span = f"{lo}" if a["count"] == 1 else f"[{lo}-{lo + a['count'] - 1}]"
            typ = site_types.get(m.id, m.gres_type)
            generated[(grp["names"], m.gres_name, typ, f"/dev/{prefix}{span}")] = grp["names"]
            if a.get("shards_per_device"):
                shards = str(a["count"] * a["shards_per_device"])
                generated[(grp["names"], "shard", "", shards)] = grp["names"]
    out: list[str] = []
    parsed = []
    for at in lines:
        found = _pairs(at)
        words = {k.lower(): unquote(v) for k, v in found}
        parsed.append((at, found, words))
    for at, found, words in parsed:
        if set(words) <= {"nodename", "name", "type", "file", "count"} and "nodename" in words:
            nodes = str(_nodeset(words["nodename"], at))
            key = (nodes, words.get("name", ""), words.get("type", ""),
                   words.get("file") or words.get("count", ""))
            twins = [w for _, _, w in parsed if w is not words and w.get("name") == words.get("name")
                     and "nodename" in w and _nodeset(w["nodename"], at) & NodeSet(nodes)]
            if key in generated and not twins:
                continue  # `conf render` writes exactly this line
        out.append(" ".join(f"{k}={v}" for k, v in found))
    if out:
        notes.append(f"gres.conf: {len(out)} line(s) kept as written (slurm.gres_lines); they replace "
                     "the generated lines of the nodes they name")
    return out


def _yaml(data: dict[str, Any], conf: Path, gres: str | Path | None, notes: list[str]) -> str:
    head = [f"# Imported by `slurm-hetero conf import` from {conf}" + (f" and {gres}" if gres else "") + ".",
            "# Review it, then see what a render would change: slurm-hetero conf diff SITE --against DIR"]
    if notes:
        head.append("# Notes:")
        head += [f"#   {n}".replace("\n", " ") for n in notes]
    body = yaml.safe_dump(data, sort_keys=False, width=1 << 20, allow_unicode=True, default_flow_style=False)
    return "\n".join(head) + "\n" + body


def _check(text: str, conf: Path) -> None:
    from slurm_hetero.site.load import SiteError, load_site_text

    try:
        load_site_text(text, f"<import of {conf}>")
    except SiteError as e:
        raise InputError(f"{conf}: the imported site file does not validate (a bug: please "
                         f"report it):\n{e}") from e
