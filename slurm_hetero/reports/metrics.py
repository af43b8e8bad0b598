"""From a job table to a Report: every number the terminal, HTML and CSV outputs show.

Conventions the renderers rely on (column-name suffixes): `_s` seconds, `_pct` percent,
`_hours` hours, `_kwh` kilowatt-hours, `_w` watts. Definitions:

- allocated hours count only the part of each job inside the report period (running jobs
  up to the period's end), so they compare with capacity times the period;
- queue wait = start - eligible time (submit time when Slurm recorded none), for the jobs
  that started inside the period: a held job does not count as waiting while held;
- prediction accuracy = mean(min(p, a) / max(p, a)) over finished jobs with a > 0 and
  p > 0; under-prediction share = share of those jobs with p < a;
- CPU efficiency = sum of CPU time used / sum of (CPUs * elapsed), finished jobs that recorded it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.jobs import table as J
from slurm_hetero.jobs.capacity import Capacity
from slurm_hetero.reports import fmt
from slurm_hetero.reports.model import Plot, Report, Section, Table
from slurm_hetero.reports.outages import Outages, lost_by_pool
from slurm_hetero.reports.period import Period, bucket_edges, fmt_step, fmt_time
from slurm_hetero.slurm.sacct import TERMINAL

NO_VALUE = "(none)"
Arr = np.ndarray


class Derived:
    """Per-job arrays every section uses, computed once."""

    def __init__(self, jobs: pd.DataFrame, period: Period):
        self.jobs = jobs
        start, end = jobs["start"].to_numpy(), jobs["end"].to_numpy()
        self.started = ~np.isnan(start)
        base = np.fmax(jobs["submit"].to_numpy(), jobs["eligible"].to_numpy())
        # Waits belong to the period in which the job started (a job running since last week
        # does not weigh on this week's queue).
        started_here = self.started & (start >= period.start) & (start < period.end)
        self.wait = np.where(started_here, np.clip(start - base, 0.0, None), np.nan)
        # The run clipped to the period; a running job runs until the period's end.
        self.s = np.where(self.started, np.maximum(start, period.start), np.nan)
        running_end = np.where(np.isnan(end), period.end, end)
        self.e = np.where(self.started, np.minimum(running_end, period.end), np.nan)
        self.hours = np.nan_to_num(np.clip(self.e - self.s, 0.0, None)) / 3600.0
        self.device_hours = jobs["devices"].to_numpy() * self.hours
        self.unit_hours = jobs["units"].to_numpy() * self.hours
        self.cpu_hours = np.nan_to_num(jobs["ncpus"].to_numpy()) * self.hours
        terminal = jobs["state"].isin(TERMINAL).to_numpy()
        self.finished = terminal & self.started
        self.never_started = terminal & ~self.started

    def text(self, col: str, mask: Arr | None = None) -> Arr:
        values = J.labels(self.jobs[col])
        return values if mask is None else values[mask]

    def num(self, col: str, mask: Arr | None = None) -> Arr:
        values: Arr = self.jobs[col].to_numpy(dtype="float64")
        return values if mask is None else values[mask]

    def frame(self, **extra: Arr) -> pd.DataFrame:
        """The job table's grouping columns with the derived columns beside them."""
        cols = ["user", "account", "partition", "qos", "model", "arch", "accel_class"]
        out = self.jobs[cols].copy()
        out["wait"] = self.wait
        out["device_hours"] = self.device_hours
        out["unit_hours"] = self.unit_hours
        out["cpu_hours"] = self.cpu_hours
        out["never"] = self.never_started
        for k, v in extra.items():
            out[k] = v
        return out


