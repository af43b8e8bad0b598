"""Run a generated job_submit.lua under Lua 5.1 (lupa) with a fake `slurm` table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import lupa.lua51 as lua51


@dataclass
class JobSubmit:
    source: str
    logs: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lua = lua51.LuaRuntime(unpack_returned_tuples=True)
        assert self.lua.eval("_VERSION") == "Lua 5.1"
        g = self.lua.globals()
        slurm = self.lua.table(SUCCESS=0, ERROR=-1)

        def logger(kind: str) -> Any:
            def log(fmt: str, *args: Any) -> None:
                self.logs.append((kind, str(self.lua.globals().string.format(fmt, *args))))
            return log

        slurm.log_user = logger("user")
        slurm.log_error = logger("error")
        slurm.log_info = logger("info")
        slurm.log_debug = logger("debug")
        g.slurm = slurm
        self.lua.execute(self.source)

    def submit(self, **fields: Any) -> tuple[int, dict[str, Any]]:
        """Call slurm_job_submit with a job_desc made of fields; returns (rc, job_desc)."""
        desc = self.lua.table_from(fields)
        rc = self.lua.globals().slurm_job_submit(desc, self.lua.table(), 0)
        return int(rc), dict(desc)
