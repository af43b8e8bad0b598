"""`slurm-hetero forecast`: a click adapter over slurm_hetero.forecast.

Registered in slurm_hetero/cli.py with `main.add_command(forecast)`.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

import click

from slurm_hetero.cliutil import console, reports_errors, site_option
from slurm_hetero.errors import InputError

AT_FORMS = "epoch seconds (a trace's own seconds for a trace) or YYYY-MM-DD[THH:MM[:SS]]"


def parse_at(text: str, tz: str | None) -> float:
    """--at: a number of seconds, or a local date-time in `tz` (None: UTC).

    >>> parse_at("86400", None), parse_at("1970-01-02T00:01", None)
    (86400.0, 86460.0)
    """
    import pandas as pd

    t = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2})?)?", t):
        raise InputError(f"--at {text[:40]!r}: give {AT_FORMS}")
    try:
        ts = pd.Timestamp(t)
        ts = ts.tz_localize(tz) if tz else ts.tz_localize("UTC")
    except (ValueError, TypeError) as e:
        raise InputError(f"--at {text[:40]!r}: {e}; give {AT_FORMS}") from e
    return float(ts.timestamp())


def _when(t: float, tz: str | None, trace: bool) -> str:
    """The origin as the site or trace clock shows it; a trace without a start epoch counts
    seconds from its start."""
    import pandas as pd

    if trace and tz is None:
        return f"{t:,.0f} s into the trace"
    ts = pd.Timestamp(t, unit="s", tz="UTC")
    return ts.tz_convert(tz).strftime("%Y-%m-%d %H:%M %Z") if tz else ts.strftime("%Y-%m-%d %H:%M UTC")


def _fmt(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v:,.1f}"


@click.command("forecast")
@site_option
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Forecast from an SWF trace (.swf[.gz]) or the Alibaba pods CSV instead of sacct.")
@click.option("--at", "at_text", default=None,
              help=f"Forecast origin: {AT_FORMS} [default: now; a trace's last submit]")
@click.option("--days", type=click.FloatRange(min=1.0), default=28.0, show_default=True,
              help="History before --at to train on.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@reports_errors
def forecast(site_path: Path, trace: Path | None, at_text: str | None, days: float,
             as_json: bool) -> None:
    """Per-pool demand (peak in-system units, cores for CPU pools) for the next 5, 15, 60 minutes."""
    from slurm_hetero.forecast import HORIZONS
    from slurm_hetero.forecast.demand import build_series
    from slurm_hetero.forecast.live import fit, forecast_detail, origin
    from slurm_hetero.forecast.sources import PoolMap, fetch_sacct, local_zone, read_trace
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner
    from slurm_hetero.slurm.sacct import default_cache_dir

    pools: list[str] | None = None
    if trace is not None:
        src = read_trace(trace)
        table, tz, name, notes = src.table, src.tz, src.name, src.notes
        if not len(table):
            raise InputError(f"--trace {trace}: no jobs")
        at = parse_at(at_text, tz) if at_text else float(table["submit"].max())
    else:
        site = load_site(site_path)
        tz, notes = local_zone(), []
        at = parse_at(at_text, tz) if at_text else time.time()
        pools = PoolMap(site).pools()
        table = fetch_sacct(Runner(), site, at - days * 86400, at, default_cache_dir())
        name = f"sacct, site {site.name}"
    model = fit(table, at, days, pools=pools, tz=tz)
    rows = forecast_detail(model, table, at, pools, HORIZONS, tz)
    actual: dict[str, dict[int, float]] = {}
    if trace is not None and at + max(HORIZONS) * 60 <= float(table["submit"].max()):
        o = origin(at)
        future = build_series(table, t0=o, t1=o + max(HORIZONS) * 60)
        for pool, p in future.pools.items():
            actual[pool] = {h: round(float(p.mean[:h].max()), 3) for h in HORIZONS}
    if as_json:
        doc: dict[str, Any] = {
            "at": origin(at), "source": name, "trained_boosters": len(model.boosters), "notes": notes,
            "pools": {r.pool: {"level": r.level, "running": r.running, "pending": r.pending,
                               "forecast": {str(h): v for h, v in r.values.items()},
                               "method": {str(h): m for h, m in r.methods.items()},
                               **({"actual": {str(h): v for h, v in actual[r.pool].items()}}
                                  if r.pool in actual else {})}
                      for r in rows}}
        click.echo(json.dumps(doc, indent=2))
        return
    from rich.table import Table

    tab = Table(title=f"demand forecast at {_when(origin(at), tz, trace is not None)} ({name})")
    for col in ("pool", "now", "running", "pending", *(f"{h} min" for h in HORIZONS), "method",
                *((f"actual {h}" for h in HORIZONS) if actual else ())):
        tab.add_column(col, justify="left" if col in ("pool", "method") else "right")
    for r in rows:
        used = sorted(set(r.methods.values()))
        tab.add_row(r.pool, _fmt(r.level), _fmt(r.running), _fmt(r.pending),
                    *(_fmt(r.values[h]) for h in HORIZONS), ",".join(used),
                    *((_fmt(actual.get(r.pool, {}).get(h, math.nan)) for h in HORIZONS) if actual else ()))
    console.print(tab)
    console.print("units: normalized accelerator units (model@arch), cores (cpu@arch); each value is the "
                  "peak of running + pending demand over the next N minutes", markup=False)
    for n in notes:
        console.print(f"note: {n}", markup=False)