def build_report(jobs: pd.DataFrame, capacity: Capacity, period: Period, source: str,
                 pending: pd.DataFrame | None = None, notes: Sequence[str] = (),
                 partition: str | None = None, now: float | None = None,
                 outages: Outages | None = None, default_limits: Mapping[str, float] | None = None) -> Report:
    """The whole report of `jobs` (already selected to the period and partition).

    `outages`: capacity lost to down/drained nodes and maintenance (reports.outages), taken
    off the capacity the utilisation is measured against; `default_limits`: each
    partition's DefaultTime in seconds, so a limit nobody chose is not read as an estimate."""
    now = time.time() if now is None else now
    title = "slurm-hetero accounting report" + (f" · partition {partition}" if partition else "")
    if pending is None:
        pending = pending_jobs(jobs)
    npending = len(pending)
    if len(jobs) == 0 and npending == 0:
        msg = f"no jobs in range {period.label()}" + (f" in partition {partition}" if partition else "")
        summary = [("source", source), ("period", period.label()), ("jobs", "0")]
        sec = Section("summary", "Summary", [_summary_table(summary)], notes=[msg])
        if outages is not None and outages.device_s:  # idle is not the same as usable
            lost = ", ".join(f"{m}@{a} {v / 3600:.3g}" for (m, a), v in sorted(outages.device_s.items()))
            msg += f"; device-hours lost to down, drained or maintenance nodes: {lost}"
        return Report(title, source, period, summary, [sec], list(notes), empty=msg)
    d = Derived(jobs, period)
    step, edges = bucket_edges(period)
    states = jobs["state"].value_counts()
    summary = [
        ("source", source), ("period", period.label()), ("plot bucket", fmt_step(step)),
        ("jobs in range", f"{len(jobs):,}"),
        ("by state", ", ".join(f"{str(k).lower()} {v:,}" for k, v in states.items() if v)),
        ("still waiting", f"{npending:,}"),
        ("users", f"{jobs['user'].nunique():,}"),
        ("device-hours", fmt.number(float(np.nansum(d.device_hours)))),
        ("normalized-unit-hours", fmt.number(float(np.nansum(d.unit_hours)))),
        ("CPU-hours", fmt.number(float(np.nansum(d.cpu_hours)))),
        ("generated", fmt_time(time.time())),
    ]
    sections = [
        Section("summary", "Summary", [_summary_table(summary)]),
        utilisation(d, capacity, period, edges, outages),
        waits(d, pending, now),
        energy(d),
        prediction(d, edges, default_limits or {}),
        bridge(d),
        users(d),
        efficiency(d),
    ]
    return Report(title, source, period, summary, sections, list(notes))


def _summary_table(rows: list[tuple[str, str]]) -> Table:
    return Table("summary", "Summary", pd.DataFrame(rows, columns=["item", "value"]), show=50)


# ---- utilisation ---------------------------------------------------------------------------

def usage_series(s: Arr, e: Arr, w: Arr, edges: Sequence[float]) -> Arr:
    """Mean of Σ w over the jobs running, per bucket [edges[k], edges[k+1]).

    The integral of the running total is read off sorted start/end events, so a million
    jobs cost one sort, not a pass per bucket."""
    ok = ~(np.isnan(s) | np.isnan(e) | np.isnan(w)) & (e > s) & (w != 0)
    s, e, w = s[ok], e[ok], w[ok]
    ed = np.asarray(edges, dtype="float64")
    if len(s) == 0:
        return np.zeros(len(ed) - 1)
    t = np.concatenate([s, e])
    delta = np.concatenate([w, -w])
    order = np.argsort(t, kind="stable")
    t, delta = t[order], delta[order]
    level = np.cumsum(delta)  # total in use just after each event
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])  # integral up to each event
    k = np.searchsorted(t, ed, side="right") - 1
    kk = np.clip(k, 0, None)
    at = np.where(k >= 0, area[kk] + level[kk] * (ed - t[kk]), 0.0)
    return np.diff(at) / np.diff(ed)


def _pct(used: float, cap: float) -> float:
    return 100.0 * used / cap if cap and cap > 0 and not np.isnan(cap) else np.nan


def _sum(x: pd.Series) -> float:
    """Sum that stays NaN when every value is (units of a model the site does not know)."""
    return float(x.sum(min_count=1))


