"""The site's `power:` section: loaded into Site.power, checked with located errors, and
rendered as Slurm's power-saving settings plus the three programs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf.render import MODES, Profile, render_site
from slurm_hetero.site import load_site, load_site_text
from slurm_hetero.site.load import SiteError

ROOT = Path(__file__).resolve().parents[2]
BASE = """\
name: p
partitions:
  - {name: cpu, default: true}
  - {name: login}
node_groups:
  - names: c[1-3]
    architecture: x86_64
    sockets: 1
    cores_per_socket: 4
    memory: 8GB
    partitions: [cpu]
  - names: l1
    architecture: x86_64
    sockets: 1
    cores_per_socket: 4
    memory: 8GB
    partitions: [login]
"""
IPMI = """\
power:
  enabled: true
  method: ipmi
  suspend_time: 900
  exclude_partitions: [login]
  exclude_nodes: c1
  ipmi: {bmc: "{node}-bmc", user: admin, password_file: /etc/slurm/bmc.pass}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    assert e.value.exit_code == 2
    return e.value.lines


def test_loaded() -> None:
    p = load_site_text(BASE + IPMI).power
    assert (p.enabled, p.method, p.suspend_time, p.bmc, p.user, p.password_file) == (
        True, "ipmi", 900, "{node}-bmc", "admin", "/etc/slurm/bmc.pass")
    assert p.exclude_partitions == ("login",) and p.exclude_nodes == "c1"


def test_off_by_default() -> None:
    assert load_site_text(BASE).power.enabled is False
    assert load_site(ROOT / "site" / "demo").power.enabled is False  # golden files stay


@pytest.mark.parametrize(("power", "expected"), [
    ("power: {enabled: true, method: ipmi}",
     "power.ipmi: method ipmi needs its subsection power.ipmi"),
    ("power: {enabled: true, method: redfish, redfish: {url: 'https://{node}/redfish/v1/Systems/1'}}",
     "power.redfish.user: the BMC's user is required"),
    ("power: {enabled: true, method: command, command: {suspend: [node-off], resume: [node-on]},\n"
     "        ipmi: {bmc: '{node}-bmc'}}",
     "power.ipmi: power.ipmi is given but method is command"),
    ("power: {enabled: true, method: devcluster, exclude_partitions: [gpu]}",
     "power.exclude_partitions[0]: unknown partition 'gpu'"),
    ("power: {enabled: true, method: devcluster, exclude_nodes: 'c[3-4]'}",
     "power.exclude_nodes: nodes not in this site: 'c4'"),
    ("power: {enabled: true, method: devcluster, boot_delay: 60, resume_timeout: 30}",
     "power.boot_delay: boot_delay 60 s is not under resume_timeout 30 s"),
    ("power: {enabled: true, method: ipmi, ipmi: {bmc: '{node}-bmc', user: a,\n"
     "        password_file: /etc/../tmp/pw}}",
     "power.ipmi.password_file: '/etc/../tmp/pw' is not a plain absolute path"),
    ("power: {enabled: true}", "power.method: power saving needs a method"),
])
def test_located_errors(power: str, expected: str) -> None:
    lines = errors_of(BASE + power + "\n")
    # Located: the YAML line of the key (or of power: when the key is missing), then the path.
    assert any(line.startswith("site.yaml:") and line.split(": ", 1)[1].startswith(expected)
               for line in lines), lines


def test_schema_refuses_relative_password_file() -> None:
    lines = errors_of(BASE + "power: {enabled: true, method: ipmi, ipmi: {bmc: '{node}-bmc', user: a, "
                      "password_file: bmc.pass}}\n")
    assert "power.ipmi.password_file" in lines[0] and "must match" in lines[0], lines


def test_kept_partition_must_not_suspend_by_itself() -> None:
    site = BASE + IPMI + "slurm:\n  keep_partitions: ['PartitionName=old Nodes=c1']\n"
    assert any("slurm.keep_partitions[0]: with power saving on, a kept partition needs "
               "SuspendTime=INFINITE" in line for line in errors_of(site))


