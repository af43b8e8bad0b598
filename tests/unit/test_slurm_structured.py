"""Reading Slurm where user text cannot pose as structure: the strict `scontrol show job`
parser, `squeue --json`, and the stdlib hostlist — on output captured from Slurm 22.05,
including jobs whose comment or name imitate slurmctld's lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hetero.slurm import hostlist
from slurm_hetero.slurm.scontrol import (
    AmbiguousRecord,
    parse_id_list,
    parse_job_devices,
    parse_job_record,
    show_job_argv,
)
from slurm_hetero.slurm.squeue import parse_job, parse_squeue_json

DATA = Path(__file__).resolve().parents[1] / "data"


def captured(name: str) -> str:
    return (DATA / "captured" / name).read_text()


def containers(name: str) -> str:
    return (DATA / "containers" / f"scontrol-job-d-{name}-22.05.txt").read_text()


@pytest.mark.parametrize(("name", "node", "expected"), [
    ("gpu", "a100-01", {"gpu": [2, 3]}),
    ("npu-2nodes", "npu-01", {"npu": [3, 4]}),
    ("npu-2nodes", "npu-02", {"npu": [0, 1]}),
    ("npu-hostlist", "npu-02", {"npu": [0, 1]}),
    ("shard", "v100-01", {"shard": [0]}),
    ("cpu", "cpu-arm-01", {}),
    ("gpu", "a100-02", {}),  # a node outside the job
])
def test_devices_from_captured_records(name: str, node: str, expected: dict[str, list[int]]) -> None:
    assert parse_job_devices(containers(name), node) == expected


def test_a_comment_with_a_fake_detail_line_makes_the_record_ambiguous() -> None:
    # Job 1 holds npu 0; its name and comment each add a line claiming IDX:0-7.
    text = captured("scontrol-job-d-injected-22.05.txt")
    assert "GRES=npu:910b:8(IDX:0-7)" in text and "GRES=npu:910b:1(IDX:0)" in text
    with pytest.raises(AmbiguousRecord, match="npu-01"):
        parse_job_devices(text, "npu-01")
    with pytest.raises(AmbiguousRecord, match="JobState= appears 2 times"):  # `... JobState=X`
        parse_job_record(text, ["JobState"])
    # The name's line break cuts it short; it never yields a key.
    assert parse_job_record(text, ["JobName", "UserId"]) == {"JobName": "evil", "UserId": "root(0)"}


def test_a_fake_detail_line_inside_a_comment_line_is_not_read() -> None:
    # No newline: `Comment=x JobState=PENDING Nodes=h100-01 ... GRES=gpu:h100:8(IDX:0-7)`.
    text = captured("scontrol-job-d-inline-injected-22.05.txt")
    assert parse_job_devices(text, "h100-01") == {"gpu": [0]}
    with pytest.raises(AmbiguousRecord, match="JobState= appears 2 times"):
        parse_job_record(text, ["JobState"])
    assert parse_job_record(text, ["JobName", "NumNodes", "BatchFlag"]) == {
        "JobName": "wrap", "NumNodes": "1", "BatchFlag": "1"}


def test_a_record_with_only_a_fake_line_for_a_pending_job() -> None:
    # A pending job has no detail lines of its own: a lone fake line would be believed, so
    # callers use the device lists only for jobs that run (the Prolog, the task).
    fake = "JobId=9 JobName=x\n   JobState=PENDING\n     Nodes=n1 CPU_IDs=0 Mem=1 GRES=gpu:8(IDX:0-7)\n"
    assert parse_job_record(fake, ["JobState"]) == {"JobState": "PENDING"}


def test_line_keys_run_to_the_end_of_their_line() -> None:
    text = ("JobId=3 JobName=a b\n   JobState=RUNNING Reason=None\n"
            "   AdminComment={\"energy\":\"auto\"}\n   Comment=x AdminComment={\"energy\":\"performance\"}\n")
    assert parse_job_record(text, ["AdminComment", "JobName"]) == {
        "AdminComment": '{"energy":"auto"}', "JobName": "a b"}
    forged = text + "   AdminComment={}\n"
    with pytest.raises(AmbiguousRecord):
        parse_job_record(forged, ["AdminComment"])


def test_required_and_optional_keys() -> None:
    text = "JobId=3 JobName=a\n   JobState=RUNNING\n"
    assert parse_job_record(text, ["BatchHost"], optional=["BatchHost"]) == {}
    with pytest.raises(AmbiguousRecord, match="no BatchHost"):
        parse_job_record(text, ["BatchHost"])
    with pytest.raises(AmbiguousRecord, match="does not start"):
        parse_job_record("   JobState=RUNNING\n", ["JobState"])


@pytest.mark.parametrize("bad", ["GRES=gpu:1(IDX:5-2)", "GRES=gpu:1(IDX:0-99999)"])
def test_absurd_index_lists_are_refused(bad: str) -> None:
    with pytest.raises(AmbiguousRecord):
        parse_job_devices(f"JobId=1 JobName=x\n     Nodes=n1 CPU_IDs=0 Mem=1 {bad}\n", "n1")


def test_job_ids_and_id_lists() -> None:
    assert show_job_argv(12, detail=True) == ["scontrol", "show", "job", "-d", "12"]
    with pytest.raises(ValueError):
        show_job_argv("12 --all")
    assert parse_id_list("2,3") == [2, 3] and parse_id_list("") == []
    with pytest.raises(AmbiguousRecord):
        parse_id_list("2,x")


def test_hostlist_counts_before_expanding() -> None:
    assert hostlist.expand("npu-[01-02],h100-01") == ["npu-01", "npu-02", "h100-01"]
    assert hostlist.expand("n[1,3-4]") == ["n1", "n3", "n4"]
    assert hostlist.count_hosts("r[1-1000]-n[1-1000000]") == 10**9
    with pytest.raises(hostlist.HostlistError, match="more than"):
        hostlist.expand("cpu-[1-1000000000]")
    for bad in ("n[1-2", "n]1[", "n[2-1]", "n[a-b]", "n[[1]]"):
        with pytest.raises(hostlist.HostlistError):
            hostlist.expand(bad)
    assert hostlist.contains("a100-[01-02]", "a100-02") and not hostlist.contains("a100-01", "a100-1")


def test_squeue_json_keeps_user_text_in_its_fields() -> None:
    jobs, problems = parse_squeue_json(captured("squeue-json-22.05.json"))
    assert problems == []
    by_id = {j.job_id: j for j in jobs}
    # Job 7 went through the bridge; its comment imitated an admin comment and a limit.
    assert by_id[7].time_limit_min == 10 and by_id[7].state == "RUNNING"
    assert json.loads(by_id[7].admin_comment)["accel"] == "any:1"
    assert "shortened" not in by_id[7].admin_comment
    # Job 8's name carries a line break and `TimeLimit=99-00:00:00`: still 5 minutes.
    assert by_id[8].name.startswith("n\n") and by_id[8].time_limit_min == 5
    assert by_id[8].state == "PENDING"
    assert by_id[1].gres_detail == () and by_id[6].tres_per_node == "gres:gpu:h100:1"
    # what one node must hold: a one-node job's whole CPU count, the per-node minimum of a
    # two-node one; memory per CPU (the cluster's DefMemPerCPU) x those CPUs
    assert (by_id[6].cpus_node, by_id[6].mem_node_mib) == (2, 2048)
    assert (by_id[3].node_count, by_id[3].cpus_node, by_id[3].mem_node_mib) == (2, 1, 1024)


def test_squeue_json_skips_a_bad_entry_and_reads_newer_shapes() -> None:
    doc = {"jobs": [
        {"job_id": "7"},  # not a number
        "junk",
        {"job_id": 5, "job_state": ["RUNNING"], "time_limit": {"set": True, "infinite": False, "number": 30},
         "start_time": {"set": True, "number": 100}, "admin_comment": 7, "name": None},
        {"job_id": 6, "job_state": "PENDING", "time_limit": {"set": True, "infinite": True, "number": 0}},
        {"job_id": 9, "time_limit": 4294967295, "submit_time": 10},
    ]}
    jobs, problems = parse_squeue_json(json.dumps(doc))
    assert [j.job_id for j in jobs] == [5, 6, 9] and len(problems) == 2
    assert jobs[0].state == "RUNNING" and jobs[0].time_limit_min == 30 and jobs[0].start_time == 100
    assert jobs[0].admin_comment == "" and jobs[0].name == ""
    assert jobs[1].time_limit_min is None and jobs[2].time_limit_min is None
    with pytest.raises(ValueError):
        parse_squeue_json('{"meta": {}}')
    with pytest.raises(ValueError):
        parse_job({"job_id": True})


# ---- Slurm 24.11 (Debian 13), captured with tests/data/captured/capture-24.11.sh ----------------

def test_24_11_records_are_read_the_same_way() -> None:
    forged = captured("scontrol-job-d-injected-24.11.txt")
    with pytest.raises(AmbiguousRecord, match="n01"):
        parse_job_devices(forged, "n01")
    inline = captured("scontrol-job-d-inline-injected-24.11.txt")
    assert parse_job_devices(inline, "g01") == {"gpu": [0, 1]}
    with pytest.raises(AmbiguousRecord, match="TimeLimit="):
        parse_job_record(inline, ["TimeLimit"])
    pending = captured("scontrol-job-pending-24.11.txt")
    assert parse_job_record(pending, ["JobState", "JobName"]) == {"JobState": "PENDING", "JobName": "p"}


def test_24_11_count_only_gres_has_no_indices() -> None:
    # 24.11 prints `GRES=npu:910b(CNT:2)` for a GRES without File=: no device to map.
    text = ("JobId=1 JobName=x\n     Nodes=n01 CPU_IDs=0 Mem=8000 GRES=npu:910b(CNT:2)\n")
    assert parse_job_devices(text, "n01") == {}


def test_24_11_squeue_json() -> None:
    jobs, problems = parse_squeue_json(captured("squeue-json-24.11.json"))
    assert problems == []
    by_id = {j.job_id: j for j in jobs}
    assert by_id[1].state == "RUNNING" and by_id[1].time_limit_min == 2880
    assert by_id[2].time_limit_min == 10 and by_id[2].tres_per_node == "gres/gpu:h100:2"
    assert by_id[3].state == "PENDING" and by_id[3].time_limit_min == 5 and by_id[3].start_time is None
    assert by_id[3].name.startswith("p\n") and by_id[2].gres_detail == ("gpu:h100:2(IDX:0-1)",)
    assert (by_id[2].cpus_node, by_id[2].mem_node_mib) == (1, 0)  # memory_per_node 0: not said


def test_optional_keys_are_read_when_present() -> None:
    text = 'JobId=3 JobName=a\n   JobState=RUNNING\n   AdminComment={"energy":"efficiency"} \n'
    assert parse_job_record(text, ["JobState"], optional=["AdminComment", "BatchHost"]) == {
        "JobState": "RUNNING", "AdminComment": '{"energy":"efficiency"}'}
