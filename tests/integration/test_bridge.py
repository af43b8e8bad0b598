"""The SPANK plugin and the job_submit.lua bridge through real sbatch, srun and salloc."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from slurm_hetero.bridge.snapshot import wait_for_pool
from slurm_hetero.conf import Profile
from slurm_hetero.devcluster import Cluster
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_kv_record
from slurm_hetero.slurm.scontrol import parse_job_record, show_job_argv

pytestmark = pytest.mark.integration


def show_job(c: Cluster, jid: int) -> dict[str, str]:
    keys = ["TresPerNode", "Partition", "Features", "QOS", "AdminComment", "CpuFreqGov", "TresFreq",
            "TimeLimit"]
    return parse_job_record(c.runner.out(show_job_argv(jid)), keys, optional=keys)


def spelled(c: Cluster, tres: str) -> str:
    """A TresPerNode as this cluster's Slurm prints it: `gres:gpu:1` before 23.02, `gres/gpu:1` since."""
    return tres if c.runner.version() < (23, 2) else tres.replace("gres:", "gres/", 1)


def sbatch(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return c.runner.run(["sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", "true"],
                        check=False)


FORMS = [
    # options, TresPerNode, partition, features, QOS, extra fields
    (["--accel=a100-80gb:2"], "gres:gpu:a100-80gb:2", "gpu", "x86_64", "gold", {}),
    (["--accel=cann:8", "--tier=diamond"], "gres:npu:910b:8", "npu", "aarch64", "diamond", {}),
    (["--accel=nvidia:1", "--arch=arm64"], "gres:gpu:gh200:1", "gpu", "aarch64", "gold", {}),
    # With a fresh snapshot of an idle cluster: the fewest units that start now (4 A100 = 4.0
    # units beat 5 Ascend 910B = 4.65; the static order would have taken the 910Bs).
    (["--accel=units=4", "--energy=efficiency"], "gres:gpu:a100-80gb:4", "gpu", "x86_64", "gold",
     {"TresFreq": "gpu:medium"}),
    (["--accel=h100:1,mem>=80G", "--energy=performance", "--tier=silver"], "gres:gpu:h100:1", "gpu",
     "x86_64", "silver", {"TresFreq": "gpu:high"}),
    (["--arch=aarch64", "-c", "4"], None, "cpu", "aarch64", "gold", {}),
    # Pools whose nodes cannot hold the job are skipped (Slurm would refuse it there): 90 CPUs
    # on one node is past the V100 (80) and A100 (64) nodes, 600 GiB past their memory.
    (["--accel=nvidia:1", "-N", "1", "-n", "90"], "gres:gpu:h100:1", "gpu", "x86_64", "gold", {}),
    (["--accel=nvidia:1", "--mem=600G"], "gres:gpu:h100:1", "gpu", "x86_64", "gold", {}),
]


@pytest.mark.parametrize(("opts", "tres", "partition", "features", "qos", "extra"), FORMS)
def test_option_forms_through_sbatch(cluster: Cluster, opts: list[str], tres: str | None,
                                     partition: str, features: str, qos: str,
                                     extra: dict[str, str]) -> None:
    r = sbatch(cluster, *opts)
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip())
    job = show_job(cluster, jid)
    assert job.get("TresPerNode", "(null)") == (spelled(cluster, tres) if tres else "(null)")
    assert (job["Partition"], job["Features"], job["QOS"]) == (partition, features, qos)
    for k, v in extra.items():
        assert job[k] == v
    decision = json.loads(job["AdminComment"])
    assert decision["hetero"] == 1
    wait_done(cluster.runner, [jid], timeout=60)
    row = sacct_jobs(cluster.runner, [jid])[jid]
    assert row["State"] == "COMPLETED", row
    node_features = cluster.nodes()[row["NodeList"]].features
    assert features in node_features
    if tres:
        assert decision["model"] in node_features


def _snapshot_shows(c: Cluster, key: str, free: int) -> None:
    assert wait_for_pool(c.state / "hetero-snapshot.lua", key, free), \
        (c.state / "hetero-snapshot.lua").read_text()
    # A time, not a condition: the bridge in slurmctld re-reads the file only when a job comes
    # and at most every snapshot_check_s, and says nothing when it takes a new generation.
    time.sleep(Profile().snapshot_check_s + 0.5)


