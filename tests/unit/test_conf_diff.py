"""`conf diff SITE --against DIR`: what a render would change in a live folder, nothing
written; exit 0 no changes, 1 changes, 2 bad input."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from slurm_hetero.conf.cli import conf_diff
from slurm_hetero.conf.diff import (
    diff_files,
    install_places,
    setting_changes,
    unit_setting_changes,
    yaml_setting_changes,
)
from slurm_hetero.conf.render import MODES, render_site, write_files
from slurm_hetero.errors import InputError
from slurm_hetero.site import load_site

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"
OLD = ROOT / "tests" / "data" / "import" / "22.05"


def _group() -> click.Group:
    group = click.Group()
    group.add_command(conf_diff)
    return group


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture(autouse=True)
def no_installed_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command asks the installed Slurm for its release: here, as if there were none."""
    monkeypatch.setattr("slurm_hetero.conf.cli.detect_slurm_version", lambda: None)


@pytest.fixture(autouse=True)
def no_installed_units(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Units and Prometheus files are looked for where the role installs them: here, by
    default, in folders that do not exist (none installed)."""
    monkeypatch.setattr("slurm_hetero.conf.diff.UNITS_DIR", tmp_path / "no-systemd")
    monkeypatch.setattr("slurm_hetero.conf.diff.PROMETHEUS_DIR", tmp_path / "no-prometheus")


@pytest.fixture
def live(tmp_path: Path) -> Path:
    """The demo site as `conf render` writes it (22.05: no slurm.version, no Slurm asked)."""
    out = tmp_path / "etc"
    write_files(render_site(load_site(DEMO)), out)
    return out


def test_a_fresh_render_has_no_changes(live: Path) -> None:
    result = diff_files(render_site(load_site(DEMO)), live, MODES)
    assert result.text == "" and result.changed == ()


def test_changed_missing_and_mode_changed_files(live: Path) -> None:
    conf = (live / "slurm.conf").read_text()
    (live / "slurm.conf").write_text(conf.replace("SlurmdDebug=info\n", "SlurmdDebug=verbose\nKillWait=60\n"))
    (live / "gres.conf").unlink()
    os.chmod(live / "hetero-taskprolog", 0o644)
    result = diff_files(render_site(load_site(DEMO)), live, MODES)
    assert result.changed == ("slurm.conf", "gres.conf", "hetero-taskprolog")
    lines = result.text.splitlines()
    assert f"--- {live}/slurm.conf" in lines and "+++ rendered/slurm.conf" in lines
    assert "-SlurmdDebug=verbose" in lines and "-KillWait=60" in lines and "+SlurmdDebug=info" in lines
    start = lines.index(f"diff {live}/gres.conf rendered/gres.conf")
    assert lines[start + 1:start + 4] == ["new file mode 644", "--- /dev/null", "+++ rendered/gres.conf"]
    start = lines.index(f"diff {live}/hetero-taskprolog rendered/hetero-taskprolog")
    assert lines[start + 1:start + 3] == ["old mode 644", "new mode 755"]


def test_the_command_exits_1_on_changes_and_writes_nothing(live: Path) -> None:
    (live / "cgroup.conf").write_text("ConstrainCores=no\n")
    before = snapshot(live)
    result = CliRunner().invoke(_group(), ["diff", str(DEMO), "--against", str(live)])
    assert result.exit_code == 1, result.output
    assert "-ConstrainCores=no" in result.output
    assert "1 file(s) would change (Slurm 22.05: default (no slurm.version in the site" in result.output
    assert snapshot(live) == before


def test_the_command_exits_0_without_changes(live: Path) -> None:
    result = CliRunner().invoke(_group(), ["diff", str(DEMO), "--against", str(live)])
    assert result.exit_code == 0, result.output
    assert "no changes (Slurm" in result.output


@pytest.mark.parametrize("args", [["--against", "/nonexistent/etc/slurm"], ["--model", "/nonexistent.lua"]])
def test_bad_input_exits_2(live: Path, args: list[str]) -> None:
    argv = ["diff", str(DEMO), *args] + ([] if "--against" in args else ["--against", str(live)])
    result = CliRunner().invoke(_group(), argv)
    assert result.exit_code == 2, result.output
    assert "/nonexistent" in result.output


def test_a_folder_where_a_file_should_be_is_bad_input(live: Path) -> None:
    (live / "oci.conf").unlink()
    (live / "oci.conf").mkdir()
    with pytest.raises(InputError, match=r"oci\.conf: not a regular file"):
        diff_files(render_site(load_site(DEMO)), live, MODES)
    result = CliRunner().invoke(_group(), ["diff", str(DEMO), "--against", str(live)])
    assert result.exit_code == 2, result.output


def test_an_imported_site_against_its_own_files_shows_the_hetero_parts(tmp_path: Path) -> None:
    from slurm_hetero.conf.importer import import_site

    site = tmp_path / "site.yaml"
    site.write_text(import_site(OLD / "slurm.conf", OLD / "gres.conf", gres_map={"a100": "a100-80gb"},
                                version="22.05").text)
    result = CliRunner().invoke(_group(), ["diff", str(site), "--against", str(OLD)])
    assert result.exit_code == 1, result.output
    out = result.output.splitlines()
    # The site's Prolog/Epilog globs stay: the agent is one more file of their folders.
    assert "+Prolog=/etc/slurm/prolog.d/*" in out and "+Epilog=/etc/slurm/epilog.d/*" in out
    assert not any(ln.startswith("+Prolog=/usr/local/bin") for ln in out)
    assert "-PrologFlags=Contain,X11" in out and "+PrologFlags=Alloc,Contain,X11" in out
    # plugstack.conf: the hetero plugin added, the site's pyxis and include untouched.
    start = out.index(f"diff {OLD}/plugstack.conf rendered/plugstack.conf")
    body = out[start:out.index(f"diff {OLD}/job_submit.lua rendered/job_submit.lua")]
    assert any(ln.startswith("+required /usr/local/lib/slurm-hetero/hetero.so ") for ln in body)
    assert not any(ln.startswith("-") and not ln.startswith(("---", "-#")) for ln in body), body
    # Setting by setting, what changes and why (stderr; CliRunner mixes it in).
    assert "slurm.conf: 6 setting(s) would change:" in out
    assert ("  PrologFlags: Contain,X11 -> Alloc,Contain,X11 (Alloc: the node agent sets the job's devices "
            "when its allocation starts)") in out
    assert "  JobRequeue: (not set) -> 1 (Slurm's default: no change)" in out
    assert not any(ln.startswith(("  Prolog:", "  Epilog:", "  AccountingStorageEnforce:", "  JobAcctGatherType:"))
                   for ln in out)  # the site's own values, kept
    # job_submit.lua: the bridge's, which loads the site's rules from job_submit.site.lua.
    assert f'+site_rules({{ script = "{OLD.resolve()}/job_submit.site.lua", order = "site-first" }})' in out


def test_the_release_is_detected_when_the_site_names_none(live: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("slurm_hetero.conf.cli.detect_slurm_version", lambda: (24, 11))
    result = CliRunner().invoke(_group(), ["diff", str(DEMO), "--against", str(live)])
    assert result.exit_code == 1, result.output
    assert '-local GRES_PREFIX = "gres:"' in result.output and '+local GRES_PREFIX = "gres/"' in result.output
    assert "(Slurm 24.11: the installed Slurm)" in result.output


def test_enforcement_the_site_had_is_kept_and_what_tiers_add_is_explained(tmp_path: Path) -> None:
    """AccountingStorageEnforce=associations stays so, until a tier caps accelerators: then
    limits is added, and the rendered file and the diff say why."""
    text = DEMO.read_text()
    plain = text.replace("node_agent:", "slurm:\n  accounting:\n    enforce: [associations]\nnode_agent:", 1)
    site = tmp_path / "site.yaml"
    site.write_text(re.sub(r"(?m)^ +limits: .*\n", "", plain))  # no tier caps anything
    live = tmp_path / "etc"
    write_files(render_site(load_site(site)), live)
    assert "\nAccountingStorageEnforce=associations\n" in (live / "slurm.conf").read_text()
    site.write_text(plain)  # the demo's diamond tier caps each pool at half
    result = CliRunner().invoke(_group(), ["diff", str(site), "--against", str(live)])
    out = result.output.splitlines()
    assert "-AccountingStorageEnforce=associations" in out and "+AccountingStorageEnforce=associations,limits" in out
    assert ("+# AccountingStorageEnforce: limits added to the site's own: tier diamond caps accelerators "
            "(QoS GrpTRES), which Slurm applies only with limits.") in out


def test_no_enforcement_stays_none(tmp_path: Path) -> None:
    text = re.sub(r"(?m)^ +limits: .*\n", "", DEMO.read_text())
    site = tmp_path / "site.yaml"
    site.write_text(text.replace("node_agent:", "slurm:\n  accounting:\n    enforce: []\nnode_agent:", 1))
    assert "AccountingStorageEnforce" not in render_site(load_site(site))["slurm.conf"]


def test_setting_changes_say_why() -> None:
    live = "ClusterName=a\nSlurmctldHost=h1\nSlurmctldHost=h2\nAccountingStorageEnforce=associations\n" \
           "SelectType=select/linear\nKillWait=30\nNodeName=n1 CPUs=2\n"
    rendered = ("ClusterName=a\nSlurmctldHost=h1\n# Accounting: general words\n"
                "# AccountingStorageEnforce: limits added to the site's own: tier x caps accelerators.\n"
                "AccountingStorageEnforce=associations,limits\nSelectType=select/cons_tres # GRES\n"
                "NodeName=n1 CPUs=4\n")
    assert setting_changes(rendered, live) == [
        "SlurmctldHost: h1 h2 -> h1 (slurm-hetero writes it from slurm.controllers)",
        "AccountingStorageEnforce: associations -> associations,limits (limits added to the site's own: tier x "
        "caps accelerators.)",
        "SelectType: select/linear -> select/cons_tres (GRES types need select/cons_tres)",
        "KillWait: 30 -> (not set)",
    ]
    assert setting_changes(live, live) == []


def test_a_live_include_that_is_gone_leaves_the_diff_standing(live: Path) -> None:
    (live / "slurm.conf").write_text((live / "slurm.conf").read_text() + "Include gone.conf\n")
    result = CliRunner().invoke(_group(), ["diff", str(DEMO), "--against", str(live)])
    assert result.exit_code == 1, result.output
    assert "-Include gone.conf" in result.output
    assert "slurm.conf: settings not compared one by one: " in result.output and "gone.conf" in result.output


# ---- units and Prometheus files, where the role installs them ---------------------------------

def installed(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The demo's units and Prometheus files as the role installs them, all as rendered."""
    files = render_site(load_site(DEMO))
    units, prom = tmp_path / "systemd", tmp_path / "prometheus"
    places = install_places(files, units, prom)
    for name, folder in places.items():
        write_files({name: files[name]}, folder)
    return units, prom, files


def diff_cli(live: Path, units: Path, prom: Path) -> tuple[int, list[str]]:
    result = CliRunner().invoke(_group(), ["diff", str(DEMO), "--against", str(live), "--units-dir", str(units),
                                           "--prometheus-dir", str(prom)])
    return result.exit_code, result.output.splitlines()


def test_units_and_prometheus_files_are_compared_where_the_role_installs_them(live: Path, tmp_path: Path) -> None:
    units, prom, files = installed(tmp_path)
    assert sorted(p.name for p in units.iterdir()) == ["hetero-bridge.service", "hetero-exporter.service",
                                                      "hetero-node-exporter.service", "hetero-sampler.service"]
    assert sorted(p.name for p in prom.iterdir()) == ["hetero-cluster-targets.json", "hetero-node-targets.json",
                                                     "hetero-rules.yml", "hetero-scrape.yml"]
    # What the /etc/slurm copies of them say no longer counts: they are not installed there.
    (live / "hetero-node-exporter.service").write_text("[Service]\nUser=root\n")
    code, out = diff_cli(live, units, prom)
    assert code == 0 and len(out) == 1 and out[0].startswith("no changes ("), out

    # An older node exporter unit: another port, a setting more, one less, a second Environment.
    node = units / "hetero-node-exporter.service"
    text = node.read_text()
    node.write_text(text.replace("--port 9410", "--port 9100").replace("Nice=5\n", "Nice=10\nEnvironment=X=1\n")
                    .replace("MemoryMax=256M\n", ""))
    # The rules: the first alert waits longer; the node targets: one node gone, one foreign.
    rules = yaml.safe_load(files["hetero-rules.yml"])
    group = next(g for g in rules["groups"] if any("alert" in r for r in g["rules"]))
    alert = next(r for r in group["rules"] if "alert" in r)
    rendered_for = alert.get("for", "(not set)")
    alert["for"] = "77m"
    (prom / "hetero-rules.yml").write_text(yaml.safe_dump(rules))
    targets = json.loads(files["hetero-node-targets.json"])
    gone = targets[0]["targets"].pop()
    targets[0]["targets"].append("old-01:9410")
    (prom / "hetero-node-targets.json").write_text(json.dumps(targets))
    (units / "hetero-sampler.service").unlink()  # not on this host
    (prom / "hetero-cluster-targets.json").unlink()

    code, out = diff_cli(live, units, prom)
    assert code == 1, out
    assert f"diff {node} rendered/hetero-node-exporter.service" in out
    assert any(ln.startswith("-ExecStart=") and "--port 9100" in ln for ln in out)
    assert "hetero-node-exporter.service: 4 setting(s) would change:" in out
    exec_start = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))[len("ExecStart="):]
    assert f"  [Service] ExecStart: {exec_start.replace('--port 9410', '--port 9100')} -> {exec_start}" in out
    assert "  [Service] Environment: SLURM_CONF=/etc/slurm/slurm.conf ; X=1 -> SLURM_CONF=/etc/slurm/slurm.conf" in out
    assert "  [Service] Nice: 10 -> 5" in out and "  [Service] MemoryMax: (not set) -> 256M" in out
    assert "hetero-rules.yml: 1 setting(s) would change:" in out
    assert f"  groups[{group['name']}].rules[{alert['alert']}].for: 77m -> {rendered_for}" in out
    assert "hetero-node-targets.json: 1 setting(s) would change:" in out
    assert f"  [0].targets: adds {gone}; removes old-01:9410" in out
    # Not installed here: listed, not a change (the role installs each only where it is on).
    start = out.index("not installed here, so not compared (2; the Ansible role installs each only on the hosts "
                      "and with the options that turn it on):")
    assert out[start + 1:start + 3] == [f"  {units}/hetero-sampler.service", f"  {prom}/hetero-cluster-targets.json"]
    assert out[-1].startswith("3 file(s) would change (")
    assert not any("hetero-bridge.service" in ln or "hetero-scrape.yml" in ln for ln in out)


