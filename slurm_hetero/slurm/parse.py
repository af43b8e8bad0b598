"""Pure parsers of Slurm command output (tested on captured real output).

They take text and return plain data; they never run anything. Formats are the stable,
parsable ones (`-h -o` with a fixed field list, `sacct -P`), which 22.05 through 24.11 print
the same way.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

SINFO_FORMAT = "%N|%T|%c|%m|%G|%f|%P|%E"
SINFO_FIELDS = ("nodes", "state", "cpus", "memory", "gres", "features", "partition", "reason")


def parse_version(text: str) -> tuple[int, int]:
    """`slurm 22.05.8` → (22, 5); `slurm-wlm 24.11.1` too.

    >>> parse_version("slurm 22.05.8")
    (22, 5)
    """
    m = re.search(r"(\d+)\.(\d+)", text)
    if not m:
        raise ValueError(f"cannot read a Slurm version from {text!r}")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str
    cpus: int
    memory_mib: int
    gres: str
    features: tuple[str, ...]
    partitions: tuple[str, ...]
    reason: str


def parse_sinfo_nodes(text: str) -> dict[str, NodeInfo]:
    """Parse `sinfo -N -h -o SINFO_FORMAT` (one line per node and partition)."""
    nodes: dict[str, NodeInfo] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        f = dict(zip(SINFO_FIELDS, line.split("|", len(SINFO_FIELDS) - 1), strict=True))
        name = f["nodes"]
        part = f["partition"].rstrip("*")
        prev = nodes.get(name)
        parts = (*prev.partitions, part) if prev else (part,)
        nodes[name] = NodeInfo(
            name=name,
            state=f["state"],
            cpus=int(f["cpus"]),
            memory_mib=int(f["memory"]),
            gres="" if f["gres"] == "(null)" else f["gres"],
            features=tuple(x for x in f["features"].split(",") if x and x != "(null)"),
            partitions=parts,
            reason="" if f["reason"] == "none" else f["reason"],
        )
    return nodes


def parse_gres(text: str) -> dict[str, int]:
    """`gpu:a100-80gb:4(S:0-1),shard:16` → {"gpu:a100-80gb": 4, "shard": 16}.

    >>> parse_gres("gpu:a100-80gb:4(S:0-1),shard:16")
    {'gpu:a100-80gb': 4, 'shard': 16}
    """
    out: dict[str, int] = {}
    for item in re.split(r",(?![^(]*\))", text):
        item = re.sub(r"\(.*\)$", "", item.strip())
        if not item or item == "(null)":
            continue
        *name, count = item.split(":")
        if not count.isdigit():
            name, count = [*name, count], "1"
        out[":".join(name)] = out.get(":".join(name), 0) + int(count)
    return out


# sacct's NodeList for a job that was never given nodes (one cancelled while pending has
# Start = End and ElapsedRaw 0: only its NodeList says it never ran).
NO_NODES = ("", "None assigned", "(null)")
# Job names and admin comments may hold "|": ask sacct for the ASCII unit separator instead.
SACCT_DELIMITER = "\x1f"
# sacct fields a job's user writes, printed raw by `-P`: a newline plus delimiter-joined
# fields in one of them reads as a row of that user's making (22.05). They are never asked
# for beside other fields (`check_trusted`); the job name is fetched apart (slurm/sacct.py).
USER_TEXT_FIELDS = frozenset({"JobName", "Comment", "WorkDir", "SubmitLine", "WCKey", "Constraints",
                              "Reservation", "Container", "StdOut", "StdErr", "StdIn"})


def check_trusted(fields: Iterable[str]) -> list[str]:
    """`fields` as a list; ValueError if one of them is user-written text.

    >>> check_trusted(["JobID", "JobName"])
    Traceback (most recent call last):
    ...
    ValueError: sacct field JobName is user-written text: ask for it apart (slurm.sacct.NAME_FIELDS)
    """
    out = list(fields)
    for f in out:
        if f in USER_TEXT_FIELDS:
            raise ValueError(f"sacct field {f} is user-written text: "
                             "ask for it apart (slurm.sacct.NAME_FIELDS)")
    return out


def parse_sacct(text: str, fields: list[str], sep: str = "|") -> list[dict[str, str]]:
    """Parse `sacct -P -n -o f1,f2,... [--delimiter=SEP]` into one dict per line."""
    rows = []
    for line in text.splitlines():
        if not line:
            continue
        values = line.split(sep, len(fields) - 1)
        if len(values) != len(fields):
            raise ValueError(f"sacct line has {len(values)} fields, expected {len(fields)}: {line!r}")
        rows.append(dict(zip(fields, values, strict=True)))
    return rows


def parse_tres(text: str) -> dict[str, str]:
    """`billing=40,cpu=1,gres/gpu:h100=1,gres/gpu=1,mem=1G,node=1` → dict.

    >>> parse_tres("cpu=1,gres/npu=1,mem=1G")
    {'cpu': '1', 'gres/npu': '1', 'mem': '1G'}
    """
    return dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)


def parse_kv_record(text: str) -> dict[str, str]:
    """Parse one `scontrol show job|node` record (`Key=Value` pairs, values may hold spaces
    only in the last field of a line, as with Reason= and Command=)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        for m in re.finditer(r"(\w[\w/:.]*)=(.*?)(?=\s+\w[\w/:.]*=|$)", line):
            out[m.group(1)] = m.group(2)
    return out


