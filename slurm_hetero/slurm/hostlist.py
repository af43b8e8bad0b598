"""Slurm hostlist expressions, expanded with the standard library only.

The node-side programs (prolog, TaskProlog, container wrapper) start on every job, and
importing ClusterShell's NodeSet costs them about 16 ms (`python -X importtime`, measured
on the CI machine) for one membership test; everything that is not on that path uses
ClusterShell. Expansion is bounded: a list longer than `limit` names is refused before
it is built.
"""

from __future__ import annotations

import re

_BRACKET = re.compile(r"\[([^\[\]]+)\]")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
DEFAULT_LIMIT = 100_000


class HostlistError(ValueError):
    """A hostlist that is malformed or names more hosts than allowed."""


def _split_top(expr: str) -> list[str]:
    """Split on commas outside brackets."""
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        depth += (ch == "[") - (ch == "]")
        if depth < 0 or depth > 1:
            raise HostlistError(f"unbalanced brackets in hostlist {expr[:80]!r}")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"unbalanced brackets in hostlist {expr[:80]!r}")
    items.append("".join(cur))
    return [i for i in items if i]


def _ranges(body: str, expr: str) -> list[tuple[int, int, int]]:
    out = []
    for part in body.split(","):
        m = _RANGE.fullmatch(part)
        if not m:
            raise HostlistError(f"bad range {part!r} in hostlist {expr[:80]!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise HostlistError(f"range {part!r} runs backwards in hostlist {expr[:80]!r}")
        out.append((lo, hi, len(m.group(1))))
    return out


def count_hosts(expr: str) -> int:
    """How many names `expr` stands for, computed without building them.

    >>> count_hosts("cpu-[1-1000000000]")
    1000000000
    """
    total = 0
    for item in _split_top(expr):
        n = 1
        for body in _BRACKET.findall(item):
            n *= sum(hi - lo + 1 for lo, hi, _ in _ranges(body, expr))
        total += n
    return total


def expand(expr: str, limit: int = DEFAULT_LIMIT) -> list[str]:
    """'npu-[01-02],a100-01' → ['npu-01', 'npu-02', 'a100-01'].

    >>> expand("r[1-2]-n[01,03]")
    ['r1-n01', 'r1-n03', 'r2-n01', 'r2-n03']
    """
    n = count_hosts(expr)
    if n > limit:
        raise HostlistError(f"hostlist {expr[:80]!r} names {n} hosts, more than {limit}")
    names: list[str] = []
    for item in _split_top(expr):
        partial = [""]
        pos = 0
        for m in _BRACKET.finditer(item):
            head = item[pos:m.start()]
            partial = [p + head + f"{v:0{w}d}" for p in partial
                       for lo, hi, w in _ranges(m.group(1), expr) for v in range(lo, hi + 1)]
            pos = m.end()
        names += [p + item[pos:] for p in partial]
    return names


def contains(expr: str, name: str, limit: int = DEFAULT_LIMIT) -> bool:
    """Is `name` one of the hosts of `expr`?"""
    return name in expand(expr, limit)