def test_any_goes_to_the_free_pool(cluster: Cluster) -> None:
    """Static order puts any:2 on the V100s; with them full, it lands where it starts now."""
    _snapshot_shows(cluster, "v100@x86_64", 4)
    r = sbatch(cluster, "-H", "--accel=any:2")
    held = int(r.stdout)
    assert json.loads(show_job(cluster, held)["AdminComment"])["model"] == "v100"
    filler = submit(cluster.runner, ["--gres=gpu:v100:4", "-o", "/dev/null"], "sleep 120")
    try:
        _snapshot_shows(cluster, "v100@x86_64", 0)
        r = sbatch(cluster, "--accel=any:2")
        assert r.returncode == 0, r.stderr
        jid = int(r.stdout)
        decision = json.loads(show_job(cluster, jid)["AdminComment"])
        assert (decision["model"], decision["why"]) == ("ascend-910b", "starts-now")
        wait_done(cluster.runner, [jid], timeout=60)
        assert sacct_jobs(cluster.runner, [jid])[jid]["NodeList"].startswith("npu-")
    finally:
        cluster.runner.run(["scancel", str(filler), str(held)], check=False)


@pytest.mark.parametrize(("opts", "message"), [
    (["--accel=a100-80:1"], "hetero: --accel=a100-80:1: unknown model, vendor or stack 'a100-80'"),
    (["--accel=910b:1", "--arch=x86_64"], "hetero: --accel=910b:1: no pool of this site satisfies it on x86_64"),
    (["--accel=any:2", "--gres=gpu:1"], "conflicts with --gres/--gpus"),
    (["--tier=platinum"], "hetero: --tier="),
    (["--energy=turbo"], "hetero: --energy="),
    (["--arch=sparc"], "hetero: --arch="),
    (["--accel=any:0"], "hetero: --accel="),
])
def test_invalid_values_rejected_with_a_message(cluster: Cluster, opts: list[str], message: str) -> None:
    r = sbatch(cluster, *opts)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert len([ln for ln in r.stderr.splitlines() if "hetero:" in ln]) == 1, r.stderr


HOSTILE = ["a;rm -rf /tmp/x", "$(id)", "`id`", "a\nb", "x" * 10_000, "g\u00f6ld", "", "%s%s%n",
           "../../etc/passwd", "any:2,mem>=80G;reboot"]


@pytest.mark.parametrize("option", ["accel", "arch", "energy", "tier", "image", "checkpoint"])
@pytest.mark.parametrize("client", ["sbatch", "srun", "salloc"])
def test_hostile_values_rejected_cleanly(cluster: Cluster, client: str, option: str) -> None:
    for value in HOSTILE:
        argv = [client, f"--{option}={value}"]
        argv += ["--wrap", "true", "-o", "/dev/null"] if client == "sbatch" else ["true"]
        r = cluster.runner.run(argv, check=False, timeout=30)
        # An error exit (Slurm's clients exit 1 or 255), never success or a signal (< 0).
        assert r.returncode > 0, (argv, r.returncode, r.stderr)
        assert "hetero:" in r.stderr, (argv, r.stderr)
    assert "UP" in cluster.runner.out(["scontrol", "ping"])


def test_repeated_option_last_wins(cluster: Cluster) -> None:
    r = sbatch(cluster, "-H", "--tier=silver", "--tier=diamond")
    jid = int(r.stdout)
    assert show_job(cluster, jid)["QOS"] == "diamond"
    cluster.runner.run(["scancel", str(jid)])


