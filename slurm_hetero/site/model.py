"""The validated site model that every generator reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ClusterShell.NodeSet import NodeSet

from slurm_hetero.site.catalog import AccelModel, Normalization
from slurm_hetero.site.images import ContainerSettings, DriverInfo, Image
from slurm_hetero.site.monitor import MonitorSettings
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule, EnergyPolicy
from slurm_hetero.site.slurmlines import is_configless
from slurm_hetero.site.units import size_gb_label


@dataclass(frozen=True)
class AccelGroup:
    """`count` devices of one model on every node of a group, optionally sliced in shards."""

    model: AccelModel
    count: int
    shards_per_device: int = 0


@dataclass(frozen=True)
class NodeGroup:
    names: str  # folded hostlist expression, e.g. "a100-[01-02]"
    resource_type: str  # CPU, GPU or NPU
    architecture: str  # x86_64 or aarch64 (aliases normalized)
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mib: int
    compute_units: int
    memory_bandwidth_gbs: float
    supported_frameworks: tuple[str, ...]
    partitions: tuple[str, ...]
    accelerators: tuple[AccelGroup, ...] = ()
    extra_features: tuple[str, ...] = ()
    # containers: per stack, what the nodes' drivers run; the nodes' fabric.
    drivers: tuple[tuple[str, DriverInfo], ...] = ()
    fabric: str | None = None
    # more NodeName words of an existing site, as written (TmpDisk, State, ...).
    options: tuple[tuple[str, str], ...] = ()
    # the node's measured draw when up and idle (W); None: estimated (site.power.idle_power)
    idle_watts: float | None = None
    # "nvml": gres.conf has AutoDetect=nvml (slurmd orders the GPUs); "off": File= lines.
    gres_autodetect: str = "off"
    # MIG on these GPUs, acknowledged as not modeled (the agent then leaves MIG GPUs alone).
    mig_unsupported: bool = False

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def nodes(self) -> list[str]:
        return list(NodeSet(self.names))

    @property
    def node_count(self) -> int:
        return len(NodeSet(self.names))

    @property
    def units_per_node(self) -> float:
        return round(sum(a.model.units * a.count for a in self.accelerators), 2)

    @property
    def features(self) -> tuple[str, ...]:
        """Node features: arch, then vendor, stack, model and device-memory class per model."""
        feats = [self.architecture]
        for a in self.accelerators:
            m = a.model
            feats += [m.vendor, m.stack, m.id, size_gb_label(m.device_memory_mib)]
        feats += self.extra_features
        return tuple(dict.fromkeys(feats))

    @property
    def weight(self) -> int:
        """Slurm allocates lowest Weight first: CPU-only nodes, then cheaper accelerators."""
        return 1 + round(self.units_per_node * 100)

    @property
    def gres(self) -> str:
        parts = []
        for a in self.accelerators:
            parts.append(f"{a.model.gres_name}:{a.model.gres_type}:{a.count}")
            if a.shards_per_device:
                parts.append(f"shard:{a.count * a.shards_per_device}")
        return ",".join(parts)


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool = False
    max_time: str = "UNLIMITED"
    default_time: str | None = None
    predicted_limits: bool = False  # backfill mode: limits set to the predicted quantile
    # more PartitionName words of an existing site (AllowGroups, QOS, State, ...),
    # and nodes of slurm.keep_nodes (not modeled) that are in this partition too.
    options: tuple[tuple[str, str], ...] = ()
    extra_nodes: str = ""


@dataclass(frozen=True)
class QosTier:
    """A service tier (a Slurm QoS). preempt_mode, grace and min run say what happens to
    this tier's jobs when a tier that lists it in `preempt` needs their resources; None
    leaves Slurm's setting (the cluster's PreemptMode, no grace, no minimum run)."""

    name: str
    priority: int
    preempt: tuple[str, ...] = ()
    usage_factor: float = 1.0
    preempt_mode: str | None = None  # requeue, cancel or suspend
    grace_s: int | None = None  # QoS GraceTime: SIGTERM to the job's steps, this long, then out
    min_run_s: int | None = None  # QoS PreemptExemptTime
    limits: tuple[tuple[str, str], ...] = ()  # as the site wrote them: (units, "50%"), ...
    grp_tres: tuple[tuple[str, int], ...] = ()  # the limits as concrete TRES for GrpTRES

    @property
    def grp_tres_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.grp_tres)

    @property
    def min_run_text(self) -> str:
        """PreemptExemptTime as HH:MM:SS (sacctmgr reads a plain number as minutes)."""
        s = self.min_run_s or 0
        return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


@dataclass(frozen=True)
class Billing:
    cpu: float = 1.0
    mem_per_gb: float = 0.25
    unit: float = 16.0  # one normalized accelerator unit costs as much as this many CPUs


@dataclass(frozen=True)
class NodeAgent:
    """energy: how often Slurm's HealthCheckProgram restores devices whose job
    has no live slurmstepd (0: never), the site's own health check to run after it, and
    which stacks' nodes are metered through `node sample`."""

    restore_interval: int = 300
    health_check: str | None = None
    # Stacks whose nodes run `node sample` besides those whose backend has no counters
    # (cann): e.g. cuda, for a whole-job utilisation instead of NVML's last ~20 s.
    sample_stacks: tuple[str, ...] = ()
    # A folder every compute node mounts (NFS, Lustre, GPFS), root-writable only: each node's
    # epilog leaves its figures there and the job's first node writes them all to the
    # accounting record at once (one write per job instead of one per node). None: each
    # node ships its own.
    shared_spool: str | None = None
    # Whether the agent writes its figures into the job's AdminComment at all (false on a
    # site whose other tool owns that field: the figures then stay in the node's history).
    write_comment: bool = True


