"""A day under faults: replay a trace window on the dev cluster, accelerated, with the bridge, its
runtime model, the users' online history, the power keeper and containers for a share of the
jobs on, while a seeded schedule of faults hits it; then the same window without faults (the
baseline). Figures, faulted vs baseline: jobs lost (sbatch gave an id, accounting never heard
of it: must be 0), jobs killed before their user's own limit (must be 0), accounting records
missing an end or wrong (sacct against what slurmctld showed while the replay ran), devices
left with a job's energy policy while no job holds them (must be 0: at each fault's end and at
the end), the alerts that fired and cleared (the exporters and a Prometheus with the shipped
rules run beside the cluster: the alert meant for each fault, replay/faults.py ALERT_FOR, must
fire and clear; faults with none meant say why), the exporters' scrape gaps, waits and AVEbsld.
Each run's timeline (faults, alerts, pending and running jobs) goes into the JSON and is drawn
as an SVG beside it (`OUT-<run>-timeline.svg`; the workdir without --json).

The rules on a replay clock (devcluster/faults.py `soak_settings`, `rules_on_clock`): the
exporters run on the cluster's faked clock, Prometheus on real time; limits on published ages
stay in trace seconds, `for:` and range windows become real seconds (trace / speed), and
`time()` is rewritten into the faked clock.

The node agent (`--hooks`, the default; `--no-hooks`: a replay cluster as `replay run` boots
it): the cluster keeps the agent's Prolog and Epilog (not its TaskProlog or health check;
devcluster/clock.py `accelerate_conf`), so the `--energy=` policy of the energy share's
accelerator jobs and of agent-fail's probe jobs is applied to the fake GPUs and restored,
and the devices check (fake state read against `scontrol show job -d`, at each fault's end
and at the end) sees real policies. A site without accelerators (KTH) boots with a probe
node of two fake GPUs in a partition no trace job asks for (`soak_site`); the window and
the figures are the trace site's. `devices_with_policy`: devices the agent's Prologs applied
a whole policy to (its log). The hooks run at real speed on the accelerated clock: a job's
body starts the Prolog's real time x speed trace seconds after its allocation
(PrologFlags=Alloc: slurmd starts the batch script once the Prolog is done; Slurm's start
time, and sacct's batch step, say the allocation), so each job runs that much longer than
its trace runtime (`prolog_delay`: completed jobs' run less their trace runtime, launch
latency included; a job whose body nearly fills its own limit may meet it). Measured in three
`--short` runs at x50 (2 cores, beside other replays): p50 5-10 trace s, p90 7-16.5 (the
day's runs without hooks: p50 1 s), so a Prolog of 0.1-0.2 real s (Python and the agent's
imports take 0.06-0.11 s here, the rest is its `scontrol show job`). slurmd's timeouts
cannot kill the hooks: MessageTimeout and BatchStartTimeout are scaled by the speed,
PrologEpilogTimeout too where set (unset: none).

The power keeper (`--power`, the default; `--no-power`: off): the booted site gets `power:`
(SOAK_POWER: method devcluster, a node's slurmd stopped and started again with -b; suspend
after 300 trace s idle, SuspendTimeout 900 and ResumeTimeout 3000 trace s, as a slurmd's stop
or start takes real seconds x speed) unless it has power of its own; the probe partition is
excluded. The keeper runs in the bridge daemon each round (so with bridge-nomodel too), on the
cluster's clock; the replay cluster keeps every power setting (`accelerate_conf` strips only
hooks). Its decisions are counted from hetero-power.log (`power`: powered down, up, refused,
failed, never registered): none powered down, or an action failed, fails the soak. Measured
(--short): 6-7 down, 3-4 up, the audit unchanged (nothing lost or killed early).

Containers (`--container-share F`, default 0.1; 0: none): that seeded share of the jobs
(`wants_container`, apart from the energy share) asks `--image=soak:1` through the bridge;
the booted site gets that image with a busybox variant per (arch, stack) of its node groups
(and a CUDA driver where it says none), the bundles are built in the cluster's images folder
once it is up, and the rendered oci.conf runs the wrapper and runc. A container job's body
(replay/faults.py CONTAINER_BODY) prints its image's /etc/hetero-variant into its own output
(`container-jobs/JOBID.out`) and sleeps runtime ÷ speed real seconds (busybox is static and
the preload library is not in the image: no faked clock inside). `containers` in the JSON:
asked, ran in a container (that line), unfinished at the replay's stop, ended, and ended as
expected (COMPLETED, or at the own limit and not before); one ended otherwise fails the soak.

    .venv/bin/python benchmarks/soak.py [--short] [--workload kth|alibaba] [--faults default|all|none|K1,K2]
        [--seed 36] [--speed 50] [--hours 24] [--warmup-hours 1] [--drain-hours 6] [--start band|EPOCH]
        [--users local|root] [--no-baseline] [--no-monitor] [--no-hooks] [--no-power] [--container-share F]
        [--energy-share F] [--workdir DIR] [--json OUT]

The faults (slurm_hetero/replay/faults.py says what each is, devcluster/faults.py how it is
injected and undone): the bridge daemon SIGKILLed, and SIGSTOPped for an hour (trace) then
continued; slurmctld restarted, and SIGKILLed then started 10 minutes later; slurmdbd stopped
for an hour; one node's slurmd SIGKILLed for half an hour; StateSaveLocation (where the
snapshot lives) read-only for half an hour, and full for half an hour (state-full: the folder
on a tmpfs of its own, 64 MiB, mounted only when the schedule has state-full; a filler file
takes every free byte, writes fail with ENOSPC); one node's clock 60-120 s behind for an hour;
one node's devices failing partway through a policy for half an hour (agent-fail: the node
agent's Prolog stops after a probe job's first device, logs an ERROR and exits 0; the job
runs, its Epilog puts back every device the Prolog changed, HeteroNodeAgentErrors fires).
They come in a seeded order at seeded times spread over the window, never two at once.
`--faults none` replays the baseline only. The day's window: the middle one of the KTH log's
24-hour windows whose demand ÷ capacity (with the work already running) lies in [0.8, 1.5]
and that have at least 80 submissions (about the log's mean per day), after its first tenth
(857713081: 121 jobs with the warm-up hour); the drain ends once every measured
job has started, or after 6 trace hours.
`--short` (tests/integration/test_soak.py runs it): a 2-hour window (61 jobs of 8 users,
demand 1.08), no warm-up, three faults with seed 62 (slurmctld restarted at +645 s; the
daemon stopped at +4229 s for 15 trace minutes, past its 150 s margin, while a 29-minute job
started before it, the heartbeat fresh, passes its shortened limit of about 24 minutes;
slurmdbd down for 10 trace minutes from +5769 s), no baseline unless asked (`--baseline`),
about 3 real minutes.
`--short --faults all` (ten faults) does not fit in those 2 hours: name nine of them, or
give --hours.

Exit 0 when every fault happened and nothing was lost, killed early, or booked wrong;
1 otherwise (the figures say what). Needs root and the dev cluster's packages (`make deps`).
Every fault in progress is undone when the soak stops or fails; one killed outright (SIGKILL)
may leave StateSaveLocation bound read-only or on its tmpfs: `umount WORKDIR/faulted/state`
(until `mount | grep WORKDIR` shows nothing; a new soak in the same workdir does it too).
The day takes about 40 real minutes a run at x50 (two runs with the baseline).
`--workload alibaba` replays the Alibaba GPU pods file on its site with the bridge but no
model (that trace has no users and no limits), the busiest window of --hours.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from slurm_hetero.containers.bundle import busybox_variants
from slurm_hetero.devcluster import procs
from slurm_hetero.devcluster.faults import (
    Injector,
    Monitoring,
    SoakCluster,
    agent_figures,
    bridge_margin_s,
    devices_left,
    power_figures,
)
from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.fileio import write_json_atomic
from slurm_hetero.jobs.trace import KTH_SP2
from slurm_hetero.replay import sacct
from slurm_hetero.replay.clockmap import calibrate
from slurm_hetero.replay.faults import (
    ALERT_FOR,
    BLOCKING,
    CONTAINER_BODY,
    DURATIONS,
    KINDS,
    SHORT_DURATIONS,
    AlertSpan,
    Fault,
    Observer,
    PatientSubmitter,
    audit,
    container_figures,
    dbd_queue,
    match_alerts,
    parse_kinds,
    plan,
)
from slurm_hetero.replay.metrics import ALL
from slurm_hetero.replay.run import ARMS, Arm, ArmResult, run_arm, train_model
from slurm_hetero.replay.trace import read_trace, select_for
from slurm_hetero.replay.window import Capacity, Selection, Window, busiest, in_band
from slurm_hetero.reports.soak import timeline, timeline_svg
from slurm_hetero.site import Site, load_site

ROOT = Path(__file__).resolve().parents[1]
KTH_SITE = ROOT / "tests" / "data" / "replay" / "kth-site.yaml"
ALIBABA_SITE = ROOT / "tests" / "data" / "replay" / "alibaba-site.yaml"
PODS = ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023-pods.csv"
# --short's window of the KTH log: 61 jobs of 8 users submitted in 2 hours, demand 1.08 of
# the machine (with the work already running), all ended within 2.9 trace hours in the log
# (a short drain); and its seed, whose schedule stops the daemon at +4229 s for 15 minutes,
# while job 32 (started at +3438 s, runs 1730 s of a 30-minute request, its p90 about 1390 s)
# passes its shortened limit (+4878 s). Any p90 from 14 to 28 minutes gives it a first limit
# that comes due during the stop: the jobs of the first minutes (seed 293's stop at +860 s)
# were shortened or not on a p90 a second either side of 120 s.
SHORT_START = 861282481
SHORT_SEED = 62
# With --hooks, the site boots with this node group added in a partition of its own, which no
# trace job is sent to (the bridge's accelerator jobs name the trace site's partitions): its two
# fake GPUs are what agent-fail's probe jobs get a policy on, on a site without accelerators
# (KTH) always, elsewhere when the seeded node has no two devices free at the fault's start
# (the Alibaba day: every GPU node busy then, and the probe waited out the fault). The window and the
# figures (capacity, utilisation) stay the trace site's.
PROBE_PARTITION = "soak-probe"
# state-full: StateSaveLocation's tmpfs (MiB). The short window's state takes about 1 MiB.
STATE_TMPFS_MB = 64
PROBE_NODE = "probe-01"
PROBE_GROUP = {"names": PROBE_NODE, "resource_type": "GPU", "architecture": "x86_64", "sockets": 1,
               "cores_per_socket": 2, "threads_per_core": 1, "memory": "8GB", "memory_bandwidth": "10GB/s",
               "supported_frameworks": ["pytorch"], "accelerators": [{"model": "a100-80gb", "count": 2}],
               "partitions": [PROBE_PARTITION]}


# --power (the default): the keeper (run by the bridge daemon each round) powers idle nodes
# down through the dev cluster's method (a node's slurmd stopped; started with -b when Slurm
# resumes it). Times in trace seconds: the keeper reads the cluster's clock, and slurmctld's
# SuspendTimeout/ResumeTimeout run on it too, while stopping and starting a slurmd takes real
# seconds (x speed in trace seconds): the timeouts are wide. A node idle 5 trace minutes
# sleeps (the keeper keeps one idle node per pool awake); the probe partition never does.
SOAK_POWER: dict[str, Any] = {"enabled": True, "method": "devcluster", "suspend_time": 300,
                              "suspend_timeout": 900, "resume_timeout": 3000, "boot_delay": 0.0}


# --container-share: the image the container jobs ask for (`--image=`), with a busybox bundle
# per (arch, stack) of the booted site's node groups, built in the cluster's images folder
# (containers/bundle.py, as tests/integration's `images` fixture does); CUDA variants need
# the nodes' driver, which a site without containers settings gets here.
SOAK_IMAGE = "soak:1"
CONTAINER_OUT = "container-jobs"  # in each run's workdir: the container jobs' outputs
SOAK_CUDA = {"version": "12.4", "min_driver": "550.54.14"}
SOAK_CUDA_DRIVER = {"driver": "550.54.14", "max_version": "12.4"}


def image_variants(groups: list[dict[str, Any]], catalog_stack: dict[str, str]) -> list[dict[str, Any]]:
    """SOAK_IMAGE's variants: one per (arch, stack) of the site file's node groups.

    >>> image_variants([{"architecture": "x86_64"}, {"architecture": "x86_64",
    ...                  "accelerators": [{"model": "a100-80gb", "count": 2}]}], {"a100-80gb": "cuda"})
    ... # doctest: +NORMALIZE_WHITESPACE
    [{'arch': 'x86_64', 'stack': 'cpu'},
     {'arch': 'x86_64', 'stack': 'cuda', 'version': '12.4', 'min_driver': '550.54.14'}]
    """
    out: list[dict[str, Any]] = []
    for g in groups:
        accels = g.get("accelerators") or []
        stack = catalog_stack[accels[0]["model"]] if accels else "cpu"
        if stack not in ("cpu", "cuda"):
            raise InputError(f"--container-share: no soak image for {stack} nodes; give --container-share 0")
        v = {"arch": g["architecture"], "stack": stack, **(SOAK_CUDA if stack == "cuda" else {})}
        if v not in out:
            out.append(v)
    return out


def soak_site(site: Site, site_path: Path, out: Path, probe: bool = True,
              power: bool = False, containers: bool = False) -> tuple[Site, Path]:
    """The site the soak's cluster boots: `site` itself when it needs nothing added, else a
    copy (written to `out`, the exporters read it) with, under `probe` (hooks), PROBE_GROUP;
    under `power`, SOAK_POWER unless the site has power on;
    under `containers`, SOAK_IMAGE (and the CUDA driver, unless the site says its own)."""
    add_probe = probe
    add_power = power and not site.power.enabled
    add_image = containers and SOAK_IMAGE not in site.images
    if not add_probe and not add_power and not add_image:
        return site, site_path
    doc = yaml.safe_load(site_path.read_text())
    said = []
    if add_probe:
        doc["partitions"] = [*doc.get("partitions", []),
                             {"name": PROBE_PARTITION, "max_time": "1:00:00", "default_time": "0:10:00"}]
        doc["node_groups"] = [*doc.get("node_groups", []), PROBE_GROUP]
        said.append("a probe node for agent-fail")
    if add_power:
        doc["power"] = {**SOAK_POWER, **({"exclude_partitions": [PROBE_PARTITION]} if add_probe else {})}
        said.append("the power keeper on (devcluster)")
    if add_image:
        stacks = {m.id: m.stack for g in site.node_groups for a in g.accelerators for m in [a.model]}
        stacks.update({"a100-80gb": "cuda"})  # PROBE_GROUP's
        variants = image_variants(doc["node_groups"], stacks)
        doc["images"] = {**(doc.get("images") or {}),
                         SOAK_IMAGE: {"description": "busybox, for the soak's container jobs",
                                      "variants": variants}}
        if any(v["stack"] == "cuda" for v in variants):
            ct = doc["containers"] = doc.get("containers") or {}
            ct["drivers"] = {"cuda": SOAK_CUDA_DRIVER, **(ct.get("drivers") or {})}
        said.append(f"the image {SOAK_IMAGE} for container jobs")
    doc["name"] = site.name  # the same cluster name: accounting and the model stay the site's
    out.write_text(f"# benchmarks/soak.py: the trace's site with {' and '.join(said)}\n"
                   + yaml.safe_dump(doc, sort_keys=False))
    return load_site(out), out


def prolog_delay(res: ArmResult) -> dict[str, Any]:
    """How much longer than its trace runtime each completed job ran (trace s): launch latency
    (about 1 s at x50 without hooks) plus, with hooks, the Prolog's real time x speed (slurmd
    starts the batch script once the Prolog is done; the job's start is its allocation)."""
    d = sorted(e for o in res.outcomes if o.state == "COMPLETED" and (e := o.runtime_error) is not None)
    if not d:
        return {"jobs": 0}
    return {"jobs": len(d), "median_s": statistics.median(d), "p90_s": d[int(0.9 * (len(d) - 1))],
            "max_s": d[-1]}


