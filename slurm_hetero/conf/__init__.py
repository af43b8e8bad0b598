"""Rendering every generated file (Slurm configs, job_submit.lua, container and agent config,
units) from a site. Names load on first use: the node-side runtime imports only
`conf.contract` and must not pay for jinja at every job start."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurm_hetero.conf.profile import Profile
    from slurm_hetero.conf.render import render_site, write_files

_WHERE = {"Profile": "profile", "render_site": "render", "write_files": "render"}
__all__ = ["Profile", "render_site", "write_files"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
