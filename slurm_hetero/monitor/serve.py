"""Serving an exporter: its own registry, /metrics over HTTP, rounds until stop()."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.registry import Collector

from slurm_hetero.monitor.web import WebConfig, start_server


class Exporter(Collector, Protocol):
    def run(self, stop: Callable[[], bool]) -> None: ...


def registry_for(exporter: Collector) -> CollectorRegistry:
    """A registry of the exporter and the process's own metrics (CPU, RSS)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exporter)
    ProcessCollector(registry=reg)
    return reg


def serve(exporter: Exporter, port: int, addr: str = "0.0.0.0", stop: Callable[[], bool] | None = None,
          ready: Callable[[int], None] | None = None, web: WebConfig | None = None) -> None:
    """Serve /metrics on addr:port (with the web config's TLS and basic auth) and run the
    exporter until stop() (default: SIGTERM/SIGINT); `ready` gets the port bound (0 picks a
    free one)."""
    stopping = threading.Event()
    if stop is None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())
        stop = stopping.is_set
    server, thread = start_server(registry_for(exporter), port, addr, web)
    if ready:
        ready(int(server.server_address[1]))
    try:
        exporter.run(stop)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
