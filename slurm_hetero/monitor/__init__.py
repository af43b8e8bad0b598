"""Monitoring: the node exporter (1 s device samples, 10 s job/node aggregates) and the
cluster exporter (60 s: queue, pools, bridge decisions, snapshot heartbeat), both for
Prometheus through prometheus-client; their units and the Prometheus configuration they
need are rendered from templates/ by `conf render` (conf/monitoring.py, also importable as
monitor.render), and a Grafana dashboard ships next to this file.

Node side: only the device layer, the agent's state files and prometheus_client are
imported (no site file, no pandas), so the exporter starts fast on every node.
"""
