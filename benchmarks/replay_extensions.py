"""What the bridge daemon's extensions did in replayed windows: per arm, the jobs whose
shortened limit it extended, and how many of those ended within the limit they had when it
first extended them (the margin extended them, not their runtime), from each arm's
`bridge.log` beside the window's JSON.

    .venv/bin/python benchmarks/replay_extensions.py --log SDSC-BLUE WINDOW.json... \
        --out benchmarks/results/replay-extensions-sdsc.json

Each WINDOW.json is a replay_kth.py result whose work folder (its command's `--workdir`) still
holds the arms' logs: `WORKDIR/w0/ARM/log/bridge.log`. A job extended although it ended within
its first limit showed backfill a longer limit than it needed for the rest of its run.
Runtimes are the replay's (trace seconds), which run up to ~15 s past the trace's (fidelity).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from slurm_hetero.fileio import write_json_atomic

# bridge/daemon.py's line for each extension it makes
EXTENDED = re.compile(r"job (\d+): limit (\d+) -> (\d+) min \(ran ([\d.]+) min")


def extensions(log_text: str) -> dict[str, tuple[int, int]]:
    """Per job id, (its limit in minutes when first extended, how many extensions).

    >>> extensions("job 7: limit 3 -> 6 min (ran 1.6 min, own limit 10)\\n"
    ...            "job 7: limit 6 -> 10 min (ran 5.1 min, own limit 10)\\njob 8: skipped\\n")
    {'7': (3, 2)}
    """
    out: dict[str, tuple[int, int]] = {}
    for m in EXTENDED.finditer(log_text):
        first, n = out.get(m[1], (int(m[2]), 0))
        out[m[1]] = (first, n + 1)
    return out


def arm_figures(jobs: list[dict[str, Any]], log_text: str) -> dict[str, int]:
    ext = extensions(log_text)
    runtime = {str(j["job_id"]): j.get("runtime_s") for j in jobs}
    within = [k for k, (first, _) in ext.items()
              if isinstance(runtime.get(k), int | float) and runtime[k] <= first * 60]
    return {"jobs": len(jobs), "extended": len(ext), "extensions": sum(n for _, n in ext.values()),
            "extended_but_ended_within_first_limit": len(within)}


def workdir_of(doc: dict[str, Any]) -> Path:
    argv = shlex.split(doc["command"])
    return Path(argv[argv.index("--workdir") + 1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", required=True)
    ap.add_argument("windows", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rows, totals = [], {}
    for path in a.windows:
        try:
            doc = json.loads(path.read_text())
            [w] = doc["windows"]
            work = workdir_of(doc) / "w0"
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"{path}: not a one-window replay_kth.py result with --workdir: {e}", file=sys.stderr)
            return 2
        row: dict[str, Any] = {"start": w["start"], "file": str(path), "arms": {}}
        for arm, r in w["arms"].items():
            log = work / arm / "log" / "bridge.log"
            if not log.is_file():
                continue  # an arm without the daemon (plain)
            figs = arm_figures(r["jobs"], log.read_text(errors="replace"))
            row["arms"][arm] = figs
            t = totals.setdefault(arm, dict.fromkeys(figs, 0))
            for k, v in figs.items():
                t[k] += v
        rows.append(row)
    doc = {"log": a.log, "command": " ".join(sys.argv), "totals": totals, "per_window": rows}
    write_json_atomic(str(a.out), doc, indent=1)
    for arm, t in totals.items():
        print(f"{a.log} {arm}: {t['extended']} of {t['jobs']} jobs extended ({t['extensions']} extensions); "
              f"{t['extended_but_ended_within_first_limit']} of them ended within their first limit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
