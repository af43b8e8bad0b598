"""Submission throughput with the bridge vs plain Slurm, on one real cluster, interleaved,
and where the time goes.

Arms (held submissions `sbatch -H -Q -o /dev/null --wrap true`, same cluster):
  plain:  a client slurm.conf without the SPANK plugin and a pass-through job_submit.lua,
          no options;
  equiv:  the same client and pass-through Lua, with the concrete options the bridge
          decides for the bridge arm's request (GRES, partition, features, QoS, governor):
          what the same job costs Slurm without the bridge;
  bridge: the SPANK plugin and the full generated job_submit.lua (fresh snapshot, runtime
          model compiled in with a history table of --users users), asking
          `--accel=any:2 --tier=gold --energy=balanced`;
  before: with --baseline-bridge FILE (an older bridge.lua) and optionally --baseline-plugin
          SO (an older build of the plugin), the bridge arm as it was: before/after in one run.
Each round runs every arm once (the order rotates), a batch of --batch submissions each, with
one submitter and with --concurrent submitters; ratios are given over all jobs and as the
median and quartiles of the per-round ratios (the 2 cores are shared: bursts of load from
elsewhere hit every arm of a round alike). slurmctld re-reads job_submit.lua when its
mtime is newer than the loaded one (whole seconds), so each swap is written atomically with
a strictly increasing mtime; the first submission after a swap pays for the re-read and is
not timed, and it is checked: its admin comment says which script decided it.

Where the time goes, each part on its own:
  - CPU per submission, per arm and batch: the submit loops and their sbatch processes
    (getrusage of the waited children, microseconds), each of this cluster's daemons
    (/proc/PID/stat, 10 ms ticks: coarse per batch, not summed over rounds) and the whole
    machine (/proc/stat). Where the CPUs saturate (the concurrent runs on 2 cores), plain's
    cluster CPU per job (clients and daemons) over the bridge's is the throughput ratio the
    bridge allows, without the load from elsewhere on the machine that moves the wall clock;
  - slurmctld: `sdiag` REQUEST_SUBMIT_BATCH_JOB mean time per arm (reset before each batch;
    the RPC handler, job_submit/lua included; munge decoding and the socket are not), and
    its split: job_allocate's own time, which slurmctld logs per job ("usec=", timed after
    job_submit/lua and the locks), and the rest of the handler, job_submit/lua's call the
    part that differs between arms;
  - the client: `sbatch --help` with and without the plugin in plugstack.conf (loads
    plugstack.conf and the plugin and registers its options, then exits: no controller),
    per arm the serial wall time minus slurmctld's RPC time, and, where valgrind is
    installed, the instructions of one held submission under callgrind (deterministic, not
    moved by the machine's noise): plain, with the plugin and no option, with the bridge
    arm's options, and the Slurm functions that the difference is spent in;
  - the Lua decision alone: benchmarks/bridge_lua_cost.py;
  - with --perf N: CPU per submission, sampled by `perf record -a` (cpu-clock, 1 kHz) over N
    more serial submissions per arm, each arm from an empty job list: per process (slurmctld,
    slurmdbd, MariaDB, munged, the clients, the rest of the machine), slurmctld's by shared
    object and heaviest symbols, Lua's own functions (named with --liblua DIR: a
    liblua5.1.so.0 built with symbols, e.g. from Debian's lua5.1 source), and the RPCs
    slurmctld served per submission.
The bridge daemon is stopped while the arms run (it would update each plain and equiv job's
SiteFactor, an RPC per job that the bridge arm's jobs do not get); the benchmark writes the
capacity snapshot between batches instead, as often as it goes stale. slurmd's health check
is off too (HealthCheckInterval=0): on the dev cluster it starts a Python process per node
every 20 s (the node agent's restore), load from outside the submit path that falls on one
arm's batch or another's by chance.
Prints figures only (target: bridge/plain >= 0.95). Run as root.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurm_hetero.bridge.snapshot import take_snapshot
from slurm_hetero.conf import bridge as conf_bridge
from slurm_hetero.conf import render_site
from slurm_hetero.devcluster import Cluster
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.parse import parse_kv_record

DEMO = Path(__file__).resolve().parents[1] / "site" / "demo" / "site.yaml"
PASS_THROUGH = """function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
return slurm.SUCCESS
"""
BRIDGE_OPTS = ["--accel=any:2", "--tier=gold", "--energy=balanced"]
SBATCH = ["sbatch", "-H", "-Q", "-o", "/dev/null"]
PARSABLE = ["sbatch", "-H", "--parsable", "-o", "/dev/null"]  # -Q would hide the job id


TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds: the clients (submit loops and their sbatch), each daemon, the machine."""
    clients: float
    daemons: dict[str, float]
    machine: float

    def __sub__(self, o: CpuUse) -> CpuUse:
        return CpuUse(self.clients - o.clients,
                      {k: v - o.daemons.get(k, 0.0) for k, v in self.daemons.items()},
                      self.machine - o.machine)

    def per_job(self, n: int) -> CpuUse:
        return CpuUse(self.clients / n, {k: v / n for k, v in self.daemons.items()}, self.machine / n)


