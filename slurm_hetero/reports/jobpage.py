"""A job's own page: what was asked, what the bridge chose and why, what the job got, how
well it used it, and one line of advice.

Sources, all structured: `sacct --json -j ID` (slurm.jobrecord: the job, its steps' CPU
time and MaxRSS, requested and allocated TRES), the bridge's decision and the node agent's
per-device figures in the admin comment (jobs.decisions / slurm.comment), and for jobs
still queued or running `squeue --json` (the pending reason; the admin comment slurmdbd
may not have yet). The site file turns GRES into models, normalized units and arches,
so a job on an A100 and one on an Ascend 910B read on one scale (unit-hours, Wh per
unit-hour, busy units).

Definitions (as Princeton's jobstats and reportseff show them, per device model here):
CPU efficiency = CPU time of all steps / (elapsed x allocated CPUs); memory efficiency =
the largest step's MaxRSS (one task's peak, sampled every JobAcctGatherFrequency) / the
memory asked for; accelerator utilisation = the node agent's mean busy share per device.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pwd
import re
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.jobs.sacct import SiteIndex
from slurm_hetero.reports import fmt
from slurm_hetero.reports.jobid import BRIDGE_WHY, check_job_id
from slurm_hetero.reports.model import Report, Section, Table
from slurm_hetero.reports.period import Period, fmt_time
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.commands import admin_level_argv, sacct_job_json_argv
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobrecord import (
    JobRecord,
    parse_admin_level,
    parse_sacct_job_json,
    record_from_squeue,
)
from slurm_hetero.slurm.runner import Runner, SlurmCommandError
from slurm_hetero.slurm.sacct import TERMINAL
from slurm_hetero.slurm.squeue import parse_squeue_json, squeue_json_argv

WHY = BRIDGE_WHY
BUSY_UTIL = 5.0  # % : a device below this did no work worth the name
# Advice thresholds: waste large enough to be worth a line.
LOW_UTIL, LOW_CPU, LOW_MEM, SHORT_RUN = 50.0, 25.0, 25.0, 0.25
MIN_SPARE_S, MIN_MEM_MB = 600.0, 2048.0


@dataclass
class Fact:
    label: str
    value: str
    note: str = ""


@dataclass
class JobPage:
    job_id: int
    name: str
    user: str
    state: str
    groups: list[tuple[str, list[Fact]]]
    devices: pd.DataFrame  # per device: node, model, arch, index, units, util, power, energy
    advice: list[str]  # the first is the one line; the rest say what else could improve
    unknown: list[str]  # what the page cannot say yet, and why
    figures: dict[str, Any] = field(default_factory=dict)  # the numbers behind it (JSON, tests)

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "user": self.user,
            "state": self.state,
            "groups": {g: {f.label: f.value for f in facts} for g, facts in self.groups},
            "devices": self.devices.to_dict(orient="records"),
            "advice": self.advice,
            "unknown": self.unknown,
            "figures": self.figures,
        }


# ---- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Queued:
    """What slurmctld says of a job it still holds (squeue --json)."""

    state: str
    reason: str
    admin_comment: str


def queued(text: str, job_id: int) -> Queued | None:
    """The job's entry in `squeue --json` (22.05 answers every job: filtered here)."""
    import json

    jobs, _ = parse_squeue_json(text)
    mine = [j for j in jobs if j.job_id == job_id]
    if not mine:
        return None
    raw = next((j for j in json.loads(text)["jobs"] if isinstance(j, dict) and j.get("job_id") == job_id), {})
    reason = raw.get("state_reason")
    return Queued(mine[0].state, reason if isinstance(reason, str) else "", mine[0].admin_comment)


def caller_may_see(runner: Runner, owner: str, me: str | None = None, uid: int | None = None) -> bool:
    """Root, the owner, and accounting operators/administrators see a job. sacct already
    hides other users' jobs where PrivateData says so; this keeps the page from widening
    what a site allows where it does not."""
    uid = os.getuid() if uid is None else uid
    if uid == 0:
        return True
    if me is None:
        try:
            me = pwd.getpwuid(uid).pw_name
        except KeyError:
            return False
    if me == owner:
        return True
    try:
        level = parse_admin_level(runner.out(admin_level_argv(me), timeout=30))
    except (RuntimeFailure, ValueError):
        return False
    return level.lower() in ("operator", "administrator")


