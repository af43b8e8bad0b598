"""The pure parts of benchmarks/fragmentation_check.py's --boot mode: the seeded workload,
the sample instants, the staleness verdict and the summary figures (no cluster here)."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from slurm_hetero.site import Site, load_site
from tests import benchmark

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"
A100 = "a100-80gb@x86_64"


def bench() -> ModuleType:
    return benchmark.load("fragmentation_check")


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(DEMO)


def test_the_demo_sites_shapes(site: Site) -> None:
    got = {(s.model, s.gres, s.partition, s.per_node) for s in bench().shapes(site)}
    # gh200 has one device a node: it cannot fragment, so the workload leaves it out
    assert got == {("a100-80gb", "gpu:a100-80gb", "gpu", 4), ("h100", "gpu:h100", "gpu", 8),
                   ("v100", "gpu:v100", "gpu", 4), ("ascend-910b", "npu:910b", "npu", 8)}


def test_the_workload_is_the_same_for_the_same_seed(site: Site) -> None:
    def first(seed: int) -> list[Any]:
        return [list(itertools.islice(bench().job_stream(seed, s), 200)) for s in bench().shapes(site)]

    assert first(37) == first(37)
    assert first(37) != first(38)
    for shape, jobs in zip(bench().shapes(site), first(37), strict=True):
        sizes = {j.devices for j in jobs}
        assert sizes <= {1, 2, 3, 4, 8} and max(sizes) == shape.per_node  # whole nodes among them
        assert sum(j.devices == shape.per_node for j in jobs) >= 40  # about a quarter and more
        assert all(10 <= j.seconds <= 120 for j in jobs)
    a100 = next(iter(first(37)[0]))
    opts = a100.options()
    assert opts[opts.index("--gres=gpu:a100-80gb:" + str(a100.devices)) - 1] == "1"  # one node
    assert opts[opts.index("-o") + 1] == "/dev/null"


def test_sample_instants_are_seeded_sorted_and_in_the_window() -> None:
    got = bench().sample_instants(37, 40, 75.0, 720.0)
    assert got == bench().sample_instants(37, 40, 75.0, 720.0) == sorted(got)
    assert len(got) == 40 and all(75.0 <= t <= 795.0 for t in got)


def reading(t: float, free: dict[str, dict[str, int]], jobs: list[tuple[set[str], int]]) -> Any:
    return bench().Reading(t, t + 0.2, free, jobs)


def test_a_difference_the_exporters_older_read_explains_is_staleness() -> None:
    waiting = [({A100}, 2)]
    before = reading(100.0, {A100: {"a100-01": 1, "a100-02": 1}}, waiting)  # both fragmented
    after = reading(104.0, {A100: {"a100-01": 1, "a100-02": 3}}, waiting)  # a job ended on 02
    exp = {A100: (2.0, 2.0)}  # read at 100.1, its round (the queue) ended at 99.5
    assert not bench().matches(bench().compare(exp, bench().recount(after.free, after.jobs)))
    assert bench().explain(exp, [before, after], free_at=100.1, queue_at=99.5) == (-0.1, 0.5)
    # the same figures with no reading near the exporter's read: not explained
    assert bench().explain(exp, [after], free_at=100.1, queue_at=99.5) is None
    # figures no reading ever gave: not explained
    assert bench().explain({A100: (2.0, 1.0)}, [before, after], free_at=100.1, queue_at=99.5) is None
    assert bench().explain(exp, [before], free_at=None, queue_at=99.5) is None


def row(verdict: str, diffs: dict[str, float], frag: int = 0) -> dict[str, Any]:
    return {"verdict": verdict, "brute_force": {p: (4, frag) for p in diffs},
            "per_pool": {p: {"free": 0.0, "fragmented": d, "ratio": d / 4} for p, d in diffs.items()}}


def test_the_summary_figures() -> None:
    rows = [row("exact", {A100: 0, "h100@x86_64": 0}, frag=2)] * 8 + [
        row("staleness", {A100: 2, "h100@x86_64": 0}), row("unexplained", {A100: 1, "h100@x86_64": 3})]
    s = bench().summarize(rows)
    assert (s["samples"], s["pool_samples"], s["pool_samples_exact"]) == (10, 20, 17)
    assert s["pools"] == [A100, "h100@x86_64"]
    assert (s["samples_exact"], s["samples_differing"]) == (8, 2)
    assert (s["differing_explained_by_staleness"], s["differing_not_explained"]) == (1, 1)
    assert s["samples_with_fragmentation"] == 8 and s["fragmented_devices_seen_max"] == 2
    assert s["fragmented"]["max_abs_diff"] == 3
    assert s["fragmented"]["p90_abs_diff"] == 1  # 18th of 20 sorted: 17 zeros, 1, 2, 3
    assert s["fragmented"]["p90_worst_pool_abs_diff"] == 2  # 9th of 10: 8 zeros, 2, 3
    assert bench().summarize([])["samples"] == 0
