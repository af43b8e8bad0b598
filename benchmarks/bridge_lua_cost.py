"""Lua cost per bridge decision under Lua 5.1 (lupa), full demo tables and a fresh snapshot,
without and with a runtime model compiled in (a real LightGBM export of the deployed size,
trained on a synthetic workload of 40 users; every decision then also predicts).

Prints the median and p99 of 100,000 decisions timed one by one from Python (lupa's call
overhead included, so an upper bound), and the mean measured inside Lua with os.clock over
the same mix (no Python in the loop). Target: median <= 50 us, with the model too.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from slurm_hetero.bridge.luarun import OPTION_PREFIX, JobSubmit
from slurm_hetero.bridge.snapshot import PoolCapacity, to_lua
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.site import Site, load_site
from slurm_hetero.site.pools import pools

DEMO = Path(__file__).resolve().parents[1] / "site" / "demo" / "site.yaml"
MIX = [
    {"accel": "any:2"}, {"accel": "nvidia:2,mem>=80G", "tier": "gold"},
    {"accel": "units=4", "energy": "efficiency"}, {"accel": "cann:8", "arch": "aarch64"},
    {"accel": "h100:1", "tier": "diamond", "energy": "performance"}, {"arch": "x86_64"},
]
N = 100_000


def model_lua() -> str:
    from slurm_hetero.predict import export_lua, synthetic
    from slurm_hetero.predict.train import train

    table = synthetic.workload(jobs=20_000, users=40, seed=1)
    return export_lua.export_text(train(table), table)


def main() -> None:
    site = load_site(DEMO)
    measure(site, None)
    measure(site, model_lua())


def measure(site: Site, model: str | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        js = JobSubmit(render_site(site, Profile(state_dir=d, model_lua=model))["job_submit.lua"])
        js.now = int(time.time())
        caps = {p.key: PoolCapacity(p.devices, p.devices // 2, p.per_node // 2, 1) for p in pools(site)}
        (Path(d) / "hetero-snapshot.lua").write_text(to_lua(caps, js.now))
        lua = js.lua
        envs = [lua.table_from({OPTION_PREFIX + k: v for k, v in m.items()}) for m in MIX]
        users = [f"user{u:03d}" for u in range(40)]
        submit = lua.globals().slurm_job_submit
        parts = lua.table()
        times = []
        for i in range(N):
            desc = lua.table(environment=envs[i % len(envs)], user_name=users[i % 40], time_limit=60,
                             min_cpus=4)
            t0 = time.perf_counter_ns()
            rc = submit(desc, parts, 0)
            times.append(time.perf_counter_ns() - t0)
            assert rc == 0
        inner = lua.execute(f"""
            local envs, submit, n = ..., slurm_job_submit, {N}
            local t0 = os.clock()
            for i = 1, n do
                submit({{environment = envs[(i % {len(MIX)}) + 1], user_name = "user007",
                         time_limit = 60, min_cpus = 4}}, {{}}, 0)
            end
            return (os.clock() - t0) / n
        """, lua.table_from(envs))
    times.sort()
    med, p99 = statistics.median(times) / 1000, times[int(0.99 * N)] / 1000
    print(f"bridge decisions under Lua 5.1 (lupa), {N} decisions, demo site, fresh snapshot, "
          f"{'with' if model else 'without'} a runtime model")
    print(f"  per call from Python: median {med:.1f} us, p99 {p99:.1f} us (target median <= 50 us)")
    print(f"  mean inside Lua (os.clock, no Python): {inner * 1e6:.1f} us")


if __name__ == "__main__":
    main()
