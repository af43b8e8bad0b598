"""`slurm-hetero job ID` on the real cluster: a bridge GPU job seen while it runs and after
the node agent's epilog, its figures checked against sacct's own -P output (read here with
a separate small parser); and the report's capacity after a node was drained and resumed."""

from __future__ import annotations

import csv
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_slurm_time
from tests.unit.test_report_browser import open_in_chromium

pytestmark = pytest.mark.integration

# 2 A100s, 2 CPUs, 8 GB, 30 min: one CPU busy ~2 s, 300 MB held past the 30 s MaxRSS sample.
SCRIPT = """srun python3 -c '
import time
x = bytearray(300 * 1024 * 1024)
for i in range(0, len(x), 4096): x[i] = 1
t = time.time()
while time.time() - t < 2: pass
time.sleep(31)
'"""
OPTIONS = ["--accel=a100-80gb:2", "--energy=efficiency", "-c", "2", "--mem=8G", "-t", "30", "-J", "jobpage-gpu",
           "-o", "/dev/null"]


def cli(cluster: Cluster, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env={"SLURM_CONF": str(cluster.conf)})


def page_json(cluster: Cluster, jid: int) -> dict[str, Any]:
    r = cli(cluster, "job", str(jid), "--json")
    assert r.exit_code == 0, r.output
    out: dict[str, Any] = json.loads(r.output)
    return out


