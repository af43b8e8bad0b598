"""`slurm-hetero checkpoint`: the fenced checkpoint protocol for shell job scripts.

    eval "$(slurm-hetero checkpoint begin /shared/ckpt/$SLURM_JOB_ID)"
    [ -n "$HETERO_CKPT_RESUME" ] && restore_from "$HETERO_CKPT_RESUME"
    tmp=$(slurm-hetero checkpoint temp /shared/ckpt/$SLURM_JOB_ID); save_to "$tmp"
    slurm-hetero checkpoint commit /shared/ckpt/$SLURM_JOB_ID "$tmp" || exit 0  # 3: fenced

Exit status 3 means a newer incarnation owns the folder: stop without writing more.
Exit status 2 (with the path and the reason) means the folder cannot be trusted: it, its
epochs/ or a checkpoint in it is another user's, writable by group or others, or a link.
Without DIR, the folder is $SLURM_HETERO_CHECKPOINT, which a job submitted with
`sbatch --checkpoint=DIR` finds set (the hetero SPANK plugin sets it).
"""

from __future__ import annotations

import os
import shlex
import sys

import click

from slurm_hetero.cliutil import reports_errors

FENCED_EXIT = 3
FOLDER_VAR = "SLURM_HETERO_CHECKPOINT"


def _folder(given: str | None) -> str:
    """FOLDER as given, else the job's --checkpoint folder."""
    if given:
        return given
    value = os.environ.get(FOLDER_VAR, "")
    if not value:
        raise click.UsageError(f"no FOLDER given and {FOLDER_VAR} is not set "
                               "(a job submitted with --checkpoint=DIR has it)")
    return value


def _epoch_from_env() -> str:
    value = os.environ.get("HETERO_CKPT_EPOCH", "")
    if not value:
        raise click.UsageError("HETERO_CKPT_EPOCH is not set: run "
                               "`eval \"$(slurm-hetero checkpoint begin DIR)\"` first")
    return value


@click.group()
def checkpoint() -> None:
    """Checkpoints fenced by epoch: a requeued job's stale incarnation never overwrites."""


@checkpoint.command("begin")
@click.argument("folder", required=False)
@reports_errors
def begin(folder: str | None) -> None:
    """Claim this incarnation's epoch; print shell assignments (HETERO_CKPT_EPOCH, HETERO_CKPT_RESUME)."""
    from slurm_hetero.checkpoint import Checkpointer, FencedOut

    try:
        ck = Checkpointer(_folder(folder))
    except FencedOut as e:
        click.echo(f"slurm-hetero checkpoint: {e}", err=True)
        sys.exit(FENCED_EXIT)
    click.echo(f"export HETERO_CKPT_EPOCH={shlex.quote(str(ck.epoch))}")
    click.echo(f"export HETERO_CKPT_RESUME={shlex.quote(ck.resume or '')}")


@checkpoint.command("temp")
@click.argument("folder", required=False)
@reports_errors
def temp(folder: str | None) -> None:
    """Print a fresh temp path in FOLDER to write the next checkpoint to."""
    from slurm_hetero.checkpoint.fence import CheckpointDir, Epoch

    click.echo(CheckpointDir(_folder(folder)).temp_path(Epoch.parse(_epoch_from_env())))


@checkpoint.command("commit")
@click.argument("paths", nargs=-1, required=True, metavar="[FOLDER] TEMP_PATH")
@reports_errors
def commit(paths: tuple[str, ...]) -> None:
    """Publish TEMP_PATH as the newest checkpoint; exit 3 if a newer incarnation owns FOLDER."""
    from slurm_hetero.checkpoint.fence import CheckpointDir, Epoch, FencedOut

    if len(paths) > 2:
        raise click.UsageError("commit takes [FOLDER] TEMP_PATH")
    folder, temp_path = _folder(paths[0] if len(paths) == 2 else None), paths[-1]
    try:
        click.echo(CheckpointDir(folder).commit(Epoch.parse(_epoch_from_env()), temp_path))
    except FencedOut as e:
        click.echo(f"slurm-hetero checkpoint: {e}", err=True)
        sys.exit(FENCED_EXIT)


@checkpoint.command("latest")
@click.argument("folder", required=False)
@reports_errors
def latest(folder: str | None) -> None:
    """Print the checkpoint a new incarnation would resume from (nothing if none)."""
    from slurm_hetero.checkpoint.fence import CheckpointDir

    click.echo(CheckpointDir(_folder(folder)).latest() or "")
