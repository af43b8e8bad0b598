"""`slurm-hetero report` on the real cluster: a mix of jobs, numbers checked against sacct.

The expected figures are computed here from sacct's own -X -P output over the same window,
with a small independent parser (ISO times, not the report's epoch path), so other tests'
jobs in the window count on both sides alike.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_hetero.devcluster import Cluster
from slurm_hetero.reports.cli import report as report_cmd
from slurm_hetero.reports.files import unquoted
from slurm_hetero.site import Site
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_tres
from tests.unit.test_report_browser import CHROMIUM, open_in_chromium

pytestmark = pytest.mark.integration

ISO = "%Y-%m-%dT%H:%M:%S"
# (sbatch options, script): accelerators of each kind, tiers, bridge requests, a CPU burner.
MIX: list[tuple[list[str], str]] = [
    (["--gres=gpu:h100:1"], "sleep 2"),
    (["--gres=npu:1"], "sleep 2"),
    (["--qos=diamond", "--gres=gpu:a100-80gb:2"], "sleep 3"),
    (["--accel=any:2", "--energy=efficiency", "--tier=silver"], "sleep 2"),
    (["--accel=units=2"], "sleep 2"),
    (["--accel=cann:2", "--tier=diamond", "--energy=performance"], "sleep 2"),
    (["--gres=shard:1"], "sleep 2"),
    (["-c", "2", "-C", "aarch64"], "timeout 3 sh -c 'while :; do :; done'; exit 0"),
    (["--qos=silver", "-c", "4"], "sleep 1"),
]
FIELDS = ["JobIDRaw", "Partition", "QOS", "State", "Submit", "Eligible", "Start", "End", "AllocTRES",
          "NodeList", "User", "AdminComment"]


@dataclass
class Run:
    since: str
    until: str
    ids: list[int]
    held: int
    out: Path
    csv: Path
    html: Path
    output: str


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp() if text[:1].isdigit() else math.nan


@pytest.fixture(scope="module")
def ran(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    out = tmp_path_factory.mktemp("report")
    since = datetime.fromtimestamp(time.time() - 1).strftime(ISO)
    ids = [submit(cluster.runner, [*opts, "-J", "report-mix", "-o", "/dev/null"], wrap) for opts, wrap in MIX]
    held = submit(cluster.runner, ["-H", "-J", "report-held", "-o", "/dev/null"], "true")
    try:
        wait_done(cluster.runner, ids, timeout=120)
        sacct_jobs(cluster.runner, ids)  # until slurmdbd has recorded their end
        cluster.ship_energy()  # the node agent's figures, without waiting for the health check
        sacct_jobs(cluster.runner, ids)
        time.sleep(1.1)
        until = datetime.fromtimestamp(time.time()).strftime(ISO)
        args = ["--since", since, "--until", until, "--cache-dir", str(out / "cache")]
        env = {"SLURM_CONF": str(cluster.conf)}
        r = CliRunner().invoke(report_cmd, [*args, "--csv", str(out / "csv"), "-o", str(out / "report.html")],
                               env=env)
        assert r.exit_code == 0, r.output
        term = CliRunner().invoke(report_cmd, args, env=env)
        assert term.exit_code == 0, term.output
        yield Run(since, until, ids, held, out, out / "csv", out / "report.html", term.output)
    finally:
        cluster.runner.run(["scancel", str(held)], check=False)


def _sacct(cluster: Cluster, run: Run) -> list[dict[str, str]]:
    text = cluster.runner.out(["sacct", "-a", "-X", "-n", "-P", "-S", run.since, "-E", run.until,
                               "-o", ",".join(FIELDS)])
    return [dict(zip(FIELDS, ln.split("|", len(FIELDS) - 1), strict=True)) for ln in text.splitlines() if ln]


def _csv(run: Run, name: str) -> list[dict[str, str]]:
    """A table of the report's CSV, its cells as the report had them (before the `'` that
    keeps a spreadsheet from running `--energy` as a formula)."""
    with (run.csv / f"{name}.csv").open() as f:
        return [{k: unquoted(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _decision(comment: str) -> dict[str, Any]:
    """The admin comment's JSON; sacctmgr (the energy agent's writer) stores quotes as backquotes."""
    d = json.loads(comment.replace("`", '"'))
    assert isinstance(d, dict)
    return d


