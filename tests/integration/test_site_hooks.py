"""The site's own hooks on the real cluster (Slurm 22.05 here): its job_submit.lua rules run
inside the bridge's job_submit.lua, and its Prolog/Epilog folder keeps running with the node
agent as one more file of it.

The session's demo cluster is reused: each fixture swaps the file it needs (job_submit.lua,
which slurmctld re-reads when its mtime changes; the Prolog/Epilog lines, which `scontrol
reconfigure` applies) and puts the original back."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_hetero.conf import render_site
from slurm_hetero.conf.render import node_hooks
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.site import Site, load_site_text
from slurm_hetero.slurm.jobs import sacct_jobs, wait_done
from slurm_hetero.slurm.scontrol import parse_job_record, show_job_argv
from tests.integration.conftest import DEMO

pytestmark = pytest.mark.integration

# A site's rules as sites write them: an account is required, `express` routes to gpu.
SITE_RULES = """\
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.account == nil then
        slurm.log_user("site: every job needs --account (e.g. --account=hetero)")
        return slurm.ERROR
    end
    if job_desc.partition == "express" then job_desc.partition = "gpu" end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""


def with_slurm(extra: dict[str, Any]) -> Site:
    data = yaml.safe_load(DEMO.read_text())
    data.setdefault("slurm", {}).update(extra)
    return load_site_text(yaml.safe_dump(data), "<demo with the site's hooks>")


def replace_newer(path: Path, text: str) -> None:
    """Write `path` so slurmctld sees a newer mtime: it compares whole seconds."""
    before = int(path.stat().st_mtime) if path.exists() else 0
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    when = max(before + 1, int(time.time()))
    os.utime(tmp, (when, when))
    os.replace(tmp, path)


