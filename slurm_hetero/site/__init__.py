"""The site model: a validated description of a heterogeneous cluster.

The names below are loaded on first use (PEP 562): node-side programs that need only a
pure-data module of this package (`site.images` in the container wrapper) do not pay for
the YAML loader and the JSON Schema validator at every job start.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurm_hetero.site.load import load_site, load_site_text
    from slurm_hetero.site.model import AccelGroup, NodeGroup, Partition, QosTier, Site

_WHERE = {"load_site": "load", "load_site_text": "load", "AccelGroup": "model", "NodeGroup": "model",
          "Partition": "model", "QosTier": "model", "Site": "model"}

__all__ = [
    "AccelGroup",
    "NodeGroup",
    "Partition",
    "QosTier",
    "Site",
    "load_site",
    "load_site_text",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
