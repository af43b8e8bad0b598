"""sacct text → job table, and the day-chunked, cached fetching (through the fake Slurm)."""

from __future__ import annotations

import math
import time
from collections.abc import Hashable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.jobs.decisions import parse_admin_comment
from slurm_hetero.jobs.sacct import cpu_seconds, from_sacct
from slurm_hetero.reports.pending import parse_squeue_pending
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import DELIM, SETTLE_S, SacctDays, accounting_identity, chunk_settled
from tests.fakeslurm import FakeSlurm
from tests.report_fixture import DATA, PSV_FIELDS, psv_jobs, read_psv

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(DEMO)


def _jobs(site: Site, *names: str) -> dict[str, dict[Hashable, Any]]:
    return {str(r["job_id"]): r for r in psv_jobs(site, *names).to_dict("records")}


def test_captured_sacct_drops_steps_and_maps_gres_to_models(site: Site) -> None:
    jobs = _jobs(site, "sacct-22.05.psv")
    assert sorted(jobs, key=int) == ["1", "2", "3", "4", "5", "6", "7", "9", "11", "12"]
    assert (jobs["1"]["model"], jobs["1"]["arch"], jobs["1"]["devices"]) == ("h100", "x86_64", 1.0)
    assert (jobs["2"]["model"], jobs["2"]["arch"]) == ("ascend-910b", "aarch64")  # gres/npu:910b
    assert jobs["3"]["units"] == pytest.approx(2 * site.catalog["a100-80gb"].units)
    # A V100 shard is a quarter of a device (shards_per_device: 4 in the demo site).
    assert (jobs["6"]["model"], jobs["6"]["accel_class"], jobs["6"]["devices"]) == ("v100", "v100/shard", 0.25)
    assert (jobs["7"]["model"], jobs["7"]["accel_class"], jobs["7"]["arch"]) == ("", "cpu", "aarch64")
    # TotalCPU of the allocation line already sums the steps (00:00.997 = .612 + .384 + extern).
    assert jobs["9"]["cpu_time"] == pytest.approx(0.997)
    assert jobs["11"]["req_time_s"] == 300.0 and jobs["11"]["state"] == "COMPLETED"
    assert jobs["1"]["submit"] == 1796033027.0 and jobs["1"]["runtime_s"] == 3.0


def test_bridge_decisions_read_from_the_admin_comment(site: Site) -> None:
    jobs = _jobs(site, "sacct-22.05.psv")
    assert (jobs["4"]["hetero"], jobs["4"]["accel_kind"], jobs["4"]["pool"]) == (True, "any", "v100@x86_64")
    assert (jobs["4"]["tier"], jobs["4"]["policy"], jobs["4"]["why"]) == ("silver", "efficiency", "starts-now")
    assert (jobs["5"]["accel_spec"], jobs["5"]["accel_kind"]) == ("units=2", "units")
    assert (jobs["12"]["accel_kind"], jobs["12"]["policy"]) == ("named", "performance")
    assert jobs["1"]["hetero"] is False or not jobs["1"]["hetero"]


def test_handwritten_edge_cases(site: Site) -> None:
    jobs = _jobs(site, "sacct-handwritten.psv")
    j101, j102 = jobs["101"], jobs["102"]
    assert (j101["pred_p50"], j101["pred_p90"], j101["energy_j"]) == (3000.0, 4800.0, 2160000.0)
    assert j101["accel_util"] == 70.0 and j101["cpu_time"] == 6 * 3600
    # No top-level energy_j: the devices' energy adds up; a non-numeric util is ignored.
    assert (j102["energy_j"], j102["accel_util"]) == (3000000.0, 90.0)
    # A truncated decision is no decision; the job itself is still reported.
    assert (jobs["103"]["hetero"], jobs["103"]["accel_spec"], jobs["103"]["model"]) == (False, "", "ascend-910b")
    # Free text in the admin comment; Slurm's own ConsumedEnergy is used when nothing else is.
    assert (jobs["104"]["hetero"], jobs["104"]["energy_j"]) == (False, 540000.0)
    assert math.isnan(jobs["105"]["end"]) and jobs["105"]["arch"] == "x86_64"  # a100-[01-02] → a100-01
    assert jobs["106"]["state"] == "PENDING" and math.isnan(jobs["106"]["start"])
    assert jobs["106"]["reason"] == "Priority" and jobs["106"]["accel_class"] == "cpu"
    # Cancelled while pending: Slurm sets Start = End; it never ran.
    assert jobs["107"]["state"] == "CANCELLED" and math.isnan(jobs["107"]["start"])
    assert jobs["108_3"]["state"] == "TIMEOUT"


