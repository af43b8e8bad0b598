"""Service tiers: preemption mode, grace, minimum run and limits, from the site file to the
rendered sacctmgr/slurm.conf lines and `slurm-hetero tiers`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.conf.render import Profile, render_site
from slurm_hetero.site import load_site_text
from slurm_hetero.site.load import SiteError
from slurm_hetero.site.tiers import format_tiers, parse_duration_s, tier_views

BASE = """\
name: t
partitions:
  - {name: cpu, default: true}
  - {name: gpu}
node_groups:
  - names: c[1-2]
    architecture: x86_64
    sockets: 2
    cores_per_socket: 8
    memory: 64GB
    partitions: [cpu]
  - names: g[1-2]
    architecture: x86_64
    sockets: 2
    cores_per_socket: 8
    memory: 256GB
    partitions: [gpu]
    accelerators:
      - {model: a100-80gb, count: 4}
  - names: h1
    architecture: x86_64
    sockets: 2
    cores_per_socket: 8
    memory: 256GB
    partitions: [gpu]
    accelerators:
      - {model: h100, count: 1}
"""


def site_with(qos: str) -> str:
    return BASE + "qos:\n" + qos


def errors_of(text: str) -> list[str]:
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    return e.value.lines


def qos_lines(text: str) -> list[str]:
    files = render_site(load_site_text(text, "site.yaml"), Profile())
    return [ln for ln in files["qos.sacctmgr"].splitlines() if "modify qos" in ln]


def preempt_mode_line(text: str) -> str:
    conf = render_site(load_site_text(text, "site.yaml"), Profile())["slurm.conf"]
    return next(ln for ln in conf.splitlines() if ln.startswith("PreemptMode="))


TIERS = """\
  - {name: top, priority: 1000, preempt: [mid, low], limits: {units: 50%, cpus: 24, memory: 1TB}}
  - {name: mid, priority: 500, preempt: [low], default: true, preempt_mode: cancel, grace_time: 2min}
  - {name: low, priority: 100, grace_time: 30, min_run: "1:00:00", limits: {units: 2}}
