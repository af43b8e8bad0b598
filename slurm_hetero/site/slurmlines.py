"""slurm.conf and gres.conf lines as Slurm reads them, and which keys slurm-hetero writes.

The site file's `slurm:` section passes lines of an existing installation through to the
rendered files; the loader checks them here, `conf render` places them and
`conf import` reads a running site's files with the same rules. Standard library only.

Slurm's reading of a line: `Key=Value` words separated by blanks, keys in any case, a value
in double quotes may hold blanks, `#` starts a comment unless written `\\#`, a `\\` at the
end of a line continues it on the next one (the importer joins those first).

>>> pairs("PartitionName=gpu Nodes=g[01-04] AllowGroups=ml,vision")
[('PartitionName', 'gpu'), ('Nodes', 'g[01-04]'), ('AllowGroups', 'ml,vision')]
>>> pairs('ResumeProgram="/usr/sbin/resume --fast" ')
[('ResumeProgram', '"/usr/sbin/resume --fast"')]
>>> check_extra_line("SlurmctldHost=ctl2")
('slurmctldhost', 'SlurmctldHost is written by slurm-hetero: set slurm.controllers instead')
>>> check_extra_line("SchedulerParameters=bf_continue,bf_window=4320")
('schedulerparameters', None)
"""

from __future__ import annotations

import re

KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_UNESCAPED_HASH = re.compile(r"(?<!\\)#")

# Keys whose value slurm-hetero computes from the site: a pass-through line may not set
# them. Key in lower case -> where the site file says it instead ...
OWNED_FIELDS: dict[str, str] = {
    "clustername": "slurm.cluster_name",
    "slurmctldhost": "slurm.controllers",
    "controlmachine": "slurm.controllers",
    "controladdr": "slurm.controllers (host(addr))",
    "backupcontroller": "slurm.controllers (the second entry)",
    "backupaddr": "slurm.controllers (host(addr))",
    "accountingstoragehost": "slurm.accounting.host",
    "accountingstorageport": "slurm.accounting.port",
    "accountingstoragetres": "slurm.accounting.tres (added to the GRES TRES slurm-hetero lists)",
    "nodename": "node_groups (or slurm.keep_nodes for nodes slurm-hetero does not model)",
    "partitionname": "partitions (or slurm.keep_partitions)",
    "healthcheckprogram": "node_agent.health_check (run after slurm-hetero's restore)",
    "healthcheckinterval": "node_agent.restore_interval",
    # The site's own hooks: slurm-hetero's join them (site/hooks.py, bridge/siterules.lua).
    "prolog": "slurm.prolog (the node agent joins it)",
    "epilog": "slurm.epilog (the node agent joins it)",
    "taskprolog": "slurm.task_prolog (run before slurm-hetero's where it has one)",
}
# ... or why slurm-hetero needs its own value.
OWNED_REASONS: dict[str, str] = {
    "grestypes": "from the accelerators of node_groups and the Gres= of slurm.keep_nodes",
    "jobsubmitplugins": "the bridge is job_submit/lua; the site's own job_submit.lua rules run "
                        "inside it: slurm.job_submit.script",
    "plugstackconfig": "the rendered plugstack.conf loads the hetero SPANK plugin, then the site's "
                       "own lines: slurm.plugstack_lines",
    "selecttype": "GRES types need select/cons_tres",
    "prioritytype": "fairshare in normalized units needs priority/multifactor",
}
OWNED = frozenset(OWNED_FIELDS) | frozenset(OWNED_REASONS)


def owned_problem(key: str) -> str:
    """What to say about a line that sets `key`, a key slurm-hetero writes.

    >>> owned_problem("Prolog")
    'Prolog is written by slurm-hetero: set slurm.prolog (the node agent joins it) instead'
    >>> owned_problem("SelectType")
    'SelectType is written by slurm-hetero (GRES types need select/cons_tres)'
    """
    low = key.lower()
    if low in OWNED_FIELDS:
        return f"{key} is written by slurm-hetero: set {OWNED_FIELDS[low]} instead"
    return f"{key} is written by slurm-hetero ({OWNED_REASONS[low]})"