def utilisation(d: Derived, cap: Capacity, period: Period, edges: list[float],
                outages: Outages | None = None) -> Section:
    hours = period.seconds / 3600.0
    lost_dev = outages.device_s if outages else {}
    lost_cpu = outages.cpu_s if outages else {}
    f = d.frame()
    acc = f[d.text("model") != ""]
    by = acc.groupby(["model", "arch"], observed=True).agg(
        jobs=("device_hours", "size"), device_hours=("device_hours", "sum"), unit_hours=("unit_hours", _sum))
    used: dict[tuple[str, str], dict[str, float]] = {
        (str(m), str(a)): {"jobs": float(r["jobs"]), "device_hours": float(r["device_hours"]),
                           "unit_hours": float(r["unit_hours"])}
        for (m, a), r in by.iterrows()}
    keys = list(dict.fromkeys([*cap.devices, *used]))
    rows = []
    for key in keys:
        model, arch = key
        devs = cap.devices.get(key, 0.0)
        upd = cap.units_per_device.get(model, np.nan)
        none_used = {"jobs": 0.0, "device_hours": 0.0, "unit_hours": 0.0 if not np.isnan(upd) else np.nan}
        u = used.get(key, none_used)
        # Capacity counts a device only while its node could run jobs.
        usable = max(devs * hours - lost_dev.get(key, 0.0) / 3600.0, 0.0)
        rows.append({"model": model, "arch": arch, "devices": devs, "units_per_device": upd,
                     "jobs": int(u["jobs"]), "device_hours": u["device_hours"],
                     "capacity_device_hours": usable, "util_pct": _pct(u["device_hours"], usable),
                     "unit_hours": u["unit_hours"], "capacity_unit_hours": usable * upd})
    by_model = pd.DataFrame(rows, columns=["model", "arch", "devices", "units_per_device", "jobs",
                                           "device_hours", "capacity_device_hours", "util_pct",
                                           "unit_hours", "capacity_unit_hours"])
    by_model = by_model.sort_values(["device_hours", "devices"], ascending=False, kind="stable")

    g = f.groupby("arch", observed=True).agg(
        jobs=("cpu_hours", "size"), cpu_hours=("cpu_hours", "sum"),
        device_hours=("device_hours", "sum"), unit_hours=("unit_hours", _sum))
    per_arch: dict[str, dict[str, float]] = {
        str(a): {str(k): float(v) for k, v in r.items()} for a, r in g.iterrows()}
    arches = list(dict.fromkeys([*cap.cpus, *[a for _, a in cap.devices], *[a for a in per_arch if a]]))
    arows = []
    for arch in arches:
        r = per_arch.get(arch, {"jobs": 0.0, "cpu_hours": 0.0, "device_hours": 0.0, "unit_hours": 0.0})
        cpus = cap.cpus.get(arch, 0.0)
        lost_units_h = sum(v * cap.units_per_device.get(m, np.nan) for (m, a), v in lost_dev.items()
                           if a == arch) / 3600.0
        cap_units = (sum(cap.units(m, a) for m, a in cap.devices if a == arch)
                     - lost_units_h / max(hours, 1e-9))
        cpu_cap = max(cpus * hours - lost_cpu.get(arch, 0.0) / 3600.0, 0.0)
        arows.append({
            "arch": arch, "nodes": cap.nodes.get(arch, np.nan), "cpus": cpus, "jobs": int(r["jobs"]),
            "cpu_hours": r["cpu_hours"], "capacity_cpu_hours": cpu_cap,
            "cpu_util_pct": _pct(r["cpu_hours"], cpu_cap),
            "devices": sum(v for (_, a), v in cap.devices.items() if a == arch),
            "device_hours": r["device_hours"], "unit_hours": r["unit_hours"],
            "capacity_unit_hours": cap_units * hours,
            "unit_util_pct": _pct(r["unit_hours"], cap_units * hours)})
    by_arch = pd.DataFrame(arows, columns=["arch", "nodes", "cpus", "jobs", "cpu_hours",
                                           "capacity_cpu_hours", "cpu_util_pct", "devices",
                                           "device_hours", "unit_hours", "capacity_unit_hours",
                                           "unit_util_pct"])
    what = ("installed devices while their nodes could run jobs (down, drained and maintenance "
            "time taken off)" if outages else "installed devices")
    tables = [Table("utilisation_by_model", "Accelerators by model and architecture", by_model,
                    note=f"capacity from {cap.source}: {what} over the "
                         f"{fmt.duration(period.seconds)} period"),
              Table("utilisation_by_arch", "By architecture: CPUs and normalized units", by_arch)]
    notes = []
    if outages is not None:
        lost = lost_by_pool(outages, cap.devices, period.seconds)
        if len(lost) and float(lost["lost_device_hours"].sum()) > 0:
            tables.append(Table("capacity_lost",
                                "Capacity lost to down, drained and maintenance nodes, by pool",
                                lost[lost["lost_device_hours"] > 0].reset_index(drop=True)))
        if len(outages.rows):
            spans = outages.rows.sort_values("lost_s", ascending=False, kind="stable").reset_index(drop=True)
            spans["from"], spans["to"] = spans["from"].map(fmt_time), spans["to"].map(fmt_time)
            tables.append(Table("node_outages", "Node outages in the period (sacctmgr events, maintenance)",
                                spans))
        else:
            notes.append("no node was down, drained or in maintenance in the period")
    if cap.inventory:
        inv = pd.DataFrame(sorted(cap.inventory.items()), columns=["model", "devices"])
        tables.append(Table("capacity_inventory", "Installed accelerators (not attributable per job)", inv))

    x = pd.Index(edges[:-1], name="time")
    model_col, arch_col = d.text("model"), d.text("arch")
    dev, ncpus, units = d.num("devices"), np.nan_to_num(d.num("ncpus")), d.num("units")
    series: dict[str, Arr] = {}
    for key in keys:
        devs = cap.devices.get(key, 0.0)
        m = (model_col == key[0]) & (arch_col == key[1])
        if devs > 0:
            series[f"{key[0]} ({key[1]})"] = 100.0 * usage_series(d.s[m], d.e[m], dev[m], edges) / devs
    arch_series: dict[str, Arr] = {}
    for arch in arches:
        m = arch_col == arch
        cpus = cap.cpus.get(arch, 0.0)
        if cpus > 0:
            arch_series[f"{arch} CPUs"] = 100.0 * usage_series(d.s[m], d.e[m], ncpus[m], edges) / cpus
        cu = sum(cap.units(mm, a) for mm, a in cap.devices if a == arch)
        if cu > 0 and not np.isnan(cu):
            arch_series[f"{arch} units"] = 100.0 * usage_series(d.s[m], d.e[m], units[m], edges) / cu
    plots = []
    if series:
        plots.append(Plot("utilisation_model_time", "Accelerators in use, % of installed, by model",
                          "lines", pd.DataFrame(series, index=x), "% of devices", time_x=True))
    if arch_series:
        plots.append(Plot("utilisation_arch_time", "CPUs and normalized units in use, % of capacity",
                          "lines", pd.DataFrame(arch_series, index=x), "% of capacity", time_x=True))
    return Section("utilisation", "Utilisation", tables, plots, notes)


