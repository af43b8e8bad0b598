"""`slurm-hetero replay ...`: thin click adapters over slurm_hetero.replay.

The cluster to replay on comes from above (the dev cluster sits on a higher floor), so
slurm_hetero/cli.py registers the group with a factory:

    main.add_command(replay_group(_replay_cluster))

where `_replay_cluster(workdir)` returns `devcluster.replay.DevReplayCluster(workdir)`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from slurm_hetero.cliutil import console, reports_errors, required_site_option
from slurm_hetero.replay.backend import ClusterFactory


def _default_workdir(site: str) -> Path:
    base = os.environ.get("SLURM_HETERO_HOME") or os.path.expanduser("~/.local/state/slurm-hetero")
    return Path(base) / f"replay-{site}"


def replay_group(factory: Callable[[Path], Any]) -> click.Group:
    """The `replay` command group, replaying on clusters `factory(workdir)` makes."""
    clusters: ClusterFactory = factory

    @click.group("replay")
    def replay() -> None:
        """What-if replay of a trace on the real Slurm, on an accelerated clock."""

    @replay.command("run")
    @click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), required=True,
                  help="An SWF trace (.swf or .swf.gz).")
    @required_site_option
    @click.option("--start", required=True,
                  help="Window start: epoch seconds, ISO date/time (UTC) or +N[dhm] after the "
                       "trace's first job.")
    @click.option("--hours", type=float, default=1.0, show_default=True, help="Window length, trace hours.")
    @click.option("--warmup-hours", type=float, default=0.0, show_default=True,
                  help="Jobs submitted this long before the window are replayed too, not measured.")
    @click.option("--speed", type=float, default=20.0, show_default=True,
                  help="Clock speed: trace seconds per real second.")
    @click.option("--arms", default="plain,bridge", show_default=True,
                  help="Comma-separated: plain, bridge, bridge-nomodel (the first is the baseline).")
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
    @reports_errors
    def run_cmd(trace: Path, site_path: Path, start: str, hours: float, warmup_hours: float,
                speed: float, arms: str, model: str, users: str, drain_hours: float | None,
                check_fidelity: bool,
                fidelity_hours: float, output: Path | None, workdir: Path | None) -> None:
        """Replay a window of TRACE on a fresh cluster per arm; print and save the figures."""
        from slurm_hetero.replay import report
        from slurm_hetero.replay.run import check_fidelity as run_fidelity
        from slurm_hetero.replay.run import parse_arms, run_arm, train_model
        from slurm_hetero.replay.trace import read_trace
        from slurm_hetero.replay.window import Capacity, Window, check_speed, parse_start, select
        from slurm_hetero.site import load_site

        check_speed(speed)
        site = load_site(site_path)
        arm_list = parse_arms(arms)
        df = read_trace(trace)
        first = int(df.loc[df["submit"] >= 0, "submit"].min()) if len(df) else 0
        window = Window(parse_start(start, first), hours, warmup_hours)
        sel = select(df, window, Capacity.of(site))
        work = workdir or _default_workdir(site.name)
        out = output or work
        def say(line: str) -> None:
            console.print(line, markup=False, highlight=False)

        model_path: Path | None = None
        if any(a.model for a in arm_list) and model != "none":
            model_path = (train_model(df, window, out / "predict.lua", say, users) if model == "auto"
                          else Path(model))
        if model == "none":
            arm_list = [a if not a.model else type(a)(a.name, a.bridge, False) for a in arm_list]
        say(f"window {window.start}..{window.end} (+{window.warmup_hours:g} h warm-up): "
            f"{len(sel.jobs)} jobs, {len(sel.accounts)} users; x{speed:g}")
        fid = None
        if check_fidelity:
            short = window.shorter(fidelity_hours)
            fsel = select(df, short, Capacity.of(site))
            fid, _, _ = run_fidelity(clusters, work / "fidelity", site, fsel, short, arm_list[0], speed,
                                     model_path, say, drain_hours, users, out)
        results = [run_arm(clusters, work / a.name, site, sel, window, a, speed, model_path, say, drain_hours,
                           users=users, save=out / f"arm-{a.name}.json") for a in arm_list]
        meta = {"trace": str(trace), "site": str(site_path), "speed": speed, "users": users,
                "model": str(model_path or "")}
        report.write(report.document(results, sel, fid, meta), out / "replay.json")
        report.print_report(console, results, report.selection_json(sel), fid)
        console.print(f"wrote {out / 'replay.json'}")

    @replay.command("show")
    @click.argument("result", type=click.Path(dir_okay=False, path_type=Path))
    @reports_errors
    def show_cmd(result: Path) -> None:
        """Print the tables of a saved replay.json again."""
        from slurm_hetero.replay import report

        results, sel, fid = report.read(result)
        report.print_report(console, results, sel, fid)

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

    return replay
