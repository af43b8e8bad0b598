"""Slurm access: one runner for every Slurm command, and pure parsers of their output."""

from slurm_hetero.slurm.runner import Runner, SlurmCommandError

__all__ = ["Runner", "SlurmCommandError"]
