"""What one cold bridge decision costs in instructions and cache misses: counted by
cachegrind (valgrind), so the figure does not move with the machine's noise.

slurmctld meets each submission with cold caches (sbatch's fork and exec, munge and the
state-save files ran since the last one), and a decision's cost there is mostly its misses:
the C code of Lua's VM and library functions it runs, and the tables, strings and bytecode
it touches. Timings of that (bridge_lua_cost.py --cold-mb) swing by tens of percent from run
to run on a shared machine; these counts do not. They are a proxy: cachegrind models no
prefetching (bytecode read forward, as in the model's trees, costs less than its count says),
so compare arms with it, and time with the other benchmarks.

Each arm runs the rendered job_submit.lua (demo site, fresh snapshot, runtime model with a
history of --users users) in `lua5.1` under cachegrind, N and 2N decisions with a buffer of
--thrash-mb read between them, in a last-level cache of half that size; per decision is the
difference, less the same runs of a pass-through script (the buffer read and the driver).
job_desc is an empty table whose __index/__newindex are Lua functions (C in slurmctld).
Arms: current, without the model, both again with one user sending the same request (a
burst: the model answers a repeated question from its last answer), and with
--baseline-bridge FILE an older bridge.lua.
Needs valgrind (apt install valgrind). Prints figures only.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_hetero.bridge.snapshot import PoolCapacity, to_lua
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.conf import bridge as conf_bridge
from slurm_hetero.site import load_site
from slurm_hetero.site.pools import pools

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bridge_throughput import BRIDGE_OPTS, DEMO, model_file  # one model recipe, one request

PASS_THROUGH = "function slurm_job_submit(j, p, u) return slurm.SUCCESS end\nreturn slurm.SUCCESS\n"
EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")

# The bridge arm's request of bridge_throughput.py, users cycling through the history.
DRIVER = """
local script, n, thrash_mb = arg[1], tonumber(arg[2]), tonumber(arg[3])
local now, users = tonumber(arg[4]), tonumber(arg[5])
os.time = function() return now end  -- the snapshot stays fresh however slow valgrind is
slurm = { SUCCESS = 0, ERROR = -1 }
for _, k in ipairs({ "user", "error", "info", "debug", "verbose" }) do slurm["log_" .. k] = function() end end
assert(loadfile(script))()
local env = { %s }
local senv = { %s }  -- sbatch sends the options in the SPANK job environment too
local function desc(i)
    local fields = { user_name = string.format("user%%05d", (i * 7919) %% users), user_id = 1000 + i %% users,
                     time_limit = 60, min_cpus = 4, spank_job_env = senv }
    local e = setmetatable({}, { __index = function(_, k) return env[k] end })
    return setmetatable({}, { __index = function(_, k)
                                  if k == "environment" then return e end
                                  return fields[k]
                              end,
                              __newindex = function(_, k, v) fields[k] = v end })
end
local big = string.rep("x", thrash_mb * 1048576)
local submit, failed = slurm_job_submit, 0
for i = 1, n do
    string.find(big, "y", 1, true)  -- evicts the last decision from every cache level
    if submit(desc(i), {}, 1000) ~= slurm.SUCCESS then failed = failed + 1 end
end
if failed > 0 then error(failed .. " decisions failed") end
"""


def options_env() -> tuple[str, str]:
    """The request as the job's environment and as its SPANK job environment (from index 0)."""
    pairs = [o.removeprefix("--").split("=", 1) for o in BRIDGE_OPTS]
    return (", ".join(f'_SLURM_SPANK_OPTION_hetero_{k} = "{v}"' for k, v in pairs),
            ", ".join(f'[{i}] = "_SLURM_SPANK_OPTION_hetero_{k}={v}"' for i, (k, v) in enumerate(pairs)))


