"""Render-time side of containers: hetero-containers.json, oci.conf's commands, the
TaskProlog script and the tables the bridge (job_submit.lua) checks --image against."""

from __future__ import annotations

import json
import posixpath
from dataclasses import asdict
from typing import Any

from ClusterShell.NodeSet import NodeSet

from slurm_hetero.conf.contract import (
    CONTROL_DEVICES,
    FILENAME,
    FORMAT,
    MOUNTS_VAR,
    PLUGIN_GRES,
    VISIBLE_VARS,
)
from slurm_hetero.conf.devices import device_files
from slurm_hetero.conf.profile import Profile
from slurm_hetero.conf.slurmconf import slurm_view
from slurm_hetero.site.images import Image
from slurm_hetero.site.model import NodeGroup, Site

TASKPROLOG = "hetero-taskprolog"
# oci.conf expands %U (the job's uid, as in /run/user/%U) from Slurm 23.02 on; 22.05's
# slurmstepd dies on it ("unexpected replacement character: U") and the job hangs. It runs
# every oci.conf command with /bin/sh -c as the job's user: there the shell asks for it.
UID_PATTERN_SINCE = (23, 2)
SHELL_UID = "$(/usr/bin/id -u)"


def runc_root(profile: Profile, version: tuple[int, int]) -> str:
    """runc's state folder as oci.conf spells it for this Slurm release (per user: %U).

    >>> runc_root(Profile(runc_root="/run/user/%U/slurm-hetero-runc"), (22, 5))
    '/run/user/$(/usr/bin/id -u)/slurm-hetero-runc'
    >>> runc_root(Profile(runc_root="/run/user/%U/slurm-hetero-runc"), (24, 11))
    '/run/user/%U/slurm-hetero-runc'
    """
    return profile.runc_root if version >= UID_PATTERN_SINCE else profile.runc_root.replace("%U", SHELL_UID)


def images_root(site: Site, profile: Profile) -> str:
    return (profile.images_root or site.containers.images_root).rstrip("/")


def group_devices(g: NodeGroup) -> dict[str, list[list[str]]]:
    """gres name → [[file under /dev, stack]] in Slurm's index order (gres.conf's files)."""
    stacks = {(a.model.gres_name, a.model.gres_type): a.model.stack for a in g.accelerators}
    out: dict[str, list[list[str]]] = {}
    # The same function writes gres.conf: one source of truth for names and order.
    for line in device_files(g, "", Profile(dev_dir="")):
        if "file" in line:
            stack = stacks[(str(line["name"]), str(line["type"]))]
            out.setdefault(str(line["name"]), []).extend(
                [p.lstrip("/"), stack] for p in NodeSet(str(line["file"])))
    return out


def gres_env(site: Site) -> dict[str, list[str]]:
    """GRES without a Slurm plugin → the variables the TaskProlog sets to their indices."""
    out: dict[str, list[str]] = {}
    for m in site.models_in_use:
        if m.gres_name in PLUGIN_GRES:
            continue
        names = out.setdefault(m.gres_name, [f"SLURM_JOB_{m.gres_name.upper()}S"])
        if m.stack in VISIBLE_VARS and VISIBLE_VARS[m.stack] not in names:
            names.insert(0, VISIBLE_VARS[m.stack])
    return out


