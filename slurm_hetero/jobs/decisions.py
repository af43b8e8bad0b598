"""What the bridge and the node agent record in a job's admin comment, as job table
columns: the bridge's decision (hetero, accel_spec, accel_kind, pool, why, tier, policy,
pred_p50, pred_p90) and the node agent's figures (energy_j, accel_util)."""

from __future__ import annotations

import math
from typing import Any

from slurm_hetero.slurm.comment import parse_comment


def accel_kind(accel: str) -> str:
    """The form of a --accel request: `any`, `units` or `named` (model, vendor or stack).

    >>> accel_kind("any:2"), accel_kind("units=4"), accel_kind("nvidia:2,mem>=80G")
    ('any', 'units', 'named')
    """
    a = accel.strip().lower()
    if not a:
        return ""
    if a.startswith("any"):
        return "any"
    return "units" if a.startswith("units") else "named"


def _num(v: Any) -> float:
    if type(v) is int or type(v) is float:  # exact types: a JSON true is not a number
        return float(v) if math.isfinite(v) else math.nan
    return math.nan


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _device_figures(devices: Any) -> tuple[list[float], list[float]]:
    """(energy_j, util) of each device entry that has them."""
    if not isinstance(devices, list):
        return [], []
    rows = [x for x in devices if isinstance(x, dict)]
    energy = [e for e in (_num(x.get("energy_j")) for x in rows) if not math.isnan(e)]
    util = [u for u in (_num(x.get("util")) for x in rows) if not math.isnan(u)]
    return energy, util


def parse_admin_comment(comment: str) -> dict[str, Any]:
    """The JSON in an AdminComment: the bridge's decision and what later stages added.

    Anything that is not a JSON object (an admin's free text, a truncated record) gives {};
    each key is taken only when it has the expected type; "hetero" says the bridge decided. Energy comes
    from the node agent's "node_energy" (per node: energy_j, devices, util, the policy it
    applied) or from top-level "energy_j"/"devices". Utilisation is a fraction (0..1) as
    the agent records it, or a percentage if any value is above 1; it is returned in %.
    Once a job has ended, sacctmgr rewrites every double quote as a backquote: undone here
    (the decision's values never hold a quote of their own).

    >>> parse_admin_comment('{"hetero":1,"accel":"any:2","pred":{"p50":60}}')["pred_p50"]
    60.0
    >>> parse_admin_comment('{`hetero`:1,`node_energy`:{`n1`:{`energy_j`:5.5,`util`:0.5}}}')["energy_j"]
    5.5
    >>> parse_admin_comment("maintenance: rerun"), parse_admin_comment('{"hetero":1,')
    ({}, {})
    """
    d = parse_comment(comment)
    if not d:
        return {}
    pred = d.get("pred")
    if not isinstance(pred, dict):
        pred = {}
    energy = _num(d.get("energy_j"))
    util = _num(d.get("util"))
    energies: list[float] = []
    utils: list[float] = [] if math.isnan(util) else [util]
    if math.isnan(energy) or math.isnan(util):  # per-device figures only where needed
        energies, dev_utils = _device_figures(d.get("devices"))
        utils = utils or dev_utils
    policy = _text(d.get("energy"))
    nodes = d.get("node_energy")
    node_energy: list[float] = []
    if isinstance(nodes, dict):
        for n in nodes.values():
            if not isinstance(n, dict):
                continue
            e, u = _num(n.get("energy_j")), _num(n.get("util"))
            if math.isnan(e) or math.isnan(u):
                dev_e, dev_u = _device_figures(n.get("devices"))
                e = sum(dev_e) if math.isnan(e) and dev_e else e
                u = sum(dev_u) / len(dev_u) if math.isnan(u) and dev_u else u
            if not math.isnan(e):
                node_energy.append(e)
            if not math.isnan(u):
                utils.append(u)
            policy = _text(n.get("policy")) or policy  # what the agent applied (auto resolved)
    if math.isnan(energy):
        parts = node_energy or energies
        energy = sum(parts) if parts else math.nan
    util = sum(utils) / len(utils) if utils else math.nan
    if utils and max(utils) <= 1.0:
        util *= 100.0
    # The node agent also writes energy for jobs the bridge never saw: "hetero" is 0 (or, in
    # records of earlier releases, missing) then.
    accel = _text(d.get("accel"))
    return {
        "hetero": d.get("hetero") == 1, "accel_spec": accel, "accel_kind": accel_kind(accel),
        "pool": _text(d.get("pool")), "why": _text(d.get("why")), "tier": _text(d.get("tier")),
        "policy": policy,
        "pred_p50": _num(pred.get("p50")), "pred_p90": _num(pred.get("p90")),
        "energy_j": energy, "accel_util": util,
    }
