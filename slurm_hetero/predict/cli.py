"""`slurm-hetero model ...`: thin click adapters over slurm_hetero.predict.

Registered in slurm_hetero/cli.py with `main.add_command(model)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from slurm_hetero.cliutil import F, console, reports_errors


def _console() -> Any:
    return console


def training_options(fn: F) -> F:
    from slurm_hetero.predict.params import TrainParams

    D = TrainParams()

    for decorator in reversed([
        click.option("--quantile", type=float, default=D.quantile, show_default=True,
                     help="Upper quantile the second model predicts."),
        click.option("--rounds", type=int, default=D.rounds, show_default=True,
                     help="Trees of the central model."),
        click.option("--quantile-rounds", type=int, default=D.quantile_rounds, show_default=True,
                     help="Trees of the upper model."),
        click.option("--leaves", type=int, default=D.leaves, show_default=True, help="Leaves per tree."),
        click.option("--max-depth", type=int, default=D.max_depth, show_default=True,
                     help="Depth bound per tree (the Lua cost per prediction grows with it)."),
        click.option("--learning-rate", type=float, default=D.learning_rate, show_default=True),
        click.option("--threads", type=int, default=D.threads, show_default=True),
    ]):
        fn = decorator(fn)
    return fn


def _params(**kw: Any) -> Any:
    from slurm_hetero.predict.params import TrainParams

    return TrainParams(**kw)


def _select(df: Any, sources: tuple[str, ...]) -> Any:
    from slurm_hetero.errors import InputError

    if not sources:
        return df
    present = set(df["source"].unique().tolist())
    for s in sources:
        if s not in present:
            raise InputError(f"--source {s}: not in the job table; it has: {', '.join(sorted(present))}")
    return df[df["source"].isin(sources)]


@click.group()
def model() -> None:
    """Runtime prediction: job table ingest, training, evaluation, Lua export."""


@model.command("ingest")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Job table (Parquet); jobs are merged into it when it exists.")
@click.option("--swf", "swf_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="An SWF trace (.swf or .swf.gz); repeatable.")
@click.option("--swf-limit", type=int, default=None, help="Keep only the first N jobs of each trace.")
@click.option("--sacct", "use_sacct", is_flag=True, help="Fetch finished jobs from sacct, a day at a time.")
@click.option("--since", default=None, help="Start of --sacct: YYYY-MM-DD[THH:MM[:SS]], today, yesterday, "
              "-Nd, -Nh.")
@click.option("--until", default=None, help="End of --sacct, same forms [default: the next midnight].")
@click.option("--cluster", default=None, help="sacct -M CLUSTER.")
@click.option("--slurm-conf", type=click.Path(path_type=Path), default=None, help="SLURM_CONF for sacct.")
@reports_errors
def ingest(output: Path, swf_files: tuple[Path, ...], swf_limit: int | None, use_sacct: bool,
           since: str | None, until: str | None, cluster: str | None, slurm_conf: Path | None) -> None:
    """Build or extend the job table from SWF traces and/or Slurm accounting."""
    import time

    from rich.progress import Progress

    from slurm_hetero.errors import InputError
    from slurm_hetero.jobs import table as jobtable
    from slurm_hetero.jobs.swf import read_swf
    from slurm_hetero.predict.ingest import sacct_jobs
    from slurm_hetero.slurm.runner import Runner
    from slurm_hetero.slurm.sacct import Chunk, next_midnight, parse_when

    if not swf_files and not use_sacct:
        raise InputError("model ingest: give --swf FILE and/or --sacct --since DAY")
    console = _console()
    frames = [jobtable.read(output)] if output.exists() else []
    for path in swf_files:
        df = read_swf(path, swf_limit).jobs
        console.print(f"{path}: {len(df):,} jobs")
        frames.append(df)
    if use_sacct:
        if since is None:
            raise InputError("--sacct needs --since DAY (YYYY-MM-DD)")
        first = parse_when(since, "--since")
        last = parse_when(until, "--until") if until else next_midnight(time.time())
        if slurm_conf is not None and not slurm_conf.is_file():
            # Slurm's tools would retry a missing file for a minute before failing.
            raise InputError(f"--slurm-conf {slurm_conf}: no such file")
        runner = Runner(slurm_conf=str(slurm_conf) if slurm_conf else None)
        parts = output.with_name(output.name + ".parts")
        with Progress(console=console, transient=False) as bar:
            task = bar.add_task("sacct", total=None)

            def step(c: Chunk) -> None:
                what = "recorded" if c.cached else "fetched" if c.settled else "fetched, not settled"
                day = time.strftime("%Y-%m-%d", time.localtime(c.start))
                bar.update(task, total=c.total, completed=c.index, description=f"sacct {day}: {what}")

            df = sacct_jobs(runner, first, last, parts, cluster=cluster, on_chunk=step,
                            warn=lambda m: console.print(m, markup=False))
        console.print(f"sacct: {len(df):,} finished jobs (days recorded in {parts})")
        frames.append(df)
    table = jobtable.merge(*frames)
    jobtable.write(table, output)
    by_source = table.groupby("source", observed=True).size().to_dict()
    console.print(f"wrote {output}: {len(table):,} jobs "
                  f"({', '.join(f'{s} {n:,}' for s, n in sorted(by_source.items()))})")


@model.command("train")
@click.argument("table", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Model file (JSON holding both boosters).")
@click.option("--source", "sources", multiple=True, help="Train on these sources only [default: all].")
@training_options
@reports_errors
def train_cmd(table: Path, output: Path, sources: tuple[str, ...], **kw: Any) -> None:
    """Train the central and upper-quantile runtime models on TABLE."""
    from rich.progress import Progress

    from slurm_hetero.jobs import table as jobtable
    from slurm_hetero.predict.train import train

    params = _params(**kw)
    df = _select(jobtable.read(table), sources)
    console = _console()
    with Progress(console=console) as bar:
        tasks: dict[str, Any] = {}

        def step(name: str, i: int, n: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"{name} model", total=n)
            bar.update(tasks[name], completed=i)

        m = train(df, params, progress=step)
    m.save(output)
    console.print(f"wrote {output}: trained on {m.info['jobs']:,} jobs of {', '.join(m.info['sources'])} "
                  f"in {m.info['seconds_total']:.1f} s (upper p{round(100 * m.quantile)} "
                  f"calibration shift {m.upper_shift:+.3f})")


@model.command("eval")
@click.argument("table", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--source", "sources", multiple=True, help="Evaluate these sources [default: each one].")
@click.option("--test-fraction", type=float, default=0.25, show_default=True,
              help="Newest share of jobs (by submit time) used as the future.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the results as JSON here.")
@training_options
@reports_errors
def eval_cmd(table: Path, sources: tuple[str, ...], test_fraction: float, json_out: Path | None,
             **kw: Any) -> None:
    """Train on the past and score on the future, per source, against both baselines."""
    from slurm_hetero.jobs import table as jobtable
    from slurm_hetero.predict.evaluate import evaluate
    from slurm_hetero.predict.evaluate import table as results_table

    console = _console()
    with console.status("training and scoring ..."):
        results = evaluate(jobtable.read(table), list(sources) or None, _params(**kw), test_fraction)
    console.print(results_table(results))
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2) + "\n")
        console.print(f"wrote {json_out}")


@model.command("export")
@click.argument("model_file", metavar="MODEL", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--history", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Job table the per-user history comes from (the site's sacct jobs).")
@click.option("--source", default=None, help="The history's source, when the table holds several.")
@click.option("--until", type=int, default=None,
              help="History as of this epoch second [default: after the last job].")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Lua file for the bridge (replaced atomically).")
@click.option("--limit", type=click.Choice(["upper", "central"]), default="upper", show_default=True,
              help="On partitions with predicted limits, a job's limit is its upper-quantile prediction "
                   "(few jobs outlive it) or its central one (backfill plans tighter; about half the jobs "
                   "are extended by the bridge daemon).")
@click.option("--shorten-when-sure", "sure", type=float, default=None, metavar="SHARE",
              help="Shorten a job's limit only where its upper quantile is at most SHARE of its "
                   "user's limit (e.g. 0.9); a job the model is unsure of keeps its user's limit "
                   "[default: any job].")
@click.option("--order", type=click.Choice(["central", "upper", "area"]), default="central",
              show_default=True,
              help="The prediction that orders the queue (SiteFactor): the central one, the upper "
                   "quantile (a job the model is unsure of does not jump the queue on a short guess), "
                   "or the central one times the job's CPUs (smallest CPU time first).")
@reports_errors
def export_cmd(model_file: Path, history: Path, source: str | None, until: int | None, output: Path,
               limit: str, sure: float | None, order: str) -> None:
    """Compile MODEL and the users' history into one Lua 5.1 chunk for job_submit.lua."""
    from slurm_hetero.jobs import table as jobtable
    from slurm_hetero.predict import export_lua
    from slurm_hetero.predict.tail import tail_path, write_tail
    from slurm_hetero.predict.train import Model

    m = Model.load(model_file)
    df = _select(jobtable.read(history), (source,) if source else ())
    users, until = export_lua.users_state(df, until)
    text = export_lua.render(m, users, until, limit=limit,
                             sure=sure, order=order)
    export_lua.write(text, output)
    # Each user's last jobs beside it: the bridge daemon adds the jobs that end later.
    write_tail(df, until, tail_path(output))
    _console().print(f"wrote {output}: {len(text) / 1e6:.2f} MB, {m.central.num_trees()} + "
                     f"{m.upper.num_trees()} trees, {len(users):,} users with history; "
                     f"their last jobs in {tail_path(output)}")
