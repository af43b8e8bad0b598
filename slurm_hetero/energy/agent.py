"""The node agent: Slurm Prolog/Epilog that apply a job's energy policy and meter its energy.

Prolog: find the job's devices on this node — Slurm's GRES indices, matched to the
backend's devices by identity through gres.conf (energy/identity.py), never by number —
repair devices a crashed job left changed, resolve the policy (`auto` from the job's
history), apply power caps / clock levels / NPU power modes to those devices only, and
save the energy counters on disk. A GRES index that cannot be matched, or a MIG GPU, is
refused: a WARNING line in the agent log, `refused.json` in the node's state, a `refused`
entry in the job's figures; the job runs as usual.
The Prolog also leaves the job's GRES indices on this node in its device cache
(energy/devcache.py) for the TaskProlog and the container wrapper, which then ask slurmctld
nothing per task. Epilog: read the counters, restore the defaults, append the run to the
history, remove the cache, and spool energy (J), mean power and mean utilisation per device
for the health check to ship into the job's admin comment.

Both always exit 0: a device without a control, or any error, is logged and skipped —
never a failed job or a drained node. State lives in files, so a crash between prolog and
epilog ends in restored defaults: the next prolog that gets the device, or `node restore`.
The config is `hetero-agent.json` next to slurm.conf (Slurm gives Prolog SLURM_CONF), or on a
configless site in the node folder /etc/slurm-hetero (conf/nodefiles.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.devcache import PREFIX as CACHE_PREFIX
from slurm_hetero.energy.devcache import folder_problem, remove_cache, write_cache
from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, DeviceLayer, Reading
from slurm_hetero.energy.identity import Target, match_devices
from slurm_hetero.energy.ship import ship, ship_shared, spool, spool_shared
from slurm_hetero.energy.state import AgentConfig, NodeState, config_path
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.fileio import write_json_atomic as write_json
from slurm_hetero.site.gresconf import GresConfError, NodeGres, read_gres_conf
from slurm_hetero.site.policies import EnergyPolicy
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.hostlist import HostlistError, contains, expand
from slurm_hetero.slurm.parse import parse_slurm_time
from slurm_hetero.slurm.runner import Runner, SlurmCommandError
from slurm_hetero.slurm.scontrol import (
    listpids_argv,
    parse_id_list,
    parse_job_devices,
    parse_job_record,
    show_one_job,
)

log = logging.getLogger("slurm-hetero.agent")
KINDS = ("gpu", "npu")


# Slurm access through the project's one runner (argv lists, timeouts); Slurm gives the
# Prolog/Epilog SLURM_CONF in their environment, which the runner passes on.
SLURM = Runner(timeout=10)


@dataclass(frozen=True)
class JobView:
    job_id: str
    user: str
    name: str
    admin_comment: str
    devices: dict[str, list[int]]  # gres name → indices on this node
    num_nodes: int = 1
    first_node: str = ""  # the first of the job's nodes: its writer with a shared spool
    # every GRES name's indices on this node (devices keeps the kinds the agent controls):
    # what the device cache hands the TaskProlog and the container wrapper
    gres: dict[str, list[int]] = field(default_factory=dict)


def job_view(job_id: str, node: str, env: Mapping[str, str] | None = None) -> JobView:
    """What the agent needs about a job on this node.

    What slurmd hands the Prolog/Epilog in their environment comes first (the user, the
    node count, SLURM_JOB_GPUS: this node's GPU indices); what it does not give (indices of
    a plugin-less GRES such as `npu`, the bridge's admin comment, the job name) is read from
    `scontrol show job -d` with the parser user text cannot steer: a record in which a
    comment, name or work dir imitates slurmctld's lines raises AmbiguousRecord, and the
    caller then leaves the devices alone."""
    env = os.environ if env is None else env
    text = show_one_job(SLURM.out, job_id, detail=True)
    rec = parse_job_record(text, ["JobName", "UserId", "NumNodes"], optional=["AdminComment", "NodeList"])
    gres = parse_job_devices(text, node)
    devices = {k: v for k, v in gres.items() if k in KINDS}
    if env.get("SLURM_JOB_ID") == job_id and "SLURM_JOB_GPUS" in env:
        gpus = parse_id_list(env["SLURM_JOB_GPUS"])
        if gpus != devices.get("gpu", gpus):
            log.warning("job %s on %s: slurmd says GPUs %s, scontrol %s: using slurmd's",
                        job_id, node, gpus, devices.get("gpu"))
        devices.pop("gpu", None)
        gres.pop("gpu", None)
        if gpus:
            devices["gpu"] = gres["gpu"] = gpus
    user = env.get("SLURM_JOB_USER") if env.get("SLURM_JOB_ID") == job_id else None
    nodes = env.get("SLURM_JOB_NUM_NODES") if env.get("SLURM_JOB_ID") == job_id else None
    comment = rec.get("AdminComment", "")
    nodelist = (env.get("SLURM_JOB_NODELIST") if env.get("SLURM_JOB_ID") == job_id else None) \
        or rec.get("NodeList", "")
    try:
        first = expand(nodelist, limit=1_000_000)[0] if nodelist else node
    except (HostlistError, IndexError):
        first = node
    return JobView(job_id=job_id, user=user or rec["UserId"].split("(")[0], name=rec["JobName"],
                   admin_comment="" if comment == "(null)" else comment, devices=devices, first_node=first,
                   gres=gres,
                   num_nodes=int(nodes) if nodes and nodes.isdigit()
                   else int(rec["NumNodes"].split("-")[0] or 1))


def requested_policy(admin_comment: str) -> str | None:
    """The energy policy the bridge decided (our record, wherever it sits in the comment)."""
    value = parse_comment(admin_comment).get("energy")
    return value if isinstance(value, str) else None


def restore_device(dev: DeviceLayer, st: NodeState, kind: str, index: int,
                   infos: list[DeviceInfo] | None = None) -> None:
    """Reset the device the owner record of GRES index `index` says was changed."""
    target = _owned_device(dev, st.owner_record(kind, index), kind, index, infos)
    if target is not None:
        try:
            dev.reset(target)
        except ControlUnsupported as e:
            log.info("%s%d: reset: %s", kind, index, e)
    st.owner_file(kind, index).unlink(missing_ok=True)


def _owned_device(dev: DeviceLayer, owner: dict[str, Any] | None, kind: str, index: int,
                  infos: list[DeviceInfo] | None) -> int | None:
    """The backend index of the device an owner record names, found again by identity."""
    if owner is None:
        return None
    ident = owner.get("identity")
    if not ident:
        return index  # written before identities: the old agent changed backend device `index`
    found = [d.index for d in (dev.devices() if infos is None else infos)
             if d.kind == kind and d.identity == ident]
    if len(found) != 1:
        log.warning("%s%d: changed by job %s as %s, which %d devices are now: not reset",
                    kind, index, owner.get("job"), ident, len(found))
        return None
    return found[0]


def node_gres(cfg: AgentConfig, node: str) -> NodeGres | GresConfError:
    """gres.conf as slurmd reads it for this node, or why it cannot be followed."""
    try:
        return read_gres_conf(cfg.gres_path(), node)
    except GresConfError as e:
        return e


# ---- policy -------------------------------------------------------------------------------

def past_runs(cfg: AgentConfig, user: str, name: str) -> list[tuple[float | None, float | None]]:
    """(mean utilisation, mean power / default limit) of the user's earlier runs of this
    job name, oldest first; None where the run's backend did not measure it."""
    out: list[tuple[float | None, float | None]] = []
    try:
        lines = cfg.history.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            h = json.loads(line)
        except ValueError:
            continue
        if h.get("user") == user and h.get("name") == name:
            util, frac = h.get("util"), h.get("power_frac")
            out.append((None if util is None else float(util), None if frac is None else float(frac)))
    return out


def resolve(cfg: AgentConfig, requested: str | None, job: JobView) -> tuple[EnergyPolicy | None, str]:
    if requested is None or requested not in cfg.policies:
        return None, ""
    if requested != "auto":
        return cfg.policies[requested], ""
    chosen, why = cfg.auto.choose(past_runs(cfg, job.user, job.name))
    return cfg.policies[chosen], why


def apply_policy(dev: DeviceLayer, kind: str, index: int, p: EnergyPolicy, default_w: float) -> list[str]:
    """Apply what the policy sets for this kind of device; return what took effect."""
    done = []
    steps: list[tuple[str, Any]] = []
    if kind == "gpu":
        cap = p.power_cap_watts(default_w) if default_w else None
        if cap:
            steps.append((f"cap {cap:g}W", lambda: dev.set_power_limit(index, cap)))
        if p.gpu_freq:
            steps.append((f"clocks {p.gpu_freq}", lambda: dev.set_gpu_clock_level(index, str(p.gpu_freq))))
    elif kind == "npu" and p.npu_power_mode:
        mode = p.npu_power_mode
        steps.append((f"mode {mode}", lambda: dev.set_npu_power_mode(index, mode)))
    for label, step in steps:
        try:
            step()
            done.append(label)
        except ControlUnsupported as e:
            log.info("%s%d: %s not applied: %s", kind, index, label, e)
    return done


# ---- prolog / epilog / restore --------------------------------------------------------------

def prolog(cfg: AgentConfig, job_id: str, node: str) -> dict[str, Any]:
    t0 = time.monotonic()
    spec = cfg.devices_for(node)
    st = NodeState(cfg, node)
    remove_cache(st.dir, job_id)  # a job id seen before (a reset slurmctld): never its cache
    job = job_view(job_id, node)
    record: dict[str, Any] = {"job": job_id, "user": job.user, "name": job.name, "devices": [],
                              "nodes": job.num_nodes, "first": job.first_node}
    if spec is None or not job.devices:
        _write_cache(st, job_id, node, job, [])
        write_json(st.job_file(job_id), record)
        return record
    dev = open_devices(spec, st.dir)
    infos = dev.devices()
    targets = match_devices(dev, infos, node_gres(cfg, node), job.devices)
    _write_cache(st, job_id, node, job, targets)
    policy, why = resolve(cfg, requested_policy(job.admin_comment), job)
    record.update(policy=policy.name if policy else None, auto_rule=why)
    with st.lock():
        _apply_all(dev, st, job_id, targets, infos, policy, record)
        st.note_refused(job_id, {f"{t.kind}{t.idx}": t.refused for t in targets if t.refused},
                        [f"{t.kind}{t.idx}" for t in targets if not t.refused])
    write_json(st.job_file(job_id), record)
    log.info("prolog job %s on %s: policy %s, %d devices, %.0f ms", job_id, node,
             record.get("policy"), len(record["devices"]), (time.monotonic() - t0) * 1000)
    return record


def _write_cache(st: NodeState, job_id: str, node: str, job: JobView, targets: list[Target]) -> None:
    """The device cache for the job's TaskProlog and container wrapper; a folder they will not
    trust is said here, where admins look (they then ask slurmctld per task, as before)."""
    write_cache(st.dir, job_id, node, job.gres,
                {f"{t.kind}{t.idx}": t.identity if t.dev is not None else None for t in targets})
    problem = folder_problem(st.dir)
    if problem:
        log.warning("job %s: the device cache will not be trusted: %s", job_id, problem)


def _apply_all(dev: DeviceLayer, st: NodeState, job_id: str, targets: list[Target],
               infos: list[DeviceInfo], policy: EnergyPolicy | None, record: dict[str, Any]) -> None:
    by_index = {d.index: d for d in infos}
    for t in targets:
        kind, i = t.kind, t.idx  # i: Slurm's GRES index; t.dev: the backend's index
        previous = st.owner(kind, i)
        if previous and previous != job_id:  # its job is gone: Slurm gave us the device
            log.warning("%s%d: job %s left it changed; restoring defaults", kind, i, previous)
            restore_device(dev, st, kind, i, infos)
        if t.dev is None:
            # Never fail the job for it; say so where admins and the exporter look.
            log.warning("job %s: %s%d not matched to a %s device: %s; no policy applied, not metered",
                        job_id, kind, i, dev.name, t.refused)
            record["devices"].append({"kind": kind, "idx": i, "t": time.time(), "applied": [],
                                      "refused": t.refused})
            continue
        d = t.dev
        info = by_index.get(d)
        default_w = info.power_default_w if info else 0.0
        applied: list[str] = []
        if policy:
            # Owner first: a prolog killed midway leaves a record of what it may have
            # changed (which device, by identity), so the epilog, the next prolog or
            # `restore` puts it back.
            write_json(st.owner_file(kind, i), {"job": job_id, "dev": d, "identity": t.identity})
            applied = apply_policy(dev, kind, d, policy, default_w)
            if not applied:
                st.owner_file(kind, i).unlink(missing_ok=True)
        try:
            r = dev.read(d)
            start: dict[str, Any] = {"energy_j": r.energy_j, "busy_s": r.busy_s,
                                     "covered_s": r.covered_s}
        except ControlUnsupported as e:
            log.info("%s%d: no reading: %s", kind, i, e)
            start = {}
        record["devices"].append({"kind": kind, "idx": i, "dev": d, "identity": t.identity,
                                  "t": time.time(), "applied": applied, "default_w": default_w, **start})


def epilog(cfg: AgentConfig, job_id: str, node: str) -> dict[str, Any] | None:
    t0 = time.monotonic()
    st = NodeState(cfg, node)
    spec = cfg.devices_for(node)
    try:
        record = json.loads(st.job_file(job_id).read_text())
    except (OSError, ValueError):
        log.warning("epilog job %s on %s: no prolog record", job_id, node)
        remove_cache(st.dir, job_id)  # a prolog that stopped after writing it
        _restore_owned(cfg, st, node, job_id)
        return None
    per_device = []
    if spec and record["devices"]:
        dev = open_devices(spec, st.dir)
        infos: list[DeviceInfo] | None = None  # asked once, only if a device needs restoring
        for d in record["devices"]:
            kind, i = d["kind"], d["idx"]
            if d.get("refused"):
                per_device.append({"kind": kind, "idx": i, "refused": d["refused"]})
                continue
            b = int(d.get("dev", i))  # the backend's index (records before identities: i)
            try:
                end = dev.read(b)
            except ControlUnsupported as e:
                log.info("%s%d: no reading: %s", kind, i, e)
                end = None
            per_device.append(device_figures(d, end, dev.mean_util(b, d["t"]), time.time()))
            with st.lock():
                if st.owner(kind, i) == job_id:
                    infos = dev.devices() if infos is None else infos
                    restore_device(dev, st, kind, i, infos)
    if spec:
        _restore_owned(cfg, st, node, job_id)  # changed by a prolog that stopped midway
    summary = summarize(record, per_device)
    if per_device:
        append_history(cfg, record, summary)
    if cfg.update_comment and per_device:
        # Into the accounting record later, in a batch with the node's other jobs (ship.py):
        # the epilog itself asks Slurm nothing.
        nodes = int(record.get("nodes") or 1)
        if cfg.shared_spool:  # the job's first node writes every node's figures at once
            spool_shared(cfg.shared_spool, job_id, node, summary, nodes, str(record.get("first") or node))
        else:
            spool(st, job_id, node, summary, nodes=nodes)
    st.job_file(job_id).unlink(missing_ok=True)
    remove_cache(st.dir, job_id)
    log.info("epilog job %s on %s: %s, %.0f ms", job_id, node, summary, (time.monotonic() - t0) * 1000)
    return summary


def _restore_owned(cfg: AgentConfig, st: NodeState, node: str, job_id: str) -> None:
    """Restore every device whose owner file names this job."""
    spec = cfg.devices_for(node)
    owned = [k for k, j in st.owners().items() if j == job_id]
    if spec is None or not owned:
        return
    dev = open_devices(spec, st.dir)
    infos = dev.devices()
    with st.lock():
        for kind, i in owned:
            if st.owner(kind, i) == job_id:
                restore_device(dev, st, kind, i, infos)


def device_figures(start: dict[str, Any], end: Reading | None, sampled_util: float | None,
                   now: float) -> dict[str, Any]:
    """One device's energy, mean power and mean utilisation over the job, from counters only.

    The prolog and the epilog see the device before and after the job, so instantaneous
    readings say nothing about the job: without an energy counter (NVML, amdsmi, or the
    one `node sample` keeps) there is no energy, and utilisation comes from the sampler's
    busy-seconds or the backend's own samples (NVML keeps only the last ~20 s of them),
    else it is not reported (None)."""
    secs = max(now - start["t"], 1e-3)
    row: dict[str, Any] = {"kind": start["kind"], "idx": start["idx"], "s": round(secs, 3)}
    util, covered = sampled_util, None
    if end is not None and end.busy_s is not None and start.get("busy_s") is not None:
        covered = (end.covered_s or 0.0) - (start.get("covered_s") or 0.0)
        row["coverage"] = round(min(1.0, covered / secs), 3)  # the share the sampler saw
        util = (end.busy_s - start["busy_s"]) / covered if covered > 0 else None
    if end is not None and end.energy_j is not None and start.get("energy_j") is not None:
        row["energy_j"] = round(end.energy_j - start["energy_j"], 1)
        # The sampler's energy covers only the seconds it saw: its mean power is over those.
        over = covered if end.energy_sampled and covered else secs
        row["power_w"] = round(row["energy_j"] / over, 1)
        if start.get("default_w"):
            row["power_frac"] = round(row["power_w"] / start["default_w"], 3)
    row["util"] = round(util, 3) if util is not None else None
    return row


def summarize(record: dict[str, Any], per_device: list[dict[str, Any]]) -> dict[str, Any]:
    energies = [d["energy_j"] for d in per_device if "energy_j" in d]
    utils = [d["util"] for d in per_device if d.get("util") is not None]
    out: dict[str, Any] = {"devices": per_device}
    if energies:
        out["energy_j"] = round(sum(energies), 1)
        secs = max(max(d["s"] for d in per_device if "s" in d), 1e-3)  # refused devices have none
        out["power_w"] = round(sum(energies) / secs, 1)
    if utils:
        out["util"] = round(sum(utils) / len(utils), 3)
    fracs = [d["power_frac"] for d in per_device if "power_frac" in d]
    if fracs:
        out["power_frac"] = round(sum(fracs) / len(fracs), 3)
    if record.get("policy"):
        out["policy"] = record["policy"]
    if record.get("auto_rule"):
        out["auto_rule"] = record["auto_rule"]
    return out


def append_history(cfg: AgentConfig, record: dict[str, Any], summary: dict[str, Any]) -> None:
    line = json.dumps({"job": record["job"], "user": record["user"], "name": record["name"],
                       "util": summary.get("util"), "power_frac": summary.get("power_frac"),
                       "energy_j": summary.get("energy_j"),
                       "policy": record.get("policy"), "end": int(time.time())})
    cfg.history.parent.mkdir(parents=True, exist_ok=True)
    with open(cfg.history, "a") as f:  # one short line per job: O_APPEND keeps lines whole
        f.write(line + "\n")


ACTIVE_STATES = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED"}
LAUNCH_GRACE_S = 30  # a batch step starts within this of the job (its prolog done)


def holds_devices(rec: dict[str, str] | None, node: str, has_steps: bool, now: float) -> bool:
    """Does a job still hold its devices on this node (so `restore` must leave them)?

    A live slurmstepd says yes. Without one the answer depends on what should run here:
    slurmctld notices a killed slurmstepd only at the node's next registration, so a job it
    still calls RUNNING may be dead. Only the batch host of a batch job must have a step
    (the batch script) once the job has started; an allocation (salloc) or another node of
    the job may rightly have none between sruns, so those count as holding. A job that no
    longer runs on this node at all (requeued after the node failed, running elsewhere now)
    holds nothing here."""
    if has_steps:
        return True
    if not rec or rec.get("JobState") not in ACTIVE_STATES:
        return False
    if rec.get("NodeList") and not _runs_on(rec["NodeList"], node):
        return False
    if rec["JobState"] == "COMPLETING":
        return True  # its epilog restores and meters
    if rec.get("BatchFlag") != "1" or rec.get("BatchHost") != node:
        return True
    started = parse_slurm_time(rec.get("StartTime"))
    return started is None or now - started < LAUNCH_GRACE_S


def _runs_on(nodelist: str, node: str) -> bool:
    """Is node in slurmctld's NodeList of the job? A list it cannot read counts as yes."""
    try:
        return contains(nodelist, node)
    except HostlistError:
        return True


def job_record(job_id: str) -> dict[str, str] | None:
    """slurmctld's record of a job, None once it has forgotten it. Any other failure (no
    answer from slurmctld) raises: "cannot tell" must never read as "the job is gone"."""
    try:
        text = show_one_job(SLURM.out, job_id)
    except SlurmCommandError as e:
        if "Invalid job id" in e.stderr:
            return None
        why = e.stderr.strip() or f"exit {e.returncode}"
        raise RuntimeFailure(f"scontrol show job {job_id}: {why}") from e
    if text.strip():
        # AmbiguousRecord (user text imitating a key) is "cannot tell": it raises.
        return parse_job_record(text, ["JobState", "BatchFlag", "StartTime"],
                                optional=["BatchHost", "NodeList"])
    raise RuntimeFailure(f"scontrol show job {job_id}: an empty answer")


def job_holds_devices(job_id: str, node: str) -> bool:
    has_steps = SLURM.run(listpids_argv(job_id, node), check=False).returncode == 0
    return has_steps or holds_devices(job_record(job_id), node, False, time.time())


def job_gone(job_id: str) -> bool:
    """slurmctld no longer runs the job anywhere: its epilog will not come (node crash)."""
    rec = job_record(job_id)
    return rec is None or rec.get("JobState") not in ACTIVE_STATES


def restore(cfg: AgentConfig, node: str, alive: Callable[[str], bool] | None,
            gone: Callable[[str], bool] | None = None, grace_s: float = LAUNCH_GRACE_S) -> list[str]:
    """Restore devices whose job no longer holds them (every device if alive is None), and
    drop the records of jobs that are gone (default: not alive) and so get no epilog."""
    spec = cfg.devices_for(node)
    st = NodeState(cfg, node)
    done: list[str] = []
    if spec is not None:
        dev = open_devices(spec, st.dir)
        infos = dev.devices()
        if alive is None:
            with st.lock():
                done += _reset_every_device(dev, st, infos)
        else:
            # Slurm is asked outside the lock (seconds); under it, a device is reset only if
            # the same job still owns it and its prolog is not a moment ago (a new job starting).
            targets = {k: j for k, j in st.owners().items() if not _asks(alive, j, True)}
            with st.lock():
                for (kind, i), job in sorted(targets.items()):
                    if st.owner(kind, i) != job or st.owner_age(kind, i) < grace_s:
                        continue
                    restore_device(dev, st, kind, i, infos)
                    done.append(f"{kind}{i} (job {job})")
    if alive is not None:
        gone = gone or (lambda job: not alive(job))
        for f in st.dir.glob("job-*.json"):
            if _worth_asking(f) and _asks(gone, f.stem[4:], False):
                f.unlink(missing_ok=True)
                remove_cache(st.dir, f.stem[4:])
        _drop_orphan_caches(st)
    return done


def _drop_orphan_caches(st: NodeState) -> None:
    """Device caches without their job's record an hour on (a prolog that stopped between
    the two, then no epilog): no Slurm call, the record's own cleanup covers the rest."""
    for f in st.dir.glob(f"{CACHE_PREFIX}*.json"):
        job = f.stem[len(CACHE_PREFIX):]
        try:
            if not st.job_file(job).exists() and time.time() - f.stat().st_mtime > 3600:
                f.unlink(missing_ok=True)
        except OSError:
            continue


def _reset_every_device(dev: DeviceLayer, st: NodeState, infos: list[DeviceInfo]) -> list[str]:
    """`restore --all`: every device of the backend (by its own index) and every owner record.
    MIG GPUs are left alone: the agent never changes them, and their settings are the admin's."""
    done = []
    for d in infos:
        if d.mig:
            log.info("%s %d: MIG mode on: left alone", d.kind, d.index)
            continue
        try:
            dev.reset(d.index)
        except ControlUnsupported as e:
            log.info("%s %d: reset: %s", d.kind, d.index, e)
        done.append(f"{d.kind}{d.index}")
    for f in st.dir.glob("dev-*.json"):
        f.unlink(missing_ok=True)
    return done


def _asks(question: Callable[[str], bool], job: str, cannot_tell: bool) -> bool:
    """One job's answer; `cannot_tell` when Slurm does not answer or the record is
    ambiguous, so one bad job never stops the others from being restored."""
    try:
        return question(job)
    except Exception as e:
        log.warning("job %s: cannot tell (%s); leaving it for now", job, e)
        return cannot_tell


def _worth_asking(job_file: Path) -> bool:
    """Ask Slurm about a record with devices; about a CPU-only job's (which changed nothing
    here) only once it is a day old, so a node's many small jobs cost no calls per round."""
    try:
        if time.time() - job_file.stat().st_mtime > 86400:
            return True
        return bool(json.loads(job_file.read_text()).get("devices"))
    except (OSError, ValueError):
        return False


# ---- entry points for Slurm (no arguments: Slurm passes everything in the environment) ---

def _entry(which: str) -> int:
    job_id = os.environ.get("SLURM_JOB_ID", "")
    node = os.environ.get("SLURMD_NODENAME", "")
    try:
        cfg = AgentConfig.load(config_path())
        cfg.state_dir.mkdir(mode=0o755, parents=True, exist_ok=True)  # root's: see devcache.py
        logging.basicConfig(filename=str(cfg.state_dir / "agent.log"), level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(message)s")
        if which == "restore":
            if not node:
                log.warning("restore: no SLURMD_NODENAME (run it as Slurm's HealthCheckProgram)")
                return 0
            done = restore(cfg, node, lambda job: job_holds_devices(job, node), job_gone)
            if done:
                log.info("restore on %s: %s", node, ", ".join(done))
            if cfg.update_comment:
                shipped = ship(SLURM, NodeState(cfg, node), node)
                if shipped.written or shipped.dropped:
                    log.info("shipped on %s: %s", node, shipped)
                if cfg.shared_spool:
                    shipped = ship_shared(SLURM, cfg.shared_spool, node)
                    if shipped.written or shipped.dropped:
                        log.info("shipped from the shared spool on %s: %s", node, shipped)
        elif job_id and node:
            (prolog if which == "prolog" else epilog)(cfg, job_id, node)
    except Exception as e:  # never fail the job or drain the node for the agent's sake
        logging.basicConfig(stream=sys.stderr)
        log.error("%s job %s on %s failed: %s", which, job_id, node, e)
    return 0


def prolog_main() -> int:
    return _entry("prolog")


def epilog_main() -> int:
    return _entry("epilog")


def restore_main() -> int:
    """Slurm's HealthCheckProgram (through the rendered hetero-healthcheck): SLURMD_NODENAME."""
    return _entry("restore")
