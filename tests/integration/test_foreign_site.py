"""An ordinary OpenHPC-style site joins slurm-hetero end to end, on one real cluster.

The site's /etc/slurm is tests/data/import/openhpc-22.05 (configless, `Prolog=.../prolog.d/*`,
`Epilog=.../epilog.d/*`, its own HealthCheckProgram, `PlugStackConfig` including a
plugstack.conf.d/ folder, `JobSubmitPlugins=lua`), its /etc/slurm/ paths moved into this test's
folder (`site/etc`), with the site's own job_submit.lua (test_site_hooks.SITE_RULES), a prolog
and an epilog drop-in that leave a marker per job, a health check that logs each run, and a
SPANK plugin of its own built here (test_site_hooks.SITE_PLUGIN). Then, as its admin would:

1. `conf import` of that slurm.conf;
2. `conf render` of the site file it wrote, with production paths: checked here, not run (the
   dev cluster cannot run /usr/local/bin/..., and the role refuses to deploy a render whose
   node agent a compute node lacks: test_ansible.py's test_compute_nodes_need_the_node_agent_installed);
3. a dev cluster booted from the imported site file, configless as the site is, and the same
   site rendered for that cluster's paths and ports (byte for byte what the cluster runs),
   deployed by the Ansible role: the controller is the site's own folder (its live
   job_submit.lua kept as the rules the rendered one loads; the role's slurmctld restart, a real
   one here, makes them live), the compute node's node folder is the cluster's live one (what
   every slurmd sees as /etc/slurm-hetero), emptied first, and the node agent's links in the
   site's Prolog/Epilog folders are removed first: the role alone puts them back;
4. on that cluster, every behaviour of the site's and of ours;
5. the role again: nothing changes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf.nodefiles import NODE_DIR, NODE_FILES
from slurm_hetero.conf.render import (
    MANIFEST,
    Profile,
    configless_node_dir,
    manifest,
    node_hooks,
    render_site,
    write_files,
)
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.site import load_site
from slurm_hetero.site.hooks import AGENT_ENTRY
from slurm_hetero.slurm.jobs import sacct_jobs, wait_done
from tests.integration.conftest import assert_nothing_left
from tests.integration.test_ansible import changed, changed_tasks, deploy, inventory, restarts
from tests.integration.test_site_hooks import SITE_PLUGIN, SITE_RULES, ctld_log, sbatch, show_job

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "import" / "openhpc-22.05"
ACCOUNT = "hetero"  # the dev cluster's account; the site's rules want one on every job
REJECTED = "site: every job needs --account (e.g. --account=hetero)"  # SITE_RULES' message


@dataclass(frozen=True)
class SiteFolder:
    top: Path
    etc: Path  # the site's /etc/slurm: imported from, then the controller's folder the role deploys
    marks: Path  # what the site's own hooks leave: prolog-JOBID, epilog-JOBID, health.log
    plugin: Path  # the site's SPANK plugin
    path: Path  # the site file `conf import` wrote
    notes: str  # what it said

    @property
    def rules(self) -> Path:
        return self.etc / "job_submit.site.lua"


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}exit 0\n")
    path.chmod(0o755)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> SiteFolder:
    """The site's files in its own folder, then `slurm-hetero conf import` of its slurm.conf."""
    top = tmp_path_factory.mktemp("foreign")
    os.chmod(top, 0o755)
    etc, marks, lib = top / "site" / "etc", top / "marks", top / "site" / "lib"
    for d in (etc / "prolog.d", etc / "epilog.d", etc / "plugstack.conf.d", marks, lib):
        d.mkdir(parents=True)
    for f in sorted(FIXTURE.iterdir()):
        (etc / f.name).write_text(f.read_text().replace("/etc/slurm/", f"{etc}/"))
    (etc / "job_submit.lua").write_text(SITE_RULES)
    _script(etc / "prolog.d" / "50-site-marker", f'echo "$SLURMD_NODENAME" > {marks}/prolog-"$SLURM_JOB_ID"\n')
    _script(etc / "epilog.d" / "50-site-clean", f'echo "$SLURMD_NODENAME" > {marks}/epilog-"$SLURM_JOB_ID"\n')
    _script(etc / "site-nhc", f'echo "$SLURMD_NODENAME" >> {marks}/health.log\n')
    (lib / "sitetest.c").write_text(SITE_PLUGIN)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "sitetest.so"), str(lib / "sitetest.c")],
                   check=True, capture_output=True, timeout=120)
    (etc / "plugstack.conf.d" / "sitetest.conf").write_text(f"required {lib}/sitetest.so\n")
    out = top / "site.yaml"
    r = CliRunner().invoke(main, ["conf", "import", str(etc / "slurm.conf"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return SiteFolder(top, etc, marks, lib / "sitetest.so", out, " ".join(r.stderr.split()))


def test_import_keeps_the_sites_hooks(site: SiteFolder) -> None:
    data = yaml.safe_load(site.path.read_text())
    slurm = data["slurm"]
    assert slurm["prolog"] == f"{site.etc}/prolog.d/*" and slurm["epilog"] == f"{site.etc}/epilog.d/*", slurm
    assert slurm["plugstack_lines"] == [f"include {site.etc}/plugstack.conf.d/*"]
    assert slurm["job_submit"] == {"script": str(site.rules)}
    assert "SlurmctldParameters=enable_configless" in slurm["extra_lines"]
    # Slurm's own default memory pinned as Slurm reads it (0, which scontrol prints UNLIMITED):
    # the site's jobs without --mem keep running (every job below has none).
    assert "DefMemPerNode=0" in slurm["extra_lines"]
    assert data["node_agent"]["health_check"] == f"{site.etc}/site-nhc"
    assert {g["names"]: [a["model"] for a in g.get("accelerators", [])] for g in data["node_groups"]} == \
        {"c1": [], "gpu1": ["h100"], "gpu2": ["v100"]}
    assert "SlurmctldParameters=enable_configless: a configless site (kept)" in site.notes, site.notes
    assert f"copy {site.etc}/job_submit.lua to {site.rules} on the controller" in site.notes, site.notes


@pytest.fixture(scope="module")
def rendered(site: SiteFolder) -> Path:
    out = site.top / "render"
    r = CliRunner().invoke(main, ["conf", "render", str(site.path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "configless site (SlurmctldParameters=enable_configless)" in " ".join(r.output.split()), r.output
    return out


def test_render_joins_the_sites_hooks_and_names_the_node_folder(site: SiteFolder, rendered: Path) -> None:
    conf = (rendered / "slurm.conf").read_text()
    for line in (f"Prolog={site.etc}/prolog.d/*", f"Epilog={site.etc}/epilog.d/*",
                 f"HealthCheckProgram={NODE_DIR}/hetero-healthcheck", "SlurmctldParameters=enable_configless"):
        assert f"\n{line}\n" in conf, line
    # The site's health check runs after the agent's restore, its exit status the result.
    assert (rendered / "hetero-healthcheck").read_text().rstrip().endswith(f"exec {site.etc}/site-nhc")
    plugstack = [ln for ln in (rendered / "plugstack.conf").read_text().splitlines() if ln and ln[0] != "#"]
    assert plugstack[0].startswith("required ") and "hetero.so" in plugstack[0]
    assert plugstack[1:] == [f"include {site.etc}/plugstack.conf.d/*"], plugstack
    assert str(site.rules) in (rendered / "job_submit.lua").read_text()
    m = yaml.safe_load((rendered / MANIFEST).read_text())
    assert m["node_dir"] == NODE_DIR and m["node_files"] == list(NODE_FILES), m
    assert m["site_rules"] == str(site.rules)
    assert m["links"] == [
        {"path": f"{site.etc}/prolog.d/{AGENT_ENTRY}", "target": Profile().prolog, "hosts": "compute"},
        {"path": f"{site.etc}/epilog.d/{AGENT_ENTRY}", "target": Profile().epilog, "hosts": "compute"}]


@pytest.fixture(scope="module")
def fc(site: SiteFolder) -> Iterator[Cluster]:
    """The dev cluster booted from the imported site file (configless: the site is)."""
    c = Cluster(site.top / "c")
    try:
        c.up(load_site(site.path), timeout=90, log=lambda *_: None)
        yield c
    finally:
        c.down(log=lambda *_: None)
    assert_nothing_left(c)


@dataclass(frozen=True)
class Deployed:
    tmp: Path
    inv: Path
    src: Path
    first: subprocess.CompletedProcess[str]
    more: dict[str, object]
    health_seen: int  # lines of the site's health log when the role was done


@pytest.fixture(scope="module")
def deployed(site: SiteFolder, fc: Cluster) -> Deployed:
    s = load_site(site.path)
    assert s.slurm.configless and fc.info().get("configless")
    profile = fc.profile(fc.info())
    files = render_site(s, profile)
    # What the role deploys is what the cluster runs, byte for byte.
    assert {n: (fc.etc / n).read_text() for n in files} == files
    files[MANIFEST] = manifest(files, hooks=node_hooks(s, profile), site_rules=s.slurm.job_submit_script,
                               node_dir=configless_node_dir(s, profile))
    tmp = site.top / "deploy"
    src = tmp / "src"
    write_files(files, src)

    # Until the site's rules are where the rendered job_submit.lua loads them, no job gets in.
    r = sbatch(fc, f"--account={ACCOUNT}")
    assert r.returncode != 0
    assert f"the site's job submission rules ({site.rules}) did not load" in r.stderr, r.stderr
    # A compute node the role has not been to: no node files, no agent in the hook folders
    # (`cluster up` put them there, as it does for every node of its own).
    on_node = sorted(p.name for p in fc.node_etc.iterdir())
    assert on_node == sorted(NODE_FILES), on_node
    for p in fc.node_etc.iterdir():
        p.unlink()
    for kind in ("prolog", "epilog"):
        link = site.etc / f"{kind}.d" / AGENT_ENTRY
        assert link.is_symlink()
        link.unlink()

    inv = inventory(tmp, {"slurm_controller": ["ctl"], "slurm_compute": ["node1"]})
    # The controller's folder is the site's own /etc/slurm, the live job_submit.lua in it.
    text = inv.read_text()
    mine = f"slurm_hetero_conf_dir={tmp / 'hosts' / 'ctl' / 'etc'} "
    assert mine in text
    inv.write_text(text.replace(mine, f"slurm_hetero_conf_dir={site.etc} "))
    # The role's slurmctld restart restarts the cluster's slurmctld (recorded as the others are).
    restart = ["sh", "-c", 'echo "slurmctld $1" >> "$2" && exec "$3" -c "$4" "$5"', "sh",
               "{{ inventory_hostname }}", str(tmp / "restarts.log"), sys.executable,
               "import sys; from slurm_hetero.devcluster import Cluster; Cluster(sys.argv[1]).restart_slurmctld()",
               str(fc.workdir)]
    more: dict[str, object] = {"slurm_hetero_node_dir": str(fc.node_etc),
                               "slurm_hetero_slurmctld_restart_command": restart}
    first = deploy(fc, tmp, inv, src=src, **more)
    health = site.marks / "health.log"
    seen = len(health.read_text().splitlines()) if health.exists() else 0
    return Deployed(tmp, inv, src, first, more, seen)


def test_role_deploys_the_site_onto_the_live_cluster(site: SiteFolder, fc: Cluster, deployed: Deployed) -> None:
    r = deployed.first
    assert r.returncode == 0, r.stdout[-3000:]
    assert changed(r)["ctl"] > 0 and changed(r)["node1"] > 0, changed(r)
    # slurmctld restarted (slurm.conf's nodes changed), reconfigure once the node had its
    # files, slurmd; then the verification found every node usable.
    assert restarts(deployed.tmp) == ["slurmctld ctl", "reconfigure", "slurmd node1"]
    assert "no node became unusable" in r.stdout
    # The controller: the site's job_submit.lua kept as its rules, the rendered files in place.
    assert site.rules.read_text() == SITE_RULES
    for name in ("slurm.conf", "gres.conf", "plugstack.conf", "job_submit.lua"):
        assert (site.etc / name).read_text() == (fc.etc / name).read_text() == (deployed.src / name).read_text()
    assert f"site job_submit rules {site.rules} loaded (site-first)" in ctld_log(fc)
    # The compute node: slurm-hetero's files in the node folder every slurmd sees as NODE_DIR,
    # the agent one more file of the site's Prolog/Epilog folders.
    for name in NODE_FILES:
        assert (fc.node_etc / name).read_text() == (deployed.src / name).read_text(), name
    assert (fc.node_etc / "hetero-healthcheck").stat().st_mode & 0o777 == 0o755
    profile = fc.profile(fc.info())
    for kind, program in (("prolog", profile.prolog), ("epilog", profile.epilog)):
        link = site.etc / f"{kind}.d" / AGENT_ENTRY
        assert link.is_symlink() and str(link.readlink()) == program


def test_the_sites_job_submit_rules_still_apply(fc: Cluster, deployed: Deployed) -> None:
    r = sbatch(fc, "--accel=h100:1")
    assert r.returncode != 0
    assert REJECTED in r.stderr, r.stderr
    r = sbatch(fc, f"--account={ACCOUNT}", "-p", "express")
    assert r.returncode == 0, r.stderr
    assert show_job(fc, int(r.stdout))["Partition"] == "gpu"


def test_the_sites_hooks_and_ours_run_for_every_job(site: SiteFolder, fc: Cluster, deployed: Deployed) -> None:
    # The site's SPANK option beside ours on one command line, our pools, our energy policy.
    r = sbatch(fc, f"--account={ACCOUNT}", "--sitetest=1", "--accel=h100:1")
    assert r.returncode == 0, r.stderr
    h100 = int(r.stdout)
    r = sbatch(fc, f"--account={ACCOUNT}", "--accel=v100:1", "--energy=efficiency")
    assert r.returncode == 0, r.stderr
    v100 = int(r.stdout)
    for jid, model in ((h100, "h100"), (v100, "v100")):
        job = show_job(fc, jid)
        assert job["TresPerNode"].endswith(f"gpu:{model}:1") and job["Partition"] == "gpu", job
        assert f'"model":"{model}"' in job["AdminComment"], job
    # srun: slurmstepd on the node ran the site's plugin too (its option set SITETEST).
    out = fc.runner.out(["srun", f"--account={ACCOUNT}", "--sitetest=2", "printenv", "SITETEST",
                         "SLURMD_NODENAME", "SLURM_JOB_ID"], timeout=60).split()
    assert out[:2] == ["loaded", "c1"], out
    step = int(out[2])
    wait_done(fc.runner, [h100, v100, step], timeout=90)
    rows = sacct_jobs(fc.runner, [h100, v100], ["JobID", "State", "NodeList", "End"])
    assert [(rows[j]["State"], rows[j]["NodeList"]) for j in (h100, v100)] == \
        [("COMPLETED", "gpu1"), ("COMPLETED", "gpu2")], rows
    # The site's prolog and epilog drop-ins ran for each job, on its node ...
    for jid, node in ((h100, "gpu1"), (v100, "gpu2"), (step, "c1")):
        for kind in ("prolog", "epilog"):
            mark = site.marks / f"{kind}-{jid}"
            assert wait_until(mark.exists, 15), f"no {kind} marker for job {jid}"
            assert mark.read_text().strip() == node, (kind, jid)
    # ... and so did the node agent, linked beside them by the role: the v100 job's policy.
    agent_log = (fc.agent_dir / "agent.log").read_text()
    assert re.search(rf"prolog job {v100} on gpu2: policy efficiency, 1 devices", agent_log), agent_log[-2000:]
    assert re.search(rf"prolog job {h100} on gpu1: policy ", agent_log), agent_log[-2000:]
    assert re.search(rf"epilog job {v100} on gpu2: ", agent_log), agent_log[-2000:]


def test_the_sites_health_check_runs_after_ours(site: SiteFolder, fc: Cluster, deployed: Deployed) -> None:
    """The health check the role put in the node folder ran the site's (HealthCheckInterval
    20 s on the dev cluster, every node)."""
    health = site.marks / "health.log"

    def ran_again() -> bool:
        return health.exists() and len(health.read_text().splitlines()) > deployed.health_seen

    assert wait_until(ran_again, 60), (fc.log / "slurmd-c1.log").read_text()[-2000:]
    assert not any("drain" in n.state for n in fc.nodes().values())


def test_role_again_changes_nothing(fc: Cluster, deployed: Deployed) -> None:
    r = deploy(fc, deployed.tmp, deployed.inv, src=deployed.src, **deployed.more)
    assert r.returncode == 0, r.stdout[-3000:]
    assert changed(r) == {"ctl": 0, "node1": 0}, changed_tasks(r.stdout)
    assert restarts(deployed.tmp) == ["slurmctld ctl", "reconfigure", "slurmd node1"]