def test_an_installed_prometheus_file_that_is_not_yaml_leaves_the_diff_standing(live: Path, tmp_path: Path) -> None:
    units, prom, _ = installed(tmp_path)
    (prom / "hetero-rules.yml").write_text("groups: [\n")
    code, out = diff_cli(live, units, prom)
    assert code == 1 and "+groups:" in out
    assert any(ln.startswith("hetero-rules.yml: settings not compared one by one: the installed file is not YAML")
               for ln in out), out


def test_nothing_installed_but_the_slurm_files_is_no_change(live: Path, tmp_path: Path) -> None:
    code, out = diff_cli(live, tmp_path / "none", tmp_path / "none")
    assert code == 0, out
    assert "not installed here, so not compared (8; the Ansible role installs each only on the hosts and with " \
           "the options that turn it on):" in out


def test_unit_settings_follow_systemds_syntax() -> None:
    live = ("# a comment\n[Unit]\nDescription=old\n[Service]\nExecStartPre=/bin/a\nExecStartPre=/bin/b\n"
            "ExecStart=/bin/run \\\n  --port 1\n; another comment\nEnvironment=A=1\nEnvironment=\nEnvironment=B=2\n")
    rendered = ("[Unit]\nDescription=old\n\n[Service]\nExecStartPre=/bin/a\nExecStart=/bin/run --port 1\n"
                "Environment=B=2\n[Install]\nWantedBy=multi-user.target\n")
    assert unit_setting_changes(rendered, live) == [
        "[Service] ExecStartPre: /bin/a ; /bin/b -> /bin/a",  # a list: each value counts
        "[Install] WantedBy: (not set) -> multi-user.target",
    ]  # the continued line is the same command; an empty assignment empties the list
    assert unit_setting_changes(live, live) == []


def test_prometheus_settings_name_jobs_and_rules() -> None:
    live = ("scrape_configs:\n- job_name: a\n  scrape_interval: 10s\n"
            "groups:\n- name: g\n  rules:\n  - alert: X\n    expr: up == 0\n    labels: {severity: warning}\n"
            "  - alert: X\n    expr: up == 0\n    labels: {severity: page}\n")
    rendered = ("scrape_configs:\n- job_name: a\n  scrape_interval: 15s\n- job_name: b\n  scrape_interval: 60s\n"
                "groups:\n- name: g\n  rules:\n  - alert: X\n    expr: >-\n      up\n      == 0\n"
                "    labels: {severity: warning}\n  - alert: X\n    expr: up == 0\n    labels: {severity: critical}\n")
    assert yaml_setting_changes(rendered, live) == [
        "scrape_configs[a].scrape_interval: 10s -> 15s",
        "scrape_configs[b].job_name: (not set) -> b",
        "scrape_configs[b].scrape_interval: (not set) -> 60s",
        "groups[g].rules[X#2].labels.severity: page -> critical",  # the first X's expression: the same but for layout
    ]
    with pytest.raises(InputError, match="the rendered file is not YAML"):
        yaml_setting_changes("a: [", live)
