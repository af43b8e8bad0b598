"""The `slurm:` section of a site file: the Slurm installation a site already runs.

Controllers, accounting, the release and the lines of an existing slurm.conf/gres.conf that
slurm-hetero does not model are read here; every line is checked the way Slurm will read it
(site/slurmlines.py) so that a pass-through line can neither set what slurm-hetero computes
nor smuggle a second line or a comment into the rendered files. Problems are reported
through the loader's `err(path, message, hint)`, at the line's YAML position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_hetero.site.hooks import glob_problem
from slurm_hetero.site.limits import MAX_NODES, HostlistError, hostlist_size, shown
from slurm_hetero.site.model import Controller, NodeGroup, Partition, SlurmSettings
from slurm_hetero.site.slurmlines import (
    NODE_OWNED,
    PARTITION_OWNED,
    REPEATABLE,
    LineError,
    check_extra_line,
    check_gres_line,
    check_option,
    check_record_line,
    unquote,
)

Err = Callable[..., None]  # _Builder.err(path, message, hint="")
Path_ = tuple[str | int, ...]
# PartitionName words slurm-hetero writes on a partition with predicted_limits.
PREDICTED_OWNED = {"overtimelimit": "nothing: with predicted_limits, OverTimeLimit is MaxTime so that "
                                    "no job is killed before its user's own limit"}
EXTRA_HINT = ("one slurm.conf setting per entry, as Slurm spells it (SchedulerParameters=bf_continue), "
              "or Include /path")


def options_of(raw: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """A group's or partition's `options:` mapping as (Key, Value) words."""
    return tuple((str(k), str(v)) for k, v in (raw or {}).items())


def check_options(raw: dict[str, Any] | None, owned: dict[str, str], base: Path_, err: Err) -> None:
    seen: dict[str, str] = {}
    for key, value in (raw or {}).items():
        problem = check_option(key, value, owned)
        if problem:
            err((*base, "options", key), problem, "options are the other words of the line "
                "(e.g. TmpDisk: 200000, AllowGroups: ml)")
        if key.lower() in seen:
            err((*base, "options", key), f"{key} and {seen[key.lower()]} are the same Slurm key",
                "Slurm's keys are case-insensitive: keep one")
        seen[key.lower()] = key


def _nodeset(text: str, path: Path_, err: Err) -> NodeSet | None:
    try:
        n, _ = hostlist_size(text)
        if n > MAX_NODES:
            err(path, f"hostlist {shown(text)} names more than {MAX_NODES} nodes",
                f"at most {MAX_NODES} nodes in a site")
            return None
        return NodeSet(text)
    except (HostlistError, NodeSetParseError) as e:
        err(path, f"bad hostlist {shown(text)}: {e}", "use names like gpu[001-128] or a,b,c")
        return None


def _controllers(items: list[str], err: Err) -> tuple[Controller, ...]:
    out: list[Controller] = []
    for i, text in enumerate(items):
        host, _, rest = text.partition("(")
        c = Controller(host, rest.rstrip(")") or None)
        if any(o.host.lower() == host.lower() for o in out):
            err(("slurm", "controllers", i), f"controller {host} is listed twice",
                "list the primary first, then each backup once")
        out.append(c)
    return tuple(out)


def _extra_lines(items: list[str], err: Err) -> None:
    first: dict[str, int] = {}
    for i, text in enumerate(items):
        key, problem = check_extra_line(text)
        if problem:
            err(("slurm", "extra_lines", i), problem, EXTRA_HINT)
            continue
        if key in first and key not in REPEATABLE:
            err(("slurm", "extra_lines", i), f"{text.split('=', 1)[0]} is set again (first at "
                f"slurm.extra_lines[{first[key]}])", "Slurm would keep only one of them: keep one line")
        first.setdefault(key, i)


def _record_lines(items: list[str], record: str, field: str, example: str,
                  err: Err) -> Iterator[tuple[Path_, str, list[tuple[str, str]]]]:
    """(path, name, pairs) of each well-formed kept `record` line of slurm.`field`; a bad one
    is reported and skipped (one check for kept nodes and kept partitions alike)."""
    for i, text in enumerate(items):
        path: Path_ = ("slurm", field, i)
        try:
            name, found = check_record_line(text, record)
        except LineError as e:
            err(path, str(e), f"a whole {record} line: {example} (no DEFAULT)")
            continue
        yield path, name, found


def _keep_nodes(items: list[str], groups: tuple[NodeGroup, ...], err: Err) -> NodeSet:
    kept = NodeSet()
    modeled = NodeSet.fromlist([g.names for g in groups]) if groups else NodeSet()
    total = sum(g.node_count for g in groups)
    for path, name, _ in _record_lines(items, "NodeName", "keep_nodes", "NodeName=HOSTLIST CPUs=...", err):
        nodes = _nodeset(unquote(name), path, err)
        if nodes is None:
            continue
        total += len(nodes)
        if total > MAX_NODES:
            err(path, f"the node groups and kept nodes name more than {MAX_NODES} nodes",
                f"at most {MAX_NODES} nodes in a site")
            return kept
        if nodes & modeled:
            err(path, f"node {(nodes & modeled)[0]} is also in a node group",
                "a node is either modeled (node_groups) or kept as written, not both")
        elif nodes & kept:
            err(path, f"node {(nodes & kept)[0]} is kept twice", "one NodeName line per node")
        kept.update(nodes)
    return kept


def _keep_partitions(items: list[str], partitions: tuple[Partition, ...], err: Err) -> None:
    names = {p.name.lower() for p in partitions}
    default = any(p.default for p in partitions)
    for path, name, found in _record_lines(items, "PartitionName", "keep_partitions",
                                           "PartitionName=NAME Nodes=...", err):
        if name.lower() in names:
            err(path, f"partition {shown(name)} is defined twice", "each partition once: modeled "
                "under partitions, or kept here")
        names.add(name.lower())
        if any(k.lower() == "default" and unquote(v).upper() == "YES" for k, v in found):
            if default:
                err(path, "a second default partition", "mark exactly one partition as the default")
            default = True


def _gres_lines(items: list[str], groups: tuple[NodeGroup, ...], err: Err) -> None:
    """Each line well formed; together, per GRES name, they cover each node group whole or
    not at all (they replace the generated lines of the groups they touch)."""
    lines: list[tuple[int, str, str | None, NodeSet | None]] = []  # (index, Name, Type, nodes)
    for i, text in enumerate(items):
        path: Path_ = ("slurm", "gres_lines", i)
        try:
            found = {k.lower(): unquote(v) for k, v in check_gres_line(text)}
        except LineError as e:
            err(path, str(e), "a gres.conf line: NodeName=HOSTLIST Name=gpu Type=a100 File=/dev/nvidia[0-3]")
            continue
        if "name" not in found:
            continue  # AutoDetect=...: no device of its own
        nodes = None
        if "nodename" in found:
            nodes = _nodeset(found["nodename"], path, err)
            if nodes is None:
                continue
        lines.append((i, found["name"], found.get("type"), nodes))
    for j, g in enumerate(groups):
        nodes = NodeSet(g.names)
        names = {a.model.gres_name for a in g.accelerators} | (
            {"shard"} if any(a.shards_per_device for a in g.accelerators) else set())
        for name in sorted(names):
            touching = [(i, t, nodes if n is None else nodes & n) for i, nm, t, n in lines if nm == name]
            touching = [x for x in touching if x[2]]
            if not touching:
                continue
            inside = NodeSet.fromlist([str(x[2]) for x in touching])
            if len(inside) != len(nodes):
                err(("slurm", "gres_lines", touching[0][0]),
                    f"the {name} lines cover {inside[0]} of node_groups[{j}] ({g.names}) but not "
                    f"{(nodes - inside)[0]}", "kept gres.conf lines replace the generated lines of whole "
                    "node groups: cover every node of the group, or none")
            allowed = {a.model.gres_type for a in g.accelerators if a.model.gres_name == name}
            for i, t, _ in touching:
                if t is not None and allowed and t not in allowed:
                    err(("slurm", "gres_lines", i), f"Type={t} is not a {name} type of node_groups[{j}] "
                        f"({g.names})", "its accelerators' GRES types: " + ", ".join(sorted(allowed)))


def _site_hooks(raw: dict[str, Any], err: Err) -> None:
    """The site's own hooks: job_submit rules, Prolog/Epilog, plugstack.conf lines."""
    script = (raw.get("job_submit") or {}).get("script")
    if script and script.rsplit("/", 1)[-1] == "job_submit.lua":
        err(("slurm", "job_submit", "script"), f"{script}: the rendered job_submit.lua takes that name",
            "keep the site's rules under another name, e.g. /etc/slurm/job_submit.site.lua "
            "(slurmctld loads only job_submit.lua; the rendered one loads the site's)")
    for key in ("prolog", "epilog"):
        value = raw.get(key)
        problem = glob_problem(value) if value else None
        if problem:
            err(("slurm", key), problem, "e.g. /etc/slurm/prolog.d/* or /usr/local/sbin/site-prolog")
    for i, text in enumerate(raw.get("plugstack_lines") or []):
        problem = plugstack_problem(text)
        if problem:
            err(("slurm", "plugstack_lines", i), problem,
                "a plugstack.conf line: required|optional PLUGIN.so [ARGS], or include GLOB")


