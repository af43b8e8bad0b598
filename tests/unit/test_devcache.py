"""The Prolog's device cache: the agent writes it, the TaskProlog and the container wrapper
read it, and believe it only as root's file for this very job; anything else asks slurmctld
(and says so), as before the cache."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.containers import devcache as reader
from slurm_hetero.containers import gres
from slurm_hetero.energy import agent
from slurm_hetero.energy import devcache as writer
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.energy.state import AgentConfig, NodeState
from slurm_hetero.site.policies import DEFAULT_POLICIES, AutoRule
from tests.unit.test_agent_trust import Scontrol
from tests.unit.test_container_gres import answer_with

DATA = Path(__file__).resolve().parents[1] / "data"
ME = os.getuid()  # the owner these tmp files have; the readers are told to expect it
RECORD = "     Nodes=npu-01 CPU_IDs=0 Mem=1 GRES=npu:910b:2(IDX:6-7)\n"


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    """A node's state folder as the agent keeps it (0755), with job 7's cache for npu-01."""
    d = tmp_path / "agent" / "npu-01"
    d.mkdir(parents=True)
    d.chmod(0o755)
    writer.write_cache(d, "7", "npu-01", {"npu": [3, 4], "gpu": []}, {"npu3": "pci:0000:c1:00.0", "npu4": None})
    return d


def test_round_trip_and_file_shape(folder: Path) -> None:
    f = folder / "devices-7.json"
    assert (f.stat().st_mode & 0o777) == 0o644
    assert json.loads(f.read_text())["identity"] == {"npu3": "pci:0000:c1:00.0", "npu4": None}
    assert reader.read_cache(str(folder), "7", "npu-01", owner=ME) == {"npu": [3, 4]}
    assert writer.folder_problem(folder) is None or ME != 0


def plant(folder: Path, doc: Any) -> None:
    (folder / "devices-7.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    (folder / "devices-7.json").chmod(0o644)


GOOD = {"format": 1, "job": "7", "node": "npu-01", "devices": {"npu": [3, 4]}}


@pytest.mark.parametrize(("damage", "why"), [
    ("owner", "owned by uid"),
    ("file-symlink", "devices-7.json: Too many levels of symbolic links"),
    ("folder-symlink", "link: Not a directory"),  # O_DIRECTORY|O_NOFOLLOW on a link
    ("file-group-writable", "is writable by others (mode 664)"),
    ("file-other-writable", "is writable by others (mode 646)"),
    ("folder-group-writable", "is writable by others (mode 775)"),
    ("fifo", "is not a regular file"),
    ("other-job", "the cache is for job '8' on 'npu-01', not job 7 on npu-01"),
    ("other-node", "the cache is for job '7' on 'npu-02'"),
    ("malformed-json", "not valid JSON"),
    ("not-utf8", "not valid JSON"),
    ("not-an-object", "not a format-1 object"),
    ("negative-index", "malformed at 'npu'"),
    ("bool-index", "malformed at 'npu'"),
    ("string-indices", "malformed at 'npu'"),
    ("odd-gres-name", "malformed at 'npu\\n'"),
    ("huge", "is over 65536 bytes"),
    ("missing", "devices-7.json: No such file or directory"),
])
def test_an_untrusted_cache_is_not_used(folder: Path, damage: str, why: str) -> None:
    target, owner = folder, ME
    f = folder / "devices-7.json"
    if damage == "owner":
        owner = ME + 4242  # as if a user (not the expected root) owned folder and file
    elif damage == "file-symlink":
        other = folder / "devices-8.json"
        writer.write_cache(folder, "8", "npu-01", {"npu": [0, 1, 2, 3, 4, 5, 6, 7]}, {})
        f.unlink()
        f.symlink_to(other)
    elif damage == "folder-symlink":
        target = folder.parent / "link"
        target.symlink_to(folder)
    elif damage == "file-group-writable":
        f.chmod(0o664)
    elif damage == "file-other-writable":
        f.chmod(0o646)
    elif damage == "folder-group-writable":
        folder.chmod(0o775)
    elif damage == "fifo":
        f.unlink()
        os.mkfifo(f, 0o644)
    elif damage == "other-job":
        plant(folder, {**GOOD, "job": "8"})
    elif damage == "other-node":
        plant(folder, {**GOOD, "node": "npu-02"})
    elif damage == "malformed-json":
        plant(folder, '{"format": 1, "job": "7", ')
    elif damage == "not-utf8":
        f.write_bytes(b'{"format": 1, "job": "7\xff"}')
    elif damage == "not-an-object":
        plant(folder, [GOOD])
    elif damage == "negative-index":
        plant(folder, {**GOOD, "devices": {"npu": [-1]}})
    elif damage == "bool-index":
        plant(folder, {**GOOD, "devices": {"npu": [True]}})
    elif damage == "string-indices":
        plant(folder, {**GOOD, "devices": {"npu": "0-7"}})
    elif damage == "odd-gres-name":
        plant(folder, {**GOOD, "devices": {"npu\n": [0]}})
    elif damage == "huge":
        plant(folder, {**GOOD, "pad": "x" * 70_000})
    elif damage == "missing":
        f.unlink()
    with pytest.raises(reader.CacheUnusable, match=re.escape(why)):
        reader.read_cache(str(target), "7", "npu-01", owner=owner)


def test_a_job_id_that_is_not_a_number_reads_nothing(folder: Path) -> None:
    with pytest.raises(reader.CacheUnusable, match="not a number"):
        reader.read_cache(str(folder), "../npu-01/devices-7", "npu-01", owner=ME)


def containers_conf(tmp_path: Path, state_dir: Path) -> str:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "hetero-agent.json").write_text(json.dumps({"state_dir": str(state_dir)}))
    return str(etc / "hetero-containers.json")


def test_the_cache_spares_slurmctld(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, folder: Path) -> None:
    calls, said = answer_with(monkeypatch, RECORD), list[str]()
    conf = containers_conf(tmp_path, folder.parent)
    # The job's environment cannot move the cache: only the config beside --conf names it.
    monkeypatch.setenv("SLURM_HETERO_AGENT", "/nonexistent/hetero-agent.json")
    monkeypatch.setenv("SLURM_HETERO_NODE_DIR", "/nonexistent")
    got = gres.cached_allocation("7", "npu-01", conf, None, said.append, owner=ME)
    assert got == ({"npu": [3, 4]}, "cache") and calls == [] and said == []


@pytest.mark.parametrize("damage", ["owner", "group-writable", "other-job", "malformed", "missing", "no-config"])
def test_no_trusted_cache_asks_slurmctld_and_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     folder: Path, damage: str) -> None:
    calls, said = answer_with(monkeypatch, RECORD), list[str]()
    conf = containers_conf(tmp_path, folder.parent)
    owner = ME + 4242 if damage == "owner" else ME
    if damage == "group-writable":
        (folder / "devices-7.json").chmod(0o664)
    elif damage == "other-job":
        plant(folder, {**GOOD, "job": "8"})
    elif damage == "malformed":
        plant(folder, "{")
    elif damage == "missing":
        (folder / "devices-7.json").unlink()
    elif damage == "no-config":
        os.unlink(Path(conf).parent / "hetero-agent.json")
    got = gres.cached_allocation("7", "npu-01", conf, None, said.append, owner=owner)
    assert got == ({"npu": [6, 7]}, "slurmctld")
    assert [c[:4] for c in calls] == [["scontrol", "show", "job", "-d"]]
    assert len(said) == 1 and said[0].startswith("job 7: no usable device cache from the Prolog (")
    assert said[0].endswith("); asking slurmctld")


def test_a_node_name_cannot_leave_the_state_folder(tmp_path: Path) -> None:
    conf = containers_conf(tmp_path, tmp_path / "agent")
    assert reader.cache_folder(conf, "npu-01") == str(tmp_path / "agent" / "npu-01")
    for node in ("../etc", "..", ""):
        with pytest.raises(reader.CacheUnusable):
            reader.cache_folder(conf, node)


# ---- the agent writes it in the prolog and removes it in the epilog ---------------------------

def agent_config(tmp_path: Path) -> AgentConfig:
    FakeDevices.create(tmp_path / "npu.json", "npu", 8, "910b")
    return AgentConfig(state_dir=tmp_path / "agent", history=tmp_path / "agent/history.jsonl",
                       groups=[{"nodes": "npu-0[1-2]", "devices": f"fake:{tmp_path}/npu.json"}],
                       policies={p.name: p for p in DEFAULT_POLICIES}, auto=AutoRule(), update_comment=False,
                       gres_conf=tmp_path / "gres.conf")


def test_prolog_writes_the_cache_and_epilog_removes_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(agent, "SLURM", Scontrol((DATA / "containers/scontrol-job-d-npu-2nodes-22.05.txt").read_text()))
    monkeypatch.setattr(os, "environ", {})  # no slurmd environment: everything from the record
    cfg = agent_config(tmp_path)
    (tmp_path / "gres.conf").write_text("NodeName=npu-0[1-2] Name=npu Type=910b File=/dev/davinci[0-7]\n")
    agent.prolog(cfg, "12", "npu-01")
    st = NodeState(cfg, "npu-01")
    doc = json.loads((st.dir / "devices-12.json").read_text())
    assert (doc["job"], doc["node"], doc["devices"]) == ("12", "npu-01", {"npu": [3, 4]})
    assert set(doc["identity"]) == {"npu3", "npu4"}  # what each index matched (None: refused)
    assert (st.dir.stat().st_mode & 0o777) == 0o755
    assert reader.read_cache(str(st.dir), "12", "npu-01", owner=ME) == {"npu": [3, 4]}
    agent.epilog(cfg, "12", "npu-01")
    assert not (st.dir / "devices-12.json").exists()


def test_prolog_that_cannot_read_the_record_leaves_no_cache(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    """A stale cache under the same job id (a reset slurmctld reuses ids) is removed before
    anything else, so a prolog that fails leaves the readers asking slurmctld."""
    monkeypatch.setattr(agent, "SLURM", Scontrol((DATA / "captured/scontrol-job-d-injected-22.05.txt").read_text()))
    cfg = agent_config(tmp_path)
    st = NodeState(cfg, "npu-01")
    writer.write_cache(st.dir, "1", "npu-01", {"npu": list(range(8))}, {})
    with pytest.raises(Exception, match="detail lines name node npu-01"):
        agent.prolog(cfg, "1", "npu-01")
    assert not (st.dir / "devices-1.json").exists()


def test_restore_drops_the_caches_of_gone_jobs(tmp_path: Path) -> None:
    cfg = agent_config(tmp_path)
    st = NodeState(cfg, "npu-01")
    for job in ("5", "6"):
        (st.job_file(job)).write_text(json.dumps({"job": job, "devices": [{"kind": "npu", "idx": 0}]}))
        writer.write_cache(st.dir, job, "npu-01", {"npu": [0]}, {})
    writer.write_cache(st.dir, "9", "npu-01", {"npu": [1]}, {})  # no record: a prolog stopped midway
    old = 1_000_000_000
    os.utime(st.dir / "devices-9.json", (old, old))
    agent.restore(cfg, "npu-01", lambda job: job == "6")
    assert sorted(p.name for p in st.dir.glob("devices-*.json")) == ["devices-6.json"]
