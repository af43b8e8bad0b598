"""The soak's timeline: faults, alerts and the queue in trace seconds, and its plot."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from slurm_hetero.reports.soak import MAX_QUEUE_POINTS, timeline, timeline_svg

RECS = [{"kind": "bridge-stop", "started_trace_s": 860.0, "undone_trace_s": 1760.0, "ended_trace_s": 1800.0},
        {"kind": "slurmctld-restart", "started_trace_s": 4652.0}]
ALERTS = [{"alert": "HeteroBridgeHeartbeatLost", "labels": {}, "start_s": 1150.0, "end_s": 1850.0},
          {"alert": "HeteroSnapshotStale", "labels": {}, "start_s": 1100.0, "end_s": None}]


def test_timeline_in_trace_seconds() -> None:
    queue = [(float(t), 10 - t // 1000, t // 1000) for t in range(0, 7200, 10)]
    gaps = [{"job": "hetero-node", "instance": "n:1", "start_s": 50.0, "end_s": 100.0}]
    tl = timeline(RECS, ALERTS, queue, gaps)
    # a single blow (no end recorded) ends where it began
    assert tl["faults"] == [{"kind": "bridge-stop", "start_s": 860.0, "end_s": 1800.0},
                            {"kind": "slurmctld-restart", "start_s": 4652.0, "end_s": 4652.0}]
    assert [(a["alert"], a["end_s"]) for a in tl["alerts"]] == [("HeteroBridgeHeartbeatLost", 1850.0),
                                                                ("HeteroSnapshotStale", None)]
    assert tl["queue"][0] == [0.0, 10, 0] and tl["queue"][-1] == [7190.0, 3, 7]
    assert tl["scrape_gaps"] == gaps and tl["span_s"] == [0.0, 7190.0]


def test_long_queues_are_thinned_keeping_the_ends() -> None:
    queue = [(float(t), 1, 2) for t in range(10 * MAX_QUEUE_POINTS)]
    tl = timeline([], [], queue, [])
    assert len(tl["queue"]) == MAX_QUEUE_POINTS
    assert tl["queue"][0][0] == 0.0 and tl["queue"][-1][0] == 10 * MAX_QUEUE_POINTS - 1


def test_plot_has_a_row_per_fault_and_alert() -> None:
    svg = timeline_svg(timeline(RECS, ALERTS, [(0.0, 1, 0), (100.0, 0, 1)], []), "soak faulted")
    ET.fromstring(svg)  # well-formed
    for label in ("fault bridge-stop", "fault slurmctld-restart", "alert HeteroBridgeHeartbeatLost",
                  "alert HeteroSnapshotStale", "pending", "running", "soak faulted"):
        assert label in svg, label


def test_empty_timeline_still_draws() -> None:
    svg = timeline_svg(timeline([], [], [], []))
    assert svg.startswith("<?xml")
