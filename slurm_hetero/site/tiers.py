"""Service tiers: who preempts whom, how, after what grace and minimum run, within what limits.

Each tier is a Slurm QoS (PreemptType=preempt/qos). A tier's `preempt_mode`, `grace_time`
and `min_run` are set on its own QoS and apply to *its* jobs when a tier that lists it in
`preempt` needs their resources (Slurm reads them from the preempted job's QoS):

- requeue (the default): SIGCONT+SIGTERM to the job's *steps* (not the batch shell), then
  `grace_time`, then the job is requeued (SIGTERM to everything, KillWait, SIGKILL) and
  starts again later with SLURM_RESTART_COUNT one higher.
- cancel: the same signals and grace, then the job is killed for good.
- suspend: the job is stopped in memory and resumed by the gang scheduler; the cluster's
  PreemptMode then needs GANG. Slurm honours neither GraceTime nor PreemptExemptTime for
  it; a suspended job keeps its memory and its GRES (GPUs/NPUs are not freed); and with
  preempt/qos, jobs of one partition time-slice instead of one staying suspended.

`limits` cap what a tier's running jobs hold together (QoS GrpTRES), so no tier can take a
whole pool: `units` in normalized accelerator units per pool (a number, or a share of each
pool), `cpus` and `memory` (a number/size, or a share of the site's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slurm_hetero.site.catalog import AccelModel
from slurm_hetero.site.limits import shown
from slurm_hetero.site.model import NodeGroup, QosTier, Site
from slurm_hetero.site.units import parse_size_mib

DEFAULT_QOS: tuple[dict[str, Any], ...] = (
    {"name": "diamond", "priority": 1000, "preempt": ["gold", "silver"], "usage_factor": 2.0},
    {"name": "gold", "priority": 500, "preempt": ["silver"], "usage_factor": 1.0, "default": True},
    {"name": "silver", "priority": 100, "usage_factor": 0.5},
)
PREEMPT_MODES = ("requeue", "cancel", "suspend")
MAX_GRACE_S = 86_400  # a day: beyond that, a "grace" holds the preemptor back for good
MAX_MIN_RUN_S = 7 * 86_400
_DURATION = re.compile(r"^(\d{1,7})\s*(s|sec|m|min|h|d)?$")
_CLOCK = re.compile(r"^(?:(\d{1,3}):)?(\d{1,2}):(\d{2})$")
_UNIT_S = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400}
_SHARE = re.compile(r"^(\d{1,3}(?:\.\d+)?)\s*%$")
DURATION_HINT = "seconds (90), a number with a unit (90s, 10min, 2h, 1d) or H:MM:SS"

Err = Callable[[tuple[str | int, ...], str, str], None]


def parse_duration_s(value: object) -> int:
    """A tier duration in seconds.

    >>> parse_duration_s(90), parse_duration_s("10min"), parse_duration_s("1:02:03"), parse_duration_s("2:30")
    (90, 600, 3723, 150)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{value} is negative")
        return value
    text = str(value).strip().lower()
    m = _DURATION.match(text)
    if m:
        return int(m.group(1)) * _UNIT_S[m.group(2)]
    c = _CLOCK.match(text)
    if c:
        return (int(c.group(1) or 0) * 60 + int(c.group(2))) * 60 + int(c.group(3))
    raise ValueError(f"cannot read duration {shown(value)}")


def slurm_time(seconds: int) -> str:
    """HH:MM:SS, which sacctmgr reads as such (a plain number is minutes for PreemptExemptTime).

    >>> slurm_time(3723), slurm_time(90000)
    ('01:02:03', '25:00:00')
    """
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def human_duration(seconds: int) -> str:
    """A duration for people.

    >>> human_duration(90), human_duration(600), human_duration(7200), human_duration(0)
    ('1m30s', '10m', '2h', '0s')
    """
    out = ""
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out or "0s"


def _share(value: object) -> float | None:
    """0 < share <= 1 of a "N%" value; None for a plain number."""
    if isinstance(value, str):
        m = _SHARE.match(value.strip())
        if not m:
            raise ValueError(f"cannot read {shown(value)}: give a number or a share like 50%")
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise ValueError(f"share {shown(value)} must be above 0% and at most 100%")
        return pct / 100
    return None


def accel_pools(groups: tuple[NodeGroup, ...]) -> dict[str, tuple[AccelModel, int]]:
    """{model id: (model, devices in the site)}."""
    pools: dict[str, tuple[AccelModel, int]] = {}
    for g in groups:
        for a in g.accelerators:
            model, n = pools.get(a.model.id, (a.model, 0))
            pools[a.model.id] = (model, n + a.count * g.node_count)
    return pools


