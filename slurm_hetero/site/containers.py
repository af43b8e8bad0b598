"""The site file's `containers:` and `images:` sections (and node groups' `drivers`/`fabric`),
checked after the JSON Schema: every problem is reported with its YAML path."""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from slurm_hetero.site.images import (
    DEFAULT_DRIVER_DIRS,
    DEFAULT_IMAGES_ROOT,
    BindMount,
    ContainerSettings,
    DriverInfo,
    Image,
    ImageVariant,
    default_bundle,
    is_version,
    ref_problem,
    split_ref,
)
from slurm_hetero.site.model import NodeGroup
from slurm_hetero.site.names import ARCH_ALIASES, ARCH_ALLOWED, near

Err = Callable[..., None]  # _Builder.err(path, message, hint="")
RESERVED = ("/proc", "/sys", "/dev", "/tmp/slurm", "/var/run/slurm")
VERSION_HINT = "a version starts with a digit, e.g. \"12.4\" or \"8.0.RC1\" (quote it)"


def _abs_path_problem(path: str) -> str | None:
    if ".." in path.split("/"):
        return "must not contain '..'"
    if posixpath.normpath(path) != path.rstrip("/") and path != "/":
        return f"write it normalized: {posixpath.normpath(path)}"
    return None


def _drivers(raw: dict[str, Any], base: tuple[str | int, ...], err: Err) -> dict[str, DriverInfo]:
    out = {}
    for stack, d in raw.items():
        for key in ("driver", "max_version"):
            if key in d and not is_version(d[key]):
                err((*base, stack, key), f"{d[key]!r} is not a version", VERSION_HINT)
        out[stack] = DriverInfo(driver=d.get("driver"), max_version=d.get("max_version"))
    return out


def _mounts(raw: list[dict[str, Any]], err: Err) -> tuple[BindMount, ...]:
    out: list[BindMount] = []
    for i, m in enumerate(raw):
        base = ("containers", "mounts", i)
        src, dst = m["source"], m.get("destination", m["source"])
        for key, path in (("source", src), ("destination", dst)):
            problem = _abs_path_problem(path)
            if problem:
                err((*base, key), f"{path!r} {problem}")
        if posixpath.normpath(src) == "/":
            err((*base, "source"), "mounting the host's / is not allowed",
                "allow the folders users need, e.g. /scratch")
        if any(dst == r or dst.startswith(r + "/") for r in RESERVED) or posixpath.normpath(dst) == "/":
            err((*base, "destination"), f"{dst!r} is reserved in containers",
                "not /, " + ", ".join(RESERVED))
        if any(o.source == src for o in out):
            err((*base, "source"), f"{src!r} is listed twice")
        out.append(BindMount(src.rstrip("/") or "/", dst.rstrip("/") or "/", m.get("mode", "ro"),
                             bool(m.get("always", False))))
    return tuple(out)


def _image(ref: str, raw: dict[str, Any], arch_aliases: dict[str, str], err: Err) -> Image | None:
    base: tuple[str | int, ...] = ("images", ref)
    problem = ref_problem(ref)
    if problem:
        err(base, f"image {ref!r}: {problem}", "e.g. pytorch:24.05 or nvidia/pytorch:24.05-py3")
        return None
    name, tag = split_ref(ref)
    variants: list[ImageVariant] = []
    for j, v in enumerate(raw["variants"]):
        vbase = (*base, "variants", j)
        arch = arch_aliases.get(str(v["arch"]).lower())
        if arch is None:
            err((*vbase, "arch"), f"unknown architecture {v['arch']!r}",
                ARCH_ALLOWED)
            continue
        stack, version = v["stack"], v.get("version")
        if stack == "cpu":
            for key in ("version", "min_driver"):
                if key in v:
                    err((*vbase, key), f"a cpu variant has no {key}", "remove it")
        elif version is None:
            err(vbase, f"a {stack} variant needs the version of {stack} it was built for",
                "add version: \"12.4\" (the toolkit version, quoted)")
        for key in ("version", "min_driver"):
            if key in v and not is_version(v[key]):
                err((*vbase, key), f"{v[key]!r} is not a version", VERSION_HINT)
        bundle = v.get("bundle") or default_bundle(arch, stack, version)
        if ".." in bundle.split("/") or "\0" in bundle:
            err((*vbase, "bundle"), f"{bundle!r} must not contain '..'",
                "an absolute folder, or one relative to <images_root>/<name>/<tag>")
        variant = ImageVariant(arch, stack, version if stack != "cpu" else None, bundle,
                               v.get("min_driver") if stack != "cpu" else None)
        if any((x.arch, x.stack, x.version) == (arch, stack, variant.version) for x in variants):
            err(vbase, f"variant {variant.label} is listed twice")
        variants.append(variant)
    return Image(name, tag or "", tuple(variants), raw.get("description", ""))


def load_containers(data: dict[str, Any], groups: tuple[NodeGroup, ...],
                    err: Err) -> tuple[dict[str, Image], ContainerSettings, tuple[NodeGroup, ...]]:
    """Images, settings, and the node groups with their drivers and fabric filled in."""
    raw = data.get("containers") or {}
    root = raw.get("images_root", DEFAULT_IMAGES_ROOT)
    problem = _abs_path_problem(root)
    if problem:
        err(("containers", "images_root"), f"{root!r} {problem}")
    fabrics = {k: dict(v) for k, v in (raw.get("fabrics") or {}).items()}
    driver_dirs = dict(DEFAULT_DRIVER_DIRS)
    for stack, dirs in (raw.get("driver_dirs") or {}).items():
        for k, d in enumerate(dirs):
            problem = _abs_path_problem(d)
            if problem:
                err(("containers", "driver_dirs", stack, k), f"{d!r} {problem}")
        driver_dirs[stack] = tuple(dirs)
    settings = ContainerSettings(
        images_root=root.rstrip("/"), mounts=_mounts(raw.get("mounts") or [], err), fabrics=fabrics,
        drivers=_drivers(raw.get("drivers") or {}, ("containers", "drivers"), err),
        driver_dirs=driver_dirs)
    images: dict[str, Image] = {}
    for ref, body in (data.get("images") or {}).items():
        image = _image(ref, body, ARCH_ALIASES, err)
        if image:
            images[ref] = image
    if len(groups) != len(data["node_groups"]):
        return images, settings, groups  # a group was refused already: its errors stand
    out = []
    for i, (g, rawg) in enumerate(zip(groups, data["node_groups"], strict=True)):
        base: tuple[str | int, ...] = ("node_groups", i)
        stacks = {a.model.stack for a in g.accelerators}
        own = _drivers(rawg.get("drivers") or {}, (*base, "drivers"), err)
        for stack in own:
            if stack not in stacks:
                err((*base, "drivers", stack), f"the group has no {stack} accelerators",
                    "declare drivers for the stacks of its accelerators: "
                    + (", ".join(sorted(stacks)) or "none (a CPU group)"))
        drivers = {s: d for s, d in {**settings.drivers, **own}.items() if s in stacks}
        fabric = rawg.get("fabric")
        if fabric is not None and fabric not in fabrics:
            err((*base, "fabric"), f"unknown fabric {fabric!r}",
                near(fabric, fabrics) if fabrics else "declare it under containers.fabrics")
        out.append(replace(g, drivers=tuple(sorted(drivers.items())), fabric=fabric))
    return images, settings, tuple(out)
