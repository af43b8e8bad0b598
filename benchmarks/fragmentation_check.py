"""Does the cluster exporter's fragmentation gauge say what the cluster holds? At random
instants, scrape the exporter and recount every pool's fragmented devices by brute force
from Slurm's structured answers, then print the largest differences.

    SLURM_CONF=/etc/slurm/slurm.conf python benchmarks/fragmentation_check.py \\
        --site site.yaml --metrics http://ctl:9411/metrics [--samples 30] [--max-gap 60] \\
        [--seed 37] [--json benchmarks/results/fragmentation_check.json]

The recount shares the definition (monitor/fragmentation.py) but none of the exporter's
code or inputs: the exporter reads `sinfo -O ...GresUsed` and counts per node, this reads
`sinfo --json` (22.05 has no `scontrol show node --json`; `scontrol show node -d` is
Key=Value text an admin's node Reason could imitate), enumerates each device index in
use and asks, for every free device, whether any waiting job of `squeue --json` fits its
node. The exporter's figures lag by up to its fast tier (10 s, free devices) and its round
(60 s, the queue), so a busy cluster shows differences that are staleness, not error: each
sample prints the age of the exporter's figures beside the difference.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shlex
import sys
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from slurm_hetero.site import load_site
from slurm_hetero.site.model import Site
from slurm_hetero.site.pools import pools
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import SQUEUE_JSON_ARGV

SINFO_JSON_ARGV = ["sinfo", "--json"]
# Which nodes can run jobs, as the exporter reads sinfo's long state (cluster.node_state):
# powered down or powering up/down still counts (Slurm wakes it), drained or failing not.
RUNNING_STATES = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
UNUSABLE_FLAGS = {"DRAIN", "POWER_DRAIN", "MAINTENANCE", "NOT_RESPONDING", "FAIL", "DOWN", "FUTURE",
                  "UNKNOWN", "ERROR", "PLANNED", "REBOOT_ISSUED", "INVALID_REG"}
WAITING = {"Resources", "Priority", "None", ""}
_ITEM = re.compile(r"([A-Za-z0-9_.-]+)(?::([A-Za-z0-9_.-]+))?:(\d+)(?:\((.*)\))?")
ARCHES = ("x86_64", "aarch64")


# ---- the recount (pure) ------------------------------------------------------------------------

def _items(text: str) -> Iterable[tuple[str, str, int, str]]:
    """(name, type, count, detail) of `gpu:h100:2(IDX:0-1),npu:0,shard:v100:16`."""
    for item in re.split(r",(?![^(]*\))", text or ""):
        m = _ITEM.fullmatch(item.strip())
        if m:
            yield m.group(1), m.group(2) or "", int(m.group(3)), m.group(4) or ""


def _indices(detail: str, count: int) -> set[int]:
    """The device indices of `IDX:0-2,5` (a GRES with no files has none: its first `count`)."""
    m = re.search(r"IDX:([0-9,-]+)", detail)
    if not m:
        return set(range(count))
    out: set[int] = set()
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _words(v: Any) -> list[str]:
    if isinstance(v, list):
        return [str(x) for x in v]
    return re.split(r"[^\w.-]+", v) if isinstance(v, str) else []


def node_usable(node: dict[str, Any]) -> bool:
    """22.05: `state` "mixed" plus `state_flags` ["DRAIN"]; 23.02+: `state` ["MIXED", "DRAIN"]."""
    states = {s.upper() for s in _words(node.get("state")) + _words(node.get("state_flags"))}
    return bool(states & RUNNING_STATES) and not states & UNUSABLE_FLAGS


def free_devices(site: Site, sinfo_json: str) -> dict[str, dict[str, int]]:
    """{pool: {node: free devices}}, counting device indices one by one."""
    model = {(m.gres_name, m.gres_type): m.id for m in site.models_in_use}
    out: dict[str, dict[str, int]] = {}
    for node in json.loads(sinfo_json)["nodes"]:
        feats = _words(node.get("features"))
        arch = next((a for a in ARCHES if a in feats), "x86_64")
        used: dict[tuple[str, str], set[int]] = {}
        for name, gtype, n, detail in _items(node.get("gres_used", "")):
            used[(name, gtype)] = _indices(detail, n) if n else set()
        for name, gtype, n, _ in _items(node.get("gres", "")):
            mid = model.get((name, gtype))
            if mid is None:
                continue
            devices = set(range(n))
            free = devices - used.get((name, gtype), set()) if node_usable(node) else set()
            out.setdefault(f"{mid}@{arch}", {})[node["name"]] = len(free)
    return out


def waiting_jobs(site: Site, squeue_json: str) -> list[tuple[set[str], int]]:
    """(pools it may run in, devices per node) of each request of each job waiting for
    devices or its turn."""
    by_name: dict[str, list[str]] = {}
    typed = {}
    for model in site.models_in_use:
        by_name.setdefault(model.gres_name, []).append(model.id)
        typed[(model.gres_name, model.gres_type)] = model.id
    arches: dict[str, set[str]] = {}
    for p in pools(site):
        arches.setdefault(p.model, set()).add(p.arch)
    out = []
    for j in json.loads(squeue_json)["jobs"]:
        state = j.get("job_state")
        state = state[0] if isinstance(state, list) and state else state
        if state != "PENDING" or j.get("state_reason", "") not in WAITING:
            continue
        words = set(_words(j.get("features", "")))
        want_arch = {a for a in ARCHES if a in words}
        for item in (j.get("tres_per_node") or "").split(","):
            item = item.strip().removeprefix("gres:").removeprefix("gres/")
            m = _ITEM.fullmatch(item)
            if not m or int(m.group(3)) <= 0:
                continue
            name, gtype = m.group(1), m.group(2) or ""
            if gtype:
                models = [typed[(name, gtype)]] if (name, gtype) in typed else []
            else:  # any model of that GRES name, unless a feature names one (the bridge's pin)
                models = [mid for mid in by_name.get(name, []) if mid in words] or by_name.get(name, [])
            fits = {f"{mid}@{a}" for mid in models for a in arches.get(mid, ())
                    if not want_arch or a in want_arch}
            out.append((fits, int(m.group(3))))
    return out


def brute_force(site: Site, sinfo_json: str, squeue_json: str) -> dict[str, tuple[int, int]]:
    """{pool: (free devices, fragmented devices)}: a free device is fragmented when a job
    waits for the pool and none of the pool's waiting jobs fits on its node."""
    jobs = waiting_jobs(site, squeue_json)
    out = {}
    for pool, nodes in free_devices(site, sinfo_json).items():
        wanted = [n for fits, n in jobs if pool in fits]
        free = lost = 0
        for count in nodes.values():
            for _device in range(count):
                free += 1
                if wanted and not any(n <= count for n in wanted):
                    lost += 1
        out[pool] = (free, lost)
    return out