# Comma lists slurm-hetero needs some items of: the site's items are added to them.
# (AccountingStorageEnforce: the site's items are kept and only what tiers need is added,
# conf/slurmconf.py accounting_enforce.)
MERGED = frozenset({"prologflags", "slurmdparameters", "cpufreqgovernors"})
# Why slurm-hetero adds to those lists (and to AccountingStorageTRES), for `conf diff`.
ADDED_WHY: dict[str, str] = {
    "prologflags": "Alloc: the node agent sets the job's devices when its allocation starts",
    "cpufreqgovernors": "the energy policies ask for these governors",
    "slurmdparameters": "config_overrides: emulated nodes declare more than the machine has",
    "accountingstoragetres": "every GRES model is a TRES, for AllocTRES and billing",
}
# Keys that may appear on several lines, each line its own record.
REPEATABLE = frozenset({"include", "nodeset", "downnodes", "frontendname"})
# Record lines: the first word names the record, more `Key=Value` words describe it.
RECORDS = frozenset({"nodeset", "downnodes", "frontendname"})

# NodeName words slurm-hetero writes from a node group (the rest may be group options).
NODE_OWNED: dict[str, str] = {
    "nodename": "names", "cpus": "sockets, cores_per_socket, threads_per_core",
    "procs": "sockets, cores_per_socket, threads_per_core",
    "boards": "sockets", "socketsperboard": "sockets", "sockets": "sockets",
    "corespersocket": "cores_per_socket", "threadspercore": "threads_per_core",
    "realmemory": "memory", "gres": "accelerators", "feature": "features (and architecture)",
    "features": "features (and architecture)",
    "weight": "nothing: Weight orders nodes by normalized units",
}
# Per-node words whose hostlist lines up with NodeName's (the dev cluster writes its own).
NODE_ADDRESSING = frozenset({"nodeaddr", "nodehostname", "port"})
# PartitionName words slurm-hetero writes from a partition (State may be replaced).
PARTITION_OWNED: dict[str, str] = {
    "partitionname": "name", "nodes": "the node groups' partitions (and extra_nodes)",
    "default": "default", "maxtime": "max_time", "defaulttime": "default_time",
    "tresbillingweights": "nothing: billing in normalized units is computed",
}
GRES_KEYS = frozenset({"autodetect", "nodename", "name", "type", "file", "files", "cores", "corecnt",
                       "count", "flags", "links", "multiplefiles"})


class LineError(ValueError):
    """A line Slurm would not read as intended; str() says what is wrong."""


def words(text: str) -> list[str]:
    """Blank-separated words; a double-quoted stretch keeps its blanks.

    >>> words('a=1  b="x y"\\tc=3')
    ['a=1', 'b="x y"', 'c=3']
    """
    out: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch in " \t" and not quoted:
            if cur:
                out.append("".join(cur))
                cur = []
            continue
        cur.append(ch)
    if quoted:
        raise LineError("a double quote is not closed")
    if cur:
        out.append("".join(cur))
    return out


def pairs(text: str) -> list[tuple[str, str]]:
    """The `(Key, Value)` words of one line, values as written (quotes kept)."""
    out = []
    for word in words(text):
        key, eq, value = word.partition("=")
        if not eq:
            raise LineError(f"{word[:60]!r} is not Key=Value")
        if not KEY.match(key):
            raise LineError(f"{key[:60]!r} is not a Slurm key (letters and digits)")
        if not value:
            raise LineError(f"{key}= has no value")
        out.append((key, value))
    return out


def unquote(value: str) -> str:
    """A value without its surrounding double quotes."""
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def _printable(text: str) -> None:
    m = _CONTROL.search(text)
    if m:
        raise LineError(f"control character {m.group()!r} at character {m.start() + 1}: one "
                        "printable line each")
    if _UNESCAPED_HASH.search(text):
        raise LineError("'#' starts a comment in Slurm's files: the rest of the line would be lost "
                        "(write \\# for a literal #)")


def include_path(text: str) -> str | None:
    """The path of an `Include PATH` line, else None."""
    w = text.split()
    return w[1] if len(w) == 2 and w[0].lower() == "include" else None


