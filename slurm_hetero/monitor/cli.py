"""`slurm-hetero node exporter` and `slurm-hetero exporter`: thin click adapters.

Registered in slurm_hetero/cli.py (`node.add_command(node_exporter, "exporter")`,
`main.add_command(cluster_exporter, "exporter")`); `python -m slurm_hetero.monitor` runs
the same commands without loading the rest of the CLI (the node-side entry of the units).
Heavy imports happen inside the commands, so listing them costs nothing.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurm_hetero.cliutil import reports_errors, site_option
from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.site.monitor import DEFAULT_CLUSTER_PORT, DEFAULT_LISTEN, DEFAULT_NODE_PORT

if TYPE_CHECKING:
    from slurm_hetero.monitor.web import WebConfig

__all__ = ["DEFAULT_CLUSTER_PORT", "DEFAULT_NODE_PORT", "cluster_exporter", "monitor", "node_exporter"]


def _endpoint(listen: str, web_config_file: Path | None) -> tuple[str, WebConfig | None]:
    """The address to bind and the web config: checked before anything else starts."""
    from slurm_hetero.monitor.web import listen_address, load_web_config

    web = load_web_config(str(web_config_file)) if web_config_file else None
    return listen_address(listen), web


def _serve(serve: Callable[..., None], exporter: object, port: int, endpoint: tuple[str, WebConfig | None],
           what: str, pidfile: Path | None) -> None:
    """Run an exporter until SIGTERM, its pid in `pidfile` meanwhile; a port that cannot be
    listened on is the user's error."""
    addr, web = endpoint
    scheme = web.scheme if web else "http"
    if pidfile:
        pidfile.write_text(f"{os.getpid()}\n")
    try:
        serve(exporter, port, addr, web=web,
              ready=lambda p: click.echo(f"{what} on {scheme}://{addr}:{p}", err=True))
    except OSError as e:
        raise RuntimeFailure(f"--port {port}: cannot listen on {addr}: {e.strerror or e}") from e
    finally:
        if pidfile:
            pidfile.unlink(missing_ok=True)