def seconds(text: str) -> float:
    """sacct's TotalCPU `[D-][HH:]MM:SS[.mmm]`, parsed apart from the project's parser."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (float(days) if days else 0.0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def test_gpu_job_page(cluster: Cluster, tmp_path: Path) -> None:
    jid = submit(cluster.runner, OPTIONS, SCRIPT)
    deadline = time.monotonic() + 60
    while True:  # while it runs: what is known, and what is not yet
        page = page_json(cluster, jid)
        if page["state"] == "RUNNING":
            break
        assert time.monotonic() < deadline, page
        time.sleep(0.5)
    assert page["groups"]["Got"]["GRES (AllocTRES)"] == "gpu:a100-80gb:2"
    assert page["groups"]["Efficiency"]["CPU"] == "not known yet"
    assert any(u.startswith("accelerator utilisation") for u in page["unknown"])
    assert page["advice"] == ["no advice yet: it is still running"]

    try:  # ~35 s alone; on 2 shared cores under other clusters' load, much longer
        wait_done(cluster.runner, [jid], timeout=300)
    except RuntimeFailure:
        pytest.fail(cluster.runner.out(["scontrol", "show", "job", str(jid)], check=False)
                    + cluster.runner.out(["sstat", "-j", str(jid), "-P", "-o", "JobID,AveCPU,MaxRSS"], check=False))
    fields = ["JobID", "State", "ElapsedRaw", "NCPUS", "AllocTRES", "End", "Partition", "AdminComment"]
    deadline = time.monotonic() + 60
    while True:  # the health check ships the node agent's figures after the end
        row = sacct_jobs(cluster.runner, [jid], fields, require=["AdminComment"])[jid]
        if "node_energy" in parse_comment(row["AdminComment"]):
            break
        assert time.monotonic() < deadline, row
        time.sleep(0.5)
    # Without -X: the allocation line's TotalCPU sums its steps (with -X 22.05 prints 0).
    lines = [ln.split("|") for ln in cluster.runner.out(["sacct", "-n", "-P", "-j", str(jid), "-o",
                                                         "JobID,TotalCPU,MaxRSS"]).splitlines()]
    total_cpu = next(cpu for job, cpu, _ in lines if job == str(jid))
    # sacct prints a size in the largest unit that divides it exactly (CI once got "313M": 320,512 KiB):
    # K, M, G, T are powers of 1024 KiB; a step with no sample prints nothing.
    kib = {"K": 1, "M": 1024, "G": 1024 ** 2, "T": 1024 ** 3}
    rss_k = max(float(rss[:-1]) * kib[rss[-1]] for _, _, rss in lines if rss[-1:] in kib)

    page = page_json(cluster, jid)
    g = page["groups"]
    assert page["state"] == "COMPLETED"
    assert g["Asked"]["GRES"] == g["Got"]["GRES (AllocTRES)"] == "gpu:a100-80gb:2"
    assert "gres/gpu:a100-80gb=2" in row["AllocTRES"]
    assert g["Asked"]["--accel"] == "a100-80gb:2" and g["Bridge"]["pool"] == "a100-80gb@x86_64"
    elapsed = float(row["ElapsedRaw"])
    assert page["figures"]["runtime_s"] == elapsed and 33 <= elapsed < 300
    assert g["Time"]["limit"] == "30m00s"
    cpu_eff = 100 * seconds(total_cpu) / (elapsed * float(row["NCPUS"]))
    assert page["figures"]["cpu_eff_pct"] == pytest.approx(cpu_eff, abs=0.05)
    assert page["figures"]["mem_eff_pct"] == pytest.approx(100 * rss_k / (8 * 1024 * 1024), rel=1e-6)
    assert 3.0 < page["figures"]["mem_eff_pct"] < 6.0  # 300 MB + python of 8 GB
    # The fake GPUs run at 80 %: the accelerators were used; the limit was not.
    assert [d["util_pct"] for d in page["devices"]] == [80.0, 80.0]
    ran = g["Time"]["runtime"]
    assert page["advice"][0] == f"asked 30m00s, ran {ran}: ask 5 min (-t 5) and start sooner " \
                                "(backfill fits short limits)"
    assert any(a.startswith("used ") and "of the 8.0 GB asked: ask --mem=1G" in a for a in page["advice"])

    term = cli(cluster, "job", str(jid))
    assert term.exit_code == 0 and "advice: asked 30m00s" in term.output and "gpu:a100-80gb:2" in term.output
    html = tmp_path / "job.html"
    r = cli(cluster, "report", "--job", str(jid), "-o", str(html))
    assert r.exit_code == 0, r.output
    check = open_in_chromium(html, tmp_path)
    assert check.console == [] and "a100-80gb@x86_64" in html.read_text()

    bad = cli(cluster, "job", "x1")
    assert bad.exit_code == 2 and "JOBID 'x1'" in bad.output
    gone = cli(cluster, "job", str(jid + 100000))
    assert gone.exit_code == 1 and "no such job" in gone.output


def test_report_takes_drained_time_off_capacity(cluster: Cluster, tmp_path: Path) -> None:
    since = datetime.fromtimestamp(time.time() - 2).strftime("%Y-%m-%dT%H:%M:%S")
    cluster.runner.run(["scontrol", "update", "nodename=v100-01", "state=drain", "reason=jobpage test | fan"])
    try:
        jid = submit(cluster.runner, ["-J", "jobpage-while-drained", "-o", "/dev/null"], "true")
        time.sleep(4)  # a time, not a condition: the drain's length is what the report must measure
    finally:
        cluster.runner.run(["scontrol", "update", "nodename=v100-01", "state=resume"])
    deadline = time.monotonic() + 60
    while True:  # slurmctld tells slurmdbd of node events through its queue: wait for the end
        out = cluster.runner.out(["sacctmgr", "-n", "-P", "show", "event", "nodes=v100-01", f"start={since}",
                                  "format=NodeName,End,Reason"])
        drained = [ln.split("|")[1] for ln in out.splitlines()
                   if ln.startswith("v100-01|") and "jobpage test" in ln and "|Unknown|" not in ln]
        if drained:
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.5)
    wait_done(cluster.runner, [jid])
    row = sacct_jobs(cluster.runner, [jid])[jid]  # until slurmdbd has recorded its end
    # --until is in whole seconds: once the clock has left the second of the last recorded
    # end (the job's or the drain's), the window holds both.
    job_end, drain_end = parse_slurm_time(row["End"]), parse_slurm_time(drained[0])
    assert job_end is not None and drain_end is not None, (row, drained)
    last = max(job_end, drain_end)
    assert wait_until(lambda: time.time() >= last + 1, 10), (row, drained)
    until = datetime.fromtimestamp(time.time()).strftime("%Y-%m-%dT%H:%M:%S")
    r = cli(cluster, "report", "--since", since, "--until", until, "--no-cache", "--csv", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "capacity_lost.csv").exists(), r.output
    with (tmp_path / "capacity_lost.csv").open() as f:
        lost = {row["pool"]: row for row in csv.DictReader(f)}
    with (tmp_path / "node_outages.csv").open() as f:
        outage = [row for row in csv.DictReader(f) if row["node"] == "v100-01"]
    assert len(outage) == 1 and outage[0]["cause"] == "drain" and outage[0]["reason"] == "jobpage test | fan"
    drained_s = float(outage[0]["lost_s"])
    assert 3.5 <= drained_s <= 7
    assert float(lost["v100@x86_64"]["lost_drain_hours"]) == pytest.approx(4 * drained_s / 3600)
    with (tmp_path / "utilisation_by_model.csv").open() as f:
        v100 = next(row for row in csv.DictReader(f) if row["model"] == "v100")
    span = datetime.fromisoformat(until).timestamp() - datetime.fromisoformat(since).timestamp()
    assert float(v100["capacity_device_hours"]) == pytest.approx(4 * (span - drained_s) / 3600, rel=1e-6)
