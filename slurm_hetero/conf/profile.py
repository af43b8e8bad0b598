"""What differs between a production deployment and the local dev cluster (paths, ports,
plugins, the Slurm release): everything else comes from the site."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_hetero.conf.nodefiles import NODE_DIR


@dataclass(frozen=True)
class Profile:
    """Deployment-specific settings. Defaults are a conventional production layout."""

    conf_dir: str = "/etc/slurm"
    # None takes the site's (slurm.cluster_name, slurm.controllers, slurm.accounting),
    # else the greenfield defaults: ClusterName = the site's name, controller `slurmctld`,
    # accounting on `slurmdbd:6819`. Set them to override the site (the dev cluster does).
    cluster_name: str | None = None
    ctld_host: str | None = None  # set: the only controller, `ctld_host(ctld_addr)`
    ctld_addr: str | None = None
    ctld_port: int = 6817
    slurmd_port: int = 6818
    dbd_host: str | None = None
    dbd_port: int | None = None
    state_dir: str = "/var/spool/slurmctld"
    spool_dir: str = "/var/spool/slurmd"
    log_dir: str = "/var/log/slurm"
    run_dir: str = "/run/slurm"
    dev_dir: str = "/dev"
    slurm_user: str = "slurm"
    auth_info: str | None = None  # e.g. "socket=/path/munge.socket"
    proctrack: str = "proctrack/cgroup"
    task_plugins: str = "task/cgroup,task/affinity"
    config_overrides: bool = False
    mail_prog: str | None = None  # None: Slurm's default (/bin/mail)
    spank_plugin: str | None = "/usr/local/lib/slurm-hetero/hetero.so"
    # Per-node NodeAddr/Port (the dev cluster runs every slurmd on loopback).
    node_ports: dict[str, int] = field(default_factory=dict)
    node_addr: str = "127.0.0.1"
    # job_desc.tres_per_node reads "gres:gpu:1" before Slurm 23.02 and "gres/gpu:1" after.
    # None: the site's slurm.version, else 22.05 (`conf render` passes what it detected).
    slurm_version: tuple[int, int] | None = None
    snapshot_check_s: int = 2
    # The node agent (energy policies, metering) as Slurm Prolog/Epilog; None: not wired.
    prolog: str | None = "/usr/local/bin/slurm-hetero-prolog"
    epilog: str | None = "/usr/local/bin/slurm-hetero-epilog"
    agent_cli: str = "/usr/local/bin/slurm-hetero"  # `node sample` runs from it
    restore: str = "/usr/local/bin/slurm-hetero-restore"  # run by the HealthCheckProgram
    health_check_interval: int | None = None  # None: the site's node_agent.restore_interval
    agent_state_dir: str = "/var/lib/slurm-hetero/agent"
    # The site's node_agent.shared_spool, where the dev cluster keeps it instead (None: the site's).
    agent_shared_spool: str | None = None
    # Device backend per node; None: by the node's stack (cuda: nvml, cann: npu-smi).
    # "{node}" is replaced by the node's name (the dev cluster's fake keeps a file per node).
    agent_devices: str | None = None
    # An exported runtime model (`slurm-hetero model export`), compiled into job_submit.lua.
    model_lua: str | None = None
    snapshot_stale_s: int = 30
    # containers: the node-side wrapper and TaskProlog run as `python -I -S` from
    # hetero_lib, the folder holding the slurm_hetero package (stdlib-only modules).
    python: str = "/usr/bin/python3"
    hetero_lib: str = "/usr/local/lib/slurm-hetero/lib"
    runc: str = "/usr/sbin/runc"
    runc_root: str = "/run/user/%U/slurm-hetero-runc"  # runc's state, per user (%U: uid)
    images_root: str | None = None  # None: the site's containers.images_root
    # Where compute nodes keep slurm-hetero's own files (agent and container config, the
    # TaskProlog, the health check, the Prolog/Epilog folders). None: conf_dir, or on a
    # configless site, whose slurmd get only Slurm's files from slurmctld, NODE_DIR.
    node_dir: str | None = None

    def node_folder(self, configless: bool) -> str:
        """The folder compute nodes find slurm-hetero's files in (see node_dir)."""
        return self.node_dir or (NODE_DIR if configless else self.conf_dir)

    @property
    def snapshot_path(self) -> str:
        return f"{self.state_dir}/hetero-snapshot.lua"

    @property
    def history_path(self) -> str:
        """The users' history the bridge daemon publishes beside the snapshot."""
        return f"{self.state_dir}/hetero-history.lua"
