"""Jobs in containers on the real cluster: sbatch --image → job_submit.lua → Slurm's OCI
support → oci.conf → the wrapper → runc, in busybox bundles built here for every variant.

Inside, each job prints the variant it runs in, its /dev and its variables; the emulated
accelerators are character devices under <workdir>/dev/<node>/ that the wrapper mounts."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from slurm_hetero.containers.bundle import busybox_bundle
from slurm_hetero.containers.ociconfig import DeviceNode, DevicePlan, build_config
from slurm_hetero.devcluster import Cluster
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.scontrol import parse_job_devices, show_job_argv

pytestmark = pytest.mark.integration

PROBE = r"""
echo "variant=$(cat /etc/hetero-variant)"
echo "host=$(hostname)"
echo "dev=$(ls /dev | tr '\n' ' ')"
env | grep -E '^(CUDA|ROCR|ASCEND_RT)_VISIBLE_DEVICES=|^(NCCL|HCCL)_' | sort
if [ -d /usr/local/Ascend/driver ]; then touch /usr/local/Ascend/driver/x 2>/dev/null && echo driver=rw || echo driver=ro; fi
echo USER-CODE-RAN
"""
RUNC_DEV = {"fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty",
            "urandom", "zero"}
ACCEL_DEV = re.compile(r"^(nvidia|davinci|kfd|dri|renderD|hisi|devmm)")


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path  # job output files


def run(cluster: Cluster, out: Path, opts: list[str], script: str = PROBE,
        env: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """Submit, wait; (job id, its sacct row, its output)."""
    runner = cluster.runner
    if env:
        runner = type(runner)(slurm_conf=runner.slurm_conf, timeout=runner.timeout, extra_env=env)
    jid = submit(runner, [*opts, "-o", f"{out}/%j.out"], script)
    wait_done(cluster.runner, [jid], timeout=90)
    row = sacct_jobs(cluster.runner, [jid])[jid]
    return jid, row, (out / f"{jid}.out").read_text()


def fields(output: str) -> dict[str, str]:
    return dict(ln.split("=", 1) for ln in output.splitlines() if "=" in ln)


def accel_devices(output: str) -> set[str]:
    return {d for d in fields(output)["dev"].split() if ACCEL_DEV.match(d)}


def assert_no_node_drained(cluster: Cluster) -> None:
    bad = {n: (i.state, i.reason) for n, i in cluster.nodes().items()
           if i.state not in ("idle", "mixed", "allocated", "completing")}
    assert bad == {}


def hold(cluster: Cluster, opts: list[str]) -> int:
    """A job that keeps the first devices of a node busy; the next job gets the others."""
    jid = submit(cluster.runner, [*opts, "-o", "/dev/null"], "sleep 300")
    deadline = time.monotonic() + 30
    while cluster.runner.out(["squeue", "-h", "-j", str(jid), "-o", "%t"]).strip() != "R":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    return jid


def job_indices(cluster: Cluster, jid: int, node: str) -> dict[str, list[int]]:
    return parse_job_devices(cluster.runner.out(show_job_argv(jid, detail=True)), node)


# ---- the right variant, only the allocated devices -------------------------------------------

def test_x86_gpu_job_gets_the_cuda_variant_and_only_its_gpus(cluster: Cluster, images: Path, out: Path) -> None:
    held = hold(cluster, ["-p", "gpu", "-w", "a100-01", "--gres=gpu:a100-80gb:2"])
    try:
        assert job_indices(cluster, held, "a100-01") == {"gpu": [0, 1]}
        _, row, output = run(cluster, out, ["--image=pytorch:24.05", "-w", "a100-01", "--gres=gpu:a100-80gb:2"])
    finally:
        cluster.runner.run(["scancel", str(held)], check=False)
    assert row["State"] == "COMPLETED", output
    f = fields(output)
    assert (f["variant"], f["host"]) == ("pytorch:24.05 x86_64/cuda12.4", "a100-01")
    assert accel_devices(output) == {"nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"}
    assert f["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert (f["NCCL_IB_HCA"], f["NCCL_SOCKET_IFNAME"]) == ("mlx5", "ib0")


def test_arm_npu_job_gets_the_cann_variant(cluster: Cluster, images: Path, out: Path) -> None:
    _, row, output = run(cluster, out, ["--image=pytorch:24.05", "--gres=npu:2"])
    assert row["State"] == "COMPLETED", output
    f = fields(output)
    assert f["variant"] == "pytorch:24.05 aarch64/cann8.0.RC1"
    assert "aarch64" in cluster.nodes()[row["NodeList"]].features
    npus = {f"davinci{i}" for i in range(8)} & accel_devices(output)
    assert len(npus) == 2
    assert accel_devices(output) == npus | {"davinci_manager", "devmm_svm", "hisi_hdc"}
    assert f["ASCEND_RT_VISIBLE_DEVICES"] == "0,1" and "CUDA_VISIBLE_DEVICES" not in f
    assert "no usable device cache" not in output  # the wrapper read the Prolog's cache
    assert (f["HCCL_SOCKET_IFNAME"], f["HCCL_CONNECT_TIMEOUT"]) == ("eth0", "1200")
    assert f["driver"] == "ro"  # the Ascend driver folder, read-only


def test_arm_gpu_and_cpu_nodes(cluster: Cluster, images: Path, out: Path) -> None:
    _, row, output = run(cluster, out, ["--image=pytorch:24.05", "--gres=gpu:gh200:1"])
    assert row["State"] == "COMPLETED" and fields(output)["variant"] == "pytorch:24.05 aarch64/cuda12.4"
    assert accel_devices(output) == {"nvidia0", "nvidiactl", "nvidia-uvm"}
    for arch in ("x86_64", "aarch64"):
        _, row, output = run(cluster, out, ["--image=busybox:1.35", "-C", arch])
        assert row["State"] == "COMPLETED", output
        assert fields(output)["variant"] == f"busybox:1.35 {arch}/cpu"
        assert accel_devices(output) == set()
        assert "NCCL_IB_HCA" not in fields(output)


def test_the_host_dev_stays_outside(cluster: Cluster, images: Path, out: Path) -> None:
    _, row, output = run(cluster, out, ["--image=pytorch:24.05", "--gres=gpu:h100:1"])
    assert row["State"] == "COMPLETED", output
    inside = set(fields(output)["dev"].split())
    gpus = inside & {f"nvidia{i}" for i in range(8)}
    assert len(gpus) == 1  # of the node's 8
    # runc's minimal /dev, the one GPU and its control devices: nothing of the host's /dev.
    assert inside - gpus - {"nvidiactl", "nvidia-uvm"} == RUNC_DEV


def image_tree(root: Path) -> list[tuple[str, int, int, int, int]]:
    """Everything of a rootfs runc could change: names, types, modes, owners, and folders'
    mtimes (a mount point created and removed again still shows)."""
    out = []
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        out.append((str(p.relative_to(root)), st.st_mode, st.st_uid,
                    st.st_mtime_ns if stat.S_ISDIR(st.st_mode) else 0, st.st_size))
    return sorted(out)


def busybox_rootfs(images: Path) -> Path:
    return images / "busybox" / "1.35" / "x86_64-cpu" / "rootfs"  # what cpu-x86-01 runs


def test_user_mount_in_the_allowlist(cluster: Cluster, images: Path, out: Path) -> None:
    """The demo allows /tmp at /scratch: /tmp/X appears at /scratch/X, a folder the image
    lacks, made in a tmpfs of the container's own (the shared image stays as it was)."""
    data = Path("/tmp") / f"hetero-test-{os.getpid()}"
    data.mkdir(exist_ok=True)
    (data / "in.txt").write_text("from the host\n")
    rootfs = busybox_rootfs(images)
    before = image_tree(rootfs)
    try:
        _, row, output = run(cluster, out, ["--image=busybox:1.35", "-w", "cpu-x86-01"],
                             f"cat /scratch/{data.name}/in.txt; "
                             f"touch /scratch/{data.name}/new 2>/dev/null && echo writable || echo read-only; "
                             "touch /newfile 2>/dev/null && echo image-writable || echo image-read-only; "
                             "ls /scratch",
                             env={"SLURM_HETERO_MOUNTS": f"{data}:ro"})
    finally:
        for p in data.iterdir():
            p.unlink()
        data.rmdir()
    assert row["State"] == "COMPLETED", output
    # ro as asked; the image's root read-only whatever its config says; nothing else of /tmp
    assert output.splitlines() == ["from the host", "read-only", "image-read-only", data.name]
    assert image_tree(rootfs) == before


