"""The `slurm-hetero` command: thin click adapters over the library."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from slurm_hetero.checkpoint.cli import checkpoint
from slurm_hetero.cliutil import DEMO_SITE, F, console, reports_errors, site_option
from slurm_hetero.conf.cli import conf_diff, conf_import
from slurm_hetero.containers.cli import container
from slurm_hetero.forecast.cli import forecast
from slurm_hetero.monitor.cli import cluster_exporter, node_exporter
from slurm_hetero.predict.cli import model
from slurm_hetero.reports.cli import job, report


def site_argument(fn: F) -> F:
    return click.argument("site", type=click.Path(dir_okay=True, path_type=Path),
                          default=str(DEMO_SITE))(fn)


def workdir_option(fn: F) -> F:
    return click.option("--workdir", type=click.Path(path_type=Path), default=None,
                        help="Cluster state folder [default: /var/lib/slurm-hetero/SITE for root, "
                             "else ~/.local/state/slurm-hetero/SITE]")(fn)


@click.group()
@click.version_option(package_name="slurm-hetero")
def main() -> None:
    """Schedule heterogeneous Slurm clusters (ARM/x86, GPUs, NPUs) well."""


@main.group()
def site() -> None:
    """Validate and summarize site files."""


@site.command("validate")
@site_argument
@reports_errors
def site_validate(site: Path) -> None:
    """Validate SITE (site.yaml or its folder) and print a summary."""
    from slurm_hetero.site import load_site
    from slurm_hetero.site.summary import print_summary

    print_summary(load_site(site), console)


@main.command("tiers")
@site_argument
@click.option("--json", "as_json", is_flag=True, help="One JSON object per tier, in a list.")
@reports_errors
def tiers(site: Path, as_json: bool) -> None:
    """What each service tier (sbatch --tier) allows: priority, whom it preempts and is
    preempted by, how (mode, grace, minimum run), and its limits."""
    import json

    from slurm_hetero.site import load_site
    from slurm_hetero.site.tiers import format_tiers, tier_views

    s = load_site(site)
    if as_json:
        click.echo(json.dumps([v.as_dict() for v in tier_views(s)], indent=1))
    else:
        click.echo(format_tiers(s), nl=False)


@main.group()
def conf() -> None:
    """Render Slurm configuration files from a site."""


@conf.command("render")
@site_argument
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Folder to write slurm.conf, gres.conf, ... into.")
@click.option("--model", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="An exported runtime model (`model export`) to compile into job_submit.lua.")
@reports_errors
def conf_render(site: Path, out: Path, model: Path | None) -> None:
    """Write slurm.conf, gres.conf, cgroup.conf, plugstack.conf, job_submit.lua, qos.sacctmgr."""
    from slurm_hetero.conf import render_site, write_files
    from slurm_hetero.conf.cli import read_model, render_profile
    from slurm_hetero.conf.render import MANIFEST, configless_node_dir, manifest, node_files_note, node_hooks
    from slurm_hetero.site import load_site

    s = load_site(site)
    profile, why = render_profile(s, read_model(model))
    files = render_site(s, profile)
    files[MANIFEST] = manifest(files, hooks=node_hooks(s, profile), site_rules=s.slurm.job_submit_script,
                               node_dir=configless_node_dir(s, profile))
    write_files(files, out)
    console.print(f"wrote {', '.join(files)} to {out} ({why})")
    note = node_files_note(s, profile, files)
    if note:
        console.print(f"note: {note}")


conf.add_command(conf_import)
conf.add_command(conf_diff)


@main.group()
def cluster() -> None:
    """A real local Slurm cluster for a site (all state in one workdir)."""


def _cluster(workdir: Path | None, site_name: str = "demo") -> Any:
    from slurm_hetero.devcluster import Cluster, default_workdir

    return Cluster(workdir or default_workdir(site_name))


@cluster.command("up")
@site_option
@workdir_option
@click.option("--timeout", type=float, default=120.0, help="Seconds to wait for all-idle.")
@click.option("--model", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="An exported runtime model (`model export`) to compile into the bridge.")
@click.option("--exporters", is_flag=True,
              help="Also start a node exporter per node and the cluster exporter (Prometheus config in "
                   "WORKDIR/monitor).")
@click.option("--configless", is_flag=True,
              help="slurmd fetch their configuration from slurmctld (`--conf-server`), as on a site with "
                   "SlurmctldParameters=enable_configless (implied by such a site); slurm-hetero's node "
                   "files are then in WORKDIR/node-etc, which each slurmd sees as /etc/slurm-hetero.")
@reports_errors
def cluster_up(site_path: Path, workdir: Path | None, timeout: float, model: Path | None,
               exporters: bool, configless: bool) -> None:
    """Boot the cluster; returns when every node is idle."""
    from slurm_hetero.site import load_site

    s = load_site(site_path)
    c = _cluster(workdir, s.name)
    took = c.up(s, timeout=timeout, log=console.print, model=model, configless=configless)
    console.print(f"cluster {s.name} up: {len(s.all_nodes)} nodes idle in {took:.1f} s")
    if exporters:
        ports = c.start_exporters(s)
        console.print(f"exporters on 127.0.0.1 ports {min(ports.values())}-{max(ports.values())}; "
                      f"scrape config: {c.workdir / 'monitor' / 'prometheus.yml'}")
    console.print(f"use it:  export SLURM_CONF={c.conf}")
    console.print(f"stop it: slurm-hetero cluster down --workdir {c.workdir}")


@cluster.command("status")
@workdir_option
@reports_errors
def cluster_status(workdir: Path | None) -> None:
    """Show the cluster's daemons and nodes."""
    from slurm_hetero.devcluster.status import print_status

    sys.exit(print_status(_cluster(workdir), console))