class LimitError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def concrete_tres(limits: dict[str, Any], groups: tuple[NodeGroup, ...]) -> list[tuple[str, int]]:
    """GrpTRES of a tier's limits. `units` caps every accelerator pool on its own (a GPU
    model is what a waiting job needs: that no tier holds a whole pool is what keeps the
    others from starving), rounded down but at least one device. The untyped
    gres/<name> total is set too: a job asking `--gres=gpu:1` without a type is counted
    only there. Raises LimitError naming the field."""
    out: list[tuple[str, int]] = []
    for field in ("cpus", "memory", "units"):
        if field not in limits:
            continue
        value = limits[field]
        try:
            share = _share(value) if isinstance(value, str) and "%" in value else None
            if field == "cpus":
                total = sum(g.cpus * g.node_count for g in groups)
                out.append(("cpu", math.floor(share * total + 1e-9) if share is not None
                            else int(value)))
            elif field == "memory":
                total = sum(g.memory_mib * g.node_count for g in groups)
                out.append(("mem", math.floor(share * total + 1e-9) if share is not None
                            else parse_size_mib(value, minimum=1)))
            else:
                out += _unit_tres(share, value, groups)
        except (ValueError, TypeError) as e:
            raise LimitError(field, str(e)) from None
    return out


def _unit_tres(share: float | None, value: Any, groups: tuple[NodeGroup, ...]) -> list[tuple[str, int]]:
    pools = accel_pools(groups)
    if not pools:
        raise ValueError("the site has no accelerators to limit in units")
    if share is None and isinstance(value, str):
        raise ValueError(f"cannot read {shown(value)}: give a number or a share like 50%")
    typed: list[tuple[str, int]] = []
    totals: dict[str, int] = {}
    for model, devices in pools.values():
        if share is not None:
            n = math.floor(share * devices + 1e-9)
        else:
            n = min(devices, math.floor(float(value) / model.units + 1e-9))
        n = max(n, 1)  # else a job of the tier that needs this model would pend for good
        typed.append((f"gres/{model.gres_name}:{model.gres_type}", n))
        totals[model.gres_name] = totals.get(model.gres_name, 0) + n
    return [(f"gres/{name}", n) for name, n in sorted(totals.items())] + sorted(typed)


def load_tiers(data: dict[str, Any], groups: tuple[NodeGroup, ...], err: Err
               ) -> tuple[tuple[QosTier, ...], str]:
    """The site's `qos` tiers (or the three defaults) and the default tier; problems go to err."""
    items = data.get("qos") or list(DEFAULT_QOS)
    names = [q["name"] for q in items]
    prio = {q["name"]: q["priority"] for q in items}
    tiers = []
    for i, q in enumerate(items):
        base: tuple[str | int, ...] = ("qos", i)
        if names.count(q["name"]) > 1 and names.index(q["name"]) != i:
            err((*base, "name"), f"duplicate QoS tier {q['name']!r}", "")
        for j, target in enumerate(q.get("preempt", [])):
            if target not in names or target == q["name"]:
                err((*base, "preempt", j), f"cannot preempt {target!r}",
                    "preempt lists other tiers of this site: " + ", ".join(names))
            elif names.index(target) > i and q["name"] in items[names.index(target)].get("preempt", []):
                err((*base, "preempt", j), f"{q['name']} and {target} preempt each other",
                    "preemption goes one way: remove one of the two")
        mode = q.get("preempt_mode")
        durations: dict[str, int | None] = {}
        for key, top in (("grace_time", MAX_GRACE_S), ("min_run", MAX_MIN_RUN_S)):
            durations[key] = None
            if key in q:
                try:
                    durations[key] = parse_duration_s(q[key])
                except ValueError as e:
                    err((*base, key), str(e), DURATION_HINT)
                    continue
                if durations[key] > top:  # type: ignore[operator]
                    err((*base, key), f"{shown(q[key])} is too long: at most {human_duration(top)}",
                        DURATION_HINT)
                if mode == "suspend":
                    err((*base, key), f"{key} has no effect on a tier whose jobs are suspended",
                        "Slurm honours GraceTime and PreemptExemptTime only for preempt_mode "
                        "requeue and cancel")
        if mode == "suspend":
            for t in items:
                if q["name"] in t.get("preempt", []) and prio[t["name"]] <= q["priority"]:
                    err((*base, "preempt_mode"), f"tier {t['name']} (priority {prio[t['name']]}) "
                        f"suspends {q['name']} (priority {q['priority']}) without a higher priority",
                        "a tier whose jobs are suspended needs a lower priority than every tier "
                        "that preempts it, or preempt_mode requeue or cancel")
        limits = q.get("limits") or {}
        try:
            tres = concrete_tres(limits, groups)
        except LimitError as e:
            err((*base, "limits", e.field), str(e),
                "units: normalized accelerator units per pool (8, or 50% of each pool); cpus: a "
                "count or share; memory: a size (2TB) or share")
            tres = []
        tiers.append(QosTier(
            q["name"], q["priority"], tuple(q.get("preempt", [])), float(q.get("usage_factor", 1.0)),
            preempt_mode=mode, grace_s=durations["grace_time"], min_run_s=durations["min_run"],
            limits=tuple((k, str(v)) for k, v in limits.items()), grp_tres=tuple(tres)))
    defaults = [q["name"] for q in items if q.get("default")]
    if len(defaults) > 1:
        err(("qos",), "more than one QoS tier has default: true", "")
    default = defaults[0] if defaults else min(tiers, key=lambda t: t.priority).name
    return tuple(tiers), default


