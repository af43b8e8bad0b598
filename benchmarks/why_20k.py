"""`slurm-hetero why` on a 20,000-job queue: our part of the answer (reading `squeue --json`,
finding what holds the job, the two start estimates, every suggestion checked) against the
1-second target. Slurm's own time to print the queue is not ours and not counted.

    .venv/bin/python benchmarks/why_20k.py [--jobs 20000] [--repeat 5]

The queue is the captured 22.05 answer's running H100 job (tests/data/captured), copied:
a quarter running across the demo site's GPU pools, the rest pending on them (Resources,
Priority, a QoS GRES limit), one pending 4-H100 job of its own user asked about — the case
with the most work (holders, simulated starts, a suggestion per other model).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from slurm_hetero.reports import why as W
from slurm_hetero.site import load_site

ROOT = Path(__file__).resolve().parents[1]
CAPTURED = ROOT / "tests" / "data" / "captured"
DEMO = ROOT / "site" / "demo" / "site.yaml"
POOLS = (("h100", "h100-01", 8), ("a100-80gb", "a100-01", 4), ("v100", "v100-01", 4))
SINFO = ("h100-01|mixed|gpu:h100:8|gpu:h100:8(IDX:0-7)|x86_64,x|\n"
         "a100-01|mixed|gpu:a100-80gb:4|gpu:a100-80gb:2(IDX:0-1)|x86_64,x|\n"
         "a100-02|idle|gpu:a100-80gb:4|gpu:a100-80gb:0(IDX:N/A)|x86_64,x|\n"
         "v100-01|idle|gpu:v100:4,shard:16|gpu:v100:0(IDX:N/A)|x86_64,x|\n")


def queue(n: int, now: float) -> tuple[str, int]:
    """A `squeue --json` text of n jobs, and the id of the job asked about."""
    doc = json.loads((CAPTURED / "squeue-json-22.05.json").read_text())
    template = doc["jobs"][5]  # a running 1-H100 job
    jobs: list[dict[str, Any]] = []
    for i in range(n):
        model, node, _ = POOLS[i % len(POOLS)]
        j = copy.deepcopy(template)
        running = i % 4 == 0
        # Requests as varied as a real queue's (CPUs, memory): several hundred distinct strings.
        req = f"cpu={1 + i % 16},mem={1 + i % 48}G,node=1,billing=1,gres/gpu=1,gres/gpu:{model}=1"
        j.update(job_id=1000 + i, user_name=f"u{i % 200}", user_id=2000 + i % 200, qos="gold",
                 account="root", tres_per_node=f"gres:gpu:{model}:1", tres_req_str=req,
                 submit_time=now - 3600 + i % 3000, eligible_time=now - 3600 + i % 3000,
                 time_limit=60 + i % 600, priority=10_000 - i % 5000, comment="", dependency="",
                 admin_comment=json.dumps({"hetero": 1,
                                           "pred": {"p50": 300 + i % 900, "p90": 900 + i % 2700}}))
        if running:
            j.update(job_state="RUNNING", state_reason="None", nodes=node, start_time=now - i % 3000,
                     tres_alloc_str=req, gres_detail=[f"gpu:{model}:1(IDX:{i % 4})"])
        else:
            reason = ("Resources", "Priority", "QOSGrpGRES")[i % 3]
            j.update(job_state="PENDING", state_reason=reason, nodes="", start_time=0, tres_alloc_str="",
                     gres_detail=[])
        jobs.append(j)
    asked = copy.deepcopy(jobs[1])
    asked.update(job_id=99, user_name="alice", user_id=1500, state_reason="Resources",
                 tres_per_node="gres:gpu:h100:4",
                 tres_req_str="cpu=1,mem=1G,node=1,billing=4,gres/gpu=4,gres/gpu:h100=4")
    jobs.append(asked)
    doc["jobs"] = jobs
    return json.dumps(doc), 99


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    site = load_site(DEMO)
    now = time.time()
    text, job_id = queue(a.jobs, now)
    parse_s, build_s = [], []
    why = None
    for _ in range(a.repeat):
        t = time.perf_counter()
        jobs = W.parse_queue(text)
        t1 = time.perf_counter()
        job = next(j for j in jobs if j.job_id == job_id)
        inputs = W.Inputs(job=job, record=None, jobs=jobs, sinfo_text=SINFO, qos_rows={}, assoc_rows=[])
        why = W.build_why(inputs, site, now=now)
        t2 = time.perf_counter()
        parse_s.append(t1 - t)
        build_s.append(t2 - t1)
    assert why is not None
    total = [x + y for x, y in zip(parse_s, build_s, strict=True)]
    print(f"why on a {a.jobs + 1:,}-job queue ({len(text) / 1e6:.1f} MB of squeue --json), {a.repeat} runs: "
          f"parse {statistics.median(parse_s):.3f} s, answer {statistics.median(build_s):.3f} s, "
          f"total median {statistics.median(total):.3f} s, max {max(total):.3f} s (target < 1 s)")
    pool = why.pool or {}
    print(f"  the answer: reason {why.reason.code if why.reason else '-'}, pool {pool.get('key')} "
          f"({pool.get('pending')} jobs pending there, {len(pool.get('running') or [])} holding it), "
          f"{len(why.suggestions)} suggestions, estimates {sorted(why.estimates)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
