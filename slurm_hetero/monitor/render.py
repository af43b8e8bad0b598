"""Prometheus configuration and systemd units for the exporters: they live in
`conf.monitoring` (floor 5), since `conf render` writes them with the Slurm files; these
names stay here for the exporters' other users (the dev cluster, the tests)."""

from __future__ import annotations

from slurm_hetero.conf.monitoring import (
    PrometheusSettings,
    monitoring_files,
    render_prometheus,
    render_scrape,
    render_units,
    settings_for_site,
)

__all__ = ["PrometheusSettings", "monitoring_files", "render_prometheus", "render_scrape", "render_units",
           "settings_for_site"]
