"""Limits a real site never needs to exceed, and the arithmetic that checks them before any
work is done (a hostlist is counted, not expanded).

A site file is admin input, but it is also the input of tooling that runs as root and
renders Slurm's configuration: an absurd value must be refused with a message, quickly and
in little memory, never reach a traceback, a swap storm or a half-written slurm.conf.
schema.json holds the same numbers (a unit test keeps them equal).

>>> hostlist_size("gpu[001-128]")
(128, 1)
>>> hostlist_size("r[1-4]n[01-32],login1")
(129, 2)
>>> hostlist_size("cpu-[1-1000000000]")  # saturated: more than MAX_NODES
(100001, 1)
"""

from __future__ import annotations

# --- the file and its YAML -----------------------------------------------------------------
MAX_FILE_BYTES = 4 * 1024 * 1024  # the demo site is 6 KiB; a 1000-group site is under 1 MiB
MAX_YAML_DEPTH = 32  # a site file nests 6 levels deep (images: 5)
MAX_YAML_VALUES = 100_000  # scalars, lists and mappings, each alias counted as what it expands to
MAX_YAML_ALIASES = 10_000  # *name references (`<<: *defaults` in every group is fine)
MAX_SCALAR_CHARS = 65_536  # one value or key (a hostlist written out node by node fits)
MAX_NUMBER_CHARS = 64  # an integer as written; its value must also be below 2**63

# --- the site -------------------------------------------------------------------------------
MAX_NODES = 100_000  # nodes in the whole site (hostlists counted, not expanded)
MAX_NODE_GROUPS = 256  # hardware kinds; a heterogeneous site has tens
# ClusterShell folds n-dimensional names (r1n1, r2n2, ...) in time quadratic in the terms it
# is given, and a partition's node list is folded from all its groups' hostlists: so the
# comma-separated terms are counted, once per site and once per partition a group is in.
MAX_HOSTLIST_TERMS = 512  # terms of all node groups' hostlists
MAX_PARTITION_TERMS = 2048  # sum over groups of terms * partitions the group is in
MAX_DEVICES_PER_NODE = 64  # accelerators of all models on one node
MAX_CPUS_PER_NODE = 65_535  # sockets * cores_per_socket * threads_per_core (Slurm: 16 bits)
MAX_SIZE_MIB = 1024**4  # sizes (memory, device memory) must be below 1 EiB
MAX_BANDWIDTH_GBS = 1_000_000.0  # 1 PB/s; the fastest device today moves 8 TB/s
MAX_UNITS_PER_DEVICE = 10_000.0  # normalized units of one device (reference = 1.0)
MAX_PROBLEMS_SHOWN = 100  # a report longer than this ends with a count of the rest
MAX_SCHEMA_PROBLEMS = 1000  # schema checking stops collecting after this many


def shown(value: object, limit: int = 60) -> str:
    """repr() of a value a user wrote, cut to `limit` characters for a message.

    >>> shown("x" * 100, 10)
    "'xxxxxxxx…"
    """
    text = repr(value) if len(str(value)) <= 4 * limit else repr(str(value)[: 4 * limit])
    return text if len(text) <= limit else text[: limit - 1] + "…"


class HostlistError(ValueError):
    """A hostlist that is not `prefix[ranges]suffix`, terms joined by commas."""


def _number(text: str) -> int:
    if not text:
        raise HostlistError("empty range")
    if len(text) > 18:
        raise HostlistError(f"number {shown(text, 40)} is too long (at most 18 digits)")
    if not text.isdigit() or not text.isascii():
        raise HostlistError(f"{shown(text, 40)} is not a number")
    return int(text)


def _bracket_size(inner: str) -> int:
    """Nodes named by one `[...]`: the sum of its ranges' sizes (overlaps counted twice)."""
    total = 0
    for part in inner.split(","):
        lo_text, dash, hi_text = part.partition("-")
        lo = _number(lo_text)
        hi = _number(hi_text) if dash else lo
        if hi < lo:
            raise HostlistError(f"range {shown(part, 40)} goes down (write it low-high)")
        total += hi - lo + 1
    return total


def hostlist_size(expr: str) -> tuple[int, int]:
    """(nodes, terms) of a hostlist, counted without expanding it; raises HostlistError.

    The node count is an upper bound (a node written twice counts twice); it saturates
    just above MAX_NODES so hostile ranges stay small integers.

    >>> hostlist_size("a,b,c[1-3,7]")
    (6, 3)
    >>> hostlist_size("c[2-1")
    Traceback (most recent call last):
    ...
    slurm_hetero.site.limits.HostlistError: '[' at character 2 is not closed
    """
    cap = MAX_NODES + 1
    nodes = terms = 0
    term_nodes, term_len, opened = 1, 0, -1
    for i, ch in enumerate(expr + ","):
        if opened >= 0:
            if ch == "[":
                raise HostlistError(f"'[' at character {i + 1} inside another '['")
            if ch == "]":
                term_nodes = min(cap, term_nodes * _bracket_size(expr[opened + 1:i]))
                opened = -1
            continue
        if ch == "[":
            opened, term_len = i, term_len + 1
        elif ch == "]":
            raise HostlistError(f"']' at character {i + 1} closes nothing")
        elif ch == ",":
            if term_len == 0:
                raise HostlistError(f"empty name at character {i + 1}" if i < len(expr)
                                    else "empty name at the end")
            nodes, terms = min(cap, nodes + term_nodes), terms + 1
            term_nodes, term_len = 1, 0
        else:
            term_len += 1
    if opened >= 0:
        raise HostlistError(f"'[' at character {opened + 1} is not closed")
    return nodes, terms
