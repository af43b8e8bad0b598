"""Predicted limits safe without the bridge daemon: the OverTimeLimit that `conf render`
writes where limits are predicted, and the daemon ending jobs there at their own limits
(never past MaxTime). The real-cluster side is tests/integration/test_predict.py."""

from __future__ import annotations

import doctest
import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.bridge.daemon import BridgeDaemon, ExtendPolicy
from slurm_hetero.cli import main
from slurm_hetero.conf import render_site
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.site import load_site, load_site_text, timelimits
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.model import Partition
from slurm_hetero.site.timelimits import max_time_min, over_time_limit
from slurm_hetero.slurm.comment import parse_comment

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "site" / "demo" / "site.yaml"

SITE = """\
name: soft
partitions:
  - {name: short, default: true, max_time: "45-12:13:00", predicted_limits: true}
  - {name: long, max_time: "45-12:14:00", predicted_limits: true}
  - {name: open, predicted_limits: true}
  - {name: plain, max_time: "1:00:00", options: {OverTimeLimit: 5}}
node_groups:
  - names: c[01-04]
    architecture: x86_64
    sockets: 2
    cores_per_socket: 8
    memory: 64GB
    partitions: [short, long, open, plain]
"""


def test_doctests() -> None:
    assert doctest.testmod(timelimits).failed == 0


def partition_lines(text: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"(?m)^PartitionName=(\S+) .*$", text)}


def test_overtimelimit_covers_maxtime_where_limits_are_predicted() -> None:
    lines = partition_lines(render_site(load_site_text(SITE))["slurm.conf"])
    assert lines["short"].endswith(" OverTimeLimit=65533")  # 45-12:13:00 is 65533 minutes
    assert lines["long"].endswith(" OverTimeLimit=UNLIMITED")  # 65534 is Slurm's "not set"
    assert lines["open"].endswith(" OverTimeLimit=UNLIMITED")  # no MaxTime
    # Not predicted: the site's own word, once; none of ours.
    assert lines["plain"].count("OverTimeLimit") == 1 and lines["plain"].endswith(" OverTimeLimit=5")


@pytest.mark.parametrize("max_time", ["1", "0:30", "1:00:00", "2-00:00:00", "45-12:13:00", "45-12:13:01",
                                      "100-00:00:00", "UNLIMITED"])
def test_a_soft_limit_of_a_minute_plus_overtime_reaches_maxtime(max_time: str) -> None:
    p = Partition("p", max_time=max_time, predicted_limits=True)
    over = over_time_limit(p)
    assert over is not None
    if over != "UNLIMITED":
        most = max_time_min(p)
        assert most is not None and int(over) <= 65533 and 1 + int(over) >= most


def test_the_site_may_not_set_overtimelimit_where_limits_are_predicted(tmp_path: Path) -> None:
    text = SITE.replace('predicted_limits: true}\n  - {name: long',
                        'predicted_limits: true, options: {OverTimeLimit: 10}}\n  - {name: long')
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    assert any("partitions[0].options.OverTimeLimit: OverTimeLimit is written by slurm-hetero" in ln
               for ln in e.value.lines), e.value.lines
    path = tmp_path / "site.yaml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["conf", "render", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output


class Recording:
    """squeue answers with the given jobs; every scontrol/scancel is recorded (unit-test fake)."""

    def __init__(self, jobs: list[dict[str, object]], cancel_fails: bool = False):
        self.doc = json.dumps({"jobs": jobs})
        self.calls: list[list[str]] = []
        self.cancel_fails = cancel_fails

    def out(self, argv: list[str], **_: object) -> str:
        return self.doc if argv[0] == "squeue" else ""

    def run(self, argv: list[str], **_: object) -> object:
        self.calls.append(list(argv))
        if argv[0] == "scancel" and self.cancel_fails:
            raise RuntimeFailure("scancel exited 1: Job/step already completing or completed")
        return None


def shortened(user_min: int, **more: object) -> str:
    return json.dumps({"hetero": 1, "pred": {"p50": 20, "p90": 40}, "shortened": True,
                       "user_limit_min": user_min, **more})


def running(i: int, partition: str, limit: int, ran_s: float, comment: str = "",
            end_in_s: float | None = None) -> dict[str, object]:
    now = time.time()
    start = now - ran_s
    return {"job_id": i, "job_state": "RUNNING", "partition": partition, "time_limit": limit,
            "start_time": start, "end_time": start + limit * 60 if end_in_s is None else now + end_in_s,
            "admin_comment": comment}


