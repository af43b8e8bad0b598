"""Run a generated job_submit.lua under Lua 5.1 (lupa) with a fake `slurm` table.

Used by the Lua unit tests and the benchmarks: the same script slurmctld runs, in-process.

The fake records slurm.log_* lines; `now` replaces os.time so tests control snapshot age.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import lupa.lua51 as lua51

OPTION_PREFIX = "_SLURM_SPANK_OPTION_hetero_"


@dataclass
class JobSubmit:
    source: str
    now: int = 1_000_000
    logs: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lua = lua51.LuaRuntime(unpack_returned_tuples=True)
        assert self.lua.eval("_VERSION") == "Lua 5.1"
        g = self.lua.globals()
        slurm = self.lua.table(SUCCESS=0, ERROR=-1)
        fmt = self.lua.eval("function(f, ...) return string.format(f, ...) end")

        def logger(kind: str) -> Any:
            def log(f: str, *args: Any) -> None:
                self.logs.append((kind, str(fmt(f, *args))))
            return log

        for kind in ("user", "error", "info", "debug", "verbose"):
            slurm[f"log_{kind}"] = logger(kind)
        g.slurm = slurm
        g.os.time = lambda *_: self.now
        self.lua.execute(self.source)

    def submit(self, options: dict[str, str] | None = None, srun: bool = False,
               **fields: Any) -> tuple[int, dict[str, Any]]:
        """slurm_job_submit on a job_desc of `fields` plus hetero options; (rc, job_desc)."""
        env = {OPTION_PREFIX + k: v for k, v in (options or {}).items()}
        if srun:  # slurmctld fills spank_job_env from index 0, as a C array
            senv = self.lua.table()
            for i, (k, v) in enumerate(env.items()):
                senv[i] = f"{k}={v}"
            fields["spank_job_env"] = senv
        else:
            fields["environment"] = self.lua.table_from(env)
        desc = self.lua.table_from(fields)
        rc = self.lua.globals().slurm_job_submit(desc, self.lua.table(), 0)
        out = {k: v for k, v in dict(desc).items() if k not in ("environment", "spank_job_env")}
        return int(rc), out

    def user_lines(self) -> list[str]:
        return [m for k, m in self.logs if k == "user"]
