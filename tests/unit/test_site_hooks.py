"""The site's own hooks in the site file (slurm.job_submit, prolog, epilog, task_prolog,
plugstack_lines): how they are checked, rendered beside slurm-hetero's, and imported."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf import render_site
from slurm_hetero.conf.importer import import_site
from slurm_hetero.conf.profile import Profile
from slurm_hetero.conf.render import manifest, node_hooks
from slurm_hetero.site import load_site_text
from slurm_hetero.site.hooks import AGENT_ENTRY, joined
from tests.unit.test_site_slurm_section import BASE, errors_of, keyed

AGENT = str(Profile().prolog)  # the node agent's Prolog program


def site_text(slurm: str) -> str:
    return BASE + "slurm:\n" + textwrap.indent(textwrap.dedent(slurm), "  ")


def rendered(slurm: str) -> dict[str, str]:
    return render_site(load_site_text(site_text(slurm)), Profile())


# ---- Prolog / Epilog ---------------------------------------------------------------------


def test_without_a_site_hook_the_agent_is_the_prolog() -> None:
    k = keyed(render_site(load_site_text(BASE), Profile())["slurm.conf"])
    assert k["Prolog"] == [AGENT] and k["Epilog"] == [Profile().epilog]


def test_a_site_glob_is_kept_and_the_agent_joins_its_folder() -> None:
    files = rendered("prolog: /etc/slurm/prolog.d/*\nepilog: /etc/slurm/epilog.d/*.sh\n")
    k = keyed(files["slurm.conf"])
    assert k["Prolog"] == ["/etc/slurm/prolog.d/*"] and k["Epilog"] == ["/etc/slurm/epilog.d/*.sh"]
    assert f"#   /etc/slurm/epilog.d/{AGENT_ENTRY}.sh -> {Profile().epilog}" in files["slurm.conf"]


def test_a_site_program_gets_a_folder_with_the_agent_first() -> None:
    site = load_site_text(site_text("prolog: /opt/site/prolog.sh\n"))
    prolog, epilog = node_hooks(site, Profile(conf_dir="/etc/slurm"))
    assert prolog.value == "/etc/slurm/prolog.d/*"
    assert prolog.links == ((f"/etc/slurm/prolog.d/{AGENT_ENTRY}", AGENT),
                            ("/etc/slurm/prolog.d/site-prolog.sh", "/opt/site/prolog.sh"))
    # Slurm runs a folder in reverse alphabetical order: the agent's name sorts last, runs first.
    assert sorted(name.rsplit("/", 1)[1] for name, _ in prolog.links)[-1] == AGENT_ENTRY
    assert epilog.value == Profile().epilog and epilog.links == ()


def test_the_manifest_lists_the_links_for_compute_nodes() -> None:
    site = load_site_text(site_text("prolog: /etc/slurm/prolog.d/*\njob_submit: {script: /etc/slurm/rules.lua}\n"))
    data = json.loads(manifest(["slurm.conf"], hooks=node_hooks(site, Profile()),
                               site_rules=site.slurm.job_submit_script))
    assert data["links"] == [{"path": f"/etc/slurm/prolog.d/{AGENT_ENTRY}", "target": AGENT, "hosts": "compute"}]
    assert data["site_rules"] == "/etc/slurm/rules.lua"
    assert "links" not in json.loads(manifest(["slurm.conf"]))


def test_no_agent_leaves_the_site_hook_alone() -> None:
    assert joined("Prolog", "/etc/slurm/prolog.d/*", None, "/etc/slurm").links == ()
    # A site file naming the agent itself: it runs once, as Slurm's Prolog.
    assert joined("Prolog", AGENT, AGENT, "/etc/slurm").value == AGENT


# ---- TaskProlog, plugstack.conf, job_submit ---------------------------------------------------


def test_the_site_task_prolog_runs_first_inside_ours() -> None:
    text = BASE.replace("  - names: g[01-02]", "  - names: n[01-02]").replace(
        "{model: a100-80gb, count: 4}", "{model: ascend-910b, count: 8}").replace(
        "architecture: x86_64\n    sockets: 2\n    cores_per_socket: 8\n    memory: 256GB",
        "architecture: aarch64\n    sockets: 2\n    cores_per_socket: 8\n    memory: 256GB")
    files = render_site(load_site_text(text + "slurm:\n  task_prolog: /opt/site/tp.sh\n"))
    assert keyed(files["slurm.conf"])["TaskProlog"] == ["/etc/slurm/hetero-taskprolog"]
    script = files["hetero-taskprolog"].splitlines()
    assert script.index("/opt/site/tp.sh || exit $?") < next(i for i, ln in enumerate(script)
                                                              if ln.startswith("exec "))
    # Without a TaskProlog of slurm-hetero's (no NPUs), the site's is Slurm's.
    assert keyed(rendered("task_prolog: /opt/site/tp.sh\n")["slurm.conf"])["TaskProlog"] == ["/opt/site/tp.sh"]


def test_plugstack_lines_follow_the_hetero_plugin() -> None:
    text = rendered("plugstack_lines:\n  - required spank_pyxis.so runtime_path=/run/pyxis\n"
                    "  - include /etc/slurm/plugstack.conf.d/*\n")["plugstack.conf"]
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines[0].startswith("required /usr/local/lib/slurm-hetero/hetero.so ")
    assert lines[1:] == ["required spank_pyxis.so runtime_path=/run/pyxis", "include /etc/slurm/plugstack.conf.d/*"]


def test_job_submit_order_defaults_to_site_first() -> None:
    site = load_site_text(site_text("job_submit: {script: /etc/slurm/job_submit.site.lua}\n"))
    assert (site.slurm.job_submit_script, site.slurm.job_submit_order) == ("/etc/slurm/job_submit.site.lua",
                                                                         "site-first")
    lua = render_site(site)["job_submit.lua"]
    assert 'site_rules({ script = "/etc/slurm/job_submit.site.lua", order = "site-first" })' in lua


@pytest.mark.parametrize(("slurm", "message"), [
    ("job_submit: {script: /etc/slurm/job_submit.lua}\n",
     "slurm.job_submit.script: /etc/slurm/job_submit.lua: the rendered job_submit.lua takes that name"),
    ("job_submit: {script: rules.lua}\n", "slurm.job_submit.script"),
    ("job_submit: {script: /etc/slurm/r.lua, order: last}\n", "slurm.job_submit.order"),
    ("job_submit: {order: site-first}\n", "slurm.job_submit"),
    ("prolog: /etc/*/prolog\n", "slurm.prolog: the glob is in the folder part (/etc/*)"),
    ("epilog: /etc/slurm/epilog.d/*.*\n", "slurm.epilog: *.*: one '*' and no '?' or '['"),
    ("prolog: /etc/slurm/prolog.d/a b\n", "slurm.prolog"),
    ("task_prolog: /opt/tp*\n", "slurm.task_prolog"),
    ("plugstack_lines: [load pyxis.so]\n", "the first word must be required, optional or include (got 'load')"),
    ("plugstack_lines: ['required pyxis.so # x']\n", "'#' starts a comment in plugstack.conf"),
    ("plugstack_lines: [required /opt/x]\n", "required takes a plugin (a .so path"),
])
def test_bad_hooks_are_located(slurm: str, message: str) -> None:
    errors = errors_of(site_text(slurm))
    assert len(errors) == 1 and message in errors[0], errors
    assert errors[0].startswith("site.yaml:")


def test_a_bad_hook_exits_2_naming_the_field(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(site_text("prolog: /etc/*/prolog\n"))
    result = CliRunner().invoke(main, ["conf", "render", str(site), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "slurm.prolog" in result.output, result.output
    assert not (tmp_path / "out").exists()


# ---- conf import ------------------------------------------------------------------------------

CONF = """\
ClusterName=mini
SlurmctldHost=h
JobSubmitPlugins=lua
{hooks}
NodeName=n[1-2] CPUs=4 Feature=x86_64
PartitionName=p Nodes=n[1-2] Default=YES
"""


def imported(tmp_path: Path, hooks: str = "") -> tuple[dict[str, object], str]:
    (tmp_path / "slurm.conf").write_text(CONF.format(hooks=hooks))
    result = import_site(tmp_path / "slurm.conf")
    site = load_site_text(result.text)
    return {"prolog": site.slurm.prolog, "epilog": site.slurm.epilog, "task_prolog": site.slurm.task_prolog,
            "plugstack": site.slurm.plugstack_lines, "rules": site.slurm.job_submit_script,
            "enforce": site.slurm.accounting_enforce}, "\n".join(result.notes)


def test_import_keeps_the_site_hooks(tmp_path: Path) -> None:
    hooks = "Prolog=/opt/site/prolog\nEpilog=/etc/slurm/epilog.d/*\nTaskProlog=/opt/site/tp.sh\n" \
            "PlugStackConfig=spank.conf\nAccountingStorageEnforce=associations"
    (tmp_path / "spank.conf").write_text("# site plugins\nrequired /usr/lib/slurm/spank_pyxis.so  a=1\n"
                                         "required /usr/local/lib/slurm-hetero/hetero.so tiers=x\n"
                                         "include plugstack.conf.d/*\nbogus line\n")
    (tmp_path / "job_submit.lua").write_text("function slurm_job_submit() return slurm.SUCCESS end\n")
    got, notes = imported(tmp_path, hooks)
    assert got == {"prolog": "/opt/site/prolog", "epilog": "/etc/slurm/epilog.d/*", "task_prolog": "/opt/site/tp.sh",
                   "plugstack": ("required /usr/lib/slurm/spank_pyxis.so a=1", "include plugstack.conf.d/*"),
                   "rules": str(tmp_path.resolve() / "job_submit.site.lua"), "enforce": ("associations",)}
    assert "Prolog=/opt/site/prolog: kept (slurm.prolog); rendered as a folder of slurm-hetero's" in notes
    assert f"{tmp_path}/spank.conf:5: not kept (the first word must be required" in notes
    assert f"copy {tmp_path}/job_submit.lua to {tmp_path.resolve()}/job_submit.site.lua" in notes
    assert "AccountingStorageEnforce=associations: kept (slurm.accounting.enforce)" in notes


def test_import_of_slurm_heteros_own_files_adds_nothing(tmp_path: Path) -> None:
    hooks = "Prolog=/usr/local/bin/slurm-hetero-prolog\nTaskProlog=/etc/slurm/hetero-taskprolog"
    (tmp_path / "job_submit.lua").write_text("-- job_submit.lua for site \"x\", generated by slurm-hetero.\n")
    got, notes = imported(tmp_path, hooks)
    assert (got["prolog"], got["task_prolog"], got["rules"]) == (None, None, None)
    assert "Prolog=/usr/local/bin/slurm-hetero-prolog: slurm-hetero's own, rendered again" in notes


def test_import_without_enforcement_renders_none(tmp_path: Path) -> None:
    got, notes = imported(tmp_path)
    assert got["enforce"] == ()
    assert "AccountingStorageEnforce is not set (Slurm enforces nothing): kept so" in notes
    assert "no readable" in notes and "job_submit.lua" in notes  # JobSubmitPlugins=lua, no script here
    site = load_site_text(import_site(tmp_path / "slurm.conf").text)
    assert "AccountingStorageEnforce" not in render_site(site)["slurm.conf"]


def test_the_dev_cluster_links_the_agent_as_the_role_does(tmp_path: Path) -> None:
    from slurm_hetero.devcluster.cluster import _hook_link
    from slurm_hetero.errors import InputError

    link = tmp_path / "prolog.d" / AGENT_ENTRY
    _hook_link(link, "/old/agent", "Prolog")
    _hook_link(link, AGENT, "Prolog")  # a later render moves it
    assert link.is_symlink() and str(link.readlink()) == AGENT
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=r"slurm.epilog: cannot link .*file/x -> /a for the node agent"):
        _hook_link(tmp_path / "file" / "x", "/a", "Epilog")