def _model_of(site: Site, tres: dict[str, str], node: str) -> tuple[str, float]:
    by_type = {(m.gres_name, m.gres_type): m.id for m in site.catalog.values()}
    for key, value in tres.items():
        if key.startswith("gres/") and ":" in key:
            name, gtype = key[5:].split(":", 1)
            return by_type[(name, gtype)], float(value)
    if "gres/shard" in tres:
        group = next(g for g in site.node_groups if node in g.nodes)
        acc = next(a for a in group.accelerators if a.shards_per_device)
        return acc.model.id, float(tres["gres/shard"]) / acc.shards_per_device
    return "", 0.0


def test_device_hours_per_model_match_sacct(cluster: Cluster, demo_site: Site, ran: Run) -> None:
    lo, hi = _ts(ran.since), _ts(ran.until)
    expected: dict[str, float] = defaultdict(float)
    for row in _sacct(cluster, ran):
        start = _ts(row["Start"])
        if math.isnan(start) or row["NodeList"] in ("None assigned", ""):
            continue
        end = _ts(row["End"]) if not math.isnan(_ts(row["End"])) else hi
        model, n = _model_of(demo_site, parse_tres(row["AllocTRES"]), row["NodeList"])
        if model:
            expected[model] += n * max(min(end, hi) - max(start, lo), 0.0) / 3600
    got = {r["model"]: float(r["device_hours"]) for r in _csv(ran, "utilisation_by_model")}
    for model in ("h100", "ascend-910b", "a100-80gb", "v100"):
        assert expected[model] > 0, model
    for model, hours in expected.items():
        assert got[model] == pytest.approx(hours, rel=1e-6, abs=1e-9), model
    units = {r["model"]: float(r["unit_hours"]) for r in _csv(ran, "utilisation_by_model")}
    assert units["h100"] == pytest.approx(expected["h100"] * demo_site.catalog["h100"].units, rel=1e-6)


def test_waits_and_counts_match_sacct(cluster: Cluster, ran: Run) -> None:
    waits: dict[str, list[float]] = defaultdict(list)
    qos: dict[str, int] = defaultdict(int)
    lo, hi = _ts(ran.since), _ts(ran.until)
    for row in _sacct(cluster, ran):
        start = _ts(row["Start"])
        if not lo <= start < hi or row["NodeList"] in ("None assigned", ""):
            continue  # waits count for the jobs that started in the window
        base = max(_ts(row["Submit"]), _ts(row["Eligible"]))
        waits[row["Partition"]].append(max(start - base, 0.0))
        qos[row["QOS"]] += 1
    table = {r["partition"]: r for r in _csv(ran, "waits_by_partition")}
    assert {"cpu", "gpu", "npu"} <= set(table)
    for part, values in waits.items():
        assert int(table[part]["jobs"]) == len(values)
        for q in (50, 90, 99):
            assert float(table[part][f"wait_p{q}_s"]) == pytest.approx(np.percentile(values, q), abs=1e-6)
    by_qos = {r["qos"]: int(r["jobs"]) for r in _csv(ran, "waits_by_qos")}
    assert by_qos == dict(qos) and by_qos["diamond"] >= 2 and by_qos["silver"] >= 2


def test_pending_reasons_and_bridge_decisions(cluster: Cluster, demo_site: Site, ran: Run) -> None:
    reasons = {r["reason"]: int(r["jobs"]) for r in _csv(ran, "pending_reasons")}
    assert reasons.get("JobHeldUser", 0) >= 1
    kinds: dict[tuple[str, str], int] = defaultdict(int)
    for row in _sacct(cluster, ran):
        started = math.isfinite(_ts(row["Start"])) and row["NodeList"] not in ("None assigned", "")
        decision = _decision(row["AdminComment"]) if row["AdminComment"].startswith("{") else {}
        if decision.get("hetero") == 1 and started:  # 0: the agent's figures alone
            accel = decision.get("accel", "")
            kind = "any" if accel.startswith("any") else "units" if accel.startswith("units") else \
                "named" if accel else "no --accel"
            model = _model_of(demo_site, parse_tres(row["AllocTRES"]), row["NodeList"])[0]
            kinds[(kind, model or "cpu")] += 1
    got = {(r["req_kind"], r["model"]): int(r["jobs"]) for r in _csv(ran, "bridge_where")}
    assert got == dict(kinds)
    assert {k for k, _ in got} >= {"any", "units", "named"}
    options = {(r["option"], r["value"]): int(r["jobs"]) for r in _csv(ran, "bridge_options")}
    assert options[("--energy", "efficiency")] >= 1 and options[("--tier", "diamond")] >= 1


