"""What replay needs from a cluster to replay on: a fresh Slurm cluster, on an accelerated
clock, with or without the bridge, that it can reach through a runner.

Replay sits below the dev cluster in the package floors, so it names this interface and
the dev cluster implements it (`devcluster/replay.py`); the CLI wires the two together.
Another implementation (a private cluster inside a Slurm job, for `--via-slurm`) would
fit the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from slurm_hetero.site.model import Site
from slurm_hetero.slurm.runner import Runner


class ReplayCluster(Protocol):
    @property
    def workdir(self) -> Path: ...

    @property
    def runner(self) -> Runner:
        """Clients on the cluster's clock (valid after `up`)."""
        ...

    def up(self, site: Site, *, speed: float, bridge: bool, model: Path | None,
           margin_rounds: float | None = None) -> float:
        """Boot a fresh cluster; returns the seconds it took. `margin_rounds`: the bridge
        daemon extends limits that many of its rounds before they end (None: as it ships)."""
        ...

    def down(self) -> None: ...

    def user_ready(self, name: str) -> None:
        """What the local user `name` needs on the nodes besides its association: its runtime
        folder (runc's state for its container jobs), as logind makes /run/user/UID."""
        ...

    def explain(self) -> str:
        """The log lines that most likely explain a failure."""
        ...


ClusterFactory = Callable[[Path], ReplayCluster]