"""


def test_defaults_render_as_before() -> None:
    assert qos_lines(BASE) == [
        "sacctmgr -i modify qos where name=diamond set Priority=1000 UsageFactor=2.0 Preempt=gold,silver",
        "sacctmgr -i modify qos where name=gold set Priority=500 UsageFactor=1.0 Preempt=silver",
        "sacctmgr -i modify qos where name=silver set Priority=100 UsageFactor=0.5",
    ]
    assert preempt_mode_line(BASE) == "PreemptMode=REQUEUE"


def test_modes_grace_min_run_and_limits_render() -> None:
    text = site_with(TIERS)
    assert qos_lines(text) == [
        "sacctmgr -i modify qos where name=top set Priority=1000 UsageFactor=1.0 Preempt=mid,low",
        "sacctmgr -i modify qos where name=mid set Priority=500 UsageFactor=1.0 PreemptMode=cancel "
        "Preempt=low GraceTime=120",
        # PreemptExemptTime as H:M:S: sacctmgr reads a plain number as minutes.
        "sacctmgr -i modify qos where name=low set Priority=100 UsageFactor=1.0 GraceTime=30 "
        "PreemptExemptTime=01:00:00",
        # 50% of each pool: 4 of 8 A100s; the single H100 stays usable (at least one device).
        "sacctmgr -i modify qos where name=top set GrpTRES=cpu=24,mem=1048576,gres/gpu=5,"
        "gres/gpu:a100-80gb=4,gres/gpu:h100=1",
        # 2 normalized units: 2 A100s (1.0 each); an H100 is worth more than 1 unit, so 1.
        "sacctmgr -i modify qos where name=low set GrpTRES=gres/gpu=3,gres/gpu:a100-80gb=2,"
        "gres/gpu:h100=1",
    ]
    assert preempt_mode_line(text) == "PreemptMode=REQUEUE"


def test_cpu_and_memory_shares() -> None:
    site = load_site_text(site_with("  - {name: a, priority: 1, limits: {cpus: 50%, memory: 25%}}\n"),
                          "site.yaml")
    # 5 nodes x 16 CPUs; 2 x 64 GB + 3 x 256 GB.
    assert dict(site.qos[0].grp_tres) == {"cpu": 40, "mem": (2 * 65536 + 3 * 262144) // 4}


def test_suspend_adds_gang() -> None:
    text = site_with("  - {name: hi, priority: 10, preempt: [lo]}\n"
                     "  - {name: lo, priority: 1, preempt_mode: suspend}\n")
    assert preempt_mode_line(text) == "PreemptMode=REQUEUE,GANG"
    assert "PreemptMode=suspend" in qos_lines(text)[1]


@pytest.mark.parametrize(("qos", "expected"), [
    ("  - {name: a, priority: 1, preempt_mode: pause}\n",
     "site.yaml:29:42: qos[0].preempt_mode: 'pause' is not one of ['requeue', 'cancel', 'suspend']\n"
     "    hint: what happens to this tier's jobs when a tier that preempts it needs their resources: "
     "requeue (the default), cancel or suspend"),
    ("  - {name: a, priority: 1, grace_time: soon}\n",
     "site.yaml:29:40: qos[0].grace_time: cannot read duration 'soon'\n"
     "    hint: seconds (90), a number with a unit (90s, 10min, 2h, 1d) or H:MM:SS"),
    ("  - {name: a, priority: 1, min_run: 8d}\n",
     "site.yaml:29:37: qos[0].min_run: '8d' is too long: at most 7d\n"
     "    hint: seconds (90), a number with a unit (90s, 10min, 2h, 1d) or H:MM:SS"),
    ("  - {name: a, priority: 1, limits: {units: 150%}}\n",
     "site.yaml:29:44: qos[0].limits.units: share '150%' must be above 0% and at most 100%\n"
     "    hint: units: normalized accelerator units per pool (8, or 50% of each pool); cpus: a "
     "count or share; memory: a size (2TB) or share"),
    ("  - {name: a, priority: 1, limits: {gpus: 4}}\n",
     "site.yaml:29:36: qos[0].limits: Additional properties are not allowed ('gpus' was unexpected)\n"
     "    hint: allowed keys: cpus, memory, units"),
    ("  - {name: a, priority: 1, preempt: [b]}\n  - {name: b, priority: 2, preempt: [a]}\n",
     "site.yaml:29:38: qos[0].preempt[0]: a and b preempt each other\n"
     "    hint: preemption goes one way: remove one of the two"),
    ("  - {name: hi, priority: 1, preempt: [lo]}\n  - {name: lo, priority: 1, preempt_mode: suspend}\n",
     "site.yaml:30:43: qos[1].preempt_mode: tier hi (priority 1) suspends lo (priority 1) without a "
     "higher priority\n    hint: a tier whose jobs are suspended needs a lower priority than every "
     "tier that preempts it, or preempt_mode requeue or cancel"),
    ("  - {name: hi, priority: 9, preempt: [lo]}\n"
     "  - {name: lo, priority: 1, preempt_mode: suspend, grace_time: 30}\n",
     "site.yaml:30:64: qos[1].grace_time: grace_time has no effect on a tier whose jobs are suspended\n"
     "    hint: Slurm honours GraceTime and PreemptExemptTime only for preempt_mode requeue and cancel"),
])
def test_bad_tiers(qos: str, expected: str) -> None:
    assert errors_of(site_with(qos)) == [expected]


def test_units_need_accelerators() -> None:
    cpu_only = BASE.split("  - names: g[1-2]")[0].replace("  - {name: gpu}\n", "")
    lines = errors_of(cpu_only + "qos:\n  - {name: a, priority: 1, limits: {units: 4}}\n")
    assert lines[0].endswith("qos[0].limits.units: the site has no accelerators to limit in units\n"
                             "    hint: units: normalized accelerator units per pool (8, or 50% of "
                             "each pool); cpus: a count or share; memory: a size (2TB) or share")


def test_durations() -> None:
    assert [parse_duration_s(v) for v in (0, "45s", "3m", "2h", "1d", "10:00", "1:00:00")] == \
        [0, 45, 180, 7200, 86400, 600, 3600]
    with pytest.raises(ValueError):
        parse_duration_s("1:2:3:4")


def test_views_both_sides() -> None:
    views = {v.name: v for v in tier_views(load_site_text(site_with(TIERS), "site.yaml"))}
    assert views["low"].preempted_by == ("top", "mid")
    assert views["top"].preempted_by == () and views["top"].fate() == "never preempted"
    assert views["mid"].fate() == ("preemptible by top: SIGTERM to its srun steps, 2m to checkpoint, "
                                   "then cancelled")
    assert views["low"].fate() == ("preemptible by top, mid after 1h of run time: SIGTERM to its srun "
                                   "steps, 30s to checkpoint, then requeued (restarts later)")
    text = format_tiers(load_site_text(site_with(TIERS), "site.yaml"))
    assert "mid: priority 500, usage factor 1 (default)" in text
    assert "  as GrpTRES:   gres/gpu=3,gres/gpu:a100-80gb=2,gres/gpu:h100=1" in text


def test_tiers_command(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(site_with(TIERS))
    r = CliRunner().invoke(main, ["tiers", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "low: priority 100" in r.output and "min run:      1h" in r.output
    r = CliRunner().invoke(main, ["tiers", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    low = next(t for t in json.loads(r.output) if t["name"] == "low")
    assert (low["preempt_mode"], low["grace_s"], low["min_run_s"]) == ("requeue", 30, 3600)
    (tmp_path / "site.yaml").write_text(site_with("  - {name: a, priority: 1, grace_time: soon}\n"))
    r = CliRunner().invoke(main, ["tiers", str(tmp_path)])
    assert r.exit_code == 2 and "qos[0].grace_time: cannot read duration 'soon'" in r.output


def test_demo_tiers() -> None:
    demo = Path(__file__).resolve().parents[2] / "site" / "demo"
    r = CliRunner().invoke(main, ["tiers", str(demo)])
    assert r.exit_code == 0, r.output
    assert "silver: priority 100" in r.output and "preempted by: diamond, gold" in r.output


def test_the_user_sees_what_the_tier_allows_at_submit(tmp_path: Path) -> None:
    from slurm_hetero.bridge.luarun import JobSubmit
    from slurm_hetero.site import load_site

    site = load_site(Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml")
    js = JobSubmit(render_site(site, Profile(state_dir=str(tmp_path)))["job_submit.lua"])
    assert js.submit({"tier": "silver"})[0] == 0
    assert js.user_lines() == ["hetero: tier silver: preemptible by diamond, gold after 2m of run time: "
                               "SIGTERM to its srun steps, 1m to checkpoint, then requeued (restarts later)"]
    js.logs.clear()
    assert js.submit({"tier": "diamond"})[0] == 0 and js.user_lines() == ["hetero: tier diamond: never preempted"]
    js.logs.clear()
    assert js.submit({}, qos="silver")[0] == 0 and js.user_lines() == []  # plain --qos: untouched
