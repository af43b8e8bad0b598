"""The site's `monitor:` section: where the Prometheus exporters listen, and the web config
file (TLS, basic auth) they serve /metrics with. Standard library only: the exporters check
their `--listen` with the same parser at start-up.
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

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Err = Callable[[tuple[str | int, ...], str, str], None]


@dataclass(frozen=True)
class MonitorSettings:
    listen: str = DEFAULT_LISTEN  # an address or a CIDR network (parse_listen)
    web_config_file: str | None = None  # exporter-toolkit web config on every exporter's host


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


def load_monitor(data: dict[str, Any], err: Err) -> MonitorSettings:
    m = data.get("monitor") or {}
    listen = str(m.get("listen", DEFAULT_LISTEN))
    try:
        parse_listen(listen, shared=True)
    except ValueError as e:
        err(("monitor", "listen"), str(e), LISTEN_HINT)
    return MonitorSettings(listen=listen, web_config_file=m.get("web_config_file"))