def pick_window(df: Any, site: Site, workload: str, start: str, hours: float, warmup: float) -> Window:
    """`--start band` (KTH): the middle one of the windows whose demand ÷ capacity, with the
    work already running, lies in [0.8, 1.5] (replay_kth's rule), with at least 20 submissions
    (80 for a day's window), after the first tenth of the log; Alibaba: the busiest window.
    Or epoch seconds."""
    if start != "band":
        if not start.isdigit():
            raise InputError(f"--start {start!r}: give band or epoch seconds")
        return Window(int(start), hours, warmup)
    cap = Capacity.of(site)
    if workload == "alibaba":
        found = busiest(df, cap, hours, 1, carry_over=True)
    else:
        lo, hi = float(df["submit"].min()), float(df["submit"].max())
        found = in_band(df, cap, hours, 1, (0.8, 1.5), min_jobs=80 if hours >= 24 else 20,
                        not_before=lo + 0.1 * (hi - lo) + warmup * 3600, gap_s=warmup * 3600)
    if not found:
        raise InputError(f"no window of {hours:g} h fits the rule: give --start")
    return Window(found[0][0], hours, warmup)


def wait_dbd_caught_up(c: SoakCluster, timeout: float = 180.0) -> int | None:
    """Until slurmctld holds nothing more for slurmdbd (sdiag's DBD agent queue is 0), for
    `timeout` real seconds at most; returns the last size read."""
    last: list[int | None] = [None]

    def empty() -> bool:
        r = c.runner.run(["sdiag"], check=False, timeout=20)
        last[0] = dbd_queue(r.stdout) if r.returncode == 0 else None
        return last[0] == 0

    procs.wait_until(empty, timeout, 1.0)
    return last[0]


