"""The node exporter: one process per node, for Prometheus.

Every `every` seconds (1 s) it reads each device of the node through the project's device
layer (the backend the agent config names for this node: NVML, amdsmi, npu-smi, the fake)
into an in-memory ring, and notes the job that holds each device now, taken from the node
agent's own records (holders.py). Every `tier_s` (10 s) it aggregates the ring per job and
per node (mean and max). A scrape only formats what is already there: it never touches a
device.

A device's own series carry only what stays the same for the device's life (node, kind,
index, model, arch), so their number stays fixed however many jobs pass through. Which job
holds it is one series of its own while the job does, `hetero_device_job_info{node, kind,
index, jobid, user, policy} 1` (the info-metric pattern: joined with `* on (node, kind,
index) group_left (jobid, user)`), and the job id as the value of a per-device gauge,
`hetero_device_job_id` (jobstats' `nvidia_gpu_jobId`; 0: none). Labelling every device
series with the job instead made a new series per job, device and family: 351,480 device
series against 6,096 in a day of 10,000 jobs on 512 GPUs (benchmarks/monitor_cardinality.py).

`index` is the backend's own number of the device (NVML's index, amdsmi's, npu-smi's), the
one its readings are taken by: not Slurm's GRES index (the N of SLURM_JOB_GPUS / `IDX:`) nor
the N of /dev/nvidiaN, which can differ from it. A job is put on a device by identity, as
the agent applies its policy (energy/identity.py): the device whose minor number or PCI
address is that of the device file Slurm gave the job (holders.py), so its power, energy and
utilisation are the right device's on a node where NVML's order and /dev's differ.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, DeviceLayer
from slurm_hetero.monitor.counters import FILE as COUNTERS_FILE
from slurm_hetero.monitor.counters import EnergyCounters
from slurm_hetero.monitor.holders import DeviceKey, Holder, Holders
from slurm_hetero.monitor.serve import serve
from slurm_hetero.monitor.status import DeviceStatus, read_status
from slurm_hetero.monitor.web import WebConfig
from slurm_hetero.site.names import normalize_arch

log = logging.getLogger("slurm-hetero.monitor")
DEVICE_LABELS = ["node", "kind", "index", "model", "arch"]
# `jobid`, not `job`: Prometheus gives every scraped series its own `job` (the scrape job).
JOB_INFO_LABELS = ["node", "kind", "index", "jobid", "user", "policy"]
# What `index` is, said in the help of the families a job is joined on.
INDEX_HELP = "; index: the backend's own device number (e.g. NVML's), not Slurm's GRES index nor /dev/nvidiaN"
MIB = 2**20


def node_arch(given: str | None = None) -> str:
    """The node's architecture label: `given` (an emulated node), else this machine's."""
    arch = (given or platform.machine()).strip()
    return normalize_arch(arch)


@dataclass(frozen=True)
class DeviceSample:
    key: DeviceKey
    power_w: float
    util: float
    energy_j: float  # the exporter's monotonic counter
    raw_energy_j: float | None  # the backend's own counter (None: it has none)
    holder: Holder | None
    status: DeviceStatus
    changed_by_agent: bool


@dataclass(frozen=True)
class Sample:
    t: float
    devices: tuple[DeviceSample, ...]


@dataclass(frozen=True)
class Stat:
    mean: float
    max: float

    @staticmethod
    def of(values: list[float]) -> Stat | None:
        return Stat(sum(values) / len(values), max(values)) if values else None


@dataclass(frozen=True)
class JobAggregate:
    job: str
    user: str
    policy: str
    devices: int
    power_w: Stat | None
    util: Stat | None
    energy_j: float | None  # since the prolog, from the devices' counters; None without


@dataclass(frozen=True)
class Tier:
    t: float
    window_s: float
    samples: int
    node_power_w: Stat | None
    node_util: Stat | None
    jobs: tuple[JobAggregate, ...] = ()


def aggregate(samples: list[Sample], now: float, window_s: float) -> Tier:
    """Pure: per node and per job mean/max over the samples of the last `window_s`.

    Node power is the sum over devices at each sample; utilisation the mean over devices.
    A job's figures are over its own devices, at the samples where it held them."""
    recent = [s for s in samples if now - window_s < s.t <= now]
    node_p = [sum(d.power_w for d in s.devices) for s in recent if s.devices]
    node_u = [sum(d.util for d in s.devices) / len(s.devices) for s in recent if s.devices]
    per_job: dict[str, dict[str, list[float]]] = {}
    last: dict[str, list[DeviceSample]] = {}
    for s in recent:
        held: dict[str, list[DeviceSample]] = {}
        for d in s.devices:
            if d.holder is not None:
                held.setdefault(d.holder.job, []).append(d)
        for job, ds in held.items():
            acc = per_job.setdefault(job, {"p": [], "u": []})
            acc["p"].append(sum(d.power_w for d in ds))
            acc["u"].append(sum(d.util for d in ds) / len(ds))
            last[job] = ds
    jobs = []
    for job, acc in sorted(per_job.items()):
        ds = last[job]
        h = ds[0].holder
        assert h is not None
        energy: float | None = 0.0
        for d in ds:
            start = d.holder.start_energy_j if d.holder else None
            if energy is None or d.raw_energy_j is None or start is None:
                energy = None
                continue
            energy += max(0.0, d.raw_energy_j - start)
        jobs.append(JobAggregate(job=job, user=h.user, policy=h.policy, devices=len(ds),
                                 power_w=Stat.of(acc["p"]), util=Stat.of(acc["u"]), energy_j=energy))
    return Tier(t=now, window_s=window_s, samples=len(recent), node_power_w=Stat.of(node_p),
                node_util=Stat.of(node_u), jobs=tuple(jobs))