@pytest.mark.parametrize(("destination", "message"), [
    ("/data", "SLURM_HETERO_MOUNTS: destination /data does not exist in the image (it lacks /data) and jobs "
              "cannot add folders to a shared image: use a folder the image has, or under /tmp"),
    ("/scratch/a/b", None),  # made in the tmpfs over /scratch: runs, the image unchanged
    ("/hostlink/x", "SLURM_HETERO_MOUNTS: destination /hostlink/x (in the image: /var/lib/x) does not exist in "
                    "the image (it lacks /var/lib)"),
    ("/bin/busybox/x", "(it lacks /bin/busybox)"),
])
def test_mount_destinations_never_change_the_shared_image(cluster: Cluster, images: Path, out: Path,
                                                          destination: str, message: str | None) -> None:
    """runc as root would create a missing mount point in the image's rootfs on the host,
    which every job of every user shares; a symlink of the image would lead it out."""
    data = Path("/tmp") / f"hetero-dst-{os.getpid()}"
    data.mkdir(exist_ok=True)
    rootfs = busybox_rootfs(images)
    link = rootfs / "hostlink"
    link.symlink_to("/var/lib")  # the host has /var/lib; the image has no /var/lib
    before = image_tree(rootfs)
    try:
        _, row, output = run(cluster, out, ["--image=busybox:1.35", "-w", "cpu-x86-01"], "echo USER-CODE-RAN",
                             env={"SLURM_HETERO_MOUNTS": f"{data}:{destination}:ro"})
        after = image_tree(rootfs)
    finally:
        link.unlink()
        data.rmdir()
    assert after == before
    assert not Path("/var/lib/x").exists()
    if message is None:
        assert (row["State"], output) == ("COMPLETED", "USER-CODE-RAN\n")
    else:
        assert (row["State"], row["ExitCode"]) == ("FAILED", "2:0"), output
        assert "USER-CODE-RAN" not in output
        assert message in output
    assert_no_node_drained(cluster)