def summary(res: ArmResult, sub: PatientSubmitter, obs: Observer, records: dict[str, sacct.JobRecord],
            dbd_left: int | None, real_s: float, margin_s: float) -> dict[str, Any]:
    """The run's figures. `ran_past_own_limit`: jobs ended at their own limit more than the
    daemon's margin late (within it is the daemon's usual latency: a round, K real s apart)."""
    f = res.figures[ALL]
    au = audit([s.job_id for s in sub.subs], records, obs.seen, obs.listed_last)
    outs = res.outcomes
    overrun = [(o.run or 0) - o.user_limit_s for o in outs
               if o.at_limit and o.user_limit_s is not None and (o.run or 0) > o.user_limit_s + margin_s]
    return {
        "submitted": len(sub.subs), "submit_failed": len(res.submit_failed),
        "unreleased": len(sub.unreleased),
        "lost": len(au.lost), "records_missing_end": len(au.missing_end), "records_wrong": len(au.wrong),
        "killed_early": sum(o.killed_early for o in outs), "killed_early_measured": f.killed_early,
        "killed_at_limit": sum(o.at_limit for o in outs),
        "ran_past_own_limit": len(overrun), "max_overrun_s": max(overrun, default=0.0),
        "outlived_prediction": sum(1 for o in outs if o.predicted_s is not None and o.run is not None
                                   and o.run > o.predicted_s and not o.at_limit),
        "measured": f.jobs, "started": f.started, "unfinished": f.unfinished, "bad_states": f.bad_states,
        "ave_bsld": f.ave_bsld, "wait_mean": f.wait_mean, "wait_p50": f.wait_p50, "wait_p90": f.wait_p90,
        "utilisation": f.utilisation, "all_ended": res.all_ended,
        "retries": dict(sub.retries), "observer_polls": obs.polls, "observer_failed_polls": obs.failed_polls,
        "dbd_queue_at_end": dbd_left, "real_s": round(real_s, 1), "audit": au.to_json(),
    }


