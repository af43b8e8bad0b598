"""Choose the variant of an image for one node and the job's devices on it (stdlib only)."""

from __future__ import annotations

from slurm_hetero.containers.nodeconf import NodeFacts
from slurm_hetero.errors import InputError
from slurm_hetero.site.images import DriverInfo, Image, ImageVariant, at_least, at_most, version_key

STACK_NAMES = {"cuda": "CUDA", "rocm": "ROCm", "cann": "CANN", "cpu": "CPU"}


class NoVariant(InputError):
    """No variant of the image can run here: the job must not start."""


def driver_problem(v: ImageVariant, drivers: DriverInfo | None, node: str) -> str | None:
    """Why variant v cannot run with the node's driver (None: it can, or nothing is declared)."""
    if v.stack == "cpu" or drivers is None:
        return None
    kit = STACK_NAMES[v.stack]
    have = f" ({drivers.driver})" if drivers.driver else ""
    if v.version and drivers.max_version and not at_most(v.version, drivers.max_version):
        return (f"{v.label} needs {kit} {v.version}, but the driver of {node}{have} "
                f"supports {kit} <= {drivers.max_version}")
    if v.min_driver and drivers.driver and not at_least(drivers.driver, v.min_driver):
        return f"{v.label} needs driver >= {v.min_driver}, but {node} has {drivers.driver}"
    return None


def resolve(image: Image, node: NodeFacts, stack: str | None) -> ImageVariant:
    """The variant to run: same arch; the stack of the job's devices here (stack=None: none,
    then a cpu variant first); of those that fit the driver, the newest toolkit."""
    labels = ", ".join(v.label for v in image.variants)
    same_arch = [v for v in image.variants if v.arch == node.arch]
    if stack is None:
        cpu = [v for v in same_arch if v.stack == "cpu"]
        if cpu:
            return cpu[0]
        # No devices allocated: an accelerator build of the node's stack still runs.
        wanted = node.stacks
    else:
        wanted = [stack]
    candidates = [v for v in same_arch if v.stack in wanted]
    if not candidates:
        need = f"{node.arch}/{stack or 'cpu'}"
        raise NoVariant(f"image {image.ref} has no {need} variant for node {node.name}; "
                        f"it has: {labels}")
    fits, why = [], []
    for v in candidates:
        problem = driver_problem(v, node.drivers.get(v.stack), node.name)
        if problem:
            why.append(problem)
        else:
            fits.append(v)
    if not fits:
        raise NoVariant(f"image {image.ref}: no variant fits the driver of {node.name}: "
                        + "; ".join(why))
    return max(fits, key=lambda v: version_key(v.version or ""))
