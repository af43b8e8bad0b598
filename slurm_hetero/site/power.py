"""The `power:` section: Slurm's power saving through slurm-hetero's Suspend/ResumeProgram.

The schema checks shapes; here the checks that need the rest of the site: the method's own
subsection is there (and no other method's), excluded partitions and nodes exist, password
files are absolute paths without `..`, and the timeouts leave a booting node time to register.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_hetero.site.limits import shown
from slurm_hetero.site.model import NodeGroup, Partition, PowerSettings, Site
from slurm_hetero.site.names import near
from slurm_hetero.site.pools import group_pool

Err = Callable[[tuple[str | int, ...], str, str], None]
METHODS = ("ipmi", "redfish", "command", "devcluster")
_SECTION = {"ipmi": "ipmi", "redfish": "redfish", "command": "command"}


def load_power(data: dict[str, Any], groups: tuple[NodeGroup, ...], partitions: tuple[Partition, ...],
               err: Err) -> PowerSettings:
    """The site's PowerSettings (defaults: off); problems go to err."""
    p = data.get("power")
    if not p:
        return PowerSettings()
    base: tuple[str | int, ...] = ("power",)
    enabled = bool(p.get("enabled", False))
    method = p.get("method", "command")
    if enabled and "method" not in p:
        err((*base, "method"), "power saving needs a method", "one of: " + ", ".join(METHODS))
    own = _SECTION.get(method)
    if enabled and own and own not in p:
        err((*base, own), f"method {method} needs its subsection power.{own}",
            {"ipmi": "ipmi: {bmc: '{node}-bmc', user: admin, password_file: /etc/slurm/bmc.pass}",
             "redfish": "redfish: {url: 'https://{node}-bmc/redfish/v1/Systems/1', user: admin, "
                        "password_file: /etc/slurm/bmc.pass}",
             "command": "command: {suspend: [/usr/local/sbin/node-off, '{node}'], "
                        "resume: [/usr/local/sbin/node-on, '{node}']}"}[own])
    for other in _SECTION.values():
        if other in p and other != own:
            err((*base, other), f"power.{other} is given but method is {method}",
                f"set method: {other}, or remove the {other} subsection")
    sub = p.get(own, {}) if own else {}
    if own in ("ipmi", "redfish"):
        for key in ("user", "password_file"):
            if enabled and key not in sub:
                err((*base, own, key), f"the BMC's {key.replace('_', ' ')} is required",
                    "the password file: root-only (0600), the password on its first line")
        pw = sub.get("password_file", "")
        if pw and ("/../" in pw + "/" or "/./" in pw + "/" or "//" in pw):
            err((*base, own, "password_file"), f"{shown(pw)} is not a plain absolute path",
                "no '.', '..' or empty components: the programs run as root")
    names = {part.name for part in partitions}
    for i, name in enumerate(p.get("exclude_partitions", [])):
        if name not in names:
            err((*base, "exclude_partitions", i), f"unknown partition {name!r}", near(name, names))
    exclude = p.get("exclude_nodes", "")
    if exclude:
        known = NodeSet.fromlist([g.names for g in groups]) if groups else NodeSet()
        try:
            unknown = NodeSet(exclude) - known
        except NodeSetParseError as e:
            err((*base, "exclude_nodes"), f"bad hostlist {shown(exclude)}: {e}",
                "use names like gpu[001-128] or a,b,c")
        else:
            if unknown:
                err((*base, "exclude_nodes"), f"nodes not in this site: {shown(str(unknown))}",
                    "exclude_nodes names nodes of the node groups")
    if enabled:  # Slurm must not suspend by itself: the keeper decides (power/ package)
        kept = (data.get("slurm") or {}).get("keep_partitions") or []
        for i, line in enumerate(kept):
            if "suspendtime=infinite" not in str(line).lower():
                err(("slurm", "keep_partitions", i), "with power saving on, a kept partition needs "
                    "SuspendTime=INFINITE", "slurm-hetero's keeper decides which nodes sleep; "
                    "Slurm's own SuspendTime would suspend nodes the forecast needs")
    defaults = PowerSettings()
    resume_timeout = p.get("resume_timeout", defaults.resume_timeout)
    boot_delay = float(p.get("boot_delay", defaults.boot_delay))
    if method == "devcluster" and boot_delay >= resume_timeout:
        err((*base, "boot_delay"), f"boot_delay {boot_delay:g} s is not under resume_timeout "
            f"{resume_timeout} s", "Slurm marks a node DOWN that has not registered by resume_timeout")
    cmd = p.get("command", {})
    return PowerSettings(
        enabled=enabled, method=method,
        suspend_time=p.get("suspend_time", defaults.suspend_time),
        suspend_timeout=p.get("suspend_timeout", defaults.suspend_timeout),
        resume_timeout=resume_timeout,
        exclude_nodes=str(NodeSet(exclude)) if exclude and _parses(exclude) else "",
        exclude_partitions=tuple(p.get("exclude_partitions", [])),
        headroom=float(p.get("headroom", defaults.headroom)),
        horizon=p.get("horizon", defaults.horizon), boot_delay=boot_delay,
        bmc=p.get("ipmi", {}).get("bmc", ""), interface=p.get("ipmi", {}).get("interface", "lanplus"),
        url=p.get("redfish", {}).get("url", ""),
        verify_tls=bool(p.get("redfish", {}).get("verify_tls", True)),
        user=sub.get("user", ""), password_file=sub.get("password_file", ""),
        suspend_argv=tuple(cmd.get("suspend", ())), resume_argv=tuple(cmd.get("resume", ())))


