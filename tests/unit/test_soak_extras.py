"""The soak's power keeper and container jobs, the parts that need no cluster: the count of
the power programs' decisions, the seeded choice of the container jobs and what their sbatch
line becomes, their figures, and the site the soak boots (power, the probe node, the image)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from slurm_hetero.devcluster.faults import power_figures
from slurm_hetero.replay.faults import (
    CONTAINER_MARK,
    PatientSubmitter,
    container_figures,
    wants_container,
    wants_energy,
)
from slurm_hetero.site import load_site
from tests import benchmark

LOG = """\
2026-12-06T18:02:26 [25899] suspend sp2-01: powered down
2026-12-06T18:02:27 [25899] suspend sp2-02: powered down
2026-12-06T18:02:47 [30568] resume sp2-01: powered up
2026-12-06T18:03:00 [30570] suspend sp2-03: refused: it holds a job
2026-12-06T18:03:01 [30571] suspend sp2-04: failed: slurmd did not stop
2026-12-06T18:03:02 [1704] resume sp2-03: restarted (its suspend had been refused)
2026-12-06T18:04:00 [1705] resume sp2-02: did not register within resume_timeout (3000 s): slurmctld marked it DOWN
2026-12-06T18:04:01 [1706] suspend x-1: refused: not a node of site kth
"""


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    return benchmark.load("soak")


def test_power_figures_count_each_decision() -> None:
    f = power_figures(LOG)
    assert f == {"down": 2, "up": 2, "refused": 2, "failed": 1, "resume_failed": 1,
                 "nodes_down": ["sp2-01", "sp2-02"]}


def test_power_figures_of_no_log() -> None:
    assert power_figures("") == {"down": 0, "up": 0, "refused": 0, "failed": 0, "resume_failed": 0,
                                 "nodes_down": []}


def test_container_share_is_seeded_and_independent_of_order_and_energy() -> None:
    ids = [str(i) for i in range(2000)]
    first = [t for t in ids if wants_container(t, 0.1, 36)]
    assert first == [t for t in reversed(ids) if wants_container(t, 0.1, 36)][::-1]
    assert 150 <= len(first) <= 250
    assert first != [t for t in ids if wants_container(t, 0.1, 37)]  # another seed, other jobs
    # Not the energy share's jobs again: drawn apart.
    energy = {t for t in ids if wants_energy(t, 0.1, 36)}
    assert len(energy & set(first)) < len(first) / 2
    assert not any(wants_container(t, 0.0, 36) for t in ids)


def submitter(tmp_path: Path, share: float) -> PatientSubmitter:
    s = PatientSubmitter.__new__(PatientSubmitter)
    s.script, s.workdir = tmp_path / "replay-job.sh", tmp_path
    s.clock = SimpleNamespace(speed=50.0)  # type: ignore[assignment]
    s.req = SimpleNamespace(bridge=True, work=None, as_users=False, accel_spec="any")  # type: ignore[assignment]
    s.energy_share, s.energy_seed, s.energy_policy, s.with_energy = 0.0, 0, "efficiency", []
    s.container_share, s.container_seed, s.container_image = share, 36, "soak:1"
    s.container_script, s.container_out = str(tmp_path / "c.sh"), str(tmp_path / "c")
    s.with_container = []
    return s


def job(trace_id: str, runtime: int = 600) -> Any:
    return SimpleNamespace(trace_id=trace_id, runtime_s=runtime, limit_min=20, cpus=2, one_node=False,
                           account="t_1", accel=0, fixed_gres=None)


def test_container_jobs_ask_the_image_and_sleep_real_seconds(tmp_path: Path) -> None:
    s = submitter(tmp_path, 1.0)
    argv = s.sbatch(job("7"))
    assert argv[:3] == ["sbatch", "--hold", "--image=soak:1"]
    assert f"--output={tmp_path}/c/%j.out" in argv and "--output=/dev/null" not in argv
    assert argv[-3:] == [str(tmp_path / "c.sh"), "600", "12.000"]  # 600 trace s at x50
    assert s.with_container == ["7"]
    s.sbatch(job("7"))  # a retried sbatch counts the job once
    assert s.with_container == ["7"]


def test_other_jobs_keep_the_replay_body(tmp_path: Path) -> None:
    s = submitter(tmp_path, 0.0)
    argv = s.sbatch(job("7"))
    assert not any(a.startswith("--image") for a in argv)
    assert argv[-2:] == [str(tmp_path / "replay-job.sh"), "600"] and s.with_container == []


def outcome(trace_id: str, state: str, at_limit: bool = False, killed_early: bool = False) -> Any:
    return SimpleNamespace(trace_id=trace_id, job_id=f"1{trace_id}", state=state, at_limit=at_limit,
                           killed_early=killed_early)


def test_container_figures_want_the_image_line_and_an_expected_end() -> None:
    outs = [outcome("1", "COMPLETED"), outcome("2", "TIMEOUT", at_limit=True),
            outcome("3", "TIMEOUT", at_limit=True, killed_early=True), outcome("4", "COMPLETED"),
            outcome("5", "COMPLETED"), outcome("6", "RUNNING")]
    line = f"{CONTAINER_MARK} soak:1 x86_64/cpu\n"
    f = container_figures(outs, ["1", "2", "3", "4", "6", "9"], {"11": line, "12": line, "13": line,
                                                                "14": "no container here\n", "16": line})
    # 9 was never replayed; 6 still ran when the replay stopped (not judged); 3 was killed
    # before its limit, 4 completed with no line from inside the image.
    assert (f["asked"], f["ran_in_container"], f["unfinished"], f["ended"], f["ended_as_expected"]) == (5, 4, 1, 4, 2)
    assert f["limit_before_body"] == 0
    assert f["variants"] == {"soak:1 x86_64/cpu": 4}
    assert [e["job_id"] for e in f["examples"]] == ["13", "14"]


def test_a_job_at_its_own_limit_before_its_body_ran_is_counted_apart() -> None:
    f = container_figures([outcome("1", "CANCELLED", at_limit=True)], ["1"], {})
    assert (f["ran_in_container"], f["ended_as_expected"], f["limit_before_body"], f["examples"]) == (0, 1, 1, [])


def test_soak_site_adds_power_probe_and_image(soak: ModuleType, tmp_path: Path) -> None:
    site = load_site(soak.KTH_SITE)
    booted, path = soak.soak_site(site, soak.KTH_SITE, tmp_path / "s.yaml", probe=True, power=True,
                                  containers=True)
    assert path == tmp_path / "s.yaml" and booted.name == site.name
    assert booted.power.enabled and booted.power.method == "devcluster"
    assert booted.power.suspend_time == soak.SOAK_POWER["suspend_time"]
    assert booted.power.exclude_partitions == (soak.PROBE_PARTITION,)
    assert [v.label for v in booted.images[soak.SOAK_IMAGE].variants] == ["x86_64/cpu", "x86_64/cuda12.4"]
    assert "cuda" in booted.containers.drivers


def test_soak_site_keeps_a_site_that_needs_nothing(soak: ModuleType, tmp_path: Path) -> None:
    site = load_site(soak.ALIBABA_SITE)
    assert soak.soak_site(site, soak.ALIBABA_SITE, tmp_path / "s.yaml", probe=False) == (site, soak.ALIBABA_SITE)
    # With the hooks, a GPU site gets the probe node too: agent-fail's fallback when its GPUs are busy.
    booted, _ = soak.soak_site(site, soak.ALIBABA_SITE, tmp_path / "s.yaml", probe=True)
    assert soak.PROBE_NODE in booted.all_nodes and not booted.power.enabled
    booted, _ = soak.soak_site(site, soak.ALIBABA_SITE, tmp_path / "s.yaml", probe=False, power=True)
    assert booted.power.enabled and booted.power.exclude_partitions == ()