# ---- waits ---------------------------------------------------------------------------------

WAIT_COLUMNS = ["jobs", "never_started", "wait_p50_s", "wait_p90_s", "wait_p99_s", "wait_mean_s",
                "wait_max_s"]


def percentile_table(f: pd.DataFrame, by: str, value: str = "wait") -> pd.DataFrame:
    """Per group: jobs that started, jobs that ended without starting, wait percentiles."""
    started = f[~f[value].isna()]
    g = started.groupby(by, observed=True)[value]
    out = pd.DataFrame({"jobs": g.size(), "wait_p50_s": g.quantile(0.5), "wait_p90_s": g.quantile(0.9),
                        "wait_p99_s": g.quantile(0.99), "wait_mean_s": g.mean(), "wait_max_s": g.max()})
    never = f[f["never"]].groupby(by, observed=True).size()
    out = out.join(never.rename("never_started"), how="outer")
    out["jobs"] = out["jobs"].fillna(0).astype(int)
    out["never_started"] = out["never_started"].fillna(0).astype(int)
    out.index = pd.Index([str(i) for i in out.index], name=by)
    out = out.reset_index()[[by, *WAIT_COLUMNS]]
    return out.sort_values("jobs", ascending=False, kind="stable").reset_index(drop=True)


def pending_jobs(jobs: pd.DataFrame) -> pd.DataFrame:
    """Waiting jobs as sacct recorded them (squeue's view is preferred when there is one)."""
    mask = (jobs["state"] == "PENDING").to_numpy()
    return pd.DataFrame({"job": J.labels(jobs["job_id"])[mask],
                         "partition": J.labels(jobs["partition"])[mask],
                         "reason": J.labels(jobs["reason"])[mask],
                         "submit": jobs["submit"].to_numpy(dtype="float64")[mask]})


def waits(d: Derived, pending: pd.DataFrame, now: float) -> Section:
    f = d.frame()
    sec = Section("waits", "Queue waits")
    for by, label in (("partition", "partition"), ("qos", "QoS tier"), ("accel_class", "accelerator class")):
        t = percentile_table(f, by)
        sec.tables.append(Table(f"waits_by_{by}", f"Wait by {label}", t))
        p = t[t["jobs"] > 0].set_index(by)[["wait_p50_s", "wait_p90_s", "wait_p99_s"]].head(20)
        if len(p):
            p.columns = pd.Index(["p50", "p90", "p99"])
            values = p.to_numpy(dtype="float64")
            positive = values[values > 0]
            wide = len(positive) > 0 and float(positive.max()) / max(float(positive.min()), 1.0) > 100
            sec.plots.append(Plot(f"waits_{by}", f"Queue wait by {label}", "bars", p, "wait",
                                  logy=wide, seconds=True))
    if len(pending):
        pf = pending.assign(waited=np.clip(now - pending["submit"].astype("float64"), 0.0, None))
        g = pf.groupby(["reason", "partition"], observed=True)["waited"]
        t = pd.DataFrame({"jobs": g.size(), "longest_wait_s": g.max(), "median_wait_s": g.median()})
        t = t.reset_index().sort_values("jobs", ascending=False, kind="stable").reset_index(drop=True)
        sec.tables.append(Table("pending_reasons", "Jobs still waiting, by reason", t))
        by_reason = t.groupby("reason")["jobs"].sum().sort_values().tail(15)
        sec.plots.append(Plot("pending_reasons", "Jobs still waiting, by reason", "hbars",
                              by_reason.to_frame("jobs"), "jobs"))
    else:
        sec.notes.append("no job is waiting now")
    return sec


