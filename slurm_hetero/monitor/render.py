"""Prometheus configuration and systemd units for the exporters, from templates/ through
the project's jinja environment (`conf.render.render_template`: strict undefined, the same
filters as every rendered file).

>>> files = render_prometheus(PrometheusSettings(node_targets=["n1:9410"], cluster_targets=["c:9411"]))
>>> sorted(files)
['hetero-rules.yml', 'prometheus.yml']
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from slurm_hetero.conf.render import Profile, render_template
from slurm_hetero.conf.slurmconf import slurm_view
from slurm_hetero.errors import InputError
from slurm_hetero.monitor.cli import DEFAULT_CLUSTER_PORT, DEFAULT_NODE_PORT
from slurm_hetero.site.model import Site
from slurm_hetero.site.monitor import MonitorSettings


@dataclass(frozen=True)
class PrometheusSettings:
    node_targets: list[str] = field(default_factory=list)  # host:port of each node exporter
    cluster_targets: list[str] = field(default_factory=list)
    node_sd_file: str | None = None  # a file_sd list instead of node_targets (large sites)
    rules_file: str = "hetero-rules.yml"  # relative to prometheus.yml, or absolute
    alertmanagers: list[str] = field(default_factory=list)
    external_labels: dict[str, str] = field(default_factory=dict)
    node_scrape_s: int = 10  # the 10 s tier (the 1 s samples live in the exporter's ring)
    cluster_scrape_s: int = 60
    cluster_every_s: int = 60  # the cluster exporter's round
    fast_rules_s: int = 10
    slow_rules_s: int = 60
    alert_for_s: int = 60
    heartbeat_lost_s: int = 30  # the bridge writes its snapshot every few seconds
    snapshot_stale_s: int = 30  # job_submit.lua's own staleness limit (Profile.snapshot_stale_s)
    stuck_for_s: int = 900  # longer than the agent's restore interval (300 s by default)
    agent_errors_window_s: int = 600
    sampler_stale_s: int = 30
    starving_s: int = 6 * 3600
    starving_for_s: int = 600
    wait_p90_s: int = 4 * 3600  # HeteroPoolWaitHigh: the p90 wait of a pool and tier above this,
    wait_window_s: int = 3600  # over the jobs that started in this window,
    wait_min_jobs: int = 5  # at least this many of them (one long wait is no trend),
    wait_for_s: int = 900  # for this long
    fragmented_min_devices: int = 2  # HeteroPoolFragmented: this many free devices no waiting job fits,
    fragmented_ratio: float = 0.5  # this share of the pool's free devices at least,
    fragmented_for_s: int = 1800  # for this long
    idle_util: float = 0.05

    def check(self) -> None:
        for name, value in asdict(self).items():
            if name.endswith("_s") and (not isinstance(value, int) or value <= 0):
                raise InputError(f"{name}: {value!r}: a positive whole number of seconds is needed")
        for name in ("wait_min_jobs", "fragmented_min_devices"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise InputError(f"{name}: {getattr(self, name)!r}: a whole number of at least 1 is needed")
        if not 0 < self.fragmented_ratio <= 1:
            raise InputError(f"fragmented_ratio: {self.fragmented_ratio!r}: a share in (0, 1] is needed")
        if not (self.node_targets or self.node_sd_file) or not self.cluster_targets:
            raise InputError("node_targets (or node_sd_file) and cluster_targets: name the exporters")
        for t in [*self.node_targets, *self.cluster_targets]:
            host, _, port = t.rpartition(":")
            if not host or not port.isdigit():
                raise InputError(f"target {t!r}: use HOST:PORT")


def settings_for_site(site: Site, profile: Profile, node_port: int = DEFAULT_NODE_PORT,
                      cluster_port: int = DEFAULT_CLUSTER_PORT, all_nodes: bool = False,
                      **overrides: object) -> PrometheusSettings:
    """Scrape targets from the site: every node with accelerators (`all_nodes`: every node,
    for the node agent's error counts on CPU nodes too) and the controller; alert limits
    from the profile (the bridge's staleness limit)."""
    nodes = site.all_nodes if all_nodes else [n for g in site.node_groups if g.accelerators for n in g.nodes]
    kw: dict[str, object] = {"node_targets": [f"{n}:{node_port}" for n in nodes],
                             "cluster_targets": [f"{slurm_view(site, profile).primary_host}:{cluster_port}"],
                             "snapshot_stale_s": profile.snapshot_stale_s, **overrides}
    return PrometheusSettings(**kw)  # type: ignore[arg-type]


def render_prometheus(settings: PrometheusSettings) -> dict[str, str]:
    """{"prometheus.yml": ..., "hetero-rules.yml": ...}."""
    settings.check()
    ctx = asdict(settings)
    return {"prometheus.yml": render_template("prometheus.yml", **ctx),
            "hetero-rules.yml": render_template("hetero-rules.yml", **ctx)}


def render_units(profile: Profile, site_path: str, node_port: int = DEFAULT_NODE_PORT,
                 cluster_port: int = DEFAULT_CLUSTER_PORT, every_s: float = 1.0,
                 cluster_every_s: int = 60, monitor: MonitorSettings | None = None) -> dict[str, str]:
    """The systemd units of the node exporter (every node) and the cluster exporter, listening
    where the site's `monitor:` says, with its web config (TLS, basic auth) when it names one."""
    monitor = monitor or MonitorSettings()
    ctx = {"conf_dir": profile.conf_dir, "agent_cli": profile.agent_cli, "snapshot": profile.snapshot_path,
           "site_path": site_path, "node_port": node_port, "cluster_port": cluster_port,
           "every_s": f"{every_s:g}", "cluster_every_s": cluster_every_s,
           "listen": monitor.listen, "web_config_file": monitor.web_config_file}
    return {"hetero-node-exporter.service": render_template("hetero-node-exporter.service", **ctx),
            "hetero-exporter.service": render_template("hetero-exporter.service", **ctx)}