def test_energy_recorded_by_the_node_agent(cluster: Cluster, demo_site: Site, ran: Run) -> None:
    expected: dict[str, float] = defaultdict(float)
    for row in _sacct(cluster, ran):
        if not row["AdminComment"].startswith("{"):
            continue
        nodes = _decision(row["AdminComment"]).get("node_energy", {})
        joules = sum(n["energy_j"] for n in nodes.values() if "energy_j" in n)
        if nodes and joules:
            model = _model_of(demo_site, parse_tres(row["AllocTRES"]), row["NodeList"])[0] or "cpu"
            expected[model] += joules
    # The dev cluster's nodes have (fake) energy counters: no energy at all is the regression.
    assert expected, "the node agent recorded no energy for any accelerator job of the mix"
    got = {r["model"]: float(r["energy_kwh"]) * 3.6e6 for r in _csv(ran, "energy_by_model")}
    assert got.keys() == expected.keys()
    for model, joules in expected.items():
        assert got[model] == pytest.approx(joules, rel=1e-6), model


def test_cpu_efficiency_matches_sacct_totalcpu(cluster: Cluster, ran: Run) -> None:
    text = cluster.runner.out(["sacct", "-a", "-n", "-P", "-S", ran.since, "-E", ran.until,
                               "-o", "JobID,Partition,State,TotalCPU,NCPUS,ElapsedRaw"])
    used = alloc = 0.0
    for line in text.splitlines():
        jid, part, state, total, ncpus, elapsed = line.split("|")
        if "." in jid or part != "cpu" or state.split()[0] in ("RUNNING", "PENDING"):
            continue
        m = re.match(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$", total)
        assert m, total
        d, h, mi, s = m.groups()
        used += int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi) * 60 + float(s)
        alloc += int(ncpus) * int(elapsed)
    row = next(r for r in _csv(ran, "cpu_efficiency") if r["partition"] == "cpu")
    assert float(row["cpu_hours_used"]) == pytest.approx(used / 3600, rel=1e-6)
    assert float(row["cpu_eff_pct"]) == pytest.approx(100 * used / alloc, rel=1e-6)
    assert used > 0.5  # the burner ran


def test_terminal_summary(ran: Run) -> None:
    for title in ("Accelerators by model and architecture", "Wait by accelerator class",
                  "Jobs still waiting, by reason", "Where --accel requests went", "Top users"):
        assert title in ran.output


def test_html_opens_offline_with_every_plot_drawn(ran: Run) -> None:
    assert CHROMIUM, "chromium is not installed (Debian package: chromium)"
    page = open_in_chromium(ran.html, ran.out / "browser")
    assert page.console == []
    assert page.plots >= 8 and page.drawn == page.plots
    print(f"screenshot: {page.screenshot}")


def test_empty_range_is_a_clear_report(cluster: Cluster, tmp_path: Path) -> None:
    r = CliRunner().invoke(report_cmd, ["--since", "2001-01-01", "--until", "2001-01-02", "--cache-dir",
                                        str(tmp_path)], env={"SLURM_CONF": str(cluster.conf)})
    assert r.exit_code == 0, r.output
    assert "no jobs in range 2001-01-01 00:00:00 → 2001-01-02 00:00:00" in r.output


def test_unreachable_slurmdbd_is_a_clear_error(cluster: Cluster, tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    shutil.copytree(cluster.etc, etc)
    conf = etc / "slurm.conf"
    conf.write_text(re.sub(r"(?m)^AccountingStoragePort=.*$", "AccountingStoragePort=1", conf.read_text()))
    r = CliRunner().invoke(report_cmd, ["--since", "-1h", "--no-cache"], env={"SLURM_CONF": str(conf)})
    assert r.exit_code == 1, r.output
    assert "cannot read job accounting" in r.output and "is slurmdbd running" in r.output
