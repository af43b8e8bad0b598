"""The Ansible role deploys the rendered files and verifies the real cluster with sinfo."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hetero.devcluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "ansible" / "playbooks" / "deploy.yml"


def deploy(c: Cluster, dest: Path, tmp: Path, group: str = "slurm_controller", src: Path | None = None,
           **more: object) -> subprocess.CompletedProcess[str]:
    inventory = tmp / "inventory"
    inventory.write_text(f"[{group}]\nlocalhost ansible_connection=local "
                         f"ansible_python_interpreter={sys.executable}\n")
    extra = {"slurm_hetero_conf_src": str(src or c.etc), "slurm_hetero_conf_dir": str(dest),
             "slurm_hetero_slurm_conf_env": {"SLURM_CONF": str(c.conf)}, "ansible_become": False,
             **more}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK),
         "-e", json.dumps(extra)],
        capture_output=True, text=True, timeout=300, cwd=ROOT / "ansible", check=False)


def test_role_deploys_and_verifies(cluster: Cluster, tmp_path: Path) -> None:
    dest, units = tmp_path / "etc-slurm", tmp_path / "systemd"
    units.mkdir()
    r = deploy(cluster, dest, tmp_path, slurm_hetero_sampler=True, slurm_hetero_systemd_dir=str(units))
    assert r.returncode == 0, r.stdout[-3000:]
    for name in ("slurm.conf", "gres.conf", "cgroup.conf", "plugstack.conf", "job_submit.lua",
                 "hetero-agent.json", "oci.conf", "hetero-containers.json", "hetero-taskprolog",
                 "hetero-healthcheck"):
        assert (dest / name).read_text() == (cluster.etc / name).read_text(), name
    for script in ("hetero-taskprolog", "hetero-healthcheck"):  # what slurm.conf runs
        assert (dest / script).stat().st_mode & 0o777 == 0o755, script
    assert "Slurm sees the accelerators the configuration declares" in r.stdout
    # The sampler's unit is installed; starting it needs systemd, which this machine lacks.
    unit = (units / "hetero-sampler.service").read_text()
    assert "node sample --every 1" in unit and "npu-[01-02]" in unit
    task = r.stdout.split("TASK [slurm_hetero : Device sampler running]")[1].split("TASK [")[0]
    assert "skipping: [localhost]" in task, task


def test_compute_nodes_need_the_node_agent_installed(cluster: Cluster, tmp_path: Path) -> None:
    r = deploy(cluster, tmp_path / "ok", tmp_path, group="slurm_compute")
    assert r.returncode == 0, r.stdout[-3000:]  # the dev cluster's prolog/epilog exist here
    src = tmp_path / "conf"
    shutil.copytree(cluster.etc, src)
    conf = (src / "slurm.conf").read_text()
    (src / "slurm.conf").write_text(re.sub(r"(?m)^Prolog=.*$", "Prolog=/opt/missing/slurm-hetero-prolog", conf))
    r = deploy(cluster, tmp_path / "bad", tmp_path, group="slurm_compute", src=src)
    assert r.returncode != 0
    assert "slurm.conf runs /opt/missing/slurm-hetero-prolog for every job" in r.stdout, r.stdout[-2000:]
    assert not (tmp_path / "bad").exists()  # checked before anything is copied


def test_role_fails_on_a_drained_node(cluster: Cluster, tmp_path: Path) -> None:
    cluster.runner.run(["scontrol", "update", "NodeName=cpu-arm-02", "State=DRAIN", "Reason=testing"])
    try:
        r = deploy(cluster, tmp_path / "etc-slurm", tmp_path)
    finally:
        cluster.runner.run(["scontrol", "update", "NodeName=cpu-arm-02", "State=RESUME"])
    assert r.returncode != 0
    assert "nodes down or drained after deploying: cpu-arm-02" in r.stdout


@pytest.mark.parametrize("bad", ["", "/nonexistent/conf"])
def test_role_input_errors_are_clear(cluster: Cluster, tmp_path: Path, bad: str) -> None:
    inventory = tmp_path / "inventory"
    inventory.write_text(f"[slurm_controller]\nlocalhost ansible_connection=local "
                         f"ansible_python_interpreter={sys.executable}\n")
    r = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                        str(PLAYBOOK), "-e", json.dumps({"slurm_hetero_conf_src": bad,
                                                          "ansible_become": False})],
                       capture_output=True, text=True, timeout=120, cwd=ROOT / "ansible", check=False)
    assert r.returncode != 0
    assert ("slurm_hetero_conf_src must name the folder" in r.stdout if not bad
            else "slurm.conf is missing from /nonexistent/conf" in r.stdout), r.stdout[-2000:]
