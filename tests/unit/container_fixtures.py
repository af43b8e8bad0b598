"""Shared pieces of the container unit tests: the demo site rendered for a temp dev tree
(per-node emulated device files, driver folders, busybox bundles), and a fake scontrol."""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_hetero.conf.containers import emulated_paths, node_document
from slurm_hetero.conf.render import Profile, device_paths
from slurm_hetero.containers.bundle import busybox_variants, write_stubs
from slurm_hetero.containers.nodeconf import NodeConfig
from slurm_hetero.site import Site, load_site

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"


def char_device(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("needs CAP_MKNOD for emulated device files")


@dataclass
class DevTree:
    site: Site
    profile: Profile
    conf: NodeConfig
    tmp: Path

    @property
    def images(self) -> Path:
        return self.tmp / "images"


def dev_tree(tmp: Path, bundles: bool = False) -> DevTree:
    site = load_site(DEMO)
    ports = {n: 30000 + i for i, n in enumerate(site.all_nodes)}
    profile = Profile(conf_dir=str(tmp / "etc"), dev_dir=str(tmp / "dev"), node_ports=ports,
                      images_root=str(tmp / "images"), runc=str(tmp / "bin" / "runc"),
                      python=sys.executable, hetero_lib=str(ROOT), agent_state_dir=str(tmp / "agent"))
    for g in site.node_groups:
        for node in g.nodes:
            ctl, dirs = emulated_paths(site, profile, g, node)
            for p in [*device_paths(g, node, profile), *ctl]:
                char_device(Path(p))
            for d in dirs:
                Path(d).mkdir(parents=True, exist_ok=True)
    write_stubs(site, str(tmp / "images"))
    if bundles:
        busybox_variants(site, str(tmp / "images"))
    return DevTree(site, profile, NodeConfig(node_document(site, profile)), tmp)


def fake_command(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path
