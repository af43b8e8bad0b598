"""Load a site file: YAML with source positions → JSON Schema → semantic checks → Site.

Every problem is collected (not just the first) and reported with its YAML location and
a hint, so an admin can fix a site file in one pass.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_hetero.errors import InputError
from slurm_hetero.site.catalog import (
    DEFAULT_WEIGHTS,
    AccelModel,
    Normalization,
    builtin_catalog_data,
    model_from_fields,
    normalize,
)
from slurm_hetero.site.containers import load_containers
from slurm_hetero.site.installation import load_slurm, options_of
from slurm_hetero.site.limits import (
    MAX_CPUS_PER_NODE,
    MAX_DEVICES_PER_NODE,
    MAX_FILE_BYTES,
    MAX_HOSTLIST_TERMS,
    MAX_NODES,
    MAX_PARTITION_TERMS,
    MAX_PROBLEMS_SHOWN,
    MAX_SCHEMA_PROBLEMS,
    MAX_UNITS_PER_DEVICE,
    HostlistError,
    hostlist_size,
    shown,
)
from slurm_hetero.site.migration import load_migration, load_placement
from slurm_hetero.site.model import AccelGroup, Billing, NodeAgent, NodeGroup, Partition, Site
from slurm_hetero.site.monitor import load_monitor
from slurm_hetero.site.names import ARCH_ALIASES, ARCH_ALLOWED, near
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule, EnergyPolicy, parse_power_cap
from slurm_hetero.site.power import load_power
from slurm_hetero.site.safeyaml import (
    IMPLICIT_TAGS,
    TAG_HINT,
    YamlLimitError,
    compose_limited,
    construct,
    short_tag,
    value_failure,
)
from slurm_hetero.site.tiers import load_tiers
from slurm_hetero.site.units import parse_bandwidth_gbs, parse_size_mib

_MODEL_REQUIRED = ("stack", "resource_type", "device_memory", "memory_bandwidth", "tdp_watts",
                   "compute_units")

Path_ = tuple[str | int, ...]
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"


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
    """All problems of one site file; str() is the ordered report (the first
    MAX_PROBLEMS_SHOWN of them, then how many more)."""

    def __init__(self, source: str, lines: list[str]):
        self.source = source
        self.lines = lines
        n = len(lines)
        shown_lines = lines[:MAX_PROBLEMS_SHOWN]
        if n > MAX_PROBLEMS_SHOWN:
            shown_lines.append(f"{source}: ... and {n - MAX_PROBLEMS_SHOWN} more problems")
        super().__init__(f"{source}: {n} problem{'s' if n != 1 else ''}\n" + "\n".join(shown_lines))


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


def _line_col(text: str, index: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - start + 1


def _yaml_error(source: str, text: str, e: yaml.YAMLError) -> SiteError:
    mark = getattr(e, "problem_mark", None)
    if isinstance(e, yaml.reader.ReaderError):
        line, col = _line_col(text, e.position)
        char = chr(e.character) if isinstance(e.character, int) else str(e.character)
        return SiteError(source, [f"{source}:{line}:{col}: not valid YAML: character {char!r} is not "
                                  "allowed\n    hint: a site file is printable text (tabs and line "
                                  "breaks are fine; control characters are not)"])
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
    problem = getattr(e, "problem", None) or str(e)
    if isinstance(e, yaml.composer.ComposerError) and e.context:
        problem = f"{e.context}, {problem}"  # e.g. expected a single document, but found another
    return SiteError(source, [f"{where}: not valid YAML: {problem}"])


def _compose(text: str, source: str) -> tuple[Any, dict[Path_, tuple[int, int]], list[Problem]]:
    """Parse YAML within the limits of site/limits.py, returning data, a path → (line, col)
    map, and duplicate-key problems."""
    if len(text) > MAX_FILE_BYTES:
        raise SiteError(source, [f"{source}: {len(text)} characters is too large for a site file\n"
                                 f"    hint: at most {MAX_FILE_BYTES} bytes ({MAX_FILE_BYTES >> 20} MiB)"])
    try:
        doc = compose_limited(text)
    except YamlLimitError as e:
        problem = Problem(e.path, e.message, e.hint)
        raise SiteError(source, [problem.format(source, {e.path: (e.line, e.column)})]) from None
    except yaml.YAMLError as e:
        raise _yaml_error(source, text, e) from e
    positions: dict[Path_, tuple[int, int]] = {}
    first_path: dict[int, Path_] = {}
    problems: list[Problem] = []
    fatal: list[Problem] = []

    def walk(n: yaml.Node, path: Path_) -> None:
        # Bounded: compose_limited refused documents that expand beyond the value budget.
        positions[path] = (n.start_mark.line + 1, n.start_mark.column + 1)
        first_path.setdefault(id(n), path)
        if n.tag not in IMPLICIT_TAGS:
            fatal.append(Problem(path, f"YAML tag {shown(short_tag(n.tag))} is not allowed", TAG_HINT))
        if isinstance(n, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in n.value:
                if not isinstance(k, yaml.ScalarNode) or k.tag not in (_STR, _MERGE):
                    scalar = isinstance(k, yaml.ScalarNode)
                    where = (*path, str(k.value)[:60] if scalar else "<key>")
                    positions.setdefault(where, (k.start_mark.line + 1, k.start_mark.column + 1))
                    what = shown(k.value) if scalar else "(a list or mapping)"
                    fatal.append(Problem(where, f"key {what} is not a string",
                                         'keys are names: quote one YAML reads otherwise, e.g. "1":'))
                    continue
                key = str(k.value)
                if key in seen:
                    problems.append(Problem((*path, key), f"duplicate key {shown(key)}",
                                            "each key may appear once; the later one would win"))
                seen.add(key)
                walk(v, (*path, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, (*path, i))

    if doc.node is None:
        return None, positions, problems
    walk(doc.node, ())
    if fatal:
        raise SiteError(source, [p.format(source, positions) for p in fatal])
    try:
        data = construct(doc.node)
    except yaml.YAMLError as e:
        failure = value_failure(e)
        if failure is None:
            raise _yaml_error(source, text, e) from e
        node, message, hint = failure
        path = first_path.get(id(node), ())
        at = {path: (node.start_mark.line + 1, node.start_mark.column + 1)}
        raise SiteError(source, [Problem(path, message, hint).format(source, at)]) from e
    return data, positions, problems


def _schema() -> dict[str, Any]:
    text = resources.files("slurm_hetero.site").joinpath("schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def _schema_message(err: jsonschema.ValidationError) -> tuple[str, str]:
    """The message and hint of one schema error; a long value is cut, a limit is named."""
    inst: Any = err.instance
    limit = err.validator_value
    schema = err.schema if isinstance(err.schema, dict) else {}
    desc = str(schema.get("description", ""))
    if err.validator == "pattern":
        return f"{shown(inst)} is not allowed: must match {limit}", desc
    if err.validator == "maxLength":
        return f"{shown(inst)} is too long ({len(inst)} characters): at most {limit}", desc
    if err.validator == "maxItems":
        return f"{len(inst)} items are too many: at most {limit}", desc
    if err.validator == "maxProperties":
        return f"{len(inst)} entries are too many: at most {limit}", desc
    msg = err.message
    if len(msg) > 200:
        msg = msg.replace(repr(inst), shown(inst))
    if err.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        return msg, ("allowed keys: " + ", ".join(allowed)) if allowed else ""
    if err.validator == "required":
        return msg, "see site/demo/site.yaml for a complete example"
    if err.validator in ("type", "maximum", "exclusiveMaximum", "enum") and desc:
        return msg, desc  # e.g. quote versions: "12.4"; devices of one model per node: 1 to 64
    return msg, ""


def _whole_string_pattern(validator: Any, pattern: str, instance: Any,
                          schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    """JSON Schema's `pattern` with ECMA-262's `$`: the end of the string. Python's `$` also
    matches before a final newline, which would let `name: "demo\\n"` into slurm.conf."""
    if not validator.is_type(instance, "string"):
        return
    anchored = pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    if not re.search(anchored, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, {"pattern": _whole_string_pattern})


def _schema_problems(data: Any) -> list[Problem]:
    validator = _Validator(_schema())
    # A 90,000-item list of bad values is 90,000 errors: stop collecting well before that.
    errors = list(itertools.islice(validator.iter_errors(data), MAX_SCHEMA_PROBLEMS + 1))
    out = []
    for err in sorted(errors[:MAX_SCHEMA_PROBLEMS], key=lambda e: list(map(str, e.absolute_path))):
        msg, hint = _schema_message(err)
        out.append(Problem(tuple(err.absolute_path), msg, hint))
    if len(errors) > MAX_SCHEMA_PROBLEMS:
        out.append(Problem((), f"more problems not listed: checking stopped after {MAX_SCHEMA_PROBLEMS}",
                           "fix these and validate again"))
    return out


class _Builder:
    """Semantic checks over schema-valid data; collects problems, builds the Site."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.problems: list[Problem] = []
        self.broken_models: set[str] = set()  # catalog entries that could not be built

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
        failed = {mid for mid, fields in (self.data.get("catalog") or {}).items() if mid not in raw}
        for mid, fields in raw.items():
            base: Path_ = ("catalog", mid)
            try:
                models[mid] = model_from_fields(mid, fields)
            except ValueError as e:
                key = "memory_bandwidth" if "bandwidth" in str(e) else "device_memory"
                self.err((*base, key) if mid in site_cat else base, str(e))
                failed.add(mid)
                continue
            bad = [a for a in models[mid].architectures if a not in ARCH_ALIASES]
            if bad:
                self.err((*base, "architectures"), f"unknown architecture {bad[0]!r}",
                         ARCH_ALLOWED)
            models[mid] = _with_arches(models[mid])
            idle = models[mid].idle_watts
            if idle is not None and idle > models[mid].tdp_watts:
                self.err((*base, "idle_watts") if mid in site_cat else base,
                         f"idle_watts {idle:g} is above the model's tdp_watts {models[mid].tdp_watts:g}",
                         "a device's idle draw, in watts, is at most its TDP")
            if models[mid].tensor_tflops <= 0:
                self.err(base, f"model {mid!r} has no fp16, bf16 or fp32 throughput",
                         "normalization needs at least one of fp16_tflops, bf16_tflops, fp32_tflops")
        norm_data = self.data.get("normalization") or {}
        norm = Normalization(
            reference=norm_data.get("reference", "a100-80gb"),
            weights={**DEFAULT_WEIGHTS, **(norm_data.get("weights") or {})},
        )
        self.broken_models = failed
        if norm.reference not in models:
            if norm.reference not in failed:  # else its own problem is reported already
                self.err(("normalization", "reference"), f"unknown reference model {shown(norm.reference)}",
                         near(norm.reference, models))
            return models, norm
        if self.problems:
            return models, norm  # a model without figures cannot be normalized (nor divided by)
        normalized = normalize(models, norm)
        self.check_units(normalized, norm, site_cat)
        return normalized, norm

    def check_units(self, models: dict[str, AccelModel], norm: Normalization,
                    site_cat: dict[str, Any]) -> None:
        """No device may be worth more than MAX_UNITS_PER_DEVICE of the reference: past that,
        node weights and billing overflow what Slurm stores (and the figures are wrong)."""
        ref = norm.reference
        over = sorted((m for m in models.values() if m.units > MAX_UNITS_PER_DEVICE),
                      key=lambda m: -m.units)
        hint = (f"at most {MAX_UNITS_PER_DEVICE:g} units per device: check the datasheet figures and "
                "their units (device_memory: 80GB, memory_bandwidth: 2TB/s)")
        rest = []
        for m in over:
            if m.id in site_cat and m.id != ref:
                self.err(("catalog", m.id), f"model {m.id} would be {m.units:g} normalized units per "
                         f"device (reference {ref} = 1.0)", hint)
            else:
                rest.append(m)
        if rest:
            path: Path_ = ("catalog", ref) if ref in site_cat else ("normalization",)
            more = f" ({len(rest) - 1} more too)" if len(rest) > 1 else ""
            self.err(path, f"against reference {ref}, model {rest[0].id} would be {rest[0].units:g} "
                     f"normalized units per device{more}", hint)

    def partitions(self) -> tuple[Partition, ...]:
        out, seen = [], set()
        for i, p in enumerate(self.data["partitions"]):
            if p["name"] in seen:
                self.err(("partitions", i, "name"), f"duplicate partition {p['name']!r}")
            seen.add(p["name"])
            out.append(Partition(p["name"], bool(p.get("default", False)),
                                 p.get("max_time", "UNLIMITED"), p.get("default_time"),
                                 bool(p.get("predicted_limits", False)),
                                 options_of(p.get("options")), p.get("extra_nodes", "")))
        if sum(p.default for p in out) > 1:
            self.err(("partitions",), "more than one partition has default: true",
                     "mark exactly one partition as the default (or none)")
        return tuple(out)

    def node_groups(self, models: dict[str, AccelModel], partitions: set[str]) -> tuple[NodeGroup, ...]:
        groups: list[NodeGroup] = []
        owner: dict[str, int] = {}
        sizes = self.hostlist_sizes()
        for i, g in enumerate(self.data["node_groups"]):
            base: Path_ = ("node_groups", i)
            if sizes is None or i not in sizes:
                continue  # not counted, or too many: never expanded
            try:
                nodes = NodeSet(g["names"])
            except NodeSetParseError as e:
                self.err((*base, "names"), f"bad hostlist {shown(g['names'])}: {e}",
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
                         ARCH_ALLOWED)
                arch = "x86_64"
            accels, skipped = [], False
            devices = sum(a["count"] for a in g.get("accelerators", []))
            if devices > MAX_DEVICES_PER_NODE:
                self.err((*base, "accelerators"), f"{devices} devices per node are too many",
                         f"at most {MAX_DEVICES_PER_NODE} accelerators on one node, all models together")
            for j, a in enumerate(g.get("accelerators", [])):
                apath: Path_ = (*base, "accelerators", j, "model")
                model = models.get(str(a["model"]).lower())
                if model is None and str(a["model"]).lower() in self.broken_models:
                    skipped = True  # its catalog entry's problem is reported
                    continue
                if model is None:
                    self.err(apath, f"unknown accelerator model {a['model']!r}", near(a["model"], models))
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
            if rtype != derived and not skipped:
                self.err((*base, "resource_type"),
                         f"resource_type {rtype} does not match its accelerators ({derived})",
                         "CPU for no accelerators, else GPU or NPU as the models are")
            threads = g.get("threads_per_core", 1)
            cpus = g["sockets"] * g["cores_per_socket"] * threads
            if "cpus" in g and g["cpus"] != cpus:
                self.err((*base, "cpus"), f"cpus {g['cpus']} != sockets*cores_per_socket*"
                         f"threads_per_core = {cpus}", "leave cpus out or make them agree")
            elif cpus > MAX_CPUS_PER_NODE:
                self.err((*base, "cores_per_socket"), f"sockets*cores_per_socket*threads_per_core = "
                         f"{cpus} CPUs per node are too many", f"at most {MAX_CPUS_PER_NODE}")
            memory = self._quantity(lambda v: parse_size_mib(v, minimum=1), g["memory"],
                                    (*base, "memory"))
            bandwidth = self._quantity(parse_bandwidth_gbs, g.get("memory_bandwidth", 0),
                                       (*base, "memory_bandwidth"))
            if not g["partitions"]:
                self.err((*base, "partitions"), "node group is in no partition",
                         "list at least one of: " + ", ".join(sorted(partitions)))
            for j, p in enumerate(g["partitions"]):
                if p not in partitions:
                    self.err((*base, "partitions", j), f"unknown partition {p!r}",
                             near(p, partitions))
            autodetect = self._gres_autodetect(g, accels, base)
            if g.get("mig") is True:
                self.err((*base, "mig"), "slurm-hetero does not model MIG instances: it renders whole GPUs, "
                         "and capping a MIG GPU's power or clocks would change every instance's job",
                         "write `mig: unsupported` to run these nodes anyway (their MIG GRES lines are "
                         "yours: slurm.gres_lines or gres_autodetect: nvml; no energy policy reaches them), "
                         "or turn MIG off")
            groups.append(NodeGroup(
                names=str(nodes), resource_type=rtype, architecture=arch,
                sockets=g["sockets"], cores_per_socket=g["cores_per_socket"],
                threads_per_core=threads, memory_mib=int(memory or 0),
                compute_units=g.get("compute_units", g["sockets"] * g["cores_per_socket"]),
                memory_bandwidth_gbs=float(bandwidth or 0.0),
                supported_frameworks=tuple(g.get("supported_frameworks", [])),
                partitions=tuple(g["partitions"]), accelerators=tuple(accels),
                extra_features=tuple(g.get("features", [])),
                options=options_of(g.get("options")),
                idle_watts=float(g["idle_watts"]) if "idle_watts" in g else None,
                gres_autodetect=autodetect, mig_unsupported=g.get("mig") == "unsupported",
            ))
        used = {p for g in self.data["node_groups"] for p in g["partitions"]}
        for i, p in enumerate(self.data["partitions"]):
            if p["name"] not in used:
                self.err(("partitions", i, "name"), f"partition {p['name']!r} has no nodes",
                         "add it to some node group's partitions, or remove it")
        return tuple(groups)

    def _gres_autodetect(self, g: dict[str, Any], accels: list[AccelGroup], base: Path_) -> str:
        """AutoDetect=nvml finds NVIDIA GPUs only: every accelerator of the group must be one."""
        value = str(g.get("gres_autodetect", "off"))
        others = sorted({a.model.id for a in accels if a.model.stack != "cuda"})
        if value == "nvml" and (others or not accels):
            self.err((*base, "gres_autodetect"),
                     f"AutoDetect=nvml finds NVIDIA GPUs only; this group has "
                     f"{', '.join(others) if others else 'no accelerators'}",
                     "use it on groups of NVIDIA (cuda) models alone, or leave it out (File= lines)")
        return value

    def hostlist_sizes(self) -> dict[int, int] | None:
        """Nodes per group, counted arithmetically; None when the site is over a limit
        (then no hostlist is expanded at all). Groups whose hostlist is bad are left out."""
        sizes: dict[int, int] = {}
        terms = in_partitions = 0
        for i, g in enumerate(self.data["node_groups"]):
            path: Path_ = ("node_groups", i, "names")
            try:
                n, t = hostlist_size(g["names"])
            except HostlistError as e:
                self.err(path, f"bad hostlist {shown(g['names'])}: {e}",
                         "use names like gpu[001-128] or a,b,c")
                continue
            if n > MAX_NODES:
                self.err(path, f"hostlist {shown(g['names'])} names more than {MAX_NODES} nodes",
                         f"at most {MAX_NODES} nodes in a site")
                return None
            sizes[i] = n
            terms += t
            in_partitions += t * len(g["partitions"])
        total = sum(sizes.values())
        if total > MAX_NODES:
            self.err(("node_groups",), f"the node groups name {total} nodes, more than {MAX_NODES}",
                     f"at most {MAX_NODES} nodes in a site")
            return None
        if terms > MAX_HOSTLIST_TERMS:
            self.err(("node_groups",), f"the hostlists have {terms} comma-separated terms, more than "
                     f"{MAX_HOSTLIST_TERMS}", "fold names into ranges: gpu[001-128] instead of "
                     "gpu001,gpu002,...")
            return None
        if in_partitions > MAX_PARTITION_TERMS:
            self.err(("node_groups",), f"the partitions' node lists fold {in_partitions} hostlist terms "
                     f"(each group's terms once per partition it is in), more than {MAX_PARTITION_TERMS}",
                     "fold names into ranges, or put fewer node groups in many partitions")
            return None
        return sizes

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
            try:
                value, unit = parse_power_cap(eff.gpu_power_cap)
            except ValueError:
                return rule  # reported at energy_policies[i].gpu_power_cap
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
    groups = b.node_groups(models, {p.name for p in partitions})
    qos, default_qos = load_tiers(data, groups, b.err)  # tiers: preemption and limits
    policies, auto = b.energy()
    node_agent = b.node_agent()
    images, containers, groups = load_containers(data, groups, b.err)  # containers
    slurm = load_slurm(data, groups, partitions, b.err)  # the existing installation
    power = load_power(data, groups, partitions, b.err)  # power saving (site/power.py)
    migration = load_migration(data, b.err)  # moving jobs between pools
    placement = load_placement(data)  # one pool or any of several equal ones
    monitor = load_monitor(data, b.err)  # the exporters' address and web config
    if b.problems:
        raise SiteError(source, [p.format(source, positions) for p in b.problems])
    billing = Billing(**(data.get("billing") or {}))
    return Site(name=data["name"], path=path, description=data.get("description", ""),
                catalog=models, normalization=norm, node_groups=groups, partitions=partitions,
                qos=qos, default_qos=default_qos, billing=billing, energy_policies=policies,
                energy_auto=auto, node_agent=node_agent,
                images=images, containers=containers, slurm=slurm, power=power,
                migration=migration, placement=placement, monitor=monitor)