# ---- energy --------------------------------------------------------------------------------

def _energy_group(f: pd.DataFrame, by: str) -> pd.DataFrame:
    g = f.groupby(by, observed=True)
    t = pd.DataFrame({"jobs": g.size(), "energy_kwh": g["energy_kwh"].sum(),
                      "unit_hours": g["unit_hours"].sum(), "run_hours": g["run_hours"].sum()})
    t["wh_per_unit_hour"] = 1000.0 * t["energy_kwh"] / t["unit_hours"].where(t["unit_hours"] > 0)
    t["mean_power_w"] = 1000.0 * t["energy_kwh"] / t["run_hours"].where(t["run_hours"] > 0)
    t = t.drop(columns=["run_hours"])
    t.index = pd.Index([str(i) for i in t.index], name=by)
    return t.reset_index().sort_values("energy_kwh", ascending=False, kind="stable").reset_index(drop=True)


def _policy_comparison(f: pd.DataFrame) -> pd.DataFrame:
    """Efficiency vs performance on comparable jobs: same name, model and device count."""
    pair = f[f["policy"].isin(["efficiency", "performance"])]
    g = pair.groupby(["name", "model", "devices", "policy"]).agg(
        jobs=("energy_kwh", "size"), energy_kwh=("energy_kwh", "median"), elapsed_s=("elapsed_s", "median"))
    w = g.unstack("policy")
    cols = [(m, p) for m in ("jobs", "energy_kwh", "elapsed_s") for p in ("efficiency", "performance")]
    if not len(w) or any(c not in w.columns for c in cols):
        return pd.DataFrame()
    w = w[w[("jobs", "efficiency")].notna() & w[("jobs", "performance")].notna()]
    eff_e, perf_e = w[("energy_kwh", "efficiency")], w[("energy_kwh", "performance")]
    eff_t, perf_t = w[("elapsed_s", "efficiency")], w[("elapsed_s", "performance")]
    out = pd.DataFrame({
        "jobs_efficiency": w[("jobs", "efficiency")].astype(int),
        "jobs_performance": w[("jobs", "performance")].astype(int),
        "energy_efficiency_kwh": eff_e, "energy_performance_kwh": perf_e,
        "energy_saved_pct": 100.0 * (1 - eff_e / perf_e.where(perf_e > 0)),
        "elapsed_efficiency_s": eff_t, "elapsed_performance_s": perf_t,
        "slowdown_pct": 100.0 * (eff_t / perf_t.where(perf_t > 0) - 1),
    })
    out = out.reset_index().sort_values("jobs_efficiency", ascending=False, kind="stable")
    return out.reset_index(drop=True)


