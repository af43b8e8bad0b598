"""The parsers of benchmarks/bridge_throughput.py, on output captured from this cluster's
Slurm 22.05 and valgrind 3.19."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests import benchmark

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"


def bench() -> ModuleType:
    return benchmark.load("bridge_throughput")


def test_allocate_usec_reads_each_submission_line_and_nothing_else() -> None:
    log = (CAPTURED / "slurmctld-submit-22.05.log").read_text()
    got = bench().allocate_usec(log)
    assert got == {1: 540, 2: 557, 3: 665, 4: 4415, 5: 1202}


def test_callgrind_inclusive_picks_the_named_functions() -> None:
    text = (CAPTURED / "callgrind-annotate-sbatch-22.05.txt").read_text()
    got = bench().callgrind_inclusive(text, ["PROGRAM TOTALS", "setenvfs", "spank_option_table_create",
                                             "spank_init_allocator", "slurm_spank_init", "no_such_function"])
    assert got == {"PROGRAM TOTALS": 20_006_479, "setenvfs": 799_860, "spank_option_table_create": 131_654,
                   "spank_init_allocator": 86_264, "slurm_spank_init": 17_887, "no_such_function": 0}