def sbatch(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return c.runner.run(["sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", "true"], check=False)


def show_job(c: Cluster, jid: int) -> dict[str, str]:
    keys = ["TresPerNode", "Partition", "Account", "AdminComment"]
    return parse_job_record(c.runner.out(show_job_argv(jid)), keys, optional=keys)


def ctld_log(c: Cluster) -> str:
    return (c.log / "slurmctld.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def site_rules(cluster: Cluster) -> Iterator[Path]:
    """The site's script beside slurm.conf, and the bridge's job_submit.lua that loads it."""
    script = cluster.etc / "job_submit.site.lua"
    script.write_text(SITE_RULES)
    js = cluster.etc / "job_submit.lua"
    original = js.read_text()
    profile = cluster.profile(cluster.info())
    replace_newer(js, render_site(with_slurm({"job_submit": {"script": str(script)}}), profile)["job_submit.lua"])
    try:
        yield script
    finally:
        replace_newer(js, original)


def test_site_rejection_reaches_sbatch(cluster: Cluster, site_rules: Path) -> None:
    r = sbatch(cluster, "--accel=any:1")
    assert r.returncode != 0
    assert "site: every job needs --account (e.g. --account=hetero)" in r.stderr, r.stderr
    assert f"site job_submit rules {site_rules} loaded (site-first)" in ctld_log(cluster)


def test_site_routing_then_the_bridge(cluster: Cluster, site_rules: Path) -> None:
    r = sbatch(cluster, "--account=hetero", "-p", "express")
    assert r.returncode == 0, r.stderr
    plain = int(r.stdout)
    assert show_job(cluster, plain)["Partition"] == "gpu"
    r = sbatch(cluster, "--account=hetero", "--accel=a100-80gb:1")
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout)
    job = show_job(cluster, jid)
    assert job["TresPerNode"].endswith("gpu:a100-80gb:1") and job["Partition"] == "gpu", job
    assert '"model":"a100-80gb"' in job["AdminComment"]
    wait_done(cluster.runner, [plain, jid], timeout=90)
    rows = sacct_jobs(cluster.runner, [plain, jid])
    assert [rows[j]["State"] for j in (plain, jid)] == ["COMPLETED", "COMPLETED"], rows


def test_bridge_rejection_still_reaches_sbatch(cluster: Cluster, site_rules: Path) -> None:
    r = sbatch(cluster, "--account=hetero", "--accel=a100-80:1")
    assert r.returncode != 0
    assert "hetero: --accel=a100-80:1: unknown model, vendor or stack 'a100-80'" in r.stderr, r.stderr


def test_rules_that_do_not_load_refuse_jobs_and_say_so(cluster: Cluster, site_rules: Path) -> None:
    js = cluster.etc / "job_submit.lua"
    site_rules.write_text("function slurm_job_submit(\n")  # a syntax error
    replace_newer(js, js.read_text())  # slurmctld loads job_submit.lua, and with it the site's, again
    try:
        r = sbatch(cluster, "--account=hetero")
        assert r.returncode != 0
        assert (f"job_submit: the site's job submission rules ({site_rules}) did not load, so no job is "
                "accepted: please tell the administrators") in r.stderr, r.stderr
        assert re.search(rf"error: .*site job_submit rules {re.escape(str(site_rules))} did not load: .*"
                         r"expected near '<eof>'; every job submission is rejected", ctld_log(cluster))
    finally:
        site_rules.write_text(SITE_RULES)
        replace_newer(js, js.read_text())
    assert sbatch(cluster, "--account=hetero").returncode == 0


# ---- Prolog/Epilog: the site's folder, the agent one more file of it --------------------


@pytest.fixture(scope="module")
def site_prolog(cluster: Cluster, session_dir: Path) -> Iterator[Path]:
    """Prolog=FOLDER/prolog.d/* with two site scripts (one that fails on demand) and the node
    agent linked in by what the render says; the original Prolog/Epilog lines restored after."""
    top = session_dir / "site-hooks"
    log = top / "ran.log"
    for kind in ("prolog", "epilog"):
        folder = top / f"{kind}.d"
        folder.mkdir(parents=True)
        for name in ("10-site-a", "50-site-b"):
            fail = ('[ -e "$(dirname "$0")/../fail-$SLURM_JOB_ID" ] && exit 3\n'
                    if (kind, name) == ("prolog", "50-site-b") else "")
            (folder / name).write_text(f'#!/bin/sh\necho "{kind} {name} $SLURM_JOB_ID" >> {log}\n{fail}exit 0\n')
            (folder / name).chmod(0o755)
    log.touch()
    site = with_slurm({"prolog": f"{top}/prolog.d/*", "epilog": f"{top}/epilog.d/*"})
    hooks = node_hooks(site, cluster.profile(cluster.info()))
    for h in hooks:
        for link, target in h.links:
            os.symlink(target, link)
    original = cluster.conf.read_text()
    conf = original
    for h in hooks:
        conf, n = re.subn(rf"(?m)^{h.key}=.*$", f"{h.key}={h.value}", conf)
        assert n == 1, h.key
    replace_newer(cluster.conf, conf)
    cluster.runner.run(["scontrol", "reconfigure"])
    try:
        yield top
    finally:
        replace_newer(cluster.conf, original)
        cluster.runner.run(["scontrol", "reconfigure"])


def ran(top: Path, jid: int) -> list[str]:
    return [ln.rsplit(" ", 1)[0] for ln in (top / "ran.log").read_text().splitlines()
            if ln.endswith(f" {jid}")]


def test_site_prolog_folder_runs_with_the_agent_first(cluster: Cluster, site_prolog: Path) -> None:
    assert (site_prolog / "prolog.d" / "zz-slurm-hetero").is_symlink()
    r = sbatch(cluster, "--account=hetero", "--accel=a100-80gb:1")  # (the site's rules may be on)
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout)
    wait_done(cluster.runner, [jid], timeout=90)
    assert sacct_jobs(cluster.runner, [jid])[jid]["State"] == "COMPLETED"
    # slurmd ran every file of the folders: the node agent first (its log), then the site's
    # scripts in reverse alphabetical order, each with the job's environment.
    assert ran(site_prolog, jid) == ["prolog 50-site-b", "prolog 10-site-a", "epilog 50-site-b", "epilog 10-site-a"]
    agent_log = (cluster.agent_dir / "agent.log").read_text()
    assert re.search(rf"prolog job {jid} on a100-0[12]: policy ", agent_log), agent_log[-2000:]
    assert re.search(rf"epilog job {jid} on a100-0[12]: ", agent_log), agent_log[-2000:]