def test_the_node_agents_figures_after_sacctmgr_rewrote_the_quotes(site: Site) -> None:
    """The energy agent's "node_energy" as the real cluster stores it (quotes as backquotes)."""
    j = _jobs(site, "sacct-handwritten.psv")["111"]
    assert (j["hetero"], j["accel_kind"], j["pool"], j["why"]) == (True, "any", "ascend-910b@aarch64", "least-backlog")
    assert j["energy_j"] == 780.3
    assert j["accel_util"] == pytest.approx(70.0)  # devices 0.8 and 0.6, as fractions
    assert j["policy"] == "efficiency"  # the policy the agent applied ("auto" resolved)


def test_chunks_dedupe_jobs_seen_on_several_days(site: Site) -> None:
    text = (DATA / "sacct-handwritten.psv").read_text()
    raw = read_psv([text, text.replace("RUNNING", "COMPLETED")])
    assert len(raw.frame) == 9
    table = from_sacct(raw.frame, site)
    assert table.loc[table["job_id"] == "105", "state"].iloc[0] == "COMPLETED"  # the later chunk wins


def test_short_lines_are_counted_and_extra_separators_stay_in_the_comment(site: Site) -> None:
    lines = (DATA / "sacct-handwritten.psv").read_text().splitlines()
    short = DELIM.join(lines[3].split(DELIM)[:5])
    raw = read_psv(["\n".join([*lines, short]) + "\n"])
    assert (len(raw.frame), raw.skipped) == (9, 1)
    extra = lines[3] + DELIM + "tail"
    raw = read_psv(["\n".join([lines[0], extra]) + "\n"])
    assert len(raw.frame) == 2 and raw.frame["AdminComment"].astype(str).iloc[1].endswith(DELIM + "tail")


def test_unknown_gres_and_no_site_still_report(site: Site) -> None:
    text = (DATA / "sacct-handwritten.psv").read_text().replace("gres/gpu:h100=2", "gres/gpu:b200=2")
    table = psv_jobs(site, texts=[text])
    row = table[table["job_id"] == "101"].iloc[0]
    assert (row["model"], row["devices"]) == ("b200", 2.0) and math.isnan(row["units"])
    bare = psv_jobs(None, texts=[text])
    assert set(bare["arch"]) <= {"unknown", ""}


@pytest.mark.parametrize(("text", "expected"), [
    ("00:00.997", 0.997), ("12:34", 754.0), ("1:02:03", 3723.0), ("2-01:00:00", 176400.0), ("", math.nan),
    ("garbage", math.nan)])
def test_cpu_seconds(text: str, expected: float) -> None:
    got = cpu_seconds(text)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_decisions_never_fail_on_odd_comments() -> None:
    for comment in ["", "{", "[1,2]", '{"hetero":1,"pred":[1],"devices":"x","energy_j":true}',
                    '{"hetero":1,"energy_j":1e400}', '{"other":1}', "null"]:
        d = parse_admin_comment(comment)
        assert d == {} or math.isnan(d["energy_j"])
    agent_only = parse_admin_comment('{`node_energy`:{`h100-01`:{`energy_j`:12.5}}}')
    assert (agent_only["hetero"], agent_only["energy_j"]) == (False, 12.5)  # a plain job, metered


def test_squeue_pending() -> None:
    frame = parse_squeue_pending("8|cpu|gold|root|hetero|1796033267|JobHeldUser\n"
                                   "9|gpu,npu|gold|root|hetero|1796033268|(Resources)\n")
    assert list(frame["reason"]) == ["JobHeldUser", "Resources"]
    assert frame["submit"].tolist() == [1796033267.0, 1796033268.0]


# ---- fetching and caching ----------------------------------------------------------------

def _midnight(days_ago: int) -> float:
    today = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)
    return (today - timedelta(days=days_ago)).timestamp()


