"""The generated bridge under Lua 5.1: SPEC + site + snapshot → job_desc fields or rejection."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.bridge.luarun import JobSubmit
from slurm_hetero.bridge.snapshot import PoolCapacity, to_lua
from slurm_hetero.conf import Profile, render_site
from slurm_hetero.site import Site, load_site
from slurm_hetero.site.policies import CPU_GOVERNORS
from slurm_hetero.site.pools import pools

DEMO = Path(__file__).resolve().parents[2] / "site" / "demo" / "site.yaml"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(DEMO)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def js(site: Site, state: Path) -> JobSubmit:
    return JobSubmit(render_site(site, Profile(state_dir=str(state)))["job_submit.lua"])


def write_snapshot(site: Site, state: Path, at: int, **free: int) -> None:
    """A snapshot where every pool is idle except those given as model=free devices."""
    caps = {}
    for p in pools(site):
        f = free.get(p.model.replace("-", "_"), p.devices)
        caps[p.key] = PoolCapacity(total=p.devices, free=f, free_max_node=min(f, p.per_node))
    (state / "hetero-snapshot.lua").write_text(to_lua(caps, at))


def decision(desc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(desc["admin_comment"])
    return out


# ---- without a snapshot: the static order (smallest model that satisfies first) --------

STATIC = [
    ({"accel": "any:2"}, "gres:gpu:v100:2", "gpu", "x86_64"),
    ({"accel": "ANY:2"}, "gres:gpu:v100:2", "gpu", "x86_64"),
    ({"accel": "a100-80gb:4"}, "gres:gpu:a100-80gb:4", "gpu", "x86_64"),
    ({"accel": "nvidia:2,mem>=80G"}, "gres:gpu:a100-80gb:2", "gpu", "x86_64"),
    ({"accel": "cuda:8"}, "gres:gpu:h100:8", "gpu", "x86_64"),      # only h100 has 8 per node
    ({"accel": "cann:8"}, "gres:npu:910b:8", "npu", "aarch64"),
    ({"accel": "huawei"}, "gres:npu:910b:1", "npu", "aarch64"),
    ({"accel": "910b:2"}, "gres:npu:910b:2", "npu", "aarch64"),      # the GRES type works too
    ({"accel": "units=4"}, "gres:npu:910b:5", "npu", "aarch64"),     # v100 would need 10 > 4
    ({"accel": "units=2,mem>=90g"}, "gres:gpu:gh200:1", "gpu", "aarch64"),
    ({"accel": "nvidia:1", "arch": "arm64"}, "gres:gpu:gh200:1", "gpu", "aarch64"),
    ({"accel": "any:1", "arch": "ARMv8"}, "gres:npu:910b:1", "npu", "aarch64"),
]


@pytest.mark.parametrize(("opts", "tres", "partition", "arch"), STATIC)
def test_static_order(js: JobSubmit, opts: dict[str, str], tres: str, partition: str, arch: str) -> None:
    rc, desc = js.submit(opts)
    assert rc == 0, js.logs
    assert (desc["tres_per_node"], desc["partition"], desc["features"]) == (tres, partition, arch)
    d = decision(desc)
    assert d["why"] == "static" and d["pool"] == f"{d['model']}@{arch}"
    assert ("info", "slurm-hetero: capacity snapshot missing: static order applies") in js.logs


def test_user_partition_and_features_are_kept(js: JobSubmit) -> None:
    rc, desc = js.submit({"accel": "any:1"}, partition="gpu", features="bigmem|fast")
    assert rc == 0
    assert desc["partition"] == "gpu" and desc["tres_per_node"] == "gres:gpu:v100:1"
    assert desc["features"] == "(bigmem|fast)&x86_64"


# Pools whose nodes are too small for the job are no candidates (Slurm would refuse the job,
# or a held one would wait forever). The demo's nodes: v100 80 CPUs / 384 GiB, a100-80gb 64 /
# 512 GiB, h100 96 / 1 TiB, ascend-910b 192 / 1 TiB, gh200 72 / 480 GiB.
NODE_SIZE = [
    ({"num_tasks": 70, "max_nodes": 1}, "any:1", "gres:gpu:v100:1"),           # 70 <= 80
    ({"num_tasks": 90, "max_nodes": 1}, "any:1", "gres:npu:910b:1"),           # past v100's 80
    ({"num_tasks": 90, "max_nodes": 1, "features": "x86_64"}, "nvidia:1", "gres:gpu:h100:1"),
    ({"min_cpus": 90, "max_nodes": 1}, "nvidia:1", "gres:gpu:h100:1"),
    ({"num_tasks": 9, "cpus_per_task": 10, "max_nodes": 1}, "nvidia:1", "gres:gpu:h100:1"),
    ({"num_tasks": 400}, "nvidia:1", "gres:gpu:v100:1"),                       # may span nodes
    ({"cpus_per_task": 90, "num_tasks": 4}, "nvidia:1", "gres:gpu:h100:1"),      # one task's CPUs
    ({"ntasks_per_node": 70, "num_tasks": 140}, "nvidia:1", "gres:gpu:v100:1"),
    ({"pn_min_cpus": 85}, "nvidia:1", "gres:gpu:h100:1"),
    ({"min_mem_per_node": 600_000}, "nvidia:1", "gres:gpu:h100:1"),
    ({"min_mem_per_node": 400_000}, "nvidia:1", "gres:gpu:a100-80gb:1"),       # past v100's 384 GiB
    ({"min_mem_per_cpu": 8_000, "cpus_per_task": 60, "max_nodes": 1}, "nvidia:1", "gres:gpu:a100-80gb:1"),
    ({"min_mem_per_node": 0}, "any:1", "gres:gpu:v100:1"),                     # --mem=0: the whole node
    ({"cpus_per_task": 65534, "pn_min_cpus": 65534, "min_cpus": 4294967294, "num_tasks": 4294967294,
      "max_nodes": 1}, "any:1", "gres:gpu:v100:1"),                            # NO_VAL: not said
]


@pytest.mark.parametrize(("fields", "accel", "tres"), NODE_SIZE)
def test_pools_whose_nodes_cannot_hold_the_job_are_skipped(js: JobSubmit, fields: dict[str, Any], accel: str,
                                                           tres: str) -> None:
    fields = dict(fields)
    opts = {"accel": accel, **({"arch": "x86_64"} if fields.pop("features", None) else {})}
    rc, desc = js.submit(opts, **fields)
    assert rc == 0, js.logs
    assert desc["tres_per_node"] == tres


def test_a_job_no_pools_node_can_hold_is_told_its_size(js: JobSubmit) -> None:
    rc, _ = js.submit({"accel": "any:1"}, num_tasks=200, max_nodes=1)
    assert rc == -1 and js.user_lines()[-1] == (
        "hetero: --accel=any:1: no pool of this site satisfies it with 200 CPUs on one node")
    rc, _ = js.submit({"accel": "nvidia:1", "arch": "x86_64"}, ntasks_per_node=97, min_mem_per_node=2_000_000)
    assert rc == -1 and js.user_lines()[-1] == (
        "hetero: --accel=nvidia:1: no pool of this site satisfies it on x86_64 with 97 CPUs and 2000000 MiB "
        "on one node")
    # The count rules every pool out: no word about the size.
    rc, _ = js.submit({"accel": "any:16"}, num_tasks=200, max_nodes=1)
    assert rc == -1 and js.user_lines()[-1] == "hetero: --accel=any:16: no pool of this site satisfies it"


# ---- with a snapshot: where the job starts soonest -------------------------------------

def test_fresh_snapshot_picks_pool_that_starts_now(js: JobSubmit, site: Site, state: Path) -> None:
    write_snapshot(site, state, js.now - 3, v100=0)  # the V100s are busy
    rc, desc = js.submit({"accel": "any:2"})
    assert rc == 0
    d = decision(desc)
    # 910B costs 2*0.93 units, fewer than A100 (2.0) or H100: cheapest of those free now.
    assert (d["model"], d["why"], d["snapshot_age"]) == ("ascend-910b", "starts-now", 3)
    assert desc["tres_per_node"] == "gres:npu:910b:2"


def test_snapshot_backlog_when_nothing_is_free(js: JobSubmit, site: Site, state: Path) -> None:
    caps = {p.key: PoolCapacity(total=p.devices, free=0, free_max_node=0, pending=p.devices)
            for p in pools(site)}
    caps["a100-80gb@x86_64"].pending = 1  # the shortest queue
    (state / "hetero-snapshot.lua").write_text(to_lua(caps, js.now))
    rc, desc = js.submit({"accel": "nvidia:2"})
    assert rc == 0
    d = decision(desc)
    assert (d["model"], d["why"]) == ("a100-80gb", "least-backlog")


def test_a_burst_between_two_snapshots_spreads_over_the_free_pools(js: JobSubmit, site: Site,
                                                                    state: Path) -> None:
    write_snapshot(site, state, js.now, v100=0, ascend_910b=2)
    first = decision(js.submit({"accel": "any:2"})[1])
    # The two free 910Bs went to the first job: the next starts now on the next cheapest.
    second = decision(js.submit({"accel": "any:2"})[1])
    assert (first["model"], first["why"]) == ("ascend-910b", "starts-now")
    assert (second["model"], second["why"]) == ("a100-80gb", "starts-now")
    # A new snapshot counts the placed jobs itself: what this slurmctld placed is forgotten.
    write_snapshot(site, state, js.now + 3, v100=0, ascend_910b=2)
    js.now += 3
    assert decision(js.submit({"accel": "any:2"})[1])["model"] == "ascend-910b"


def test_a_stale_snapshot_spreads_jobs_by_backlog(js: JobSubmit, site: Site, state: Path) -> None:
    """The daemon stopped: no pool is taken to start a job now, and what was placed since adds
    to each pool's backlog, so a burst spreads over the pools instead of all going to the
    smallest model, as the static order would send them."""
    write_snapshot(site, state, js.now - 31, v100=0)
    got = []
    for _ in range(12):
        rc, desc = js.submit({"accel": "any:1"})
        assert rc == 0 and decision(desc)["why"] == "stale-backlog"
        got.append(decision(desc)["model"])
    assert "v100" not in got[:4]  # its devices were busy when the snapshot was written
    assert len(set(got)) >= 3, got
    assert ("info", "slurm-hetero: capacity snapshot stale: pools by its backlog and what was placed since") \
        in js.logs
    assert sum("stale" in m for _, m in js.logs) == 1  # one log line per state change, not per job


def test_snapshot_reread_only_when_it_changes(js: JobSubmit, site: Site, state: Path) -> None:
    write_snapshot(site, state, js.now, v100=0)
    assert decision(js.submit({"accel": "any:2"})[1])["model"] == "ascend-910b"
    write_snapshot(site, state, js.now, v100=0, ascend_910b=0)
    js.now += 1  # within the check interval: the old data is used without reading the file
    assert decision(js.submit({"accel": "any:2"})[1])["model"] == "ascend-910b"
    js.now += 2
    assert decision(js.submit({"accel": "any:2"})[1])["model"] == "a100-80gb"


@pytest.mark.parametrize("content", [
    "garbage {{{",
    "-- hetero-snapshot 1\nreturn 42\n",
    "-- hetero-snapshot 2\nos.execute('touch /tmp/pwned') return {pools={}}\n",
])
def test_bad_snapshot_fails_open(js: JobSubmit, state: Path, content: str) -> None:
    (state / "hetero-snapshot.lua").write_text(content)
    rc, desc = js.submit({"accel": "any:2"})
    assert rc == 0 and decision(desc)["why"] == "static"
    assert any("capacity snapshot" in m for _, m in js.logs)
    assert not Path("/tmp/pwned").exists()


# ---- tier, energy, plain jobs -------------------------------------------------------------

def test_tier_and_energy(js: JobSubmit) -> None:
    rc, desc = js.submit({"accel": "h100:1", "tier": "Diamond", "energy": "efficiency"})
    assert rc == 0
    assert desc["qos"] == "diamond"
    assert desc["cpu_freq_gov"] == CPU_GOVERNORS["powersave"]
    assert desc["tres_freq"] == "gpu:medium"
    d = decision(desc)
    assert (d["tier"], d["energy"]) == ("diamond", "efficiency")
    # balanced leaves GPU clocks to the driver (its cap is the agent's): no tres_freq
    rc, desc = js.submit({"accel": "h100:1", "energy": "balanced"})
    assert rc == 0 and "tres_freq" not in desc and desc["cpu_freq_gov"] == CPU_GOVERNORS["schedutil"]


def test_energy_on_cpu_job_sets_no_gpu_clock(js: JobSubmit) -> None:
    rc, desc = js.submit({"energy": "performance", "arch": "aarch64"})
    assert rc == 0 and "tres_freq" not in desc and "partition" not in desc
    assert desc["cpu_freq_gov"] == CPU_GOVERNORS["performance"] and desc["features"] == "aarch64"


def test_energy_auto_says_its_rule(js: JobSubmit) -> None:
    d = decision(js.submit({"energy": "auto"})[1])
    assert d["energy"] == "auto" and d["energy_rule"] == "no history: balanced"


def test_srun_options_from_spank_job_env(js: JobSubmit) -> None:
    rc, desc = js.submit({"accel": "cann:2", "tier": "silver"}, srun=True)
    assert rc == 0 and desc["tres_per_node"] == "gres:npu:910b:2" and desc["qos"] == "silver"


def spank_env(js: JobSubmit, **options: str) -> Any:
    senv = js.lua.table()
    for i, (k, v) in enumerate(options.items()):
        senv[i] = f"_SLURM_SPANK_OPTION_hetero_{k}={v}"
    return senv


def test_options_come_from_one_place(js: JobSubmit) -> None:
    # The job's environment when it holds any option (sbatch; a user without the plugin):
    # the SPANK copy is not read, so it cannot add to or change what the environment says.
    env = js.lua.table_from({"_SLURM_SPANK_OPTION_hetero_accel": "h100:1"})
    rc, desc = js.submit(environment=env, spank_job_env=spank_env(js, accel="cann:2", tier="gold"))
    assert rc == 0 and desc["tres_per_node"] == "gres:gpu:h100:1" and "qos" not in desc
    # An environment without any (sbatch --export=NONE): the SPANK job environment.
    env = js.lua.table_from({"PATH": "/usr/bin"})
    rc, desc = js.submit(environment=env, spank_job_env=spank_env(js, accel="cann:2", tier="gold"))
    assert rc == 0 and desc["tres_per_node"] == "gres:npu:910b:2" and desc["qos"] == "gold"
    # Names that are no option of ours are ignored there as in the environment.
    rc, desc = js.submit(environment=env, spank_job_env=spank_env(js, gpus="8", tier="gold"))
    assert rc == 0 and desc["qos"] == "gold" and "tres_per_node" not in desc


# ---- checkpointed jobs: requeued, the folder and the flag recorded ----------------------

@pytest.mark.parametrize("srun", [False, True])
def test_checkpoint_requeues_and_is_recorded(js: JobSubmit, srun: bool) -> None:
    rc, desc = js.submit({"checkpoint": "/shared/ckpt/run1", "tier": "gold"}, srun=srun)
    assert rc == 0 and desc["requeue"] == 1 and desc["qos"] == "gold"
    d = decision(desc)
    assert d["checkpoint"] == "/shared/ckpt/run1" and "migratable" not in d


@pytest.mark.parametrize(("flag", "srun"), [("", False), ("(null)", True)])
def test_migratable_as_slurm_carries_the_flag(js: JobSubmit, flag: str, srun: bool) -> None:
    # sbatch's environment holds "" for a flag, the SPANK job environment "(null)".
    rc, desc = js.submit({"checkpoint": "/ckpt/a", "migratable": flag}, srun=srun)
    assert rc == 0 and desc["requeue"] == 1
    assert decision(desc) == {"hetero": 1, "checkpoint": "/ckpt/a", "migratable": True}


@pytest.mark.parametrize(("requeue", "rc"), [(65534, 0), (1, 0), (0, -1)])
def test_checkpoint_and_the_users_requeue(js: JobSubmit, requeue: int, rc: int) -> None:
    got, desc = js.submit({"checkpoint": "/c"}, requeue=requeue)
    assert got == rc and desc["requeue"] == (1 if rc == 0 else 0)
    if rc:
        assert js.user_lines() == ["hetero: --checkpoint=/c: conflicts with --no-requeue; give one of them"]


def test_checkpoint_folder_is_data_in_the_record(js: JobSubmit) -> None:
    path = '/a"b\\c,"hetero":2}'
    rc, desc = js.submit({"checkpoint": path})
    assert rc == 0 and decision(desc)["checkpoint"] == path and decision(desc)["hetero"] == 1
    # A backquote is escaped: readers of the comment turn backquotes into quotes (sacctmgr's).
    rc, desc = js.submit({"checkpoint": "/ckpt/A`b"})
    assert rc == 0 and "`" not in desc["admin_comment"]
    from slurm_hetero.slurm.comment import parse_comment
    assert parse_comment(desc["admin_comment"])["checkpoint"] == "/ckpt/A`b"


@pytest.mark.parametrize(("opts", "message"), [
    ({"migratable": ""}, "hetero: --migratable needs --checkpoint=DIR: give both options"),
    ({"migratable": "(null)", "accel": "any:2"}, "hetero: --migratable needs --checkpoint=DIR: give both options"),
    ({"migratable": "yes", "checkpoint": "/c"}, "hetero: --migratable=yes: a flag takes no value"),
    ({"checkpoint": "ckpt/run1"}, "hetero: --checkpoint=ckpt/run1: use an absolute path (e.g. /shared/ckpt/run1)"),
    ({"checkpoint": "/a/../b"}, "hetero: --checkpoint=/a/../b: '..' components are not allowed; use an "
     "absolute path (e.g. /shared/ckpt/run1)"),
    ({"checkpoint": "/a b"}, "hetero: --checkpoint=/a b: empty, too long or not printable ASCII"),
    ({"checkpoint": "/" + "a" * 256}, "hetero: --checkpoint=/" + "a" * 63 + "...: empty, too long or not "
     "printable ASCII"),
])
def test_checkpoint_rejections(js: JobSubmit, opts: dict[str, str], message: str) -> None:
    rc, desc = js.submit(opts)
    assert rc == -1 and js.user_lines() == [message]
    assert "requeue" not in desc and "admin_comment" not in desc


@pytest.mark.parametrize("fields", [
    {"tres_per_node": "gres:gpu:a100-80gb:1", "partition": "gpu"},
    {"features": "aarch64", "qos": "gold"},
    {},
])
def test_plain_jobs_untouched(js: JobSubmit, fields: dict[str, Any]) -> None:  # Any: see JobSubmit.submit's **fields
    rc, desc = js.submit(**fields)
    assert rc == 0 and desc == fields and js.logs == []


# ---- rejections: one line naming the option and what is allowed --------------------------

REJECTED = [
    ({"accel": "a100-80:1"}, "hetero: --accel=a100-80:1: unknown model, vendor or stack 'a100-80'; this "
     "site has: a100-80gb, ascend-910b, gh200, h100, v100, any, cann, cuda, huawei, nvidia"),
    ({"accel": "any:0"}, "hetero: --accel=any:0: the count must be 1 to 1024"),
    ({"accel": "any:1025"}, "hetero: --accel=any:1025: the count must be 1 to 1024"),
    ({"accel": "units=0"}, "hetero: --accel=units=0: units must be a number above 0 (e.g. units=2.5)"),
    ({"accel": "any:2,mem>=0"}, "hetero: --accel=any:2,mem>=0: bad memory floor: use ,mem>=SIZE (e.g. ,mem>=80G)"),
    ({"accel": "any:2,mem<=8G"}, "hetero: --accel=any:2,mem<=8G: bad memory floor: use ,mem>=SIZE (e.g. ,mem>=80G)"),
    ({"accel": "::"}, "hetero: --accel=::: use MODEL[:N], VENDOR|STACK[:N], any[:N] or units=U, optionally "
     "followed by ,mem>=SIZE"),
    ({"accel": "any:16"}, "hetero: --accel=any:16: no pool of this site satisfies it"),
    ({"accel": "any:1,mem>=200G"}, "hetero: --accel=any:1,mem>=200G: no pool of this site satisfies it"),
    ({"accel": "910b:1", "arch": "x86_64"}, "hetero: --accel=910b:1: no pool of this site satisfies it on x86_64"),
    ({"arch": "sparc"}, "hetero: --arch=sparc: use any, x86_64 or aarch64 (aliases arm64, ARMv8)"),
    ({"tier": "platinum"}, "hetero: --tier=platinum: use one of diamond, gold, silver"),
    ({"energy": "turbo"}, "hetero: --energy=turbo: use one of auto, balanced, efficiency, performance"),
    ({"accel": ""}, "hetero: --accel=: empty, too long or not printable ASCII"),
    ({"accel": "a;rm -rf /"}, "hetero: --accel=a;rm -rf /: empty, too long or not printable ASCII"),
    ({"tier": "g\u00f6ld"}, "hetero: --tier=g??ld: empty, too long or not printable ASCII"),
    ({"accel": "x" * 10_000}, "hetero: --accel=" + "x" * 64 + "...: empty, too long or not printable ASCII"),
    ({"accel": "$(id)"}, "hetero: --accel=$(id): use MODEL[:N], VENDOR|STACK[:N], any[:N] or units=U, "
     "optionally followed by ,mem>=SIZE"),
]


@pytest.mark.parametrize(("opts", "message"), REJECTED)
def test_rejections(js: JobSubmit, opts: dict[str, str], message: str) -> None:
    rc, desc = js.submit(opts)
    assert rc == -1
    assert js.user_lines() == [message]
    assert "admin_comment" not in desc and "tres_per_node" not in desc


def test_conflicts(js: JobSubmit) -> None:
    rc, _ = js.submit({"accel": "any:2"}, tres_per_node="gres:gpu:1")
    assert rc == -1 and js.user_lines()[-1] == (
        "hetero: --accel=any:2: conflicts with --gres/--gpus; give one of them")
    rc, _ = js.submit({"tier": "gold"}, qos="diamond")
    assert rc == -1 and js.user_lines()[-1] == (
        "hetero: --tier=gold: conflicts with --qos=diamond; give one of them")
    rc, _ = js.submit({"accel": "any:1"}, partition="cpu")
    assert rc == -1 and js.user_lines()[-1] == (
        "hetero: --accel=any:1: no pool of this site satisfies it in partition cpu")


def test_internal_error_passes_job_unchanged(js: JobSubmit) -> None:
    desc = js.lua.table_from({"environment": 42, "partition": "cpu"})  # indexing a number raises
    rc = js.lua.globals().slurm_job_submit(desc, js.lua.table(), 0)
    assert rc == 0 and dict(desc) == {"environment": 42, "partition": "cpu"}
    assert js.logs[-1][0] == "error" and "internal error, job passed unchanged" in js.logs[-1][1]


def test_generated_script_has_no_shell_and_no_other_io(site: Site) -> None:
    lua = render_site(site)["job_submit.lua"]
    code = "\n".join(re.sub(r"--.*$", "", ln) for ln in lua.splitlines())
    for word in ("os.execute", "io.popen", "os.remove", "os.rename", "os.exit", "os.getenv",
                 "require", "dofile", "loadfile", "io.lines", "io.write", "io.read", "io.output",
                 "io.input", "package."):
        assert word not in code, word
    # The two data files the bridge daemon writes, read-only.
    assert code.count("io.open(") == 2 and "io.open(SNAPSHOT_PATH, \"r\")" in code
    assert "io.open(HISTORY_PATH, \"r\")" in code


def test_gres_spelling_follows_slurm_version(site: Site) -> None:
    new = render_site(site, Profile(slurm_version=(24, 11)))["job_submit.lua"]
    assert 'local GRES_PREFIX = "gres/"' in new
    js = JobSubmit(new)
    assert js.submit({"accel": "h100:1"})[1]["tres_per_node"] == "gres/gpu:h100:1"
    assert js.submit(tres_per_node="gres/npu:1")[1]["partition"] == "npu"


def test_an_admin_comment_given_at_submit_stays_in_front_of_ours(js: JobSubmit) -> None:
    # jobstats-style or an admin's text: kept byte for byte, our record after one space.
    theirs = 'JS1:H4sIAAAA note="x y"'
    rc, desc = js.submit({"accel": "any:2"}, admin_comment=theirs)
    assert rc == 0 and desc["admin_comment"].startswith(theirs + ' {"hetero":1,')
    from slurm_hetero.slurm.comment import split_comment
    before, ours, after = split_comment(desc["admin_comment"])
    assert (before, after) == (theirs, "") and ours["hetero"] == 1 and ours["model"] == "v100"
    # Without one, the field is ours alone, as before.
    rc, desc = js.submit({"accel": "any:2"})
    assert desc["admin_comment"].startswith('{"hetero":1,')