@dataclass(frozen=True)
class Controller:
    """A SlurmctldHost: the host's name as Slurm knows it, optionally the address to use."""

    host: str
    addr: str | None = None

    def __str__(self) -> str:
        return f"{self.host}({self.addr})" if self.addr else self.host


@dataclass(frozen=True)
class SlurmSettings:
    """The Slurm installation a site already runs. Every field is optional; the
    defaults render what a greenfield site gets (controller `slurmctld`, accounting on
    `slurmdbd`). Lines are kept as written and placed by `conf render`."""

    cluster_name: str | None = None  # None: the site's name
    controllers: tuple[Controller, ...] = ()  # primary, then backups; (): "slurmctld"
    accounting_host: str | None = None  # None: "slurmdbd"
    accounting_port: int | None = None  # None: 6819
    accounting_tres: tuple[str, ...] = ()  # more AccountingStorageTRES entries
    # The site's AccountingStorageEnforce items (() : none); None: slurm-hetero's default.
    accounting_enforce: tuple[str, ...] | None = None
    version: tuple[int, int] | None = None  # None: detected where rendered, else 22.05
    extra_lines: tuple[str, ...] = ()  # slurm.conf lines passed through
    keep_nodes: tuple[str, ...] = ()  # NodeName lines of nodes not modeled
    keep_partitions: tuple[str, ...] = ()  # PartitionName lines of partitions not modeled
    gres_lines: tuple[str, ...] = ()  # gres.conf lines passed through
    # The site's own hooks, which slurm-hetero's join instead of replacing: its job_submit.lua
    # rules (run inside the rendered job_submit.lua, in `job_submit_order`), its Prolog and
    # Epilog (a program or a folder glob), TaskProlog, and plugstack.conf lines.
    job_submit_script: str | None = None
    job_submit_order: str = "site-first"  # or "bridge-first"
    prolog: str | None = None
    epilog: str | None = None
    task_prolog: str | None = None
    plugstack_lines: tuple[str, ...] = ()

    @property
    def configless(self) -> bool:
        """slurmd fetch their files from slurmctld (`SlurmctldParameters=enable_configless` in
        extra_lines): slurm-hetero's node files go to the node folder (conf/nodefiles.py)."""
        return is_configless(self.extra_lines)