# What the fetch asks for: the captured files' fields but the job name (user text).
TRUSTED = tuple(f for f in PSV_FIELDS if f != "JobName")


def _trusted(text: str) -> str:
    """A captured file as sacct prints TRUSTED (its JobName column dropped)."""
    at = PSV_FIELDS.index("JobName")
    return "".join(DELIM.join(v for i, v in enumerate(ln.split(DELIM)) if i != at) + "\n"
                   for ln in text.splitlines())


def test_past_settled_days_come_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = _trusted((DATA / "sacct-22.05.psv").read_text())
    slurm = FakeSlurm(monkeypatch).on("sacct", done)
    # Well past midnight: in the first SETTLE_S after it, yesterday is not settled yet either.
    now = _midnight(0) + SETTLE_S + 600
    runner = Runner(slurm_conf="/nonexistent/slurm.conf")
    src = SacctDays(runner, tmp_path, fields=TRUSTED, now=now)
    texts = src.texts(_midnight(3), now)
    assert len(texts) == 4 and (src.fetched, src.hits) == (4, 0)
    again = SacctDays(runner, tmp_path, fields=TRUSTED, now=now)
    assert again.texts(_midnight(3), now) == texts
    assert (again.fetched, again.hits) == (1, 3)  # only today is asked again
    call = slurm.calls[0]
    assert call.argv[:5] == ["sacct", "-a", "-n", "-P", f"--delimiter={DELIM}"]
    assert call.argv[call.argv.index("-S") + 1] == datetime.fromtimestamp(_midnight(3)).strftime("%Y-%m-%dT%H:%M:%S")
    assert call.argv[call.argv.index("-o") + 1] == ",".join(TRUSTED)
    assert {c.env["SLURM_TIME_FORMAT"] for c in slurm.calls} == {"%s"}


def test_the_fetch_never_asks_for_user_text_beside_other_fields(tmp_path: Path) -> None:
    for fields in (PSV_FIELDS, ("JobIDRaw", "State", "Comment"), ("JobIDRaw", "WorkDir")):
        with pytest.raises(ValueError, match="user-written text"):
            SacctDays(Runner(), tmp_path, fields=fields)


def test_a_day_with_a_running_job_is_never_cached(tmp_path: Path) -> None:
    running = (DATA / "sacct-handwritten.psv").read_text()
    assert not chunk_settled(running, _midnight(1), time.time(), PSV_FIELDS)
    assert chunk_settled((DATA / "sacct-22.05.psv").read_text(), _midnight(1), time.time(), PSV_FIELDS)
    assert not chunk_settled((DATA / "sacct-22.05.psv").read_text(), time.time() - 60, time.time(), PSV_FIELDS)


def test_unreachable_slurmdbd_is_a_runtime_failure_that_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeSlurm(monkeypatch).fail("sacct", "sacct: error: Problem talking to the database: Connection refused")
    src = SacctDays(Runner(), None)
    with pytest.raises(RuntimeFailure) as e:
        src.texts(_midnight(0), time.time())
    assert "slurmdbd" in str(e.value) and "Connection refused" in str(e.value)


def test_cache_key_names_the_accounting_database(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=alpha\nAccountingStorageHost=db1 # main\nAccountingStoragePort=6819\n")
    ident = accounting_identity(Runner(slurm_conf=str(conf)))
    assert (ident["clustername"], ident["accountingstoragehost"], ident["accountingstorageport"]) == (
        "alpha", "db1", "6819")

    def folder(runner: Runner, cluster: str | None = None) -> Path:
        cache = SacctDays(runner, tmp_path, cluster=cluster).cache
        assert cache is not None
        return cache.dir

    a = folder(Runner(slurm_conf=str(conf)))
    assert folder(Runner(slurm_conf=str(conf)), cluster="other") != a  # sacct -M other
    conf.write_text("ClusterName=beta\n")
    assert folder(Runner(slurm_conf=str(conf))) != a


def test_energy_sentinels_are_unknown(site: Site) -> None:
    text = (DATA / "sacct-handwritten.psv").read_text().replace(
        f"cpu-x86-02{DELIM}540000", f"cpu-x86-02{DELIM}18446744073709551614")
    table = psv_jobs(site, texts=[text])
    assert np.isnan(table.loc[table["job_id"] == "104", "energy_j"].iloc[0])
