"""Where node-side code finds slurm-hetero's own files (hetero-agent.json, ...) and Slurm's.

A configless site (`SlurmctldParameters=enable_configless`) has no /etc/slurm on its compute
nodes: slurmd fetches slurm.conf, gres.conf, cgroup.conf, plugstack.conf, oci.conf, ... from
slurmctld into its cache (22.05: SlurmdSpoolDir/conf-cache, linked from /run/slurm/conf) and
hands the Prolog/Epilog SLURM_CONF pointing there. Slurm never ships our files, so they live
in a fixed folder of ours on the node, NODE_DIR, which `conf render` names and the Ansible
role fills. One lookup order for every node-side reader (`find_node_file`):

1. an explicit override in the environment (e.g. SLURM_HETERO_AGENT), alone where set;
2. next to $SLURM_CONF (else /etc/slurm/slurm.conf): every site that is not configless;
3. NODE_DIR ($SLURM_HETERO_NODE_DIR moves it, for tests).

Standard library only: the container wrapper and TaskProlog import it at every job start.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path

NODE_DIR = "/etc/slurm-hetero"
NODE_DIR_ENV = "SLURM_HETERO_NODE_DIR"
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
# slurmd (22.05 on) links its configless cache here; Slurm's own clients look here when
# neither SLURM_CONF nor /etc/slurm/slurm.conf is set.
CONFIGLESS_CACHE = "/run/slurm/conf"
AGENT_CONFIG = "hetero-agent.json"
# slurm-hetero's files compute nodes read, which a configless Slurm does not ship (22.05 sends
# slurm.conf, gres.conf, cgroup.conf, plugstack.conf, oci.conf, ...): on a configless site
# `conf render` names them in NODE_DIR and the Ansible role installs them there.
NODE_FILES = (AGENT_CONFIG, "hetero-containers.json", "hetero-taskprolog", "hetero-healthcheck")


class NodeFileMissing(FileNotFoundError):
    """None of the places a node file may be has it. A FileNotFoundError, as reading the one
    path did before, so every caller reacts as it did; the message names every path."""

    def __init__(self, name: str, looked: list[Path]):
        super().__init__(errno.ENOENT, f"{name}: not found", str(looked[0]) if looked else name)
        self.looked = looked
        self.file = name

    def __str__(self) -> str:
        return f"{self.file}: not found (looked at {', '.join(str(p) for p in self.looked)})"


def node_dir(env: Mapping[str, str] | None = None) -> Path:
    """The node folder of slurm-hetero's files: NODE_DIR unless $SLURM_HETERO_NODE_DIR says."""
    env = os.environ if env is None else env
    return Path(env.get(NODE_DIR_ENV) or NODE_DIR)


def candidates(name: str, override_env: str | None = None,
               env: Mapping[str, str] | None = None) -> list[Path]:
    """The paths `find_node_file` tries, in order.

    >>> candidates("hetero-agent.json", env={"SLURM_CONF": "/run/slurm/conf/slurm.conf"})
    [PosixPath('/run/slurm/conf/hetero-agent.json'), PosixPath('/etc/slurm-hetero/hetero-agent.json')]
    >>> candidates("x.json", "X", env={"X": "/tmp/mine.json"})
    [PosixPath('/tmp/mine.json')]
    """
    env = os.environ if env is None else env
    if override_env and env.get(override_env):
        return [Path(env[override_env])]  # the admin named the file: nothing else is tried
    beside = Path(env.get("SLURM_CONF") or DEFAULT_SLURM_CONF).parent / name
    mine = node_dir(env) / name
    return [beside] if beside == mine else [beside, mine]


def find_node_file(name: str, override_env: str | None = None,
                   env: Mapping[str, str] | None = None) -> Path:
    """The first of `candidates` that is a file; NodeFileMissing (naming them all) if none is."""
    looked = candidates(name, override_env, env)
    for path in looked:
        if path.is_file():
            return path
    raise NodeFileMissing(name, looked)


def slurm_conf_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder of the slurm.conf this node's Slurm reads, for Slurm's own files beside it
    (gres.conf): $SLURM_CONF's, else /etc/slurm where it holds slurm.conf, else slurmd's
    configless cache (/run/slurm/conf) where that does, as Slurm's clients look (else /etc/slurm)."""
    env = os.environ if env is None else env
    if env.get("SLURM_CONF"):
        return Path(env["SLURM_CONF"]).parent
    default = Path(DEFAULT_SLURM_CONF)
    if not default.is_file() and (Path(CONFIGLESS_CACHE) / "slurm.conf").is_file():
        return Path(CONFIGLESS_CACHE)
    return default.parent
