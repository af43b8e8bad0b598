"""What the rendered SuspendProgram and ResumeProgram run (`slurm-hetero power suspend|resume
HOSTLIST`), as root inside slurmctld's power-save thread.

The hostlist comes from slurmctld's argv: it is data. It is expanded with a budget (at most
the site's node count), and every name must be a node of the site; anything else is refused
and logged, never run. Suspend then re-checks the safety rules on live state (`rules`) and
refuses what breaks one. A refused node stays up while slurmctld books it powered down; it
is recorded (`refused.json` in the state folder) so that resuming it restarts it (a new
boot time is the only thing 22.05's slurmctld takes as "resumed").
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.fileio import write_json_atomic
from slurm_hetero.power import rules
from slurm_hetero.power.methods import Method, PowerError
from slurm_hetero.power.states import parse_busy, parse_nodes, parse_reservations
from slurm_hetero.site.model import Site
from slurm_hetero.slurm import hostlist
from slurm_hetero.slurm.commands import (
    busy_nodes_argv,
    node_names,
    nodes_oneliner_argv,
    reservations_oneliner_argv,
)
from slurm_hetero.slurm.runner import Runner

Log = Callable[[str], None]
REFUSED = "hetero-power-refused.json"
MAX_PARALLEL = 16  # boots at once (Slurm's ResumeRate already spreads large wake-ups)


def file_log(path: Path | None) -> Log:
    """Lines appended to `path` (O_APPEND, no symlinks) with a timestamp; stderr without one."""
    def log(line: str) -> None:
        text = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {line}\n"
        if path is None:
            os.write(2, text.encode())
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    return log


def site_nodes(site: Site, expr: str) -> tuple[list[str], list[str]]:
    """(nodes of the site, names refused) of slurmctld's hostlist argument."""
    known = set(site.all_nodes)
    try:
        names = hostlist.expand(expr, limit=max(1, len(known)))
    except hostlist.HostlistError as e:
        raise InputError(f"hostlist {expr[:80]!r}: {e}") from e
    ok: list[str] = []
    bad: list[str] = []
    for n in dict.fromkeys(names):
        try:
            node_names([n])
        except ValueError:
            bad.append(n)
            continue
        (ok if n in known else bad).append(n)
    return ok, bad


class Refused:
    """Nodes a SuspendProgram left running (slurmctld books them powered down)."""

    def __init__(self, state_dir: Path | None):
        self.path = state_dir / REFUSED if state_dir else None

    def read(self) -> dict[str, float]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def update(self, add: Sequence[str] = (), drop: Sequence[str] = ()) -> None:
        if self.path is None or not (add or drop):
            return
        data = self.read()
        data.update({n: time.time() for n in add})
        for n in drop:
            data.pop(n, None)
        write_json_atomic(self.path, data, indent=1, mode=0o600)


def suspend(site: Site, expr: str, runner: Runner, method: Method, log: Log,
            state_dir: Path | None = None, now: float | None = None) -> list[str]:
    """Power down what may be powered down of `expr`; returns the nodes powered down."""
    now = time.time() if now is None else now
    nodes, bad = site_nodes(site, expr)
    for n in bad:
        log(f"suspend {n}: refused: not a node of site {site.name}")
    try:
        states = parse_nodes(runner.out(nodes_oneliner_argv()))
        busy = parse_busy(runner.out(busy_nodes_argv()))
        resv = parse_reservations(runner.out(reservations_oneliner_argv()))
    except RuntimeFailure as e:  # cannot check the rules: suspend nothing
        log(f"suspend {expr}: refused all: cannot read slurmctld's state: {e}")
        Refused(state_dir).update(add=nodes)
        return []
    held = rules.reserved(resv, now, rules.lead_s(site))
    done, refused = [], []
    for v in rules.suspend_verdicts(site, nodes, states, busy, held):
        if not v.ok:
            log(f"suspend {v.node}: refused: {v.why}")
            refused.append(v.node)
            continue
        try:
            method("suspend", v.node)
        except PowerError as e:
            log(f"suspend {v.node}: failed: {e}")
            refused.append(v.node)  # still running, as far as we know
            continue
        log(f"suspend {v.node}: powered down")
        done.append(v.node)
    Refused(state_dir).update(add=refused, drop=done)
    return done


def resume(site: Site, expr: str, method: Method, log: Log, state_dir: Path | None = None) -> list[str]:
    """Power up the site's nodes of `expr` (a node a suspend left running is restarted)."""
    nodes, bad = site_nodes(site, expr)
    for n in bad:
        log(f"resume {n}: refused: not a node of site {site.name}")
    refused = Refused(state_dir)
    left_on = refused.read()

    def one(node: str) -> str | None:
        action = "restart" if node in left_on else "resume"
        try:
            method(action, node)
        except PowerError as e:
            log(f"resume {node}: failed: {e}")
            return None
        what = "restarted (its suspend had been refused)" if action == "restart" else "powered up"
        log(f"resume {node}: {what}")
        return node

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, max(1, len(nodes)))) as pool:
        done = [n for n in pool.map(one, nodes) if n]
    refused.update(drop=[n for n in done if n in left_on])
    return done


def resume_failed(site: Site, expr: str, log: Log) -> list[str]:
    """ResumeFailProgram: slurmctld marked these DOWN (no registration by ResumeTimeout)."""
    nodes, bad = site_nodes(site, expr)
    for n in nodes + bad:
        log(f"resume {n}: did not register within resume_timeout ({site.power.resume_timeout} s): "
            "slurmctld marked it DOWN")
    return nodes
