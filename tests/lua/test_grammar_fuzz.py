"""The C-vs-Lua grammar fuzzer, briefly and with a fixed seed (longer by hand:
`python -m tests.lua.grammar_fuzz --seconds 600`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurm_hetero.conf.bridge import bridge_source
from tests.lua import grammar_cases as G
from tests.lua import grammar_fuzz as F

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("gcc") is None,
                                reason="needs make and gcc to build spank/build/libhetero_opts.so")


@pytest.fixture(scope="module")
def lib() -> Path:
    return F.build_lib()


def test_the_ctypes_binding_reads_the_case_file_like_test_opts(lib: Path) -> None:
    c = F.CGrammar(lib)
    wrong = [f"{case.line}: {problem}" for case in G.load()
             if (problem := G.mismatch(case, c.parse(case.option, case.value, case.lists)[0]))]
    assert not wrong


def test_c_and_lua_agree_on_fuzzed_values(lib: Path) -> None:
    report = F.run(seconds=3, seed=20240601, lib=lib)
    print(f"grammar fuzz: {report}")
    assert report.executions > 2000 and report.accepted > 100
    assert not report.disagreements, "\n".join(report.disagreements[:20])


@pytest.mark.parametrize(("change", "finds"), [
    (("local MAX_DECIMALS = 3", "local MAX_DECIMALS = 4"), "accel"),
    (("local MAX_COUNT = 1024", "local MAX_COUNT = 1023"), "accel"),
    (("local MAX_TAG_LEN = 128", "local MAX_TAG_LEN = 129"), "image"),
    (('"^[a-z][a-z0-9_%-]*$"', '"^[a-z][a-z0-9_%-%.]*$"'), "energy"),
])
def test_the_fuzzer_finds_a_drifted_limit(lib: Path, change: tuple[str, str], finds: str) -> None:
    source = bridge_source()
    assert change[0] in source
    report = F.run(seconds=20, seed=7, max_execs=40_000, lib=lib, bridge=source.replace(*change))
    assert any(f"\n{finds} " in d for d in report.disagreements), report
