"""Rendering of the Slurm configuration files from a site."""

from slurm_hetero.conf.render import Profile, render_site, write_files

__all__ = ["Profile", "render_site", "write_files"]
