"""The short soak (`benchmarks/soak.py --short`): 2 trace hours of the KTH log (61 jobs) at
x50 on a fresh dev cluster with the bridge and its model, while the bridge daemon is
SIGSTOPped for 15 trace minutes (past its 150 s margin), slurmdbd is down for 10 and
slurmctld is restarted. No job may be lost or killed before its user's limit, accounting must agree with
what slurmctld showed, and each fault must have happened (a stopped daemon's /proc state, new
pids, a closed port). The exporters and a Prometheus with the shipped rules run meanwhile: the
alert meant for each fault (replay/faults.py ALERT_FOR) fired and cleared, or none is meant;
the timeline (faults, alerts, queue) is drawn.

The cluster keeps the node agent's Prolog/Epilog (`--hooks`): every job's body starts after
its Prolog. The KTH site has no accelerators: the soak boots a probe node with two fake
GPUs beside it, which no trace job asks for, so the devices check reads them (none left with a
policy); `--short --faults` naming agent-fail is where policies are applied to them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests import benchmark

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any]]:
    out = tmp_path_factory.mktemp("soak")
    # --no-power: on the x50 clock a sleeping node holds a job back for minutes of trace time,
    # and the jobs whose shortened limits must come due during the daemon's stop then start too
    # late (limits_due 0; CI at 9034ad2). The power keeper's own soak figures: README.
    rc = benchmark.load("soak").main(["--short", "--no-power", "--workdir", str(out / "work"),
                                      "--json", str(out / "soak.json")])
    return rc, json.loads((out / "soak.json").read_text())


def test_no_job_lost_or_killed_early_and_accounting_agrees(soak: tuple[int, dict[str, Any]]) -> None:
    rc, doc = soak
    run = doc["runs"]["faulted"]
    assert run["submitted"] == doc["jobs"] == 61 and run["submit_failed"] == 0 and run["unreleased"] == 0
    assert run["lost"] == 0, run["audit"]["examples"]["lost"]
    assert run["killed_early"] == 0
    assert run["records_missing_end"] == 0 and run["records_wrong"] == 0, run["audit"]["examples"]
    assert run["audit"]["observed"] == 61 and run["audit"]["compared_final"] > 0
    assert rc == 0 and doc["broken"] == []


def test_each_fault_happened(soak: tuple[int, dict[str, Any]]) -> None:
    _, doc = soak
    recs = {r["kind"]: r for r in doc["faults"]["records"]}
    assert sorted(recs) == ["bridge-stop", "slurmctld-restart", "slurmdbd-stop"]
    assert [r["kind"] for r in doc["faults"]["records"]] == [f["kind"] for f in doc["faults"]["schedule"]]
    assert all(r["ok"] and r["problem"] is None for r in recs.values()), recs
    stop = recs["bridge-stop"]["evidence"]
    # Stopped (its /proc state T) through the whole fault, its heartbeat stale past the
    # margin, then the same process went on.
    assert stop["state_stopped"] == stop["state_before_cont"] == "T" and stop["state_after"] != "T"
    assert stop["past_margin"] and stop["snapshot_age_s"] > stop["margin_s"] == 150
    assert stop["pid_after"] == stop["pid_before"] and stop["heartbeat_back_real_s"] is not None
    # It mattered: a job started before the stop (the heartbeat fresh) got a shortened limit
    # that came due while it lasted; it ran on (OverTimeLimit), none killed early. Seed 62
    # puts the stop over job 32's (soak.py SHORT_SEED), whatever its p90 from 14 to 28 minutes.
    arm = doc["runs"]["faulted"]["arm_result"]
    lo = arm["t0"] + recs["bridge-stop"]["started_trace_s"]
    hi = arm["t0"] + recs["bridge-stop"]["undone_trace_s"]

    def first_limit(j: dict[str, Any]) -> int:  # bridge.lua: the p90 in whole minutes, at least one
        return max(60, math.ceil(float(j["predicted_s"]) / 60) * 60)

    came_due = [j["job_id"] for j in arm["jobs"]
                if j["predicted_s"] is not None and j["start"] is not None and j["user_limit_s"]
                and first_limit(j) < j["user_limit_s"] and lo <= j["start"] + first_limit(j) <= hi
                and (j["end"] is None or j["end"] > j["start"] + first_limit(j))]
    assert stop["limits_due"] == len(came_due) >= 1 and set(stop["limits_due_jobs"]) == set(came_due[:20]), stop
    ctld = recs["slurmctld-restart"]["evidence"]
    assert ctld["pid_after"] and ctld["pid_after"] != ctld["pid_before"]
    dbd = recs["slurmdbd-stop"]["evidence"]
    assert dbd["port_closed"] and dbd["pid_after"] and dbd["pid_after"] != dbd["pid_before"]


def test_alerts_meant_for_the_faults_fired_and_cleared(soak: tuple[int, dict[str, Any]]) -> None:
    _, doc = soak
    run = doc["runs"]["faulted"]
    assert run["monitored"] and run["monitor_problem"] is None
    got = {m["kind"]: m for m in run["alerts"]}
    assert sorted(got) == ["bridge-stop", "slurmctld-restart", "slurmdbd-stop"]
    assert all(m["ok"] for m in got.values()), got
    stop = got["bridge-stop"]
    assert stop["meant"] == "HeteroBridgeHeartbeatLost" and stop["fired"] and stop["cleared"], stop
    # it fired while the daemon was stopped, and cleared once it went on
    rec = next(r for r in doc["faults"]["records"] if r["kind"] == "bridge-stop")
    assert rec["started_trace_s"] <= stop["fired_s"] <= rec["ended_trace_s"], (stop, rec)
    assert stop["cleared_s"] >= rec["undone_trace_s"], (stop, rec)
    # slurmdbd stopped: the cluster exporter's sacctmgr check goes unanswered until it is back
    dbd = got["slurmdbd-stop"]
    assert dbd["meant"] == "HeteroAccountingDown" and dbd["fired"] and dbd["cleared"], dbd
    assert got["slurmctld-restart"]["meant"] is None and got["slurmctld-restart"]["why_none"]
    assert run["monitoring"]["targets"] == 6  # 4 node exporters, the probe node's and the cluster's


def test_the_agents_hooks_ran_and_left_no_device_changed(soak: tuple[int, dict[str, Any]]) -> None:
    _, doc = soak
    run = doc["runs"]["faulted"]
    # The Prolog runs at real speed: each body starts its real time x 50 after the allocation
    # (about 10 trace s here; launch latency alone is about 1 s).
    assert run["hooks"] and run["prolog_delay"]["jobs"] >= 40 and run["prolog_delay"]["median_s"] >= 2, \
        run["prolog_delay"]
    assert run["devices_checked"] == 2 and run["devices_left"] == 0 and run["prologs_failed"] == 0


def test_the_timeline_has_the_faults_alerts_and_queue(soak: tuple[int, dict[str, Any]]) -> None:
    _, doc = soak
    run = doc["runs"]["faulted"]
    tl = run["timeline"]
    assert [f["kind"] for f in tl["faults"]] == [f["kind"] for f in doc["faults"]["schedule"]]
    assert "HeteroBridgeHeartbeatLost" in {a["alert"] for a in tl["alerts"]}
    assert len(tl["queue"]) > 10 and max(p[2] for p in tl["queue"]) > 0
    assert Path(run["timeline_svg"]).read_text().startswith("<?xml")