def energy(d: Derived) -> Section:
    sec = Section("energy", "Energy")
    has = ~np.isnan(d.num("energy_j"))
    if not has.any():
        sec.notes.append("no energy recorded: neither the node agent's energy_j in the admin comment "
                         "nor Slurm's ConsumedEnergy")
        return sec
    accel = np.nan_to_num(d.num("devices")) > 0
    unmetered = int((accel & ~has).sum())
    if unmetered:  # say it, rather than let the totals look complete
        sec.notes.append(f"energy recorded for {int((accel & has).sum())} of {int(accel.sum())} "
                         f"accelerator jobs: {unmetered} ran on nodes with no energy counter or "
                         "sampler (or before the node agent)")
    run_h = np.nan_to_num(d.num("runtime_s", has)) / 3600.0
    policy, model = d.text("policy", has), d.text("model", has)
    f = pd.DataFrame({
        "job": d.text("job_id", has), "name": d.text("name", has), "user": d.text("user", has),
        "model": np.where(model == "", J.CPU_CLASS, model), "devices": d.num("devices", has),
        "policy": np.where(policy == "", NO_VALUE, policy), "elapsed_s": d.num("runtime_s", has),
        "run_hours": run_h, "energy_kwh": d.num("energy_j", has) / 3.6e6,
        "unit_hours": d.num("units", has) * run_h,
    })
    f["wh_per_unit_hour"] = 1000.0 * f["energy_kwh"] / f["unit_hours"].where(f["unit_hours"] > 0)
    f["mean_power_w"] = 1000.0 * f["energy_kwh"] / f["run_hours"].where(f["run_hours"] > 0)
    per_job = f.drop(columns=["run_hours"]).sort_values("energy_kwh", ascending=False, kind="stable")
    by_policy, by_model = _energy_group(f, "policy"), _energy_group(f, "model")
    sec.tables += [
        Table("energy_by_policy", "Energy by policy", by_policy),
        Table("energy_by_model", "Energy by accelerator model", by_model),
        Table("energy_per_job", "Energy per job (largest first)", per_job.reset_index(drop=True)),
    ]
    cmp = _policy_comparison(f)
    if len(cmp):
        sec.notes.append(f"{len(cmp)} group(s) of comparable jobs ran under both policies: median energy "
                         f"saved {cmp['energy_saved_pct'].median():.1f} %, median slowdown "
                         f"{cmp['slowdown_pct'].median():.1f} %")
        sec.tables.append(Table("energy_policy_comparison", "Efficiency vs performance policy on "
                                "comparable jobs (same name, model, devices; medians)", cmp))
    else:
        sec.notes.append("no comparable jobs (same name, model and device count) ran under both the "
                         "efficiency and the performance policy")
    acc = f[f["model"] != J.CPU_CLASS]
    g = acc.groupby(["model", "policy"]).agg(e=("energy_kwh", "sum"), u=("unit_hours", "sum"))
    wh = (1000.0 * g["e"] / g["u"].where(g["u"] > 0)).dropna()
    if len(wh):
        sec.plots.append(Plot("energy_wh_per_unit_hour", "Energy per normalized-unit-hour by model, policy",
                              "bars", wh.unstack("policy"), "Wh per unit-hour"))
    sec.notes.append("where the node agent metered a job, its figures are the devices' own counters, kept "
                     "in the admin comment; sacct's ConsumedEnergy and sreport do not hold them (Slurm fills "
                     "it only from its acct_gather_energy plugin: README, \"Energy in Slurm's own tools\")")
    return sec


# ---- prediction ----------------------------------------------------------------------------

ESTIMATORS = (("user estimate (time limit)", "req_time_s"), ("bridge prediction p50", "pred_p50"))


def accuracy(p: Arr, a: Arr) -> tuple[int, float, float]:
    """(jobs, mean of min(p,a)/max(p,a), % with p < a) over the jobs where both are > 0."""
    ok = (p > 0) & (a > 0)
    p, a = p[ok], a[ok]
    if not len(p):
        return 0, np.nan, np.nan
    return len(p), float(np.mean(np.minimum(p, a) / np.maximum(p, a))), float(100.0 * np.mean(p < a))


def own_limits(req: Arr, partition: Arr, default_limits: Mapping[str, float]) -> Arr:
    """The user's estimate where the job chose its limit: a limit equal to its partition's
    DefaultTime is what Slurm gave a job that named none, not an estimate (NaN then)."""
    default = np.asarray([default_limits.get(str(p), np.nan) for p in partition], dtype="float64")
    return np.where(np.isclose(req, default), np.nan, req)