@cluster.command("logs")
@workdir_option
@click.option("-n", "--lines", type=int, default=20, show_default=True)
@click.option("--errors", is_flag=True, help="Only error and fatal lines.")
@reports_errors
def cluster_logs(workdir: Path | None, lines: int, errors: bool) -> None:
    """Print the tail of every daemon's log."""
    c = _cluster(workdir)
    if errors:
        console.print(c.explain(lines), markup=False)
        return
    for f in c.log_files():
        console.print(f"[bold]--- {f}[/bold]")
        console.print("\n".join(f.read_text(errors="replace").splitlines()[-lines:]), markup=False)


@cluster.command("down")
@workdir_option
@reports_errors
def cluster_down(workdir: Path | None) -> None:
    """Stop every process the cluster started."""
    _cluster(workdir).down(log=console.print)


@main.group()
def bridge() -> None:
    """The job_submit.lua bridge's helpers."""


@bridge.command("snapshot")
@site_option
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="Snapshot file (the bridge reads StateSaveLocation/hetero-snapshot.lua).")
@reports_errors
def bridge_snapshot(site_path: Path, output: Path) -> None:
    """Write the capacity snapshot once (free and pending devices per pool)."""
    from slurm_hetero.bridge.snapshot import take_snapshot
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner

    for key, c in take_snapshot(load_site(site_path), Runner(), output).items():
        console.print(f"{key}: free {c.free}/{c.total} (max {c.free_max_node} on one node), "
                      f"pending {c.pending}")


@bridge.command("run")
@site_option
@click.option("--snapshot", type=click.Path(path_type=Path), required=True,
              help="Capacity snapshot / heartbeat file (StateSaveLocation/hetero-snapshot.lua).")
@click.option("--every", type=float, default=5.0, show_default=True, help="Seconds per round.")
@click.option("--margin", type=float, default=120.0, show_default=True,
              help="Extend a shortened limit when fewer seconds than this are left.")
@click.option("--margin-share", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.1,
              show_default=True,
              help="...or when less than this share of the limit is left, whichever is more.")