def node_document(site: Site, profile: Profile) -> dict[str, Any]:
    """Everything the node side needs, with node groups stored once."""
    root = images_root(site, profile)
    groups, nodes = [], {}
    for i, g in enumerate(site.node_groups):
        groups.append({"arch": g.architecture,
                       "drivers": {s: asdict(d) for s, d in g.drivers},
                       "env": dict(site.containers.fabrics.get(g.fabric or "", {})),
                       "devices": group_devices(g)})
        nodes.update(dict.fromkeys(g.nodes, i))
    images = {}
    for ref, img in sorted(site.images.items()):
        images[ref] = {"description": img.description, "variants": [
            {**asdict(v), "bundle": img.bundle_path(v, root)} for v in img.variants]}
    return {
        "format": FORMAT,
        "site": site.name,
        # Configless: none on the node; the wrapper asks Slurm with the job's own SLURM_CONF.
        "slurm_conf": None if site.slurm.configless else f"{profile.conf_dir}/slurm.conf",
        "runc": profile.runc,
        "images_root": root,
        "dev_dir": profile.dev_dir,
        "per_node_dev": bool(profile.node_ports),  # the dev cluster: <dev_dir>/<node>/...
        "mounts": [asdict(m) for m in site.containers.mounts],
        "driver_dirs": {k: list(v) for k, v in site.containers.driver_dirs.items()},
        "gres_env": gres_env(site),
        "images": images,
        "groups": groups,
        "nodes": nodes,
    }


def _gres_stacks(site: Site) -> dict[str, str]:
    """'gpu:a100-80gb' and 'gpu' → stack, for the bridge (a name only when unambiguous)."""
    by_name: dict[str, set[str]] = {}
    out: dict[str, str] = {}
    for m in site.models_in_use:
        out[f"{m.gres_name}:{m.gres_type}"] = m.stack
        by_name.setdefault(m.gres_name, set()).add(m.stack)
    for name, stacks in by_name.items():
        if len(stacks) == 1:
            out[name] = next(iter(stacks))
            if name == "gpu":
                out["shard"] = out["mps"] = out[name]
    return out


def _default_tags(images: dict[str, Image]) -> dict[str, str]:
    """NAME without :TAG means NAME:latest, or the only tag NAME has."""
    tags: dict[str, list[str]] = {}
    for img in images.values():
        tags.setdefault(img.name, []).append(img.tag)
    return {n: "latest" if "latest" in t else t[0] for n, t in tags.items()
            if "latest" in t or len(t) == 1}


def container_context(site: Site, profile: Profile) -> dict[str, object]:
    """Template variables for oci.conf, hetero-containers.json, the TaskProlog, job_submit.lua."""
    root = images_root(site, profile)
    folder = profile.node_folder(site.slurm.configless)
    doc_path = f"{folder}/{FILENAME}"
    entry = posixpath.join(profile.hetero_lib, "slurm_hetero", "containers", "oci_run.py")
    launcher = f"{profile.python} -I -S {entry}"
    return {
        "containers_json": json.dumps(node_document(site, profile), indent=1) + "\n",
        "containers_doc": doc_path,
        "container_launcher": launcher,
        "container_id": "%n.%j.%s.%t",  # unique per node, job, step and task
        "runc_root": runc_root(profile, slurm_view(site, profile).version),
        "taskprolog": f"{folder}/{TASKPROLOG}" if gres_env(site) else None,
        "taskprolog_gres": gres_env(site),
        "control_devices": CONTROL_DEVICES,
        "images": [{"ref": ref, "path": img.logical_path(root),
                    "variants": sorted({f"{v.arch}/{v.stack}" for v in img.variants})}
                   for ref, img in sorted(site.images.items())],
        "image_tags": _default_tags(site.images),
        "gres_stacks": _gres_stacks(site),
        "mount_allow": [{"source": m.source, "mode": m.mode} for m in site.containers.mounts],
        "mounts_var": MOUNTS_VAR,
    }


def emulated_paths(site: Site, profile: Profile, g: NodeGroup, node: str) -> tuple[list[str], list[str]]:
    """(control device files, driver folders) the dev cluster creates for one node, where
    the wrapper looks for them: <dev_dir>/<node>/nvidiactl, <dev_dir>/<node>/fs/usr/..."""
    base = f"{profile.dev_dir}/{node}"
    stacks = list(dict.fromkeys(a.model.stack for a in g.accelerators))
    devices = [f"{base}/{d}" for s in stacks for d in CONTROL_DEVICES.get(s, ())]
    folders = [f"{base}/fs{d}" for s in stacks for d in site.containers.driver_dirs.get(s, ())]
    return devices, folders

