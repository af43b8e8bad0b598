"""`replay run --windows N --via-slurm`: one window per task of a Slurm job array, then
`replay merge`. Slurm is the distributed engine; this only plans, submits and waits.

Each array task runs `slurm-hetero replay run` for its window, into OUT/window-<i>/, on
its own dev cluster (every arm a fresh one, as on one machine) under the task's scratch
folder ($TMPDIR when the site sets one, else /var/tmp), removed when the task succeeds.
What a task needs on its node, since it boots a whole private cluster:
- root (slurmctld/slurmd/munged/MariaDB run as root there): submit as root, or as a user
  the node lets become root — Slurm runs the task as its submitter;
- the dev cluster's packages (slurm-wlm, slurmdbd, munge, mariadb-server, faketime, lua5.1;
  `make deps`) and this project at the same path (the plan names the Python that runs it);
- free loopback ports (about six per cluster, picked free at start) and a few hundred MB
  of scratch;
- the trace, site file and OUT on a filesystem every node sees.

No shell ever sees user text: sbatch gets an argv list; the batch script is a constant
that passes its two arguments (the Python, the plan file) on; the task's own argv comes
from the plan (JSON), chosen by SLURM_ARRAY_TASK_ID.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.fileio import write_atomic
from slurm_hetero.slurm.commands import sbatch_script_argv, squeue_ids_argv
from slurm_hetero.slurm.runner import Runner

Say = Callable[[str], None]

SCRIPT = """#!/bin/sh
# One window of `slurm-hetero replay run --via-slurm` (slurm_hetero/replay/array.py):
# $1 is the Python that runs slurm-hetero, $2 the plan; the task's argv is in the plan.
exec "$1" -m slurm_hetero.replay.array "$2"
"""
PLAN = "plan.json"
# The outer job's own variables: a nested cluster's clients must not read them as theirs.
_OUTER_ENV = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")


@dataclass(frozen=True)
class Plan:
    out: Path
    windows: list[int]  # window starts, epoch s of the trace
    argv: list[list[str]]  # per window: `replay run` options (without --workdir and -o)
    minutes: int  # each task's time limit


def task_minutes(arms: int, hours: float, warmup_hours: float, drain_hours: float | None, speed: float,
                 fidelity_hours: float | None) -> int:
    """A task's time limit: each arm's boot and teardown (~3 min on a loaded machine) and its
    trace span at `speed` (one drain hour assumed when unbounded), doubled, at least 10 min.

    >>> task_minutes(2, 1.0, 0.0, None, 20.0, None)
    36
    """
    drain = 1.0 if drain_hours is None else drain_hours
    real_s = arms * (180.0 + (warmup_hours + hours + drain) * 3600 / speed)
    if fidelity_hours:  # the fidelity window at x1 and at `speed`
        real_s += 2 * 180.0 + (warmup_hours + fidelity_hours + drain) * 3600 * (1.0 + 1.0 / speed)
    return max(10, math.ceil(2 * real_s / 60))


def plan(out: Path, starts: Sequence[int], common: Sequence[str], minutes: int) -> Plan:
    """Window i runs `replay run --start starts[i] COMMON...`."""
    if not starts:
        raise InputError("--windows: give at least 1")
    return Plan(out.absolute(), list(starts), [["--start", str(s), *common] for s in starts], minutes)


def window_starts(start: str, count: int, hours: float, resolve: Callable[[str], int]) -> list[int]:
    """--start for --windows N: busiest[:K] gives the K-th to (K+N-1)-th busiest windows,
    anything else N consecutive windows from it.

    >>> window_starts("100", 3, 0.5, int)
    [100, 1900, 3700]
    >>> window_starts("busiest:2", 2, 1.0, lambda s: {"busiest:2": 7, "busiest:3": 5}[s])
    [7, 5]
    """
    if count < 1:
        raise InputError(f"--windows {count}: give at least 1")
    head, _, k = start.partition(":")
    if head == "busiest" and (k == "" or k.isdigit()):
        return [resolve(f"busiest:{int(k or 1) + i}") for i in range(count)]
    first = resolve(start)  # which says what is wrong with a bad --start
    return [first + round(i * hours * 3600) for i in range(count)]


def common_argv(trace: Path, site: Path, hours: float, warmup_hours: float, speed: float, arms: str,
                model: str, users: str, drain_hours: float | None, fidelity_hours: float | None) -> list[str]:
    """`replay run` options every window shares (paths absolute: tasks run elsewhere)."""
    if model not in ("auto", "none"):
        model = str(Path(model).absolute())
    argv = ["--trace", str(trace.absolute()), "--site", str(site.absolute()), "--hours", repr(hours),
            "--warmup-hours", repr(warmup_hours), "--speed", repr(speed), "--arms", arms, "--model", model,
            "--users", users]
    if drain_hours is not None:
        argv += ["--drain-hours", repr(drain_hours)]
    if fidelity_hours is not None:
        argv += ["--check-fidelity", "--fidelity-hours", repr(fidelity_hours)]
    return argv


def run_windows(runner: Runner, p: Plan, extra: Sequence[str] = (), say: Say | None = None) -> list[Path]:
    """Submit the array, wait for it, return every window's replay.json (or fail naming the missing)."""
    job = submit(runner, p, extra)
    if say:
        say(f"submitted array job {job}: {len(p.windows)} window(s), {p.minutes} min each at most; "
            f"logs {p.out}/window-<i>.log")
    wait(runner, job, say)
    return results(p)


