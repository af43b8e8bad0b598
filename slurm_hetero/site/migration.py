"""The site's `migration:` section (what the bridge daemon may move between pools) and its
`placement:` section (how many pools a job may start in)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slurm_hetero.site.model import MigrationSettings, PlacementSettings
from slurm_hetero.site.tiers import DURATION_HINT, parse_duration_s

MAX_DURATION_S = 7 * 86_400

Err = Callable[[tuple[str | int, ...], str, str], None]


def _duration(m: dict[str, Any], key: str, default: int, err: Err) -> int:
    if key not in m:
        return default
    try:
        value = parse_duration_s(m[key])
    except ValueError as e:
        err(("migration", key), str(e), DURATION_HINT)
        return default
    if value > MAX_DURATION_S:
        err(("migration", key), f"{value} s is more than a week", DURATION_HINT)
    return value


def load_migration(data: dict[str, Any], err: Err) -> MigrationSettings:
    m = data.get("migration") or {}
    d = MigrationSettings()
    if m.get("running") and not m.get("pending"):
        err(("migration", "running"), "moving running jobs needs pending: true",
            "a requeued job is moved as a pending one: set migration.pending too")
    return MigrationSettings(pending=bool(m.get("pending", False)),
                             pending_after_s=_duration(m, "pending_after", d.pending_after_s, err),
                             max_moves=int(m.get("max_moves", d.max_moves)),
                             across_gres=bool(m.get("across_gres", False)),
                             running=bool(m.get("running", False)),
                             running_gain=float(m.get("running_gain", d.running_gain)),
                             restart_cost_s=_duration(m, "restart_cost", d.restart_cost_s, err))


def load_placement(data: dict[str, Any]) -> PlacementSettings:
    p = data.get("placement") or {}  # the schema checked its types
    return PlacementSettings(float=bool(p.get("float", False)), node_fit=bool(p.get("node_fit", True)))
