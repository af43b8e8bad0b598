"""oci.conf's RunTimeRun: pick the image variant for this node, write config.json, exec runc.

slurmstepd runs it as the job's user, in the step's spool folder, after writing its own
config.json there (%b) from the bundle the job named (--container, set by the bridge from
--image to <images_root>/<name>/<tag>, a stub). We replace that config.json with one for
the right variant and the job's devices, then exec runc on it, so runc is the task
process slurmstepd signals and waits for. Any refusal exits before runc: the job ends
FAILED with our one-line reason in its output; the node stays up.

Which devices the job holds here comes from the Prolog's device cache (root's file, checked
by containers/devcache.py, found through the --conf oci.conf names), or where there is no
trusted cache from slurmctld's record (`scontrol show job -d`, read by a parser user text
cannot steer; a stderr line says why), with the job and node from our argv, which
slurmstepd fills in from oci.conf. Never from the job's environment: config.json's env is
what the job exported (`--export=ALL,SLURM_STEP_GPUS=5` arrives unchanged wherever Slurm
sets no value of its own, as in a batch step), and this process runs with slurmstepd's
environment, not the job's. Slurm gives no record of a step's own GPUs that a job cannot
write (`scontrol show step` has counts, not indices), so a step sees all of its job's
devices on the node. When the record cannot be read, nothing starts: a job that runs
without the devices it waited for only fails later, less clearly.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slurm_hetero.conf.contract import MOUNTS_VAR
from slurm_hetero.containers.gres import autodetect_of, cached_allocation
from slurm_hetero.containers.nodeconf import NodeConfig, NodeFacts
from slurm_hetero.containers.ociconfig import (
    DevicePlan,
    always_mounts,
    build_config,
    check_image_untouched,
    check_mounts,
    driver_mounts,
    env_dict,
    plan_devices,
    rootfs_path,
    slurm_mounts,
)
from slurm_hetero.containers.resolve import NoVariant, resolve
from slurm_hetero.errors import HeteroError, InputError, RuntimeFailure
from slurm_hetero.fileio import write_json_atomic
from slurm_hetero.site.images import Image, ImageVariant

PREFIX = "slurm-hetero"


class NotInCatalog(InputError):
    pass


def read_json(path: str, what: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise RuntimeFailure(f"{what} {path}: {e.strerror}") from e
    except ValueError as e:
        raise RuntimeFailure(f"{what} {path}: not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise RuntimeFailure(f"{what} {path}: not a JSON object")
    return data


def requested_image(slurm_cfg: dict[str, Any], conf: NodeConfig) -> Image:
    """The catalog image whose stub the job's --container named.

    slurmstepd made root.path absolute from the bundle path and the stub's "rootfs";
    SLURM_CONTAINER holds the bundle path as the job gave it. Both must name the same stub
    under images_root, or the bundle is not ours (a user's own config.json is never used)."""
    root = posixpath.normpath(str((slurm_cfg.get("root") or {}).get("path", "")))
    bundle = posixpath.dirname(root)
    images_root = posixpath.normpath(conf.images_root)
    container = env_dict((slurm_cfg.get("process") or {}).get("env") or []).get("SLURM_CONTAINER")
    known = ", ".join(conf.image_refs()) or "none"
    shown = container or bundle
    if posixpath.basename(root) != "rootfs" or not bundle.startswith(images_root + "/") or \
            (container is not None and posixpath.normpath(container) != bundle):
        raise NotInCatalog(f"--container={shown} is not an image of site {conf.site}'s catalog; "
                           f"use --image=NAME:TAG (known: {known})")
    name, _, tag = bundle[len(images_root) + 1:].rpartition("/")
    image = conf.image(f"{name}:{tag}")
    if image is None:
        raise NotInCatalog(f"--container={shown}: {name}:{tag} is not in site {conf.site}'s image "
                           f"catalog (known: {known})")
    return image


def node_allocation(conf: NodeConfig, job: str, node_name: str) -> dict[str, list[int]]:
    """The job's device indices on this node, from the Prolog's cache or slurmctld (see the
    module docstring); a node without device files reads nothing (CPU containers start
    without either).

    Under AutoDetect=nvml slurmd numbers the GPUs itself (NVML's order), and the wrapper,
    which runs without NVML's bindings, cannot tell which /dev/nvidiaN a GRES index is:
    a container that holds GPUs there is refused rather than given a guess."""
    if not conf.node(node_name).devices:
        auto = autodetect_of(conf.slurm_conf, node_name)
        if auto == "off":
            return {}
        allocation = _allocation(conf, job, node_name)
        if allocation.get("gpu"):
            raise RuntimeFailure(f"gres.conf has AutoDetect={auto} for {node_name}: slurmd orders its GPUs "
                                 "itself and the container wrapper cannot tell which device file each of "
                                 "the job's GPUs is, so the container does not start (run it without "
                                 "--container, or give the node group File= lines: gres_autodetect off)")
        return allocation
    return _allocation(conf, job, node_name)


def _allocation(conf: NodeConfig, job: str, node_name: str) -> dict[str, list[int]]:
    try:
        return cached_allocation(job, node_name, conf.path, conf.slurm_conf, _log)[0]
    except RuntimeFailure as e:
        raise RuntimeFailure(f"{e}, so the container does not start") from e


def _log(text: str) -> None:
    print(f"{PREFIX}: {text}", file=sys.stderr)


@dataclass(frozen=True)
class Launch:
    image: Image
    variant: ImageVariant
    devices: DevicePlan
    config: dict[str, Any]


def prepare(conf: NodeConfig, node_name: str, slurm_cfg: dict[str, Any],
            allocation: dict[str, list[int]]) -> Launch:
    """Everything but the runtime: the variant and the config.json to run it."""
    image = requested_image(slurm_cfg, conf)
    node: NodeFacts = conf.node(node_name)
    env = env_dict((slurm_cfg.get("process") or {}).get("env") or [])
    devices = plan_devices(node, allocation)  # slurmctld's, never narrowed or widened by env
    if len(devices.stacks) > 1:
        raise NoVariant(f"the job holds devices of several stacks on {node_name} "
                        f"({', '.join(devices.stacks)}); one image variant serves one stack")
    variant = resolve(image, node, devices.stacks[0] if devices.stacks else None)
    variant_dir = image.bundle_path(variant, conf.images_root)
    variant_cfg = read_json(posixpath.join(variant_dir, "config.json"),
                            f"bundle of {image.ref} {variant.label}:")
    mounts = always_mounts(conf.mounts)
    # The user's mounts see the ones runc makes before them (build_config's order).
    earlier = [*(variant_cfg.get("mounts") or []), *slurm_mounts(slurm_cfg), *mounts]
    mounts += check_mounts(env.get(MOUNTS_VAR, ""), conf.mounts,
                           rootfs=rootfs_path(variant_cfg, variant_dir), earlier=earlier)
    mounts += driver_mounts(node, devices.stacks, conf.driver_dirs)
    uid, gid = os.getuid(), os.getgid()
    config = build_config(
        variant_cfg, variant_dir, slurm_cfg, devices=devices, fabric_env=node.env, mounts=mounts,
        hostname=node_name, rootless=os.geteuid() != 0, uid=uid, gid=gid,
        annotations={"org.slurm-hetero.image": image.ref,
                     "org.slurm-hetero.variant": variant.label,
                     "org.slurm-hetero.node": node_name})
    check_image_untouched(config, f"image {image.ref} {variant.label}")
    return Launch(image, variant, devices, config)


USAGE = (f"usage: {PREFIX} container run --conf FILE --bundle DIR --node N --job J --id ID "
         "--runc-root DIR")
OPTIONS = ("conf", "bundle", "node", "job", "id", "runc-root")


def parse_options(argv: Sequence[str]) -> dict[str, str]:
    """--name value pairs, all of OPTIONS (oci.conf passes them; argparse costs ~10 ms)."""
    out: dict[str, str] = {}
    it = iter(argv)
    for arg in it:
        name = arg[2:] if arg.startswith("--") else ""
        value = next(it, None)
        if name not in OPTIONS or value is None:
            raise InputError(f"unexpected argument {arg!r}; {USAGE}")
        out[name] = value
    missing = [f"--{n}" for n in OPTIONS if n not in out]
    if missing:
        raise InputError(f"missing {', '.join(missing)}; {USAGE}")
    return out


def run(argv: Sequence[str]) -> int:
    a = parse_options(argv)
    conf = NodeConfig.load(a["conf"])
    slurm_path = posixpath.join(a["bundle"], "config.json")
    slurm_cfg = read_json(slurm_path, "Slurm's container config")
    allocation = node_allocation(conf, a["job"], a["node"])
    launch = prepare(conf, a["node"], slurm_cfg, allocation)
    write_json_atomic(slurm_path, launch.config, indent=1, mode=0o640)
    if os.environ.get("SLURM_HETERO_VERBOSE"):
        print(f"{PREFIX}: {launch.image.ref} -> {launch.variant.label} on {a['node']}", file=sys.stderr)
    argv_runc = [conf.runc, "--root", a["runc-root"], "run", "--bundle", a["bundle"], a["id"]]
    try:
        os.execv(argv_runc[0], argv_runc)
    except OSError as e:
        raise RuntimeFailure(f"cannot run {argv_runc[0]}: {e.strerror}") from e
    return 0  # not reached


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "run":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        return run(args[1:])
    except HeteroError as e:
        print(f"{PREFIX}: container refused: {e}", file=sys.stderr)
        return e.exit_code