def one_run(name: str, base: Path, site: Site, sel: Selection, window: Window, arm: Arm, speed: float,
            model: Path | None, faults: list[Fault], drain_hours: float, users: str,
            say: Any, monitor: bool = True, energy_share: float = 0.0,
            seed: int = 0, hooks: bool = False, boot: tuple[Site, Path] | None = None,
            power: bool = False, container_share: float = 0.0,
            ) -> tuple[dict[str, Any], list[dict[str, Any]], ArmResult]:
    """One replay of the window (with `faults`, or none): its summary (with the devices left
    with a policy, the alerts and the timeline), the faults' records and the arm's result.
    `hooks`: the node agent's Prolog/Epilog on; `boot`: the site (and its file) the cluster
    boots with, when not `site` (`soak_site`); `power`: the keeper is on (its decisions are
    counted from hetero-power.log); `container_share`: that share of the jobs runs its body
    in SOAK_IMAGE (busybox bundles built once the cluster is up)."""
    made: list[SoakCluster] = []
    subs: list[PatientSubmitter] = []
    state: dict[str, Any] = {"obs": None, "inj": None, "dbd_left": None, "mon": None, "clock": None,
                             "t0": 0.0, "monitoring": None, "devices": None, "monitor_problem": None,
                             "agent": {}}
    boot_site, watch = boot or (site, site.path)
    margin = bridge_margin_s(speed)
    blocking = [f.for_s for f in faults if f.kind in BLOCKING]
    retry_s = max(blocking, default=0.0) / speed + 90.0

    def factory(workdir: Path) -> SoakCluster:
        # With `monitor`: the exporters and Prometheus start with the cluster, before t0.
        # With state-full in the schedule: StateSaveLocation on a tmpfs of its own to fill.
        made.append(SoakCluster(workdir, watch=watch if monitor else None, hooks=hooks,
                                boot_site=boot_site if boot_site is not site else None,
                                state_tmpfs_mb=STATE_TMPFS_MB if any(f.kind == "state-full" for f in faults)
                                else 0))
        return made[-1]

    def on_start(t0: float) -> None:
        c = made[-1]
        state["clock"], state["t0"] = calibrate(c.runner, speed), t0
        state["monitor_problem"] = c.monitor_problem
        if c.monitoring is not None and c.monitor_problem is None:
            c.monitoring.clock, c.monitoring.t0 = state["clock"], t0
            state["mon"] = c.monitoring
        if container_share > 0:
            busybox_variants(boot_site, str(c.cluster.workdir / "images"))
            (c.workdir / CONTAINER_OUT).mkdir(exist_ok=True)
            os.chmod(c.workdir / CONTAINER_OUT, 0o1777)  # --users local: each job writes its own
            script = c.workdir / "soak-container-job.sh"
            script.write_text(CONTAINER_BODY)
            os.chmod(script, 0o755)
        state["obs"] = Observer(c.runner)
        state["obs"].start()
        if faults:
            state["inj"] = c.inject(faults, state["clock"], t0, margin, say)

    def before_drain() -> None:
        inj: Injector | None = state["inj"]
        if inj is not None:
            inj.wait()

    def after_drain() -> None:
        # slurmctld's last listing first: every end it shows is queued for slurmdbd by then.
        state["obs"].stop()
        state["dbd_left"] = wait_dbd_caught_up(made[-1])
        try:
            state["devices"] = devices_left(made[-1].cluster)
        except Exception as e:
            state["devices"] = {"problem": f"{type(e).__name__}: {e}"}
        try:
            log = made[-1].cluster.agent_dir / "agent.log"
            state["agent"] = agent_figures(log.read_text(errors="replace"))
        except OSError:
            state["agent"] = {}  # no Prolog ran (no hooks)
        mon: Monitoring | None = state["mon"]
        if mon is not None:
            settle = {a for f in faults if (a := ALERT_FOR.get(f.kind))}
            try:
                state["monitoring"] = mon.collect(settle)
            except (OSError, ValueError, RuntimeFailure) as e:
                state["monitor_problem"] = f"collect: {e}"

    def submitter(*a: Any, **kw: Any) -> PatientSubmitter:
        kw.update(retry_s=retry_s, before_drain=before_drain, after_drain=after_drain,
                  energy_share=energy_share, energy_seed=seed)
        if boot_site is not site:  # the trace's jobs stay on the trace site's accelerator partitions
            kw["accel_partitions"] = ",".join(dict.fromkeys(
                p for g in site.node_groups if g.accelerators for p in g.partitions))
        if container_share > 0:
            w = made[-1].workdir
            kw.update(container_share=container_share, container_seed=seed, container_image=SOAK_IMAGE,
                      container_script=str(w / "soak-container-job.sh"), container_out=str(w / CONTAINER_OUT))
        subs.append(PatientSubmitter(*a, **kw))
        return subs[-1]

    t = time.monotonic()
    try:
        res = run_arm(factory, base / name, site, sel, window, arm, speed, model, say=say,
                      drain_hours=drain_hours, users=users, on_start=on_start, drain_until="started",
                      submitter=submitter)
    finally:
        if state["obs"] is not None:
            state["obs"].close()
    real_s = time.monotonic() - t
    records = sacct.by_job(sacct.parse_rows((made[-1].workdir / "sacct.psv").read_text()))
    inj = state["inj"]
    recs: list[dict[str, Any]] = inj.records if inj is not None else []
    summ = summary(res, subs[-1], state["obs"], records, state["dbd_left"], real_s, margin)
    summ.update(watched(state, recs, speed, monitor))
    summ["with_energy"] = len(subs[-1].with_energy)  # accelerator jobs that asked for a policy
    summ["hooks"] = hooks
    summ.update(state["agent"])
    summ["prolog_delay"] = prolog_delay(res)
    if power:
        try:
            text = (made[-1].cluster.log / "hetero-power.log").read_text(errors="replace")
        except OSError:
            text = ""  # no power program ran: the keeper powered nothing down
        summ["power"] = power_figures(text)
    if container_share > 0:
        folder = made[-1].workdir / CONTAINER_OUT
        outputs = {f.stem: f.read_text(errors="replace") for f in folder.glob("*.out")}
        summ["containers"] = container_figures(res.outcomes, subs[-1].with_container, outputs)
    return summ, recs, res


