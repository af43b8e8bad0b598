"""Accounting reports: what a heterogeneous cluster delivered, from sacct or a trace.

sacct/trace → the job table (slurm_hetero.jobs) → Report of tables and plots (metrics.py)
→ terminal, HTML or CSV. `slurm-hetero report` (cli.py) is the command; demos call these directly.
The names below load on first use: pandas and matplotlib stay out of every other command.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "sacct_report": "build", "trace_report": "build", "write_csv": "files", "write_html": "html",
    "Report": "model", "Period": "period", "resolve_period": "period", "print_report": "terminal",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
