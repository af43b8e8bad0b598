"""Prolog + epilog wall time of the node agent on an 8-GPU node (target: under 1 s).

Boots the demo cluster (fake device layer), holds a job with all 8 H100s of h100-01 with
the efficiency policy, then runs the agent's entry points exactly as slurmd does (a new
process, only Slurm's environment) 10 times each and prints the medians.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_hetero.devcluster import Cluster
from slurm_hetero.site import load_site
from slurm_hetero.slurm.jobs import submit

DEMO = Path(__file__).resolve().parents[1] / "site" / "demo" / "site.yaml"
BIN = Path(sys.executable).parent


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as d:
        c = Cluster(Path(d) / "demo")
        c.up(load_site(DEMO), log=lambda *_: None)
        try:
            jid = submit(c.runner, ["--accel=h100:8", "--energy=efficiency", "-o", "/dev/null"], "sleep 120")
            while "RUNNING" not in c.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%T"]):
                time.sleep(0.2)
            env = {"PATH": os.environ["PATH"], "SLURM_CONF": str(c.conf), "SLURM_JOB_ID": str(jid),
                   "SLURMD_NODENAME": "h100-01"}
            pro, epi = [], []
            for _ in range(10):
                for script, out in (("slurm-hetero-prolog", pro), ("slurm-hetero-epilog", epi)):
                    t0 = time.perf_counter()
                    subprocess.run([str(BIN / script)], env=env, check=True)
                    out.append(time.perf_counter() - t0)
            log = (c.agent_dir / "agent.log").read_text().splitlines()
        finally:
            c.runner.run(["scancel", "--user=root"], check=False)
            c.down(log=lambda *_: None)
    p, e = statistics.median(pro), statistics.median(epi)
    print("node agent on an 8-GPU node (fake device layer), process start included, 10 runs each:")
    print(f"  prolog median {p * 1000:.0f} ms, epilog median {e * 1000:.0f} ms, "
          f"together {(p + e) * 1000:.0f} ms (target < 1000 ms)")
    print(f"  last agent log lines: {log[-2][20:120]} | {log[-1][20:90]}")


if __name__ == "__main__":
    main()
