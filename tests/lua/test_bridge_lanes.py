"""`long_jobs:` lanes: the bridge moves jobs predicted long to a partition on part of the
nodes, the others staying for shorter jobs (real job_submit.lua, Lua 5.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.errors import InputError
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.comment import parse_comment
from tests.lua.conftest import DEMO
from tests.lua.test_bridge_predict import fresh_snapshot
from tests.predict_fixture import export_model

LANE_CPUS = 2 * 128  # the lane: cpu-x86-[01-02]; the demo's two ARM CPU nodes stay for short jobs


def laned(tmp_path: Path, change: Any = None) -> Path:
    """The demo site with a lane `cpu_long` on its x86 CPU nodes for the cpu partition's jobs
    over an hour."""
    data = yaml.safe_load(DEMO.read_text())
    data["partitions"][0]["long_jobs"] = {"partition": "cpu_long", "over": "1:00:00"}
    data["partitions"].append({"name": "cpu_long", "max_time": "2-00:00:00", "predicted_limits": True})
    data["node_groups"][0]["partitions"].append("cpu_long")
    if change:
        change(data)
    path = tmp_path / "laned.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def lane_site(tmp_path: Path) -> Site:
    return load_site(laned(tmp_path))


def bridge(site: Site, tmp_path: Path, model: bool = True) -> JobSubmit:
    chunk = export_model(tmp_path / "m.lua", limit="central").read_text() if model else None
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path), model_lua=chunk))["job_submit.lua"])
    js.state = tmp_path  # type: ignore[attr-defined]
    fresh_snapshot(js, site)
    return js


def test_the_lane_is_rendered_with_its_capacity(lane_site: Site) -> None:
    files = render_site(lane_site, Profile())
    cpus = sum(g.node_count * g.cpus for g in lane_site.node_groups if "cpu_long" in g.partitions)
    assert cpus == LANE_CPUS
    assert f'["cpu"] = {{ to = "cpu_long", over_s = 3600, max_cpus = {cpus} }}' in files["job_submit.lua"]
    line = next(x for x in files["slurm.conf"].splitlines() if x.startswith("PartitionName=cpu_long "))
    assert "Nodes=cpu-x86-[01-02] " in line


def test_a_job_predicted_long_runs_in_the_lane_and_a_short_one_stays(lane_site: Site, tmp_path: Path) -> None:
    js = bridge(lane_site, tmp_path)
    # user003 (tests/predict_fixture.py): a p90 of hours for a 10-hour request
    rc, desc = js.submit(user_name="user003", time_limit=600, min_cpus=4)
    d = parse_comment(desc["admin_comment"])
    assert rc == 0 and d["pred"]["p90"] > 3600 and desc["partition"] == "cpu_long" and d["lane"] == "cpu_long"
    # root's jobs run 20 s, whatever they ask: not long, they keep the whole node
    rc, desc = js.submit(user_name="root", time_limit=600, min_cpus=4)
    d = parse_comment(desc["admin_comment"])
    assert rc == 0 and d["pred"]["p90"] <= 3600 and "partition" not in desc and "lane" not in d
    # bigger than the lane could ever hold: it stays where it could start
    rc, desc = js.submit(user_name="user003", time_limit=600, min_cpus=LANE_CPUS + 1)
    assert rc == 0 and "partition" not in desc and "lane" not in parse_comment(desc["admin_comment"])
    # a partition without a lane, named by the user: left alone
    rc, desc = js.submit(user_name="user003", time_limit=600, min_cpus=4, partition="gpu")
    assert rc == 0 and desc["partition"] == "gpu"
    # a list: the source becomes its lane, once
    rc, desc = js.submit(user_name="user003", time_limit=600, min_cpus=4, partition="cpu,cpu_long")
    assert rc == 0 and desc["partition"] == "cpu_long"


def test_without_a_model_the_users_limit_decides(lane_site: Site, tmp_path: Path) -> None:
    js = bridge(lane_site, tmp_path, model=False)
    got = {}
    for minutes in (61, 60, 4294967294):  # NO_VAL: the partition's default, an hour
        rc, desc = js.submit(user_name="user003", time_limit=minutes, min_cpus=2)
        assert rc == 0, js.logs
        got[minutes] = desc.get("partition")
    assert got == {61: "cpu_long", 60: None, 4294967294: None}


def test_a_user_cannot_take_a_job_out_of_its_lane(lane_site: Site, tmp_path: Path) -> None:
    js = bridge(lane_site, tmp_path, model=False)
    rc, desc = js.modify({"partition": "cpu"}, uid=1000, rec={"partition": "cpu_long"})
    assert (rc, desc["partition"]) == (0, "cpu_long")
    rc, desc = js.modify({"partition": "gpu,cpu"}, uid=1000, rec={"partition": "cpu_long"})
    assert (rc, desc["partition"]) == (0, "gpu,cpu_long")
    # a job not in a lane, and root (an admin's decision): as asked
    assert js.modify({"partition": "cpu"}, uid=1000, rec={"partition": "gpu"})[1]["partition"] == "cpu"
    assert js.modify({"partition": "cpu"}, uid=0, rec={"partition": "cpu_long"})[1]["partition"] == "cpu"


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["partitions"][0]["long_jobs"].update(partition="nope"), "is not another partition"),
    (lambda d: d["partitions"][0]["long_jobs"].update(partition="cpu"), "is not another partition"),
    (lambda d: d["partitions"][3].update(long_jobs={"partition": "gpu", "over": "2:00:00"}),
     "has a long_jobs lane of its own"),
    (lambda d: d["partitions"][1].update(long_jobs={"partition": "cpu_long", "over": "2:00:00"}),
     "already the long_jobs lane of 'cpu'"),
    (lambda d: d["partitions"][0]["long_jobs"].update(over="0"), "is not a duration"),
    (lambda d: d["partitions"][0]["long_jobs"].update(when="1:00:00"), "when"),
    (lambda d: d["partitions"][3].update(options={"MaxCPUsPerNode": 120}), "fewer nodes instead"),
])
def test_a_bad_lane_is_refused_naming_its_field(tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(InputError, match=message) as e:
        load_site(laned(tmp_path, change))
    assert "long_jobs" in str(e.value)
