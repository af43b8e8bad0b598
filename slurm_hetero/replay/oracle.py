"""The replay's `clairvoyant` predictor: each job's own trace runtime, as a model chunk.

Not a product predictor: it knows what no site knows (how long each job will run) and finds
a job by its replay name (`r<trace id>`, which a user could set). It measures a ceiling:
what the bridge's mechanism (a limit and a SiteFactor from the prediction, extended by the
daemon when a job outlives it) reaches on the real Slurm with perfect predictions, so a
prediction arm's figure can be read against the best any predictor could give it there.

The chunk has the interface the bridge loads (predict_desc_as, predict; limit, order and
correction as `model export` writes them) and no history (no `nstate`: the bridge reads no
overlay for it). A prediction is the runtime plus MARGIN_S, at least 1 s and at most the
user's limit: Slurm's limits are whole minutes and a replayed job may run a few trace
seconds over its trace runtime. The daemon still extends nearly every such job once, when
less than its margin (ExtendPolicy, 120 s) is left: the ceiling is the mechanism's as it ships.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

import pandas as pd

from slurm_hetero.replay.window import Window

MARGIN_S = 30
DEFAULT_S = 3600  # a job the table does not know, without a limit of its own
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def runtimes(trace: pd.DataFrame, window: Window) -> list[tuple[str, int]]:
    """(trace id, runtime s) of every job the window submits (warm-up included); a runtime
    past the trace's limit is the limit (the trace killed it there)."""
    submitted = (trace["submit"] >= window.first) & (trace["submit"] < window.end)
    rows = trace[submitted & (trace["runtime_s"] >= 0)]
    out = []
    for job_id, rt, req in zip(rows["job_id"], rows["runtime_s"], rows["req_time_s"], strict=True):
        seconds = float(rt) if not float(req) > 0 else min(float(rt), float(req))
        out.append((str(job_id), round(seconds)))
    return out


def export_clairvoyant(jobs: Iterable[tuple[str, int]], generated_at: int | None = None,
                       order: str = "central") -> str:
    """The chunk for `jobs` ((trace id, runtime s)); ids that are not plain names are left
    out (the replay names its jobs `r<id>`). `order` as `model export --order` takes it."""
    if order not in ("central", "area"):
        raise ValueError(f"order {order!r}: central or area")
    rows = [f'[ "r{i}" ] = {int(s)},' for i, s in jobs if _NAME.fullmatch(i) and s >= 0]
    gen = int(generated_at if generated_at is not None else time.time())
    return _CHUNK.format(gen=gen, n=len(rows), margin=MARGIN_S, default=DEFAULT_S, order=order,
                         rows="\n    ".join(rows))


_CHUNK = """-- hetero-predict {gen}
-- The replay's clairvoyant predictor (slurm_hetero/replay/oracle.py): {n} jobs' own trace
-- runtimes, found by job name. A ceiling for the replay, never a site's model.
local tonumber = tonumber
local min, max = math.min, math.max
local NO_VAL = 4294967294
local RUNTIME = {{
    {rows}
}}
local M = {{
    format = "slurm-hetero-predict", version = 1, generated_at = {gen},
    correction = "double", limit = "central", sure = nil, order = "{order}", quantile = 0.5,
}}

local function answer(rt, limit_s)
    local p = rt and rt + {margin} or limit_s or {default}
    if limit_s then p = min(p, limit_s) end
    p = max(p, 1)
    return p, p
end

local function limit_of(minutes)
    minutes = tonumber(minutes)
    if minutes == nil or minutes <= 0 or minutes >= NO_VAL then return nil end
    return minutes * 60
end

function M.predict_desc_as(job_desc, now, default_partition, time_limit)
    return answer(RUNTIME[job_desc.name], limit_of(time_limit or job_desc.time_limit))
end

function M.predict_desc(job_desc, now, default_partition)
    return answer(RUNTIME[job_desc.name], limit_of(job_desc.time_limit))
end

function M.predict(job)
    return answer(RUNTIME[job.name or ""], tonumber(job.time_limit_s))
end

return M
"""
