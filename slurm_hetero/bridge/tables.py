"""The site's tables as the generated job_submit.lua needs them, and the bridge's logic.

job_submit.lua is the site's tables (templates/job_submit.lua.j2) followed by the plain Lua
file `bridge.lua` next to this module, verbatim, in a function called with a table of them
(`SITE_TABLES`, the names bridge.lua reads).

Pools are (model, arch) pairs: the unit the bridge chooses between. Their order is the
documented static order used when no fresh capacity snapshot exists: the smallest model
(fewest normalized units per device) first, then the architecture name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurm_hetero.site.model import AccelGroup, NodeGroup, Site

BRIDGE_LUA = Path(__file__).with_name("bridge.lua")
# The tables job_submit.lua hands to bridge.lua, by name (see the top of bridge.lua).
SITE_TABLES: tuple[str, ...] = (
    "GRES_PREFIX", "SNAPSHOT_PATH", "SNAPSHOT_CHECK_S", "SNAPSHOT_STALE_S", "MODELS",
    "MODEL_GROUPS", "MODEL_ALIASES", "POOLS", "TIERS", "ENERGY", "GRES_PARTITIONS", "IMAGES",
    "IMAGE_TAGS", "GRES_STACKS", "MOUNT_ALLOW", "MOUNTS_VAR", "PREDICTED_LIMITS",
    "PARTITION_LIMITS", "DEFAULT_PARTITION", "MODEL_LUA",
)


def bridge_source() -> str:
    """The bridge's logic: bridge.lua as shipped in the package."""
    return BRIDGE_LUA.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Pool:
    key: str  # "model@arch"
    model: str
    arch: str
    per_node: int  # largest device count on one node of the pool
    devices: int
    partitions: tuple[str, ...]


def pools(site: Site) -> list[Pool]:
    members: dict[tuple[str, str], list[tuple[NodeGroup, AccelGroup]]] = {}
    for g in site.node_groups:
        for a in g.accelerators:
            members.setdefault((a.model.id, g.architecture), []).append((g, a))
    out = [
        Pool(key=f"{mid}@{arch}", model=mid, arch=arch,
             per_node=max(a.count for _, a in ms),
             devices=sum(a.count * g.node_count for g, a in ms),
             partitions=tuple(dict.fromkeys(p for g, _ in ms for p in g.partitions)))
        for (mid, arch), ms in members.items()
    ]
    return sorted(out, key=lambda p: (site.catalog[p.model].units, p.model, p.arch))


def bridge_context(site: Site) -> dict[str, object]:
    """Template variables for job_submit.lua."""
    models = site.models_in_use
    groups: dict[str, list[str]] = {"any": [m.id for m in models]}
    for m in models:
        for word in (m.vendor, m.stack):
            groups.setdefault(word, []).append(m.id)
    aliases = {m.gres_type: m.id for m in models if m.gres_type != m.id}
    return {
        "models": models,
        "model_groups": groups,
        "model_aliases": aliases,
        "pools": pools(site),
        "tiers": [q.name for q in site.qos],
        "policies": site.energy_policies,
        "site_table_names": SITE_TABLES,
        "bridge_lua": bridge_source().rstrip("\n"),
    }
