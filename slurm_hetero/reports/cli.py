"""`slurm-hetero report`: a click adapter over slurm_hetero.reports.

Registered by slurm_hetero/cli.py.
"""

from __future__ import annotations

from pathlib import Path

import click

from slurm_hetero.cliutil import console, reports_errors, site_option


@click.command("report")
@site_option
@click.option("--since", help="Start: YYYY-MM-DD[THH:MM[:SS]], today, yesterday, -Nd, -Nh "
              "[default: 7 days ago; a trace's start]")
@click.option("--until", help="End, same forms [default: now; a trace's end]")
@click.option("-p", "--partition", help="Only jobs of this partition (and its capacity).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write one self-contained HTML file (plots included) instead of tables.")
@click.option("--csv", "csv_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also write every table, all rows, as DIR/<table>.csv.")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path),
              help="Report on an SWF trace (.swf[.gz]) or the Alibaba GPU trace (…-pods.csv).")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="sacct cache [default: ~/.cache/slurm-hetero/sacct]")
@click.option("--no-cache", is_flag=True, help="Fetch every day from slurmdbd again.")
@reports_errors
def report(site_path: Path, since: str | None, until: str | None, partition: str | None,
           output: Path | None, csv_dir: Path | None, trace: Path | None, cache_dir: Path | None,
           no_cache: bool) -> None:
    """Accounting report: utilisation, waits, energy, predictions, bridge decisions, users."""
    from slurm_hetero.reports import (
        print_report,
        resolve_period,
        sacct_report,
        trace_report,
        write_csv,
        write_html,
    )
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner
    from slurm_hetero.slurm.sacct import default_cache_dir

    if trace:
        rep = trace_report(trace, since, until, partition)
    else:
        rep = sacct_report(load_site(site_path), Runner(), resolve_period(since, until),
                           partition, None if no_cache else cache_dir or default_cache_dir(), progress=True)
    if csv_dir:
        console.print(f"wrote {len(write_csv(rep, csv_dir))} CSV files to {csv_dir}", markup=False,
                      highlight=False)
    if output:
        console.print(f"wrote {write_html(rep, output)}" + (f" ({rep.empty})" if rep.empty else ""),
                      markup=False, highlight=False)
    else:
        print_report(rep, console)
