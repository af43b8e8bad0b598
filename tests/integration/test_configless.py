"""A configless site on the real cluster: slurmctld serves the configuration
(SlurmctldParameters=enable_configless) and every slurmd runs `slurmd --conf-server`, so a
node has Slurm's files only in slurmd's cache and slurm-hetero's only in the node folder
(/etc/slurm-hetero, which each slurmd sees as the cluster's node-etc/: Cluster.start_slurmd).
The node agent, run by slurmd as the Prolog with SLURM_CONF in that cache, finds its config
in the node folder and applies the job's energy policy, the health check ships its figures,
the TaskProlog runs from there; without the agent's config, the agent says where it looked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf.nodefiles import AGENT_CONFIG, NODE_DIR
from slurm_hetero.devcluster import Cluster
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.site import load_site
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from tests.integration.conftest import assert_nothing_left

pytestmark = pytest.mark.integration
NODE, NPU = "clgpu01", "clnpu01"
SITE = f"""
name: configless
partitions:
  - {{name: main, default: true}}
node_groups:
  - names: {NODE}
    architecture: x86_64
    sockets: 1
    cores_per_socket: 4
    memory: 8GB
    partitions: [main]
    accelerators:
      - {{model: h100, count: 2}}
  - names: {NPU}
    architecture: aarch64
    sockets: 1
    cores_per_socket: 4
    memory: 8GB
    partitions: [main]
    accelerators:
      - {{model: ascend-310p, count: 2}}
"""


@pytest.fixture(scope="module")
def cc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    top = tmp_path_factory.mktemp("configless")
    os.chmod(top, 0o755)
    (top / "site.yaml").write_text(SITE)
    c = Cluster(top / "c")
    try:
        c.up(load_site(top / "site.yaml"), timeout=60, log=lambda *_: None, configless=True)
        yield c
    finally:
        c.down(log=lambda *_: None)
    assert_nothing_left(c)


def cache(c: Cluster) -> Path:
    """slurmd's configless cache (22.05: SlurmdSpoolDir/conf-cache)."""
    return c.spool / NODE / "conf-cache"


def device(c: Cluster, i: int) -> dict[str, object]:
    return FakeDevices(c.dev / NODE / "fake-devices.json").state(i)


def test_slurmd_runs_configless(cc: Cluster) -> None:
    pid = cc.pid(cc.daemon(f"slurmd {NODE}"))
    assert pid is not None
    assert "--conf-server" in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    got = sorted(p.name for p in cache(cc).iterdir())
    # Slurm ships its own files, never ours.
    assert {"slurm.conf", "gres.conf", "plugstack.conf"} <= set(got) and AGENT_CONFIG not in got, got
    assert "SlurmctldParameters=enable_configless" in (cache(cc) / "slurm.conf").read_text()
    assert (cc.node_etc / AGENT_CONFIG).is_file()


def test_prolog_finds_its_config_in_the_node_folder(cc: Cluster) -> None:
    out = cc.workdir / "env.out"
    jid = submit(cc.runner, ["--accel=h100:2", "--energy=efficiency", "-o", str(out)],
                 "echo SLURM_CONF=$SLURM_CONF; sleep 3")
    record = cc.agent_dir / NODE / f"job-{jid}.json"
    deadline = time.monotonic() + 20
    while not record.exists():
        assert time.monotonic() < deadline, (cc.agent_dir / "agent.log").read_text()
        time.sleep(0.3)
    # The agent's own record and the devices it changed: the site's efficiency policy.
    assert json.loads(record.read_text())["policy"] == "efficiency"
    assert [(device(cc, i)["limit_w"], device(cc, i)["clock_level"]) for i in (0, 1)] == [(420.0, "medium")] * 2
    wait_done(cc.runner, [jid])
    # What slurmd gave the job: SLURM_CONF in its cache, where hetero-agent.json is not.
    assert f"SLURM_CONF={cache(cc)}/slurm.conf" in out.read_text()
    assert wait_until_restored(cc)
    # The health check (NODE_DIR/hetero-healthcheck, no SLURM_CONF: Slurm's commands find
    # slurmd's cache through /run/slurm/conf) ships the epilog's figures, within its 20 s cycle.
    deadline = time.monotonic() + 40
    while True:
        row = sacct_jobs(cc.runner, [jid], ["JobID", "AdminComment", "End"], require=["AdminComment"])[jid]
        figures = parse_comment(row["AdminComment"]).get("node_energy", {})
        if NODE in figures:
            break
        assert time.monotonic() < deadline, row
        time.sleep(1)
    assert figures[NODE]["policy"] == "efficiency" and figures[NODE]["energy_j"] > 0
    assert "ERROR" not in (cc.agent_dir / "agent.log").read_text()


