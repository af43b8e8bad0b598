"""Monitoring: the node exporter (1 s device samples, 10 s job/node aggregates) and the
cluster exporter (60 s: queue, pools, bridge decisions, snapshot heartbeat), both for
Prometheus through prometheus-client; the Prometheus configuration they need is rendered
from templates/ (render.py) and a Grafana dashboard ships next to this file.

Node side: only the device layer, the agent's state files and prometheus_client are
imported (no site file, no pandas), so the exporter starts fast on every node.
"""
