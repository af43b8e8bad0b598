"""`slurm-hetero replay ...`: thin click adapters over slurm_hetero.replay.

The cluster to replay on comes from above (the dev cluster sits on a higher floor), so
slurm_hetero/cli.py registers the group with a factory:

    main.add_command(replay_group(_replay_cluster))

where `_replay_cluster(workdir)` returns `devcluster.replay.DevReplayCluster(workdir)`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from slurm_hetero.cliutil import console, reports_errors, required_site_option
from slurm_hetero.errors import InputError
from slurm_hetero.replay.backend import ClusterFactory


def _default_workdir(site: str) -> Path:
    base = os.environ.get("SLURM_HETERO_HOME") or os.path.expanduser("~/.local/state/slurm-hetero")
    return Path(base) / f"replay-{site}"


def _via_slurm(out: Path, start: str, windows: int, via_slurm: bool, sbatch_args: tuple[str, ...],
               resolve: Callable[[str], int], trace: Path, site_path: Path, hours: float, warmup_hours: float,
               speed: float, arms: str, model: str, users: str, drain_hours: float | None,
               fidelity_hours: float | None, n_arms: int, say: Callable[[str], None]) -> None:
    """`replay run --windows N --via-slurm`: a job array, one window a task, then `replay merge`."""
    from slurm_hetero.replay import array, merge
    from slurm_hetero.slurm.runner import Runner

    if not via_slurm:
        raise click.UsageError("--windows N replays N windows as a Slurm job array: add --via-slurm")
    p = array.plan(out, array.window_starts(start, windows, hours, resolve),
                   array.common_argv(trace, site_path, hours, warmup_hours, speed, arms, model, users,
                                     drain_hours, fidelity_hours),
                   array.task_minutes(n_arms, hours, warmup_hours, drain_hours, speed, fidelity_hours))
    paths = array.run_windows(Runner(), p, list(sbatch_args), say)
    doc = merge.merge(paths)
    merge.write(doc, out / "merged.json")
    merge.print_merged(console, doc)
    console.print(f"wrote {out / 'merged.json'}", markup=False, highlight=False)


def replay_group(factory: Callable[[Path], Any]) -> click.Group:
    """The `replay` command group, replaying on clusters `factory(workdir)` makes."""
    clusters: ClusterFactory = factory

    @click.group("replay")
    def replay() -> None:
        """What-if replay of a trace on the real Slurm, on an accelerated clock."""

    @replay.command("run")
    @click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), required=True,
                  help="An SWF trace (.swf or .swf.gz) or the Alibaba GPU trace's pods CSV (known "
                       "by its header; never-scheduled pods dropped; a GPU fraction asks a whole "
                       "GPU; limit = 2 x runtime rounded up to 15 min, as the trace has none).")
    @required_site_option
    @click.option("--start", required=True,
                  help="Window start: epoch seconds, ISO date/time (UTC), +N[dhm] after the "
                       "trace's first job, or busiest[:K] (the K-th busiest window, see "
                       "`replay windows`).")
    @click.option("--hours", type=float, default=1.0, show_default=True, help="Window length, trace hours.")
    @click.option("--min-jobs", type=int, default=0, show_default=True,
                  help="With --start busiest[:K]: rank only windows with at least this many submissions "
                       "(as `replay windows --min-jobs`).")
    @click.option("--warmup-hours", type=float, default=0.0, show_default=True,
                  help="Jobs submitted this long before the window are replayed too, not measured.")
    @click.option("--speed", type=float, default=20.0, show_default=True,
                  help="Clock speed: trace seconds per real second.")
    @click.option("--arms", default="plain,bridge", show_default=True,
                  help="Comma-separated: plain, bridge, bridge-nomodel, bridge-migrate (bridge-nomodel "
                       "with migration.pending on), bridge-float (with placement.float on), bridge-fit, "
                       "bridge-nofit (placement.node_fit on, off); with work bodies (an accelerator job "
                       "runs as fast as the units it holds, checkpoints and resumes): bridge-work, "
                       "bridge-migrate-work, "
                       "bridge-migrate-running (migration.running on too) (the first is the baseline).")
    @click.option("--model", default="auto", show_default=True,
                  help="For the bridge arm: auto (train on the trace's jobs that ended before the "
                       "window), none (the bridge arm runs without one), or an exported model (.lua).")
    @click.option("--users", type=click.Choice(["root", "local"]), default="root", show_default=True,
                  help="Submit every job as root under its trace user's account, or as a local "
                       "system user per trace user (created when missing; the bridge's per-user "
                       "history then applies; the workdir must be reachable by other users).")
    @click.option("--drain-hours", type=float, default=None,
                  help="Stop waiting this many trace hours after the window (jobs still running "
                       "count as unfinished) [default: wait for every job].")
    @click.option("--check-fidelity", is_flag=True,
                  help="First replay the window's first --fidelity-hours at x1 and at --speed.")
    @click.option("--fidelity-hours", type=float, default=0.25, show_default=True)
    @click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Folder for replay.json (and the model) [default: WORKDIR].")
    @click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Where the arms' clusters live [default: ~/.local/state/slurm-hetero/replay-SITE].")
    @click.option("--windows", type=int, default=1, show_default=True,
                  help="With --via-slurm: this many windows (consecutive from --start, or with "
                       "busiest[:K] the K-th and next busiest), merged into OUTPUT/merged.json.")
    @click.option("--via-slurm", is_flag=True,
                  help="Replay each window in a task of a Slurm job array (the cluster SLURM_CONF names), "
                       "each on its own dev cluster under the task's scratch: tasks need root, the dev "
                       "cluster's packages and free loopback ports on their node; OUTPUT on a shared "
                       "filesystem.")
    @click.option("--sbatch-arg", "sbatch_args", multiple=True,
                  help="With --via-slurm: one more sbatch option for the array (repeatable), e.g. "
                       "--sbatch-arg=--partition=batch.")
    @reports_errors
    def run_cmd(trace: Path, site_path: Path, start: str, hours: float, min_jobs: int, warmup_hours: float,
                speed: float, arms: str, model: str, users: str, drain_hours: float | None,
                check_fidelity: bool,
                fidelity_hours: float, output: Path | None, workdir: Path | None, windows: int = 1,
                via_slurm: bool = False, sbatch_args: tuple[str, ...] = ()) -> None:
        """Replay a window of TRACE on a fresh cluster per arm; print and save the figures."""
        from slurm_hetero.replay import report
        from slurm_hetero.replay.run import UNTRAINED, parse_arms, predictor_files, run_arm, train_model
        from slurm_hetero.replay.run import check_fidelity as run_fidelity
        from slurm_hetero.replay.trace import read_trace_counted, resolve_start, select_for
        from slurm_hetero.replay.window import Window, check_speed
        from slurm_hetero.site import load_site

        check_speed(speed)
        site = load_site(site_path)
        arm_list = parse_arms(arms)
        df, dropped = read_trace_counted(trace)
        window = Window(resolve_start(start, df, site, hours, min_jobs), hours, warmup_hours)
        sel = select_for(df, window, site)
        work = workdir or _default_workdir(site.name)
        out = output or work
        def say(line: str) -> None:
            console.print(line, markup=False, highlight=False)

        for reason, n in dropped.items():
            say(f"dropped {n} records of the trace: {reason}")
        if via_slurm or windows != 1:
            if workdir is not None and via_slurm:
                raise click.UsageError("--workdir: with --via-slurm each task's clusters live under its "
                                       "own scratch ($TMPDIR, else /var/tmp)")

            def resolve(s: str) -> int:
                return resolve_start(s, df, site, hours, min_jobs)

            _via_slurm(out, start, windows, via_slurm, sbatch_args, resolve, trace, site_path, hours,
                       warmup_hours, speed, arms, model, users, drain_hours,
                       fidelity_hours if check_fidelity else None, len(arm_list), say)
            return
        model_path: Path | None = None
        if any(a.model and a.predictor == "model" for a in arm_list) and model != "none":
            model_path = (train_model(df, window, out / "predict.lua", say, users) if model == "auto"
                          else Path(model))
        if model == "none":
            arm_list = [dataclasses.replace(a, model=False) if a.model and a.predictor == "model" else a
                        for a in arm_list]
        own = sorted({a.predictor for a in arm_list if a.model and a.predictor != "model"})
        trained = [p for p in own if p not in UNTRAINED]
        if trained and model != "auto":
            raise InputError(f"--arms with {', '.join(trained)} train their own model: give --model auto")
        predictors: dict[str, Path | None] = {"model": model_path,
                                              **predictor_files(df, window, out, own, say, users)}
        say(f"window {window.start}..{window.end} (+{window.warmup_hours:g} h warm-up): "
            f"{len(sel.jobs)} jobs, {len(sel.accounts)} users; x{speed:g}")
        fid = None
        if check_fidelity:
            short = window.shorter(fidelity_hours)
            fsel = select_for(df, short, site)
            fid, _, _ = run_fidelity(clusters, work / "fidelity", site, fsel, short, arm_list[0], speed,
                                     model_path, say, drain_hours, users, out)
        results = [run_arm(clusters, work / a.name, site, sel, window, a, speed, predictors[a.predictor], say,
                           drain_hours, users=users, save=out / f"arm-{a.name}.json") for a in arm_list]
        meta = {"trace": str(trace), "site": str(site_path), "speed": speed, "users": users,
                "model": str(model_path or "")}
        from slurm_hetero.replay.merge import site_digest
        meta["site_sha256"] = site_digest(site_path)  # `replay merge` refuses windows of other sites
        report.write(report.document(results, sel, fid, meta), out / "replay.json")
        report.print_report(console, results, report.selection_json(sel), fid)
        console.print(f"wrote {out / 'replay.json'}")

    @replay.command("show")
    @click.argument("result", type=click.Path(dir_okay=False, path_type=Path))
    @reports_errors
    def show_cmd(result: Path) -> None:
        """Print the tables of a saved replay.json (or a `replay merge` output) again."""
        from slurm_hetero.replay import merge, report

        if report.format_of(result) == merge.FORMAT:
            merge.print_merged(console, merge.read(result))
            return
        results, sel, fid = report.read(result)
        report.print_report(console, results, sel, fid)

    @replay.command("merge")
    @click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Write the merged results here (JSON; `replay show` and `report --replay` read it).")
    @reports_errors
    def merge_cmd(results: tuple[Path, ...], output: Path | None) -> None:
        """Merge the replay.json of several windows (same arms, site and speed): figures over
        all windows, and each arm against the first with a 95% t-interval over windows."""
        from slurm_hetero.replay import merge

        doc = merge.merge(list(results))
        if output is not None:
            merge.write(doc, output)
        merge.print_merged(console, doc)
        if output is not None:
            console.print(f"wrote {output}", markup=False, highlight=False)

    @replay.command("cut")
    @click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), required=True)
    @click.option("--start", required=True, help="As for `replay run`.")
    @click.option("--hours", type=float, required=True)
    @click.option("--before-days", type=float, default=0.0, show_default=True,
                  help="Keep this much history before the window too (to train a model on).")
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
    @reports_errors
    def cut_cmd(trace: Path, start: str, hours: float, before_days: float, output: Path) -> None:
        """Write the jobs of a window of an SWF trace (with its header) to a small file."""
        from slurm_hetero.fileio import write_atomic
        from slurm_hetero.replay.trace import cut_swf, read_trace
        from slurm_hetero.replay.window import Window, parse_start

        df = read_trace(trace)
        first = int(df.loc[df["submit"] >= 0, "submit"].min()) if len(df) else 0
        w = Window(parse_start(start, first), hours, before_days * 24)
        text = cut_swf(trace, w.first, w.end, [
            f"Cut by slurm-hetero replay cut from {trace.name}: jobs submitted in "
            f"[{w.first}, {w.end}) (epoch s; window start {w.start}, {hours:g} h, "
            f"{before_days:g} days before it)"])
        write_atomic(str(output), text)
        console.print(f"wrote {output}: {sum(1 for ln in text.splitlines() if not ln.startswith(';'))} jobs")

    @replay.command("site")
    @click.option("--nodes", "nodes_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
                  help="The Alibaba GPU trace's nodes file (sn,cpu_milli,memory_mib,gpu,model).")
    @click.option("--scale", default="1/100", show_default=True,
                  help="Fraction of the trace's nodes (1/100, 0.01, 1%); at least one node per GPU model.")
    @click.option("--name", default="alibaba", show_default=True, help="The site's name.")
    @click.option("--pods", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Its pods file: also print the trace's GPU load on its cluster and on this site.")
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
    @reports_errors
    def site_cmd(nodes_path: Path, scale: str, name: str, pods: Path | None, output: Path) -> None:
        """Write a site file shaped like a GPU trace's nodes list, every GPU model kept."""
        from slurm_hetero.fileio import write_atomic
        from slurm_hetero.replay import alibaba
        from slurm_hetero.site.load import load_site_text

        nodes = alibaba.read_nodes(nodes_path)
        frac = alibaba.parse_scale(scale)
        lines = alibaba.mix_lines(nodes, frac)
        text = alibaba.site_yaml(alibaba.site_data(nodes, frac, name), nodes_path, scale, lines)
        load_site_text(text, str(output))  # never write a site file that does not load
        write_atomic(str(output), text)
        for ln in lines:
            console.print(ln, markup=False, highlight=False)
        if pods is not None:
            df, _ = alibaba.read_pods(pods)
            trace_gpus = sum(g.trace_gpus for g in alibaba.scale_groups(nodes, frac))
            site_gpus = sum(g.gpus for g in alibaba.scale_groups(nodes, frac))
            console.print("GPU load (whole GPUs x runtime ÷ GPUs x span): "
                          f"{alibaba.load_ratio(df, trace_gpus):.4f} on the trace's {trace_gpus} GPUs, "
                          f"{alibaba.load_ratio(df, site_gpus):.4f} on "
                          f"this site's {site_gpus} (every pod replayed)", markup=False, highlight=False)
        console.print(f"wrote {output}")

    @replay.command("windows")
    @click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), required=True)
    @required_site_option
    @click.option("--hours", type=float, default=1.0, show_default=True)
    @click.option("--count", type=int, default=5, show_default=True)
    @click.option("--min-jobs", type=int, default=0, show_default=True,
                  help="Only windows with at least this many submissions (demand alone may pick "
                       "hours of a few huge jobs, where no scheduler has a choice).")
    @reports_errors
    def windows_cmd(trace: Path, site_path: Path, hours: float, count: int, min_jobs: int) -> None:
        """The COUNT non-overlapping windows with the highest demand ÷ capacity: the work
        of the jobs submitted in each (to their end or the window's), over what the site
        holds, the larger of GPUs and CPUs, with (for the Alibaba pods) what the pods still
        running at its start ran in it; from the trace alone. Each line says how many jobs
        were submitted in it."""
        from slurm_hetero.replay.trace import is_pods, read_trace
        from slurm_hetero.replay.window import Capacity, busiest
        from slurm_hetero.site import load_site

        site = load_site(site_path)
        df = read_trace(trace)
        found = busiest(df, Capacity.of(site), hours, count, carry_over=is_pods(df), min_jobs=min_jobs)
        if not found:
            why = f"has {min_jobs} or more submissions" if min_jobs else "has any demand"
            console.print(f"no window of {hours:g} h {why}", markup=False, highlight=False)
        submit = df["submit"]
        for k, (start, ratio) in enumerate(found, 1):
            n = int(((submit >= start) & (submit < start + round(hours * 3600))).sum())
            console.print(f"busiest:{k}  start {start}  demand/capacity {ratio:.3f}  jobs {n}",
                          markup=False, highlight=False)

    return replay