@click.option("--pidfile", type=click.Path(path_type=Path), default=None)
@click.option("--forecast", "with_forecast", is_flag=True,
              help="Refresh the per-pool demand forecast each minute into the snapshot (asks slurmdbd).")
@click.option("--history/--no-history", "with_history", default=True, show_default=True,
              help="Publish each user's finished jobs for the bridge's model (hetero-history.lua beside "
                   "the snapshot; asks slurmdbd every 20 s).")
@click.option("--model-tail", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The users' last jobs as the compiled model was exported with them (`model export` "
                   "writes MODEL.tail.json; read again when it changes); without it a user's history "
                   "starts 14 days back.")
@reports_errors
def bridge_run(site_path: Path, snapshot: Path, every: float, margin: float, margin_share: float,
               pidfile: Path | None, with_forecast: bool, with_history: bool,
               model_tail: Path | None) -> None:
    """The bridge daemon: snapshot + heartbeat, limit extensions, SiteFactor (until SIGTERM)."""
    import os

    from slurm_hetero.bridge.daemon import BridgeDaemon, ExtendPolicy
    from slurm_hetero.bridge.history import HISTORY_FILE, OnlineHistory
    from slurm_hetero.predict.tail import read_tail
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner

    site = load_site(site_path)
    if model_tail:
        read_tail(model_tail)  # a bad tail at start is bad input (exit 2); later ones are logged
    history = (OnlineHistory(Runner(), snapshot.parent / HISTORY_FILE, model_tail, log=console.print)
               if with_history else None)
    forecaster = None
    if with_forecast:  # forecast/ sits above the bridge: handed in, never imported by it
        from slurm_hetero.forecast.live import Refresher
        from slurm_hetero.slurm.sacct import default_cache_dir

        forecaster = Refresher(site, Runner(), log=console.print, cache_root=default_cache_dir())
    extend = ExtendPolicy(margin_s=margin, share=margin_share)
    daemon = BridgeDaemon(site, Runner(), snapshot, every, extend=extend,
                          log=console.print, forecaster=forecaster, online=history)
    if pidfile:
        pidfile.write_text(f"{os.getpid()}\n")
    try:
        daemon.run()
    finally:
        if pidfile:
            pidfile.unlink(missing_ok=True)


@main.group()
def node() -> None:
    """The node agent (runs as root on compute nodes)."""


@node.command("probe")
@click.option("--check", "site_path", type=click.Path(path_type=Path), default=None,
              help="List what differs from this node's group in the site file (exit 1 if any).")
@click.option("--node", "node_name", default=None, help="This node's name [default: hostname].")
@click.option("--devices", "specs", multiple=True, default=["nvml", "amdsmi", "npu-smi"],
              show_default=True, help="Device backends to ask (nvml, amdsmi, npu-smi, fake:PATH).")
@reports_errors
def node_probe(site_path: Path | None, node_name: str | None, specs: tuple[str, ...]) -> None:
    """Describe this node in the site file's format."""
    import socket

    import yaml

    from slurm_hetero.energy.backends import open_devices
    from slurm_hetero.energy.probe import drift, probe
    from slurm_hetero.site import load_site

    name = node_name or socket.gethostname().split(".")[0]
    site = load_site(site_path or DEMO_SITE)
    desc = probe([open_devices(s) for s in specs], site.catalog)
    console.print(yaml.safe_dump({"node_groups": [desc.as_site_group(name)]}, sort_keys=False), markup=False)
    if desc.accelerators:
        console.print(yaml.safe_dump({"devices": [d for a in desc.accelerators for d in a["devices"]]},
                                     sort_keys=False), markup=False)
    if site_path:
        problems = drift(desc, site, name)
        for p in problems:
            console.print(f"drift: {p}", markup=False)
        console.print(f"{len(problems)} difference(s) from {site_path}")
        sys.exit(1 if problems else 0)