def test_srun_and_salloc_take_the_options(cluster: Cluster) -> None:
    # Every emulated node runs on this host: the node's name is in SLURMD_NODENAME.
    out = cluster.runner.out(["srun", "--accel=cann:1", "--tier=silver", "printenv", "SLURMD_NODENAME"],
                             timeout=60)
    assert out.strip().startswith("npu-")
    r = cluster.runner.run(["salloc", "--accel=nvidia:1", "--arch=aarch64", "srun", "printenv",
                            "SLURMD_NODENAME"], check=False, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "gh200-01"


@pytest.mark.parametrize("export", ["NONE", "ALL", "PATH"])
def test_sbatch_options_reach_the_bridge_whatever_it_exports(cluster: Cluster, export: str) -> None:
    # The bridge reads the options from the job's environment when it holds any, else from
    # the SPANK job environment: --export=NONE or a list leaves them out of the first.
    r = sbatch(cluster, "-H", f"--export={export}", "--accel=h100:1", "--tier=silver")
    jid = int(r.stdout)
    job = show_job(cluster, jid)
    cluster.runner.run(["scancel", str(jid)])
    assert (job["TresPerNode"], job["QOS"]) == (spelled(cluster, "gres:gpu:h100:1"), "silver")


def test_plain_jobs_pass_untouched(cluster: Cluster) -> None:
    r = sbatch(cluster, "-H", "--gres=gpu:a100-80gb:1", "-p", "gpu", "-C", "x86_64", "--qos=silver")
    jid = int(r.stdout)
    job = show_job(cluster, jid)
    cluster.runner.run(["scancel", str(jid)])
    assert (job["TresPerNode"], job["Partition"], job["Features"], job["QOS"]) == (
        spelled(cluster, "gres:gpu:a100-80gb:1"), "gpu", "x86_64", "silver")
    assert job.get("AdminComment", "") == ""


def test_checkpoint_and_migratable_through_sbatch(cluster: Cluster, tmp_path: Path) -> None:
    """The job is requeueable, records both options, and finds its folder in its environment
    (set by the plugin in slurmstepd, for the batch step and for steps inside it)."""
    out = tmp_path / "out"
    r = cluster.runner.run(["sbatch", "--parsable", "-o", str(out), "--checkpoint=/shared/ckpt/run1",
                            "--migratable", "--wrap",
                            'echo "batch=$SLURM_HETERO_CHECKPOINT"; srun printenv SLURM_HETERO_CHECKPOINT'],
                           check=False)
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip())
    record = parse_kv_record(cluster.runner.out(show_job_argv(jid)))
    assert record["Requeue"] == "1"  # also the dev cluster's JobRequeue default: see the Lua tests
    decision = json.loads(record["AdminComment"])
    assert (decision["checkpoint"], decision["migratable"]) == ("/shared/ckpt/run1", True)
    wait_done(cluster.runner, [jid], timeout=60)
    assert sacct_jobs(cluster.runner, [jid])[jid]["State"] == "COMPLETED"
    assert out.read_text().split() == ["batch=/shared/ckpt/run1", "/shared/ckpt/run1"]


def test_a_job_without_checkpoint_has_no_folder(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = cluster.runner.run(["sbatch", "--parsable", "-o", str(out), "--wrap",
                            'echo "[${SLURM_HETERO_CHECKPOINT-unset}]"'], check=False)
    jid = int(r.stdout.strip())
    wait_done(cluster.runner, [jid], timeout=60)
    assert out.read_text().strip() == "[unset]"


def test_checkpoint_conflicts_with_no_requeue(cluster: Cluster) -> None:
    r = sbatch(cluster, "--no-requeue", "--checkpoint=/ckpt/a")
    assert r.returncode != 0
    assert "hetero: --checkpoint=/ckpt/a: conflicts with --no-requeue; give one of them" in r.stderr


def test_srun_takes_checkpoint(cluster: Cluster) -> None:
    out = cluster.runner.out(["srun", "--checkpoint=/ckpt/s", "printenv", "SLURM_HETERO_CHECKPOINT"],
                             timeout=60)
    assert out.strip() == "/ckpt/s"


@pytest.mark.parametrize("how", ["plugin", "environment"])
def test_migratable_alone_is_refused(cluster: Cluster, how: str) -> None:
    """By the plugin in the client, and by the bridge when the flag comes without the plugin
    (an environment entry shaped as sbatch writes it)."""
    if how == "plugin":
        r = sbatch(cluster, "--migratable")
    else:
        env = {**cluster.runner.env(), "_SLURM_SPANK_OPTION_hetero_migratable": ""}
        r = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"], env=env,
                           capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if "hetero:" in ln]
    assert len(lines) == 1 and lines[0].endswith(
        "hetero: --migratable needs --checkpoint=DIR: give both options"), r.stderr