def check_extra_line(text: str) -> tuple[str, str | None]:
    """(key in lower case, problem or None) of one `slurm.extra_lines` entry."""
    try:
        _printable(text)
        if include_path(text) is not None:
            return "include", None
        found = pairs(text)
    except LineError as e:
        return "", str(e)
    if not found:
        return "", "an empty line: one Key=Value each"
    key, value = found[0]
    low = key.lower()
    if low in OWNED:
        return low, owned_problem(key)
    if low in RECORDS:
        if value.upper() == "DEFAULT":
            return low, f"{key}=DEFAULT changes the lines after it: write its values into each line"
        return low, None
    if len(found) > 1:
        return low, (f"one Key=Value per line: this line sets {len(found)} keys "
                     f"({', '.join(k for k, _ in found[:4])})")
    return low, None


def check_record_line(text: str, record: str) -> tuple[str, list[tuple[str, str]]]:
    """(name, pairs) of a kept `NodeName=...` or `PartitionName=...` line; raises LineError."""
    _printable(text)
    found = pairs(text)
    if not found or found[0][0].lower() != record.lower():
        raise LineError(f"must start with {record}=")
    name = found[0][1]
    if name.upper() == "DEFAULT":
        raise LineError(f"{record}=DEFAULT changes the lines after it: write its values into each line")
    seen: set[str] = set()
    for key, _ in found:
        if key.lower() in seen:
            raise LineError(f"{key} appears twice")
        seen.add(key.lower())
    return name, found


def check_gres_line(text: str) -> list[tuple[str, str]]:
    """The pairs of a kept gres.conf line; raises LineError."""
    _printable(text)
    found = pairs(text)
    keys = [k.lower() for k, _ in found]
    bad = [k for k, _ in found if k.lower() not in GRES_KEYS]
    if bad:
        raise LineError(f"{bad[0]} is not a gres.conf key (allowed: AutoDetect, NodeName, Name, Type, "
                        "File, Cores, Count, Flags, Links, MultipleFiles)")
    if len(set(keys)) != len(keys):
        raise LineError("a key appears twice")
    if "name" not in keys and "autodetect" not in keys:
        raise LineError("a gres.conf line needs Name= (or AutoDetect=)")
    return found


def check_option(key: str, value: object, owned: dict[str, str]) -> str | None:
    """The problem with one node group or partition option, or None."""
    low = key.lower()
    if low in owned:
        where = owned[low]
        if where.startswith("nothing: "):
            return f"{key} is written by slurm-hetero ({where.removeprefix('nothing: ')})"
        return f"{key} is written by slurm-hetero: set {where} instead"
    text = str(value)
    try:
        _printable(text)
    except LineError as e:
        return str(e)
    if not text or any(ch in text for ch in " \t"):
        return f"{key}: a value without blanks is needed"
    return None


def merge_items(rendered: str, site: str) -> str:
    """Comma items of a rendered value followed by the site's that are not there yet.

    >>> merge_items("Alloc", "Contain,X11,alloc")
    'Alloc,Contain,X11'
    """
    items = [i for i in rendered.split(",") if i]
    have = {i.lower() for i in items}
    for item in unquote(site).split(","):
        if item and item.lower() not in have:
            items.append(item)
            have.add(item.lower())
    return ",".join(items)


def is_configless(lines: tuple[str, ...] | list[str]) -> bool:
    """Whether slurm.conf lines make slurmctld serve the configuration (configless slurmd):
    `enable_configless` in the last SlurmctldParameters, as Slurm takes the last value.

    >>> is_configless(["SlurmctldParameters=idle_on_node_suspend,enable_configless"])
    True
    >>> is_configless(["SlurmctldParameters=enable_configless", "SlurmctldParameters=cloud_dns"])
    False
    """
    value = ""
    for line in lines:
        try:
            found = pairs(line)
        except LineError:
            continue
        for key, v in found:
            if key.lower() == "slurmctldparameters":
                value = unquote(v)
    return "enable_configless" in {item.strip().lower() for item in value.split(",")}
