"""The image catalog of a site and the node facts variant resolution needs (pure data).

An image is a logical name:tag; each of its variants is one prepared OCI bundle for one
architecture and accelerator stack (cuda/rocm/cann with the toolkit version it was built
for, or cpu). Nodes declare, per stack, their driver version and the newest toolkit that
driver supports; a variant fits a node when its toolkit is not newer than that and its
minimum driver is not newer than the node's driver.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

ARCHES = ("x86_64", "aarch64")
DEFAULT_IMAGES_ROOT = "/var/lib/slurm-hetero/images"
# Host folders a stack's containers need read-only (the Ascend driver's user-space part).
DEFAULT_DRIVER_DIRS: dict[str, tuple[str, ...]] = {"cann": ("/usr/local/Ascend/driver",)}

# The grammar the SPANK plugin enforces for --image: '/'-separated components of
# [A-Za-z0-9._-] starting with a letter or digit, then an optional :TAG.
_COMPONENT = r"[A-Za-z0-9][A-Za-z0-9._-]*"
IMAGE_NAME = re.compile(rf"^{_COMPONENT}(/{_COMPONENT})*$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_VERSION_TOKEN = re.compile(r"\d+|[A-Za-z]+")


def split_ref(ref: str) -> tuple[str, str | None]:
    """'nvidia/pytorch:24.05' → ('nvidia/pytorch', '24.05'); no tag → (name, None)."""
    name, sep, tag = ref.rpartition(":")
    return (name, tag) if sep else (ref, None)


def ref_problem(ref: str) -> str | None:
    """Why an image reference is not NAME:TAG of the allowed grammar (None when it is)."""
    if "\0" in ref:
        return "contains a NUL byte"
    name, tag = split_ref(ref)
    if tag is None:
        return "needs a tag: NAME:TAG"
    if not IMAGE_NAME.match(name) or ".." in name:
        return ("NAME must be '/'-separated components of letters, digits, '.', '_' or '-' "
                "starting with a letter or digit, without '..'")
    if not IMAGE_TAG.match(tag):
        return "TAG must be letters, digits, '.', '_' or '-' (at most 128) not starting with '.' or '-'"
    return None


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Sortable key: numbers compare as numbers; letters ('RC', 'beta') sort before numbers,
    so 8.0.RC1 < 8.0.0 and 535.104.05 < 550.54.14.

    >>> version_key("8.0.RC1") < version_key("8.0.0") < version_key("8.0.1")
    True
    """
    out: list[tuple[int, int | str]] = []
    for tok in _VERSION_TOKEN.findall(version):
        out.append((1, int(tok)) if tok.isdigit() else (0, tok.lower()))
    return tuple(out)


def is_version(text: str) -> bool:
    return bool(re.match(r"^\d", text)) and bool(version_key(text))


def at_most(version: str, newest: str) -> bool:
    """version ≤ newest at newest's precision: a driver for CUDA 12.2 runs 12.2.1, not 12.4.

    >>> at_most("12.2.1", "12.2"), at_most("12.4", "12.2"), at_most("8.0.RC1", "8.0")
    (True, False, True)
    """
    limit = version_key(newest)
    return version_key(version)[: len(limit)] <= limit


def at_least(version: str, oldest: str) -> bool:
    return version_key(version) >= version_key(oldest)


@dataclass(frozen=True)
class ImageVariant:
    arch: str  # x86_64 or aarch64
    stack: str  # cuda, rocm, cann or cpu
    version: str | None  # toolkit version the variant was built for (None for cpu)
    bundle: str  # OCI bundle folder: absolute, or relative to <images_root>/<name>/<tag>
    min_driver: str | None = None

    @property
    def label(self) -> str:
        """'x86_64/cuda12.4', 'aarch64/cpu': how messages and the bridge name a variant."""
        return f"{self.arch}/{self.stack}{self.version or ''}"


def default_bundle(arch: str, stack: str, version: str | None) -> str:
    return f"{arch}-{stack}{version or ''}"


@dataclass(frozen=True)
class Image:
    name: str
    tag: str
    variants: tuple[ImageVariant, ...]
    description: str = ""

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}"

    def logical_path(self, images_root: str) -> str:
        """The bundle the bridge gives Slurm (--container): a stub the wrapper replaces."""
        return f"{images_root.rstrip('/')}/{self.name}/{self.tag}"

    def bundle_path(self, variant: ImageVariant, images_root: str) -> str:
        if variant.bundle.startswith("/"):
            return variant.bundle
        return f"{self.logical_path(images_root)}/{variant.bundle}"


@dataclass(frozen=True)
class DriverInfo:
    """What a node's driver for one stack supports."""

    driver: str | None = None  # e.g. NVIDIA 550.54.14, Ascend 24.1.rc1
    max_version: str | None = None  # newest toolkit it runs: CUDA 12.4, CANN 8.0


@dataclass(frozen=True)
class BindMount:
    """A host folder the admin allows in containers (`always`: in every container)."""

    source: str
    destination: str
    mode: str = "ro"  # ro or rw: the most a user may ask for
    always: bool = False


@dataclass(frozen=True)
class ContainerSettings:
    images_root: str = DEFAULT_IMAGES_ROOT
    mounts: tuple[BindMount, ...] = ()
    fabrics: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    drivers: Mapping[str, DriverInfo] = field(default_factory=dict)  # site-wide, per stack
    driver_dirs: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_DRIVER_DIRS))
