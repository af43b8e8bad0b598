"""The site's tables as the generated job_submit.lua needs them, and the bridge's logic.

job_submit.lua is the site's tables (templates/job_submit.lua.j2) followed by the plain Lua
file `slurm_hetero/bridge/bridge.lua`, verbatim, in a function called with a table of them
(`SITE_TABLES`, the names bridge.lua reads).

The pools come from `site.pools`. Where the site file names the site's own job_submit rules
(slurm.job_submit), `siterules.lua` follows, verbatim: it chains them with the bridge's.
"""

from __future__ import annotations

from pathlib import Path

from slurm_hetero.jobs.sitefactor import FactorPolicy
from slurm_hetero.site.model import Site
from slurm_hetero.site.pools import pools
from slurm_hetero.site.tiers import tier_views

# The bridge's logic is a data file of the bridge package (testable, lintable Lua).
BRIDGE_LUA = Path(__file__).resolve().parent.parent / "bridge" / "bridge.lua"
# The chain that runs the site's own job_submit rules with the bridge (slurm.job_submit).
SITERULES_LUA = BRIDGE_LUA.with_name("siterules.lua")
# The tables job_submit.lua hands to bridge.lua, by name (see the top of bridge.lua).
SITE_TABLES: tuple[str, ...] = (
    "GRES_PREFIX", "SNAPSHOT_PATH", "SNAPSHOT_CHECK_S", "SNAPSHOT_STALE_S", "HISTORY_PATH", "MODELS",
    "MODEL_GROUPS", "MODEL_ALIASES", "POOLS", "TIERS", "ENERGY", "GRES_PARTITIONS", "IMAGES",
    "IMAGE_TAGS", "GRES_STACKS", "MOUNT_ALLOW", "MOUNTS_VAR", "PREDICTED_LIMITS",
    "PARTITION_LIMITS", "DEFAULT_PARTITION", "MODEL_LUA", "MIGRATE", "FLOAT", "TIER_NOTES",
    "LIMITED_TIERS", "DEFAULT_TIER", "SITE_FACTOR",
)


def bridge_source() -> str:
    """The bridge's logic: bridge.lua as shipped in the package."""
    return BRIDGE_LUA.read_text(encoding="utf-8")


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
        "tier_notes": {v.name: f"hetero: tier {v.name}: {v.fate()}" for v in tier_views(site)},
        "limited_tiers": [q.name for q in site.qos if any(":" in k for k, _ in q.grp_tres)],
        "policies": site.energy_policies,
        "site_factor": FactorPolicy(),
        "site_table_names": SITE_TABLES,
        "bridge_lua": bridge_source().rstrip("\n"),
        "site_rules": ({"script": site.slurm.job_submit_script, "order": site.slurm.job_submit_order}
                       if site.slurm.job_submit_script else None),
        "siterules_lua": (SITERULES_LUA.read_text(encoding="utf-8").rstrip("\n")
                          if site.slurm.job_submit_script else ""),
    }