class AgentLog:
    """Counts the node agent's error and warning lines (its log: `<state_dir>/agent.log`),
    read incrementally from where the exporter started; a shorter file was rotated."""

    def __init__(self, path: Path | None):
        self.path = path
        self.counts = {"error": 0, "warning": 0}
        self.offset = self._size()

    def _size(self) -> int:
        try:
            return self.path.stat().st_size if self.path else 0
        except OSError:
            return 0

    def poll(self, max_bytes: int = 1 << 20) -> None:
        if self.path is None:
            return
        size = self._size()
        if size < self.offset:
            self.offset = 0
        if size == self.offset:
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(min(max_bytes, size - self.offset))
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1  # whole lines only; the rest waits for the next poll
        for line in chunk[:end].splitlines():
            if b" ERROR " in line:
                self.counts["error"] += 1
            elif b" WARNING " in line:
                self.counts["warning"] += 1
        self.offset += end if end else (len(chunk) if len(chunk) == max_bytes else 0)


@dataclass(eq=False)  # registered in a CollectorRegistry, which hashes it
class NodeExporter:
    node: str
    arch: str
    dev: DeviceLayer
    node_dir: Path  # the node's agent state folder (NodeState.dir)
    agent_log: Path | None = None
    state_dir: Path | None = None  # where the energy counters live (None: node_dir)
    every: float = 1.0
    ring_s: float = 60.0
    tier_s: float = 10.0
    persist: bool = True
    sampled: bool = False  # the backend's counters come from `node sample`
    clock: Callable[[], float] = time.time
    infos: list[DeviceInfo] = field(default_factory=list)
    latest: Sample | None = None
    tier: Tier | None = None
    read_errors: int = 0
    sample_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.ring: deque[Sample] = deque(maxlen=max(2, math.ceil(self.ring_s / self.every)))
        self.holders = Holders(self.node_dir)
        path = (self.state_dir or self.node_dir) / COUNTERS_FILE
        if self.persist and not path.exists() and (self.node_dir / COUNTERS_FILE).exists():
            # Moving from the agent's folder (an exporter that ran as root) to its own:
            # the totals go on from where they were, so counters stay monotonic.
            seed = EnergyCounters(self.node_dir / COUNTERS_FILE)
            seed.path = path
            seed.save()
        self.energy = EnergyCounters(path if self.persist else None, max_gap_s=max(5.0, 3 * self.every))
        self.log_counts = AgentLog(self.agent_log)
        self.sampler_age: float | None = None
        self._infos_at = -math.inf
        self._tier_at = -math.inf

    # ---- sampling ------------------------------------------------------------------------
    def refresh_devices(self, now: float) -> None:
        if now - self._infos_at < 60 and self.infos:
            return
        try:
            self.infos = self.dev.devices()
        except Exception as e:  # a driver hiccup keeps the last list
            log.warning("device list: %s", e)
        self._infos_at = now

    def sample(self) -> Sample:
        t0 = time.monotonic()
        now = self.clock()
        self.refresh_devices(now)
        # The jobs' devices by identity (the minor / PCI address of the file Slurm gave the
        # job), keyed by the backend's index the readings below use: never Slurm's as ours.
        held = self.holders.devices(self.infos)
        changed = self.holders.changed(self.infos)
        out = []
        for info in self.infos:
            key = (info.kind, info.index)
            try:
                r = self.dev.read(info.index)
            except ControlUnsupported as e:
                self.read_errors += 1
                log.debug("%s%d: %s", info.kind, info.index, e)
                continue
            except Exception as e:
                self.read_errors += 1
                log.warning("%s%d: read failed: %s", info.kind, info.index, e)
                continue
            total, added = self.energy.update(f"{info.kind}{info.index}", r.energy_j, r.power_w, now)
            holder = held.get(key)
            self.energy.add_policy((holder.policy or "none") if holder else "idle", added)
            out.append(DeviceSample(key=key, power_w=r.power_w, util=r.util, energy_j=total,
                                    raw_energy_j=r.energy_j, holder=holder,
                                    status=read_status(self.dev, info), changed_by_agent=key in changed))
        s = Sample(t=now, devices=tuple(out))
        self.ring.append(s)
        self.latest = s
        if now - self._tier_at >= self.tier_s:
            self.tier = aggregate(list(self.ring), now, self.tier_s)
            self.log_counts.poll()
            self.sampler_age = self._sampler_age(now)
            self._tier_at = now
        self.energy.maybe_save()
        self.sample_seconds = time.monotonic() - t0
        return s

    def _sampler_age(self, now: float) -> float | None:
        if not self.sampled:
            return None
        try:
            state = json.loads((self.node_dir / "samples.json").read_text())
            ts = [float(c["t"]) for c in state["devices"].values()]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return math.inf
        return now - max(ts) if ts else math.inf

    def run(self, stop: Callable[[], bool]) -> None:
        """Sample on a fixed grid until stop(); a failed round is logged, never fatal."""
        next_t = time.monotonic()
        try:
            while not stop():
                try:
                    self.sample()
                except Exception as e:
                    log.warning("sample failed: %s", e)
                next_t += self.every
                delay = next_t - time.monotonic()
                if delay < 0:  # fell behind (a slow driver call): skip, never burst
                    next_t = time.monotonic()
                    continue
                _sleep_until_stopped(delay, stop)
        finally:
            self.energy.save()

    # ---- Prometheus collector ------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s, tier = self.latest, self.tier
        models = {(i.kind, i.index): i for i in self.infos}
        g = _Families(self.node, self.arch)
        if s is not None:
            for d in s.devices:
                info = models.get(d.key)
                g.device(d, info)
        yield from g.families()
        yield from self._tier_metrics(tier)
        yield from self._self_metrics(s)

    def _tier_metrics(self, tier: Tier | None) -> Iterator[Metric]:
        node_labels = ["node", "arch", "stat"]
        job_labels = ["node", "jobid", "user", "policy"]
        np = GaugeMetricFamily("hetero_node_power_watts",
                               f"Node accelerator power (sum of devices), mean/max over {self.tier_s:g} s",
                               labels=node_labels)
        nu = GaugeMetricFamily("hetero_node_utilization_ratio",
                               f"Node accelerator use (mean of devices), mean/max over {self.tier_s:g} s",
                               labels=node_labels)
        jp = GaugeMetricFamily("hetero_job_power_watts",
                               f"A job's accelerator power on this node, mean/max over {self.tier_s:g} s",
                               labels=[*job_labels, "stat"])
        ju = GaugeMetricFamily("hetero_job_utilization_ratio",
                               f"A job's accelerator utilisation here, mean/max over {self.tier_s:g} s",
                               labels=[*job_labels, "stat"])
        jd = GaugeMetricFamily("hetero_job_devices", "Devices a job holds on this node", labels=job_labels)
        je = GaugeMetricFamily("hetero_job_energy_joules",
                               "Energy of a job's devices on this node since its prolog (device counters)",
                               labels=job_labels)
        if tier is not None:
            for name, stat in (("mean", "mean"), ("max", "max")):
                if tier.node_power_w:
                    np.add_metric([self.node, self.arch, name], getattr(tier.node_power_w, stat))
                if tier.node_util:
                    nu.add_metric([self.node, self.arch, name], getattr(tier.node_util, stat))
            for j in tier.jobs:
                labels = [self.node, j.job, j.user, j.policy]
                jd.add_metric(labels, j.devices)
                for name in ("mean", "max"):
                    if j.power_w:
                        jp.add_metric([*labels, name], getattr(j.power_w, name))
                    if j.util:
                        ju.add_metric([*labels, name], getattr(j.util, name))
                if j.energy_j is not None:
                    je.add_metric(labels, j.energy_j)
        yield from (np, nu, jp, ju, jd, je)

    def _self_metrics(self, s: Sample | None) -> Iterator[Metric]:
        pe = CounterMetricFamily("hetero_node_policy_energy_joules",
                                 "Accelerator energy on this node by the energy policy of the job holding "
                                 "each device (idle: no job; none: a job without a policy)",
                                 labels=["node", "policy"])
        for policy, joules in sorted(dict(self.energy.by_policy).items()):  # copied: the sampler adds keys
            pe.add_metric([self.node, policy], joules)
        yield pe
        al = CounterMetricFamily("hetero_agent_log_messages",
                                 "Error and warning lines the node agent logged since the exporter started",
                                 labels=["node", "level"])
        for level, n in dict(self.log_counts.counts).items():
            al.add_metric([self.node, level], n)
        yield al
        re_ = CounterMetricFamily("hetero_exporter_read_errors", "Device readings that failed",
                                  labels=["node"])
        re_.add_metric([self.node], self.read_errors)
        yield re_
        last = GaugeMetricFamily("hetero_exporter_last_sample_timestamp_seconds",
                                 "When the exporter last sampled the devices", labels=["node"])
        dur = GaugeMetricFamily("hetero_exporter_sample_seconds", "How long the last sample took",
                                labels=["node"])
        if s is not None:
            last.add_metric([self.node], s.t)
            dur.add_metric([self.node], self.sample_seconds)
        yield last
        yield dur
        if self.sampled:
            age = GaugeMetricFamily("hetero_sampler_counters_age_seconds",
                                    "Age of the counters `node sample` keeps (+Inf: none)", labels=["node"])
            if self.sampler_age is not None:
                age.add_metric([self.node], self.sampler_age)
            yield age


