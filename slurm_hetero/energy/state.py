"""The node agent's configuration (`hetero-agent.json`: next to slurm.conf, or on a configless
site in the node folder, conf/nodefiles.py) and its state on disk: per node, one file per
running job and one per device a job changed. Shared by the prolog/epilog (agent.py) and
the sampler daemon (sampler.py).
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetero.conf.nodefiles import AGENT_CONFIG, find_node_file, slurm_conf_dir
from slurm_hetero.errors import InputError
from slurm_hetero.fileio import write_json_atomic
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
    # The gres.conf slurmd reads (GRES index -> device file); None: the one beside slurm.conf.
    gres_conf: Path | None = None

    @classmethod
    def load(cls, path: Path) -> AgentConfig:
        d = json.loads(path.read_text())
        shared = d.get("shared_spool")
        return cls(state_dir=Path(d["state_dir"]), history=Path(d["history"]), groups=d["groups"],
                   policies={k: EnergyPolicy(name=k, **v) for k, v in d["policies"].items()},
                   auto=AutoRule(**d.get("auto", {})), update_comment=d.get("update_comment", True),
                   shared_spool=Path(shared) if isinstance(shared, str) and shared.startswith("/") else None,
                   gres_conf=Path(d["gres_conf"]) if isinstance(d.get("gres_conf"), str) else None)

    def gres_path(self) -> Path:
        """Slurm reads gres.conf from slurm.conf's folder, always (configless: its cache)."""
        if self.gres_conf is not None:
            return self.gres_conf
        return slurm_conf_dir() / "gres.conf"

    def devices_for(self, node: str) -> str | None:
        for g in self.groups:
            if hostlist.contains(g["nodes"], node):
                return g["devices"].replace("{node}", node)
        return None


def config_path() -> Path:
    """$SLURM_HETERO_AGENT, else hetero-agent.json beside $SLURM_CONF, else in the node folder;
    NodeFileMissing (a FileNotFoundError naming every path looked at) where none is."""
    return find_node_file(AGENT_CONFIG, "SLURM_HETERO_AGENT")


def required_config_path() -> Path:
    """config_path() for the admin commands and daemons: InputError (exit 2) naming every
    path looked at where there is none."""
    try:
        return config_path()
    except FileNotFoundError as e:
        raise InputError(f"cannot read the node agent's config: {e}") from e


def load_config() -> AgentConfig:
    return AgentConfig.load(required_config_path())


class NodeState:
    """Per node: one file per running job (counters, policy) and one per changed device."""

    def __init__(self, cfg: AgentConfig, node: str):
        self.dir = cfg.state_dir / node
        # Never group/other-writable (whatever the umask allows): the TaskProlog and the
        # container wrapper trust the device cache here only then (energy/devcache.py).
        self.dir.mkdir(mode=0o755, parents=True, exist_ok=True)

    def job_file(self, job_id: str) -> Path:
        return self.dir / f"job-{job_id}.json"

    def owner_file(self, kind: str, index: int) -> Path:
        return self.dir / f"dev-{kind}{index}.json"

    def owner(self, kind: str, index: int) -> str | None:
        rec = self.owner_record(kind, index)
        return str(rec["job"]) if rec and "job" in rec else None

    def owner_record(self, kind: str, index: int) -> dict[str, Any] | None:
        """{"job", and since identities: "dev" (backend index), "identity"} of a changed device."""
        try:
            rec = json.loads(self.owner_file(kind, index).read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def note_refused(self, job_id: str, refused: dict[str, str], matched: list[str]) -> None:
        """`refused.json`: per GRES device (`gpu3`), the last job the agent could not match it
        for and why, for admins and the node exporter; a device matched since drops out."""
        path = self.dir / "refused.json"
        try:
            current = json.loads(path.read_text())
            current = current if isinstance(current, dict) else {}
        except (OSError, ValueError):
            current = {}
        new = {k: v for k, v in current.items() if k not in matched and k not in refused}
        new.update({k: {"job": job_id, "why": why, "t": round(time.time())} for k, why in refused.items()})
        if new != current:
            write_json_atomic(path, new)

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
