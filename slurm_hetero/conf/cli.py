"""`slurm-hetero conf import / diff`: thin click adapters over conf/ (registered on the
`conf` group by slurm_hetero/cli.py), and the profile `conf render` and `conf diff` share.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from slurm_hetero.cliutil import reports_errors
from slurm_hetero.conf.profile import Profile
from slurm_hetero.conf.slurmconf import detect_slurm_version, slurm_version_for, version_text
from slurm_hetero.errors import InputError
from slurm_hetero.site.model import Site


def render_profile(site: Site, model_lua: str | None = None) -> tuple[Profile, str]:
    """The production profile `conf render` and `conf diff` use, and a line saying which
    Slurm release it renders for and why (the site's, the installed one, or 22.05)."""
    detected = None if site.slurm.version else detect_slurm_version()
    version, why = slurm_version_for(site, detected)
    return Profile(model_lua=model_lua, slurm_version=version), f"Slurm {version_text(version)}: {why}"


def read_model(model: Path | None) -> str | None:
    try:
        return model.read_text() if model else None
    except OSError as e:
        raise InputError(f"--model {model}: cannot read the exported model: {e.strerror}") from e


def _maps(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        gres_type, eq, model = item.partition("=")
        if not eq or not gres_type or not model:
            raise InputError(f"--map {item!r}: use TYPE=MODEL, e.g. --map a100=a100-80gb")
        out[gres_type] = model
    return out


@click.command("import")
@click.argument("slurm_conf", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("gres_conf", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the site file here [default: print it].")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@click.option("--name", default=None, help="The site's name [default: ClusterName, lowercased].")
@click.option("--slurm-version", default=None, metavar="YY.MM",
              help="Record the Slurm release (22.05 ... 26.05) in the site file.")
@click.option("--map", "maps", multiple=True, metavar="TYPE=MODEL",
              help="Map a GRES type to a catalog model (repeatable), e.g. a100=a100-80gb.")
@reports_errors
def conf_import(slurm_conf: Path, gres_conf: Path | None, output: Path | None, force: bool,
                name: str | None, slurm_version: str | None, maps: tuple[str, ...]) -> None:
    """Read a running site's SLURM_CONF (and GRES_CONF, default: the gres.conf beside it)
    into a site file; notes on what changes or is kept as written go to stderr."""
    from slurm_hetero.conf.importer import import_site
    from slurm_hetero.fileio import write_atomic

    if gres_conf is None and (slurm_conf.parent / "gres.conf").is_file():
        gres_conf = slurm_conf.parent / "gres.conf"
    if output is not None and output.exists() and not force:
        raise InputError(f"-o {output}: exists (use --force to replace it)")
    result = import_site(slurm_conf, gres_conf, name=name, version=slurm_version, gres_map=_maps(maps))
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if output is None:
        click.echo(result.text, nl=False)
    else:
        try:
            write_atomic(output, result.text)
        except OSError as e:
            raise InputError(f"-o {output}: cannot write: {e.strerror}") from e
        click.echo(f"wrote {output} ({len(result.notes)} notes above)", err=True)


@click.command("diff")
@click.argument("site", type=click.Path(path_type=Path))
@click.option("--against", type=click.Path(file_okay=False, path_type=Path), default=Path("/etc/slurm"),
              show_default=True, help="The live configuration folder.")
@click.option("--units-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the systemd units are installed [default: /etc/systemd/system].")
@click.option("--prometheus-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where Prometheus's scrape jobs, target lists and rules are installed "
                   "[default: /etc/prometheus].")
@click.option("--model", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The exported runtime model the render would compile in (as for conf render).")
@reports_errors
def conf_diff(site: Path, against: Path, units_dir: Path | None, prometheus_dir: Path | None,
              model: Path | None) -> None:
    """Show what `conf render SITE` would change in the installed files (nothing is written):
    the Slurm files in --against, the units and Prometheus files where the Ansible role puts
    them. Exit status: 0 no changes, 1 changes, 2 bad input."""
    from slurm_hetero.conf import diff
    from slurm_hetero.conf.importer import read_conf
    from slurm_hetero.conf.render import MODES, render_site
    from slurm_hetero.site import load_site

    s = load_site(site)
    profile, why = render_profile(s, read_model(model))
    files = render_site(s, profile)
    places = diff.install_places(files, units_dir or diff.UNITS_DIR, prometheus_dir or diff.PROMETHEUS_DIR)
    result = diff.diff_files(files, against, MODES, places)
    click.echo(result.text, nl=False)
    for name in result.changed:
        path = places.get(name, against) / name
        if not path.is_file():
            continue  # a new file: the diff is all of it
        try:
            # slurm.conf as Slurm reads it, its Includes in place; the diff above stands without.
            live = ("\n".join(at.text for at in read_conf(path)) if name == "slurm.conf"
                    else path.read_text(encoding="utf-8", errors="replace"))
            changes = diff.file_setting_changes(name, files[name], live)
        except (InputError, OSError) as e:
            click.echo(f"{name}: settings not compared one by one: {e}", err=True)
            continue
        if changes:
            click.echo(f"{name}: {len(changes)} setting(s) would change:", err=True)
            for line in changes:
                click.echo(f"  {line}", err=True)
    if result.not_installed:
        click.echo(f"not installed here, so not compared ({len(result.not_installed)}; the Ansible role "
                   "installs each only on the hosts and with the options that turn it on):", err=True)
        for path_text in result.not_installed:
            click.echo(f"  {path_text}", err=True)
    click.echo(f"{len(result.changed)} file(s) would change ({why})" if result.changed
               else f"no changes ({why})", err=True)
    sys.exit(1 if result.changed else 0)
