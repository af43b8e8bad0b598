"""One real demo cluster per test session (munged, MariaDB, slurmdbd, slurmctld, 11 slurmd),
and an unprivileged local user whose Slurm commands run as that user.

The session's folder is not pytest's (pytest keeps that 0700, and resets it at the start
of every session): jobs of other users than root must reach the cluster's files."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.containers.bundle import busybox_variants
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import alive, processes_under, read_pid
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"
TEST_USER = "hetero-user"  # a system user (no home, no shell), made when missing and kept


# The files that take longest, longest first (`make test`'s --durations, CI on 2 cores).
# xdist hands a worker a file at a time in collection order (--no-loadscope-reorder), so
# starting these first keeps one of them from being the last thing a run waits for.
SLOWEST_FIRST = ("test_replay.py", "test_ansible.py", "test_predict.py", "test_replay_array.py",
                 "test_soak.py", "test_energy.py", "test_security.py", "test_checkpoint.py",
                 "test_power.py", "test_foreign_site.py", "test_preempt.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    # sort is stable: the tests of a file keep their order, unlisted files theirs
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))


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
def session_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A folder every user can search (0755, root's): the cluster and users' homes in it.
    Removed at the end unless a test failed (its logs help then)."""
    top = Path(tempfile.mkdtemp(prefix="slurm-hetero-test-"))
    os.chmod(top, 0o755)
    yield top
    if request.session.testsfailed:
        print(f"\nthe test cluster's folder is kept: {top}")
    else:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(session_dir: Path, demo_site: Site) -> Iterator[Cluster]:
    c = Cluster(session_dir / "demo")
    try:
        c.up(demo_site, timeout=120)
        yield c
    finally:
        c.down(log=lambda *_: None)
    assert_nothing_left(c)


@dataclass
class UserRunner(Runner):
    """The cluster's runner with every command run as `user`, in `cwd` (runuser: an argv,
    never a shell; the environment, SLURM_CONF included, passes through)."""

    user: str = ""
    cwd: str = "/"

    def prefix(self) -> list[str]:
        return ["runuser", "-u", self.user, "--", "env", "-C", self.cwd]

    def run(self, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        return super().run([*self.prefix(), *argv], **kw)


@dataclass
class SlurmUser:
    """An unprivileged local user of the test cluster (in its account, like root)."""

    name: str
    uid: int
    gid: int
    home: Path  # its own folder (0700): job scripts, work dirs, outputs
    runner: UserRunner = field(repr=False)

    def folder(self, prefix: str = "t") -> Path:
        """A new folder of the user's own, for one test's files."""
        d = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=self.home))
        os.chown(d, self.uid, self.gid)
        return d

    def command(self, argv: Sequence[str | bytes]) -> list[str | bytes]:
        """argv as this user, for subprocess itself (elements may be bytes: Slurm takes
        text that is not UTF-8 too)."""
        return [*self.runner.prefix(), *argv]


@pytest.fixture(scope="session")
def slurm_user(cluster: Cluster, session_dir: Path) -> SlurmUser:
    pw = cluster.add_user(TEST_USER)
    home = session_dir / "home" / TEST_USER
    home.mkdir(parents=True)
    os.chmod(home.parent, 0o755)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    os.chmod(home, 0o700)
    runner = UserRunner(slurm_conf=cluster.runner.slurm_conf, timeout=cluster.runner.timeout,
                        extra_env=dict(cluster.runner.extra_env), user=TEST_USER, cwd=str(home))
    return SlurmUser(TEST_USER, pw.pw_uid, pw.pw_gid, home, runner)


@pytest.fixture(scope="session")
def images(cluster: Cluster, demo_site: Site) -> Path:
    """A busybox bundle for every variant of the demo catalog, where the wrapper looks."""
    root = cluster.workdir / "images"
    busybox_variants(demo_site, str(root))
    return root