def plugstack_problem(text: str) -> str | None:
    """Why a plugstack.conf line cannot be kept as written, or None.

    >>> plugstack_problem("required /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so runtime_path=/run/pyxis")
    >>> plugstack_problem("include /etc/slurm/plugstack.conf.d/*")
    >>> plugstack_problem("load pyxis.so")
    "the first word must be required, optional or include (got 'load')"
    """
    words = text.split()
    if not words:
        return "an empty line"
    if "#" in text:
        return "'#' starts a comment in plugstack.conf: the rest of the line would be lost"
    first = words[0].lower()
    if first == "include":
        return None if len(words) == 2 else "include takes one path or glob"
    if first not in ("required", "optional"):
        return f"the first word must be required, optional or include (got {words[0][:40]!r})"
    if len(words) < 2 or not words[1].endswith(".so"):
        return f"{words[0]} takes a plugin (a .so path, or a name in PluginDir), then its arguments"
    return None


def load_slurm(data: dict[str, Any], groups: tuple[NodeGroup, ...], partitions: tuple[Partition, ...],
               err: Err) -> SlurmSettings:
    """The `slurm:` section, checked against the node groups and partitions; also the
    options of node groups and partitions and the partitions' extra_nodes."""
    raw = data.get("slurm") or {}
    for i, g in enumerate(data["node_groups"]):
        check_options(g.get("options"), NODE_OWNED, ("node_groups", i), err)
    for i, p in enumerate(data["partitions"]):
        owned = {**PARTITION_OWNED, **PREDICTED_OWNED} if p.get("predicted_limits") else PARTITION_OWNED
        check_options(p.get("options"), owned, ("partitions", i), err)
    controllers = _controllers(list(raw.get("controllers") or []), err)
    acct = raw.get("accounting") or {}
    version = raw.get("version")
    _extra_lines(list(raw.get("extra_lines") or []), err)
    if "enforce" in acct:
        for i, text in enumerate(raw.get("extra_lines") or []):
            if check_extra_line(text)[0] == "accountingstorageenforce":
                err(("slurm", "extra_lines", i), "AccountingStorageEnforce is also slurm.accounting.enforce",
                    "keep one of them (slurm.accounting.enforce: [associations, ...])")
    whole = len(groups) == len(data["node_groups"])  # else a group's own problem is reported
    kept = _keep_nodes(list(raw.get("keep_nodes") or []), groups, err)
    _keep_partitions(list(raw.get("keep_partitions") or []), partitions, err)
    if whole:
        _gres_lines(list(raw.get("gres_lines") or []), groups, err)
    _site_hooks(raw, err)
    job_submit = raw.get("job_submit") or {}
    for i, p in enumerate(data["partitions"]):
        if "extra_nodes" not in p:
            continue
        path: Path_ = ("partitions", i, "extra_nodes")
        nodes = _nodeset(p["extra_nodes"], path, err)
        if nodes is not None and nodes - kept:
            err(path, f"node {(nodes - kept)[0]} is not defined by slurm.keep_nodes",
                "extra_nodes names nodes of kept NodeName lines; modeled nodes join partitions "
                "through their node group's partitions")
    return SlurmSettings(
        cluster_name=raw.get("cluster_name"), controllers=controllers,
        accounting_host=acct.get("host"), accounting_port=acct.get("port"),
        accounting_tres=tuple(acct.get("tres") or ()),
        accounting_enforce=tuple(acct["enforce"]) if "enforce" in acct else None,
        version=(int(version[:2]), int(version[3:])) if version else None,
        extra_lines=tuple(raw.get("extra_lines") or ()),
        keep_nodes=tuple(raw.get("keep_nodes") or ()),
        keep_partitions=tuple(raw.get("keep_partitions") or ()),
        gres_lines=tuple(raw.get("gres_lines") or ()),
        job_submit_script=job_submit.get("script"),
        job_submit_order=job_submit.get("order", "site-first"),
        prolog=raw.get("prolog"), epilog=raw.get("epilog"), task_prolog=raw.get("task_prolog"),
        plugstack_lines=tuple(raw.get("plugstack_lines") or ()),
    )