# ---- refusals: a clear message, no user code, the node stays up --------------------------------

def test_driver_too_old_refused_on_the_node(cluster: Cluster, images: Path, out: Path) -> None:
    _, row, output = run(cluster, out, ["--image=pytorch:24.05", "--gres=gpu:v100:1"])
    assert (row["State"], row["ExitCode"], row["NodeList"]) == ("FAILED", "2:0", "v100-01")
    assert output == ("slurm-hetero: container refused: image pytorch:24.05: no variant fits the driver of "
                      "v100-01: x86_64/cuda12.4 needs CUDA 12.4, but the driver of v100-01 (535.104.05) "
                      "supports CUDA <= 12.2\n")
    assert_no_node_drained(cluster)


def test_symlink_out_of_the_allowlist_refused_on_the_node(cluster: Cluster, images: Path, out: Path) -> None:
    link = Path("/tmp") / f"hetero-escape-{os.getpid()}"
    link.symlink_to("/etc")
    try:
        _, row, output = run(cluster, out, ["--image=busybox:1.35"], "echo USER-CODE-RAN",
                             env={"SLURM_HETERO_MOUNTS": f"{link}:/data"})
    finally:
        link.unlink()
    assert (row["State"], row["ExitCode"]) == ("FAILED", "2:0")
    assert "USER-CODE-RAN" not in output
    assert f"SLURM_HETERO_MOUNTS: {link} resolves to /etc, outside the allowed /tmp" in output
    assert_no_node_drained(cluster)


@pytest.mark.parametrize(("opts", "env", "message"), [
    (["--image=tensorflow:2.15"], {}, "hetero: --image=tensorflow:2.15: unknown image; this site has: "
                                      "busybox:1.35, pytorch:24.05"),
    (["--image=busybox:1.35", "--gres=npu:1"], {}, "image busybox:1.35 has no cann variant"),
    (["--image=pytorch:24.05", "--arch=x86_64", "--gres=npu:1"], {}, "has no x86_64/cann variant"),
    (["--image=../../etc:1"], {}, "hetero: --image="),
    (["--image=/etc/passwd"], {}, "absolute paths are not allowed"),
    (["--container=/tmp"], {}, "hetero: --container=/tmp: not an image of this site"),
    (["--container=/var/../tmp/x"], {}, "not an image of this site"),
    (["--image=busybox:1.35"], {"SLURM_HETERO_MOUNTS": "/etc/shadow:/x"}, "outside the site's mount allowlist"),
    (["--image=busybox:1.35"], {"SLURM_HETERO_MOUNTS": "/tmp/../etc:/x"}, "outside the site's mount allowlist"),
])
def test_bad_requests_never_start(cluster: Cluster, images: Path, opts: list[str], env: dict[str, str],
                                  message: str) -> None:
    r = subprocess.run(["sbatch", *opts, "-o", "/dev/null", "--wrap", "echo USER-CODE-RAN"],
                       capture_output=True, text=True, env={**cluster.runner.env(), **env}, timeout=30, check=False)
    assert r.returncode != 0, r.stdout
    assert message in r.stderr, r.stderr
    assert_no_node_drained(cluster)


