"""Cost of one runtime prediction in the exported Lua model, under Lua 5.1 (lupa).

The bridge's whole per-decision budget is 50 us median, so the prediction must
be a fraction of it. Trains the default model on the SDSC-BLUE trace, exports it with the
trace's users, and times model.predict_desc(job_desc, now) -- what the bridge calls -- on
10,000 real jobs of the trace's future (job_desc as a plain Lua table):
  - per call, timed from Python around each Lua call, minus the median cost of calling an
    empty Lua function the same way (median and p99; Python's GC is off while timing,
    since slurmctld has none; Lua's own GC runs as usual);
  - in a Lua loop (no Python in between): mean per call.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from pathlib import Path

import lupa.lua51 as lua51
import numpy as np

from slurm_hetero.jobs.swf import read_swf
from slurm_hetero.predict import export_lua
from slurm_hetero.predict.evaluate import split
from slurm_hetero.predict.train import DEFAULT_PARAMS, train

TRACES = Path(os.environ.get("TRACES") or Path(__file__).resolve().parents[2] / "shared" / "traces")
TRACE = TRACES / "SDSC-BLUE-pyss-easy.swf.gz"
SANDBOX = ("local text = ...\nlocal chunk = assert(loadstring(text, 'predict'))\n"
           "setfenv(chunk, { math = math, string = string, tonumber = tonumber, tostring = tostring,\n"
           "                 ipairs = ipairs, unpack = unpack })\nreturn chunk()")
LOOP = """
local M, descs, rounds = ...
local clock, predict_desc = os.clock, M.predict_desc
local t0 = clock()
for _ = 1, rounds do
    for i = 1, #descs do predict_desc(descs[i], 2000000000) end
end
return (clock() - t0) / (rounds * #descs)
"""


def main() -> None:
    if not TRACE.exists():
        sys.exit(f"trace not found: {TRACE} (set $TRACES to its folder)")
    df = read_swf(TRACE).jobs
    cut, test = split(df, 0.25)
    model = train(df, DEFAULT_PARAMS, until=cut)
    text = export_lua.export_text(model, df[df["end"] < cut])
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    assert lua.eval("_VERSION") == "Lua 5.1"
    t0 = time.perf_counter()
    m = lua.execute(SANDBOX, text)
    load_ms = (time.perf_counter() - t0) * 1e3
    jobs = test.iloc[:10_000]
    cpus = np.nan_to_num(jobs["req_cpus"].to_numpy(), nan=1.0).astype(int)
    descs = [lua.table_from({"user_name": u, "user_id": 1000, "time_limit": max(int(q) // 60, 1),
                             "min_cpus": int(c), "num_tasks": int(c), "partition": "batch"})
             for u, q, c in zip(jobs["user"], jobs["req_time_s"], cpus, strict=True)]
    call = lua.eval("function(M, d) return M.predict_desc(d, 2000000000) end")
    empty = lua.eval("function(M, d) return 1, 2 end")

    def per_call(fn: object) -> list[float]:
        out = []
        for d in descs:
            t = time.perf_counter_ns()
            fn(m, d)  # type: ignore[operator]
            out.append((time.perf_counter_ns() - t) / 1e3)
        return out

    per_call(call)  # warm up
    gc.disable()
    try:
        overhead = statistics.median(per_call(empty))
        timed = np.array(per_call(call)) - overhead
    finally:
        gc.enable()
    loop_us = lua.execute(LOOP, m, lua.table_from(descs), 5) * 1e6
    users = lua.eval("function(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n end")(m.users)
    print(f"exported model: {len(text) / 1e6:.2f} MB of Lua, {model.central.num_trees()} + "
          f"{model.upper.num_trees()} trees (depth <= {DEFAULT_PARAMS.max_depth}), "
          f"{users} users; loads in {load_ms:.0f} ms")
    print(f"predict_desc, per call: median {np.median(timed):.1f} us, "
          f"p99 {np.percentile(timed, 99):.1f} us (Python->Lua call overhead {overhead:.1f} us removed)")
    print(f"predict_desc, Lua loop: mean {loop_us:.1f} us per call")


if __name__ == "__main__":
    main()
