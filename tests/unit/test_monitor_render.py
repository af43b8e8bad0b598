"""The rendered Prometheus configuration, the exporters' systemd units and the Grafana
dashboard: YAML/JSON structure, every metric they name exists, and (where Debian's
`promtool` is installed) Prometheus's own checker accepts them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_hetero.conf import render_site
from slurm_hetero.conf.render import Profile
from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.errors import InputError
from slurm_hetero.monitor.cluster import ClusterExporter
from slurm_hetero.monitor.node import NodeExporter
from slurm_hetero.monitor.render import PrometheusSettings, render_prometheus, render_units, settings_for_site
from slurm_hetero.monitor.serve import registry_for
from slurm_hetero.site import load_site, load_site_text
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.monitor import MonitorSettings
from tests.unit.test_monitor_cluster import CapturedSlurm

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "slurm_hetero" / "monitor" / "dashboard.json"
DEMO = ROOT / "site" / "demo" / "site.yaml"
SETTINGS = PrometheusSettings(node_targets=["gpu-01:9410", "npu-01:9410"], cluster_targets=["ctl:9411"],
                              alertmanagers=["am:9093"])
METRIC = re.compile(r"\b(hetero[_:][a-z0-9_:]+)")


def exported_names(tmp_path: Path) -> set[str]:
    """Every metric name the two exporters can produce (all optional families filled)."""
    FakeDevices.create(tmp_path / "f.json", "gpu", 2, "h100", default_w=700, memory_mib=1000)
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    (node_dir / "job-5.json").write_text(json.dumps({"job": "5", "user": "u", "policy": "balanced",
                                                     "devices": [{"kind": "gpu", "idx": 0, "t": 1, "energy_j": 0}]}))
    exp = NodeExporter(node="n", arch="x86_64", dev=open_devices(f"fake:{tmp_path}/f.json"), node_dir=node_dir,
                       sampled=True)
    exp.sample()
    names = {m.name for m in registry_for(exp).collect()}
    # families only some backends fill (NVML, npu-smi): named in node.py, listed here from it
    names |= set(re.findall(r'"(hetero_device_[a-z_]+)"', (ROOT / "slurm_hetero/monitor/node.py").read_text()))
    site = load_site(ROOT / "site" / "demo" / "site.yaml")
    cexp = ClusterExporter(site, CapturedSlurm(), None)
    cexp.round()
    families = list(cexp.collect())
    names |= {m.name for m in families}
    # histograms are exposed as NAME_bucket, NAME_sum and NAME_count
    names |= {m.name + s for m in families if m.type == "histogram" for s in ("_bucket", "_sum", "_count")}
    return names


def series_names(names: set[str]) -> set[str]:
    """Counters are exposed as NAME_total."""
    return names | {n + "_total" for n in names}


def test_prometheus_config_and_rules(tmp_path: Path) -> None:
    files = render_prometheus(SETTINGS)
    conf = yaml.safe_load(files["prometheus.yml"])
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    assert jobs["hetero-node"]["static_configs"][0]["targets"] == SETTINGS.node_targets
    assert jobs["hetero-cluster"]["static_configs"][0]["targets"] == SETTINGS.cluster_targets
    assert conf["rule_files"] == ["hetero-rules.yml"]
    rules = yaml.safe_load(files["hetero-rules.yml"])
    groups = {g["name"]: g for g in rules["groups"]}
    assert groups["hetero-10s"]["interval"] == "10s" and groups["hetero-60s"]["interval"] == "60s"
    alerts = {r["alert"] for r in groups["hetero-alerts"]["rules"]}
    assert {"HeteroBridgeHeartbeatLost", "HeteroSnapshotStale", "HeteroDeviceStuckNonDefault",
            "HeteroNodeAgentErrors", "HeteroPoolStarving"} <= alerts
    # every metric a rule reads is exported or recorded
    known = series_names(exported_names(tmp_path))
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    used = {m for g in rules["groups"] for r in g["rules"] for m in METRIC.findall(r["expr"])}
    assert used - known - recorded == set()
    # Prometheus's templates survived jinja
    heartbeat = next(r for r in groups["hetero-alerts"]["rules"] if r["alert"] == "HeteroBridgeHeartbeatLost")
    assert "{{ $value | humanizeDuration }}" in heartbeat["annotations"]["summary"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus package not installed")
def test_promtool_accepts_the_rendered_files(tmp_path: Path) -> None:
    for name, text in render_prometheus(SETTINGS).items():
        (tmp_path / name).write_text(text)
    r = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_settings_are_checked() -> None:
    with pytest.raises(InputError, match="node_scrape_s"):
        render_prometheus(PrometheusSettings(node_targets=["a:1"], cluster_targets=["b:2"], node_scrape_s=0))
    with pytest.raises(InputError, match="HOST:PORT"):
        render_prometheus(PrometheusSettings(node_targets=["a"], cluster_targets=["b:2"]))
    with pytest.raises(InputError, match=r"fragmented_ratio: 1.5: a share in \(0, 1\]"):
        render_prometheus(PrometheusSettings(node_targets=["a:1"], cluster_targets=["b:2"], fragmented_ratio=1.5))
    with pytest.raises(InputError, match="wait_min_jobs: 0: a whole number of at least 1"):
        render_prometheus(PrometheusSettings(node_targets=["a:1"], cluster_targets=["b:2"], wait_min_jobs=0))
    sd = render_prometheus(PrometheusSettings(node_sd_file="/etc/prometheus/nodes.json", cluster_targets=["b:2"]))
    node = yaml.safe_load(sd["prometheus.yml"])["scrape_configs"][0]
    assert node["file_sd_configs"] == [{"files": ["/etc/prometheus/nodes.json"]}]


def _service(unit: str) -> dict[str, list[str]]:
    """The [Service] section's settings: key -> values, in order."""
    section = unit.split("\n[Service]\n", 1)[1].split("\n[", 1)[0]
    out: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_systemd_units() -> None:
    units = render_units(Profile(agent_cli="/opt/hetero/bin/slurm-hetero"), "/etc/slurm/my site.yaml",
                         node_port=9500)
    node = units["hetero-node-exporter.service"]
    assert ("ExecStart=/opt/hetero/bin/slurm-hetero node exporter --port 9500 --listen 0.0.0.0 --every 1 "
            "--state-dir /var/lib/slurm-hetero-exporter\n") in node
    assert "Environment=SLURM_CONF=/etc/slurm/slurm.conf" in node
    cluster = units["hetero-exporter.service"]
    assert "exporter --site '/etc/slurm/my site.yaml' --snapshot /var/spool/slurmctld/hetero-snapshot.lua" in cluster
    for text in units.values():
        assert "[Service]" in text and "[Install]" in text and "{{" not in text
        assert "--web-config-file" not in text