def test_rendered_settings_and_programs() -> None:
    files = render_site(load_site_text(BASE + IPMI), Profile(conf_dir="/etc/slurm", log_dir="/var/log/slurm"))
    conf = files["slurm.conf"]
    for line in ("SuspendProgram=/etc/slurm/hetero-power-suspend", "ResumeProgram=/etc/slurm/hetero-power-resume",
                 "ResumeFailProgram=/etc/slurm/hetero-power-resume-failed", "SuspendTime=900",
                 "SuspendTimeout=120", "ResumeTimeout=600", "SuspendExcNodes=c1", "SuspendExcParts=login"):
        assert f"\n{line}\n" in conf, line
    parts = [ln for ln in conf.splitlines() if ln.startswith("PartitionName=")]
    assert len(parts) == 2 and all(" SuspendTime=INFINITE" in ln for ln in parts)  # the keeper decides
    assert "State=CLOUD" not in conf
    script = files["hetero-power-suspend"]
    assert script.startswith("#!/bin/sh\n")
    assert ("exec /usr/local/bin/slurm-hetero power suspend --site /etc/slurm/site.yaml --state-dir "
            "/var/spool/slurmctld --log /var/log/slurm/hetero-power.log -- \"$1\" </dev/null") in script
    assert "power resume " in files["hetero-power-resume"]
    assert "power resume-failed " in files["hetero-power-resume-failed"]
    assert "--state-dir" not in files["hetero-power-resume-failed"]
    assert all(MODES[n] == 0o755 for n in ("hetero-power-suspend", "hetero-power-resume"))


def test_nothing_rendered_when_off() -> None:
    files = render_site(load_site_text(BASE))
    assert "Suspend" not in files["slurm.conf"] and not [n for n in files if "power" in n]


def test_shell_hostile_paths_stay_one_word() -> None:
    files = render_site(load_site_text(BASE + IPMI), Profile(conf_dir="/etc/sl urm;x", log_dir="/l$(id)"))
    assert "--site '/etc/sl urm;x/site.yaml'" in files["hetero-power-resume"]
    assert "--log '/l$(id)/hetero-power.log'" in files["hetero-power-resume"]


def test_cli_refuses_a_site_without_power(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(BASE)
    r = CliRunner().invoke(main, ["power", "suspend", "--site", str(site), "c1"])
    assert r.exit_code == 2 and "power.enabled is not true" in r.output, r.output


GPU_GROUP = """\
  - names: g[1-2]
    architecture: x86_64
    sockets: 2
    cores_per_socket: 4
    memory: 8GB
    partitions: [cpu]
    accelerators: [{model: a100-80gb, count: 4}]
"""


def test_idle_power_measured_or_estimated() -> None:
    from slurm_hetero.site.power import IdlePower, idle_power, pool_idle_power

    measured = BASE.replace("    partitions: [cpu]\n", "    partitions: [cpu]\n    idle_watts: 95\n", 1)
    site = load_site_text(measured + GPU_GROUP)
    cpu, login, gpu = site.node_groups
    assert idle_power(cpu) == IdlePower(95.0, estimated=False)
    assert idle_power(login) == IdlePower(100.0, estimated=True)  # 50 W + 50 W x 1 socket
    # 50 + 2 x 50 W host, four A100s at 15% of their 400 W TDP (the catalog has no idle figure)
    assert idle_power(gpu) == IdlePower(150.0 + 4 * 60.0, estimated=True)
    # the CPU pool mixes three measured nodes and one estimated: the mean, said estimated
    assert pool_idle_power(site) == {"cpu@x86_64": IdlePower(round((3 * 95 + 100) / 4, 1), True),
                                     "a100-80gb@x86_64": IdlePower(390.0, True)}
    # the catalog's own idle figure, where the site gives one, replaces the share of TDP
    own = load_site_text(BASE + GPU_GROUP + "catalog:\n  a100-80gb: {idle_watts: 50}\n")
    assert idle_power(own.node_groups[2]) == IdlePower(150.0 + 4 * 50.0, estimated=True)


def test_idle_power_errors() -> None:
    over = errors_of(BASE + GPU_GROUP + "catalog:\n  a100-80gb: {idle_watts: 450}\n")
    assert len(over) == 1 and "catalog.a100-80gb.idle_watts: idle_watts 450 is above the model's " \
        "tdp_watts 400" in over[0] and "at most its TDP" in over[0]
    neg = errors_of(BASE.replace("    partitions: [cpu]\n", "    partitions: [cpu]\n    idle_watts: 0\n", 1))
    assert neg == ["site.yaml:12:17: node_groups[0].idle_watts: 0 is less than or equal to the minimum of 0"]


def test_site_validate_shows_the_idle_draw(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(BASE + GPU_GROUP + IPMI)
    r = CliRunner().invoke(main, ["site", "validate", str(site)])
    assert r.exit_code == 0, r.output
    assert ("power saving: idle draw per node, by pool: cpu@x86_64 100 W (estimated), a100-80gb@x86_64 "
            "390 W (estimated); set node_groups[].idle_watts to what the BMCs read") in " ".join(r.output.split())
    site.write_text(BASE)  # power saving off: nothing to say about idle draw
    off = CliRunner().invoke(main, ["site", "validate", str(site)])
    assert off.exit_code == 0 and "idle draw" not in off.output
