"""Submission throughput with the bridge vs plain Slurm, on one real cluster, interleaved.

2,000 held-job submissions each way, in alternating batches of 100:
  plain:  a client slurm.conf without the SPANK plugin, and a pass-through job_submit.lua;
  bridge: the SPANK plugin and the full generated job_submit.lua with a fresh snapshot and
          a runtime model compiled in (a real LightGBM export, trained on a synthetic
          workload), each job asking `--accel=any:2 --tier=gold --energy=balanced`.
slurmctld re-reads job_submit.lua when it changes, so the batches swap it in place (the
first submission after a swap, which pays for that re-read, is not timed).
Prints jobs/s both ways and the ratio bridge/plain (target >= 0.95). Run as root.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from slurm_hetero.devcluster import Cluster
from slurm_hetero.site import load_site
from slurm_hetero.slurm.parse import parse_kv_record

DEMO = Path(__file__).resolve().parents[1] / "site" / "demo" / "site.yaml"
PASS_THROUGH = """function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
return slurm.SUCCESS
"""
TOTAL, BATCH = 2000, 100


def submit_batch(conf: Path, options: list[str], n: int) -> float:
    env = {"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"}
    # One untimed submission first: slurmctld re-reads the swapped job_submit.lua (half a
    # megabyte of Lua with the model) on the next job, a cost a site pays once per change.
    subprocess.run(["sbatch", "-H", "-Q", "-o", "/dev/null", *options, "--wrap", "true"],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run(["sbatch", "-H", "-Q", "-o", "/dev/null", *options, "--wrap", "true"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    site = load_site(DEMO)
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as d:
        c = Cluster(Path(d) / "demo")
        c.up(site, log=lambda *_: None)
        try:
            from slurm_hetero.predict import export_lua, synthetic
            from slurm_hetero.predict.train import train

            table = synthetic.workload(jobs=20_000, users=40, seed=1)
            model = Path(d) / "predict.lua"
            export_lua.write(export_lua.export_text(train(table), table), model)
            c.load_model(site, model)
            bridge_lua = (c.etc / "job_submit.lua").read_text()
            plain_conf = c.etc / "slurm-plain.conf"
            (c.etc / "plugstack-empty.conf").write_text("")
            plain_conf.write_text((c.etc / "slurm.conf").read_text().replace(
                f"PlugStackConfig={c.etc}/plugstack.conf", f"PlugStackConfig={c.etc}/plugstack-empty.conf"))
            lua_path = c.etc / "job_submit.lua"
            plain_s = bridge_s = 0.0
            for _ in range(TOTAL // BATCH):
                lua_path.write_text(PASS_THROUGH)
                plain_s += submit_batch(plain_conf, [], BATCH)
                lua_path.write_text(bridge_lua)
                bridge_s += submit_batch(c.conf, ["--accel=any:2", "--tier=gold", "--energy=balanced"], BATCH)
            held = c.runner.out(["squeue", "-h", "-t", "PD", "-o", "%i"]).split()
            admin = parse_kv_record(c.runner.out(["scontrol", "show", "job", held[-1]]))["AdminComment"]
        finally:
            c.runner.run(["scancel", "--state=PENDING"], check=False)
            c.down(log=lambda *_: None)
            shutil.rmtree(d, ignore_errors=True)
    print(f"{TOTAL} held submissions each way, batches of {BATCH}, interleaved (sbatch start included)")
    print(f"  plain Slurm: {TOTAL / plain_s:7.1f} jobs/s ({plain_s / TOTAL * 1000:.2f} ms each)")
    print(f"  bridge:      {TOTAL / bridge_s:7.1f} jobs/s ({bridge_s / TOTAL * 1000:.2f} ms each)")
    print(f"  ratio bridge/plain: {plain_s / bridge_s:.3f} (target >= 0.95); jobs held: {len(held)}")
    print(f"  last bridge decision: {admin.strip()[:120]}")


if __name__ == "__main__":
    main()
