"""`slurm-hetero power ...`: the programs slurmctld runs (suspend, resume, resume-failed,
rendered as hetero-power-* next to slurm.conf) and `status` for admins.

Registered in slurm_hetero/cli.py with `main.add_command(power)`.
"""

from __future__ import annotations

from pathlib import Path

import click

from slurm_hetero.cliutil import console, reports_errors, required_site_option
from slurm_hetero.errors import InputError
from slurm_hetero.site.model import Site

_STATE = click.option("--state-dir", type=click.Path(path_type=Path), default=None,
                      help="Where refused suspends are recorded (slurmctld's StateSaveLocation).")
_LOG = click.option("--log", "log_path", type=click.Path(path_type=Path), default=None,
                    help="Append decisions to this file [default: stderr].")


def _site(site_path: Path) -> Site:
    from slurm_hetero.site import load_site

    site = load_site(site_path)
    if not site.power.enabled:
        raise InputError(f"{site_path}: power.enabled is not true: power saving is off for this site")
    return site


@click.group("power")
def power() -> None:
    """Power saving: Slurm's Suspend/ResumeProgram and the forecast-driven keeper."""


@power.command("suspend")
@required_site_option
@_STATE
@_LOG
@click.argument("hostlist")
@reports_errors
def suspend_cmd(site_path: Path, state_dir: Path | None, log_path: Path | None, hostlist: str) -> None:
    """SuspendProgram: power down HOSTLIST's nodes, refusing any that must stay up."""
    from slurm_hetero.power.methods import method_for
    from slurm_hetero.power.program import file_log, suspend
    from slurm_hetero.slurm.runner import Runner

    site = _site(site_path)
    suspend(site, hostlist, Runner(), method_for(site.power), file_log(log_path), state_dir)


@power.command("resume")
@required_site_option
@_STATE
@_LOG
@click.argument("hostlist")
@reports_errors
def resume_cmd(site_path: Path, state_dir: Path | None, log_path: Path | None, hostlist: str) -> None:
    """ResumeProgram: power up HOSTLIST's nodes."""
    from slurm_hetero.power.methods import method_for
    from slurm_hetero.power.program import file_log, resume

    site = _site(site_path)
    resume(site, hostlist, method_for(site.power), file_log(log_path), state_dir)


@power.command("resume-failed")
@required_site_option
@_LOG
@click.argument("hostlist")
@reports_errors
def resume_failed_cmd(site_path: Path, log_path: Path | None, hostlist: str) -> None:
    """ResumeFailProgram: log the nodes that did not come back within resume_timeout."""
    from slurm_hetero.power.program import file_log, resume_failed

    resume_failed(_site(site_path), hostlist, file_log(log_path))


@power.command("status")
@required_site_option
@reports_errors
def status_cmd(site_path: Path) -> None:
    """Per pool: running, idle awake, asleep, and what the keeper would do now without a
    forecast (the bridge daemon's keeper adds the forecast's need)."""
    from rich.table import Table

    from slurm_hetero.power.keeper import Keeper
    from slurm_hetero.power.methods import describe
    from slurm_hetero.slurm.runner import Runner

    site = _site(site_path)
    plan = Keeper(site, Runner()).plan(None)
    t = Table(title=f"power saving of {site.name} (horizon {site.power.horizon} min, "
                    f"headroom {site.power.headroom:g})")
    for col in ("pool", "need", "running", "idle", "keep idle", "asleep", "would wake", "would sleep"):
        t.add_column(col)
    for p in plan.pools:
        t.add_row(p.pool, f"{p.need:g}", f"{p.running:g}", str(p.idle), str(p.keep_idle), str(p.asleep),
                  ",".join(p.wake) or "-", ",".join(p.sleep) or "-")
    console.print(t)
    for line in describe(site.power):
        console.print(line)