def _parses(hostlist: str) -> bool:
    try:
        NodeSet(hostlist)
    except NodeSetParseError:
        return False
    return True


# When the site gives no measured idle draw: a rule of thumb, always reported as estimated.
# Assumed, not measured here: 150 W for an idle dual-socket host (the flat figure the report
# used before), idle accelerators at 15% of their TDP (vendors publish TDP only).
HOST_IDLE_BASE_W = 50.0
HOST_IDLE_PER_SOCKET_W = 50.0
DEVICE_IDLE_SHARE = 0.15
ESTIMATE_RULE = (f"host {HOST_IDLE_BASE_W:g} W + {HOST_IDLE_PER_SOCKET_W:g} W per socket, devices at their "
                 f"catalog idle_watts or {DEVICE_IDLE_SHARE:.0%} of TDP")


@dataclass(frozen=True)
class IdlePower:
    """One node's draw when up and idle, and whether the site measured it or it is estimated."""

    watts: float
    estimated: bool


def idle_power(g: NodeGroup) -> IdlePower:
    """A node group's idle draw per node: the group's `idle_watts` (whole node, as its BMC
    reads it) where given; else the host rule of thumb plus each device's catalog
    `idle_watts`, or DEVICE_IDLE_SHARE of its TDP where the catalog has none."""
    if g.idle_watts is not None:
        return IdlePower(g.idle_watts, False)
    host = HOST_IDLE_BASE_W + HOST_IDLE_PER_SOCKET_W * g.sockets
    watts = host + sum(a.count * (a.model.idle_watts if a.model.idle_watts is not None
                                  else DEVICE_IDLE_SHARE * a.model.tdp_watts) for a in g.accelerators)
    return IdlePower(round(watts, 1), True)


def pool_idle_power(site: Site) -> dict[str, IdlePower]:
    """pool → the mean idle draw of its nodes (estimated if any node's is)."""
    acc: dict[str, tuple[float, int, bool]] = {}  # pool → (watts x nodes, nodes, estimated)
    for g in site.node_groups:
        pool, draw, n = group_pool(g)[0], idle_power(g), g.node_count
        w, k, est = acc.get(pool, (0.0, 0, False))
        acc[pool] = (w + draw.watts * n, k + n, est or draw.estimated)
    return {pool: IdlePower(round(w / k, 1), est) for pool, (w, k, est) in acc.items()}