def exporter_figures(text: str) -> tuple[dict[str, tuple[float, float]], float | None]:
    """({pool: (free, fragmented)}, when the exporter read the free devices) from /metrics."""
    free: dict[str, float] = {}
    lost: dict[str, float] = {}
    at = None
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "hetero_pool_free_devices":
                free[s.labels["pool"]] = s.value
            elif s.name == "hetero_pool_fragmented_devices":
                lost[s.labels["pool"]] = s.value
            elif s.name == "hetero_pool_fragmentation_timestamp_seconds":
                at = s.value
    return {p: (free[p], lost.get(p, 0.0)) for p in free}, at


KINDS = ("free", "fragmented", "ratio")
Diff = dict[str, dict[str, float]]  # pool → {"free", "fragmented", "ratio"}: absolute differences


def compare(exp: dict[str, tuple[float, float]], brute: dict[str, tuple[int, int]]) -> Diff:
    """Per pool: |Δ free|, |Δ fragmented| and |Δ ratio| (a pool missing on one side: 0 there)."""
    out = {}
    for pool in sorted(set(exp) | set(brute)):
        ef, el = exp.get(pool, (0.0, 0.0))
        bf, bl = brute.get(pool, (0, 0))
        out[pool] = {"free": abs(ef - bf), "fragmented": abs(el - bl),
                     "ratio": abs((el / ef if ef else 0.0) - (bl / bf if bf else 0.0))}
    return out


# ---- the live check ----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, required=True)
    ap.add_argument("--metrics", required=True, help="the cluster exporter's /metrics URL")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--max-gap", type=float, default=60.0, help="most seconds between two samples")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--json", type=Path, default=None, help="write the samples and summary here")
    args = ap.parse_args(argv)
    site, runner, rng = load_site(args.site), Runner(timeout=60), random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    worsts: list[dict[str, float]] = []
    for i in range(args.samples):
        time.sleep(rng.uniform(0, args.max_gap))
        with urllib.request.urlopen(args.metrics, timeout=30) as r:
            exp, at = exporter_figures(r.read().decode())
        t = time.time()
        brute = brute_force(site, runner.out(SINFO_JSON_ARGV), runner.out(SQUEUE_JSON_ARGV))
        diff = compare(exp, brute)
        worst = {k: max((d[k] for d in diff.values()), default=0.0) for k in KINDS}
        age = None if at is None else round(t - at, 1)
        worsts.append(worst)
        rows.append({"t": t, "age_s": age, "worst": worst, "per_pool": diff, "exporter": exp,
                     "brute_force": brute})
        off = ", ".join(f"{p} {d['fragmented']:g}" for p, d in diff.items() if d["fragmented"])
        print(f"sample {i + 1:3d}: figures {age} s old, |Δ fragmented| max {worst['fragmented']:g} devices, "
              f"|Δ ratio| max {worst['ratio']:.3f}" + (f" ({off})" if off else ""), flush=True)
    summary = {k: max((w[k] for w in worsts), default=0.0) for k in KINDS}
    differing = sum(1 for w in worsts if w["fragmented"])
    print(f"max abs difference over {len(rows)} samples: fragmented {summary['fragmented']:g} devices, "
          f"ratio {summary['ratio']:.3f}, free {summary['free']:g}; {differing} samples differ")
    if args.json:
        doc = {"command": shlex.join([sys.executable, *sys.argv]), "summary": summary,
               "samples_differing": differing, "samples": rows}
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