def daemon(runner: Recording, logs: list[str] | None = None) -> BridgeDaemon:
    return BridgeDaemon(load_site(DEMO), runner, Path("/nonexistent/snap.lua"),  # type: ignore[arg-type]
                        extend=ExtendPolicy(margin_s=20), log=(logs if logs is not None else []).append)


def test_jobs_end_at_their_own_limit_where_limits_are_soft() -> None:
    # The demo: cpu has predicted limits (MaxTime 2 days), gpu has not.
    jobs = [
        running(1, "cpu", 1, 95, shortened(2)),        # past its prediction: extended, not ended
        running(2, "cpu", 2, 121, shortened(2)),       # at its user's 2 minutes: ended
        running(3, "cpu", 1, 61, "JS1:abc"),           # not shortened, at its own minute: ended
        running(4, "gpu", 1, 61),                      # Slurm's own hard limit there
        running(5, "cpu", 1, 200, end_in_s=30),        # suspended a while: Slurm's end is ahead
        running(6, "cpu", 2000, 1990 * 60, shortened(4320)),  # asked past MaxTime: capped
        running(7, "cpu", 2880, 2880 * 60 + 5, shortened(4320)),  # at MaxTime: ended
        running(8, "cpu", 10, 599),                    # a second left
        running(10, "cpu", 60, 40, end_in_s=-5),       # being preempted: Slurm moved its end to
                                                       # the grace's; Slurm's to requeue, not ours
        {"job_id": 9, "job_state": "PENDING", "partition": "cpu", "time_limit": 1, "submit_time": time.time() - 600},
    ]
    r = Recording(jobs)
    logs: list[str] = []
    d = daemon(r, logs)
    d.keep_limits(d.jobs())
    updates = {c[2]: c[3] for c in r.calls if c[:2] == ["scontrol", "update"]}
    assert [c for c in r.calls if c[0] == "scancel"] == [["scancel", "2"], ["scancel", "3"], ["scancel", "7"]]
    assert updates["JobId=1"] == "TimeLimit=2" and updates["JobId=6"] == "TimeLimit=2880"
    assert set(updates) == {"JobId=1", "JobId=2", "JobId=3", "JobId=6", "JobId=7"}
    # The record goes first, into our record; another tool's text is kept as it was.
    assert r.calls.index(["scontrol", "update", "JobId=2", updates["JobId=2"]]) < r.calls.index(["scancel", "2"])
    two = parse_comment(updates["JobId=2"].removeprefix("AdminComment="))
    assert two["ended"] == "own_limit" and two["own_limit_min"] == 2 and two["pred"]["p90"] == 40
    assert updates["JobId=3"] == 'AdminComment=JS1:abc {"hetero":0,"ended":"own_limit","own_limit_min":1}'
    assert parse_comment(updates["JobId=7"].removeprefix("AdminComment="))["own_limit_min"] == 2880
    assert "job 7: ended at its own limit of 2880 min (ran 2880.1 min, limit 2880)" in logs


def test_a_job_whose_record_cannot_be_written_still_ends() -> None:
    logs: list[str] = []
    r = Recording([running(1, "cpu", 1, 70, "note from an admin\nsecond line")])
    d = daemon(r, logs)
    d.keep_limits(d.jobs())
    assert r.calls == [["scancel", "1"]]
    assert logs[0].startswith("job 1: end at its own limit not recorded: admin comment with a line break")


def test_a_cancel_slurm_refuses_costs_that_job_only() -> None:
    logs: list[str] = []
    r = Recording([running(1, "cpu", 1, 70), running(2, "cpu", 1, 65)], cancel_fails=True)
    d = daemon(r, logs)
    assert d.end_at_own_limits(d.jobs()) == set()
    assert [c for c in r.calls if c[0] == "scancel"] == [["scancel", "1"], ["scancel", "2"]]
    assert sum("not ended at its own limit" in line for line in logs) == 2


def test_a_partition_the_site_does_not_model_keeps_the_old_rule() -> None:
    """A shortened job in a partition the site does not model (slurm.keep_partitions): its
    user's recorded limit, as before; none ended (Slurm's own limits apply there)."""
    r = Recording([running(1, "kept", 10, 9 * 60, shortened(600))])
    d = daemon(r)
    d.keep_limits(d.jobs())
    assert r.calls == [["scontrol", "update", "JobId=1", "TimeLimit=20"]]