def fetch(runner: Runner, job_id: int) -> tuple[JobRecord, Queued | None]:
    """The job's accounting record (and slurmctld's view while it is queued or running).
    RuntimeFailure (exit 1) when slurmdbd knows no such job or cannot be reached."""
    try:
        text = runner.out(sacct_job_json_argv(job_id), timeout=60)
    except SlurmCommandError as e:
        raise RuntimeFailure(f"cannot read job {job_id} from accounting: {e}; is slurmdbd running?") from e
    try:
        rec = parse_sacct_job_json(text, job_id)
    except ValueError as e:
        raise RuntimeFailure(f"sacct --json -j {job_id}: unreadable answer: {e}") from e
    squeue_text: str | None = None
    if rec is None or rec.state not in TERMINAL:
        try:
            squeue_text = runner.out(squeue_json_argv(), timeout=60)
        except RuntimeFailure:
            squeue_text = None  # slurmctld down: the page says less, it still shows
    if squeue_text is not None and (rec is None or rec.state not in TERMINAL):
        # slurmdbd hears of a job's submission and start a moment after slurmctld: while
        # slurmctld holds the job its record is the current one (sacct's steps kept).
        try:
            live = record_from_squeue(squeue_text, job_id)
        except ValueError:
            live = None
        if live is not None:
            rec = (
                live
                if rec is None
                else dataclasses.replace(
                    live, steps=rec.steps, admin_comment=live.admin_comment or rec.admin_comment
                )
            )
    if rec is None:
        raise RuntimeFailure(
            f"job {job_id}: no such job in accounting (sacct knows none; "
            "it may be older than the database keeps, or another user's under PrivateData)"
        )
    q = None
    if squeue_text is not None and rec.state not in TERMINAL:
        try:
            q = queued(squeue_text, job_id)
        except ValueError:
            q = None
    return rec, q


# ---- figures ---------------------------------------------------------------------------------


def _gb(mb: float) -> str:
    gb = mb / 1024.0
    return f"{gb:.0f} GB" if gb >= 10 else f"{gb:.1f} GB" if gb >= 1 else f"{mb:.0f} MB"


def _pct(x: float) -> str:
    return f"{x:.0f}%" if x >= 10 else f"{x:.1f}%"


def _gres(tres: dict[str, float]) -> dict[str, int]:
    """Typed GRES of a TRES dict (`gres/gpu:h100` → 2); untyped ones when no typed entry."""
    typed = {k[5:]: int(v) for k, v in tres.items() if k.startswith("gres/") and ":" in k}
    names = {k.split(":")[0] for k in typed}
    plain = {
        k[5:]: int(v)
        for k, v in tres.items()
        if k.startswith("gres/") and ":" not in k and k[5:] not in names
    }
    return {**typed, **plain}


def _gres_text(g: dict[str, int]) -> str:
    return ", ".join(f"{k}:{v}" for k, v in sorted(g.items())) or "none"


def _nice_minutes(seconds: float) -> int:
    """A limit people would type: 10-minute steps under 2 h, then half hours, then hours."""
    m = max(seconds / 60.0, 1.0)
    step = 5 if m <= 30 else 10 if m <= 120 else 30 if m <= 600 else 60
    return int(math.ceil(m / step) * step)


def _limit_text(minutes: int) -> str:
    return f"{minutes} min" if minutes < 120 else f"{minutes / 60:g} h"