def test_control_characters_in_image_names_refused(cluster: Cluster) -> None:
    # A NUL cannot travel in argv; the SPANK plugin refuses other control characters.
    r = cluster.runner.run(["sbatch", "--image=pytorch\x01:24.05", "-o", "/dev/null", "--wrap", "true"],
                           check=False)
    assert r.returncode != 0 and "hetero: --image=" in r.stderr


# ---- srun, cancellation, plain NPU jobs --------------------------------------------------------

def test_srun_with_the_stub_container(cluster: Cluster, images: Path) -> None:
    stub = f"{images}/pytorch/24.05"
    # /bin/sh, not sh: 24.11's srun resolves a bare command on the submitting host's PATH
    # (sh -> /usr/bin/sh) and the container gets that path; busybox bundles have no /usr/bin.
    r = cluster.runner.run(["srun", "-p", "gpu", "--gres=gpu:h100:2", f"--container={stub}", "/bin/sh", "-c",
                            "cat /etc/hetero-variant; echo $CUDA_VISIBLE_DEVICES"], timeout=60)
    assert r.stdout == "pytorch:24.05 x86_64/cuda12.4\n0,1\n"
    # Two nodes (Slurm 22.05 runs one container task per node): each node's own devices.
    r = cluster.runner.run(["srun", "-N2", "-n2", "-p", "npu", "--gres=npu:1", f"--container={stub}", "/bin/sh", "-c",
                            'echo "$(hostname) $(ls /dev | grep -c "^davinci[0-9]") $ASCEND_RT_VISIBLE_DEVICES"'],
                           timeout=90)
    assert sorted(r.stdout.splitlines()) == ["npu-01 1 0", "npu-02 1 0"], r.stderr
    r = cluster.runner.run(["srun", "--image=pytorch:24.05", "true"], check=False, timeout=60)
    assert r.returncode != 0 and f"use --container={stub} (or sbatch --image)" in r.stderr


def test_a_step_cannot_bring_its_own_bundle(cluster: Cluster, images: Path) -> None:
    """Steps inside an allocation skip job_submit.lua: the wrapper refuses foreign bundles."""
    held = hold(cluster, ["-w", "cpu-x86-01"])
    try:
        own = f"{images}/busybox/1.35/x86_64-cpu"  # a complete bundle, but not a catalog stub
        r = cluster.runner.run(["srun", f"--jobid={held}", "--overlap", f"--container={own}",
                                "echo", "USER-CODE-RAN"], check=False, timeout=60)
    finally:
        cluster.runner.run(["scancel", str(held)], check=False)
    assert r.returncode == 2 and "USER-CODE-RAN" not in r.stdout
    assert f"slurm-hetero: container refused: --container={own}: busybox/1.35:x86_64-cpu is not in " \
           "site demo's image catalog" in r.stderr
    assert_no_node_drained(cluster)


def test_cancel_kills_the_container(cluster: Cluster, images: Path) -> None:
    jid = submit(cluster.runner, ["--image=busybox:1.35", "-w", "cpu-x86-02", "-o", "/dev/null"], "sleep 300")
    runc_root = str(cluster.runc_root(0))  # root's containers: root's runtime folder
    deadline = time.monotonic() + 30
    while f"cpu-x86-02.{jid}." not in subprocess.run(["runc", "--root", runc_root, "list", "-q"],
                                                     capture_output=True, text=True, check=False).stdout:
        assert time.monotonic() < deadline, "the container never showed up in runc list"
        time.sleep(0.3)
    cluster.runner.run(["scancel", str(jid)])
    wait_done(cluster.runner, [jid], timeout=60)
    left = subprocess.run(["runc", "--root", runc_root, "list", "-q"], capture_output=True, text=True,
                          check=False).stdout
    assert f".{jid}." not in left
    assert cluster.nodes()["cpu-x86-02"].state in ("idle", "mixed")


