"""The bridge daemon's minute: `forecast_now` (pure) on site pools, and the `Refresher`
that keeps accounting and the model current through the project's runner (faked here)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_hetero.forecast import HORIZONS
from slurm_hetero.forecast.live import Refresher, forecast_detail, forecast_now
from slurm_hetero.forecast.models import ForecastParams
from slurm_hetero.forecast.sources import SACCT_FIELDS, PoolMap, parse_sacct_demand
from slurm_hetero.site import Site, load_site
from slurm_hetero.slurm.runner import Runner, SlurmCommandError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "forecast"
NOW = 1796034100.0  # after every job of the sacct files below


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(ROOT / "site" / "demo" / "site.yaml")


@dataclass
class FakeSacct(Runner):
    """A runner whose every command prints `text` (the captured sacct lines)."""

    text: str = ""
    calls: list[list[str]] = field(default_factory=list)

    def out(self, argv: Sequence[str], **kw: float | None) -> str:
        self.calls.append(list(argv))
        return self.text


def sacct_text() -> str:
    return "".join((DATA / f).read_text() for f in ("sacct-22.05.psv", "sacct-handwritten.psv"))


def test_forecast_now_without_a_model_is_persistence(site: Site) -> None:
    table = parse_sacct_demand(sacct_text(), site)
    pools = PoolMap(site).pools()
    got = forecast_now(None, table, NOW, pools)
    assert list(got) == pools and all(set(v) == set(HORIZONS) for v in got.values())
    units = {m.id: m.units for m in site.models_in_use}
    # in the system at NOW: job 101 waits for 2 V100s, job 102 runs on 4 910Bs, job 103 waits for 16 cores
    assert got["v100@x86_64"] == {h: pytest.approx(2 * units["v100"]) for h in HORIZONS}
    assert got["ascend-910b@aarch64"][60] == pytest.approx(4 * units["ascend-910b"])
    assert sum(v[5] for k, v in got.items() if k.startswith("cpu@")) == 16.0
    assert got["gh200@aarch64"] == {h: 0.0 for h in HORIZONS}
    detail = {d.pool: d for d in forecast_detail(None, table, NOW, pools)}
    assert detail["v100@x86_64"].pending > 0 and detail["v100@x86_64"].running == 0
    assert set(detail["v100@x86_64"].methods.values()) == {"persistence"}


def test_forecast_now_before_the_jobs(site: Site) -> None:
    table = parse_sacct_demand(sacct_text(), site)
    early = forecast_now(None, table, 1796033000.0, PoolMap(site).pools())
    assert all(v == 0.0 for f in early.values() for v in f.values())


def test_refresher_reads_sacct_trains_and_forecasts(site: Site) -> None:
    runner = FakeSacct(text=sacct_text())
    logs: list[str] = []
    r = Refresher(site, runner, days=2, params=ForecastParams(rounds=10), clock=lambda: NOW,
                  log=logs.append, background=False)
    got = r()
    assert r.model is not None and len(r.model.boosters) == len(PoolMap(site).pools()) * len(HORIZONS)
    assert set(got) == set(PoolMap(site).pools())
    assert all(math.isfinite(v) and v >= 0 for f in got.values() for v in f.values())
    assert got["ascend-910b@aarch64"][5] >= 0.9 * 4 * 0.93  # the running NPU job holds its units
    sacct = [c for c in runner.calls if c[0] == "sacct"]
    assert sacct and all(c[c.index("-o") + 1] == ",".join(SACCT_FIELDS) for c in sacct)
    assert any("trained" in line for line in logs)
    n = len(runner.calls)
    r()  # a minute later: one small sacct call, no retraining
    assert len(runner.calls) == n + 1


def test_refresher_survives_a_failing_retrain(site: Site) -> None:
    class Broken(FakeSacct):
        """slurmdbd does not answer the history query (the first one); later ones work."""

        def out(self, argv: Sequence[str], **kw: float | None) -> str:
            self.calls.append(list(argv))
            if len(self.calls) == 1:
                raise SlurmCommandError(argv, 1, "sacct: error: Problem talking to the database")
            return self.text

    logs: list[str] = []
    r = Refresher(site, Broken(text=sacct_text()), days=1, clock=lambda: NOW, log=logs.append,
                  background=False)
    got = r()
    assert r.model is None and any("retrain failed" in line for line in logs)
    assert got["ascend-910b@aarch64"][15] > 0  # persistence from the minute's sacct
