"""The keeper: once a minute (the bridge daemon calls it each round; it throttles itself),
wake the sleeping nodes the forecast will need and power down the idle ones it will not.

It is the only thing that powers nodes down (Slurm's own SuspendTime is INFINITE on every
partition, see the package docstring), so a keeper that is not running lets nothing sleep:
the safe way to fail. Slurm still wakes any sleeping node a job is given.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.power import rules
from slurm_hetero.power.history import PowerHistory, records
from slurm_hetero.power.states import NodeState, parse_busy, parse_nodes, parse_reservations
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.commands import (
    busy_nodes_argv,
    node_power_argv,
    nodes_oneliner_argv,
    reservations_oneliner_argv,
)
from slurm_hetero.slurm.runner import Runner

Log = Callable[[str], None]
KEEP_EVERY_S = 60.0


def keep_every(site: Site) -> float:
    """A minute, or half of suspend_time when that is shorter (at least 5 s)."""
    return max(5.0, min(KEEP_EVERY_S, site.power.suspend_time / 2))


class Keeper:
    def __init__(self, site: Site, runner: Runner, log: Log = print,
                 clock: Callable[[], float] = time.time, every: float | None = None,
                 history: PowerHistory | None = None):
        self.site, self.runner, self.log, self.clock = site, runner, log, clock
        self.history = history  # one record per pool and round, for the report
        self.seen: dict[str, float] = {}  # node -> when first seen idle with no LastBusyTime
        self.every = keep_every(site) if every is None else every
        self.last = -math.inf
        self.last_plan: rules.Plan | None = None

    def plan(self, forecast: rules.Forecast | None) -> rules.Plan:
        now = self.clock()
        states = self.idle_since(parse_nodes(self.runner.out(nodes_oneliner_argv())), now)
        busy = parse_busy(self.runner.out(busy_nodes_argv()))
        resv = parse_reservations(self.runner.out(reservations_oneliner_argv()))
        held = rules.reserved(resv, now, rules.lead_s(self.site))
        return rules.plan(self.site, states, busy, held, forecast, now)

    def idle_since(self, states: dict[str, NodeState], now: float) -> dict[str, NodeState]:
        """A node never busy since slurmctld started has LastBusyTime=Unknown: it counts as
        idle from the first round that saw it so (else it would never sleep)."""
        unknown = {n for n, s in states.items() if s.last_busy is None and s.idle_awake}
        self.seen = {n: t for n, t in self.seen.items() if n in unknown}
        for n in unknown:
            states[n] = replace(states[n], last_busy=self.seen.setdefault(n, now))
        return states

    def round(self, forecast: rules.Forecast | None) -> rules.Plan | None:
        """One keeper round if due; never raises (power saving is advice to the heartbeat)."""
        if not self.site.power.enabled or time.monotonic() - self.last < self.every:
            return None
        self.last = time.monotonic()
        try:
            p = self.plan(forecast)
            failed = self.apply(p)
        except RuntimeFailure as e:
            self.log(f"power: round skipped: {e}")
            return None
        except Exception as e:  # a bug costs a round of power saving, never the bridge's heartbeat
            self.log(f"power: round failed: {type(e).__name__}: {e}")
            return None
        self.last_plan = p
        if self.history is not None:
            try:
                self.history.append(records(p, forecast, self.clock(), failed))
            except OSError as e:  # a lost record costs the report a minute, not the round
                self.log(f"power: history not written: {e}")
        return p

    def apply(self, p: rules.Plan) -> list[str]:
        """Ask slurmctld for the plan's wake-ups and power-downs; returns the actions it refused.

        A job may start on a node between the round's read and its power_down, and 22.05 has
        no way to withdraw a pending power down (node_mgr.c: nothing clears POWER_DOWN but
        the suspend itself): the node would sleep as soon as its jobs end. So the nodes to
        sleep are read again just before the request (the window shrinks to one RPC), and
        once more after it, to say which node still took a job in that window."""
        failed = []
        if p.wake and not self._ask(p, "power_up"):
            failed.append("power_up")
        if p.sleep:
            try:
                now = parse_nodes(self.runner.out(nodes_oneliner_argv(p.sleep)))
            except RuntimeFailure as e:  # unsure what they do now: none sleeps this round
                self.log(f"power: kept {','.join(p.sleep)} up: could not read them again: {e}")
                now = {}
            took = [n for n in p.sleep if n not in now or not now[n].idle_awake]
            for pp in p.pools:
                pp.sleep = [n for n in pp.sleep if n not in took]
            if took and now:
                self.log(f"power: kept {','.join(took)} up: no longer idle since the round read it")
        if p.sleep:
            if not self._ask(p, "power_down"):
                failed.append("power_down")
            else:
                try:  # only to say so: the request is made either way
                    after = parse_nodes(self.runner.out(nodes_oneliner_argv(p.sleep)))
                except RuntimeFailure:
                    after = {}
                late = [n for n in p.sleep if n in after and after[n].busy]
                if late:
                    self.log(f"power: {','.join(late)} took a job as it was asked to power down; "
                             "Slurm cannot withdraw that: it sleeps when its jobs end")
        return failed

    def _ask(self, p: rules.Plan, state: str) -> bool:
        nodes = p.wake if state == "power_up" else p.sleep
        r = self.runner.run(node_power_argv(nodes, state), check=False)
        ok = r.returncode == 0
        why = "" if ok else f": {str(r.stderr or r.stdout).strip()[:200]}"
        for pp in p.pools:
            mine = pp.wake if state == "power_up" else pp.sleep
            if mine:
                self.log(f"power: {state} {','.join(mine)} ({pp.pool}: need {pp.need:g}, running "
                         f"{pp.running:g}, idle {pp.idle}, keep {pp.keep_idle})"
                         + ("" if ok else " failed" + why))
        return ok