def watched(state: dict[str, Any], recs: list[dict[str, Any]], speed: float, monitor: bool) -> dict[str, Any]:
    """The devices left with a policy, the alerts per fault, the scrape gaps and the timeline."""
    dev = state["devices"] or {}
    at_faults = [r.get("devices_left", {}) for r in recs]
    mon = state["monitoring"]
    out: dict[str, Any] = {
        "devices_checked": dev.get("devices"), "devices_left": dev.get("left"),
        "devices_left_at_fault_ends": [d.get("left") for d in at_faults],
        "devices_left_examples": dev.get("examples", []),
        "devices_problem": (dev.get("problem")
                            or next((d["problem"] for d in at_faults if "problem" in d), None)),
        "monitored": monitor, "monitor_problem": state["monitor_problem"],
    }
    spans = [AlertSpan(**a) for a in mon["alerts"]] if mon else []
    grace = 10.0 * speed  # an alert's `for:` and a rule evaluation or two, in trace seconds
    if mon is not None:
        out["alerts"] = match_alerts(recs, spans, mon["prometheus_to_s"], grace)
        covered = [(float(r["started_trace_s"]),
                    float(r.get("ended_trace_s") or r["started_trace_s"]) + grace) for r in recs]
        out["alerts_fired"] = [s.to_json() for s in spans]
        out["alerts_without_fault"] = sorted({s.alert for s in spans
                                              if not any(lo <= s.start_s <= hi for lo, hi in covered)})
        out["scrape_gaps"] = len(mon["scrape_gaps"])
        out["monitoring"] = {k: v for k, v in mon.items() if k != "alerts"}
    clock, t0 = state["clock"], state["t0"]
    queue = ([(round(clock.faked(t) - t0, 1), p, r) for t, p, r in state["obs"].counts]
             if clock is not None and state["obs"] is not None else [])
    out["timeline"] = timeline(recs, [s.to_json() for s in spans], queue,
                               mon["scrape_gaps"] if mon else [])
    return out


