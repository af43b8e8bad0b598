"""The site file's `slurm:` section: an existing installation's controllers,
accounting, release and lines, how they render, and the located errors for bad ones."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf import render_site
from slurm_hetero.conf.profile import Profile
from slurm_hetero.conf.slurmconf import detect_slurm_version, slurm_version_for, slurm_view
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.site import load_site, load_site_text
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.model import Controller

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"

BASE = """\
name: prod
partitions:
  - {name: cpu, default: true}
  - {name: gpu}
node_groups:
  - names: c[01-04]
    architecture: x86_64
    sockets: 2
    cores_per_socket: 8
    memory: 64GB
    partitions: [cpu]
  - names: g[01-02]
    architecture: x86_64
    sockets: 2
    cores_per_socket: 8
    memory: 256GB
    partitions: [gpu]
    accelerators:
      - {model: a100-80gb, count: 4}
"""

SLURM = BASE + """\
slurm:
  cluster_name: prod-east
  controllers: [ctl1(10.0.0.11), ctl2]
  accounting: {host: dbd1, port: 7031, tres: [license/matlab]}
  version: "24.11"
  extra_lines:
    - StateSaveLocation=/srv/slurm/state
    - PrologFlags=Contain,X11
    - SchedulerParameters=bf_continue,bf_window=4320
    - DefMemPerNode=UNLIMITED
    - Include /etc/slurm/site-extra.conf
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    return e.value.lines


def conf(text: str, profile: Profile | None = None) -> str:
    return render_site(load_site_text(text), profile)["slurm.conf"]