class _Families:
    """The per-device families of one scrape; a family a backend never fills is dropped."""

    def __init__(self, node: str, arch: str):
        self.node, self.arch = node, arch
        L = DEVICE_LABELS
        self.f: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "power": GaugeMetricFamily("hetero_device_power_watts", "Device power draw now" + INDEX_HELP,
                                       labels=L),
            "energy": CounterMetricFamily("hetero_device_energy_joules",
                                          "Device energy, monotonic across exporter restarts", labels=L),
            "util": GaugeMetricFamily("hetero_device_utilization_ratio", "Device utilisation (0-1)",
                                      labels=L),
            "mem_total": GaugeMetricFamily("hetero_device_memory_total_bytes", "Device memory", labels=L),
            "mem_used": GaugeMetricFamily("hetero_device_memory_used_bytes", "Device memory in use",
                                          labels=L),
            "temp": GaugeMetricFamily("hetero_device_temperature_celsius", "Device temperature", labels=L),
            "clock": GaugeMetricFamily("hetero_device_clock_mhz", "Device clock now",
                                       labels=[*L, "clock"]),
            "limit": GaugeMetricFamily("hetero_device_power_limit_watts", "Applied power cap", labels=L),
            "default_limit": GaugeMetricFamily("hetero_device_power_default_limit_watts",
                                               "The device's default power cap", labels=L),
            "policy": GaugeMetricFamily("hetero_device_clock_policy_info",
                                        "Clock level (GPU) or power mode (NPU) applied now",
                                        labels=[*L, "level"]),
            "non_default": GaugeMetricFamily("hetero_device_non_default",
                                             "1 when the device's settings differ from its defaults",
                                             labels=L),
            "changed": GaugeMetricFamily("hetero_device_agent_changed",
                                         "1 while the node agent has a change on the device not yet restored",
                                         labels=L),
            "allocated": GaugeMetricFamily("hetero_device_allocated",
                                           "1 while a Slurm job holds the device (the node agent's record)"
                                           + INDEX_HELP, labels=L),
            "healthy": GaugeMetricFamily("hetero_device_healthy", "1: the backend says healthy",
                                         labels=L),
        }
        self.used: set[str] = {"power", "energy", "util", "allocated", "changed"}

        self.job_info = GaugeMetricFamily(
            "hetero_device_job_info", "1 while the Slurm job `jobid` of `user` holds the device, with the "
            "energy policy its prolog applied (the node agent's record, matched to the device by its "
            "minor number or PCI address); no series while no job does" + INDEX_HELP,
            labels=JOB_INFO_LABELS)
        self.job_id = GaugeMetricFamily("hetero_device_job_id",
                                        "Id of the Slurm job holding the device (0: none)" + INDEX_HELP,
                                        labels=L)

    def add(self, key: str, labels: list[str], value: float) -> None:
        self.f[key].add_metric(labels, value)
        self.used.add(key)

    def device(self, d: DeviceSample, info: DeviceInfo | None) -> None:
        kind, idx = d.key
        h = d.holder
        labels = [self.node, kind, str(idx), info.name if info else "", self.arch]
        if h is not None:
            self.job_info.add_metric([self.node, kind, str(idx), h.job, h.user, h.policy], 1.0)
        self.job_id.add_metric(labels, float(h.job) if h and h.job.isdigit() else 0.0)
        self.add("power", labels, d.power_w)
        self.add("energy", labels, d.energy_j)
        self.add("util", labels, d.util)
        self.add("allocated", labels, 1.0 if h else 0.0)
        self.add("changed", labels, 1.0 if d.changed_by_agent else 0.0)
        if info and info.memory_mib:
            self.add("mem_total", labels, info.memory_mib * MIB)
        if info and info.power_default_w:
            self.add("default_limit", labels, info.power_default_w)
        st = d.status
        if st.memory_used_mib is not None:
            self.add("mem_used", labels, st.memory_used_mib * MIB)
        if st.temperature_c is not None:
            self.add("temp", labels, st.temperature_c)
        if st.sm_clock_mhz is not None:
            self.add("clock", [*labels, "sm"], st.sm_clock_mhz)
        if st.mem_clock_mhz is not None:
            self.add("clock", [*labels, "mem"], st.mem_clock_mhz)
        if st.power_limit_w is not None:
            self.add("limit", labels, st.power_limit_w)
        if st.clock_policy is not None:
            self.add("policy", [*labels, st.clock_policy], 1.0)
        if st.non_default is not None or d.changed_by_agent:
            self.add("non_default", labels, 1.0 if (st.non_default or d.changed_by_agent) else 0.0)
        if st.healthy is not None:
            self.add("healthy", labels, 1.0 if st.healthy else 0.0)

    def families(self) -> list[Metric]:
        return [*(fam for key, fam in self.f.items() if key in self.used), self.job_info, self.job_id]


def _sleep_until_stopped(seconds: float, stop: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while not stop():
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.2))


def serve_node(exporter: NodeExporter, port: int, addr: str = "0.0.0.0",
               stop: Callable[[], bool] | None = None, ready: Callable[[int], None] | None = None,
               web: WebConfig | None = None) -> None:
    """Serve /metrics on addr:port and sample until stop() (default: SIGTERM/SIGINT)."""
    exporter.sample()  # the first scrape already has devices
    serve(exporter, port, addr, stop, ready, web)
