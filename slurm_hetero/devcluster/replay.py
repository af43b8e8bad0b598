"""The dev cluster as replay's cluster (`replay.backend.ReplayCluster`): a fresh local
cluster per arm, every Slurm process on one accelerated clock (`clock.py`)."""

from __future__ import annotations

import pwd
import shutil
from pathlib import Path

from slurm_hetero.devcluster.clock import ClockSpec
from slurm_hetero.devcluster.cluster import Cluster
from slurm_hetero.errors import InputError
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.runner import Runner

MARK = ".slurm-hetero-replay"  # a workdir replay made (and may empty again)


class DevReplayCluster:
    """`hooks`: keep the node agent's Prolog/Epilog on the replay clock (`clock.accelerate_conf`);
    off for replays (a job's start would move by the Prolog's real time x speed), on for the soak."""

    def __init__(self, workdir: Path, timeout: float = 180.0, hooks: bool = False) -> None:
        self._workdir = Path(workdir).absolute()
        self.timeout = timeout
        self.hooks = hooks
        self.cluster = Cluster(self._workdir)

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def runner(self) -> Runner:
        return self.cluster.runner

    def _fresh(self) -> None:
        """An arm starts from nothing: no job ids, accounting or state from a previous run
        (and no faked clock that ran ahead of the new one)."""
        w = self._workdir
        if w.exists() and any(w.iterdir()):
            if not (w / MARK).exists():
                raise InputError(f"--workdir {w}: not empty and not made by replay; give a new folder")
            self.cluster.down(log=lambda *_: None)
            shutil.rmtree(w)
        w.mkdir(parents=True, exist_ok=True)
        (w / MARK).write_text("made by slurm-hetero replay; emptied at each arm's start\n")
        self.cluster = Cluster(w)

    def up(self, site: Site, *, speed: float, bridge: bool, model: Path | None,
           margin_rounds: float | None = None) -> float:
        self._fresh()
        return self.cluster.up(site, timeout=self.timeout, log=lambda *_: None, model=model,
                               clock=ClockSpec(speed, hooks=self.hooks), bridge=bridge,
                               margin_rounds=margin_rounds)

    def down(self) -> None:
        self.cluster.down(log=lambda *_: None)

    def user_ready(self, name: str) -> None:
        user = pwd.getpwnam(name)
        self.cluster.runtime_dir(user.pw_uid, user.pw_gid)

    def explain(self) -> str:
        return self.cluster.explain()
