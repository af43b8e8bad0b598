"""Slurm accounting (sacct) into the job table, one day at a time, resumable.

Each day is one `sacct -X -a -P -n -S day -E day+1` call. sacct returns every job that
existed during the window, so a job running over several days shows up in each; we keep
a job only in the day its End falls in, which gives every finished job exactly one home.
A finished day is stored as `<table>.parts/sacct-<cluster>-<day>.parquet` (written
atomically): that file *is* the record that the day is done, and a rerun skips it. Today
and the last `SETTLE_S` seconds are fetched but never recorded, since slurmdbd may still
learn about jobs that ended then.

Parsing is pure (`parse_rows`) and tested on captured sacct output; running goes through
the project's one `Runner`. Times are asked for as epoch seconds (SLURM_TIME_FORMAT=%s);
ISO local times are read too. Fields are split on the project's SACCT_DELIMITER (job names
may hold "|"), and JobName comes last, so even a stray delimiter in it stays in the name.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.predict import jobtable
from slurm_hetero.slurm.parse import SACCT_DELIMITER, parse_sacct, parse_tres
from slurm_hetero.slurm.runner import Runner

# JobName last: the one free-text field; parse_sacct leaves any delimiter in the last field.
FIELDS = ["JobIDRaw", "Cluster", "User", "Account", "Partition", "QOS", "State", "Submit", "Start",
          "End", "ElapsedRaw", "TimelimitRaw", "ReqCPUS", "ReqTRES", "ReqMem", "JobName"]
ACCEL_GRES = ("gpu", "npu")  # GRES counted as accelerators in req_accel (the Lua export agrees)
SETTLE_S = 3600
STATUS = {"COMPLETED": "completed", "FAILED": "failed", "CANCELLED": "cancelled", "TIMEOUT": "timeout",
          "OUT_OF_MEMORY": "oom", "NODE_FAIL": "node_fail", "PREEMPTED": "preempted",
          "BOOT_FAIL": "failed", "DEADLINE": "timeout"}
MEM_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024 ** 3}
DayProgress = Callable[[dt.date, int, int, str], None]


def parse_time(value: str) -> int:
    """Epoch seconds from `1796034047` or a local `2026-11-30T09:47:27`; -1 for
    Unknown/None/empty.

    >>> parse_time("1796034047"), parse_time("Unknown"), parse_time("None")
    (1796034047, -1, -1)
    """
    v = value.strip()
    if v.isdigit():
        return int(v)
    if v in ("", "Unknown", "None", "N/A"):
        return -1
    try:
        return int(time.mktime(dt.datetime.fromisoformat(v).timetuple()))
    except ValueError:
        return -1


def parse_mem_mb(value: str, cpus: int) -> int:
    """ReqMem → MB: `32G` → 32768; the old per-CPU suffix `c` multiplies by the CPUs.

    >>> parse_mem_mb("32G", 4), parse_mem_mb("1000Mc", 4), parse_mem_mb("", 1)
    (32768, 4000, -1)
    """
    m = re.fullmatch(r"([\d.]+)([KMGTP]?)([nc]?)", value.strip())
    if not m:
        return -1
    mb = float(m.group(1)) * MEM_MB[m.group(2) or "M"]
    return int(mb * (max(cpus, 1) if m.group(3) == "c" else 1))


def accel_count(req_tres: str) -> int:
    """Accelerators a job asked for, from ReqTRES (totals for the whole job). The untyped
    `gres/gpu=N` is the total; typed entries are summed only when it is absent.

    >>> accel_count("billing=41,cpu=1,gres/gpu:h100=1,gres/gpu=1,mem=1G,node=1")
    1
    >>> accel_count("cpu=2,gres/npu:910b=2,gres/gpu:a100=1")
    3
    """
    total = 0
    for name in ACCEL_GRES:
        plain, typed = 0, 0
        for key, value in parse_tres(req_tres).items():
            if not value.isdigit():
                continue
            if key == f"gres/{name}":
                plain += int(value)
            elif key.startswith(f"gres/{name}:"):
                typed += int(value)
        total += plain or typed
    return total


def _int(value: str) -> int:
    return int(value) if value.strip().isdigit() else -1


def parse_rows(text: str, window: tuple[int, int] | None = None, cluster: str = "",
               sep: str = SACCT_DELIMITER) -> pd.DataFrame:
    """Finished jobs from `sacct -X -P -n --delimiter=SEP -o FIELDS` output; with `window` =
    (start, end) epoch seconds only jobs whose End is inside [start, end)."""
    try:
        rows = parse_sacct(text, FIELDS, sep)
    except ValueError as e:
        raise RuntimeFailure(f"sacct printed an unexpected line (fields {','.join(FIELDS)}): {e}") from e
    out = []
    for r in rows:
        state = r["State"].split(" ")[0]
        status = STATUS.get(state)
        end = parse_time(r["End"])
        if status is None or end < 0 or (window and not window[0] <= end < window[1]):
            continue  # still pending or running, or ended on another day
        cpus = _int(r["ReqCPUS"])
        limit = _int(r["TimelimitRaw"])
        out.append({
            "source": f"sacct:{r['Cluster'] or cluster or 'cluster'}", "job_id": r["JobIDRaw"],
            "user": r["User"], "account": r["Account"], "submit": parse_time(r["Submit"]),
            "start": parse_time(r["Start"]), "end": end, "runtime_s": _int(r["ElapsedRaw"]),
            "req_time_s": limit * 60 if limit > 0 else -1, "req_cpus": cpus,
            "req_accel": accel_count(r["ReqTRES"]), "req_mem_mb": parse_mem_mb(r["ReqMem"], cpus),
            "partition": r["Partition"], "qos": r["QOS"], "name": r["JobName"], "status": status,
        })
    return jobtable.normalize(pd.DataFrame(out)) if out else jobtable.empty()


def day_bounds(day: dt.date) -> tuple[int, int]:
    """Local midnight to the next local midnight, as epoch seconds (DST-safe)."""
    start = int(time.mktime(day.timetuple()))
    return start, int(time.mktime((day + dt.timedelta(days=1)).timetuple()))


def sacct_argv(day: dt.date, cluster: str | None = None) -> list[str]:
    nxt = day + dt.timedelta(days=1)
    argv = ["sacct", "-X", "-a", "-P", "-n", f"--delimiter={SACCT_DELIMITER}",
            "-S", f"{day.isoformat()}T00:00:00", "-E", f"{nxt.isoformat()}T00:00:00", "-o", ",".join(FIELDS)]
    return [*argv, "-M", cluster] if cluster else argv


def part_path(parts: Path, cluster: str, day: dt.date) -> Path:
    return parts / f"sacct-{cluster or 'default'}-{day.isoformat()}.parquet"


def fetch_days(runner: Runner, since: dt.date, until: dt.date, parts: Path, *,
               cluster: str | None = None, now: float | None = None,
               progress: DayProgress | None = None) -> pd.DataFrame:
    """Jobs that ended on days [since, until), reusing recorded days; records finished ones."""
    if until <= since:
        raise InputError(f"--since {since} must be before --until {until}")
    runner = dataclasses.replace(runner, extra_env={**runner.extra_env, "SLURM_TIME_FORMAT": "%s"})
    now = time.time() if now is None else now
    days = [since + dt.timedelta(days=i) for i in range((until - since).days)]
    frames = []
    for i, day in enumerate(days):
        path = part_path(parts, cluster or "", day)
        if path.exists():
            frames.append(jobtable.read(path))
            if progress:
                progress(day, i + 1, len(days), "recorded")
            continue
        window = day_bounds(day)
        if window[0] > now:
            break  # the future holds no finished jobs
        df = parse_rows(runner.out(sacct_argv(day, cluster)), window, cluster or "")
        frames.append(df)
        settled = window[1] + SETTLE_S <= now
        if settled:
            jobtable.write(df, path)
        if progress:
            progress(day, i + 1, len(days), f"{len(df)} jobs" + ("" if settled else ", not settled"))
    return jobtable.merge(*frames)


def parse_day(value: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError as e:
        raise InputError(f"{option} {value!r}: use a date such as 2024-01-31") from e