def limits_due(res: ArmResult, records: list[dict[str, Any]]) -> None:
    """Per bridge-stop, state-readonly and state-full fault (the daemon keeps no limits while
    one lasts), the jobs whose predicted (shortened) limit came due meanwhile and that ran on past
    it: what OverTimeLimit, not the daemon, kept alive. Added to each record's evidence."""
    for r in records:
        if r["kind"] not in ("bridge-stop", "state-readonly", "state-full"):
            continue
        lo = res.t0 + r["started_trace_s"]
        hi = res.t0 + r.get("undone_trace_s", r["started_trace_s"] + r["for_s"])
        due = []
        for o in res.outcomes:
            if o.predicted_s is None or o.start is None or o.user_limit_s is None:
                continue
            first = max(60, math.ceil(o.predicted_s / 60) * 60)  # bridge.lua: p90 in whole minutes
            at = o.start + first
            if first < o.user_limit_s and lo <= at <= hi and (o.end is None or o.end > at):
                due.append(o.job_id)
        r["evidence"]["limits_due"] = len(due)
        r["evidence"]["limits_due_jobs"] = due[:20]


ROWS = (("submitted", "d"), ("lost", "d"), ("killed_early", "d"), ("records_missing_end", "d"),
        ("records_wrong", "d"), ("submit_failed", "d"), ("unreleased", "d"), ("killed_at_limit", "d"),
        ("ran_past_own_limit", "d"), ("outlived_prediction", "d"), ("measured", "d"), ("started", "d"),
        ("unfinished", "d"), ("ave_bsld", ".2f"), ("wait_mean", ".0f"), ("wait_p50", ".0f"),
        ("wait_p90", ".0f"), ("utilisation", ".3f"), ("devices_checked", "d"), ("devices_with_policy", "d"),
        ("devices_left", "d"), ("prologs_failed", "d"), ("with_energy", "d"), ("scrape_gaps", "d"),
        ("real_s", ".0f"))


def show(runs: dict[str, dict[str, Any]]) -> None:
    names = list(runs)
    print(f"  {'':22s}" + "".join(f"{n:>14s}" for n in names))
    for key, spec in ROWS:
        cells = []
        for n in names:
            v = runs[n].get(key)
            cells.append(f"{'-':>14s}" if v is None or (isinstance(v, float) and math.isnan(v))
                         else f"{format(v, spec):>14s}")
        print(f"  {key:22s}" + "".join(cells))
    for n in names:
        r = runs[n]
        examples = r["audit"]["examples"] if r["audit"]["wrong"] or r["audit"]["missing_end"] else "-"
        print(f"  [{n}] retries {r['retries']}, bad states {r['bad_states']}, observer polls "
              f"{r['observer_polls']} ({r['observer_failed_polls']} unanswered), DBD queue at the end "
              f"{r['dbd_queue_at_end']}, audit examples {examples}, completed jobs' run past their trace "
              f"runtime (launch, with hooks the Prolog) {r.get('prolog_delay')}"
              + (f", power {r['power']}" if "power" in r else "")
              + (f", containers {r['containers']}" if "containers" in r else ""))


