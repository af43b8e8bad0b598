"""The rendered alert rules on synthetic series, run by Prometheus's own rule tester
(`promtool test rules`): the wait alert and the fragmentation alert fire when and only when
they should, with the labels and words an operator gets."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_hetero.monitor.render import PrometheusSettings, render_prometheus
from slurm_hetero.monitor.waits import WAIT_BUCKETS_S

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="Debian's prometheus package not installed")

SETTINGS = PrometheusSettings(node_targets=["n:9410"], cluster_targets=["c:9411"])
A100, H100, V100, GH200 = "a100-80gb@x86_64", "h100@x86_64", "v100@x86_64", "gh200@aarch64"


def promtool_test(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "hetero-rules.yml").write_text(render_prometheus(SETTINGS)["hetero-rules.yml"])
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["hetero-rules.yml"],
                                                    "evaluation_interval": "10s", "tests": tests}))
    return subprocess.run(["promtool", "test", "rules", str(tmp_path / "t.yml")], capture_output=True, text=True,
                          check=False)


def fragmented_alert(pool: str, value: int) -> dict[str, Any]:
    return {"exp_labels": {"severity": "warning", "pool": pool},
            "exp_annotations": {
                "summary": f"pool {pool}: {value} free devices lie on nodes with too few free for any waiting job",
                "description": "Free devices split over nodes in pieces smaller than the smallest per-node request "
                               "waiting (hetero_pool_smallest_waiting_request_devices), for 1800 s. A node reserved "
                               "or drained until it empties gives the waiting jobs room."}}


FRAGMENTED = {
    "interval": "1m",
    "input_series": [
        # fragmented for the whole test: fires after 30 min
        {"series": f'hetero_pool_fragmented_devices{{pool="{A100}"}}', "values": "2x60"},
        {"series": f'hetero_pool_fragmentation_ratio{{pool="{A100}"}}', "values": "1x60"},
        # many fragmented devices, but a small share of the free ones: jobs can start elsewhere
        {"series": f'hetero_pool_fragmented_devices{{pool="{H100}"}}', "values": "4x60"},
        {"series": f'hetero_pool_fragmentation_ratio{{pool="{H100}"}}', "values": "0.25x60"},
        # one device alone is not worth waking anyone
        {"series": f'hetero_pool_fragmented_devices{{pool="{V100}"}}', "values": "1x60"},
        {"series": f'hetero_pool_fragmentation_ratio{{pool="{V100}"}}', "values": "1x60"},
        # fragmented for 20 min only (a job ended, or the waiting job went elsewhere)
        {"series": f'hetero_pool_fragmented_devices{{pool="{GH200}"}}', "values": "3x20 0x40"},
        {"series": f'hetero_pool_fragmentation_ratio{{pool="{GH200}"}}', "values": "1x20 0x40"},
    ],
    "alert_rule_test": [
        {"eval_time": "29m", "alertname": "HeteroPoolFragmented", "exp_alerts": []},
        {"eval_time": "31m", "alertname": "HeteroPoolFragmented", "exp_alerts": [fragmented_alert(A100, 2)]},
        {"eval_time": "59m", "alertname": "HeteroPoolFragmented", "exp_alerts": [fragmented_alert(A100, 2)]},
    ],
}


def wait_series(pool: str, tier: str, per_min: float, above_s: float) -> list[dict[str, str]]:
    """Cumulative histogram series of `per_min` starts a minute, each waiting just over `above_s`."""
    out = []
    for bound in [*WAIT_BUCKETS_S, float("inf")]:
        le = "+Inf" if bound == float("inf") else f"{bound:.1f}"
        out.append({"series": f'hetero_job_wait_seconds_bucket{{pool="{pool}", tier="{tier}", le="{le}"}}',
                    "values": f"0+{per_min if bound > above_s else 0}x120"})
    out.append({"series": f'hetero_job_wait_seconds_count{{pool="{pool}", tier="{tier}"}}',
                "values": f"0+{per_min}x120"})
    return out


WAITS = {
    "interval": "1m",
    "input_series": [
        # a100, gold: a job a minute, each waiting between 4 h and 8 h: p90 = 4 h + 0.9 * 4 h
        *wait_series(A100, "gold", 1, 14400),
        # a100, silver: a job a minute, waiting under a minute
        *wait_series(A100, "silver", 1, 30),
        # h100, gold: long waits, but 1.2 starts an hour: too few to call it a trend
        *wait_series(H100, "gold", 0.02, 86400),
    ],
    "alert_rule_test": [
        {"eval_time": "10m", "alertname": "HeteroPoolWaitHigh", "exp_alerts": []},  # pending: for 15 min
        {"eval_time": "30m", "alertname": "HeteroPoolWaitHigh", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "pool": A100, "tier": "gold"},
            "exp_annotations": {
                "summary": f"pool {A100}, tier gold: 1 job in 10 waited over 7h 36m 0s to start",
                "description": "The p90 wait of the jobs that started in the last 3600 s is above 14400 s "
                               "(hetero_job_wait_seconds; hetero_pending_jobs says why the rest wait)."}}]},
    ],
    "promql_expr_test": [
        {"expr": "hetero:pool_job_wait_seconds:p90", "eval_time": "30m", "exp_samples": [
            {"labels": f'hetero:pool_job_wait_seconds:p90{{pool="{A100}", tier="gold"}}', "value": 27360},
            {"labels": f'hetero:pool_job_wait_seconds:p90{{pool="{A100}", tier="silver"}}', "value": 57},
            {"labels": f'hetero:pool_job_wait_seconds:p90{{pool="{H100}", tier="gold"}}', "value": 164160}]},
    ],
}


ACCOUNTING = {
    "interval": "10s",
    # slurmdbd answers, stops answering for 5 minutes, answers again; absent: never asked
    "input_series": [{"series": "hetero_accounting_up", "values": "1x12 0x30 1x20"}],
    "alert_rule_test": [
        {"eval_time": "2m", "alertname": "HeteroAccountingDown", "exp_alerts": []},
        # down at 2m10s; `for` is 60 s
        {"eval_time": "3m", "alertname": "HeteroAccountingDown", "exp_alerts": []},
        {"eval_time": "3m20s", "alertname": "HeteroAccountingDown", "exp_alerts": [{
            "exp_labels": {"severity": "critical"},
            "exp_annotations": {
                "summary": "slurmdbd does not answer (sacctmgr from the cluster exporter)",
                "description": "While it is away slurmctld queues accounting messages (sdiag: DBD Agent queue "
                               "size) up to MaxDBDMsgs and then drops them; sacct and the reports see no new "
                               "jobs. Start slurmdbd (and its database) before the queue fills."}}]},
        {"eval_time": "7m30s", "alertname": "HeteroAccountingDown", "exp_alerts": []},
    ],
}


def test_accounting_alert_fires_while_slurmdbd_does_not_answer_and_clears(tmp_path: Path) -> None:
    r = promtool_test(tmp_path, [ACCOUNTING])
    assert r.returncode == 0, r.stdout + r.stderr


def test_fragmented_pool_alert(tmp_path: Path) -> None:
    r = promtool_test(tmp_path, [FRAGMENTED])
    assert r.returncode == 0, r.stdout + r.stderr


def test_wait_alert_and_its_quantiles(tmp_path: Path) -> None:
    r = promtool_test(tmp_path, [WAITS])
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_rule_tests_can_fail(tmp_path: Path) -> None:
    """The same tests with the H100 pool expected to fire too: promtool must say no."""
    wrong = {**FRAGMENTED, "alert_rule_test": [
        {"eval_time": "31m", "alertname": "HeteroPoolFragmented",
         "exp_alerts": [fragmented_alert(A100, 2), fragmented_alert(H100, 4)]}]}
    r = promtool_test(tmp_path, [wrong])
    assert r.returncode != 0 and "HeteroPoolFragmented" in r.stdout + r.stderr
