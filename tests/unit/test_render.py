"""Golden files of the demo site's rendered configuration.

Regenerate after an intended change:  python -m tests.unit.test_render --regenerate
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf import render_site
from slurm_hetero.conf.render import MANIFEST, SITE_COPY, Profile
from slurm_hetero.site import load_site

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
DEMO = ROOT / "site" / "demo" / "site.yaml"


def rendered() -> dict[str, str]:
    return render_site(load_site(DEMO), Profile())


@pytest.mark.parametrize("name", sorted(set(rendered()) - {SITE_COPY}))
def test_golden(name: str) -> None:
    expected = (GOLDEN / name).read_text()
    assert rendered()[name] == expected, f"{name} changed: review, then `make golden`"


def test_the_site_file_is_rendered_beside_the_bridge_unit() -> None:
    files = rendered()
    assert files[SITE_COPY] == DEMO.read_text()
    assert "--site /etc/slurm/site.yaml" in files["hetero-bridge.service"]


def test_cli_render_writes_all_files(tmp_path: Path) -> None:
    out = tmp_path / "conf"
    result = CliRunner().invoke(main, ["conf", "render", str(DEMO), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == sorted([*rendered(), MANIFEST])
    assert (out / "slurm.conf").read_text() == (GOLDEN / "slurm.conf").read_text()
    # Re-rendering over an existing folder replaces the files and leaves no temp folder.
    (out / "gres.conf").write_text("stale")
    result = CliRunner().invoke(main, ["conf", "render", str(DEMO), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "gres.conf").read_text() == (GOLDEN / "gres.conf").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["conf"]


def test_manifest_lists_what_render_wrote_and_matches_the_roles_fallback(tmp_path: Path) -> None:
    out = tmp_path / "conf"
    assert CliRunner().invoke(main, ["conf", "render", str(DEMO), "-o", str(out)]).exit_code == 0
    entries = json.loads((out / MANIFEST).read_text())["files"]
    assert sorted(e["name"] for e in entries) == sorted(p.name for p in out.iterdir() if p.name != MANIFEST)
    by_name = {e["name"]: e for e in entries}
    for e in entries:  # what the manifest says is what render wrote
        assert int(e["mode"], 8) == (out / e["name"]).stat().st_mode & 0o777, e
    assert by_name["job_submit.lua"]["hosts"] == "controller"
    assert by_name["hetero-sampler.service"]["hosts"] == "compute"
    assert by_name["slurm.conf"]["hosts"] == "all"
    # The role's list for folders rendered before manifests existed names the same hosts.
    role = yaml.safe_load((ROOT / "ansible/roles/slurm_hetero/defaults/main.yml").read_text())
    fallback = {f["name"]: f["hosts"] for f in role["slurm_hetero_files_without_manifest"]}
    assert fallback == {name: e["hosts"] for name, e in by_name.items()}
    # Monitoring: each exporter's unit where it runs, the rest for the Prometheus server.
    assert {name: e["hosts"] for name, e in by_name.items() if e["hosts"] == "prometheus"
            or "exporter" in name} == {
        "hetero-node-exporter.service": "compute", "hetero-exporter.service": "controller",
        "hetero-scrape.yml": "prometheus", "hetero-rules.yml": "prometheus",
        "hetero-node-targets.json": "prometheus", "hetero-cluster-targets.json": "prometheus"}


def test_hostlists_are_folded() -> None:
    conf = rendered()["slurm.conf"]
    assert "NodeName=npu-[01-02] " in conf
    assert "PartitionName=cpu Nodes=cpu-arm-[01-02],cpu-x86-[01-02] " in conf


def test_dev_profile_has_a_line_and_port_per_node() -> None:
    site = load_site(DEMO)
    ports = {n: 20000 + i for i, n in enumerate(site.all_nodes)}
    files = render_site(site, Profile(node_ports=ports, dev_dir="/w/dev", config_overrides=True))
    lines = [ln for ln in files["slurm.conf"].splitlines() if ln.startswith("NodeName=")]
    assert len(lines) == len(site.all_nodes) == 11
    assert "NodeName=npu-02 NodeHostname=localhost NodeAddr=127.0.0.1 Port=20010 " in lines[-1]
    assert "SlurmdParameters=config_overrides" in files["slurm.conf"]
    assert "NodeName=npu-02 Name=npu Type=910b File=/w/dev/npu-02/davinci[0-7]" in files["gres.conf"]


if __name__ == "__main__" and "--regenerate" in sys.argv:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        if name != SITE_COPY:
            (GOLDEN / name).write_text(text)
    print(f"wrote {len(rendered())} golden files to {GOLDEN}")
