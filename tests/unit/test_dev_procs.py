"""A pidfile's pid is a cluster's daemon only while the process belongs to that cluster's
folder: pids wrap (32768 here) and a stale pidfile may name another cluster's daemon of the
same name, which `down` must never stop (seen: a soak's slurmctld, slurmd and slurmdbd
SIGTERMed while another workdir was taken down)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from slurm_hetero.devcluster import procs
from slurm_hetero.devcluster.cluster import Cluster


def _sleeper(cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=cwd)


def test_a_process_belongs_to_the_folder_it_runs_in(tmp_path: Path) -> None:
    mine, other = tmp_path / "mine", tmp_path / "mine-2"
    mine.mkdir()
    other.mkdir()
    p = _sleeper(mine)
    try:
        # (the child's cwd is set between fork and exec: wait for it)
        assert procs.wait_until(lambda: procs.owned_by(p.pid, mine), 10.0, 0.05)
        assert not procs.owned_by(p.pid, other)  # a sibling whose name starts the same
    finally:
        p.kill()
        p.wait()


def test_a_stale_pidfile_naming_another_clusters_daemon_is_not_ours(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    theirs.mkdir()
    c = Cluster(ours)
    d = c.daemon("slurmctld")
    assert d is not None
    # Another cluster's daemon of the same name, whose pid our stale pidfile happens to hold.
    p = subprocess.Popen([sys.executable, "-c", f"import time  # {d.expect}\ntime.sleep(60)"], cwd=theirs)
    try:
        d.pidfile.parent.mkdir(parents=True, exist_ok=True)
        d.pidfile.write_text(f"{p.pid}\n")
        # the name alone matches (once the child has exec'd: its command line is python's then)
        assert procs.wait_until(lambda: procs.alive(p.pid, d.expect), 10.0, 0.05)
        assert c.pid(d) is None  # but it is not this cluster's
        c.down(log=lambda *_: None)
        assert p.poll() is None  # and `down` left it running
    finally:
        p.kill()
        p.wait()


def test_down_stops_a_slurm_daemon_no_pidfile_names_but_only_its_own_clusters(tmp_path: Path) -> None:
    """A slurmctld outlived a replay array task's `down` once (on CI, parent pid 1, its folder
    gone): `down` now also stops any Slurm, munge or MariaDB process whose cwd or files lie in
    the cluster's folder, as slurmctld's cwd (its log folder) does, and nothing else."""
    ours, theirs, bin_ = tmp_path / "ours", tmp_path / "theirs", tmp_path / "bin"
    for d in (ours / "log", theirs / "log", bin_):
        d.mkdir(parents=True)
    (bin_ / "slurmctld").symlink_to("/bin/sleep")  # comm is the name exec'd: "slurmctld"
    stray = subprocess.Popen([str(bin_ / "slurmctld"), "60"], cwd=ours / "log", start_new_session=True)
    other = subprocess.Popen([str(bin_ / "slurmctld"), "60"], cwd=theirs / "log", start_new_session=True)
    plain = subprocess.Popen(["/bin/sleep", "60"], cwd=ours / "log", start_new_session=True)
    try:
        assert procs.wait_until(lambda: all(procs.command_name(p.pid) == want and procs.is_under(p.pid, d)
                                            for p, want, d in ((stray, "slurmctld", ours),
                                                               (other, "slurmctld", theirs), (plain, "sleep", ours))),
                                10.0, 0.05)
        said: list[str] = []
        stopped = Cluster(ours).down(log=said.append)
        assert stray.wait(10) == -9 and f"leftover {stray.pid}" in stopped
        assert any(f"left running, stopped: {stray.pid} " in s for s in said), said
        assert other.poll() is None and plain.poll() is None  # another cluster's; not a Slurm process
    finally:
        for p in (stray, other, plain):
            p.kill()
            p.wait()
