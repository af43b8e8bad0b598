"""Load a site file: YAML with source positions → JSON Schema → semantic checks → Site.

Every problem is collected (not just the first) and reported with its YAML location and
a hint, so an admin can fix a site file in one pass.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_hetero.containers.siteload import load_containers
from slurm_hetero.energy.policies import DEFAULT_POLICIES, AutoRule, EnergyPolicy, parse_power_cap
from slurm_hetero.errors import InputError
from slurm_hetero.site.catalog import (
    DEFAULT_WEIGHTS,
    AccelModel,
    Normalization,
    builtin_catalog_data,
    model_from_fields,
    normalize,
)
from slurm_hetero.site.model import AccelGroup, Billing, NodeAgent, NodeGroup, Partition, QosTier, Site
from slurm_hetero.site.units import parse_bandwidth_gbs, parse_size_mib

ARCH_ALIASES = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "x86-64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "armv8": "aarch64",
}
DEFAULT_QOS = (
    {"name": "diamond", "priority": 1000, "preempt": ["gold", "silver"], "usage_factor": 2.0},
    {"name": "gold", "priority": 500, "preempt": ["silver"], "usage_factor": 1.0, "default": True},
    {"name": "silver", "priority": 100, "usage_factor": 0.5},
)
_MODEL_REQUIRED = ("stack", "resource_type", "device_memory", "memory_bandwidth", "tdp_watts",
                   "compute_units")

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    path: Path_
    message: str
    hint: str = ""

    def format(self, source: str, positions: dict[Path_, tuple[int, int]]) -> str:
        line, col = _position(self.path, positions)
        where = f"{source}:{line}:{col}" if line else source
        text = f"{where}: {_dotted(self.path) or '(top level)'}: {self.message}"
        return text + (f"\n    hint: {self.hint}" if self.hint else "")


class SiteError(InputError):
    """All problems of one site file; str() is the full, ordered report."""

    def __init__(self, source: str, lines: list[str]):
        self.source = source
        self.lines = lines
        n = len(lines)
        super().__init__(f"{source}: {n} problem{'s' if n != 1 else ''}\n" + "\n".join(lines))


def _dotted(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _position(path: Path_, positions: dict[Path_, tuple[int, int]]) -> tuple[int, int]:
    # The deepest ancestor that exists in the YAML (a missing field points at its parent).
    for n in range(len(path), -1, -1):
        if path[:n] in positions:
            return positions[path[:n]]
    return (0, 0)


def _compose(text: str, source: str) -> tuple[Any, dict[Path_, tuple[int, int]], list[Problem]]:
    """Parse YAML, returning data, a path → (line, col) map, and duplicate-key problems."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise SiteError(source, [f"{where}: not valid YAML: {getattr(e, 'problem', e)}"]) from e
    positions: dict[Path_, tuple[int, int]] = {}
    problems: list[Problem] = []

    def walk(n: yaml.Node, path: Path_) -> None:
        positions[path] = (n.start_mark.line + 1, n.start_mark.column + 1)
        if isinstance(n, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in n.value:
                key = str(k.value)
                if key in seen:
                    problems.append(Problem((*path, key), f"duplicate key {key!r}",
                                            "each key may appear once; the later one would win"))
                seen.add(key)
                walk(v, (*path, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, (*path, i))

    if node is None:
        return None, positions, problems
    walk(node, ())
    data = yaml.safe_load(text)
    return data, positions, problems


def _schema() -> dict[str, Any]:
    text = resources.files("slurm_hetero.site").joinpath("schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def _schema_problems(data: Any) -> list[Problem]:
    validator = jsonschema.Draft202012Validator(_schema())
    out = []
    for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        path = tuple(err.absolute_path)
        msg, hint = err.message, ""
        if err.validator == "pattern":
            desc = err.schema.get("description", "")
            msg = f"{err.instance!r} is not allowed: must match {err.validator_value}"
            hint = desc
        elif err.validator == "additionalProperties":
            allowed = sorted(err.schema.get("properties", {}))
            if allowed:
                hint = "allowed keys: " + ", ".join(allowed)
        elif err.validator == "required":
            hint = "see site/demo/site.yaml for a complete example"
        elif err.validator == "type" and err.schema.get("description"):
            hint = err.schema["description"]  # e.g. quote versions: "12.4"
        out.append(Problem(path, msg, hint))
    return out


def _near(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name.lower(), list(known), n=3, cutoff=0.6)
    return f"did you mean: {', '.join(close)}?" if close else "known: " + ", ".join(sorted(known))


class _Builder:
    """Semantic checks over schema-valid data; collects problems, builds the Site."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.problems: list[Problem] = []

    def err(self, path: Path_, message: str, hint: str = "") -> None:
        self.problems.append(Problem(path, message, hint))

    def catalog(self) -> tuple[dict[str, AccelModel], Normalization]:
        raw = builtin_catalog_data()
        for mid, fields in (self.data.get("catalog") or {}).items():
            if mid in raw:
                raw[mid] = {**raw[mid], **fields}
            else:
                missing = [f for f in _MODEL_REQUIRED if f not in fields]
                if missing:
                    self.err(("catalog", mid), f"new model {mid!r} lacks {', '.join(missing)}",
                             "a model not in the built-in catalog needs every datasheet field")
                    continue
                raw[mid] = dict(fields)
        models: dict[str, AccelModel] = {}
        site_cat = self.data.get("catalog") or {}
        for mid, fields in raw.items():
            base: Path_ = ("catalog", mid)
            try:
                models[mid] = model_from_fields(mid, fields)
            except ValueError as e:
                key = "memory_bandwidth" if "bandwidth" in str(e) else "device_memory"
                self.err((*base, key) if mid in site_cat else base, str(e))
                continue
            bad = [a for a in models[mid].architectures if a not in ARCH_ALIASES]
            if bad:
                self.err((*base, "architectures"), f"unknown architecture {bad[0]!r}",
                         "allowed: x86_64, aarch64 (aliases arm64, ARMv8)")
            models[mid] = _with_arches(models[mid])
            if models[mid].tensor_tflops <= 0:
                self.err(base, f"model {mid!r} has no fp16, bf16 or fp32 throughput",
                         "normalization needs at least one of fp16_tflops, bf16_tflops, fp32_tflops")
        norm_data = self.data.get("normalization") or {}
        norm = Normalization(
            reference=norm_data.get("reference", "a100-80gb"),
            weights={**DEFAULT_WEIGHTS, **(norm_data.get("weights") or {})},
        )
        if norm.reference not in models:
            self.err(("normalization", "reference"), f"unknown reference model {norm.reference!r}",
                     _near(norm.reference, models))
            return models, norm
        return normalize(models, norm), norm

    def partitions(self) -> tuple[Partition, ...]:
        out, seen = [], set()
        for i, p in enumerate(self.data["partitions"]):
            if p["name"] in seen:
                self.err(("partitions", i, "name"), f"duplicate partition {p['name']!r}")
            seen.add(p["name"])
            out.append(Partition(p["name"], bool(p.get("default", False)),
                                 p.get("max_time", "UNLIMITED"), p.get("default_time"),
                                 bool(p.get("predicted_limits", False))))
        if sum(p.default for p in out) > 1:
            self.err(("partitions",), "more than one partition has default: true",
                     "mark exactly one partition as the default (or none)")
        return tuple(out)

    def qos(self) -> tuple[tuple[QosTier, ...], str]:
        items = self.data.get("qos") or list(DEFAULT_QOS)
        names = [q["name"] for q in items]
        tiers = []
        for i, q in enumerate(items):
            if names.count(q["name"]) > 1 and names.index(q["name"]) != i:
                self.err(("qos", i, "name"), f"duplicate QoS tier {q['name']!r}")
            for j, target in enumerate(q.get("preempt", [])):
                if target not in names or target == q["name"]:
                    self.err(("qos", i, "preempt", j), f"cannot preempt {target!r}",
                             "preempt lists other tiers of this site: " + ", ".join(names))
            tiers.append(QosTier(q["name"], q["priority"], tuple(q.get("preempt", [])),
                                 float(q.get("usage_factor", 1.0))))
        defaults = [q["name"] for q in items if q.get("default")]
        if len(defaults) > 1:
            self.err(("qos",), "more than one QoS tier has default: true")
        default = defaults[0] if defaults else min(tiers, key=lambda t: t.priority).name
        return tuple(tiers), default

    def node_groups(self, models: dict[str, AccelModel], partitions: set[str]) -> tuple[NodeGroup, ...]:
        groups: list[NodeGroup] = []
        owner: dict[str, int] = {}
        for i, g in enumerate(self.data["node_groups"]):
            base: Path_ = ("node_groups", i)
            try:
                nodes = NodeSet(g["names"])
            except NodeSetParseError as e:
                self.err((*base, "names"), f"bad hostlist {g['names']!r}: {e}",
                         "use names like gpu[001-128] or a,b,c")
                continue
            for node in nodes:
                if node in owner:
                    self.err((*base, "names"),
                             f"node {node} is also in node_groups[{owner[node]}]",
                             "hostlists of node groups must not overlap")
                    break
            for node in nodes:
                owner.setdefault(node, i)
            arch = ARCH_ALIASES.get(str(g["architecture"]).lower())
            if arch is None:
                self.err((*base, "architecture"), f"unknown architecture {g['architecture']!r}",
                         "allowed: x86_64, aarch64 (aliases arm64, ARMv8)")
                arch = "x86_64"
            accels = []
            for j, a in enumerate(g.get("accelerators", [])):
                apath: Path_ = (*base, "accelerators", j, "model")
                model = models.get(str(a["model"]).lower())
                if model is None:
                    self.err(apath, f"unknown accelerator model {a['model']!r}", _near(a["model"], models))
                    continue
                if arch not in model.architectures:
                    self.err(apath, f"model {model.id} (stack {model.stack}) has no build for {arch}",
                             f"{model.id} supports: {', '.join(model.architectures)}")
                if a.get("shards_per_device") and model.gres_name != "gpu":
                    self.err((*base, "accelerators", j, "shards_per_device"),
                             "sharding needs a GPU (Slurm's gres/shard slices gres/gpu)")
                accels.append(AccelGroup(model, a["count"], a.get("shards_per_device", 0)))
            kinds = {a.model.resource_type for a in accels}
            derived = "NPU" if "NPU" in kinds else ("GPU" if kinds else "CPU")
            rtype = g.get("resource_type", derived)
            if rtype != derived:
                self.err((*base, "resource_type"),
                         f"resource_type {rtype} does not match its accelerators ({derived})",
                         "CPU for no accelerators, else GPU or NPU as the models are")
            threads = g.get("threads_per_core", 1)
            cpus = g["sockets"] * g["cores_per_socket"] * threads
            if "cpus" in g and g["cpus"] != cpus:
                self.err((*base, "cpus"), f"cpus {g['cpus']} != sockets*cores_per_socket*"
                         f"threads_per_core = {cpus}", "leave cpus out or make them agree")
            memory = self._quantity(parse_size_mib, g["memory"], (*base, "memory"))
            bandwidth = self._quantity(parse_bandwidth_gbs, g.get("memory_bandwidth", 0),
                                       (*base, "memory_bandwidth"))
            if not g["partitions"]:
                self.err((*base, "partitions"), "node group is in no partition",
                         "list at least one of: " + ", ".join(sorted(partitions)))
            for j, p in enumerate(g["partitions"]):
                if p not in partitions:
                    self.err((*base, "partitions", j), f"unknown partition {p!r}",
                             _near(p, partitions))
            groups.append(NodeGroup(
                names=str(nodes), resource_type=rtype, architecture=arch,
                sockets=g["sockets"], cores_per_socket=g["cores_per_socket"],
                threads_per_core=threads, memory_mib=int(memory or 0),
                compute_units=g.get("compute_units", g["sockets"] * g["cores_per_socket"]),
                memory_bandwidth_gbs=float(bandwidth or 0.0),
                supported_frameworks=tuple(g.get("supported_frameworks", [])),
                partitions=tuple(g["partitions"]), accelerators=tuple(accels),
                extra_features=tuple(g.get("features", [])),
            ))
        used = {p for g in self.data["node_groups"] for p in g["partitions"]}
        for i, p in enumerate(self.data["partitions"]):
            if p["name"] not in used:
                self.err(("partitions", i, "name"), f"partition {p['name']!r} has no nodes",
                         "add it to some node group's partitions, or remove it")
        return tuple(groups)

    def energy(self) -> tuple[tuple[EnergyPolicy, ...], AutoRule]:
        items = self.data.get("energy_policies")
        if not items:
            return DEFAULT_POLICIES, self.auto_rule(DEFAULT_POLICIES)
        policies, seen = [], set()
        for i, p in enumerate(items):
            if p["name"] in seen:
                self.err(("energy_policies", i, "name"), f"duplicate energy policy {p['name']!r}")
            seen.add(p["name"])
            if "gpu_power_cap" in p:
                try:
                    parse_power_cap(p["gpu_power_cap"])
                except ValueError as e:
                    self.err(("energy_policies", i, "gpu_power_cap"), str(e))
            policies.append(EnergyPolicy(**p))
        if "auto" in seen and not {"efficiency", "balanced"} <= seen:
            self.err(("energy_policies",), "policy 'auto' needs policies 'efficiency' and 'balanced'",
                     "auto picks one of them per job")
        return tuple(policies), self.auto_rule(tuple(policies))

    def auto_rule(self, policies: tuple[EnergyPolicy, ...]) -> AutoRule:
        rule = AutoRule(**(self.data.get("energy_auto") or {}))
        eff = next((p for p in policies if p.name == "efficiency"), None)
        if eff and eff.gpu_power_cap:
            value, unit = parse_power_cap(eff.gpu_power_cap)
            if unit == "%" and rule.power_below >= value / 100:
                self.err(("energy_auto", "power_below"),
                         f"power_below {rule.power_below} is not under efficiency's cap ({value:g}%)",
                         "a compute-bound job held at that cap would read as low-power and stay "
                         "in efficiency for good")
        return rule

    def node_agent(self) -> NodeAgent:
        d = dict(self.data.get("node_agent") or {})
        agent = NodeAgent(**{**d, "sample_stacks": tuple(d.get("sample_stacks", ()))})
        if agent.health_check and not agent.restore_interval:
            self.err(("node_agent", "health_check"), "a health check needs restore_interval above 0",
                     "restore_interval is Slurm's HealthCheckInterval; 0 wires no HealthCheckProgram")
        return agent

    def _quantity(self, parse: Any, value: Any, path: Path_) -> float | int | None:
        try:
            result: float | int = parse(value)
            return result
        except ValueError as e:
            self.err(path, str(e))
            return None


def _with_arches(m: AccelModel) -> AccelModel:
    from dataclasses import replace

    return replace(m, architectures=tuple(ARCH_ALIASES.get(a.lower(), a) for a in m.architectures))


def load_site_text(text: str, source: str = "<site>", path: Path | None = None) -> Site:
    """Validate site YAML text; raise SiteError listing every problem."""
    data, positions, problems = _compose(text, source)
    if not isinstance(data, dict):
        raise SiteError(source, [f"{source}: the site file must be a YAML mapping (see site/demo/site.yaml)"])
    problems += _schema_problems(data)
    if problems:
        raise SiteError(source, [p.format(source, positions) for p in problems])
    b = _Builder(data)
    models, norm = b.catalog()
    partitions = b.partitions()
    qos, default_qos = b.qos()
    groups = b.node_groups(models, {p.name for p in partitions})
    policies, auto = b.energy()
    node_agent = b.node_agent()
    images, containers, groups = load_containers(data, groups, b.err)  # containers (issue 6)
    if b.problems:
        raise SiteError(source, [p.format(source, positions) for p in b.problems])
    billing = Billing(**(data.get("billing") or {}))
    return Site(name=data["name"], path=path, description=data.get("description", ""),
                catalog=models, normalization=norm, node_groups=groups, partitions=partitions,
                qos=qos, default_qos=default_qos, billing=billing, energy_policies=policies,
                energy_auto=auto, node_agent=node_agent,
                images=images, containers=containers)


def load_site(path: str | Path) -> Site:
    """Load and validate a site file (a path to site.yaml or to its folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / "site.yaml"
    try:
        text = p.read_text()
    except OSError as e:
        raise InputError(f"{p}: cannot read site file: {e.strerror}") from e
    return load_site_text(text, str(p), p)