@node.command("prolog")
def node_prolog() -> None:
    """What Slurm runs as Prolog (reads SLURM_JOB_ID, SLURMD_NODENAME); always exits 0."""
    from slurm_hetero.energy.agent import prolog_main

    sys.exit(prolog_main())


@node.command("epilog")
def node_epilog() -> None:
    """What Slurm runs as Epilog; always exits 0."""
    from slurm_hetero.energy.agent import epilog_main

    sys.exit(epilog_main())


@node.command("restore")
@click.option("--node", "node_name", default=None, help="This node's name [default: hostname].")
@click.option("--all", "everything", is_flag=True, help="Reset every device, running jobs or not.")
@reports_errors
def node_restore(node_name: str | None, everything: bool) -> None:
    """Restore the defaults of devices left changed by jobs that no longer run here."""
    import socket

    from slurm_hetero.energy.agent import job_gone, job_holds_devices, restore
    from slurm_hetero.energy.state import load_config

    name = node_name or socket.gethostname().split(".")[0]
    alive = None if everything else (lambda job: job_holds_devices(job, name))
    done = restore(load_config(), name, alive, job_gone)
    console.print(f"restored {len(done)} device(s) on {name}: {', '.join(done) or 'none needed'}")


@node.command("sample")
@click.option("--node", "node_name", default=None, help="This node's name [default: hostname].")
@click.option("--every", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between readings.")
@click.option("--pidfile", type=click.Path(path_type=Path), default=None)
@reports_errors
def node_sample(node_name: str | None, every: float, pidfile: Path | None) -> None:
    """Keep energy/utilisation counters for devices that lack them (until SIGTERM)."""
    import logging
    import socket

    from slurm_hetero.energy.sampler import serve
    from slurm_hetero.energy.state import load_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    name = node_name or socket.gethostname().split(".")[0]
    serve(load_config(), name, every, pidfile=pidfile)


@main.command("demo")
@site_option
@workdir_option
@reports_errors
def demo(site_path: Path, workdir: Path | None) -> None:
    """Boot the site's cluster, run jobs needing different hardware, show where they ran."""
    from slurm_hetero.demo import run_demo
    from slurm_hetero.devcluster import default_workdir
    from slurm_hetero.site import load_site

    name = load_site(site_path).name
    sys.exit(run_demo(site_path, workdir or default_workdir(name), console))


main.add_command(report)
main.add_command(job)


@main.command("why")
@click.argument("job_id", metavar="JOBID")
@site_option
@click.option("--json", "as_json", is_flag=True, help="Print the same facts as JSON.")
@reports_errors
def why(job_id: str, site_path: Path, as_json: bool) -> None:
    """Why job JOBID waits: Slurm's reason in plain words, what holds its pool, when it should
    start, and what would start it sooner (each suggestion checked against the live cluster).

    Exit 2 for a malformed JOBID, a job Slurm does not know, or another user's job."""
    import json

    from slurm_hetero.reports.jobid import check_job_id
    from slurm_hetero.reports.why import print_why, why_job
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner

    check_job_id(job_id)  # a bad id is exit 2 before the site or Slurm is read
    answer = why_job(Runner(), job_id, load_site(site_path))
    if as_json:
        click.echo(json.dumps(answer.as_dict(), indent=1))
    else:
        print_why(answer, console)


main.add_command(container)
main.add_command(model)
main.add_command(forecast)
main.add_command(checkpoint)
from slurm_hetero.power.cli import power  # noqa: E402 - beside its registration: one edit

main.add_command(power)
main.add_command(cluster_exporter, "exporter")
from slurm_hetero.replay.cli import replay_group  # noqa: E402 - beside its registration: one edit


def _replay_cluster(workdir: Path) -> Any:
    """Replay's clusters are dev clusters (a floor above replay's)."""
    from slurm_hetero.devcluster.replay import DevReplayCluster

    return DevReplayCluster(workdir)


main.add_command(replay_group(_replay_cluster))
node.add_command(node_exporter, "exporter")

if __name__ == "__main__":
    main()