def counts(lua: str, driver: Path, script: Path, n: int, thrash_mb: int, now: int, users: int,
           out: Path) -> dict[str, int]:
    ll = thrash_mb * 1048576 // 2
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--LL={ll},16,64",
                    f"--cachegrind-out-file={out}", lua, str(driver), str(script), str(n), str(thrash_mb),
                    str(now), str(users)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    events: list[str] = []
    for line in out.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            return dict(zip(events, map(int, line.split()[1:]), strict=True))
    raise SystemExit(f"{out}: no summary line from cachegrind")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="decisions of the shorter run (the longer has 2n)")
    ap.add_argument("--users", type=int, default=10_000, help="users in the model's history table")
    ap.add_argument("--thrash-mb", type=int, default=4, help="buffer read between decisions (MB)")
    ap.add_argument("--baseline-bridge", type=Path, help="an older bridge.lua: another arm")
    ap.add_argument("--lua", default="lua5.1", help="the Lua 5.1 interpreter to run under valgrind")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind: apt install valgrind")
    site = load_site(DEMO)
    with tempfile.TemporaryDirectory(prefix="bridge-misses-") as d:
        work = Path(d)
        model = model_file(work, args.users).read_text()
        now = int(time.time())
        caps = {p.key: PoolCapacity(p.devices, p.devices // 2, p.per_node // 2, 1) for p in pools(site)}
        (work / "hetero-snapshot.lua").write_text(to_lua(caps, now))

        def render(model_lua: str | None, bridge: Path | None = None) -> str:
            saved = conf_bridge.BRIDGE_LUA
            conf_bridge.BRIDGE_LUA = bridge.resolve() if bridge else saved
            try:
                return render_site(site, Profile(state_dir=d, model_lua=model_lua))["job_submit.lua"]
            finally:
                conf_bridge.BRIDGE_LUA = saved

        # Each decision another user (the model's trees run each time), or, "one user", the
        # same request from one user again and again: a burst, whose repeated prediction the
        # model answers from its last one.
        current, plain = render(model), render(None)
        arms = {"pass-through": (PASS_THROUGH, args.users), "current": (current, args.users),
                "current, no model": (plain, args.users), "current, one user": (current, 1),
                "no model, one user": (plain, 1)}
        if args.baseline_bridge:
            arms["baseline"] = (render(model, args.baseline_bridge), args.users)
        driver = work / "drive.lua"
        driver.write_text(DRIVER % options_env())
        per: dict[str, dict[str, float]] = {}
        for name, (text, users) in arms.items():
            script = work / f"{name.replace(' ', '_').replace(',', '')}.lua"
            script.write_text(text)
            a, b = (counts(args.lua, driver, script, k, args.thrash_mb, now, users, work / f"cg.{k}")
                    for k in (args.n, 2 * args.n))
            per[name] = {e: (b[e] - a[e]) / args.n for e in EVENTS}
    base = per.pop("pass-through")
    print(f"one cold bridge decision under cachegrind ({args.lua}; {args.thrash_mb} MB read between "
          f"decisions, last-level cache {args.thrash_mb // 2} MB; request {' '.join(BRIDGE_OPTS)}, model "
          f"history of {args.users} users; the pass-through script's counts taken off):")
    print(f"  {'arm':18s} {'instructions':>12s} {'I1 misses':>10s} {'D1 misses':>10s} {'LL misses':>10s} "
          f"{'(code':>6s} {'data)':>6s}")
    for name, c in per.items():
        d1 = c["D1mr"] + c["D1mw"] - base["D1mr"] - base["D1mw"]
        il = c["ILmr"] - base["ILmr"]
        dl = c["DLmr"] + c["DLmw"] - base["DLmr"] - base["DLmw"]
        print(f"  {name:18s} {c['Ir'] - base['Ir']:12.0f} {c['I1mr'] - base['I1mr']:10.0f} {d1:10.0f} "
              f"{il + dl:10.0f} {il:6.0f} {dl:6.0f}")


if __name__ == "__main__":
    main()
