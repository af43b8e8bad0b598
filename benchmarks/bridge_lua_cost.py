"""Lua cost per bridge decision under Lua 5.1 (lupa), full demo tables and a fresh snapshot,
without and with a runtime model compiled in (a real LightGBM export, trained on a synthetic
workload of 40 users, with a history table of --users users; every decision then also
predicts).

Each job_desc is handed over as slurmctld does: an empty table whose __index/__newindex are
functions (C in slurmctld, Lua here, so a lower bound of that cost). Prints the median and
p99 of --n decisions timed one by one from Python (lupa's call overhead included, so an
upper bound), and the mean measured inside Lua with os.clock over the same mix (no Python
in the loop; os.clock ticks are coarse, so per-call sums are only indicative).
With --baseline-bridge FILE (an older bridge.lua,
e.g. `git show HEAD:slurm_hetero/bridge/bridge.lua > /tmp/old.lua`) the same job_submit.lua
is also rendered with that file and both run interleaved, in alternating blocks of 1000
decisions. The mix: the bridge's options, a checkpointed job, and a plain job (which only
predicts). Target: median <= 50 us and p99 <= 150 us with the model. Then, per --queued
count, what a submission costs when job_submit/lua first rebuilds slurm.jobs, in a
pass-through script's Lua state and in the bridge's (the garbage of that rebuild is collected
in the bridge's larger heap). 22.05 rebuilds only when the job list changed in a later
second (last_job_update is a time_t), so this is the cost of the first submission of a
second, not of every one.

Also timed cold (--cold-mb): with a buffer larger than the last-level cache read between
decisions. That is how slurmctld meets each submission: sbatch's fork and exec, munge and
the state-save files run between two decisions and evict the bridge's code and tables, and
a decision then costs several times its hot figure (what `--perf --liblua` in
bridge_throughput.py finds inside slurmctld).
Under slurmctld every job_desc field read is a C call, which lupa's plain tables do not
show: benchmarks/bridge_throughput.py measures that side (sdiag).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slurm_hetero.bridge.luarun import OPTION_PREFIX, JobSubmit
from slurm_hetero.bridge.snapshot import PoolCapacity, to_lua
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.conf import bridge as conf_bridge
from slurm_hetero.site import Site, load_site
from slurm_hetero.site.pools import pools

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bridge_throughput import model_file  # one model recipe for both benchmarks

DEMO = Path(__file__).resolve().parents[1] / "site" / "demo" / "site.yaml"
MIX = [
    {"accel": "any:2"}, {"accel": "nvidia:2,mem>=80G", "tier": "gold"},
    {"accel": "units=4", "energy": "efficiency"}, {"accel": "cann:8", "arch": "aarch64"},
    {"accel": "h100:1", "tier": "diamond", "energy": "performance"}, {"arch": "x86_64"},
    {"checkpoint": "/shared/ckpt/run1", "migratable": "", "tier": "silver"}, {},
]
BLOCK = 1000


def render(site: Site, d: str, model: str | None, bridge: Path | None) -> str:
    saved = conf_bridge.BRIDGE_LUA
    if bridge is not None:
        conf_bridge.BRIDGE_LUA = bridge
    try:
        return render_site(site, Profile(state_dir=d, model_lua=model))["job_submit.lua"]
    finally:
        conf_bridge.BRIDGE_LUA = saved


class Bench:
    def __init__(self, source: str, now: int, users: list[str]) -> None:
        self.js = JobSubmit(source)
        self.js.now = now
        lua = self.js.lua
        self.envs = [lua.table_from({OPTION_PREFIX + k: v for k, v in m.items()}) for m in MIX]
        self.users = users
        # slurmctld hands job_desc (and its environment) over as empty tables whose
        # __index/__newindex are C functions (job_submit_lua.c): every access is a call.
        # The same shape here, with Lua functions: a lower bound of slurmctld's cost.
        self.proxy = lua.eval("""function(fields)
            local env = fields.environment
            if env then
                fields.environment = setmetatable({}, { __index = function(_, k) return env[k] end })
            end
            return setmetatable({}, { __index = function(_, k) return fields[k] end,
                                      __newindex = function(_, k, v) fields[k] = v end })
        end""")
        self.submit: Callable[..., int] = lua.globals().slurm_job_submit
        self.parts = lua.table()
        self.times: list[int] = []
        self.i = 0

    def block(self, n: int) -> None:
        lua, envs, users, submit, parts, times, proxy = (self.js.lua, self.envs, self.users, self.submit,
                                                         self.parts, self.times, self.proxy)
        for _ in range(n):
            i = self.i = self.i + 1
            desc = proxy(lua.table(environment=envs[i % len(envs)], user_name=users[i % len(users)],
                                   time_limit=60, min_cpus=4))
            t0 = time.perf_counter_ns()
            rc = submit(desc, parts, 0)
            times.append(time.perf_counter_ns() - t0)
            assert rc == 0, self.js.user_lines()[-1:]

    def inner_mean_us(self, n: int, cold_mb: int = 0) -> float:
        """Mean per decision, timed inside Lua; with `cold_mb`, a buffer of that many MB is
        read between decisions (its bytes scanned for one that is not there), so each decision
        starts with caches filled by something else."""
        return float(self.js.lua.execute(f"""
            local envs, users, proxy = ...
            local submit, n = slurm_job_submit, {n}
            local nu, spent = #users, 0
            local big = {cold_mb} > 0 and string.rep("x", {cold_mb} * 1048576) or nil
            for i = 1, n do
                local desc = proxy({{environment = envs[(i % {len(MIX)}) + 1],
                                    user_name = users[(i % nu) + 1], time_limit = 60, min_cpus = 4}})
                if big then string.find(big, "y", 1, true) end
                local t0 = os.clock()
                submit(desc, {{}}, 0)
                spent = spent + os.clock() - t0
            end
            return spent / n
        """, self.js.lua.table_from(self.envs), self.js.lua.table_from(self.users), self.proxy)) * 1e6


def measure(site: Site, model: str | None, users: list[str], n: int, baseline: Path | None,
            cold_mb: int = 0, cold_n: int = 1000) -> None:
    with tempfile.TemporaryDirectory() as d:
        now = int(time.time())
        arms = {"current": Bench(render(site, d, model, None), now, users)}
        if baseline is not None:
            arms["baseline"] = Bench(render(site, d, model, baseline), now, users)
        caps = {p.key: PoolCapacity(p.devices, p.devices // 2, p.per_node // 2, 1) for p in pools(site)}
        (Path(d) / "hetero-snapshot.lua").write_text(to_lua(caps, now))
        for _ in range(max(1, n // BLOCK)):
            for b in arms.values():
                b.block(BLOCK)
        inner = {name: b.inner_mean_us(n) for name, b in arms.items()}
        cold = {name: b.inner_mean_us(cold_n, cold_mb) for name, b in arms.items()} if cold_mb else {}
    what = f"with a runtime model ({len(users)} users in its history)" if model else "without a runtime model"
    print(f"bridge decisions under Lua 5.1 (lupa), {n} decisions per arm, demo site, fresh snapshot, {what}")
    for name, b in arms.items():
        t = sorted(b.times)
        med, p99 = statistics.median(t) / 1000, t[int(0.99 * len(t))] / 1000
        print(f"  {name:8s} per call from Python: median {med:.1f} us, p99 {p99:.1f} us; "
              f"mean inside Lua (os.clock, no Python): {inner[name]:.1f} us")
        if cold:
            print(f"  {name:8s} cold, {cold_mb} MB read between decisions (slurmctld meets each "
                  f"submission after sbatch's fork and exec): mean {cold[name]:.1f} us")
    if baseline is not None:
        cur, base = (statistics.median(arms[k].times) for k in ("current", "baseline"))
        print(f"  median current/baseline: {cur / base:.3f} (interleaved blocks of {BLOCK})")


PASS_THROUGH = "function slurm_job_submit(j, p, u) return slurm.SUCCESS end\nreturn slurm.SUCCESS\n"


def queued_cost(site: Site, model: str, queued: int, baseline: Path | None, rounds: int = 20) -> None:
    """job_submit/lua (22.05) rebuilds slurm.jobs, a table and a metatable per job slurmctld
    holds (job_submit_lua.c _update_jobs_global), before the first call of each second in
    which the job list changed: emulated here before every decision (the worst case), in a
    pass-through script's state and in the bridge's."""
    with tempfile.TemporaryDirectory() as d:
        now = int(time.time())
        arms = {"pass-through": Bench(PASS_THROUGH, now, ["user007"]),
                "current": Bench(render(site, d, model, None), now, ["user007"])}
        if baseline is not None:
            arms["baseline"] = Bench(render(site, d, model, baseline), now, ["user007"])
        caps = {p.key: PoolCapacity(p.devices, p.devices // 2, p.per_node // 2, 1) for p in pools(site)}
        (Path(d) / "hetero-snapshot.lua").write_text(to_lua(caps, now))
        rebuild = {name: b.js.lua.eval("""function(n)
            local jobs = {}
            for i = 1, n do jobs[tostring(i)] = setmetatable({}, { __index = print, _job_rec_ptr = i }) end
            slurm.jobs = jobs
        end""") for name, b in arms.items()}
        spent: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(rounds):
            for name, b in arms.items():
                t0 = time.perf_counter()
                for _ in range(100):
                    rebuild[name](queued)
                    b.block(1)
                spent[name].append((time.perf_counter() - t0) / 100)
    base = statistics.median(spent["pass-through"])
    print(f"  with {queued} jobs queued (slurm.jobs rebuilt before every call), per submission: "
          + ", ".join(f"{name} {statistics.median(v) * 1e6:.0f} us ({statistics.median(v) / base:.3f})"
                      for name, v in spent.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="decisions per arm")
    ap.add_argument("--users", type=int, nargs="+", default=[40, 10_000],
                    help="history table sizes to measure with the model")
    ap.add_argument("--baseline-bridge", type=Path, help="an older bridge.lua to run interleaved")
    ap.add_argument("--queued", type=int, nargs="*", default=[1000, 5000],
                    help="jobs in slurmctld for the slurm.jobs rebuild measurement")
    ap.add_argument("--cold-mb", type=int, default=48,
                    help="also time --cold-n decisions with this many MB read between them, more "
                         "than the last-level cache (0: no)")
    ap.add_argument("--cold-n", type=int, default=1000)
    args = ap.parse_args()
    site = load_site(DEMO)
    measure(site, None, ["user007"], args.n, args.baseline_bridge, args.cold_mb, args.cold_n)
    with tempfile.TemporaryDirectory() as d:
        for u in args.users:
            model = model_file(Path(d), u).read_text()
            names = [f"user{i:03d}" for i in range(40)] if u <= 40 else [f"user{i:05d}" for i in range(u)]
            measure(site, model, names, args.n, args.baseline_bridge, args.cold_mb, args.cold_n)
            for queued in args.queued:
                queued_cost(site, model, queued, args.baseline_bridge)


if __name__ == "__main__":
    main()