def wait_until_restored(c: Cluster, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(device(c, i)["limit_w"] == device(c, i)["default_w"] for i in (0, 1)):
            return True
        time.sleep(0.3)
    return False


def test_the_taskprolog_runs_from_the_node_folder(cc: Cluster) -> None:
    """TaskProlog=NODE_DIR/hetero-taskprolog reads NODE_DIR/hetero-containers.json and asks
    Slurm with the job's own SLURM_CONF (the rendered document names none)."""
    out = cc.workdir / "npu.out"
    jid = submit(cc.runner, ["-w", NPU, "--gres=npu:2", "-o", str(out)],
                 "env | grep -E '^(ASCEND_RT_VISIBLE_DEVICES|SLURM_JOB_NPUS)=' | sort")
    wait_done(cc.runner, [jid])
    assert out.read_text() == "ASCEND_RT_VISIBLE_DEVICES=0,1\nSLURM_JOB_NPUS=0,1\n"
    assert f"TaskProlog={NODE_DIR}/hetero-taskprolog" in (cache(cc) / "slurm.conf").read_text()


def test_without_the_node_file_the_agent_says_where_it_looked(cc: Cluster) -> None:
    conf, away = cc.node_etc / AGENT_CONFIG, cc.node_etc / f".{AGENT_CONFIG}.away"
    conf.rename(away)
    try:
        jid = submit(cc.runner, ["--accel=h100:1", "--energy=efficiency", "-o", "/dev/null"], "sleep 1")
        wait_done(cc.runner, [jid])
        # slurmd ran the Prolog (it always exits 0): no config, so nothing was changed.
        assert not (cc.agent_dir / NODE / f"job-{jid}.json").exists()
        assert device(cc, 0)["limit_w"] == device(cc, 0)["default_w"]
        # Slurm keeps a Prolog's stderr nowhere (22.05): run the same program the way slurmd
        # did, in the node's mount namespace and with the Prolog's environment.
        pid = str(cc.pid(cc.daemon(f"slurmd {NODE}")))
        env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": f"{cache(cc)}/slurm.conf", "SLURM_JOB_ID": str(jid),
               "SLURMD_NODENAME": NODE}
        prolog = str(Path(sys.executable).parent / "slurm-hetero-prolog")  # the dev cluster's Prolog
        r = subprocess.run(["nsenter", "-t", pid, "-m", prolog], env=env, capture_output=True, text=True,
                           timeout=30, check=False)
        assert r.returncode == 0, r  # never a failed job or a drained node
        assert (f"{AGENT_CONFIG}: not found (looked at {cache(cc)}/{AGENT_CONFIG}, "
                f"{NODE_DIR}/{AGENT_CONFIG})") in r.stderr, r.stderr
        # The admin's command says the same, exit 2.
        res = CliRunner().invoke(main, ["node", "restore", "--node", NODE],
                                 env={"SLURM_CONF": f"{cache(cc)}/slurm.conf",
                                      "SLURM_HETERO_NODE_DIR": str(cc.node_etc)})
        assert res.exit_code == 2, res.output
        assert f"looked at {cache(cc)}/{AGENT_CONFIG}, {cc.node_etc}/{AGENT_CONFIG}" in res.output, res.output
    finally:
        away.rename(conf)
