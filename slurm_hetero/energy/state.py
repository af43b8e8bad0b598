"""The node agent's configuration (`hetero-agent.json` next to slurm.conf) and its state on
disk: per node, one file per running job and one per device a job changed. Shared by the
prolog/epilog (agent.py) and the sampler daemon (sampler.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slurm_hetero.site.policies import AutoRule, EnergyPolicy
from slurm_hetero.slurm import hostlist


@dataclass
class AgentConfig:
    state_dir: Path
    history: Path
    groups: list[dict[str, str]]  # [{"nodes": hostlist, "devices": spec with {node}}]
    policies: dict[str, EnergyPolicy]
    auto: AutoRule
    update_comment: bool = True
    shared_spool: Path | None = None  # site node_agent.shared_spool (energy/ship.py)

    @classmethod
    def load(cls, path: Path) -> AgentConfig:
        d = json.loads(path.read_text())
        shared = d.get("shared_spool")
        return cls(state_dir=Path(d["state_dir"]), history=Path(d["history"]), groups=d["groups"],
                   policies={k: EnergyPolicy(name=k, **v) for k, v in d["policies"].items()},
                   auto=AutoRule(**d.get("auto", {})), update_comment=d.get("update_comment", True),
                   shared_spool=Path(shared) if isinstance(shared, str) and shared.startswith("/") else None)

    def devices_for(self, node: str) -> str | None:
        for g in self.groups:
            if hostlist.contains(g["nodes"], node):
                return g["devices"].replace("{node}", node)
        return None


def config_path() -> Path:
    conf = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
    return Path(os.environ.get("SLURM_HETERO_AGENT", Path(conf).parent / "hetero-agent.json"))


class NodeState:
    """Per node: one file per running job (counters, policy) and one per changed device."""

    def __init__(self, cfg: AgentConfig, node: str):
        self.dir = cfg.state_dir / node
        self.dir.mkdir(parents=True, exist_ok=True)

    def job_file(self, job_id: str) -> Path:
        return self.dir / f"job-{job_id}.json"

    def owner_file(self, kind: str, index: int) -> Path:
        return self.dir / f"dev-{kind}{index}.json"

    def owner(self, kind: str, index: int) -> str | None:
        try:
            return str(json.loads(self.owner_file(kind, index).read_text())["job"])
        except (OSError, ValueError, KeyError):
            return None

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Prolog, epilog and restore change devices and owner files one at a time."""
        with open(self.dir / ".lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def owner_age(self, kind: str, index: int) -> float:
        try:
            return time.time() - self.owner_file(kind, index).stat().st_mtime
        except OSError:
            return float("inf")

    def owners(self) -> dict[tuple[str, int], str]:
        out = {}
        for f in self.dir.glob("dev-*.json"):
            kind, idx = f.stem[4:7], int(f.stem[7:])
            job = self.owner(kind, idx)
            if job:
                out[(kind, idx)] = job
        return out
