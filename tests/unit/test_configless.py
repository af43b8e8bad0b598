"""Configless sites: where node-side code finds slurm-hetero's files (conf/nodefiles.py),
what `conf import` notes and what `conf render` writes and says for such a site. The real
configless cluster is tests/integration/test_configless.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf.importer import import_site
from slurm_hetero.conf.nodefiles import (
    AGENT_CONFIG,
    NODE_DIR,
    NODE_FILES,
    NodeFileMissing,
    candidates,
    find_node_file,
    slurm_conf_dir,
)
from slurm_hetero.conf.render import (
    MANIFEST,
    OUTPUTS,
    Profile,
    manifest,
    node_files_note,
    node_hooks,
    render_site,
)
from slurm_hetero.containers.gres import autodetect_of
from slurm_hetero.containers.nodeconf import NodeConfig
from slurm_hetero.devcluster.cluster import with_configless
from slurm_hetero.energy import agent
from slurm_hetero.energy.state import config_path
from slurm_hetero.monitor.cli import node_exporter
from slurm_hetero.site import Site, load_site

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"
IMPORTS = ROOT / "tests" / "data" / "import"


# --- the lookup order ------------------------------------------------------------------------

@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """A configless cache (SLURM_CONF's folder), a node folder and an override file."""
    out = {"cache": tmp_path / "conf-cache", "node": tmp_path / "slurm-hetero", "own": tmp_path / "own.json"}
    for d in (out["cache"], out["node"]):
        d.mkdir()
    (out["cache"] / "slurm.conf").write_text("ClusterName=x\n")
    return out


def env_of(p: dict[str, Path], **more: str) -> dict[str, str]:
    return {"SLURM_CONF": str(p["cache"] / "slurm.conf"), "SLURM_HETERO_NODE_DIR": str(p["node"]), **more}


def test_beside_slurm_conf_first_then_the_node_folder(places: dict[str, Path]) -> None:
    env = env_of(places)
    (places["node"] / AGENT_CONFIG).write_text("{}")
    assert find_node_file(AGENT_CONFIG, "SLURM_HETERO_AGENT", env) == places["node"] / AGENT_CONFIG
    # A site that is not configless keeps its file beside slurm.conf, which still wins.
    (places["cache"] / AGENT_CONFIG).write_text("{}")
    assert find_node_file(AGENT_CONFIG, "SLURM_HETERO_AGENT", env) == places["cache"] / AGENT_CONFIG


def test_an_explicit_override_is_the_only_place(places: dict[str, Path]) -> None:
    (places["node"] / AGENT_CONFIG).write_text("{}")
    env = env_of(places, SLURM_HETERO_AGENT=str(places["own"]))
    with pytest.raises(NodeFileMissing) as e:  # the admin named a file: nothing else stands in
        find_node_file(AGENT_CONFIG, "SLURM_HETERO_AGENT", env)
    assert e.value.looked == [places["own"]]
    places["own"].write_text("{}")
    assert find_node_file(AGENT_CONFIG, "SLURM_HETERO_AGENT", env) == places["own"]


def test_missing_names_every_path_and_stays_a_file_not_found(places: dict[str, Path]) -> None:
    with pytest.raises(FileNotFoundError) as e:
        find_node_file(AGENT_CONFIG, "SLURM_HETERO_AGENT", env_of(places))
    assert str(e.value) == (f"{AGENT_CONFIG}: not found (looked at {places['cache'] / AGENT_CONFIG}, "
                            f"{places['node'] / AGENT_CONFIG})")


def test_defaults_without_any_environment() -> None:
    assert candidates(AGENT_CONFIG, "SLURM_HETERO_AGENT", {}) == [
        Path("/etc/slurm") / AGENT_CONFIG, Path(NODE_DIR) / AGENT_CONFIG]
    # Where SLURM_CONF already is the node folder, it is looked at once.
    assert candidates("x", env={"SLURM_CONF": f"{NODE_DIR}/slurm.conf"}) == [Path(NODE_DIR) / "x"]


def test_slurms_own_files_beside_slurm_conf() -> None:
    assert slurm_conf_dir({"SLURM_CONF": "/run/slurm/conf/slurm.conf"}) == Path("/run/slurm/conf")


def test_the_agent_reads_through_it(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env_of(places).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_HETERO_AGENT", raising=False)
    with pytest.raises(NodeFileMissing):
        config_path()
    (places["node"] / AGENT_CONFIG).write_text("{}")
    assert config_path() == places["node"] / AGENT_CONFIG


def test_the_prolog_says_where_it_looked_and_exits_0(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    for key, value in env_of(places, SLURM_JOB_ID="7", SLURMD_NODENAME="n1").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_HETERO_AGENT", raising=False)
    assert agent.prolog_main() == 0  # never a failed job or a drained node
    assert (f"prolog job 7 on n1 failed: {AGENT_CONFIG}: not found (looked at {places['cache'] / AGENT_CONFIG}, "
            f"{places['node'] / AGENT_CONFIG})") in caplog.text


def test_admin_commands_name_every_path(places: dict[str, Path]) -> None:
    env: dict[str, str | None] = {**env_of(places), "SLURM_HETERO_AGENT": None}
    looked = f"looked at {places['cache'] / AGENT_CONFIG}, {places['node'] / AGENT_CONFIG}"
    r = CliRunner().invoke(main, ["node", "restore", "--node", "n1"], env=env)
    assert r.exit_code == 2 and looked in r.output, r.output
    r = CliRunner().invoke(node_exporter, ["--node", "n1", "--port", "0"], env=env)
    assert r.exit_code == 2 and looked in r.output, r.output


def test_the_container_side_asks_slurm_with_the_jobs_own_conf(places: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert NodeConfig({"slurm_conf": None}).slurm_conf is None
    (places["cache"] / "gres.conf").write_text("NodeName=n1 Name=gpu AutoDetect=nvml\n")
    monkeypatch.setenv("SLURM_CONF", str(places["cache"] / "slurm.conf"))
    assert autodetect_of(None, "n1") == "nvml"


# --- render and import --------------------------------------------------------------------------

def configless(site: Site) -> Site:
    return dataclasses.replace(site, slurm=dataclasses.replace(
        site.slurm, extra_lines=(*site.slurm.extra_lines, "SlurmctldParameters=enable_configless")))


def test_configless_is_read_from_the_sites_slurmctld_parameters() -> None:
    demo = load_site(DEMO)
    assert not demo.slurm.configless and configless(demo).slurm.configless
    assert with_configless(demo).slurm.configless and with_configless(configless(demo)) == configless(demo)
    mixed = dataclasses.replace(demo, slurm=dataclasses.replace(
        demo.slurm, extra_lines=("SlurmctldParameters=idle_on_node_suspend",)))
    assert with_configless(mixed).slurm.extra_lines == (
        "SlurmctldParameters=idle_on_node_suspend,enable_configless",)


def test_render_names_the_node_folder_where_nodes_read_our_files() -> None:
    demo = load_site(DEMO)
    plain, files = render_site(demo, Profile()), render_site(configless(demo), Profile())
    assert "HealthCheckProgram=/etc/slurm/hetero-healthcheck" in plain["slurm.conf"]
    assert f"HealthCheckProgram={NODE_DIR}/hetero-healthcheck" in files["slurm.conf"]
    assert f"TaskProlog={NODE_DIR}/hetero-taskprolog" in files["slurm.conf"]
    assert f"--conf {NODE_DIR}/hetero-containers.json" in files["oci.conf"]
    assert f"--conf {NODE_DIR}/hetero-containers.json" in files["hetero-taskprolog"]
    assert json.loads(files["hetero-containers.json"])["slurm_conf"] is None
    # No /etc/slurm on the node: Slurm's commands find slurmd's cache themselves.
    for name in ("hetero-healthcheck", "hetero-sampler.service", "hetero-node-exporter.service"):
        assert "SLURM_CONF=" in plain[name] and "SLURM_CONF=" not in files[name], name
    # The controller keeps its files: the bridge and the cluster exporter read them there.
    assert files["hetero-bridge.service"] == plain["hetero-bridge.service"]
    assert files["hetero-exporter.service"] == plain["hetero-exporter.service"]
    assert set(NODE_FILES) <= set(OUTPUTS) | {AGENT_CONFIG}


def test_a_site_prolog_folder_of_ours_is_in_the_node_folder() -> None:
    demo = load_site(DEMO)
    site = configless(dataclasses.replace(demo, slurm=dataclasses.replace(
        demo.slurm, prolog="/usr/local/sbin/site-prolog")))
    prolog, _ = node_hooks(site, Profile())
    assert prolog.value == f"{NODE_DIR}/prolog.d/*"
    assert all(path.startswith(f"{NODE_DIR}/prolog.d/") for path, _ in prolog.links)
    assert Profile(node_dir="/opt/hetero").node_folder(True) == "/opt/hetero"


def test_manifest_and_render_say_which_files_nodes_need(tmp_path: Path) -> None:
    files = render_site(configless(load_site(DEMO)), Profile())
    assert "node_dir" not in json.loads(manifest(files))  # not configless: no node folder
    doc = json.loads(manifest(files, node_dir=NODE_DIR))
    assert doc["node_dir"] == NODE_DIR and doc["node_files"] == list(NODE_FILES)
    note = node_files_note(configless(load_site(DEMO)), Profile(), files)
    assert note is not None and f"in {NODE_DIR}" in note and all(n in note for n in NODE_FILES)
    assert node_files_note(load_site(DEMO), Profile(), files) is None

    data = yaml.safe_load(DEMO.read_text())
    data.setdefault("slurm", {})["extra_lines"] = ["SlurmctldParameters=enable_configless"]
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, ["conf", "render", str(tmp_path / "site.yaml"), "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "configless site" in r.output and NODE_DIR in r.output
    assert json.loads((tmp_path / "out" / MANIFEST).read_text())["node_dir"] == NODE_DIR


def test_import_notes_a_configless_site() -> None:
    notes = import_site(IMPORTS / "24.11" / "slurm.conf", IMPORTS / "24.11" / "gres.conf", version="24.11").notes
    mine = [n for n in notes if "enable_configless" in n]
    assert len(mine) == 1 and mine[0].startswith(f"{IMPORTS / '24.11' / 'slurm.conf'}:6: ")
    assert f"go to {NODE_DIR} on every compute node" in mine[0] and AGENT_CONFIG in mine[0]
    old = import_site(IMPORTS / "22.05" / "slurm.conf", IMPORTS / "22.05" / "gres.conf", version="22.05").notes
    assert not any("configless" in n for n in old)