def keyed(text: str) -> dict[str, list[str]]:
    """Global `Key=Value` lines of a slurm.conf by key (node/partition lines left out)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z]+)=(.*)$", line)
        if m and m.group(1) not in ("NodeName", "PartitionName"):
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


# --- the model ------------------------------------------------------------------------------------


def test_a_site_without_the_section_renders_the_greenfield_defaults() -> None:
    site = load_site(DEMO)
    assert site.cluster_name == "demo" and site.slurm.controllers == ()
    view = slurm_view(site, Profile())
    assert (view.cluster_name, view.controllers, view.accounting_host, view.accounting_port, view.version) == \
        ("demo", ("slurmctld",), "slurmdbd", 6819, (22, 5))


def test_the_section_is_read_into_the_model() -> None:
    site = load_site_text(SLURM)
    s = site.slurm
    assert site.cluster_name == "prod-east" and site.name == "prod"
    assert s.controllers == (Controller("ctl1", "10.0.0.11"), Controller("ctl2"))
    assert (s.accounting_host, s.accounting_port, s.accounting_tres, s.version) == \
        ("dbd1", 7031, ("license/matlab",), (24, 11))
    assert s.extra_lines[-1] == "Include /etc/slurm/site-extra.conf"


# --- rendering ----------------------------------------------------------------------------------


def test_controllers_accounting_and_cluster_name_are_rendered() -> None:
    text = conf(SLURM)
    k = keyed(text)
    assert k["ClusterName"] == ["prod-east"]
    assert k["SlurmctldHost"] == ["ctl1(10.0.0.11)", "ctl2"]  # primary first, then the backup
    assert k["AccountingStorageHost"] == ["dbd1"] and k["AccountingStoragePort"] == ["7031"]
    assert k["AccountingStorageTRES"][0].endswith(",gres/gpu:a100-80gb,license/matlab")


def test_the_primary_controller_is_the_first() -> None:
    assert slurm_view(load_site_text(SLURM), Profile()).primary_host == "ctl1"
    assert slurm_view(load_site_text(BASE), Profile()).primary_host == "slurmctld"


def test_the_profile_overrides_the_site() -> None:
    text = conf(SLURM, Profile(cluster_name="dev", ctld_host="box", ctld_addr="127.0.0.1",
                               dbd_host="127.0.0.1", dbd_port=24000))
    k = keyed(text)
    assert k["ClusterName"] == ["dev"] and k["SlurmctldHost"] == ["box(127.0.0.1)"]
    assert k["AccountingStorageHost"] == ["127.0.0.1"] and k["AccountingStoragePort"] == ["24000"]


@pytest.mark.parametrize(("version", "profile_version", "prefix"), [
    (None, None, '"gres:"'),          # no release anywhere: 22.05's spelling
    ('"22.05"', None, '"gres:"'),
    ('"23.02"', None, '"gres/"'),     # the first release with gres/
    ('"24.11"', None, '"gres/"'),
    ('"24.11"', (22, 5), '"gres:"'),  # the profile (the dev cluster's detected Slurm) wins
])
def test_the_gres_prefix_follows_the_slurm_version(version: str | None, profile_version: tuple[int, int] | None,
                                                   prefix: str) -> None:
    text = BASE + (f"slurm: {{version: {version}}}\n" if version else "")
    lua = render_site(load_site_text(text), Profile(slurm_version=profile_version))["job_submit.lua"]
    assert f"local GRES_PREFIX = {prefix}" in lua


def test_slurm_version_for_prefers_the_site_then_the_installed_slurm() -> None:
    assert slurm_version_for(load_site_text(SLURM), (22, 5)) == ((24, 11), "the site's slurm.version")
    assert slurm_version_for(load_site_text(BASE), (24, 11)) == ((24, 11), "the installed Slurm")
    assert slurm_version_for(load_site_text(BASE), None)[0] == (22, 5)


def test_detect_slurm_version_is_none_without_slurm() -> None:
    def missing() -> tuple[int, int]:
        raise RuntimeFailure("cannot tell the Slurm version")

    assert detect_slurm_version(missing) is None
    assert detect_slurm_version(lambda: (24, 11)) == (24, 11)


def test_extra_lines_replace_the_template_line_merge_or_pass_through() -> None:
    text = conf(SLURM)
    k = keyed(text)
    assert k["StateSaveLocation"] == ["/srv/slurm/state"]  # replaced in place, once
    assert k["PrologFlags"] == ["Alloc,Contain,X11"]  # the agent's Alloc kept, the site's added
    assert "DefMemPerCPU" not in k and k["DefMemPerNode"] == ["UNLIMITED"]  # Slurm takes one of them
    site_part = text.split("# The site's own settings (slurm.extra_lines), as written.\n")[1].split("\n\n")[0]
    assert site_part.splitlines() == ["SchedulerParameters=bf_continue,bf_window=4320", "DefMemPerNode=UNLIMITED",
                                      "Include /etc/slurm/site-extra.conf"]
    assert text.index("Include /etc/slurm/site-extra.conf") < text.index("\nNodeName=")


def test_the_site_state_folder_holds_the_bridge_snapshot() -> None:
    lua = render_site(load_site_text(SLURM))["job_submit.lua"]
    assert 'SNAPSHOT_PATH = "/srv/slurm/state/hetero-snapshot.lua"' in lua
    # ... unless the profile has its own (the dev cluster's workdir).
    lua = render_site(load_site_text(SLURM), Profile(state_dir="/w/state"))["job_submit.lua"]
    assert 'SNAPSHOT_PATH = "/w/state/hetero-snapshot.lua"' in lua
    assert keyed(conf(SLURM, Profile(state_dir="/w/state")))["StateSaveLocation"] == ["/w/state"]


def test_node_and_partition_options_and_kept_lines() -> None:
    text = BASE.replace("    partitions: [cpu]\n", "    partitions: [cpu]\n    options: {TmpDisk: 800000, State: FUTURE}\n")
    text = text.replace("  - {name: cpu, default: true}",
                        '  - {name: cpu, default: true, options: {AllowGroups: hpc, State: DOWN}, extra_nodes: "v[1-2]"}')
    text += textwrap.dedent("""\
        slurm:
          keep_nodes: ["NodeName=v[1-2] CPUs=8 Gres=gpu:rtx8000:2 State=UNKNOWN"]
          keep_partitions: ["PartitionName=viz Nodes=v[1-2] AllowAccounts=vizlab"]
          gres_lines:
            - AutoDetect=nvml
            - NodeName=g[01-02] Name=gpu Type=a100-80gb File=/dev/nvidia[0-3] Cores=0-15
            - NodeName=v[1-2] Name=gpu Type=rtx8000 File=/dev/nvidia[0-1]
        """)
    files = render_site(load_site_text(text))
    c = files["slurm.conf"]
    assert ("NodeName=c[01-04] CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 "
            "RealMemory=65536 Feature=x86_64 Weight=1 State=FUTURE TmpDisk=800000\n") in c
    assert "\nNodeName=v[1-2] CPUs=8 Gres=gpu:rtx8000:2 State=UNKNOWN\n" in c
    assert re.search(r"\nPartitionName=cpu Nodes=c\[01-04\],v\[1-2\] Default=YES MaxTime=UNLIMITED State=DOWN "
                     r'TRESBillingWeights="[^"]*" AllowGroups=hpc\n', c)
    assert c.rstrip().endswith("PartitionName=viz Nodes=v[1-2] AllowAccounts=vizlab")
    assert keyed(c)["GresTypes"] == ["gpu,rtx8000"] or keyed(c)["GresTypes"] == ["gpu"]
    g = files["gres.conf"]
    assert "File=/dev/nvidia[0-3] Cores=0-15" in g
    assert "NodeName=g[01-02] Name=gpu Type=a100-80gb File=/dev/nvidia[0-3]\n" not in g  # replaced
    assert g.index("AutoDetect=nvml") < g.index("NodeName=g[01-02]")


def test_kept_gres_names_join_gres_types() -> None:
    text = BASE.replace("  - {name: cpu, default: true}", '  - {name: cpu, default: true, extra_nodes: "f1"}')
    text += 'slurm: {keep_nodes: ["NodeName=f1 CPUs=8 Gres=fpga:u250:1"]}\n'
    assert keyed(conf(text))["GresTypes"] == ["fpga,gpu"]


def test_a_site_without_accelerators_writes_no_empty_gres_types() -> None:
    text = BASE.split("  - names: g[01-02]")[0].replace("  - {name: gpu}\n", "")
    assert "GresTypes" not in keyed(conf(text))


def test_the_dev_profile_keeps_its_own_addresses_and_devices() -> None:
    text = BASE.replace("    partitions: [cpu]\n", "    partitions: [cpu]\n    options: {NodeAddr: 10.1.0.5, TmpDisk: 1}\n")
    text += "slurm: {gres_lines: ['NodeName=g[01-02] Name=gpu Type=a100-80gb File=/dev/nvidia[0-3]']}\n"
    site = load_site_text(text)
    ports = {n: 30000 + i for i, n in enumerate(site.all_nodes)}
    files = render_site(site, Profile(node_ports=ports, dev_dir="/w/dev"))
    assert "NodeAddr=10.1.0.5" not in files["slurm.conf"] and " TmpDisk=1\n" in files["slurm.conf"]
    assert "/dev/nvidia" not in files["gres.conf"] and "/w/dev/g01/nvidia[0-3]" in files["gres.conf"]


# --- errors -------------------------------------------------------------------------------------


def test_an_extra_line_may_not_set_what_slurm_hetero_writes() -> None:
    text = BASE + "slurm:\n  extra_lines:\n    - MaxJobCount=50000\n    - SlurmctldHost=ctl9\n    - Prolog=/x\n"
    assert errors_of(text) == [
        "site.yaml:23:7: slurm.extra_lines[1]: SlurmctldHost is written by slurm-hetero: set slurm.controllers "
        "instead\n    hint: one slurm.conf setting per entry, as Slurm spells it "
        "(SchedulerParameters=bf_continue), or Include /path",
        "site.yaml:24:7: slurm.extra_lines[2]: Prolog is written by slurm-hetero: set slurm.prolog (the node "
        "agent joins it) instead\n    hint: one slurm.conf setting per entry, as Slurm spells it "
        "(SchedulerParameters=bf_continue), or Include /path",
    ]


@pytest.mark.parametrize(("line", "message"), [
    ("KillWait=30 MinJobAge=300", "one Key=Value per line: this line sets 2 keys (KillWait, MinJobAge)"),
    ("KillWait=30 # seconds", "'#' starts a comment in Slurm's files"),
    ("KillWait", "'KillWait' is not Key=Value"),
    ("KillWait=", "KillWait= has no value"),
    ("clustername=other", "clustername is written by slurm-hetero: set slurm.cluster_name instead"),
    ("NodeSet=DEFAULT Feature=x", "NodeSet=DEFAULT changes the lines after it"),
    ('ResumeProgram="/usr/sbin/x', "a double quote is not closed"),
])
def test_bad_extra_lines_are_refused_with_their_position(line: str, message: str) -> None:
    lines = errors_of(BASE + f"slurm:\n  extra_lines:\n    - '{line}'\n")
    assert len(lines) == 1 and lines[0].startswith("site.yaml:22:7: slurm.extra_lines[0]: "), lines
    assert message in lines[0]


def test_control_characters_and_line_breaks_are_refused() -> None:
    for value in ('"KillWait=30\\nSlurmUser=root"', '"KillWait=3\\u00070"'):
        lines = errors_of(BASE + f"slurm:\n  extra_lines: [{value}]\n")
        assert len(lines) == 1 and "slurm.extra_lines[0]" in lines[0] and "printable" in lines[0], lines


def test_a_key_set_twice_is_refused() -> None:
    lines = errors_of(BASE + "slurm:\n  extra_lines: [KillWait=30, killwait=60, 'Include /a', 'Include /b']\n")
    assert len(lines) == 1 and "slurm.extra_lines[1]: killwait is set again (first at slurm.extra_lines[0])" in lines[0]


def test_bad_controllers_accounting_and_version() -> None:
    text = BASE + "slurm:\n  controllers: [ctl1, 'ctl 2', ctl1]\n  accounting: {port: 70000}\n  version: 24.11\n"
    lines = errors_of(text)
    assert len(lines) == 3, lines
    assert any("slurm.controllers[1]: 'ctl 2' is not allowed" in ln for ln in lines), lines
    assert any("slurm.accounting.port: 70000 is greater than the maximum of 65535" in ln for ln in lines), lines
    assert any("slurm.version: 24.11 is not one of" in ln and 'quote it: "24.11"' in ln for ln in lines), lines


def test_duplicate_controllers_are_refused() -> None:
    assert errors_of(BASE + "slurm: {controllers: [ctl1, CTL1]}\n") == [
        "site.yaml:20:29: slurm.controllers[1]: controller CTL1 is listed twice\n"
        "    hint: list the primary first, then each backup once"]


def test_kept_lines_are_checked_against_the_node_groups() -> None:
    text = BASE + textwrap.dedent("""\
        slurm:
          keep_nodes:
            - NodeName=c04 CPUs=4
            - NodeName=DEFAULT CPUs=4
            - PartitionName=x Nodes=c01
          keep_partitions: [PartitionName=gpu Nodes=c01]
        """)
    lines = errors_of(text)
    assert "slurm.keep_nodes[0]: node c04 is also in a node group" in lines[0]
    assert "slurm.keep_nodes[1]: NodeName=DEFAULT changes the lines after it" in lines[1]
    assert "slurm.keep_nodes[2]: must start with NodeName=" in lines[2]
    assert "slurm.keep_partitions[0]: partition 'gpu' is defined twice" in lines[3]
    assert len(lines) == 4


def test_extra_nodes_must_be_kept_nodes() -> None:
    text = BASE.replace("  - {name: gpu}", '  - {name: gpu, extra_nodes: "x[1-2]"}')
    text += 'slurm: {keep_nodes: ["NodeName=x1 CPUs=2"]}\n'
    lines = errors_of(text)
    assert len(lines) == 1 and "partitions[1].extra_nodes: node x2 is not defined by slurm.keep_nodes" in lines[0]


def test_kept_gres_lines_cover_whole_node_groups_with_their_types() -> None:
    text = BASE + textwrap.dedent("""\
        slurm:
          gres_lines:
            - NodeName=g01 Name=gpu Type=a100-80gb File=/dev/nvidia[0-3]
            - NodeName=c01 Name=npu Count=8
            - NodeName=g01 Name=gpu Type=a100 File=/dev/nvidia[4-7]
            - Name=gpu Flavor=x
        """)
    assert errors_of(text) == [
        "site.yaml:25:7: slurm.gres_lines[3]: Flavor is not a gres.conf key (allowed: AutoDetect, NodeName, Name, "
        "Type, File, Cores, Count, Flags, Links, MultipleFiles)\n"
        "    hint: a gres.conf line: NodeName=HOSTLIST Name=gpu Type=a100 File=/dev/nvidia[0-3]",
        "site.yaml:22:7: slurm.gres_lines[0]: the gpu lines cover g01 of node_groups[1] (g[01-02]) but not g02\n"
        "    hint: kept gres.conf lines replace the generated lines of whole node groups: cover every node of "
        "the group, or none",
        "site.yaml:24:7: slurm.gres_lines[2]: Type=a100 is not a gpu type of node_groups[1] (g[01-02])\n"
        "    hint: its accelerators' GRES types: a100-80gb",
    ]  # the npu line touches no group that has npu devices


def test_a_gres_line_without_nodename_covers_every_node() -> None:
    text = BASE + "slurm: {gres_lines: ['Name=gpu Type=a100-80gb File=/dev/nvidia[0-3]']}\n"
    gres = render_site(load_site_text(text))["gres.conf"]
    assert "\nName=gpu Type=a100-80gb File=/dev/nvidia[0-3]\n" in gres and "NodeName=g[01-02]" not in gres


def test_options_may_not_set_what_slurm_hetero_writes() -> None:
    text = BASE.replace("    partitions: [cpu]\n", "    partitions: [cpu]\n    options: {Weight: 5, tmpdisk: 1, TmpDisk: 2}\n")
    text = text.replace("  - {name: gpu}", "  - {name: gpu, options: {Nodes: 'x[1-2]'}}")
    lines = errors_of(text)
    assert [ln.split("\n")[0] for ln in lines] == [
        "site.yaml:12:23: node_groups[0].options.Weight: Weight is written by slurm-hetero (Weight orders "
        "nodes by normalized units)",
        "site.yaml:12:47: node_groups[0].options.TmpDisk: TmpDisk and tmpdisk are the same Slurm key",
        "site.yaml:4:34: partitions[1].options.Nodes: Nodes is written by slurm-hetero: set the node groups' "
        "partitions (and extra_nodes) instead",
    ]


def test_option_values_are_single_words() -> None:
    text = BASE.replace("  - {name: gpu}", "  - {name: gpu, options: {QOS: 'a b'}}")
    lines = errors_of(text)
    assert len(lines) == 1 and "partitions[1].options.QOS: 'a b' is not allowed" in lines[0], lines


def test_site_validate_exits_2_on_a_bad_slurm_section(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(BASE + "slurm:\n  extra_lines: [NodeName=x1 CPUs=1]\n")
    result = CliRunner().invoke(main, ["site", "validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "slurm.extra_lines[0]: NodeName is written by slurm-hetero: set node_groups" in result.output
