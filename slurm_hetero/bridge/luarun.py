"""Run the bridge under Lua 5.1 (lupa) with a fake `slurm` table.

Used by the Lua unit tests and the benchmarks, in-process: either a generated
job_submit.lua (the same script slurmctld runs) or the plain bridge.lua on its own with
tables given from Python (`JobSubmit.bridge`), whose return value (the grammar and
snapshot checks) is then `module`.

The fake records slurm.log_* lines; `now` replaces os.time so tests control snapshot age.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import lupa.lua51 as lua51

from slurm_hetero.conf.bridge import bridge_source

OPTION_PREFIX = "_SLURM_SPANK_OPTION_hetero_"


@dataclass
class JobSubmit:
    source: str
    now: int = 1_000_000
    logs: list[tuple[str, str]] = field(default_factory=list)
    # bridge.lua on its own: the tables job_submit.lua would give it (tables.SITE_TABLES).
    site: Mapping[str, Any] | None = None
    module: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.lua = lua51.LuaRuntime(unpack_returned_tuples=True)
        assert self.lua.eval("_VERSION") == "Lua 5.1"
        g = self.lua.globals()
        # Return codes as 22.05's job_submit/lua defines them (a few of its ESLURM_* too).
        slurm = self.lua.table(SUCCESS=0, ERROR=-1, FAILURE=-1, ESLURM_INVALID_PARTITION_NAME=2000,
                               ESLURM_ACCESS_DENIED=2002, ESLURM_INVALID_ACCOUNT=2045)
        fmt = self.lua.eval("function(f, ...) return string.format(f, ...) end")

        def logger(kind: str) -> Any:
            def log(f: str, *args: Any) -> None:
                self.logs.append((kind, str(fmt(f, *args))))
            return log

        for kind in ("user", "error", "info", "debug", "verbose"):
            slurm[f"log_{kind}"] = logger(kind)
        slurm.user_msg = lambda text: self.logs.append(("user", str(text)))  # log_user's C side
        g.slurm = slurm
        g.os.time = lambda *_: self.now
        if self.site is None:
            self.module = self.lua.execute(self.source)
        else:
            self.module = self.lua.execute(self.source, self.to_lua(self.site))

    @classmethod
    def bridge(cls, site: Mapping[str, Any] | None = None, **kwargs: Any) -> JobSubmit:
        """bridge.lua as shipped, on its own, with `site` tables (a missing one is empty)."""
        return cls(bridge_source(), site=site or {}, **kwargs)

    def to_lua(self, value: Any) -> Any:
        """Python data as Lua values: mappings and sequences (1-based) as tables, deeply."""
        if isinstance(value, Mapping):
            t = self.lua.table()
            for k, v in value.items():
                t[k] = self.to_lua(v)
            return t
        if isinstance(value, list | tuple | set | frozenset):
            return self.lua.table_from([self.to_lua(v) for v in value])
        return value

    def submit(self, options: dict[str, str] | None = None, /, *, srun: bool = False,
               **fields: Any) -> tuple[int, dict[str, Any]]:
        """slurm_job_submit on a job_desc of `fields` plus hetero options; (rc, job_desc).
        `options` is positional-only so that every keyword is a job_desc field."""
        env = {OPTION_PREFIX + k: v for k, v in (options or {}).items()}
        if env:  # sbatch, srun and salloc all send it; slurmctld fills it from index 0, as a C array
            senv = self.lua.table()
            for i, (k, v) in enumerate(env.items()):
                senv[i] = f"{k}={v}"
            fields.setdefault("spank_job_env", senv)
        if not srun:  # sbatch: the options in the job's environment too
            fields.setdefault("environment", self.lua.table_from(env))
        desc = self.lua.table_from(fields)
        rc = self.lua.globals().slurm_job_submit(desc, self.lua.table(), 0)
        out = {k: v for k, v in dict(desc).items() if k not in ("environment", "spank_job_env")}
        return int(rc), out

    def modify(self, fields: dict[str, Any] | None = None, uid: int = 1000) -> tuple[int, dict[str, Any]]:
        """slurm_job_modify on a job_desc of `fields` (job_rec empty) by `uid`; (rc, job_desc)."""
        desc = self.lua.table_from(fields or {})
        rc = self.lua.globals().slurm_job_modify(desc, self.lua.table(), self.lua.table(), uid)
        return int(rc), dict(desc)

    def user_lines(self) -> list[str]:
        return [m for k, m in self.logs if k == "user"]