def window_out(p: Plan, i: int) -> Path:
    return p.out / f"window-{i}"


def write_plan(p: Plan) -> Path:
    p.out.mkdir(parents=True, exist_ok=True)
    doc = {"out": str(p.out), "windows": p.windows, "argv": p.argv, "python": sys.executable}
    path = p.out / PLAN
    write_atomic(str(path), json.dumps(doc, indent=1) + "\n")
    script = p.out / "replay-window.sh"
    write_atomic(str(script), SCRIPT)
    os.chmod(script, 0o755)
    return path


def sbatch_argv(p: Plan, extra: Sequence[str] = ()) -> list[str]:
    """The array job: one task per window; `extra`: the user's own sbatch options (argv items)."""
    opts = [f"--array=0-{len(p.windows) - 1}", "--job-name=replay-windows", f"--time={p.minutes}",
            "--nodes=1", "--ntasks=1", f"--output={p.out / 'window-%a.log'}", *extra]
    return sbatch_script_argv(opts, str(p.out / "replay-window.sh"), [sys.executable, str(p.out / PLAN)])


def submit(runner: Runner, p: Plan, extra: Sequence[str] = ()) -> str:
    write_plan(p)
    text = runner.out(sbatch_argv(p, extra), timeout=60).strip()
    return text.split(";")[0]


def wait(runner: Runner, job_id: str, say: Say | None = None, every_s: float = 10.0,
         timeout_s: float | None = None) -> None:
    """Until slurmctld lists no task of the array (ended ones leave its list after MinJobAge)."""
    t0 = time.monotonic()
    last = None
    while True:
        ids = runner.out(squeue_ids_argv(), timeout=60).split()
        mine = [i for i in ids if i == job_id or i.startswith(f"{job_id}_")]
        if not mine:
            return
        if say and mine != last:
            say(f"array job {job_id}: listed {' '.join(mine)}")
            last = mine
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            raise RuntimeFailure(f"array job {job_id} still listed after {timeout_s:.0f} s")
        time.sleep(every_s)


def results(p: Plan) -> list[Path]:
    """Every window's replay.json, or a RuntimeFailure naming the windows without one and their logs."""
    paths = [window_out(p, i) / "replay.json" for i in range(len(p.windows))]
    missing = [i for i, path in enumerate(paths) if not path.exists()]
    if missing:
        logs = ", ".join(str(p.out / f"window-{i}.log") for i in missing)
        raise RuntimeFailure(f"{len(missing)} of {len(paths)} windows wrote no replay.json (see {logs}); "
                             f"`slurm-hetero replay merge` can combine those that did")
    return paths


def task_scratch(env: dict[str, str], job: str, task: str) -> Path:
    """Where an array task's clusters live: the job's $TMPDIR, else /var/tmp."""
    base = env.get("TMPDIR") or "/var/tmp"
    return Path(base) / f"slurm-hetero-replay-{job}_{task}"


def run_task(plan_path: Path, env: dict[str, str] | None = None) -> int:
    """In an array task: replay this task's window on a private cluster under scratch."""
    env = dict(os.environ if env is None else env)
    doc: dict[str, Any] = json.loads(plan_path.read_text())
    task = env.get("SLURM_ARRAY_TASK_ID")
    if task is None or not task.isdigit() or int(task) >= len(doc["argv"]):
        raise InputError(f"{plan_path}: run as a task of its array job (SLURM_ARRAY_TASK_ID {task!r})")
    job = env.get("SLURM_ARRAY_JOB_ID", "0")
    work = task_scratch(env, job, task)
    out = Path(doc["out"]) / f"window-{task}"
    clean = {k: v for k, v in env.items() if not k.startswith(_OUTER_ENV)}
    clean["SLURM_HETERO_OUTER_JOB"] = f"{job}_{task}"
    argv = [str(doc["python"]), "-m", "slurm_hetero.cli", "replay", "run", *doc["argv"][int(task)],
            "--workdir", str(work), "-o", str(out)]
    print(f"window {task}: {' '.join(argv)}", flush=True)
    rc = subprocess.run(argv, env=clean, check=False).returncode
    if rc == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"window {task}: exit {rc}; its clusters' logs are kept in {work}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(run_task(Path(sys.argv[1])))