def test_a_failing_site_prolog_still_drains_and_requeues(cluster: Cluster, site_prolog: Path) -> None:
    r = sbatch(cluster, "--account=hetero", "-H", "-w", "cpu-x86-01")
    jid = int(r.stdout)
    (site_prolog / f"fail-{jid}").touch()
    cluster.runner.run(["scontrol", "release", str(jid)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            node = cluster.nodes()["cpu-x86-01"]
            if "drain" in node.state:
                break
            time.sleep(1)
        assert "drain" in cluster.nodes()["cpu-x86-01"].state
        reason = cluster.runner.out(["sinfo", "-h", "-n", "cpu-x86-01", "-o", "%E"]).strip()
        assert reason == "Prolog error", reason
        # Requeued held once its epilogs ran: COMPLETING until then (longer on a busy machine).
        states: list[str] = []

        def requeued() -> bool:
            states.append(cluster.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%T %r"]).strip())
            return states[-1].startswith("PENDING")

        assert wait_until(requeued, 60), states
        assert "held" in states[-1], states
        # 50-site-b failed, so 10-site-a never ran; every epilog did, the agent's first (it
        # restores the job's devices whatever the site's scripts do).
        assert ran(site_prolog, jid) == ["prolog 50-site-b", "epilog 50-site-b", "epilog 10-site-a"]
        assert f"epilog job {jid} on cpu-x86-01" in (cluster.agent_dir / "agent.log").read_text()
    finally:
        cluster.runner.run(["scancel", str(jid)], check=False)
        cluster.runner.run(["scontrol", "update", "nodename=cpu-x86-01", "state=resume"], check=False)


# ---- plugstack.conf: the site's plugins load beside the hetero plugin --------------------

SITE_PLUGIN = r"""
#include <slurm/spank.h>
SPANK_PLUGIN(sitetest, 1);
static int seen = 0;
static int cb(int val, const char *optarg, int remote) { seen = 1; return 0; }
static struct spank_option opt = { "sitetest", "[v]", "a site's own option", 1, 0, cb };
int slurm_spank_init(spank_t sp, int ac, char **av) { return spank_option_register(sp, &opt); }
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{ return seen ? spank_setenv(sp, "SITETEST", "loaded", 1) : 0; }
"""


@pytest.fixture(scope="module")
def site_plugin(cluster: Cluster, session_dir: Path) -> Iterator[Path]:
    """A site's SPANK plugin in its own plugstack.conf.d, named by slurm.plugstack_lines."""
    top = session_dir / "site-spank"
    (top / "plugstack.conf.d").mkdir(parents=True)
    (top / "sitetest.c").write_text(SITE_PLUGIN)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(top / "sitetest.so"), str(top / "sitetest.c")],
                   check=True, capture_output=True)
    (top / "plugstack.conf.d" / "sitetest.conf").write_text(f"required {top}/sitetest.so\n")
    plugstack = cluster.etc / "plugstack.conf"
    original = plugstack.read_text()
    site = with_slurm({"plugstack_lines": [f"include {top}/plugstack.conf.d/*"]})
    replace_newer(plugstack, render_site(site, cluster.profile(cluster.info()))["plugstack.conf"])
    try:
        yield top
    finally:
        replace_newer(plugstack, original)


def test_site_spank_plugin_loads_beside_ours(cluster: Cluster, site_plugin: Path) -> None:
    assert f"include {site_plugin}/plugstack.conf.d/*" in (cluster.etc / "plugstack.conf").read_text()
    r = sbatch(cluster, "--account=hetero", "--sitetest=1", "--accel=h100:1")
    assert r.returncode == 0, r.stderr
    assert show_job(cluster, int(r.stdout))["TresPerNode"].endswith("gpu:h100:1")
    out = cluster.runner.out(["srun", "--account=hetero", "--sitetest=2", "--accel=cann:1", "printenv",
                              "SITETEST", "SLURMD_NODENAME"], timeout=60).split()
    assert out[0] == "loaded" and out[1].startswith("npu-"), out  # slurmstepd ran the site's plugin too
