"""The dev cluster's port registry (devcluster/procs.free_ports): clusters booting at once on
one machine never get the same port."""

from __future__ import annotations

import json
import random
from pathlib import Path

from slurm_hetero.devcluster import procs


def test_callers_never_share_a_port_until_it_is_released(tmp_path: Path) -> None:
    folder = tmp_path / "ports"
    # The same seed twice: without the registry both callers would draw the same ports.
    a = procs.free_ports(10, folder, now=1000.0, rng=random.Random(7))
    b = procs.free_ports(10, folder, now=1001.0, rng=random.Random(7))
    assert len(set(a)) == 10 and len(set(b)) == 10 and not set(a) & set(b)
    lo, hi = procs.PORT_RANGE
    assert all(lo <= p < hi for p in a + b)  # below the kernel's ephemeral range
    held = json.loads((folder / "ports.json").read_text())
    assert set(map(int, held)) == set(a) | set(b)
    # Past PORT_HOLD_S the first caller's ports may be handed out again (its daemons bound them).
    c = procs.free_ports(10, folder, now=1000.0 + procs.PORT_HOLD_S + 0.5, rng=random.Random(7))
    assert c == a
    assert set(map(int, json.loads((folder / "ports.json").read_text()))) == set(b) | set(c)


def test_a_folder_others_may_write_is_not_trusted(tmp_path: Path) -> None:
    folder = tmp_path / "open"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    ports = procs.free_ports(3, folder, rng=random.Random(1))
    assert len(set(ports)) == 3 and not (folder / "ports.json").exists()  # the kernel's choice
    (tmp_path / "bad").mkdir(mode=0o700)
    (tmp_path / "bad" / "ports.json").write_text("[not json")  # a torn registry: start afresh
    assert len(procs.free_ports(2, tmp_path / "bad", rng=random.Random(1))) == 2
