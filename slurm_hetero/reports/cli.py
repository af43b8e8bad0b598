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
@click.option("--job", "job_id", metavar="JOBID",
              help="Only this job's page (what `slurm-hetero job` shows).")
@click.option("--strict", is_flag=True, help="Exit 2 when the site does not describe the cluster's nodes.")
@click.option("--power-history", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The bridge daemon's power-saving history for the 'Power saving' section "
                   "[default: StateSaveLocation/hetero-power-history.jsonl of a site with power saving on].")
@click.option("--replay", "replay_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Add a 'What-if replay' section from a `replay run` replay.json or a `replay merge` "
                   "output; without --trace the report is of the replay alone (no cluster asked).")
@click.option("--soak", "soak_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Add an 'A day under faults' section from a `benchmarks/soak.py --json` result; without "
                   "--trace (or --replay) the report is of the soak alone (no cluster asked).")
@click.option("--soak-baseline", type=click.Path(dir_okay=False, path_type=Path),
              help="With --soak: its baseline, a `benchmarks/soak.py --faults none` result of the same "
                   "window.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary, notes and the bottleneck rules as JSON instead of tables.")
@reports_errors
def report(site_path: Path, since: str | None, until: str | None, partition: str | None,
           output: Path | None, csv_dir: Path | None, trace: Path | None, cache_dir: Path | None,
           no_cache: bool, job_id: str | None, strict: bool, replay_path: Path | None = None,
           power_history: Path | None = None, as_json: bool = False, soak_path: Path | None = None,
           soak_baseline: Path | None = None) -> None:
    """Accounting report: utilisation, waits, energy, predictions, bridge decisions, users."""
    if job_id is not None:
        given = (("--trace", trace), ("--csv", csv_dir), ("--since", since), ("--until", until),
                 ("--partition", partition), ("--replay", replay_path), ("--soak", soak_path),
                 ("--soak-baseline", soak_baseline))
        clash = [o for o, v in given if v]
        if clash:
            raise click.UsageError(f"--job shows one job's page: it takes no {', '.join(clash)}")
        _job(job_id, site_path, output, as_json)
        return
    if as_json and output:
        raise click.UsageError("--json prints to stdout and -o writes HTML: give one of them")
    if soak_baseline is not None and soak_path is None:
        raise click.UsageError("--soak-baseline goes with --soak")
    from slurm_hetero.reports import (
        print_report,
        resolve_period,
        sacct_report,
        trace_report,
        write_csv,
        write_html,
    )
    from slurm_hetero.reports.bottlenecks import replay_bottleneck_section
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner
    from slurm_hetero.slurm.sacct import default_cache_dir

    replayed = None
    if replay_path is not None:
        from slurm_hetero.reports import whatif

        replayed = whatif.load(replay_path)  # bad input is exit 2 before any cluster is asked
    soaked = None
    if soak_path is not None:
        from slurm_hetero.reports import faultday

        soaked = faultday.load_with_baseline(soak_path, soak_baseline)  # the same: exit 2 first
    if replayed is not None and not trace:
        rep = whatif.replay_report(replayed)
    elif soaked is not None and not trace:
        rep = faultday.soak_report(soaked)
    elif trace:
        rep = trace_report(trace, since, until, partition, power_history=power_history)
    else:
        from slurm_hetero.reports.power import default_history

        site = load_site(site_path)
        rep = sacct_report(site, Runner(), resolve_period(since, until),
                           partition, None if no_cache else cache_dir or default_cache_dir(), progress=True,
                           strict=strict, warn=lambda m: click.echo(m, err=True),
                           power=True, power_history=power_history or default_history(site))
    if replayed is not None and trace:
        rep.sections.append(whatif.replay_section(replayed))
    if replayed is not None:
        rep.sections.append(replay_bottleneck_section(replayed))
    if soaked is not None and (trace or replayed is not None):
        faultday.add_to(rep, soaked)
    if csv_dir:
        wrote = f"wrote {len(write_csv(rep, csv_dir))} CSV files to {csv_dir}"
        if as_json:  # stdout is the JSON document's
            click.echo(wrote, err=True)
        else:
            console.print(wrote, markup=False, highlight=False)
    if as_json:
        import json

        from slurm_hetero.reports.build import report_json

        click.echo(json.dumps(report_json(rep), indent=1, default=str))
    elif output:
        console.print(f"wrote {write_html(rep, output)}" + (f" ({rep.empty})" if rep.empty else ""),
                      markup=False, highlight=False)
    else:
        print_report(rep, console)


def _job(job_id: str, site_path: Path, output: Path | None, as_json: bool) -> None:
    import json

    from slurm_hetero.reports.html import write_html
    from slurm_hetero.reports.jobid import check_job_id
    from slurm_hetero.reports.jobpage import job_page, page_report, print_page
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner

    check_job_id(job_id)  # a bad id is exit 2 before anything is read
    runner = Runner()
    page = job_page(runner, job_id, load_site(site_path))
    if as_json:
        click.echo(json.dumps(page.as_dict(), indent=1, default=str))
    elif output:
        path = write_html(page_report(page, f"sacct of job {page.job_id}"), output)
        console.print(f"wrote {path}", markup=False, highlight=False)
    else:
        print_page(page, console)


@click.command("job")
@click.argument("job_id", metavar="JOBID")
@site_option
@click.option("--json", "as_json", is_flag=True, help="Print the page as JSON.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the page as one self-contained HTML file.")
@reports_errors
def job(job_id: str, site_path: Path, as_json: bool, output: Path | None) -> None:
    """One job: what it asked, what the bridge chose, what it got and used, and advice.

    Exit 2 for a malformed JOBID, 1 for a job accounting does not know (or not yours)."""
    _job(job_id, site_path, output, as_json)