def prediction(d: Derived, edges: list[float], default_limits: Mapping[str, float] | None = None) -> Section:
    sec = Section("prediction", "Runtime prediction")
    fin = d.finished & (np.nan_to_num(d.num("runtime_s")) > 0)
    a, part, end = d.num("runtime_s", fin), d.text("partition", fin), d.num("end", fin)
    bucket = np.clip(np.searchsorted(np.asarray(edges), end, side="right") - 1, 0, len(edges) - 2)
    rows: list[dict[str, Any]] = []
    prow: list[dict[str, Any]] = []
    series: dict[str, Arr] = {}
    for label, col in ESTIMATORS:
        p = d.num(col, fin)
        if col == "req_time_s":
            raw = p
            p = own_limits(p, part, default_limits or {})
            defaulted = int(np.sum((raw > 0) & np.isnan(p)))
            if defaulted:
                sec.notes.append(f"user estimate: {defaulted:,} finished job(s) ran under their partition's "
                                 "DefaultTime (no limit of their own): left out of its accuracy")
        n, acc, under = accuracy(p, a)
        if n == 0:
            if col == "req_time_s":
                why = ("no finished job set a time limit of its own" if len(a) and np.any(raw > 0)
                       else "the data records no time limits")
                rows.append({"estimator": label, "jobs": 0, "accuracy": np.nan, "under_predicted_pct": np.nan,
                             "p90_covered_pct": np.nan, "note": f"n/a: {why}"})
            continue
        p90 = d.num("pred_p90", fin)
        has90 = p90 > 0
        covered = float(100.0 * np.mean(a[has90] <= p90[has90])) if col == "pred_p50" and has90.any() \
            else np.nan
        rows.append({"estimator": label, "jobs": n, "accuracy": acc, "under_predicted_pct": under,
                     "p90_covered_pct": covered, "note": ""})
        for pt in np.unique(part):
            m = part == pt
            pn, pacc, punder = accuracy(p[m], a[m])
            if pn:
                prow.append({"partition": str(pt), "estimator": label, "jobs": pn, "accuracy": pacc,
                             "under_predicted_pct": punder})
        ok = (p > 0) & (a > 0)
        ratio = np.minimum(p[ok], a[ok]) / np.maximum(p[ok], a[ok])
        per_bucket = np.bincount(bucket[ok], weights=ratio, minlength=len(edges) - 1)
        count = np.bincount(bucket[ok], minlength=len(edges) - 1)
        series[label] = np.where(count > 0, per_bucket / np.maximum(count, 1), np.nan)
    if not any(r["jobs"] for r in rows):
        sec.notes.append("no finished job with both a runtime and an estimate in range"
                         + (f" (user estimate {rows[0]['note']})" if rows else ""))
        return sec
    if not any(r["jobs"] for r in rows if r["estimator"].startswith("bridge")):
        sec.notes.append("no runtime predictions recorded (pred in the admin comment): "
                         "showing the user's estimate only")
    table = pd.DataFrame(rows)
    if not table["note"].astype(bool).any():  # a column of nothing is left out
        table = table.drop(columns=["note"])
    sec.tables += [Table("prediction_accuracy", "Accuracy: mean of min(p,a)/max(p,a)", table),
                   Table("prediction_by_partition", "Accuracy by partition", pd.DataFrame(prow))]
    sec.plots.append(Plot("prediction_time", "Prediction accuracy over time (by job end)", "lines",
                          pd.DataFrame(series, index=pd.Index(edges[:-1], name="time")), "accuracy",
                          time_x=True))
    return sec


# ---- bridge --------------------------------------------------------------------------------

def bridge(d: Derived) -> Section:
    sec = Section("bridge", "Bridge decisions")
    decided = d.num("hetero") > 0
    if not decided.any():
        sec.notes.append("no bridge decisions recorded (no admin comment with \"hetero\")")
        return sec
    # Where a request went is known once it runs; decisions of jobs not started are counted apart.
    h = decided & d.started
    if (decided & ~d.started).any():
        sec.notes.append(f"{int((decided & ~d.started).sum()):,} jobs with a decision have not started")
    kind, model = d.text("accel_kind", h), d.text("model", h)
    f = pd.DataFrame({
        "req_kind": np.where(kind == "", "no --accel", kind),
        "model": np.where(model == "", J.CPU_CLASS, model),
        "pool": d.text("pool", h), "wait": d.wait[h], "device_hours": d.device_hours[h],
        "unit_hours": d.unit_hours[h]})
    g = f.groupby(["req_kind", "model", "pool"])
    t = pd.DataFrame({"jobs": g.size(), "device_hours": g["device_hours"].sum(),
                      "unit_hours": g["unit_hours"].sum(), "wait_p50_s": g["wait"].median(),
                      "wait_p90_s": g["wait"].quantile(0.9)}).reset_index()
    t.insert(4, "share_of_kind_pct", 100.0 * t["jobs"] / t.groupby("req_kind")["jobs"].transform("sum"))
    t = t.sort_values(["req_kind", "jobs"], ascending=[True, False], kind="stable").reset_index(drop=True)
    sec.tables.append(Table("bridge_where", "Where --accel requests went (any / units / named)", t))
    opts = []
    for col, label in (("why", "why"), ("tier", "--tier"), ("policy", "--energy")):
        vc = pd.Series(d.text(col, h)).value_counts()
        opts += [{"option": label, "value": str(k) or NO_VALUE, "jobs": int(v)} for k, v in vc.items()]
    sec.tables.append(Table("bridge_options", "Decision reasons and options", pd.DataFrame(opts)))
    p = t.pivot_table(index="req_kind", columns="model", values="jobs", aggfunc="sum").fillna(0)
    sec.plots.append(Plot("bridge_where", "Jobs by request form and the model they got", "bars", p, "jobs",
                          stacked=True))
    return sec


# ---- users and efficiency -----------------------------------------------------------------

def _cpu_parts(d: Derived) -> tuple[Arr, Arr]:
    """CPU-seconds used and allocated, for finished jobs that recorded CPU time."""
    used = d.num("cpu_time")
    alloc = d.num("ncpus") * d.num("runtime_s")
    ok = d.finished & ~np.isnan(used) & (np.nan_to_num(alloc) > 0)
    return np.where(ok, used, 0.0), np.where(ok, alloc, 0.0)


