"""`slurm-hetero report -o` on 1,000,000 jobs synthesized from four workload traces.

The jobs' submit, wait, run time, size, user estimate and user come from the SWF traces
(and the Alibaba pods), repeated until there are a million; each is placed on a pool of
the demo site (CPU, A100, H100, GH200, V100 shards, Ascend 910B), and a third of the
accelerator jobs carry a bridge decision with a prediction and energy. They are written
as sacct -P text, one file per day, into a report cache, and the timed child process runs
the real pipeline (cache → parse → metrics → HTML) over the 90 days. The site is the demo
site with every node group SCALE times larger, so a million jobs keep it busy, not 40x
oversubscribed. KTH ships with the package; the others are read from ../shared/traces
(override with $TRACES).

Targets: ≤ 60 s and ≤ 4 GB peak memory on the 2-core machine. Prints the
figures; asserts nothing (machines are noisy).

    .venv/bin/python benchmarks/report_1m.py [--jobs N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import yaml
from ClusterShell.NodeSet import NodeSet

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("TRACES") or ROOT.parent / "shared" / "traces")
DEMO = ROOT / "site" / "demo" / "site.yaml"
DAYS = 90
SCALE = 40
CONF = "/nonexistent/bench-slurm.conf"  # never read: every day comes from the cache


def _period() -> tuple[float, float]:
    today = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)
    return (today - timedelta(days=DAYS + 1)).timestamp(), (today - timedelta(days=1)).timestamp()


def scaled_site(dest: Path) -> Path:
    """The demo site with SCALE times the nodes in each group (same models and partitions)."""
    data = yaml.safe_load(DEMO.read_text())
    for g in data["node_groups"]:
        n = len(NodeSet(g["names"])) * SCALE
        stem = re.sub(r"-?\[.*\]$|-\d+$", "", g["names"])
        g["names"] = f"{stem}-[{1:04d}-{n:04d}]"
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def _trace_jobs() -> dict[str, np.ndarray]:  # type: ignore[type-arg]
    from slurm_hetero.jobs.trace import KTH_SP2
    from slurm_hetero.jobs.traces import read_trace

    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("submit", "wait", "run", "procs", "limit", "user")}  # type: ignore[type-arg]
    for name in ("SDSC-BLUE-pyss-easy.swf.gz", "CTC-SP2-pyss-easy.swf.gz", "KTH-SP2-1996-2.1-cln.swf.gz",
                 "alibaba-gpu-2023-pods.csv"):
        j = read_trace(KTH_SP2 if name == KTH_SP2.name else TRACES / name).jobs
        ok = ~np.isnan(j["start"].to_numpy()) & (np.nan_to_num(j["runtime_s"].to_numpy()) > 0)
        submit = j["submit"].to_numpy()[ok]
        cols["submit"].append((submit - submit.min()) / max(np.ptp(submit), 1.0))  # 0..1 over the trace
        cols["wait"].append((j["start"].to_numpy() - j["submit"].to_numpy())[ok])
        cols["run"].append(j["runtime_s"].to_numpy()[ok])
        cols["procs"].append(np.nan_to_num(j["ncpus"].to_numpy()[ok], nan=1.0))
        cols["limit"].append(j["req_time_s"].to_numpy()[ok])
        users = j["user"].astype(object).to_numpy()[ok]
        cols["user"].append(np.asarray([f"{name[:4].lower()}-{u}" for u in users], dtype=object))
    return {k: np.concatenate(v) for k, v in cols.items()}


def synthesize(n: int, cache_root: Path, site_path: Path) -> Path:
    """Write n jobs as per-day sacct chunks where SacctDays will look for them."""
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner
    from slurm_hetero.slurm.sacct import DELIM, FIELDS, SacctDays, day_chunks

    site = load_site(site_path)
    pools = []  # (partition, gres or None, arch, nodes, devices per node, shards, units, cpus)
    for g in site.node_groups:
        if not g.accelerators:
            pools.append(("cpu", None, g.architecture, g.nodes, 0, 0, 0.0, g.cpus))
        for a in g.accelerators:
            m = a.model
            pools.append(("npu" if m.gres_name == "npu" else "gpu", (m.gres_name, m.gres_type, m.id),
                          g.architecture, g.nodes, a.count, a.shards_per_device, m.units, g.cpus))
    rng = np.random.default_rng(7)
    t = _trace_jobs()
    reps = -(-n // len(t["run"]))
    pick = np.concatenate([rng.permutation(len(t["run"])) for _ in range(reps)])[:n]
    start_t, end_t = _period()
    span = end_t - start_t - 86400
    jitter = rng.uniform(0, 86400 * 3, n)
    submit = (start_t + np.minimum(t["submit"][pick] * span + jitter, span)).astype(np.int64)
    wait = np.nan_to_num(t["wait"][pick]).astype(np.int64)
    run = np.minimum(t["run"][pick], 5 * 86400).astype(np.int64)
    limit = np.where(np.isnan(t["limit"][pick]), 3600, t["limit"][pick])
    procs = t["procs"][pick]
    users = t["user"][pick]
    pool_of = rng.choice(len(pools), size=n, p=_weights(pools))
    states = rng.choice(["COMPLETED", "FAILED", "CANCELLED by 0", "TIMEOUT"], size=n, p=[.8, .1, .05, .05])
    qos = rng.choice(["gold", "silver", "diamond"], size=n, p=[.6, .3, .1])
    eff = rng.uniform(0.1, 1.0, n)
    comment = rng.uniform(size=n) < 0.35
    names = rng.integers(0, 400, n)
    policies = rng.choice(["efficiency", "performance", "balanced"], size=n)
    kinds = rng.choice(["any:{n}", "units={u:g}", "{m}:{n}"], size=n)
    node_pick = rng.integers(0, 1 << 30, n)
    accounts = {u: f"acct{k % 40}" for k, u in enumerate(dict.fromkeys(users.tolist()))}
    lines_by_day: dict[int, list[str]] = {}
    day_index = ((submit - int(start_t)) // 86400).astype(int)
    for i in range(n):
        part, gres, arch, nodes, per_node, shards, units, cpus = pools[pool_of[i]]
        node = nodes[node_pick[i] % len(nodes)]
        s = int(submit[i]) + int(wait[i])
        e = s + int(run[i])
        tres = ""
        ncpu = int(min(max(procs[i], 1), cpus))
        comm = ""
        if gres is None:
            tres = f"billing={ncpu},cpu={ncpu},mem={ncpu}G,node=1"
        else:
            gname, gtype, model = gres
            k = 1 + int(node_pick[i] % per_node)
            ncpu = 4 * k
            if shards and node_pick[i] % 3 == 0:
                tres = f"billing=2,cpu={ncpu},gres/shard={k},mem=8G,node=1"
            else:
                tres = f"billing={k * 16},cpu={ncpu},gres/{gname}:{gtype}={k},gres/{gname}={k},mem=8G,node=1"
                if comment[i]:
                    power = 150.0 + 250.0 * eff[i]
                    energy = power * k * run[i]
                    req = kinds[i].format(n=k, u=round(k * units, 1), m=model)
                    pred = max(run[i] * rng.lognormal(0, 0.6), 1.0)
                    comm = json.dumps({
                        "hetero": 1, "tier": qos[i], "energy": policies[i], "accel": req,
                        "pool": f"{model}@{arch}", "model": model, "n": k, "units": round(k * units, 2),
                        "why": "starts-now" if wait[i] < 60 else "least-wait", "candidates": 3,
                        "snapshot_age": 2, "pred": {"p50": round(pred), "p90": round(pred * 1.8)},
                        "energy_j": round(energy), "devices": [
                            {"idx": d, "energy_j": round(energy / k), "power_w": round(power),
                             "util": round(100 * eff[i])} for d in range(k)]},
                        separators=(",", ":"))
        cpu_used = ncpu * run[i] * eff[i]
        fields = {"JobIDRaw": str(100000 + i), "JobID": str(100000 + i), "Cluster": "bench",
                  "JobName": f"train-{names[i]}", "User": users[i], "Account": accounts[users[i]],
                  "Partition": part, "QOS": qos[i], "State": states[i], "Reason": "None",
                  "Submit": str(submit[i]), "Eligible": str(submit[i]), "Start": str(s), "End": str(e),
                  "ElapsedRaw": str(run[i]), "TimelimitRaw": str(max(int(limit[i] // 60), 1)),
                  "ReqCPUS": str(ncpu), "ReqTRES": tres, "ReqMem": "8G", "NCPUS": str(ncpu),
                  "TotalCPU": _cpu_text(cpu_used), "AllocTRES": tres, "NodeList": node,
                  "ConsumedEnergyRaw": "0", "AdminComment": comm}
        lines_by_day.setdefault(int(day_index[i]), []).append(DELIM.join(fields[f] for f in FIELDS))
    cache = SacctDays(Runner(slurm_conf=CONF), cache_root).cache
    assert cache is not None
    for d, (a, b) in enumerate(day_chunks(start_t, end_t)):
        cache.put(a, b, "\n".join(lines_by_day.get(d, [])) + "\n")
    return cache_root


def _weights(pools: list[tuple[object, ...]]) -> list[float]:
    w = np.asarray([3.0 if p[1] is None else 1.0 for p in pools])
    return list(w / w.sum())


def _cpu_text(sec: float) -> str:
    s = int(sec)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def run(cache_root: Path, out: Path, site_path: Path) -> None:
    """The timed part, in a fresh process so that peak RSS is the report's own."""
    t0 = time.perf_counter()
    from slurm_hetero.reports import Period, sacct_report, write_html
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner

    start, end = _period()
    t1 = time.perf_counter()
    rep = sacct_report(load_site(site_path), Runner(slurm_conf=CONF), Period(start, end, True, True),
                       cache_dir=cache_root)
    t2 = time.perf_counter()
    write_html(rep, out)
    t3 = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_mib = usage.ru_maxrss / 1024
    jobs = next(v for k, v in rep.summary if k == "jobs in range")
    print(json.dumps({"jobs": jobs, "imports_s": round(t1 - t0, 2), "data_and_metrics_s": round(t2 - t1, 2),
                      "html_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2),
                      "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                      "peak_rss_mib": round(peak_mib), "html_bytes": out.stat().st_size}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="Keep the synthesized cache and the HTML in DIR.")
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)  # the timed child
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--site", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.run:
        run(a.run, a.out, a.site)
        return
    work = a.keep or Path(tempfile.mkdtemp(prefix="report-1m-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        site = scaled_site(work / "site.yaml")
        synthesize(a.jobs, work / "cache", site)
        print(f"synthesized {a.jobs:,} jobs as {DAYS} daily sacct chunks in {time.perf_counter() - t:.1f} s "
              "(not part of the figures)")
        argv = [sys.executable, __file__, "--run", str(work / "cache"), "--out", str(work / "report.html"),
                "--site", str(site)]
        child = subprocess.run(argv, capture_output=True, text=True, check=False)
        if child.returncode:
            print(child.stdout, child.stderr, file=sys.stderr)
            sys.exit(child.returncode)
        fig = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"jobs in report: {fig['jobs']}")
        print(f"time: {fig['total_s']} s (imports {fig['imports_s']}, cache+parse+metrics "
              f"{fig['data_and_metrics_s']}, html {fig['html_s']}; CPU time {fig['cpu_s']} s)"
              "   target <= 60 s")
        print(f"peak memory (max RSS): {fig['peak_rss_mib']:,} MiB   target <= 4096 MiB")
        print(f"html: {fig['html_bytes'] / 1e6:.2f} MB" + (f" at {work / 'report.html'}" if a.keep else ""))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
