"""Merging the agent's figures into a job's admin comment without losing the bridge's JSON.

After a job ends, only `sacctmgr modify job ... set AdminComment=` can change the comment,
and sacctmgr stores every double quote as a backquote. Our JSON never holds a backquote of
its own (values are names, numbers and ids), so readers turn them back: `parse_comment`.

>>> merge_comment('{"hetero":1,"energy":"efficiency"}', {"node_energy": {"n1": {"energy_j": 5}}})
'{"hetero":1,"energy":"efficiency","node_energy":{"n1":{"energy_j":5}}}'
>>> merge_comment("set by an admin", {"x": 1})
'{"text":"set by an admin","x":1}'
"""

from __future__ import annotations

import json
from typing import Any

# Slurm keeps comments of any length; ours are well under 4 KB. Longer text is not ours.
MAX_COMMENT = 64 * 1024


def parse_comment(text: str) -> dict[str, Any]:
    """The JSON object in an admin comment ({} if none), whether sacctmgr rewrote it or not.

    >>> parse_comment('{`hetero`:1,`model`:`h100`}')
    {'hetero': 1, 'model': 'h100'}
    """
    text = text.strip()
    if not text.startswith("{") or len(text) > MAX_COMMENT:
        return {}
    try:
        parsed = json.loads(text.replace("`", '"'))
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        return {}
    return parsed if isinstance(parsed, dict) else {}


def merge_comment(current: str, add: dict[str, Any]) -> str:
    """Deep-merge `add` into the JSON object in `current` (kept as "text" if not JSON)."""
    base = parse_comment(current)
    if not base and current.strip():
        base = {"text": current}
    return json.dumps(_merge(base, add), separators=(",", ":"))


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
