"""What a render writes for monitoring: the exporters' systemd units, Prometheus's scrape
jobs with their target lists, and the recording and alert rules.

`conf render` writes them beside the Slurm files (`monitoring_files`); the Ansible role puts
the units on the controller (cluster exporter) and the compute nodes (node exporter) and
the rest on the Prometheus server. The scrape jobs read their targets from file_sd lists
(`hetero-node-targets.json`, `hetero-cluster-targets.json`): Prometheus re-reads those by
itself, so a node added to the site needs no change to Prometheus's own configuration. The
jobs themselves go in with `scrape_config_files: [hetero-scrape.yml]` (Prometheus 2.43 and
later) or are pasted into prometheus.yml once (Debian 12 ships 2.42). A complete
prometheus.yml (`render_prometheus`) is what the dev cluster and the tests run.

>>> files = render_prometheus(PrometheusSettings(node_targets=["n1:9410"], cluster_targets=["c:9411"]))
>>> sorted(files)
['hetero-rules.yml', 'prometheus.yml']
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from slurm_hetero.conf.profile import Profile
from slurm_hetero.conf.slurmconf import slurm_view
from slurm_hetero.errors import InputError
from slurm_hetero.site.model import Site
from slurm_hetero.site.monitor import EXPORTER_USER, MonitorSettings
from slurm_hetero.templating import environment

NODE_UNIT = "hetero-node-exporter.service"
CLUSTER_UNIT = "hetero-exporter.service"
SCRAPE = "hetero-scrape.yml"
RULES = "hetero-rules.yml"
NODE_TARGETS = "hetero-node-targets.json"
CLUSTER_TARGETS = "hetero-cluster-targets.json"
# Render outputs and the hosts that get them (the manifest's "hosts").
HOSTS = {NODE_UNIT: "compute", CLUSTER_UNIT: "controller", SCRAPE: "prometheus", RULES: "prometheus",
         NODE_TARGETS: "prometheus", CLUSTER_TARGETS: "prometheus"}
# The node exporter's energy counters: its own folder (systemd's StateDirectory=), since the
# node agent's is root's and the exporter is not.
EXPORTER_STATE = "slurm-hetero-exporter"


@dataclass(frozen=True)
class PrometheusSettings:
    node_targets: list[str] = field(default_factory=list)  # host:port of each node exporter
    cluster_targets: list[str] = field(default_factory=list)
    node_sd_file: str | None = None  # a file_sd list instead of node_targets (what conf render writes)
    cluster_sd_file: str | None = None
    rules_file: str = RULES  # relative to prometheus.yml, or absolute
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
        if not (self.node_targets or self.node_sd_file) or not (self.cluster_targets or self.cluster_sd_file):
            raise InputError("node_targets (or node_sd_file) and cluster_targets (or cluster_sd_file): "
                             "name the exporters")
        for t in [*self.node_targets, *self.cluster_targets]:
            host, _, port = t.rpartition(":")
            if not host or not port.isdigit():
                raise InputError(f"target {t!r}: use HOST:PORT")


def _render(name: str, **ctx: object) -> str:
    return environment().get_template(name + ".j2").render(ctx)


def settings_for_site(site: Site, profile: Profile, node_port: int | None = None,
                      cluster_port: int | None = None, all_nodes: bool = False,
                      **overrides: object) -> PrometheusSettings:
    """Scrape targets from the site, on the ports of its `monitor:` section: every node with
    accelerators (`all_nodes`: every node, for the node agent's error counts on CPU nodes
    too) and the controller; alert limits from the profile (the bridge's staleness limit)."""
    node_port = site.monitor.node_port if node_port is None else node_port
    cluster_port = site.monitor.cluster_port if cluster_port is None else cluster_port
    nodes = site.all_nodes if all_nodes else [n for g in site.node_groups if g.accelerators for n in g.nodes]
    kw: dict[str, object] = {"node_targets": [f"{n}:{node_port}" for n in nodes],
                             "cluster_targets": [f"{slurm_view(site, profile).primary_host}:{cluster_port}"],
                             "snapshot_stale_s": profile.snapshot_stale_s, **overrides}
    return PrometheusSettings(**kw)  # type: ignore[arg-type]


def render_prometheus(settings: PrometheusSettings) -> dict[str, str]:
    """A complete Prometheus configuration: {"prometheus.yml": ..., "hetero-rules.yml": ...}."""
    settings.check()
    ctx = asdict(settings)
    return {"prometheus.yml": _render("prometheus.yml", **ctx), RULES: _render("hetero-rules.yml", **ctx)}


def render_scrape(settings: PrometheusSettings) -> dict[str, str]:
    """What joins a site's own Prometheus: the scrape jobs, the rules and, where the jobs read
    file_sd lists, those lists (each a single target group)."""
    settings.check()
    ctx = asdict(settings)
    files = {SCRAPE: _render("hetero-scrape.yml", **ctx), RULES: _render("hetero-rules.yml", **ctx)}
    for sd_file, targets in ((settings.node_sd_file, settings.node_targets),
                             (settings.cluster_sd_file, settings.cluster_targets)):
        if sd_file:
            group = [{"targets": targets, "labels": {}}]
            files[sd_file.rpartition("/")[2]] = json.dumps(group, indent=1) + "\n"
    return files


def render_units(profile: Profile, site_path: str, node_port: int | None = None,
                 cluster_port: int | None = None, every_s: float = 1.0,
                 cluster_every_s: int = 60, monitor: MonitorSettings | None = None,
                 configless: bool = False) -> dict[str, str]:
    """The systemd units of the node exporter (compute nodes) and the cluster exporter
    (controller), each as the unprivileged EXPORTER_USER, listening where the site's
    `monitor:` says, with its web config (TLS, basic auth) when it names one. `configless`:
    the node exporter gets no SLURM_CONF (its node has no /etc/slurm; Slurm's commands find
    slurmd's cache, the agent's config the node folder)."""
    monitor = monitor or MonitorSettings()
    ctx = {"conf_dir": profile.conf_dir, "agent_cli": profile.agent_cli, "snapshot": profile.snapshot_path,
           "site_path": site_path, "every_s": f"{every_s:g}", "cluster_every_s": cluster_every_s,
           "node_port": monitor.node_port if node_port is None else node_port,
           "cluster_port": monitor.cluster_port if cluster_port is None else cluster_port,
           "listen": monitor.listen, "web_config_file": monitor.web_config_file, "user": EXPORTER_USER,
           "state": EXPORTER_STATE, "agent_state_dir": profile.agent_state_dir,
           "slurm_user": profile.slurm_user, "configless": configless}
    return {NODE_UNIT: _render(NODE_UNIT, **ctx), CLUSTER_UNIT: _render(CLUSTER_UNIT, **ctx)}


def monitoring_files(site: Site, profile: Profile, site_path: str) -> dict[str, str]:
    """Every monitoring output of `conf render`: units, scrape jobs, rules, target lists.
    Every compute node is scraped: the node agent runs on CPU nodes too, and its errors
    there count as anywhere (HeteroNodeAgentErrors)."""
    settings = settings_for_site(site, profile, all_nodes=True, node_sd_file=NODE_TARGETS,
                                 cluster_sd_file=CLUSTER_TARGETS)
    return {**render_units(profile, site_path, monitor=site.monitor, configless=site.slurm.configless),
            **render_scrape(settings)}
