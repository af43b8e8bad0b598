"""`site validate` output: nodes per arch, accelerators per model, normalized capacity."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from slurm_hetero.site.model import Site
from slurm_hetero.site.power import pool_idle_power


def capacity(site: Site) -> dict[str, dict[str, float]]:
    """Per model: devices and normalized units in the whole site."""
    out: dict[str, dict[str, float]] = {}
    for g in site.node_groups:
        for a in g.accelerators:
            row = out.setdefault(a.model.id, {"devices": 0, "units": 0.0})
            row["devices"] += a.count * g.node_count
            row["units"] = round(row["units"] + a.count * g.node_count * a.model.units, 2)
    return out


def print_summary(site: Site, console: Console) -> None:
    arches: Counter[str] = Counter()
    cpus: Counter[str] = Counter()
    for g in site.node_groups:
        arches[g.architecture] += g.node_count
        cpus[g.architecture] += g.node_count * g.cpus
    console.print(f"site [bold]{site.name}[/bold] is valid: {sum(arches.values())} nodes, "
                  f"{len(site.partitions)} partitions, QoS tiers "
                  f"{', '.join(q.name for q in site.qos)} (default {site.default_qos})")
    t = Table(title="nodes per architecture")
    t.add_column("architecture")
    t.add_column("nodes", justify="right")
    t.add_column("CPUs", justify="right")
    for arch, n in sorted(arches.items()):
        t.add_row(arch, str(n), str(cpus[arch]))
    console.print(t)
    cap = capacity(site)
    t = Table(title=f"accelerators (normalized units: {site.normalization.reference} = 1.0)")
    for col in ("model", "vendor", "stack", "type", "memory", "bandwidth", "bf16/fp16 TFLOPS",
                "units/device", "devices", "units"):
        t.add_column(col, justify="right" if col not in ("model", "vendor", "stack", "type") else "left")
    for m in site.models_in_use:
        t.add_row(m.id, m.vendor, m.stack, m.resource_type, f"{m.memory_gb} GB",
                  f"{m.memory_bandwidth_gbs:g} GB/s", f"{m.tensor_tflops:g}", f"{m.units:.2f}",
                  str(int(cap[m.id]["devices"])), f"{cap[m.id]['units']:.2f}")
    t.add_row("total", "", "", "", "", "", "", "", str(int(sum(r["devices"] for r in cap.values()))),
              f"{sum(r['units'] for r in cap.values()):.2f}", style="bold")
    console.print(t)
    if site.power.enabled:
        draws = pool_idle_power(site)
        hint = "; set node_groups[].idle_watts to what the BMCs read" if any(
            d.estimated for d in draws.values()) else ""
        shown = ", ".join(f"{pool} {d.watts:g} W{' (estimated)' if d.estimated else ''}"
                          for pool, d in draws.items())
        console.print(f"power saving: idle draw per node, by pool: {shown}{hint}", markup=False,
                      highlight=False)
