"""`node sample`: counters integrated from instantaneous readings, and the epilog's figures."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurm_hetero.energy import agent
from slurm_hetero.energy.backends import open_devices
from slurm_hetero.energy.devices import ControlUnsupported, DeviceInfo, Reading
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.energy.sampled import COUNTERS, SampledDevices
from slurm_hetero.energy.sampler import run, sample_once, serve
from slurm_hetero.energy.state import AgentConfig
from slurm_hetero.errors import InputError
from slurm_hetero.site.policies import AutoRule


class Scripted:
    """An npu-smi-like backend: power and use "now", set by the test."""

    name = "scripted"

    def __init__(self) -> None:
        self.power, self.util, self.now = 100.0, 0.5, 1000.0

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(0, "npu", "910B3")]

    def file_identity(self, path: str) -> str:
        raise ControlUnsupported("the scripted backend matches no device file")

    def read(self, index: int) -> Reading:
        return Reading(energy_j=None, power_w=self.power, util=self.util, timestamp=self.now)

    def mean_util(self, index: int, since: float) -> float | None:
        return None

    def set_power_limit(self, index: int, watts: float) -> None: ...

    def set_gpu_clock_level(self, index: int, level: str) -> None: ...

    def set_npu_power_mode(self, index: int, mode: str) -> None: ...

    def reset(self, index: int) -> None: ...


def counters(path: Path) -> dict[str, float]:
    c: dict[str, float] = json.loads(path.read_text())["devices"]["0"]
    return c


def test_trapezoids_and_gaps(tmp_path: Path) -> None:
    dev, path = Scripted(), tmp_path / COUNTERS
    sample_once(dev, path, 1000.0, max_gap=5)
    dev.power, dev.util = 300.0, 1.0
    sample_once(dev, path, 1002.0, max_gap=5)  # (100+300)/2 W x 2 s
    c = counters(path)
    assert (c["energy_j"], c["busy_s"], c["covered_s"]) == (400.0, 1.5, 2.0)
    sample_once(dev, path, 1100.0, max_gap=5)  # the sampler was down 98 s: not integrated
    c = counters(path)
    assert (c["energy_j"], c["covered_s"], c["t"]) == (400.0, 2.0, 1100.0)


def test_readings_carry_counters_forward_and_go_stale(tmp_path: Path) -> None:
    dev = Scripted()
    sample_once(dev, tmp_path / COUNTERS, 1000.0, max_gap=5)
    sample_once(dev, tmp_path / COUNTERS, 1001.0, max_gap=5)
    layer = SampledDevices(dev, tmp_path)  # stale after max(10 s, the sampler's max_gap)
    dev.now = 1001.5  # half a period after the last sample: extrapolated at the last figures
    r = layer.read(0)
    assert (r.energy_j, r.busy_s, r.covered_s) == (150.0, 0.75, 1.5)
    dev.now = 1020.0  # no sampler for 19 s: no counters, so the epilog reports no energy
    assert layer.read(0).energy_j is None and layer.read(0).busy_s is None


def test_epilog_figures_from_counters_only() -> None:
    start = {"kind": "npu", "idx": 0, "t": 1000.0, "default_w": 400.0,
             "energy_j": 50.0, "busy_s": 1.0, "covered_s": 2.0}
    end = Reading(energy_j=2050.0, power_w=90.0, util=0.0, timestamp=1010.0, busy_s=7.0, covered_s=10.0)
    row = agent.device_figures(start, end, None, now=1010.0)
    assert row == {"kind": "npu", "idx": 0, "s": 10.0, "energy_j": 2000.0, "power_w": 200.0,
                   "power_frac": 0.5, "coverage": 0.8, "util": 0.75}
    # No counter (npu-smi without a sampler): the idle readings around the job say nothing.
    bare = Reading(energy_j=None, power_w=90.0, util=0.0, timestamp=1010.0)
    row = agent.device_figures({**start, "energy_j": None, "busy_s": None}, bare, None, now=1010.0)
    assert row == {"kind": "npu", "idx": 0, "s": 10.0, "util": None}


def test_serve_meters_a_counterless_fake_and_the_agent_reads_it(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    FakeDevices.create(tmp_path / "npu.json", "npu", 2, "ascend-910b", default_w=400, load=0.5,
                       counter=False)
    cfg = AgentConfig(state_dir=tmp_path / "agent", history=tmp_path / "agent" / "h.jsonl",
                            groups=[{"nodes": "n01", "devices": f"sampled:fake:{tmp_path}/npu.json"}],
                            policies={}, auto=AutoRule())
    assert FakeDevices(tmp_path / "npu.json").read(0).energy_j is None
    rounds: list[int] = []

    def stop_after_four() -> bool:
        rounds.append(1)
        return len(rounds) > 4

    t0 = time.time()
    serve(cfg, "n01", 0.1, stop_after_four)
    layer = open_devices(f"sampled:fake:{tmp_path}/npu.json", tmp_path / "agent" / "n01")
    r = layer.read(1)
    elapsed = time.time() - t0
    assert r.energy_j == pytest.approx(200 * (r.covered_s or 0), rel=1e-6)  # 400 W x 0.5 load
    assert r.covered_s is not None and 0.3 < r.covered_s <= elapsed
    assert r.busy_s == pytest.approx(0.5 * r.covered_s)
    with pytest.raises(InputError, match="not a sampled: backend"):
        serve(cfg, "n02", 0.1, lambda: True)


def test_a_round_without_a_reading_is_skipped_not_counted_as_zero(tmp_path: Path) -> None:
    class Flaky(Scripted):
        fail = False

        def read(self, index: int) -> Reading:
            if self.fail:
                raise ControlUnsupported("npu 0: npu-smi shows no power")
            return super().read(index)

    dev, path = Flaky(), tmp_path / COUNTERS
    sample_once(dev, path, 1000.0, max_gap=5)
    dev.fail = True
    sample_once(dev, path, 1001.0, max_gap=5)  # nothing integrated, nothing at 0 W
    assert counters(path)["covered_s"] == 0.0
    dev.fail = False
    sample_once(dev, path, 1002.0, max_gap=5)  # the gap (2 s < max_gap) is bridged
    assert (counters(path)["energy_j"], counters(path)["covered_s"]) == (200.0, 2.0)


def test_run_survives_a_failing_round(tmp_path: Path) -> None:
    class Broken(Scripted):
        calls = 0

        def devices(self) -> list[DeviceInfo]:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("driver hiccup")
            return super().devices()

    dev, rounds = Broken(), []

    def stop() -> bool:
        rounds.append(1)
        return len(rounds) > 2

    run(dev, tmp_path / COUNTERS, 0.01, stop)
    assert dev.calls == 2 and (tmp_path / COUNTERS).exists()


def test_a_sampled_device_with_its_own_counter_keeps_it(tmp_path: Path) -> None:
    """sampled:nvml: whole-job utilisation from the sampler, energy from the device."""
    FakeDevices.create(tmp_path / "gpu.json", "gpu", 1, "h100", default_w=700, load=0.5)
    inner = FakeDevices(tmp_path / "gpu.json")
    sample_once(inner, tmp_path / COUNTERS, time.time() - 1, max_gap=5)
    sample_once(inner, tmp_path / COUNTERS, time.time(), max_gap=5)
    # The device's counter grows 350 J/s: bracket the read instead of comparing to a later one.
    before = inner.read(0).energy_j
    r = SampledDevices(inner, tmp_path).read(0)
    after = inner.read(0).energy_j
    assert before is not None and after is not None and r.energy_j is not None
    assert not r.energy_sampled and before <= r.energy_j <= after
    assert r.busy_s is not None and r.covered_s is not None and r.busy_s == pytest.approx(0.5 * r.covered_s)


def test_sites_choose_which_stacks_are_sampled() -> None:
    from slurm_hetero.conf import render_site
    from slurm_hetero.site import load_site_text
    from tests.unit.test_energy import demo_with

    def groups(node_agent: str) -> list[dict[str, str]]:
        text = demo_with(node_agent)
        return list(json.loads(render_site(load_site_text(text, "site.yaml"))["hetero-agent.json"])["groups"])

    assert {"nodes": "h100-01", "devices": "nvml"} in groups("")
    assert {"nodes": "npu-[01-02]", "devices": "sampled:npu-smi"} in groups("")  # no counters: always
    chosen = groups("node_agent: {sample_stacks: [cuda]}\n")
    assert {"nodes": "h100-01", "devices": "sampled:nvml"} in chosen
    assert {"nodes": "npu-[01-02]", "devices": "sampled:npu-smi"} in chosen