def daemon_group(name: str) -> str:
    """slurmd-cpu-x86-01 -> slurmd: the node daemons are counted together."""
    return name.split("-", 1)[0]


def cpu_now(pids: dict[int, str]) -> CpuUse:
    """CPU seconds so far. Children count once waited for: read it when no submit loop runs.
    /proc counts in clock ticks (10 ms): a batch's figure is coarse, its sum over rounds not."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    daemons: dict[str, float] = {}
    for pid, name in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        group = daemon_group(name)
        daemons[group] = daemons.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6]  # user nice system irq softirq (guest is in user)
    return CpuUse(kids.ru_utime + kids.ru_stime, daemons, busy / TICK)


@dataclass
class Arm:
    name: str
    conf: Path
    lua: str
    options: list[str]
    seconds: dict[int, float] = field(default_factory=dict)  # submitters -> timed seconds
    jobs: dict[int, int] = field(default_factory=dict)
    rpc_us: dict[int, list[float]] = field(default_factory=dict)  # per batch, sdiag mean
    batches: dict[int, list[float]] = field(default_factory=dict)  # per batch, seconds per job
    cpu: dict[int, list[CpuUse]] = field(default_factory=dict)  # per batch, CPU seconds per job
    ids: dict[int, list[int]] = field(default_factory=dict)  # the timed jobs' ids


def model_file(d: Path, users: int) -> Path:
    """A real LightGBM export: trees trained on a synthetic workload of 40 users, history
    of `users` users (every user with jobs; a large site has 10,000)."""
    from slurm_hetero.predict import export_lua, synthetic
    from slurm_hetero.predict.train import train

    table = synthetic.workload(jobs=20_000, users=40, seed=1)
    model = train(table)
    history = table
    if users > 40:
        history = synthetic.workload(jobs=max(20 * users, 20_000), users=40, seed=2)
        history["user"] = [f"user{(i * 7919) % users:05d}" for i in range(len(history))]
    path = d / "predict.lua"
    export_lua.write(export_lua.export_text(model, history), path)
    return path


class Swapper:
    """Writes job_submit.lua atomically, each version with a newer whole-second mtime."""

    def __init__(self, path: Path) -> None:
        self.path, self.mtime, self.current = path, int(time.time()), ""

    def put(self, text: str) -> None:
        if text == self.current:
            return
        self.mtime = max(self.mtime + 1, int(time.time()))
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(text)
        os.utime(tmp, (self.mtime, self.mtime))
        os.replace(tmp, self.path)
        self.current = text


def sdiag_submit_us(env: dict[str, str]) -> float | None:
    out = subprocess.run(["sdiag"], env=env, capture_output=True, text=True, check=True).stdout
    m = re.search(r"REQUEST_SUBMIT_BATCH_JOB\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)", out)
    return float(m.group(2)) if m else None


def submit_loop(env: dict[str, str], options: list[str], n: int) -> subprocess.Popen[bytes]:
    # A shell loop: no Python between submissions, the same for every arm.
    argv = " ".join(SBATCH + options + ["--wrap", "true"])
    return subprocess.Popen(["sh", "-c", f"i=0; while [ $i -lt {n} ]; do {argv} >/dev/null || exit 1; "
                             "i=$((i+1)); done"], env=env)


class Snapshots:
    """The capacity snapshot, written between batches as the bridge daemon would (which is
    stopped: it would set SiteFactor on every job of the plain and equiv arms, which carry
    no bridge record, one RPC per job beside their submissions, and on none of the bridge's).
    Rewritten when older than `every` seconds (the daemon's 2 s would be per round here)
    so that the bridge meets a fresh one, and a new generation now and then, as it would."""

    def __init__(self, c: Cluster, site: Site, every: float = 5.0) -> None:
        self.c, self.site, self.every, self.at = c, site, every, 0.0
        self.path = c.state / "hetero-snapshot.lua"

    def refresh(self) -> None:
        if time.monotonic() - self.at >= self.every:
            take_snapshot(self.site, self.c.runner, self.path)
            self.at = time.monotonic()


def run_batch(c: Cluster, swap: Swapper, arm: Arm, n: int, submitters: int, snaps: Snapshots,
              pids: dict[int, str]) -> None:
    env = {"SLURM_CONF": str(arm.conf), "PATH": "/usr/bin:/bin"}
    snaps.refresh()
    swap.put(arm.lua)
    # Untimed: pays the re-read of a swapped script; its decision shows which script ran.
    jid = subprocess.run([*PARSABLE, *arm.options, "--wrap", "true"], env=env, check=True,
                         capture_output=True, text=True).stdout.strip().split(";")[0]
    admin = parse_kv_record(c.runner.out(["scontrol", "show", "job", jid])).get("AdminComment", "")
    bridged = arm.lua != PASS_THROUGH
    if ("hetero" in admin) != bridged or (bridged and '"pred"' not in admin):
        raise SystemExit(f"arm {arm.name}: job {jid} was decided by the wrong script: {admin!r}")
    subprocess.run(["sdiag", "-r"], env=env, check=True, stdout=subprocess.DEVNULL)
    per = [n // submitters + (1 if i < n % submitters else 0) for i in range(submitters)]
    cpu0 = cpu_now(pids)
    t0 = time.perf_counter()
    procs = [submit_loop(env, arm.options, k) for k in per]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit(f"arm {arm.name}: a submission failed")
    spent = time.perf_counter() - t0
    arm.cpu.setdefault(submitters, []).append((cpu_now(pids) - cpu0).per_job(n))
    arm.seconds[submitters] = arm.seconds.get(submitters, 0.0) + spent
    arm.batches.setdefault(submitters, []).append(spent / n)
    arm.jobs[submitters] = arm.jobs.get(submitters, 0) + n
    # Nothing else submits meanwhile (the bridge daemon is stopped): the next n ids are these.
    arm.ids.setdefault(submitters, []).extend(range(int(jid) + 1, int(jid) + 1 + n))
    us = sdiag_submit_us(env)
    if us is not None:
        arm.rpc_us.setdefault(submitters, []).append(us)


SUBMIT_LINE = re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+) InitPrio=\d+ usec=(\d+)$", re.M)


def allocate_usec(log: str) -> dict[int, int]:
    """slurmctld.log's per-job line (info level): job id -> microseconds in job_allocate."""
    return {int(m.group(1)): int(m.group(2)) for m in SUBMIT_LINE.finditer(log)}


PERF_HZ = 1000


@dataclass
class Profile:
    jobs: int
    by_process: dict[str, int]  # samples: this cluster's daemons by name, clients, the rest
    by_dso: dict[str, int]  # slurmctld's samples by shared object
    by_symbol: list[tuple[int, str, str]]  # slurmctld's (samples, dso, symbol), heaviest first
    client_dso: dict[str, int]  # sbatch's samples by shared object
    rpcs: dict[str, int]  # slurmctld's RPCs by type while the arm ran (sdiag)

    def ms_per_job(self, samples: int) -> float:
        return samples / PERF_HZ / self.jobs * 1e3


CLIENTS = frozenset({"sbatch", "sh"})  # the submit loop


def empty_queue(c: Cluster, timeout: float = 60.0) -> None:
    """Cancel the held jobs and wait until slurmctld has purged them (MinJobAge=5 here:
    purged within about 15 s). Before every call, job_submit/lua rebuilds slurm.jobs (once
    per second: it follows last_job_update) from every job slurmctld holds, finished ones
    included, so arms profiled one after the other must start from the same empty list."""
    c.runner.run(["scancel", "--state=PENDING"], check=False)
    deadline = time.monotonic() + timeout
    while c.runner.out(["squeue", "-h", "--states=all", "-o", "%i"]).strip():
        if time.monotonic() > deadline:
            raise SystemExit(f"slurmctld still holds jobs {timeout:.0f} s after scancel")
        time.sleep(1)


def perf_profile(c: Cluster, swap: Swapper, arm: Arm, n: int, work: Path, snaps: Snapshots) -> Profile:
    """The whole machine sampled by perf while one submitter sends `n` of the arm's
    submissions, from an empty queue: CPU per job of each of this cluster's daemons and of
    the clients, and slurmctld's split by shared object and symbol."""
    empty_queue(c)
    env = {"SLURM_CONF": str(arm.conf), "PATH": "/usr/bin:/bin"}
    snaps.refresh()
    swap.put(arm.lua)
    subprocess.run([*PARSABLE, *arm.options, "--wrap", "true"], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # pays the re-read of a swapped script
    names = {pid: d.name.split()[0] for d in c.daemons() if (pid := c.pid(d)) is not None}
    ctld = next((pid for pid, name in names.items() if name == "slurmctld"), None)
    if ctld is None:
        raise SystemExit("slurmctld is not running")
    data = work / f"perf-{arm.name}.data"
    rec = subprocess.Popen(["perf", "record", "-q", "-a", "-e", "cpu-clock", "-F", str(PERF_HZ),
                            "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf is sampling before the first submission
    subprocess.run(["sdiag", "-r"], env=env, check=True, stdout=subprocess.DEVNULL)
    if submit_loop(env, arm.options, n).wait() != 0:
        raise SystemExit(f"arm {arm.name}: a submission failed")
    rec.send_signal(2)
    rec.wait(timeout=60)
    sdiag = subprocess.run(["sdiag"], env=env, capture_output=True, text=True, check=True).stdout
    rpcs = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(REQUEST_\w+)\s+\(\s*\d+\)\s+count:(\d+)",
                                                             sdiag, re.M)}
    by_process: dict[str, int] = {}
    script = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid"], capture_output=True,
                            text=True, check=True).stdout
    for line in script.splitlines():
        parts = line.rsplit(None, 1)
        if len(parts) != 2 or not parts[1].isdigit():
            continue
        comm, pid = parts[0].strip(), int(parts[1])
        who = names.get(pid) or ("clients" if comm in CLIENTS else "idle" if pid == 0 else "elsewhere")
        by_process[who] = by_process.get(who, 0) + 1
    def report(select: list[str]) -> tuple[dict[str, int], list[tuple[int, str, str]]]:
        out = subprocess.run(["perf", "report", "-i", str(data), *select, "--stdio", "--no-children",
                              "-F", "sample,dso,sym", "--sort", "dso,sym", "-g", "none"],
                             capture_output=True, text=True, check=True).stdout
        by_dso: dict[str, int] = {}
        rows: list[tuple[int, str, str]] = []
        for line in out.splitlines():
            m = re.match(r"\s*(\d+)\s+(\S+)\s+\[[.k]\]\s+(.*)$", line)
            if m:
                k, dso, sym = int(m.group(1)), m.group(2), m.group(3).strip()
                by_dso[dso] = by_dso.get(dso, 0) + k
                rows.append((k, dso, sym))
        return by_dso, sorted(rows, reverse=True)

    by_dso, rows = report(["--pid", str(ctld)])
    client_dso, _ = report(["--comm", "sbatch"])
    data.unlink(missing_ok=True)
    return Profile(n, by_process, by_dso, rows, client_dso, rpcs)


def print_profiles(profiles: dict[str, Profile], top: int = 12) -> None:
    arms = list(profiles.values())

    def table(title: str, counts: list[dict[str, int]], rows: int) -> None:
        pairs = list(zip(arms, counts, strict=True))
        keys = sorted({k for cnt in counts for k in cnt},
                      key=lambda k: -max(p.ms_per_job(cnt.get(k, 0)) for p, cnt in pairs))
        print(f"    {title}, ms per job: " + "  ".join(f"{n:>8s}" for n in profiles))
        for k in keys[:rows]:
            cells = "  ".join(f"{p.ms_per_job(cnt.get(k, 0)):8.3f}" for p, cnt in pairs)
            print(f"      {k[:32]:32s} {cells}")

    print(f"  CPU per serial submission (perf record -a, cpu-clock {PERF_HZ} Hz; 'elsewhere' is other "
          "work on this machine, 'idle' the idle CPUs):")
    table("by process", [p.by_process for p in arms], 12)
    table("slurmctld by shared object", [p.by_dso for p in arms], 8)
    table("sbatch by shared object", [p.client_dso for p in arms], 8)
    base = profiles.get("plain")
    rpc_names = sorted({k for p in arms for k in p.rpcs}, key=lambda k: -max(p.rpcs.get(k, 0) for p in arms))
    print("    slurmctld RPCs per submission: " + "  ".join(f"{n:>8s}" for n in profiles))
    for rpc in rpc_names[:6]:
        print(f"      {rpc[:32]:32s} " + "  ".join(f"{p.rpcs.get(rpc, 0) / p.jobs:8.3f}" for p in arms))
    for name, p in profiles.items():
        if name == "plain" or base is None:
            continue
        print(f"    slurmctld's heaviest symbols in {name} (ms per job; plain's beside):")
        plain_sym = {(d, s): k for k, d, s in base.by_symbol}
        for k, d, sym in p.by_symbol[:top]:
            print(f"      {p.ms_per_job(k):.3f} ({base.ms_per_job(plain_sym.get((d, sym), 0)):.3f})  "
                  f"{d[:24]} {sym[:70]}")
        lua = [(k, sym) for k, d, sym in p.by_symbol if d.startswith("liblua")]
        print(f"    inside Lua in {name} (ms per job; plain's beside; names need a liblua with "
              "symbols: --liblua):")
        for k, sym in lua[:top]:
            plain_k = sum(v for (d, s), v in plain_sym.items() if d.startswith("liblua") and s == sym)
            print(f"      {p.ms_per_job(k):.3f} ({base.ms_per_job(plain_k):.3f})  {sym[:70]}")


def client_cost(confs: dict[str, Path], n: int) -> dict[str, float]:
    """Mean ms of `sbatch --help` per client conf, interleaved in rounds of 10."""
    total = dict.fromkeys(confs, 0.0)
    for _ in range(max(1, n // 10)):
        for name, conf in confs.items():
            env = {"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"}
            subprocess.run(["sbatch", "--help"], env=env, check=True, stdout=subprocess.DEVNULL)  # untimed
            t0 = time.perf_counter()
            for _ in range(10):
                subprocess.run(["sbatch", "--help"], env=env, check=True, stdout=subprocess.DEVNULL)
            total[name] += time.perf_counter() - t0
    return {k: v / (max(1, n // 10) * 10) * 1000 for k, v in total.items()}


# sbatch's functions that the plugin and its options reach (libslurmfull, 22.05), counted
# inclusive of what they call.
CLIENT_PARTS = {
    "spank_init_allocator": "plugstack.conf read, the plugin loaded, its options registered",
    "spank_option_table_create": "its options merged into sbatch's getopt table",
    "setenvfs": "sbatch copying each SPANK option into its environment (a 256 KB zeroed buffer each)",
}


def callgrind_inclusive(text: str, names: list[str]) -> dict[str, int]:
    """The named functions' instructions from `callgrind_annotate --inclusive=yes` lines
    ("799,860 ( 4.00%)  ???:setenvfs [/usr/lib/...]", "19,024,228 (100.0%)  PROGRAM TOTALS");
    the first line of each name, 0 for a name not listed."""
    got: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.+?)(?:\s+\[.*\])?$", line)
        if m is None:
            continue
        name = m.group(2).rsplit(":", 1)[-1] if m.group(2) != "PROGRAM TOTALS" else m.group(2)
        if name in names and name not in got:
            got[name] = int(m.group(1).replace(",", ""))
    return {n: got.get(n, 0) for n in names}


def client_instructions(variants: dict[str, tuple[Path, list[str]]], work: Path) -> dict[str, dict[str, int]]:
    """Instructions of one held submission per variant (client conf, options) under callgrind:
    the program's total and CLIENT_PARTS'. {} without valgrind."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        return {}
    out: dict[str, dict[str, int]] = {}
    for i, (name, (conf, options)) in enumerate(variants.items()):
        data = work / f"callgrind.{i}"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={data}", *SBATCH, *options,
                        "--wrap", "true"], env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"},
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(data)],
                              capture_output=True, text=True, check=True).stdout
        out[name] = callgrind_inclusive(text, ["PROGRAM TOTALS", *CLIENT_PARTS])
        data.unlink(missing_ok=True)
    return out


def print_client_instructions(counts: dict[str, dict[str, int]]) -> None:
    if not counts:
        print("  client instructions: valgrind is not installed (apt install valgrind)")
        return
    base = counts["plain"]["PROGRAM TOTALS"]
    cells = ", ".join(f"{name} {c['PROGRAM TOTALS'] / 1e6:.2f}M ({c['PROGRAM TOTALS'] / base - 1:+.1%})"
                      for name, c in counts.items())
    print(f"  client instructions, one held submission under callgrind: {cells}")
    last = counts[list(counts)[-1]]
    for part, what in CLIENT_PARTS.items():
        print(f"    {part} {(last[part] - counts['plain'][part]) / 1e3:+.0f}k: {what}")


def render_with(c: Cluster, site: Site, model: Path, bridge: Path) -> str:
    """The cluster's job_submit.lua with another bridge.lua (the same tables and model)."""
    meta = c.info()
    meta["model"] = str(model.resolve())
    saved = conf_bridge.BRIDGE_LUA
    conf_bridge.BRIDGE_LUA = bridge.resolve()
    try:
        return render_site(site, c.profile(meta))["job_submit.lua"]
    finally:
        conf_bridge.BRIDGE_LUA = saved


def with_plugin(c: Cluster, plugin: Path, name: str) -> Path:
    """A client slurm.conf whose plugstack.conf loads `plugin` with the same arguments."""
    stack = (c.etc / "plugstack.conf").read_text()
    line = next(ln for ln in stack.splitlines() if ln.startswith("required "))
    (c.etc / f"plugstack-{name}.conf").write_text(f"required {plugin} {line.split(None, 2)[2]}\n")
    conf = c.etc / f"slurm-{name}.conf"
    conf.write_text((c.etc / "slurm.conf").read_text().replace(
        f"PlugStackConfig={c.etc}/plugstack.conf", f"PlugStackConfig={c.etc}/plugstack-{name}.conf"))
    return conf


def equivalent_options(job: dict[str, str]) -> list[str]:
    """The plain sbatch options that ask Slurm for what the bridge decided."""
    opts = ["--gres=" + job["TresPerNode"].removeprefix("gres:"), "-p", job["Partition"],
            "--qos=" + job["QOS"]]
    if job.get("Features") not in (None, "", "(null)"):
        opts += ["-C", job["Features"]]
    gov = job.get("CpuFreqGov")
    if gov not in (None, "", "(null)", "Unknown"):
        opts += ["--cpu-freq=" + gov]
    return opts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=1000, help="timed submissions per arm and submitter count")
    ap.add_argument("--batch", type=int, default=20, help="submissions per arm and round")
    ap.add_argument("--concurrent", type=int, default=8, help="submitters of the concurrent runs (0: none)")
    ap.add_argument("--concurrent-batch", type=int, default=80,
                    help="submissions per arm and round of the concurrent runs (a few per submitter "
                         "would time mostly their start and the wait for the last one)")
    ap.add_argument("--users", type=int, default=40, help="users in the model's history table")
    ap.add_argument("--baseline-bridge", type=Path, help="an older bridge.lua: a fourth arm, 'before'")
    ap.add_argument("--baseline-plugin", type=Path, help="an older hetero.so for the 'before' arm")
    ap.add_argument("--perf", type=int, default=0, metavar="N",
                    help="profile slurmctld with perf over N more submissions per arm (0: no)")
    ap.add_argument("--liblua", type=Path, metavar="DIR",
                    help="run the cluster with DIR/liblua5.1.so.0 (e.g. built with -g from Debian's "
                         "lua5.1 source) so that --perf names Lua's own functions")
    args = ap.parse_args()
    if args.liblua:
        if not (args.liblua / "liblua5.1.so.0").is_file():
            raise SystemExit(f"--liblua {args.liblua}: no liblua5.1.so.0 there")
        os.environ["LD_LIBRARY_PATH"] = str(args.liblua.resolve())  # slurmctld inherits it
    if args.perf > 0 and shutil.which("perf") is None:
        raise SystemExit("--perf needs perf: apt install linux-perf")
    site = load_site(DEMO)
    counts = [1] + ([args.concurrent] if args.concurrent > 1 else [])
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as d:
        c = Cluster(Path(d) / "demo")
        c.up(site, log=lambda *_: None)
        try:
            # Cancelled jobs leave slurmctld's memory after MinJobAge (300 s by default); tens of
            # thousands of submissions within that would reach MaxJobCount (10,000). slurmd's
            # health check starts the node agent's restore, a Python process, for one node after
            # the other (11 nodes every 20 s here): about a tenth of the machine, landing on
            # whichever batch runs then, whatever its arm. Off, like the bridge daemon.
            text = re.sub(r"(?m)^(MinJobAge|HealthCheckInterval)=.*\n", "", c.conf.read_text())
            c.conf.write_text(text + "MinJobAge=5\nHealthCheckInterval=0\n")
            c.runner.run(["scontrol", "reconfigure"])
            model = model_file(Path(d), args.users)
            c.load_model(site, model)
            bridge_lua = (c.etc / "job_submit.lua").read_text()
            before = None
            if args.baseline_bridge:
                before = Arm("before", c.conf, render_with(c, site, model, args.baseline_bridge), BRIDGE_OPTS)
                if args.baseline_plugin:
                    before.conf = with_plugin(c, args.baseline_plugin.resolve(), "before")
            plain_conf = c.etc / "slurm-plain.conf"
            (c.etc / "plugstack-empty.conf").write_text("")
            plain_conf.write_text((c.etc / "slurm.conf").read_text().replace(
                f"PlugStackConfig={c.etc}/plugstack.conf", f"PlugStackConfig={c.etc}/plugstack-empty.conf"))
            c.stop_bridge()
            snaps = Snapshots(c, site)
            snaps.refresh()
            swap = Swapper(c.etc / "job_submit.lua")
            swap.put(bridge_lua)
            env = {"SLURM_CONF": str(c.conf), "PATH": "/usr/bin:/bin"}
            jid = subprocess.run([*PARSABLE, *BRIDGE_OPTS, "--wrap", "true"], env=env,
                                 check=True, capture_output=True, text=True).stdout.strip()
            decided = parse_kv_record(c.runner.out(["scontrol", "show", "job", jid]))
            arms = [Arm("plain", plain_conf, PASS_THROUGH, []),
                    Arm("equiv", plain_conf, PASS_THROUGH, equivalent_options(decided)),
                    Arm("bridge", c.conf, bridge_lua, BRIDGE_OPTS)] + ([before] if before else [])
            client = client_cost({"without plugin": plain_conf, "with plugin": c.conf}, 200)
            client_ir = client_instructions({"plain": (plain_conf, []), "plugin, no option": (c.conf, []),
                                             "plugin and the bridge arm's options": (c.conf, BRIDGE_OPTS)},
                                            Path(d))
            pids = {pid: d.name for d in c.daemons() if (pid := c.pid(d)) is not None}
            batches = {subs: args.batch if subs == 1 else args.concurrent_batch for subs in counts}
            rounds = {subs: max(1, args.total // batches[subs]) for subs in counts}
            for subs in counts:
                for r in range(rounds[subs]):
                    order = arms[r % len(arms):] + arms[:r % len(arms)]
                    for arm in order:
                        run_batch(c, swap, arm, batches[subs], subs, snaps, pids)
                    # Held jobs would pile up; cancelled ones stay MinJobAge in every arm alike.
                    c.runner.run(["scancel", "--state=PENDING"], check=False)
            profiles = {arm.name: perf_profile(c, swap, arm, args.perf, Path(d), snaps) for arm in arms} \
                if args.perf > 0 else {}
            c.runner.run(["scancel", "--state=PENDING"], check=False)
            admin = decided.get("AdminComment", "")
            load = os.getloadavg()
            # The bridge logs only on internal errors and snapshot changes: per-job lines would
            # mean a broken arm (and log I/O in every submission).
            ctld_log = (c.log / "slurmctld.log").read_text(errors="replace")
            bridge_log = [ln for ln in ctld_log.splitlines()
                          if "slurm-hetero" in ln or "job_submit/lua" in ln]
            alloc = allocate_usec(ctld_log)
        finally:
            c.runner.run(["scancel", "--state=PENDING"], check=False)
            c.down(log=lambda *_: None)
            shutil.rmtree(d, ignore_errors=True)
    plan = ", ".join(f"{subs} submitter{'s' if subs > 1 else ''}: {rounds[subs]} rounds of {batches[subs]}"
                     for subs in counts)
    print(f"held submissions, interleaved rounds per arm ({plan}), model history of "
          f"{args.users} users, demo site, {os.cpu_count()} CPUs (load at the end {load[0]:.1f})")
    print(f"  equiv options: {' '.join(arms[1].options)}")
    print(f"  slurmctld log lines of the bridge: {len(bridge_log)}")
    for ln in bridge_log[:4]:
        print(f"    {ln[:150]}")
    print(f"  bridge decision: {admin.strip()[:160]}")
    print(f"  client alone, sbatch --help (no controller): without plugin {client['without plugin']:.2f} ms, "
          f"with plugin {client['with plugin']:.2f} ms")
    print_client_instructions(client_ir)
    for subs in counts:
        print(f"  {subs} submitter{'s' if subs > 1 else ''}:")
        for arm in arms:
            rate = arm.jobs[subs] / arm.seconds[subs]
            rpc = statistics.mean(arm.rpc_us[subs]) if arm.rpc_us.get(subs) else float("nan")
            got = [alloc[i] for i in arm.ids[subs] if i in alloc]
            extra = " (job_allocate: not logged)"
            if got:
                us_alloc = statistics.mean(got)
                extra = (f" (job_allocate {us_alloc / 1e3:.2f}, the rest {(rpc - us_alloc) / 1e3:.2f}; "
                         f"{len(got)} of {len(arm.ids[subs])} jobs logged)")
            if subs == 1:
                extra += f", client+transport {arm.seconds[subs] / arm.jobs[subs] * 1e3 - rpc / 1e3:.2f} ms"
            each = arm.seconds[subs] / arm.jobs[subs] * 1e3
            print(f"    {arm.name:6s} {rate:7.1f} jobs/s ({each:.2f} ms each wall), "
                  f"slurmctld RPC {rpc / 1e3:.2f} ms{extra}")
        by = {a.name: a for a in arms}
        pairs = [("bridge", "plain", " (target >= 0.95)"), ("bridge", "equiv", ""), ("equiv", "plain", "")]
        if "before" in by:
            pairs += [("before", "plain", ""), ("bridge", "before", "")]
        for x, y, note in pairs:
            print(f"    throughput {x}/{y}: {ratio(by[y], by[x], subs)}{note}")
        print_cpu(arms, subs, pairs)
    if profiles:
        print_profiles(profiles)


def print_cpu(arms: list[Arm], subs: int, pairs: list[tuple[str, str, str]]) -> None:
    """CPU per submission by part, and the machine's CPU ratio of each pair."""
    groups = sorted({g for a in arms for u in a.cpu[subs] for g in u.daemons},
                    key=lambda g: -max(sum(u.daemons.get(g, 0.0) for u in a.cpu[subs]) for a in arms))
    shown = [g for g in groups if g in ("slurmctld", "munged", "slurmdbd", "mariadb")]
    print("    CPU per submission, ms (clients: the sbatch processes and their loops; rest: everything "
          "else on the machine, kernel threads included):")
    heads = ["clients", *shown, "other", "rest", "machine"]  # other: the remaining daemons
    print("      " + " " * 7 + "".join(f"{h:>10s}" for h in heads))
    for arm in arms:
        n = len(arm.cpu[subs])
        clients = sum(u.clients for u in arm.cpu[subs]) / n
        part = {g: sum(u.daemons.get(g, 0.0) for u in arm.cpu[subs]) / n for g in groups}
        machine = sum(u.machine for u in arm.cpu[subs]) / n
        others = sum(v for g, v in part.items() if g not in shown)
        rest = machine - clients - sum(part.values())
        cells = [clients, *(part[g] for g in shown), others, rest, machine]
        print(f"      {arm.name:7s}" + "".join(f"{v * 1e3:10.3f}" for v in cells))
    by = {a.name: a for a in arms}
    for x, y, _ in pairs:
        cx = [u.clients + sum(u.daemons.values()) for u in by[x].cpu[subs]]
        cy = [u.clients + sum(u.daemons.values()) for u in by[y].cpu[subs]]
        print(f"    cluster CPU per job (clients and daemons) {y}/{x}: "
              f"{compare(statistics.mean(cy), statistics.mean(cx), cy, cx)}")


def ratio(slow: Arm, fast: Arm, subs: int) -> str:
    """fast's throughput over slow's: over all jobs, and the median and quartiles of the
    rounds' ratios (one batch of each arm per round, so a burst of load elsewhere on the
    machine falls on both)."""
    return compare(slow.seconds[subs] / slow.jobs[subs], fast.seconds[subs] / fast.jobs[subs],
                   slow.batches[subs], fast.batches[subs])


def compare(slow_total: float, fast_total: float, slow: list[float], fast: list[float]) -> str:
    """slow/fast of per-job costs: over all jobs, and over the rounds (batch by batch)."""
    total = slow_total / fast_total
    per = sorted(a / b for a, b in zip(slow, fast, strict=True) if b > 0)
    q = statistics.quantiles(per, n=4) if len(per) >= 2 else [per[0]] * 3
    text = f"{total:.3f} (per round: median {q[1]:.3f}, quartiles {q[0]:.3f}-{q[2]:.3f}, {len(per)} rounds"
    if len(per) >= 10:  # rounds are independent draws of the machine's noise: a normal interval
        logs = [math.log(x) for x in per]
        m, h = statistics.mean(logs), 1.96 * statistics.stdev(logs) / math.sqrt(len(logs))
        text += (f"; geometric mean {math.exp(m):.3f}, 95% interval "
                 f"{math.exp(m - h):.3f}-{math.exp(m + h):.3f}")
    return text + ")"


if __name__ == "__main__":
    main()
