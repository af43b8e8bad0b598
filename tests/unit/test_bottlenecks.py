"""Bottlenecks from history: a long wait planted on one pool + size + tier is the top rule
with exactly its jobs; random waits give no rule; the queue-state sweep equals a brute
force; rule words from a hand-made tree; the section in headless Chromium and in
`report --json`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from slurm_hetero.jobs import table as J
from slurm_hetero.jobs.capacity import Capacity
from slurm_hetero.reports import bottlenecks as B
from slurm_hetero.reports import write_html
from slurm_hetero.reports.build import insert_after, report_json
from slurm_hetero.reports.cli import report
from slurm_hetero.reports.metrics import build_report
from slurm_hetero.reports.period import Period
from slurm_hetero.reports.whatif import Arm, Replay
from tests.unit.test_replay_merge import window_file
from tests.unit.test_report_browser import needs_chromium, open_in_chromium

T0 = 1_700_000_000.0
PERIOD = Period(T0, T0 + 9 * 86400, True, True)
HOT_POOL = "a100-80gb@x86_64"
KTH = Path(__file__).resolve().parents[1] / "data" / "replay" / "kth-window.swf"


def history(n: int, planted: bool = True, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """n finished jobs over a week on three pools and three tiers, waits around 5 minutes;
    planted: the A100 jobs of tier silver asking 4 or more devices wait around 3 hours,
    80 % of them recorded as held by QOSGrpGRES. Returns the job table and the planted mask."""
    rng = np.random.default_rng(seed)
    pool = rng.choice([HOT_POOL, "h100@x86_64", "cpu@x86_64"], n)
    gpu = pool != "cpu@x86_64"
    model = np.where(gpu, np.char.partition(pool.astype(str), "@")[:, 0], "")
    tier = rng.choice(["gold", "silver", "bronze"], n)
    devices = np.where(gpu, rng.choice([1, 2, 4, 8], n), 0).astype(float)
    cpus = np.where(gpu, devices * 8, rng.choice([1, 4, 16, 64], n)).astype(float)
    submit = T0 + np.sort(rng.uniform(0, 7 * 86400, n))
    wait = rng.lognormal(np.log(300), 1.0, n)
    hot = (pool == HOT_POOL) & (devices >= 4) & (tier == "silver")
    if planted:
        wait = np.where(hot, rng.lognormal(np.log(3 * 3600), 0.5, n), wait)
    reason = np.where(hot & (rng.random(n) < 0.8), "QOSGrpGRES",
                      np.where(rng.random(n) < 0.1, "Priority", "None"))
    start = submit + wait
    cols: dict[str, Any] = {
        "source": "sacct:test", "job_id": np.arange(n).astype(str), "user": rng.choice(["ann", "bob"], n),
        "partition": np.where(gpu, "gpu", "cpu"), "qos": tier, "tier": tier, "pool": pool, "model": model,
        "accel_class": np.where(gpu, model, J.CPU_CLASS), "arch": np.full(n, "x86_64"), "devices": devices,
        "req_accel": devices, "ncpus": cpus, "req_cpus": cpus, "submit": submit, "start": start,
        "end": start + rng.uniform(600, 7200, n), "req_time_s": np.full(n, 7200.0),
        "state": np.full(n, "COMPLETED"), "reason": reason}
    return J.build(cols, n), hot


def test_the_planted_bottleneck_is_the_top_rule_with_exactly_its_jobs() -> None:
    jobs, hot = history(4000)
    f = B.history_features(jobs, PERIOD, PERIOD.end)
    res = B.learn(f)
    assert res.status == "rules" and res.jobs == 4000
    top = res.rules[0]
    by = {c.feature: c for c in top.conditions}
    assert set(by) == {"pool", "tier", "devices"}
    assert by["pool"].values == [HOT_POOL] and by["tier"].values == ["silver"]
    assert (by["devices"].low, by["devices"].high) == (4.0, None)
    assert top.jobs == int(hot.sum()) and top.share_pct == pytest.approx(100 * hot.mean())
    assert top.wait_p50_s == pytest.approx(float(np.median(f.wait_s[hot])))
    held = (jobs["reason"].to_numpy(dtype=object)[hot] == "QOSGrpGRES").mean()
    assert top.reason == "QOSGrpGRES" and top.reason_pct == pytest.approx(100 * held)
    assert top.text.startswith(f"pool {HOT_POOL}, tier silver, asking >= 4 devices: p50 wait ")
    assert f"% held by QOSGrpGRES ({hot.sum():,} jobs, " in top.text
    # Every other rule waits like the site: the planted group is the only one far above it.
    assert all(r.wait_p50_s < 2 * res.wait_p50_s for r in res.rules[1:])
    assert sum(r.jobs for r in res.rules) == 4000


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_waits_give_no_rule(seed: int) -> None:
    jobs, _ = history(4000, planted=False, seed=seed)
    res = B.learn(B.history_features(jobs, PERIOD, PERIOD.end))
    assert res.status == "no split" and res.rules == [] and res.sentences() == []
    assert "no group of jobs waited markedly longer" in res.message


def test_too_little_history_is_a_line_not_an_error() -> None:
    jobs, _ = history(150)
    sec = B.bottleneck_section(jobs, PERIOD, PERIOD.end)
    assert sec.tables == []
    assert sec.notes == ["not enough history to learn what made jobs wait: 150 started job(s), 200 needed"]
    assert B.learn(B.history_features(J.empty(), PERIOD, PERIOD.end)).status == "not enough history"


def brute_queue(key: np.ndarray, enter: np.ndarray, leave: np.ndarray, weight: np.ndarray,
                at_key: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    count, total = np.zeros(len(at)), np.zeros(len(at))
    for k in range(len(at)):
        for j in range(len(key)):
            if key[j] == at_key[k] and enter[j] < at[k] < leave[j]:
                count[k] += 1
                total[k] += weight[j]
    return count, total


@pytest.mark.parametrize("seed", range(5))
def test_the_queue_sweep_equals_a_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    key = rng.integers(0, 4, n)
    enter = rng.integers(0, 50, n).astype(float)  # integer times: many ties
    leave = enter + rng.integers(0, 20, n)  # some zero-length: never waited
    leave[rng.random(n) < 0.05] = np.nan  # unknown: not counted
    weight = rng.integers(1, 9, n).astype(float)
    at_key, at = rng.integers(0, 5, 200), rng.integers(-5, 75, 200).astype(float)  # key 4: no job
    count, total = B.queue_at(key, enter, leave, weight, at_key, at)
    want_count, want_total = brute_queue(key, enter, leave, weight, at_key, at)
    assert count.tolist() == want_count.tolist() and total.tolist() == want_total.tolist()
    assert count.max() > 3  # the data does overlap


def test_history_queue_counts_jobs_already_waiting_in_the_same_pool() -> None:
    # Pool p: job 0 waits [0, 100), job 1 submitted at 50 sees it; job 2 in pool q sees none;
    # job 3 is still pending (no start, no end): it waits until the horizon and is seen by job 4.
    cols: dict[str, Any] = {"job_id": ["0", "1", "2", "3", "4"], "pool": ["p", "p", "q", "p", "p"],
                            "submit": [0.0, 50.0, 60.0, 120.0, 130.0], "start": [100.0, 110.0, 70.0, np.nan, 140.0],
                            "end": [200.0, 210.0, 80.0, np.nan, 150.0], "req_accel": [2.0, 1.0, 1.0, 4.0, 1.0],
                            "state": ["COMPLETED"] * 3 + ["PENDING", "COMPLETED"]}
    f = B.history_features(J.build(cols, 5), Period(0.0, 1000.0, True, True), now=1000.0)
    assert f.wait_s.tolist() == [100.0, 60.0, 10.0, 10.0]
    assert f.nums["queue_jobs"].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert f.nums["queue_units"].tolist() == [0.0, 2.0, 0.0, 4.0]
    assert f.accel_pools == {"p", "q"}


def test_rule_words_merge_thresholds_and_name_categories() -> None:
    """A hand-made tree in dump_model()'s shape: two thresholds on devices along one path
    merge into one range snapped to the values the jobs asked; categorical splits name
    their values (a pool no job holds is not named); NaN says 'or not recorded'."""
    n = 8
    f = B.Features(
        wait_s=np.zeros(n),
        cats={"pool": (np.array([0, 1, 2, 0, 1, 2, 0, 1]), ["a@x", "b@x", "c@x", "d@x"]),
              "tier": (np.zeros(n, dtype=np.int64), [""]), "partition": (np.zeros(n, dtype=np.int64), [""])},
        nums={"devices": np.array([1.0, 2, 4, 8, 1, 2, 4, 8]), "cpus": np.ones(n),
              "req_time_s": np.array([3600.0, np.nan, 7200, 3600, 14400, 3600, 7200, 3600]),
              "queue_jobs": np.zeros(n), "queue_units": np.arange(n, dtype=float)},
        reason=(np.zeros(n, dtype=np.int64), [""]), accel_pools=frozenset({"b@x", "c@x"}))
    dev, pool, limit, qu = (B.FEATURES.index(c) for c in ("devices", "pool", "req_time_s", "queue_units"))

    def leaf(i: int) -> dict[str, Any]:
        return {"leaf_index": i}

    def num(feat: int, t: float, left: dict[str, Any], right: dict[str, Any], nan_left: bool = True) -> dict[str, Any]:
        return {"split_feature": feat, "threshold": t, "decision_type": "<=", "default_left": nan_left,
                "missing_type": "NaN" if feat == limit else "None", "left_child": left, "right_child": right}

    tree = num(dev, 1.5, num(limit, 5400.0, leaf(0), leaf(4)),
               {"split_feature": pool, "threshold": "1||2", "decision_type": "==", "default_left": False,
                "missing_type": "None", "left_child": num(dev, 5.5, num(qu, 3.5, leaf(1), leaf(5)), leaf(2)),
                "right_child": leaf(3)})
    words = {i: [c.text for c in B.conditions(edges, f)] for i, edges in B.paths(tree)}
    assert words == {
        0: ["asking <= 1 devices", "time limit <= 1h00m (or not recorded)"],
        4: ["asking <= 1 devices", "time limit >= 2h00m"],
        1: ["pool b@x or c@x", "asking 2-4 devices", "jobs waiting in its pool at submit asking <= 3 devices"],
        5: ["pool b@x or c@x", "asking 2-4 devices", "jobs waiting in its pool at submit asking >= 4 devices"],
        2: ["pool b@x or c@x", "asking >= 8 devices"],
        3: ["pool a@x", "asking >= 2 devices"],
    }
    (c,) = [c for c in B.conditions(dict(B.paths(tree))[1], f) if c.feature == "devices"]
    assert (c.low, c.high) == (2.0, 4.0)


def replay_of(n: int = 400, seed: int = 0) -> Replay:
    """One window, one arm: A100 jobs asking 4 devices wait 2 hours, the others 2 minutes."""
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        pool = ["a100@x86_64", "cpu@x86_64"][i % 2]
        accel = int(rng.choice([1, 4])) if pool.startswith("a100") else 0
        due = float(rng.uniform(0, 3600))
        wait = 7200.0 if accel == 4 else 120.0
        jobs.append({"due": due, "start": due + wait * rng.uniform(0.8, 1.2), "end": due + wait + 600,
                     "cpus": 8 * max(accel, 1), "accel": accel, "pool": pool, "user_limit_s": 3600,
                     "measured": True})
    arm = Arm("plain", 0.0, 4.0, 4 * 3600.0, {}, jobs, {})
    return Replay(Path("r.json"), False, ["plain"], [{"plain": arm}], {"plain": {}}, [])


def test_a_replay_arm_gets_its_rules() -> None:
    sec = B.replay_bottleneck_section(replay_of())
    ((arm, res),) = sec.results
    assert arm == "plain" and res.status == "rules"
    assert [c.text for c in res.rules[0].conditions] == ["asking >= 4 devices"]
    assert "reason" not in res.message  # a replay keeps none: nothing to remark
    four = sum(1 for j in replay_of().windows[0]["plain"].jobs if j["accel"] == 4)
    assert res.rules[0].jobs == four and sec.tables[0].slug == "replay_bottlenecks_plain"


def _report_of(jobs: pd.DataFrame) -> Any:
    rep = build_report(jobs, Capacity(source="test"), PERIOD, "crafted history", now=PERIOD.end)
    insert_after(rep, B.bottleneck_section(jobs, PERIOD, PERIOD.end), "waits")
    return rep


@needs_chromium
def test_the_section_renders_in_chromium(tmp_path: Path) -> None:
    jobs, hot = history(2000)
    rep = _report_of(jobs)
    keys = [s.key for s in rep.sections]
    assert keys[keys.index("waits") + 1] == "bottlenecks"
    html = write_html(rep, tmp_path / "report.html")
    page = open_in_chromium(html, tmp_path)
    assert page.console == [] and page.drawn == page.plots > 0
    text = html.read_text()
    section = text[text.index('<section id="bottlenecks">'):]
    section = section[: section.index("</section>")]
    items = re.findall(r"<li>(.*?)</li>", section)
    assert 1 <= len(items) <= B.TOP
    assert items[0].startswith(f"pool {HOT_POOL}, tier silver, asking &gt;= 4 devices: p50 wait ")
    assert f"({hot.sum():,} jobs, " in items[0]
    assert 'id="table-bottlenecks"' in section and "What made jobs wait" in section
    few = write_html(_report_of(history(150)[0]), tmp_path / "few.html").read_text()
    assert "not enough history to learn what made jobs wait: 150 started job(s), 200 needed" in few


def test_report_json_has_the_rules(tmp_path: Path) -> None:
    jobs, hot = history(2000)
    doc = json.loads(json.dumps(report_json(_report_of(jobs))))
    b = doc["bottlenecks"]
    assert b["status"] == "rules" and b["jobs"] == 2000 and b["model"]["max_depth"] == 3
    first = b["rules"][0]
    assert first["rank"] == 1 and first["jobs"] == int(hot.sum()) and first["reason"] == "QOSGrpGRES"
    assert [c["feature"] for c in first["conditions"]] == ["pool", "tier", "devices"]

    r = CliRunner().invoke(report, ["--trace", str(KTH), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["bottlenecks"]["status"] == "rules" and doc["bottlenecks"]["jobs"] > 1000
    assert doc["summary"]["jobs in range"] == "1,256"
    r = CliRunner().invoke(report, ["--trace", str(KTH), "--json", "-o", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "--json" in r.output
    # A replay of two jobs an arm: too little history, said per arm.
    r = CliRunner().invoke(report, ["--replay", str(window_file(tmp_path / "w.json", 0.0, [100, 300], [50, 100])),
                                    "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["bottlenecks"] is None
    assert {a: v["status"] for a, v in doc["replay_bottlenecks"].items()} == {
        "plain": "not enough history", "bridge": "not enough history"}


def test_sacct_report_has_the_section_after_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sacct lines through the real parser: jobs asking 16 CPUs or more wait 2 hours."""
    from slurm_hetero.reports.build import sacct_report
    from slurm_hetero.site import load_site
    from slurm_hetero.slurm.runner import Runner
    from slurm_hetero.slurm.sacct import FIELDS
    from tests.fakeslurm import FakeSlurm, sacct_names

    site = load_site(Path(__file__).resolve().parents[1] / "data" / "sites" / "power.yaml")
    t = 1_800_000_000
    lines = []
    for i in range(300):
        cpus = [2, 4, 16, 32][i % 4]
        submit = t + 10 * i
        start = submit + (7200 if cpus >= 16 else 60) + i % 7
        values = {f: "" for f in FIELDS}
        values.update({"JobIDRaw": str(i), "JobID": str(i), "User": "u", "Partition": "main", "QOS": "normal",
                       "State": "COMPLETED", "Reason": "None", "Submit": str(submit), "Start": str(start),
                       "End": str(start + 300), "ElapsedRaw": "300", "TimelimitRaw": "60", "NCPUS": str(cpus),
                       "ReqCPUS": str(cpus), "AllocTRES": f"cpu={cpus}", "NodeList": "pw-cpu01"})
        lines.append("\x1f".join(values[f] for f in FIELDS) + "\n")
    FakeSlurm(monkeypatch).on("sacct", sacct_names(lambda argv, env: "".join(lines))).on("sacctmgr", "") \
        .on("squeue", "")
    rep = sacct_report(site, Runner(), Period(t - 60, t + 12 * 3600, True, True), now=t + 13 * 3600)
    keys = [s.key for s in rep.sections]
    assert keys[keys.index("waits") + 1] == "bottlenecks"
    res = report_json(rep)["bottlenecks"]
    assert res["status"] == "rules" and res["jobs"] == 300
    assert res["rules"][0]["text"].startswith("asking >= 16 CPUs: p50 wait 2h0")
    assert res["rules"][0]["jobs"] == 150 and "Slurm recorded no pending reason" in res["message"]