def broken(runs: dict[str, dict[str, Any]], records: list[dict[str, Any]]) -> list[str]:
    """What fails the soak: a fault that did not happen (or was not undone), a job lost,
    killed early, never submitted or released, a record missing or wrong."""
    out = [f"fault {r['kind']} at {r['at_s']:.0f} s: not shown to have happened "
           f"({r['problem'] or r['evidence']})" for r in records if not r["ok"]]
    for name, r in runs.items():
        for key in ("lost", "killed_early", "records_missing_end", "records_wrong", "submit_failed",
                    "unreleased", "devices_left", "devices_problem", "monitor_problem"):
            if r.get(key):
                out.append(f"{name}: {key} = {r[key]}")
        left = [n for n in r.get("devices_left_at_fault_ends", []) if n]
        if left:
            out.append(f"{name}: devices left with a policy at a fault's end: {left}")
        pw = r.get("power")
        if pw is not None and not pw["down"]:
            out.append(f"{name}: power: the keeper powered no node down ({pw})")
        if pw is not None and (pw["failed"] or pw["resume_failed"]):
            out.append(f"{name}: power: actions failed ({pw})")
        ct = r.get("containers")
        if ct is not None and (not ct["ran_in_container"] or ct["ended_as_expected"] < ct["ended"]):
            out.append(f"{name}: containers: {ct['ran_in_container']} of {ct['asked']} ran in one, "
                       f"{ct['ended_as_expected']} of {ct['ended']} ended as expected ({ct['examples']})")
        if r.get("monitored") and r.get("devices_checked") is None:
            out.append(f"{name}: the devices were not checked")
        if r.get("monitored") and "alerts" not in r and not r.get("monitor_problem"):
            out.append(f"{name}: no alerts were read from Prometheus")
        for m in r.get("alerts", []):
            if not m["ok"]:
                out.append(f"{name}: fault {m['kind']}: {m['meant']} "
                           + ("never fired" if not m["fired"] else "did not clear"))
    return out


