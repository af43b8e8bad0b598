"""The site's `monitor:` section: where the Prometheus exporters listen (address, ports), and
the web config file (TLS, basic auth) they serve /metrics with. Standard library only: the
exporters check their `--listen` with the same parser at start-up.

Ports. Prometheus's registry of exporter ports (the "Default port allocations" wiki page)
has had every number of its 9100-9999 range taken since 2023; 9410 and 9411 are listed there
for the ovn-kubernetes node exporter and the SoftEther exporter, and 9411 is also Zipkin's
(and the OpenTelemetry collector's zipkin receiver). None of these runs on a Slurm node as a
rule, whereas the exporters that do sit elsewhere (KNOWN_PORTS): so the defaults stay, a
site where one collides moves ours (`monitor.node_port`, `monitor.cluster_port`), and a
value taken by an exporter of the HPC ecosystem or by Slurm itself is refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# All interfaces, as Prometheus's own exporters listen: Prometheus scrapes from another host.
DEFAULT_LISTEN = "0.0.0.0"
LISTEN_HINT = ("an address (0.0.0.0 or :: for every interface, 127.0.0.1 for this host only) or a "
               "network in CIDR form (10.1.0.0/16): each host then listens on its own address in it")
DEFAULT_NODE_PORT = 9410
DEFAULT_CLUSTER_PORT = 9411
# What else listens on a Slurm controller or GPU/NPU node (each program's own default).
KNOWN_PORTS: dict[int, str] = {
    5000: "AMD's device-metrics-exporter", 6817: "slurmctld", 6818: "slurmd", 6819: "slurmdbd",
    6820: "slurmrestd", 8080: "prometheus-slurm-exporter (vpenso; registered as 9341)",
    8082: "Ascend's npu-exporter", 9090: "Prometheus", 9093: "Alertmanager", 9100: "node_exporter",
    9290: "ipmi_exporter", 9306: "cgroup_exporter (jobstats)", 9341: "prometheus-slurm-exporter",
    9400: "NVIDIA's dcgm-exporter", 9445: "nvidia_gpu_prometheus_exporter (jobstats)",
}
# The exporters' own system user (no login, no home): the role creates it, the units run as it.
EXPORTER_USER = "slurm-hetero-exporter"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Err = Callable[[tuple[str | int, ...], str, str], None]


@dataclass(frozen=True)
class MonitorSettings:
    listen: str = DEFAULT_LISTEN  # an address or a CIDR network (parse_listen)
    web_config_file: str | None = None  # exporter-toolkit web config on every exporter's host
    node_port: int = DEFAULT_NODE_PORT
    cluster_port: int = DEFAULT_CLUSTER_PORT


def parse_listen(text: str, shared: bool = False) -> Address | Network:
    """An address or a network to listen in; ValueError says why not. `shared`: one value
    for every node's exporter, where a host's own address would fit one node only.

    >>> parse_listen("10.1.0.0/16"), parse_listen("::")
    (IPv4Network('10.1.0.0/16'), IPv6Address('::'))
    """
    try:
        addr: Address | None = ipaddress.ip_address(text)
    except ValueError:
        addr = None
    if addr is not None:
        if shared and not (addr.is_unspecified or addr.is_loopback):
            raise ValueError(f"{text} is one host's address, but every node's exporter listens on this "
                             "value: write the network it lies in (e.g. 10.1.0.0/16)")
        return addr
    try:
        return ipaddress.ip_network(text)
    except ValueError as e:
        raise ValueError(f"{text!r} is neither an IP address nor a network: {e}") from None


def port_problem(port: int) -> str | None:
    """Why `port` is no place for an exporter, or None.

    >>> port_problem(9410) is None, port_problem(9400)
    (True, "9400 is NVIDIA's dcgm-exporter's")
    """
    if port in KNOWN_PORTS:
        return f"{port} is {KNOWN_PORTS[port]}'s"
    return None


def load_monitor(data: dict[str, Any], err: Err) -> MonitorSettings:
    m = data.get("monitor") or {}
    listen = str(m.get("listen", DEFAULT_LISTEN))
    try:
        parse_listen(listen, shared=True)
    except ValueError as e:
        err(("monitor", "listen"), str(e), LISTEN_HINT)
    # The schema checked the ports' type and range; here what they may not be.
    defaults = {"node_port": DEFAULT_NODE_PORT, "cluster_port": DEFAULT_CLUSTER_PORT}
    node_port, cluster_port = (m.get(key, default) for key, default in defaults.items())
    for key, port in (("node_port", node_port), ("cluster_port", cluster_port)):
        if isinstance(port, int) and (why := port_problem(port)):
            err(("monitor", key), why, "a port no other exporter or Slurm daemon of the cluster uses "
                                       f"(default {defaults[key]})")
    if node_port == cluster_port:  # a controller that runs slurmd too runs both exporters
        err(("monitor", "cluster_port"), f"{cluster_port} is monitor.node_port too",
            "two different ports: a controller that is also a compute node runs both exporters")
    return MonitorSettings(listen=listen, web_config_file=m.get("web_config_file"),
                           node_port=int(node_port), cluster_port=int(cluster_port))