def test_exporters_run_unprivileged() -> None:
    """Least privilege: the exporters' own user, no capabilities, nothing writable but the
    node exporter's counters; devices only where a driver library must open them."""
    units = render_units(Profile(), "/etc/slurm/site.yaml")
    for name, text in units.items():
        s = _service(text)
        assert s["User"] == s["Group"] == ["slurm-hetero-exporter"], name
        assert s["CapabilityBoundingSet"] == s["AmbientCapabilities"] == [""], name
        assert s["NoNewPrivileges"] == ["yes"] and s["ProtectSystem"] == ["strict"], name
        assert "ReadWritePaths" not in s and "SupplementaryGroups" not in s, name
    node, cluster = (_service(units[n]) for n in ("hetero-node-exporter.service", "hetero-exporter.service"))
    # The node exporter writes its counters into its own state folder, never the agent's.
    assert node["StateDirectory"] == ["slurm-hetero-exporter"] and node["StateDirectoryMode"] == ["0700"]
    assert node["ExecStart"][0].endswith(" --state-dir /var/lib/slurm-hetero-exporter")
    assert "PrivateDevices" not in node  # NVML, amdsmi and npu-smi open the device files
    assert cluster["PrivateDevices"] == ["yes"] and "StateDirectory" not in cluster
    assert cluster["SystemCallFilter"] == ["@system-service"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd not installed")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    """`systemd-analyze verify` reads each setting as systemd would: an unknown key or a bad
    value is a warning on stderr, so nothing may be printed."""
    cli = shutil.which("slurm-hetero") or str(Path(sys.executable).parent / "slurm-hetero")
    site = load_site_text(DEMO.read_text() + SITE_MONITOR)
    for name, text in render_units(Profile(agent_cli=cli), "/etc/slurm/site.yaml", monitor=site.monitor).items():
        (tmp_path / name).write_text(text)
        r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / name)], capture_output=True, text=True,
                           check=False)
        assert r.returncode == 0 and r.stdout + r.stderr == "", (name, r.stdout + r.stderr)


def test_conf_render_writes_the_monitoring_files() -> None:
    """The exporters' units, the scrape jobs reading file_sd lists of every compute node and
    the controller (on the site's ports), and the rules, as `conf render` writes them."""
    site = load_site_text(DEMO.read_text() + "\nmonitor: {node_port: 9500, cluster_port: 9501}\n")
    files = render_site(site, Profile(ctld_host="ctl", snapshot_stale_s=45))
    assert "node exporter --port 9500 " in files["hetero-node-exporter.service"]
    assert "--site /etc/slurm/site.yaml " in files["hetero-exporter.service"]
    assert " --port 9501 " in files["hetero-exporter.service"]
    scrape = yaml.safe_load(files["hetero-scrape.yml"])
    assert [(j["job_name"], j["file_sd_configs"]) for j in scrape["scrape_configs"]] == [
        ("hetero-node", [{"files": ["hetero-node-targets.json"]}]),
        ("hetero-cluster", [{"files": ["hetero-cluster-targets.json"]}])]
    assert json.loads(files["hetero-node-targets.json"]) == [
        {"targets": [f"{n}:9500" for n in site.all_nodes], "labels": {}}]
    assert json.loads(files["hetero-cluster-targets.json"]) == [{"targets": ["ctl:9501"], "labels": {}}]
    # The same rules as a complete configuration's, with the profile's limits.
    assert files["hetero-rules.yml"] == render_prometheus(settings_for_site(site, Profile(
        ctld_host="ctl", snapshot_stale_s=45)))["hetero-rules.yml"]
    assert "hetero_bridge_snapshot_age_seconds > 45" in files["hetero-rules.yml"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus package not installed")
def test_promtool_accepts_the_scrape_jobs_with_their_target_lists(tmp_path: Path) -> None:
    """The jobs pasted into a Prometheus configuration beside the rendered files, as the role
    installs them: promtool reads the rules and each target list."""
    files = render_site(load_site(DEMO), Profile())
    for name in ("hetero-scrape.yml", "hetero-rules.yml", "hetero-node-targets.json", "hetero-cluster-targets.json"):
        (tmp_path / name).write_text(files[name])
    own = {"global": {"scrape_interval": "15s"}, "rule_files": ["hetero-rules.yml"],
           **yaml.safe_load(files["hetero-scrape.yml"])}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(own))
    r = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                       capture_output=True, text=True, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "WARNING" not in out, out
    assert "SUCCESS: 1 rule files found" in out, out  # an SD file it cannot find is a WARNING
    # A target list Prometheus cannot read fails the check: the test can fail.
    (tmp_path / "hetero-node-targets.json").write_text('[{"targets": "n1:9410"}]')
    r = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                       capture_output=True, text=True, check=False)
    assert r.returncode != 0, r.stdout + r.stderr


SITE_MONITOR = """
monitor:
  listen: 10.20.0.0/16
  web_config_file: /etc/slurm-hetero/web-config.yml
"""


def test_the_sites_address_and_web_config_reach_the_units() -> None:
    site = load_site_text(DEMO.read_text() + SITE_MONITOR)
    assert site.monitor == MonitorSettings("10.20.0.0/16", "/etc/slurm-hetero/web-config.yml")
    units = render_units(Profile(), "/etc/slurm/site.yaml", monitor=site.monitor)
    for name, command in (("hetero-node-exporter.service", "node exporter --port 9410"),
                          ("hetero-exporter.service", "--port 9411")):
        start = next(ln for ln in units[name].splitlines() if ln.startswith("ExecStart="))
        assert f"{command} --listen 10.20.0.0/16 --web-config-file /etc/slurm-hetero/web-config.yml " in start
    # a path with a space stays one argument
    odd = render_units(Profile(), "/s.yaml", monitor=MonitorSettings("::", "/etc/web config.yml"))
    assert "--listen :: --web-config-file '/etc/web config.yml' " in odd["hetero-exporter.service"]


@pytest.mark.parametrize(("monitor", "message"), [
    ("{listen: 10.20.1.5}", "monitor.listen: 10.20.1.5 is one host's address, but every node's exporter "
                            "listens on this value: write the network it lies in"),
    ("{listen: 10.20.1.5/16}", "monitor.listen: '10.20.1.5/16' is neither an IP address nor a network"),
    ("{listen: eth0}", "monitor.listen: 'eth0' is neither an IP address nor a network"),
    ("{web_config_file: web.yml}", "monitor.web_config_file: 'web.yml' is not allowed"),
    ("{address: 0.0.0.0}", "monitor: Additional properties are not allowed ('address' was unexpected)"),
    ("{node_port: 9100}", "monitor.node_port: 9100 is node_exporter's"),
    ("{cluster_port: 9400}", "monitor.cluster_port: 9400 is NVIDIA's dcgm-exporter's"),
    ("{node_port: 9500, cluster_port: 9500}", "monitor.cluster_port: 9500 is monitor.node_port too"),
    ("{node_port: 80}", "monitor.node_port: 80 is less than the minimum of 1024"),
    ("{cluster_port: '9411'}", "monitor.cluster_port: '9411' is not of type 'integer'"),
])
def test_bad_monitor_sections_name_the_field(monitor: str, message: str) -> None:
    with pytest.raises(SiteError) as e:
        load_site_text(DEMO.read_text() + f"\nmonitor: {monitor}\n", "site.yaml")
    assert message in str(e.value), str(e.value)


def _panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def test_grafana_dashboard_structure(tmp_path: Path) -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    panels = _panels(dash)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dash["templating"]["list"]}
    occupied: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in ("h", "w", "x", "y")), p["title"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & occupied, f"panel {p['title']!r} overlaps another"
        occupied |= cells
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var in variables, (p["title"], var)
    known = series_names(exported_names(tmp_path))
    recorded = {r["record"] for g in yaml.safe_load(render_prometheus(SETTINGS)["hetero-rules.yml"])["groups"]
                for r in g["rules"] if "record" in r}
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert used - known - recorded == set()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus package not installed")
def test_dashboard_queries_parse_as_promql(tmp_path: Path) -> None:
    """Each panel query, with its variables filled, as a recording rule promtool must parse."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in _panels(dash) for t in p.get("targets", [])]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": re.sub(r"\$\w+", ".*", e)} for i, e in enumerate(exprs)]}]}
    (tmp_path / "q.yml").write_text(yaml.safe_dump(rules))
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "q.yml")], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_settings_from_the_site() -> None:
    site = load_site(ROOT / "site" / "demo" / "site.yaml")
    s = settings_for_site(site, Profile(ctld_host="ctl", snapshot_stale_s=45), node_port=9500)
    accel_nodes = [n for g in site.node_groups if g.accelerators for n in g.nodes]
    assert s.node_targets == [f"{n}:9500" for n in accel_nodes] and s.cluster_targets == ["ctl:9411"]
    assert s.snapshot_stale_s == 45
    assert len(settings_for_site(site, Profile(), all_nodes=True).node_targets) == len(site.all_nodes)
    rules = render_prometheus(s)["hetero-rules.yml"]
    assert "hetero_bridge_snapshot_age_seconds > 45" in rules