def decode_site_bytes(raw: bytes, source: str) -> str:
    """UTF-8 text of a site file's bytes; a size over the limit or a byte that is not UTF-8
    is a SiteError that says where."""
    if len(raw) > MAX_FILE_BYTES:
        raise SiteError(source, [f"{source}: more than {MAX_FILE_BYTES} bytes is too large for a site "
                                 f"file\n    hint: at most {MAX_FILE_BYTES >> 20} MiB "
                                 "(the demo site is 6 KiB)"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        start = raw.rfind(b"\n", 0, e.start) + 1
        line = raw.count(b"\n", 0, e.start) + 1
        col = len(raw[start:e.start].decode("utf-8", "replace")) + 1
        raise SiteError(source, [f"{source}:{line}:{col}: not valid UTF-8: byte 0x{raw[e.start]:02x} "
                                 f"({e.reason})\n    hint: save the site file as UTF-8"]) from None


def load_site(path: str | Path) -> Site:
    """Load and validate a site file (a path to site.yaml or to its folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / "site.yaml"
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)  # never more: /dev/zero or a huge file stay cheap
    except OSError as e:
        raise InputError(f"{p}: cannot read site file: {e.strerror}") from e
    return load_site_text(decode_site_bytes(raw, str(p)), str(p), p)
