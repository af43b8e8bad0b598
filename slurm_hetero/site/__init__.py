"""The site model: a validated description of a heterogeneous cluster."""

from slurm_hetero.site.load import load_site, load_site_text
from slurm_hetero.site.model import AccelGroup, NodeGroup, Partition, QosTier, Site

__all__ = [
    "AccelGroup",
    "NodeGroup",
    "Partition",
    "QosTier",
    "Site",
    "load_site",
    "load_site_text",
]