def endpoint_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--listen and --web-config-file, shared by both exporters."""
    fn = click.option("--web-config-file", type=click.Path(path_type=Path), default=None,
                      help="TLS and basic auth: a Prometheus exporter-toolkit web config "
                           "(tls_server_config, basic_auth_users).")(fn)
    return click.option("--listen", default=DEFAULT_LISTEN, show_default=True,
                        help="Address to listen on, or a network (10.1.0.0/16) to listen on this "
                             "host's address in.")(fn)


@click.command("exporter")
@click.option("--node", "node_name", default=None, help="Slurm NodeName [default: short hostname].")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_NODE_PORT, show_default=True,
              help="Port of /metrics (0: any free port, printed).")
@endpoint_options
@click.option("--every", type=click.FloatRange(min=0.1, max=60), default=1.0, show_default=True,
              help="Seconds between device samples.")
@click.option("--tier", "tier_s", type=click.FloatRange(min=1, max=600), default=10.0, show_default=True,
              help="Seconds of the per-job/per-node aggregates (mean, max).")
@click.option("--ring", "ring_s", type=click.FloatRange(min=1, max=3600), default=60.0, show_default=True,
              help="Seconds of samples kept in memory.")
@click.option("--arch", default=None, help="Architecture label [default: this machine's].")
@click.option("--devices", "spec", default=None,
              help="Device backend [default: the node's entry in hetero-agent.json].")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder of the exporter's energy counters, its own [default: the node agent's "
                   "folder of this node, which only root may write].")
@click.option("--pidfile", type=click.Path(path_type=Path), default=None)
@reports_errors
def node_exporter(node_name: str | None, port: int, listen: str, web_config_file: Path | None,
                  every: float, tier_s: float, ring_s: float, arch: str | None, spec: str | None,
                  state_dir: Path | None, pidfile: Path | None) -> None:
    """Per-device metrics of this node for Prometheus (until SIGTERM)."""
    from slurm_hetero.energy.backends import open_devices
    from slurm_hetero.energy.state import AgentConfig, required_config_path
    from slurm_hetero.monitor.node import NodeExporter, node_arch, serve_node

    if tier_s < every:
        raise InputError(f"--tier {tier_s:g}: must be at least --every ({every:g})")
    endpoint = _endpoint(listen, web_config_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    name = node_name or socket.gethostname().split(".")[0]
    path = required_config_path()
    try:
        cfg = AgentConfig.load(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: cannot read the node agent's config: {e}") from e
    spec = spec or cfg.devices_for(name) or "none"
    if state_dir is not None and not os.access(state_dir, os.W_OK | os.X_OK):
        raise InputError(f"--state-dir {state_dir}: not a folder this user ({os.geteuid()}) may write")
    # Only read here (NodeState would create it, and the agent's folder is root's): a node
    # whose agent has not run yet has no records, and no device is anyone's.
    node_dir = cfg.state_dir / name
    exporter = NodeExporter(node=name, arch=node_arch(arch), dev=open_devices(spec, node_dir),
                            node_dir=node_dir, agent_log=cfg.state_dir / "agent.log", state_dir=state_dir,
                            every=every, ring_s=max(ring_s, tier_s), tier_s=tier_s,
                            sampled=spec.startswith("sampled:"))
    _serve(serve_node, exporter, port, endpoint, f"node exporter {name} ({spec})", pidfile)


@click.command("exporter")
@site_option
@click.option("--snapshot", type=click.Path(path_type=Path), default=None,
              help="The bridge's capacity snapshot [default: /var/spool/slurmctld/hetero-snapshot.lua].")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_CLUSTER_PORT, show_default=True,
              help="Port of /metrics (0: any free port, printed).")
@endpoint_options
@click.option("--every", type=click.FloatRange(min=1, max=3600), default=60.0, show_default=True,
              help="Seconds per round (one squeue --json, two sinfo).")
@click.option("--fast-every", type=click.FloatRange(min=0, max=3600), default=10.0, show_default=True,
              help="Seconds between reads of the free devices per node for the fragmentation figures "
                   "(one sinfo; 0: once a round).")
@click.option("--sacct-every", type=click.FloatRange(min=0, max=86400), default=600.0, show_default=True,
              help="Seconds between sacct reads of finished jobs' energy per policy (0: off).")
@click.option("--accounting-timeout", type=click.FloatRange(min=0.1, max=3600), default=10.0,
              show_default=True,
              help="Seconds slurmdbd has to answer the accounting check before it counts as down.")
@click.option("--pidfile", type=click.Path(path_type=Path), default=None)
@reports_errors
def cluster_exporter(site_path: Path, snapshot: Path | None, port: int, listen: str,
                     web_config_file: Path | None, every: float, fast_every: float, sacct_every: float,
                     accounting_timeout: float, pidfile: Path | None) -> None:
    """Queue, pools, bridge decisions and heartbeat for Prometheus (until SIGTERM)."""
    from slurm_hetero.conf.render import Profile
    from slurm_hetero.monitor.cluster import ClusterExporter, serve_cluster
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner

    endpoint = _endpoint(listen, web_config_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    exporter = ClusterExporter(load_site(site_path), Runner(), snapshot or Path(Profile().snapshot_path),
                               every=every, sacct_every=sacct_every, fast_every=fast_every,
                               accounting_timeout=accounting_timeout)
    _serve(serve_cluster, exporter, port, endpoint, "cluster exporter", pidfile)


@click.group()
def monitor() -> None:
    """The exporters, without the rest of the CLI (`python -m slurm_hetero.monitor`)."""


monitor.add_command(node_exporter, "node-exporter")
monitor.add_command(cluster_exporter, "cluster-exporter")