def main(argv: list[str] | None = None) -> int:
    # SIGTERM (a session's end, `kill`) unwinds like an error: the clusters, their Prometheus
    # and a fault in progress are taken down by the `finally`s, not left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--short", action="store_true",
                   help="2 trace hours, three faults, no baseline (the test's)")
    p.add_argument("--workload", choices=("kth", "alibaba"), default="kth")
    p.add_argument("--faults", default="default",
                   help=f"default, all, none (the baseline alone) or names: {', '.join(KINDS)}")
    p.add_argument("--seed", type=int, default=None, help=f"the schedule's seed [36; --short {SHORT_SEED}]")
    p.add_argument("--speed", type=float, default=50.0)
    p.add_argument("--hours", type=float, default=None, help="trace hours measured [24; --short 2]")
    p.add_argument("--warmup-hours", type=float, default=None, help="[1; --short, alibaba: 0]")
    p.add_argument("--drain-hours", type=float, default=None,
                   help="after the window, until every measured job started or this [6; --short 0.5]")
    p.add_argument("--start", default=None, help="band (the rule) or epoch seconds [band; --short: "
                   f"{SHORT_START}]")
    p.add_argument("--users", choices=("root", "local"), default=None,
                   help="who submits (replay_kth's --users) [local; --short, alibaba: root]")
    p.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=None,
                   help="replay the window without faults too [on; --short off]")
    p.add_argument("--trace", type=Path, default=None,
                   help="[the KTH log the package ships, or the pods file]")
    p.add_argument("--site", type=Path, default=None)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="write the figures, seed and schedule there")
    p.add_argument("--monitor", action=argparse.BooleanOptionalAction, default=True,
                   help="the exporters and a Prometheus with the shipped rules: the alerts per fault [on]")
    p.add_argument("--hooks", action=argparse.BooleanOptionalAction, default=True,
                   help="keep the node agent's Prolog/Epilog on the replay clock: policies applied "
                        "and restored, agent-fail possible; each job's body starts later by the "
                        "Prolog's real time x speed [on]")
    p.add_argument("--power", action=argparse.BooleanOptionalAction, default=True,
                   help="the power keeper on (devcluster method; unless the site has power): idle "
                        "nodes sleep, its decisions counted from hetero-power.log [on]")
    p.add_argument("--container-share", type=float, default=0.1,
                   help=f"share of the jobs whose body runs in a container (--image={SOAK_IMAGE}, "
                        "runc through the site's wrapper) [0.1]")
    p.add_argument("--energy-share", type=float, default=None,
                   help="share of the accelerator jobs that ask for --energy=efficiency [alibaba 0.3; 0]")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--plan", action="store_true", help="print the window and the schedule, run nothing")
    a = p.parse_args(argv)
    short = a.short
    hours = a.hours if a.hours is not None else (2.0 if short else 24.0)
    alibaba = a.workload == "alibaba"
    # Alibaba: the pods in the system at the window's start are carried over (no warm-up), and
    # the trace has no users to stand in for.
    warmup = a.warmup_hours if a.warmup_hours is not None else (0.0 if short or alibaba else 1.0)
    drain = a.drain_hours if a.drain_hours is not None else (0.5 if short else 6.0)
    users = a.users or ("root" if short or alibaba else "local")
    seed = a.seed if a.seed is not None else (SHORT_SEED if short else 36)
    energy_share = a.energy_share if a.energy_share is not None else (0.3 if alibaba else 0.0)
    baseline = a.baseline if a.baseline is not None else not short
    trace = a.trace or (PODS if alibaba else KTH_SP2)
    site_path = a.site or (ALIBABA_SITE if alibaba else KTH_SITE)
    start = a.start or (str(SHORT_START) if short and not alibaba else "band")
    try:
        kinds = parse_kinds(a.faults, short)
        if not trace.exists():
            raise InputError(f"--trace {trace}: no such file")
        site = load_site(site_path)
        df = read_trace(trace)
        if "agent-fail" in kinds and not a.hooks:
            raise InputError("--faults: agent-fail needs the node agent's Prolog (--hooks)")
        window = pick_window(df, site, a.workload, start, hours, warmup)
        sel = select_for(df, window, site)
        device_nodes = [n for g in site.node_groups if g.accelerators for n in g.nodes] or [PROBE_NODE]
        schedule = plan(kinds, hours * 3600, seed, site.all_nodes, SHORT_DURATIONS if short else DURATIONS,
                        gap_s=300.0 if short else 900.0, device_nodes=device_nodes)
    except InputError as e:
        print(e, file=sys.stderr)
        return 2
    say = (lambda line: print(line, flush=True)) if not a.quiet else (lambda line: None)
    arm = ARMS["bridge-nomodel" if alibaba else "bridge"]
    print(f"soak: {trace.name} window {window.start} ({hours:g} h + {warmup:g} h warm-up, "
          f"drain <= {drain:g} h), {len(sel.jobs)} jobs, x{a.speed:g}, arm {arm.name}, users={users}, "
          f"seed {seed}")
    for f in schedule:
        print(f"  fault {f.kind:18s} at +{f.at_s:7.0f} s for {f.for_s:5.0f} s"
              + (f" on {f.node}" if f.node else "") + (f" skew {f.skew_s:+d} s" if f.skew_s else ""))
    if a.plan:
        return 0
    base = a.workdir or Path(tempfile.mkdtemp(prefix="soak-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)  # --users local: jobs of other users run in here
    model = train_model(df, window, base / "predict.lua", users=users) if arm.model else None
    boot = soak_site(site, site_path, base / "soak-site.yaml", probe=a.hooks, power=a.power,
                     containers=a.container_share > 0)
    power = a.power or boot[0].power.enabled
    runs: dict[str, dict[str, Any]] = {}
    results: dict[str, ArmResult] = {}
    records: list[dict[str, Any]] = []
    doc: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv] if argv is None else ["benchmarks/soak.py", *argv]),
        "trace": trace.name, "site": str(site_path), "workload": a.workload,
        "window": {"start": window.start, "hours": hours, "warmup_hours": warmup, "drain_hours": drain},
        "jobs": len(sel.jobs), "speed": a.speed, "seed": seed, "short": short, "users": users,
        "arm": arm.name, "hooks": a.hooks, "power": power,
        "container_share": a.container_share,
        "faults": {"kinds": kinds, "schedule": [f.to_json() for f in schedule], "records": records},
    }
    order = [("faulted", schedule)] if schedule else []
    if baseline or not schedule:
        order.append(("baseline", []))
    try:
        for name, faults in order:
            t = time.monotonic()
            summ, recs, res = one_run(name, base, site, sel, window, arm, a.speed, model, faults, drain,
                                      users, say if not a.quiet else None, monitor=a.monitor,
                                      energy_share=energy_share, seed=seed, hooks=a.hooks, boot=boot,
                                      power=power, container_share=a.container_share)
            svg = (a.json.with_name(f"{a.json.stem}-{name}-timeline.svg") if a.json
                   else base / f"{name}-timeline.svg")
            svg.write_text(timeline_svg(summ["timeline"], f"soak {name}: seed {seed}, x{a.speed:g}"))
            summ["timeline_svg"] = str(svg)
            runs[name], results[name] = summ, res
            limits_due(res, recs)
            records += recs
            print(f"{name}: {time.monotonic() - t:.0f} s real", flush=True)
            doc["runs"] = {k: {**v, "arm_result": results[k].to_json()} for k, v in runs.items()}
            if a.json:
                write_json_atomic(str(a.json), doc, indent=1)
    except RuntimeFailure as e:
        print(f"soak: {e}", file=sys.stderr)
        return 1
    print(f"soak of {trace.name} window {window.start}, seed {seed}:")
    for r in records:
        print(f"  {r['kind']:18s} at +{r['started_trace_s']:7.0f} s: {'ok' if r['ok'] else 'NOT OK'} "
              f"{r['evidence']}" + (f" problem: {r['problem']}" if r["problem"] else ""))
    show(runs)
    for name, r in runs.items():
        for m in r.get("alerts", []):
            cleared = (f"cleared {m['cleared_after_end_s']:+.0f} s after its end" if m["cleared"]
                       else "NOT cleared")
            fired = (f"fired +{m['fired_after_s']:.0f} s after its start, {cleared}" if m["fired"]
                     else "did not fire")
            also = f"; also {', '.join(m['also'])}" if m["also"] else ""
            print(f"  [{name}] {m['kind']:18s} alert {m['meant'] or '(none meant)'}: {fired}{also}")
        if r.get("alerts_without_fault"):
            print(f"  [{name}] alerts with no fault near: {', '.join(r['alerts_without_fault'])}")
    if "faulted" in runs and "baseline" in runs:
        fa, ba = runs["faulted"], runs["baseline"]
        for key in ("ave_bsld", "wait_mean"):
            if fa[key] is not None and ba[key]:
                print(f"  {key} faulted / baseline: {fa[key] / ba[key]:.2f}")
    bad = broken(runs, records)
    doc["broken"] = bad
    if a.json:
        write_json_atomic(str(a.json), doc, indent=1)
    for line in bad:
        print(f"BROKEN: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
