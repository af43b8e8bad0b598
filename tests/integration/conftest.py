"""One real demo cluster per test session (munged, MariaDB, slurmdbd, slurmctld, 11 slurmd)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import alive, processes_under, read_pid
from slurm_hetero.site import Site, load_site

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"


def assert_nothing_left(c: Cluster) -> None:
    for d in c.daemons():
        assert not alive(read_pid(d.pidfile), d.expect), f"{d.name} still running"
    left = [p for p in processes_under(c.workdir)
            if "slurm" in Path(f"/proc/{p}/comm").read_text(errors="replace")]
    assert left == [], [_describe(p) for p in left]


def _describe(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return f"{pid} {cmd} (ppid {Path(f'/proc/{pid}/stat').read_text().split()[3]})"
    except OSError:
        return f"{pid} (gone)"


@pytest.fixture(scope="session")
def demo_site() -> Site:
    return load_site(DEMO)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, demo_site: Site) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("demo"))
    try:
        c.up(demo_site, timeout=120)
        yield c
    finally:
        c.down(log=lambda *_: None)
    assert_nothing_left(c)
