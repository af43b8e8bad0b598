"""A job's own page on captured `sacct --json -j` output of the dev cluster (22.05):
a bridge GPU job with the node agent's figures, a job whose step lived long enough for
MaxRSS, a running NPU job, a held job; advice rules on records built from them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import cast

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.errors import InputError
from slurm_hetero.reports import write_html
from slurm_hetero.reports.jobid import check_job_id
from slurm_hetero.reports.jobpage import (
    Fact,
    JobPage,
    build_page,
    caller_may_see,
    page_report,
    queued,
)
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.commands import sacct_job_json_argv
from slurm_hetero.slurm.jobrecord import JobRecord, parse_admin_level, parse_sacct_job_json
from slurm_hetero.slurm.runner import Runner
from tests.fakeslurm import FakeSlurm
from tests.unit.test_report_browser import needs_chromium, open_in_chromium

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "tests" / "data" / "captured"
SQUEUE = (CAPTURED / "squeue-json-jobpage-22.05.json").read_text()
NOW = 1796166440.0  # when the running and held jobs were captured (job 2 started 1796166352)


def text(n: int) -> str:
    return (CAPTURED / f"sacct-json-job{n}-22.05.json").read_text()


def record(n: int) -> JobRecord:
    rec = parse_sacct_job_json(text(n), n)
    assert rec is not None
    return rec


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(ROOT / "site" / "demo" / "site.yaml")


def facts(page: JobPage) -> dict[str, dict[str, str]]:
    return cast(dict[str, dict[str, str]], page.as_dict()["groups"])


def test_captured_records_parse() -> None:
    gpu = record(1)  # --accel=a100-80gb:2 --energy=efficiency -c 4 --mem=16G -t 30, srun 4 s busy
    assert (gpu.state, gpu.partition, gpu.nodes, gpu.limit_s, gpu.req_cpus, gpu.req_mem_mb) == \
        ("COMPLETED", "gpu", "a100-01", 1800.0, 4.0, 16384.0)
    assert gpu.allocated["gres/gpu:a100-80gb"] == 2 and gpu.alloc_cpus == 4
    # 22.05 keeps the job-level CPU total at 0: the steps' totals (0.079 + 4.11 s) are summed.
    assert gpu.cpu_seconds() == pytest.approx(0.079901 + 4.110759, abs=1e-6)
    assert [s.step for s in gpu.steps] == ["batch", "0"] and gpu.max_rss_bytes() is None
    assert gpu.admin_comment.startswith("{`hetero`:1")
    mem = record(5)  # a 36 s step holding 400 MB: sampled once, MaxRSS 423000K
    assert mem.max_rss_bytes() == 433152000 and mem.req_mem_mb == 4096
    running, held = record(2), record(3)
    assert running.state == "RUNNING" and running.start and running.end is None
    assert held.state == "PENDING" and held.start is None and held.nodes == "" and held.limit_s == 3600
    assert parse_sacct_job_json((CAPTURED / "sacct-json-missing-22.05.json").read_text(), 999) is None
    assert parse_sacct_job_json(text(1), 2) is None  # another job's answer is not this job
    with pytest.raises(ValueError, match="no jobs list"):
        parse_sacct_job_json("{}", 1)


def test_bridge_gpu_job_page(site: Site) -> None:
    page = build_page(record(1), None, site, now=NOW)
    g = facts(page)
    assert g["Asked"]["--accel"] == "a100-80gb:2" and g["Asked"]["--energy"] == "efficiency"
    assert g["Asked"]["GRES"] == "gpu:a100-80gb:2" and g["Got"]["GRES (AllocTRES)"] == "gpu:a100-80gb:2"
    assert g["Bridge"]["pool"] == "a100-80gb@x86_64" and g["Bridge"]["why"] == "starts-now"
    assert g["Got"]["accelerators"] == "2 x a100-80gb"
    assert g["Time"]["runtime"] == "5 s" and g["Time"]["limit"] == "30m00s"
    assert page.figures["cpu_eff_pct"] == pytest.approx(100 * 4.190660 / (5 * 4), rel=1e-4)
    assert g["Efficiency"]["CPU"] == "21%"
    # The node agent's figures: two devices at 80 %, 1120.5 + 1118.9 J.
    assert page.devices["util_pct"].tolist() == [80.0, 80.0]
    assert page.figures["energy_j"] == pytest.approx(2239.4)
    assert g["Accelerators and energy"]["busy units"] == "1.60 of 2.00"
    assert page.advice[0].startswith("asked 30m00s, ran 5 s: ask 5 min (-t 5)")
    assert any("of 4 CPUs" in a and "ask -c 2" in a for a in page.advice)
    assert "memory efficiency" in page.unknown[0]  # no step lived past a 30 s sample


def test_memory_efficiency_and_its_advice(site: Site) -> None:
    page = build_page(record(5), None, site, now=NOW)
    assert page.figures["mem_eff_pct"] == pytest.approx(100 * 433152000 / (4096 * 2**20))
    assert facts(page)["Efficiency"]["memory"] == "10%"
    assert page.advice[0] == "used 10% of the 4.0 GB asked: ask --mem=1G"


def test_running_job_says_what_is_not_known_yet(site: Site) -> None:
    q = queued(SQUEUE, 2)
    assert q is not None and q.state == "RUNNING"
    page = build_page(record(2), q, site, now=NOW)
    g = facts(page)
    assert g["Time"]["runtime so far"] == "1m28s"  # NOW - start
    assert g["Efficiency"]["CPU"] == "not known yet"
    assert g["Accelerators and energy"]["utilisation"] == "not known yet"
    assert g["Got"]["accelerators"] == "1 x ascend-910b"
    assert len(page.unknown) == 3 and page.advice == ["no advice yet: it is still running"]


def test_pending_job_shows_slurmctlds_reason(site: Site) -> None:
    q = queued(SQUEUE, 3)
    assert q is not None and q.reason == "JobHeldUser"
    page = build_page(record(3), q, site, now=NOW)
    nothing = next(f for f in page.groups[2][1] if f.label == "nothing yet")
    assert nothing.value == "pending for 1m30s" and nothing.note == "reason: JobHeldUser"
    assert page.unknown == ["what it gets, and every use figure: it has not started"]
    assert queued(SQUEUE, 424242) is None


def _with_devices(rec: JobRecord, utils: list[float], gpus: int = 4) -> JobRecord:
    comment = {"hetero": 1, "accel": f"a100-80gb:{gpus}", "node_energy": {"a100-01": {"devices": [
        {"kind": "gpu", "idx": i, "s": 3600, "energy_j": 1000.0, "util": u} for i, u in enumerate(utils)]}}}
    alloc = {**rec.allocated, "gres/gpu:a100-80gb": float(gpus), "gres/gpu": float(gpus)}
    return dataclasses.replace(rec, admin_comment=json.dumps(comment), allocated=alloc)


def test_advice_ranks_idle_accelerators_first(site: Site) -> None:
    rec = _with_devices(record(1), [0.23, 0.0, 0.01, 0.0])
    page = build_page(rec, None, site, now=NOW)
    assert page.advice[0] == "asked for 4 gpus, used 1 at 23%: ask --accel=a100-80gb:1"
    assert page.devices["model"].tolist() == ["a100-80gb"] * 4


def test_advice_for_a_short_run_and_for_unused_memory(site: Site) -> None:
    # asked 8 h and 64 GB, ran 20 min with a 2 GB peak
    rec = dataclasses.replace(record(5), limit_s=8 * 3600.0, elapsed_s=1200.0, req_mem_mb=65536.0)
    rec = dataclasses.replace(rec, steps=tuple(dataclasses.replace(s, max_rss_bytes=2 * 2**30 if s.step == "0"
                                                                    else s.max_rss_bytes) for s in rec.steps))
    page = build_page(rec, None, site, now=NOW)
    assert page.advice[0] == ("asked 8h00m, ran 20m00s: ask 40 min (-t 40) and start sooner "
                              "(backfill fits short limits)")
    assert "used 3.1% of the 64 GB asked: ask --mem=3G" in page.advice


def test_busy_accelerators_and_a_fitting_request_give_no_waste_line(site: Site) -> None:
    rec = dataclasses.replace(_with_devices(record(1), [0.9, 0.95], gpus=2), limit_s=10.0)
    rec = dataclasses.replace(rec, steps=tuple(dataclasses.replace(s, cpu_s=19.0) for s in rec.steps[:1]))
    page = build_page(rec, None, site, now=NOW)
    assert page.advice == ["nothing to change: the job used what it asked for"]


@pytest.mark.parametrize("bad", ["abc", "12_3", "0", "", "-1", "1" * 13, "12 3"])
def test_bad_job_ids_are_input_errors(bad: str) -> None:
    with pytest.raises(InputError, match=r"JOBID .*not a job id; give the number sbatch printed"):
        check_job_id(bad)
    assert check_job_id(" 1234 ") == 1234


def test_only_owner_root_and_operators_see_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm = FakeSlurm(monkeypatch).on("sacctmgr", "None\n")
    r = Runner()
    assert caller_may_see(r, "root", uid=0)
    assert caller_may_see(r, "alice", me="alice", uid=1000)
    assert not caller_may_see(r, "root", me="alice", uid=1000)
    slurm.on("sacctmgr", "Operator\n")
    assert caller_may_see(r, "root", me="alice", uid=1000)
    assert slurm.argvs("sacctmgr")[-1] == ["sacctmgr", "-i", "-n", "-P", "show", "user", "alice",
                                           "format=AdminLevel"]
    assert parse_admin_level("") == "" and parse_admin_level("Administrator\n") == "Administrator"


def _fake_cluster(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    by_id = {str(n): text(n) for n in (1, 2, 3, 4, 5)}
    missing = (CAPTURED / "sacct-json-missing-22.05.json").read_text()
    return (FakeSlurm(monkeypatch).on("sacct", lambda argv, env: by_id.get(argv[-1], missing))
            .on("squeue", SQUEUE))


def test_cli_exit_codes_and_output(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    slurm = _fake_cluster(monkeypatch)
    run = CliRunner()
    bad = run.invoke(main, ["job", "12x"])
    assert bad.exit_code == 2 and "JOBID '12x': not a job id" in bad.output and slurm.calls == []
    gone = run.invoke(main, ["job", "999"])
    assert gone.exit_code == 1 and "job 999: no such job in accounting" in gone.output
    asked_squeue = len(slurm.argvs("squeue"))  # job 999: slurmctld was asked too
    assert asked_squeue == 1
    ok = run.invoke(main, ["job", "1"])
    assert ok.exit_code == 0, ok.output
    assert "advice: asked 30m00s, ran 5 s" in ok.output and "a100-80gb@x86_64" in ok.output
    assert slurm.argvs("sacct")[-1] == sacct_job_json_argv(1) == ["sacct", "--json", "-j", "1"]
    assert len(slurm.argvs("squeue")) == asked_squeue  # a finished job needs no slurmctld
    as_json = run.invoke(main, ["job", "2", "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["state"] == "RUNNING"
    html = run.invoke(main, ["report", "--job", "5", "-o", str(tmp_path / "job.html")])
    assert html.exit_code == 0, html.output
    assert "ask --mem=1G" in (tmp_path / "job.html").read_text()


@needs_chromium
def test_job_page_html_in_chromium(site: Site, tmp_path: Path) -> None:
    """The page as HTML: no console message; a job name that is markup stays text."""
    doc = json.loads(text(1))
    doc["jobs"][0]["name"] = "<img src=x onerror=console.error('pwned')>"
    rec = parse_sacct_job_json(json.dumps(doc), 1)
    assert rec is not None
    page = build_page(rec, None, site, now=NOW)
    html = write_html(page_report(page, "sacct of job 1", now=NOW), tmp_path / "job.html")
    body = html.read_text()
    assert "&lt;img src=x" in body and "<img src=x" not in body
    assert "ask 5 min (-t 5)" in body and "a100-01/gpu1 80%" in body
    check = open_in_chromium(html, tmp_path)
    assert check.console == []
    assert (check.plots, check.drawn) == (0, 0)
    assert check.screenshot.stat().st_size > 10_000


def test_a_job_slurmdbd_has_not_heard_of_yet_is_read_from_slurmctld(
        monkeypatch: pytest.MonkeyPatch, site: Site) -> None:
    missing = (CAPTURED / "sacct-json-missing-22.05.json").read_text()
    FakeSlurm(monkeypatch).on("sacct", missing).on("squeue", SQUEUE)
    from slurm_hetero.reports.jobpage import job_page

    page = job_page(Runner(), "2", site, now=NOW)
    g = facts(page)
    assert page.state == "RUNNING" and g["Got"]["GRES (AllocTRES)"] == "npu:910b:1"
    assert g["Asked"]["memory"] == "1.0 GB" and g["Asked"]["time limit"] == "10m00s"
    assert g["Time"]["runtime so far"] == "1m28s"
    held = job_page(Runner(), "3", site, now=NOW)
    assert held.state == "PENDING" and held.groups[2][1][0].note == "reason: JobHeldUser"


def test_builders_keep_ids_and_names_plain() -> None:
    from slurm_hetero.slurm.commands import admin_level_argv

    assert sacct_job_json_argv("42") == ["sacct", "--json", "-j", "42"]
    for bad in ("-a", "1,2", "1 --json"):
        with pytest.raises(ValueError, match="not a Slurm job id"):
            sacct_job_json_argv(bad)
    for bad in ("-i", "a b", "x,y", ""):
        with pytest.raises(ValueError, match="not a user name"):
            admin_level_argv(bad)


def test_captured_24_11_shapes(site: Site) -> None:
    """Slurm 24.11 (data_parser v0.0.41): numbers as {set, infinite, number}, states as lists,
    step ids `1.batch`, memory_per_node; the same page figures."""
    gpu = parse_sacct_job_json((CAPTURED / "sacct-json-gpu-24.11.json").read_text(), 1)
    assert gpu is not None  # --gres=gpu:h100:2 -c 4 --mem=8G -t 30, a 36 s step holding 400 MB
    assert (gpu.state, gpu.limit_s, gpu.req_mem_mb, gpu.nodes) == ("COMPLETED", 1800.0, 8192.0, "g01")
    assert [s.step for s in gpu.steps] == ["batch", "0"] and [s.state for s in gpu.steps] == ["COMPLETED"] * 2
    assert gpu.cpu_seconds() == pytest.approx(0.012166 + 1 + 1.539659)
    assert gpu.max_rss_bytes() == 428290048 and gpu.allocated["gres/gpu:h100"] == 2
    page = build_page(gpu, None, site, now=NOW)
    assert page.figures["mem_eff_pct"] == pytest.approx(100 * 428290048 / (8192 * 2**20))
    assert page.advice[0].startswith("asked 30m00s, ran 37 s: ask 5 min")
    sq = (CAPTURED / "squeue-json-jobpage-24.11.json").read_text()
    running = parse_sacct_job_json((CAPTURED / "sacct-json-running-24.11.json").read_text(), 2)
    assert running is not None and running.state == "RUNNING" and running.limit_s == 600
    q = queued(sq, 3)
    assert q is not None and (q.state, q.reason) == ("PENDING", "JobHeldUser")
    held = parse_sacct_job_json((CAPTURED / "sacct-json-pending-24.11.json").read_text(), 3)
    assert held is not None and held.start is None and held.nodes == ""
    assert parse_sacct_job_json((CAPTURED / "sacct-json-missing-24.11.json").read_text(), 99999) is None


def test_low_use_on_every_device_points_at_a_smaller_model(site: Site) -> None:
    page = build_page(_with_devices(record(1), [0.2, 0.3], gpus=2), None, site, now=NOW)
    assert page.advice[0] == ("2 gpus busy 25% on average: --accel=units=0.5 lets the bridge pick a smaller "
                              "model (0.50 of 2.00 units were busy); or --energy=efficiency saves power at "
                              "little cost")


def test_report_job_refuses_options_of_the_period_report() -> None:
    r = CliRunner().invoke(main, ["report", "--job", "1", "--since", "-1d"])
    assert r.exit_code == 2 and "--job shows one job's page: it takes no --since" in r.output



def _asked_limit(rec: JobRecord, site: Site) -> Fact:
    page = build_page(rec, None, site, now=NOW)
    return next(f for name, fs in page.groups if name == "Asked" for f in fs if f.label == "time limit")


def test_a_limit_the_bridge_shortened_says_what_the_user_asked(site: Site) -> None:
    # As bridge.lua writes it: "shortened" and "user_limit_min" beside "pred", not inside it.
    comment = {"hetero": 1, "accel": "a100-80gb:2", "pred": {"p50": 120, "p90": 600},
               "shortened": True, "user_limit_min": 60}
    rec = dataclasses.replace(record(1), admin_comment=json.dumps(comment), limit_s=600.0)
    limit = _asked_limit(rec, site)
    assert limit.value == "10m00s" and limit.note.startswith("you asked 1h00m"), limit
    plain = dataclasses.replace(rec, admin_comment=json.dumps({**comment, "shortened": False}))
    assert _asked_limit(plain, site).note == ""
