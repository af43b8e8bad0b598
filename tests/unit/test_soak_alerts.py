"""The soak's pure parts: which alert each fault is meant to raise, the spans Prometheus
reports, matching them to the faults, the rules on a replay clock, and the seeded energy share."""

from __future__ import annotations

import re

import pytest

from slurm_hetero.conf.monitoring import RULES, render_prometheus
from slurm_hetero.devcluster.faults import rules_on_clock, soak_settings
from slurm_hetero.replay.clockmap import ClockMap
from slurm_hetero.replay.faults import (
    ALERT_FOR,
    KINDS,
    WHY_NO_ALERT,
    AlertSpan,
    alert_spans,
    match_alerts,
    scrape_gaps,
    spans_of,
    wants_energy,
)


def shipped_alerts() -> set[str]:
    rules = render_prometheus(soak_settings(50, ["127.0.0.1:1"], ["127.0.0.1:2"], 250))[RULES]
    return set(re.findall(r"^\s*- alert: (\w+)$", rules, re.MULTILINE))


def test_every_fault_has_a_shipped_alert_or_says_why_none() -> None:
    assert set(ALERT_FOR) == set(KINDS)
    for kind, alert in ALERT_FOR.items():
        if alert is None:
            assert WHY_NO_ALERT[kind], kind
        else:
            assert alert in shipped_alerts(), (kind, alert)
            assert kind not in WHY_NO_ALERT
    assert ALERT_FOR["bridge-stop"] == "HeteroBridgeHeartbeatLost"
    assert ALERT_FOR["state-readonly"] == "HeteroSnapshotStale"
    assert ALERT_FOR["slurmdbd-stop"] == "HeteroAccountingDown" and ALERT_FOR["clock-skew"] is None
    assert ALERT_FOR["agent-fail"] == "HeteroNodeAgentErrors"


def test_spans_end_at_gaps_and_at_the_range_end() -> None:
    assert spans_of([], 1, 10) == []
    assert spans_of([(0, 1)], 1, 10) == [(0, 1)]
    assert spans_of([(0, 1), (1, 1)], 1, 1) == [(0, None)]  # still firing at the last sample
    assert spans_of([(0, 1), (1, 1), (3, 1)], 1, 9) == [(0, 2), (3, 4)]


def test_alert_spans_in_trace_seconds() -> None:
    clock = ClockMap(1000.0, 5000.0, 50.0)
    matrix = [{"metric": {"__name__": "ALERTS", "alertname": "HeteroSnapshotStale", "alertstate": "firing"},
               "values": [[1010.0, "1"], [1011.0, "1"], [1012.0, "1"]]},
              {"metric": {"alertname": "HeteroExporterDown", "alertstate": "firing", "instance": "x:1"},
               "values": [[1001.0, "1"]]}]
    spans = alert_spans(matrix, 1.0, 1100.0, lambda t: clock.faked(t) - 5000.0)
    assert [(s.alert, s.labels, s.start_s, s.end_s) for s in spans] == [
        ("HeteroExporterDown", {"instance": "x:1"}, 50.0, 100.0),
        ("HeteroSnapshotStale", {}, 500.0, 650.0)]


def test_scrape_gaps() -> None:
    m = [{"metric": {"job": "hetero-cluster", "instance": "c:2"}, "values": [[0, "1"], [1, "1"]]},
         {"metric": {"job": "hetero-node", "instance": "n:1"}, "values": [[0, "1"], [1, "0"], [2, "0"]]}]
    assert scrape_gaps(m, 1, 2, float) == [
        {"job": "hetero-node", "instance": "n:1", "start_s": 1.0, "end_s": None}]


RECS = [{"kind": "bridge-stop", "started_trace_s": 860.0, "undone_trace_s": 1760.0, "ended_trace_s": 1800.0},
        {"kind": "slurmdbd-stop", "started_trace_s": 3360.0, "ended_trace_s": 3990.0},
        {"kind": "slurmctld-restart", "started_trace_s": 4652.0, "ended_trace_s": 4700.0}]


