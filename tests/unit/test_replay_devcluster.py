"""The dev cluster's replay options, without booting it: which daemons a workdir's
cluster.json implies, the clients' clock, and replay's fresh workdirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.replay import MARK, DevReplayCluster
from slurm_hetero.errors import InputError

DEFAULT = ["munged", "mariadb", "slurmdbd", "slurmctld", "bridge", "bridge supervisor", "slurmd n1"]


def meta(tmp: Path, **extra: object) -> Cluster:
    (tmp / "cluster.json").write_text(json.dumps({"site": "x", "nodes": ["n1"], **extra}))
    return Cluster(tmp)


def test_default_cluster_is_unchanged(tmp_path: Path) -> None:
    c = meta(tmp_path)
    assert [d.name for d in c.daemons()] == DEFAULT
    assert c.clock() is None and c.runner.extra_env == {}


def test_replay_cluster_has_a_clock_first_and_may_leave_the_bridge_out(tmp_path: Path) -> None:
    c = meta(tmp_path, clock={"speed": 20.0, "offset_s": 0}, bridge=False)
    assert [d.name for d in c.daemons()] == ["clock", "munged", "mariadb", "slurmdbd", "slurmctld", "slurmd n1"]
    assert c.clock() is not None and c.clock().speed == 20.0  # type: ignore[union-attr]
    assert c.runner.extra_env == {}  # no holder running: clients stay on real time
    # A clock file whose holder is gone is not joined: a process joining a removed shared
    # clock would silently start one of its own.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "clock.json").write_text(json.dumps({"FAKETIME": "+0 x20", "FAKETIME_SHARED": "/a /b"}))
    assert "FAKETIME_SHARED" not in Cluster(tmp_path).runner.env()


def test_replay_refuses_a_workdir_it_did_not_make_and_empties_its_own(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious").write_text("x")
    with pytest.raises(InputError, match="not made by replay"):
        DevReplayCluster(other)._fresh()
    assert (other / "precious").exists()
    mine = tmp_path / "mine"
    DevReplayCluster(mine)._fresh()
    (mine / "leftover").write_text("x")
    DevReplayCluster(mine)._fresh()
    assert sorted(p.name for p in mine.iterdir()) == [MARK]


def test_a_workdir_too_deep_for_slurmstepds_sockets_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """Under pytest-xdist a replay's workdir once came to 111 characters of step socket path:
    every job failed to launch and was requeued, pending for ever. Now `up` says so first."""
    from slurm_hetero.cliutil import DEMO_SITE
    from slurm_hetero.site import load_site

    deep = tmp_path / ("d" * (120 - len(str(tmp_path))))
    with pytest.raises(InputError, match=r"too deep for a dev cluster: its step sockets would be \d+ characters"):
        Cluster(deep).up(load_site(DEMO_SITE))
    assert not deep.exists()  # refused before any folder was made
