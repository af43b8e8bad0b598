"""The site's `migration:` section: what the bridge daemon may move between pools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slurm_hetero.site.model import MigrationSettings
from slurm_hetero.site.tiers import DURATION_HINT, parse_duration_s

MAX_PENDING_AFTER_S = 7 * 86_400

Err = Callable[[tuple[str | int, ...], str, str], None]


def load_migration(data: dict[str, Any], err: Err) -> MigrationSettings:
    m = data.get("migration") or {}
    after = MigrationSettings.pending_after_s
    if "pending_after" in m:
        try:
            after = parse_duration_s(m["pending_after"])
        except ValueError as e:
            err(("migration", "pending_after"), str(e), DURATION_HINT)
        else:
            if after > MAX_PENDING_AFTER_S:
                err(("migration", "pending_after"), f"{after} s is more than a week", DURATION_HINT)
    return MigrationSettings(pending=bool(m.get("pending", False)), pending_after_s=after,
                             max_moves=int(m.get("max_moves", MigrationSettings.max_moves)),
                             across_gres=bool(m.get("across_gres", False)))
