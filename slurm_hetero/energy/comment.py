"""Merging the agent's figures into a job's admin comment without losing the bridge's JSON.

>>> merge_comment('{"hetero":1,"energy":"efficiency"}', {"node_energy": {"n1": {"energy_j": 5}}})
'{"hetero":1,"energy":"efficiency","node_energy":{"n1":{"energy_j":5}}}'
>>> merge_comment("set by an admin", {"x": 1})
'{"text":"set by an admin","x":1}'
"""

from __future__ import annotations

import json
from typing import Any


def merge_comment(current: str, add: dict[str, Any]) -> str:
    """Deep-merge `add` into the JSON object in `current` (kept as "text" if not JSON)."""
    base: dict[str, Any]
    try:
        parsed = json.loads(current) if current.strip() else {}
        base = parsed if isinstance(parsed, dict) else {"text": current}
    except ValueError:
        base = {"text": current}
    return json.dumps(_merge(base, add), separators=(",", ":"))


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