# What "top" means: normalized units where any job held accelerators of a known model,
# else device-hours (a trace naming no model), else CPU-hours (a CPU-only cluster).
RANK_METRICS = (("unit_hours", "normalized-unit-hours"), ("device_hours", "device-hours"),
                ("cpu_hours", "CPU-hours"))


def rank_metric(d: Derived) -> tuple[str, str]:
    for col, label in RANK_METRICS[:2]:
        if float(np.nansum(getattr(d, col))) > 0:
            return col, label
    return RANK_METRICS[2]


def _by_owner(d: Derived, by: str, metric: str = "unit_hours") -> pd.DataFrame:
    used, alloc = _cpu_parts(d)
    f = d.frame(cpu_used=used, cpu_alloc=alloc)
    g = f.groupby(by, observed=True)
    alloc_sum = g["cpu_alloc"].sum()
    t = pd.DataFrame({"jobs": g.size(), "unit_hours": g["unit_hours"].sum(),
                      "device_hours": g["device_hours"].sum(), "cpu_hours": g["cpu_hours"].sum(),
                      "cpu_eff_pct": 100.0 * g["cpu_used"].sum() / alloc_sum.where(alloc_sum > 0)})
    total = float(np.nansum(d.unit_hours))
    t["share_of_units_pct"] = 100.0 * t["unit_hours"] / total if total > 0 else np.nan
    t.index = pd.Index([str(i) for i in t.index], name=by)
    # Columns that say nothing here (no units on a CPU-only trace) are left out, not zeros.
    empty = [c for c in ("unit_hours", "share_of_units_pct", "device_hours", "cpu_eff_pct")
             if not (t[c].fillna(0) != 0).any()]
    t = t.drop(columns=empty)
    keys = [metric] + [c for c in ("unit_hours", "device_hours", "cpu_hours") if c != metric and c in t]
    return t.reset_index().sort_values(keys, ascending=False, kind="stable").reset_index(drop=True)


def users(d: Derived) -> Section:
    metric, label = rank_metric(d)
    u, a = _by_owner(d, "user", metric), _by_owner(d, "account", metric)
    sec = Section("users", "Top users and accounts", [
        Table("top_users", f"Top users by {label}", u),
        Table("top_accounts", f"Top accounts by {label}", a)])
    if metric != "unit_hours":
        sec.notes.append(f"ranked by {label}: no job held accelerators of a model with normalized units")
    top = u.set_index("user")[[metric]].head(15).iloc[::-1]
    sec.plots.append(Plot("top_users", f"Top users by {label}", "hbars", top, label))
    return sec


def efficiency(d: Derived) -> Section:
    used, alloc = _cpu_parts(d)
    f = d.frame(cpu_used=used, cpu_alloc=alloc, rec=alloc > 0)
    g = f.groupby("partition", observed=True)
    t = pd.DataFrame({"jobs": g["rec"].sum().astype(int), "cpu_hours_allocated": g["cpu_alloc"].sum() / 3600,
                      "cpu_hours_used": g["cpu_used"].sum() / 3600})
    allocated = t["cpu_hours_allocated"]
    t["cpu_eff_pct"] = 100.0 * t["cpu_hours_used"] / allocated.where(allocated > 0)
    t.index = pd.Index([str(i) for i in t.index], name="partition")
    t = t.reset_index()
    sec = Section("efficiency", "CPU and accelerator efficiency",
                  [Table("cpu_efficiency", "CPU efficiency: CPU time / (CPUs * elapsed), by partition", t)])
    if not (alloc > 0).any():
        sec.notes.append("no finished job recorded its CPU time")
    elif t["cpu_eff_pct"].notna().any():
        eff = t[t["jobs"] > 0].set_index("partition")[["cpu_eff_pct"]]
        sec.plots.append(Plot("cpu_efficiency", "CPU efficiency by partition", "bars",
                              eff.rename(columns={"cpu_eff_pct": "CPU efficiency %"}), "%"))
    util = d.num("accel_util")
    ok = ~np.isnan(util)
    if ok.any():
        ug = pd.DataFrame({"model": d.text("model", ok), "util": util[ok]}).groupby("model")["util"]
        ut = pd.DataFrame({"jobs": ug.size(), "mean_util_pct": ug.mean(), "p10_util_pct": ug.quantile(0.1)})
        sec.tables.append(Table("accelerator_utilisation",
                                "Accelerator utilisation recorded by the node agent", ut.reset_index()))
    else:
        sec.notes.append("no accelerator utilisation recorded (devices[].util in the admin comment)")
    return sec