def _device_rows(
    comment: dict[str, Any],
    node_arch: dict[str, str],
    alloc_model: str,
    alloc_units_per_dev: float,
) -> pd.DataFrame:
    """The node agent's per-device figures (admin comment `node_energy`), one row each."""
    rows = []
    per_node = comment.get("node_energy")
    for node, summary in per_node.items() if isinstance(per_node, dict) else []:
        if not isinstance(summary, dict) or not isinstance(summary.get("devices"), list):
            continue
        for d in summary["devices"]:
            if not isinstance(d, dict):
                continue
            util = d.get("util")
            util_pct = (
                float(util) * 100.0
                if isinstance(util, int | float) and not isinstance(util, bool)
                else math.nan
            )
            rows.append(
                {
                    "node": str(node),
                    "arch": node_arch.get(str(node), ""),
                    "model": alloc_model or str(d.get("kind", "")),
                    "device": f"{d.get('kind', '')}{d.get('idx', '')}",
                    "units_per_device": alloc_units_per_dev,
                    "util_pct": util_pct,
                    "power_w": _f(d.get("power_w")),
                    "energy_Wh": _f(d.get("energy_j")) / 3600.0,
                    "power_of_limit_pct": _f(d.get("power_frac")) * 100.0,
                    "coverage_pct": _f(d.get("coverage")) * 100.0,
                    "policy": str(summary.get("policy", "")),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "node",
            "arch",
            "model",
            "device",
            "units_per_device",
            "util_pct",
            "power_w",
            "energy_Wh",
            "power_of_limit_pct",
            "coverage_pct",
            "policy",
        ],
    )


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _f(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def build_page(
    rec: JobRecord, q: Queued | None = None, site: Site | None = None, now: float | None = None
) -> JobPage:
    """Pure: the page of one job from its accounting record (and slurmctld's view)."""
    now = time.time() if now is None else now
    state = q.state if q and q.state and rec.state not in TERMINAL else rec.state
    ended = state in TERMINAL
    running = not ended and rec.start is not None
    comment = parse_comment(rec.admin_comment) or (parse_comment(q.admin_comment) if q else {})
    pred = _obj(comment.get("pred"))
    unknown: list[str] = []
    advice: list[str] = []
    figures: dict[str, Any] = {}
    idx = SiteIndex(site)
    node_arch = {n: arch for n, (arch, _) in idx.nodes.items()}

    # -- asked
    asked = [Fact("partition / QoS", f"{rec.partition or fmt.MISSING} / {rec.qos or fmt.MISSING}")]
    if rec.req_cpus:
        asked.append(Fact("CPUs", f"{rec.req_cpus:.0f}"))
    if rec.req_mem_mb:
        asked.append(
            Fact("memory", _gb(rec.req_mem_mb), "per CPU, multiplied out" if rec.mem_per_cpu else "")
        )
    # The bridge writes these beside "pred" in its record, not inside it (bridge.lua).
    user_limit = comment.get("user_limit_min")
    if rec.limit_s:
        note = ""
        if isinstance(user_limit, int | float) and comment.get("shortened") is True:
            note = f"you asked {fmt.duration(user_limit * 60)}; the bridge set its p90 and extends it on need"
        asked.append(Fact("time limit", fmt.duration(rec.limit_s), note))
    else:
        asked.append(Fact("time limit", "none recorded (partition default or UNLIMITED)"))
    req_gres = _gres(rec.requested)
    asked.append(Fact("GRES", _gres_text(req_gres)))
    if rec.constraints:
        asked.append(Fact("features (-C)", rec.constraints))
    for key, opt in (
        ("accel", "--accel"),
        ("arch", "--arch"),
        ("energy", "--energy"),
        ("tier", "--tier"),
        ("image", "--image"),
    ):
        if isinstance(comment.get(key), str):
            asked.append(Fact(opt, comment[key]))

    # -- the bridge
    bridge: list[Fact] = []
    if comment.get("hetero") == 1:
        if isinstance(comment.get("pool"), str):
            units = comment.get("units")
            bridge.append(
                Fact(
                    "pool",
                    comment["pool"],
                    f"{comment.get('n', '?')} x {comment.get('model', '?')}"
                    + (f" = {units:g} normalized units" if isinstance(units, int | float) else ""),
                )
            )
        why = comment.get("why")
        if isinstance(why, str):
            extra = (
                f"; {comment['candidates']} candidate pool(s)"
                if isinstance(comment.get("candidates"), int)
                else ""
            )
            age = comment.get("snapshot_age")
            extra += f"; snapshot {age} s old" if isinstance(age, int | float) else ""
            bridge.append(Fact("why", why, WHY.get(why, "") + extra))
        rule = comment.get("energy_rule")
        for summary in (
            (comment.get("node_energy") or {}).values()
            if isinstance(comment.get("node_energy"), dict)
            else []
        ):
            if isinstance(summary, dict) and isinstance(summary.get("auto_rule"), str):
                rule = summary["auto_rule"]
        if isinstance(rule, str):
            bridge.append(Fact("energy rule", rule))
        if not bridge:
            bridge.append(Fact("decision", "options checked, no pool to choose (no --accel)"))
    else:
        bridge.append(Fact("decision", "none recorded: plain Slurm options (the bridge passes them through)"))
    p50, p90 = _f(pred.get("p50")), _f(pred.get("p90"))
    if not math.isnan(p50):
        bridge.append(
            Fact(
                "predicted runtime",
                f"p50 {fmt.duration(p50)}, p90 {fmt.duration(p90)}"
                if not math.isnan(p90)
                else f"p50 {fmt.duration(p50)}",
            )
        )

    # -- got
    alloc = idx.alloc(",".join(f"{k}={v:g}" for k, v in rec.allocated.items()), rec.nodes or "")
    got: list[Fact] = []
    alloc_gres = _gres(rec.allocated)
    upd = alloc.units / alloc.devices if alloc.devices else math.nan
    if rec.start is None:
        reason = q.reason if q and q.reason and q.reason != "None" else rec.reason
        waited = now - (rec.eligible or rec.submit or now)
        got.append(
            Fact(
                "nothing yet",
                f"{state.lower() or 'pending'} for {fmt.duration(max(waited, 0.0))}",
                f"reason: {reason}" if reason and reason != "None" else "",
            )
        )
        unknown.append("what it gets, and every use figure: it has not started")
    else:
        got.append(
            Fact(
                "nodes",
                f"{rec.nodes} ({rec.node_count or 1:.0f})"
                + (f", {alloc.arch}" if alloc.arch and alloc.arch != "unknown" else ""),
            )
        )
        if rec.alloc_cpus:
            got.append(Fact("CPUs", f"{rec.alloc_cpus:.0f}"))
        if "mem" in rec.allocated:
            got.append(Fact("memory", _gb(rec.allocated["mem"])))
        got.append(Fact("GRES (AllocTRES)", _gres_text(alloc_gres)))
        if alloc.model:
            units_note = (
                f"{upd:.2f} units per device, {alloc.units:.2f} in all"
                if not math.isnan(alloc.units)
                else "the site does not know this model: no normalized units"
            )
            got.append(Fact("accelerators", f"{alloc.devices:g} x {alloc.model}", units_note))
        if rec.start and (rec.eligible or rec.submit):
            got.append(
                Fact("waited", fmt.duration(max(rec.start - (rec.eligible or rec.submit or rec.start), 0.0)))
            )

    # -- time
    times: list[Fact] = [Fact("submitted", fmt_time(rec.submit) if rec.submit else fmt.MISSING)]
    elapsed = rec.elapsed_s if rec.elapsed_s is not None else (now - rec.start if rec.start else None)
    if running and rec.start:
        elapsed = max(now - rec.start, elapsed or 0.0)
    if rec.start:
        times.append(Fact("started", fmt_time(rec.start)))
    if ended and rec.end:
        times.append(Fact("ended", f"{fmt_time(rec.end)} ({state.lower()}, exit {rec.exit_code})"))
    if elapsed is not None:
        share = f"{100 * elapsed / rec.limit_s:.0f}% of the limit" if rec.limit_s else ""
        times.append(Fact("runtime" + ("" if ended else " so far"), fmt.duration(elapsed), share))
        figures["runtime_s"] = elapsed
    if rec.limit_s:
        times.append(Fact("limit", fmt.duration(rec.limit_s)))
    if not math.isnan(p50):
        times.append(
            Fact(
                "predicted",
                f"p50 {fmt.duration(p50)}" + (f", p90 {fmt.duration(p90)}" if not math.isnan(p90) else ""),
            )
        )
        if ended and elapsed:
            acc = min(p50, elapsed) / max(p50, elapsed) if max(p50, elapsed) > 0 else 1.0
            times.append(Fact("prediction accuracy", f"{acc:.2f}", "min(p50, runtime) / max(p50, runtime)"))
    else:
        times.append(Fact("predicted", "n/a", "no runtime model in the bridge when it was submitted"))
    figures["limit_s"] = rec.limit_s

    # -- efficiency
    eff: list[Fact] = []
    cpu_s = rec.cpu_seconds()
    cpus = rec.alloc_cpus or 0.0
    if ended and elapsed and cpus and cpu_s is not None:
        cpu_eff = 100.0 * cpu_s / (elapsed * cpus)
        figures["cpu_eff_pct"] = cpu_eff
        eff.append(
            Fact(
                "CPU",
                _pct(cpu_eff),
                f"{fmt.duration(cpu_s)} CPU time / ({fmt.duration(elapsed)} x {cpus:.0f} CPUs)",
            )
        )
    elif rec.start:
        eff.append(
            Fact(
                "CPU",
                "not known yet" if not ended else "n/a",
                "sacct adds CPU time when each step ends" if not ended else "no CPU time recorded",
            )
        )
        if not ended:
            unknown.append("CPU efficiency: sacct records CPU time when steps end")
    rss = rec.max_rss_bytes()
    req_mb = rec.req_mem_mb or rec.allocated.get("mem")
    if rss is not None and req_mb:
        mem_eff = 100.0 * rss / (req_mb * 1024 * 1024)
        figures["mem_eff_pct"] = mem_eff
        eff.append(
            Fact(
                "memory",
                _pct(mem_eff),
                f"peak RSS {_gb(rss / 1024 / 1024)} of {_gb(req_mb)} asked (largest task, sampled)",
            )
        )
    elif rec.start:
        why_not = (
            "steps still running: MaxRSS is recorded when a step ends"
            if not ended
            else "no step lived past a JobAcctGatherFrequency sample (short steps record no MaxRSS)"
        )
        eff.append(Fact("memory", "not known yet" if not ended else "n/a", why_not))
        unknown.append(f"memory efficiency: {why_not}")

    # -- accelerators and energy
    devices = _device_rows(comment, node_arch, alloc.model, upd)
    accel: list[Fact] = []
    busy_units = math.nan
    hours = (elapsed or 0.0) / 3600.0
    if alloc.devices:
        if not math.isnan(alloc.units):
            accel.append(
                Fact(
                    "unit-hours",
                    f"{alloc.units * hours:.3g}",
                    f"{alloc.units:.2f} units x {fmt.duration(elapsed or 0.0)}",
                )
            )
        utils = devices["util_pct"].dropna()
        if len(utils):
            mean = float(utils.mean())
            figures["accel_util_pct"] = mean
            busy_units = (utils / 100.0).sum() * (upd if not math.isnan(upd) else 1.0)
            accel.append(
                Fact(
                    "utilisation",
                    f"{_pct(mean)} mean over {len(utils)} device(s)",
                    ", ".join(
                        f"{node}/{dev} {_pct(u)}"
                        for node, dev, u in zip(
                            devices["node"], devices["device"], devices["util_pct"], strict=True
                        )
                        if not math.isnan(u)
                    ),
                )
            )
            if not math.isnan(upd):
                accel.append(
                    Fact(
                        "busy units",
                        f"{busy_units:.2f} of {alloc.units:.2f}",
                        "normalized units x utilisation: comparable across models",
                    )
                )
        else:
            why_not = (
                "the node agent meters devices at the job's end (epilog)"
                if not ended
                else "the node agent recorded no utilisation (no counter or sampler on the node)"
            )
            accel.append(Fact("utilisation", "not known yet" if not ended else "n/a", why_not))
            unknown.append(f"accelerator utilisation: {why_not}")
    energies = devices["energy_Wh"].dropna() * 3600.0
    if len(energies):
        joules = float(energies.sum())
        figures["energy_j"] = joules
        accel.append(
            Fact("energy", f"{joules / 3600:.3g} Wh", f"mean {joules / max(elapsed or 1.0, 1.0):.0f} W")
        )
        if not math.isnan(alloc.units) and alloc.units * hours > 0:
            accel.append(
                Fact(
                    "energy per unit-hour",
                    f"{joules / 3600 / (alloc.units * hours):.0f} Wh",
                    "per normalized unit-hour: the same scale on every model",
                )
            )
    elif alloc.devices and ended:
        accel.append(Fact("energy", "n/a", "no energy counter or sampler on the node"))

    # -- advice, most expensive waste first
    n_dev = round(alloc.devices) if alloc.devices else 0
    utils = devices["util_pct"].dropna()
    if n_dev and len(utils):
        used = utils[utils >= BUSY_UTIL]
        kind = next(iter(alloc_gres)).split(":")[0] + "s" if alloc_gres else "devices"
        if len(used) < n_dev:
            mean_used = float(used.mean()) if len(used) else 0.0
            spec = f"--accel={alloc.model}:{max(len(used), 1)}" if alloc.model else ""
            advice.append(
                f"asked for {n_dev} {kind}, used {len(used)}"
                + (f" at {_pct(mean_used)}" if len(used) else "")
                + (f": ask {spec}" if spec else "")
            )
        elif float(utils.mean()) < LOW_UTIL:
            # Heterogeneous hardware: the busy share in normalized units says which smaller
            # model would have done the same work (the bridge picks it from --accel=units=U).
            tips = []
            if not math.isnan(busy_units) and not math.isnan(alloc.units) and busy_units < alloc.units:
                want = math.ceil(max(busy_units, 0.1) * 10) / 10
                tips.append(
                    f"--accel=units={want:g} lets the bridge pick a smaller model "
                    f"({busy_units:.2f} of {alloc.units:.2f} units were busy)"
                )
            if comment.get("energy") != "efficiency":
                tips.append("--energy=efficiency saves power at little cost")
            advice.append(
                f"{n_dev} {kind} busy {_pct(float(utils.mean()))} on average"
                + (": " + "; or ".join(tips) if tips else "")
            )
    if (
        ended
        and elapsed
        and rec.limit_s
        and elapsed < SHORT_RUN * rec.limit_s
        and rec.limit_s - elapsed > MIN_SPARE_S
        and state == "COMPLETED"
    ):
        ask = _nice_minutes(2 * elapsed)
        advice.append(
            f"asked {fmt.duration(rec.limit_s)}, ran {fmt.duration(elapsed)}: "
            f"ask {_limit_text(ask)} (-t {ask}) and start sooner (backfill fits short limits)"
        )
    if (
        not ended
        and rec.start is None
        and not math.isnan(p50)
        and rec.limit_s
        and p50 < SHORT_RUN * rec.limit_s
    ):
        advice.append(
            f"predicted {fmt.duration(p50)} of the {fmt.duration(rec.limit_s)} asked: a shorter "
            "limit may start sooner"
        )
    if rss is not None and req_mb and req_mb >= MIN_MEM_MB and figures.get("mem_eff_pct", 100) < LOW_MEM:
        need_mb = max(math.ceil(rss * 1.5 / 1024 / 1024 / 1024) * 1024, 1024)
        advice.append(
            f"used {_pct(figures['mem_eff_pct'])} of the {_gb(req_mb)} asked: ask --mem={need_mb // 1024}G"
        )
    ce = figures.get("cpu_eff_pct")
    if ce is not None and cpus > 1 and ce < LOW_CPU:
        want = max(1, math.ceil(cpus * ce / 100.0 * 1.25))
        advice.append(f"used {cpus * ce / 100:.2g} of {cpus:.0f} CPUs ({_pct(ce)}): ask -c {want}")
    if not advice:
        advice.append(
            "nothing to change: the job used what it asked for"
            if ended
            else "no advice yet: " + ("it is still running" if running else "it has not started")
        )

    groups = [("Asked", asked), ("Bridge", bridge), ("Got", got), ("Time", times)]
    if eff:
        groups.append(("Efficiency", eff))
    if accel:
        groups.append(("Accelerators and energy", accel))
    figures.update({"submit": rec.submit, "start": rec.start, "end": rec.end if ended else None})
    figures.update(
        {
            "devices": alloc.devices,
            "units": alloc.units,
            "model": alloc.model,
            "gres": alloc_gres,
            "state": state,
        }
    )
    return JobPage(rec.job_id, rec.name, rec.user, state, groups, devices, advice, unknown, figures)


def job_page(runner: Runner, job_text: str, site: Site | None = None, now: float | None = None) -> JobPage:
    """The page of job JOBID as the caller may see it (see `caller_may_see`)."""
    job_id = check_job_id(job_text)
    rec, q = fetch(runner, job_id)
    if not caller_may_see(runner, rec.user):
        raise RuntimeFailure(
            f"job {job_id} belongs to another user; only its owner, root and "
            "accounting operators/administrators see it"
        )
    return build_page(rec, q, site, now)


# ---- as a report (HTML, the admin's `report --job`) -------------------------------------------


def page_report(page: JobPage, source: str, now: float | None = None) -> Report:
    """The page as a Report: one section per group, the devices table, advice on top."""
    now = time.time() if now is None else now
    start = page.figures.get("start") or page.figures.get("submit") or now
    end = page.figures.get("end") or now
    period = Period(start, max(end, start + 1), True, True)
    summary = [
        ("job", f"{page.job_id} ({page.name})"),
        ("user", page.user),
        ("state", page.state.lower()),
        ("advice", page.advice[0]),
    ]
    sections = [
        Section("advice", "Advice", notes=[*page.advice, *[f"not known yet: {u}" for u in page.unknown]])
    ]
    for title, facts in page.groups:
        frame = pd.DataFrame([{"item": f.label, "value": f.value, "why": f.note} for f in facts])
        key = re.sub(r"[^a-z]+", "-", title.lower()).strip("-")
        # The section names the group: its one table needs no second heading.
        sections.append(Section(key, title, [Table(f"job_{key.replace('-', '_')}", "", frame, show=50)]))
    if len(page.devices):
        sections.append(
            Section(
                "devices",
                "Devices (the node agent's figures)",
                [Table("job_devices", "Per device", page.devices, show=200)],
            )
        )
    return Report(f"job {page.job_id} · {page.name}", source, period, summary, sections)


def print_page(page: JobPage, console: Any) -> None:
    """The page in a terminal (rich): advice first, then each group, then the devices."""
    from rich.table import Table as RichTable
    from rich.text import Text

    console.rule(Text(f"job {page.job_id} · {page.name} · {page.user} · {page.state.lower()}", style="bold"))
    console.print(Text.assemble(("advice: ", "bold"), page.advice[0]))
    for more in page.advice[1:]:
        console.print(Text("also: " + more))
    for title, facts in page.groups:
        t = RichTable(
            title=Text(title, style="bold"), title_justify="left", show_header=False, box=None, padding=(0, 2)
        )
        t.add_column(style="bold")
        t.add_column(overflow="fold")
        t.add_column(style="dim", overflow="fold")
        for f in facts:
            t.add_row(Text(f.label), Text(f.value), Text(f.note))
        console.print(t)
    if len(page.devices):
        t = RichTable(title=Text("Devices (the node agent's figures)", style="bold"), title_justify="left")
        for col in page.devices.columns:
            t.add_column(
                Text(fmt.header(str(col))),
                justify="right"
                if col.endswith(("_pct", "_w", "_Wh")) or col == "units_per_device"
                else "left",
            )
        for row in page.devices.itertuples(index=False):
            t.add_row(*(Text(fmt.cell(str(c), v)) for c, v in zip(page.devices.columns, row, strict=True)))
        console.print(t)
    for u in page.unknown:
        console.print(Text("not known yet: " + u, style="dim"))