@dataclass(frozen=True)
class PowerSettings:
    """power: Slurm's power saving through slurm-hetero's SuspendProgram/ResumeProgram, which
    keep the nodes the demand forecast needs awake. Off unless `enabled`. Times in seconds."""

    enabled: bool = False
    method: str = "command"  # ipmi, redfish, command or devcluster
    suspend_time: int = 600
    suspend_timeout: int = 120
    resume_timeout: int = 600
    exclude_nodes: str = ""  # hostlist (SuspendExcNodes)
    exclude_partitions: tuple[str, ...] = ()  # (SuspendExcParts)
    headroom: float = 0.2  # idle capacity kept awake beyond the forecast, as a share of it
    horizon: int = 15  # minutes: the forecast horizon that decides which nodes stay up
    boot_delay: float = 0.0  # devcluster: seconds a node "boots" before its slurmd starts
    # ipmi and redfish: "{node}" in `bmc`/`url` is replaced by the node's name; the BMC's
    # user and a root-only file holding its password.
    bmc: str = ""
    interface: str = "lanplus"
    url: str = ""
    verify_tls: bool = True
    user: str = ""
    password_file: str = ""
    # command: argv lists; an argument "{node}" becomes the node's name.
    suspend_argv: tuple[str, ...] = ()
    resume_argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlacementSettings:
    """placement: how the bridge places an --accel job. With `float`, a job whose request
    several pools of one arch satisfy with the same device count per node asks Slurm for any
    of them (untyped GRES, the models' node features ORed), so it starts in whichever frees
    first instead of waiting in the one pool chosen at submit."""

    float: bool = False
    # The snapshot also carries, per pool, the most CPUs and memory free on a node with N
    # devices free: "starts now" needs one node to hold the job's CPUs and memory too. Off:
    # free devices alone (a device free beside busy cores looked like room).
    node_fit: bool = True


@dataclass(frozen=True)
class MigrationSettings:
    """migration: what the bridge daemon may move. A pending job moves only between the
    pools its own --accel request allowed at submit (the bridge records them)."""

    pending: bool = False
    pending_after_s: int = 60
    max_moves: int = 3
    across_gres: bool = False
    running: bool = False  # requeue running --checkpoint --migratable jobs into a freed pool
    running_gain: float = 0.25
    restart_cost_s: int = 120


@dataclass(frozen=True)
class Site:
    name: str
    path: Path | None
    description: str
    catalog: dict[str, AccelModel]
    normalization: Normalization
    node_groups: tuple[NodeGroup, ...]
    partitions: tuple[Partition, ...]
    qos: tuple[QosTier, ...]
    default_qos: str
    billing: Billing = field(default_factory=Billing)
    energy_policies: tuple[EnergyPolicy, ...] = DEFAULT_POLICIES
    energy_auto: AutoRule = field(default_factory=AutoRule)
    node_agent: NodeAgent = field(default_factory=NodeAgent)
    # containers: the image catalog by NAME:TAG, and container settings.
    images: dict[str, Image] = field(default_factory=dict)
    containers: ContainerSettings = field(default_factory=ContainerSettings)
    # controllers, accounting, version and lines of an existing installation.
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    power: PowerSettings = field(default_factory=PowerSettings)
    migration: MigrationSettings = field(default_factory=MigrationSettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)  # the exporters

    @property
    def cluster_name(self) -> str:
        """Slurm's ClusterName (sacctmgr's cluster): slurm.cluster_name, else the site's name."""
        return self.slurm.cluster_name or self.name

    @property
    def models_in_use(self) -> list[AccelModel]:
        seen: dict[str, AccelModel] = {}
        for g in self.node_groups:
            for a in g.accelerators:
                seen.setdefault(a.model.id, a.model)
        return list(seen.values())

    @property
    def all_nodes(self) -> list[str]:
        return [n for g in self.node_groups for n in g.nodes]

    def groups_in(self, partition: str) -> list[NodeGroup]:
        return [g for g in self.node_groups if partition in g.partitions]