def test_plain_npu_job_gets_its_indices_from_the_taskprolog(cluster: Cluster, out: Path) -> None:
    held = hold(cluster, ["-p", "npu", "-w", "npu-02", "--gres=npu:3"])
    try:
        _, row, output = run(cluster, out, ["-p", "npu", "-w", "npu-02", "--gres=npu:2"],
                               "env | grep -E '^(ASCEND_RT_VISIBLE_DEVICES|SLURM_JOB_NPUS)=' | sort")
    finally:
        cluster.runner.run(["scancel", str(held)], check=False)
    assert row["State"] == "COMPLETED"
    assert output == "ASCEND_RT_VISIBLE_DEVICES=3,4\nSLURM_JOB_NPUS=3,4\n"


def test_npu_tasks_get_their_indices_from_the_prologs_cache_without_scontrol(cluster: Cluster, out: Path) -> None:
    """PATH=/nonexistent in every task's environment (the TaskProlog runs with it): a
    TaskProlog that called scontrol would fail, print why and unset the variables. Every task
    (the batch step's and two srun tasks) must say its devices came from the Prolog's cache."""
    srun = shutil.which("srun", path=os.environ.get("PATH"))
    assert srun
    script = (f"{srun} -n2 /bin/sh -c '/usr/bin/env | /usr/bin/grep -E \"^(ASCEND_RT_VISIBLE_DEVICES|SLURM_JOB_NPUS)=\"'"
              "; /usr/bin/env | /usr/bin/grep -E '^(ASCEND_RT_VISIBLE_DEVICES|SLURM_JOB_NPUS)='")
    jid, row, output = run(cluster, out, ["-p", "npu", "-w", "npu-01", "-n2", "--gres=npu:2",
                                          "--export=ALL,PATH=/nonexistent,SLURM_HETERO_VERBOSE=1"], script)
    assert row["State"] == "COMPLETED", output
    lines = output.splitlines()
    assert lines.count(f"slurm-hetero taskprolog: job {jid}: devices on npu-01 from the Prolog's cache") == 3, output
    seen = [ln for ln in lines if "=" in ln]
    assert len(seen) == 6 and len(set(seen)) == 2, output  # three tasks, the same two variables
    npus = dict(ln.split("=", 1) for ln in seen)
    assert re.fullmatch(r"\d,\d", npus["ASCEND_RT_VISIBLE_DEVICES"]) and \
        npus["SLURM_JOB_NPUS"] == npus["ASCEND_RT_VISIBLE_DEVICES"], output
    assert not [ln for ln in lines if "slurmctld" in ln or "scontrol" in ln], output


def test_rootless_runc_as_an_unprivileged_user() -> None:
    """Outside the dev cluster jobs run as their users: the wrapper's rootless config runs."""
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux)")
    top = Path(tempfile.mkdtemp(prefix="hetero-rootless-"))  # pytest's tmp is private to root
    try:
        bundle = busybox_bundle(top / "img", "test rootless")
        dev = top / "dev" / "nvidia0"
        dev.parent.mkdir()
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        slurm = {"process": {"args": ["sh", "-c", "id -u; cat /dev/nvidia0 && echo device-ok; hostname"]},
                 "mounts": []}
        cfg = build_config(json.loads((bundle / "config.json").read_text()), str(bundle), slurm,
                           devices=plan_devices_for(dev), fabric_env={}, mounts=[], hostname="a100-01",
                           annotations={}, rootless=True, uid=65534, gid=65534)
        (bundle / "config.json").write_text(json.dumps(cfg))
        subprocess.run(["chmod", "-R", "a+rX", str(top)], check=True)
        (top / "run").mkdir(mode=0o777)
        (top / "run").chmod(0o777)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "runc", "--root",
                            str(top / "run" / "runc"), "run", "--bundle", str(bundle), "rootless-test"],
                           capture_output=True, text=True, timeout=60, check=False)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    if r.returncode and "user namespace" in r.stderr.lower() and "permitted" in r.stderr:
        pytest.skip(f"no unprivileged user namespaces here: {r.stderr.strip()[-200:]}")
    assert (r.returncode, r.stdout) == (0, "0\ndevice-ok\na100-01\n"), r.stderr


def plan_devices_for(dev: Path) -> DevicePlan:
    st = dev.stat()
    return DevicePlan((DeviceNode(str(dev), "/dev/nvidia0", os.major(st.st_rdev), os.minor(st.st_rdev)),),
                      {"CUDA_VISIBLE_DEVICES": "0"}, ("cuda",))
