"""`slurm-hetero container ...`: thin click adapters over the containers package.

oci.conf does not go through click (its start-up cost is every container task's):
it runs oci_run.py with `python -I -S`; `container run` here is the same wrapper for
people testing it by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from slurm_hetero.cliutil import console, reports_errors, site_option


@click.group()
def container() -> None:
    """Container images for each node's arch and accelerator stack (the OCI wrapper)."""


@container.command("run", context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def container_run(args: tuple[str, ...]) -> None:
    """oci.conf's RunTimeRun: resolve the variant, write config.json, exec runc."""
    from slurm_hetero.containers.wrapper import main

    sys.exit(main(["run", *args]))


@container.command("images")
@site_option
@reports_errors
def container_images(site_path: Path) -> None:
    """List the site's image catalog: variants, bundle folders, minimum drivers."""
    from slurm_hetero.site import load_site

    site = load_site(site_path)
    t = Table(title=f"images of site {site.name} (root {site.containers.images_root})")
    for col in ("image", "variant", "bundle", "min driver"):
        t.add_column(col)
    for ref, img in sorted(site.images.items()):
        for v in img.variants:
            t.add_row(ref, v.label, img.bundle_path(v, site.containers.images_root), v.min_driver or "")
    console.print(t)


@container.command("resolve")
@click.argument("image")
@click.option("--node", required=True, help="The node the job runs on.")
@click.option("--gres", "gres", multiple=True, metavar="NAME=IDX",
              help="The job's indices on the node, e.g. gpu=0,1 or npu=2 (repeatable).")
@site_option
@reports_errors
def container_resolve(image: str, node: str, gres: tuple[str, ...], site_path: Path) -> None:
    """Show the variant, devices and variables a job with IMAGE would get on NODE."""
    from slurm_hetero.conf.containers import node_document
    from slurm_hetero.conf.render import Profile
    from slurm_hetero.containers.gres import parse_ranges
    from slurm_hetero.containers.nodeconf import NodeConfig
    from slurm_hetero.containers.ociconfig import DeviceNode, plan_devices
    from slurm_hetero.containers.resolve import NoVariant, resolve
    from slurm_hetero.errors import InputError
    from slurm_hetero.site import load_site

    conf = NodeConfig(node_document(load_site(site_path), Profile()))
    img = conf.image(image)
    if img is None:
        raise InputError(f"IMAGE {image!r}: not in the catalog; known: {', '.join(conf.image_refs())}")
    allocation = {}
    for item in gres:
        name, sep, idx = item.partition("=")
        try:
            allocation[name] = parse_ranges(idx) if sep else []
        except ValueError as e:
            raise InputError(f"--gres {item!r}: use NAME=IDX[,IDX...], e.g. gpu=0,1") from e
    facts = conf.node(node)
    plan = plan_devices(facts, allocation, probe=lambda host, path: DeviceNode(host, path, 0, 0))
    if len(plan.stacks) > 1:
        raise NoVariant(f"devices of several stacks ({', '.join(plan.stacks)})")
    variant = resolve(img, facts, plan.stacks[0] if plan.stacks else None)
    console.print(f"{img.ref} on {node} ({facts.arch}): [bold]{variant.label}[/bold] "
                  f"from {img.bundle_path(variant, conf.images_root)}")
    for d in plan.nodes:
        console.print(f"  device {d.path}  (host {d.host})")
    for k, v in {**facts.env, **plan.visible}.items():
        console.print(f"  {k}={v}")


@container.command("stubs")
@site_option
@click.option("--root", type=click.Path(path_type=Path), default=None,
              help="Images folder [default: the site's containers.images_root]")
@reports_errors
def container_stubs(site_path: Path, root: Path | None) -> None:
    """Write each image's stub bundle (what --image points Slurm at); run on every node."""
    from slurm_hetero.containers.bundle import write_stubs
    from slurm_hetero.site import load_site

    site = load_site(site_path)
    paths = write_stubs(site, str(root or site.containers.images_root))
    console.print(f"wrote {len(paths)} stubs under {root or site.containers.images_root}")


@container.command("busybox")
@site_option
@click.option("--root", type=click.Path(path_type=Path), required=True, help="Images folder.")
@reports_errors
def container_busybox(site_path: Path, root: Path) -> None:
    """Build a busybox bundle for every variant (stand-ins for real images: demo, tests)."""
    from slurm_hetero.containers.bundle import busybox_variants, write_stubs
    from slurm_hetero.site import load_site

    site = load_site(site_path)
    built = busybox_variants(site, str(root))
    write_stubs(site, str(root))
    console.print(f"built {len(built)} busybox bundles under {root}")