# ---- what a tier allows, for `slurm-hetero tiers` and the submit-time note ------------------
@dataclass(frozen=True)
class TierView:
    name: str
    priority: int
    default: bool
    usage_factor: float
    preempts: tuple[str, ...]
    preempted_by: tuple[str, ...]
    mode: str  # requeue, cancel or suspend (the cluster's when the tier sets none)
    grace_s: int
    min_run_s: int
    limits: tuple[tuple[str, str], ...]
    grp_tres: tuple[tuple[str, int], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "priority": self.priority, "default": self.default,
                "usage_factor": self.usage_factor, "preempts": list(self.preempts),
                "preempted_by": list(self.preempted_by), "preempt_mode": self.mode,
                "grace_s": self.grace_s, "min_run_s": self.min_run_s,
                "limits": dict(self.limits), "grp_tres": dict(self.grp_tres)}

    def fate(self) -> str:
        """One line: what happens to a job of this tier when it is preempted."""
        if not self.preempted_by:
            return "never preempted"
        who = ", ".join(self.preempted_by)
        if self.mode == "suspend":
            return (f"suspended by {who} (keeps its memory and GPUs/NPUs; time-sliced with a "
                    "preemptor in the same partition)")
        after = f" after {human_duration(self.min_run_s)} of run time" if self.min_run_s else ""
        grace = (f"SIGTERM to its srun steps, {human_duration(self.grace_s)} to checkpoint, then "
                 if self.grace_s else "no grace, ")
        end = "requeued (restarts later)" if self.mode == "requeue" else "cancelled"
        return f"preemptible by {who}{after}: {grace}{end}"


def tier_views(site: Site) -> list[TierView]:
    """Every tier of the site with both sides of preemption, highest priority first."""
    views = []
    for t in sorted(site.qos, key=lambda t: -t.priority):
        views.append(TierView(
            name=t.name, priority=t.priority, default=t.name == site.default_qos,
            usage_factor=t.usage_factor, preempts=t.preempt,
            preempted_by=tuple(o.name for o in sorted(site.qos, key=lambda o: -o.priority)
                               if t.name in o.preempt),
            mode=t.preempt_mode or "requeue", grace_s=t.grace_s or 0, min_run_s=t.min_run_s or 0,
            limits=t.limits, grp_tres=t.grp_tres))
    return views


def global_preempt_mode(site: Site) -> str:
    """slurm.conf's PreemptMode: REQUEUE, with GANG when a tier's jobs are suspended (the
    gang scheduler is what resumes them)."""
    return "REQUEUE,GANG" if any(t.preempt_mode == "suspend" for t in site.qos) else "REQUEUE"


def format_tiers(site: Site) -> str:
    lines = []
    for v in tier_views(site):
        head = f"{v.name}: priority {v.priority}, usage factor {v.usage_factor:g}"
        lines.append(head + (" (default)" if v.default else ""))
        lines.append(f"  preempts:     {', '.join(v.preempts) or 'nothing'}")
        lines.append(f"  preempted by: {', '.join(v.preempted_by) or 'nobody'}")
        if v.preempted_by:
            lines.append(f"  mode:         {v.mode}")
            if v.mode != "suspend":
                lines.append(f"  grace:        {human_duration(v.grace_s)}"
                             + (" (SIGTERM to job steps started with srun; the batch shell "
                                "gets it only at the end)" if v.grace_s else ""))
                lines.append(f"  min run:      {human_duration(v.min_run_s)}")
        limits = ", ".join(f"{k} {val}" for k, val in v.limits) or "none"
        lines.append(f"  limits:       {limits}")
        if v.grp_tres:
            lines.append(f"  as GrpTRES:   {','.join(f'{k}={n}' for k, n in v.grp_tres)}")
        lines.append(f"  in short:     {v.fate()}")
    return "\n".join(lines) + "\n"
