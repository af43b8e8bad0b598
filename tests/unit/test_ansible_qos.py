"""The role's QoS module compares what accounting shows with what qos.sacctmgr asks, in
sacctmgr's own spellings (unit level; tests/integration/test_ansible.py runs the role)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def qos_module() -> ModuleType:
    path = ROOT / "ansible" / "roles" / "slurm_hetero" / "library" / "slurm_hetero_qos.py"
    spec = importlib.util.spec_from_file_location("slurm_hetero_qos", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["slurm_hetero_qos"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_tres_lists_compare_as_sets_in_sacctmgrs_order() -> None:
    m = qos_module()
    # What 22.05's `sacctmgr show qos format=GrpTRES` printed for the demo's diamond tier.
    shown = "cpu=636,gres/gpu:a100-80gb=4,gres/gpu:gh200=1,gres/gpu:h100=4,gres/gpu:v100=2,gres/gpu=11,gres/npu:910b=8,gres/npu=8"
    asked = next(ln for ln in (ROOT / "tests/data/golden/qos.sacctmgr").read_text().splitlines()
                 if "GrpTRES=" in ln).split("GrpTRES=", 1)[1]
    assert m.same("GrpTRES", shown, asked)
    assert not m.same("GrpTRES", shown.replace("gres/gpu:h100=4", "gres/gpu:h100=3"), asked)
    assert m.same("GraceTime", "00:01:00", "60") and m.same("PreemptExemptTime", "00:02:00", "00:02:00")


def test_the_rendered_script_parses() -> None:
    m = qos_module()
    want = m.parse_script((ROOT / "tests/data/golden/qos.sacctmgr").read_text())
    assert want["qos"]["silver"]["GraceTime"] == "60"
    assert "GrpTRES" in want["qos"]["diamond"]