@pytest.mark.parametrize(("spans", "ok", "fired", "cleared"), [
    # fired while stopped, cleared after: ok; the stale snapshot's alert as well
    ([AlertSpan("HeteroSnapshotStale", {}, 1100.0, 1850.0),
      AlertSpan("HeteroBridgeHeartbeatLost", {}, 1150.0, 1850.0)], True, True, True),
    ([], False, False, False),  # never fired
    ([AlertSpan("HeteroBridgeHeartbeatLost", {}, 1150.0, None)], False, True, False),  # never cleared
    ([AlertSpan("HeteroBridgeHeartbeatLost", {}, 1150.0, 3500.0)], False, True, False),  # past the next fault
    ([AlertSpan("HeteroBridgeHeartbeatLost", {}, 100.0, 300.0)], False, False, False),  # before the fault
])
def test_match_alerts(spans: list[AlertSpan], ok: bool, fired: bool, cleared: bool) -> None:
    got = match_alerts(RECS, spans, 7200.0, 500.0)
    stop = got[0]
    assert (stop["meant"], stop["ok"], stop["fired"], stop["cleared"]) == ("HeteroBridgeHeartbeatLost", ok, fired,
                                                                           cleared)
    # slurmdbd's alert never fired in these spans; none is meant for a restart of seconds
    assert [(g["kind"], g["meant"], g["ok"]) for g in got[1:]] == [("slurmdbd-stop", "HeteroAccountingDown", False),
                                                                   ("slurmctld-restart", None, True)]
    if fired and cleared:
        assert stop["fired_after_s"] == 290.0 and stop["cleared_after_end_s"] == 50.0
        assert stop["also"] == ["HeteroSnapshotStale"]


def test_an_alert_after_the_grace_belongs_to_no_fault() -> None:
    got = match_alerts(RECS[:1], [AlertSpan("HeteroBridgeHeartbeatLost", {}, 2400.0, 2500.0)], 7200.0, 500.0)
    assert not got[0]["fired"] and not got[0]["ok"]


def test_rules_compare_in_the_clock_the_exporters_publish() -> None:
    """`time() - timestamp` must read the cluster's faked clock: at real 1010 on a x50 clock
    that read 5000 at real 1000, `time()` stands for 5500."""
    clock = ClockMap(1000.0, 5000.0, 50.0)
    text = rules_on_clock("expr: time() - hetero_exporter_round_timestamp_seconds > 180", clock)
    m = re.search(r"\(time\(\) \* (\S+) \+ \((\S+)\)\)", text)
    assert m is not None and "time() -" not in text
    assert float(m.group(1)) * 1010.0 + float(m.group(2)) == pytest.approx(5500.0)
    rules = render_prometheus(soak_settings(50, ["127.0.0.1:1"], ["127.0.0.1:2"], 250))[RULES]
    assert rules.count("time()") == 2  # the heartbeat and the cluster exporter's round
    assert rules_on_clock(rules, clock).count("time() * 50") == 2


def test_soak_settings_scale_prometheus_durations_not_published_values() -> None:
    s = soak_settings(50, ["127.0.0.1:1"], ["127.0.0.1:2"], 250)
    # compared with what the exporters publish (trace seconds): as given
    assert (s.heartbeat_lost_s, s.snapshot_stale_s, s.cluster_every_s) == (250, 250, 60)
    # Prometheus's own durations (real seconds): trace ÷ speed, 1 s at least
    assert (s.alert_for_s, s.stuck_for_s, s.wait_for_s, s.node_scrape_s) == (1, 18, 18, 1)
    s.check()


def test_energy_share_is_seeded_per_job() -> None:
    picked = [str(i) for i in range(200) if wants_energy(str(i), 0.3, 36)]
    assert picked == [str(i) for i in range(200) if wants_energy(str(i), 0.3, 36)]
    assert 40 <= len(picked) <= 80
    assert picked != [str(i) for i in range(200) if wants_energy(str(i), 0.3, 37)]