def parse_job_gres_idx(text: str, node: str) -> dict[str, list[int]]:
    """Device indices a job holds on `node`, from `scontrol show job -d`.

    Lines look like `Nodes=a100-[01-02] CPU_IDs=0-1 Mem=2048 GRES=gpu:a100-80gb:2(IDX:0-1)`;
    the result is keyed by GRES name: {"gpu": [0, 1]}.
    """
    from ClusterShell.NodeSet import NodeSet

    out: dict[str, list[int]] = {}
    for line in text.splitlines():
        m = re.search(r"\bNodes=(\S+) .*\bGRES=(\S+)", line)
        if not m or node not in NodeSet(m.group(1)):
            continue
        for name, idx in re.findall(r"(?:^|,)([\w-]+)(?::[\w.-]+)*:\d+\(IDX:([\d,\-]+)\)", m.group(2)):
            for part in idx.split(","):
                lo, _, hi = part.partition("-")
                out.setdefault(name, []).extend(range(int(lo), int(hi or lo) + 1))
    return out


def parse_duration_s(text: str | None) -> float | None:
    """A Slurm duration in seconds, read the way Slurm reads one: `M`, `M:S`, `H:M:S`,
    `D-H`, `D-H:M`, `D-H:M:S` (config values and scontrol's TimeLimit/RunTime alike).
    None for no limit (UNLIMITED, INFINITE, Partition_Limit, NOT_SET, N/A, empty).

    >>> parse_duration_s("1-00:01:05"), parse_duration_s("30"), parse_duration_s("03:04")
    (86465.0, 1800.0, 184.0)
    >>> parse_duration_s("2-12"), parse_duration_s("UNLIMITED")
    (216000.0, None)
    """
    if text is None or text.strip().upper() in ("", "UNLIMITED", "INFINITE", "PARTITION_LIMIT",
                                                 "NOT_SET", "N/A"):
        return None
    days, _, rest = text.strip().rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    if days:
        h, m, sec = [*parts, 0.0, 0.0][:3]
    elif len(parts) == 3:
        h, m, sec = parts
    elif len(parts) == 2:
        h, m, sec = 0.0, parts[0], parts[1]
    else:
        h, m, sec = 0.0, parts[0], 0.0
    return ((float(days or 0) * 24 + h) * 60 + m) * 60 + sec


def parse_slurm_time(text: str | None) -> float | None:
    """A Slurm timestamp (`2026-11-30T10:05:35`, local time) as epoch seconds; None for
    `Unknown`, `None`, `N/A` or empty.

    >>> parse_slurm_time("Unknown") is None
    True
    """
    try:
        return time.mktime(time.strptime(text or "", "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


@dataclass(frozen=True)
class StartEstimate:
    """One pending job of `squeue --start` (commands.squeue_start_all_argv)."""

    job_id: str
    start: float | None  # slurmctld's expected start, epoch seconds; None: it has none (N/A)
    reason: str  # why it waits (%r): Resources, Priority, JobHeldUser, a limit, None, ...


def parse_squeue_start(text: str) -> dict[str, StartEstimate]:
    """`squeue --start -h -o "%i|%S|%r"` under SLURM_TIME_FORMAT=%s → {job id: estimate}.
    A line that is not `ID|START|REASON` is skipped; the reason keeps any `|` it holds.

    >>> est = parse_squeue_start("12|1796108800|Resources\\n13|N/A|None\\n")
    >>> est["12"].start, est["13"].start, est["13"].reason
    (1796108800.0, None, 'None')
    """
    out: dict[str, StartEstimate] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) != 3 or not re.fullmatch(r"\d+(?:[_+]\d+)?", parts[0]):
            continue
        start = float(parts[1]) if parts[1].isdigit() and int(parts[1]) > 0 else None
        out[parts[0]] = StartEstimate(parts[0], start, parts[2].strip() or "None")
    return out
