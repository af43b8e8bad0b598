"""The wrapper as oci.conf starts it (`python -I -S oci_run.py run ...`), with a fake
scontrol and a fake runc; which bundles it accepts; the TaskProlog; the rendered files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_hetero.conf.render import Profile, render_site, write_files
from slurm_hetero.containers.ociconfig import DEVICE_VARS, DevicePlan, MountRefused, build_config, env_dict
from slurm_hetero.containers.wrapper import NotInCatalog, prepare, requested_image
from slurm_hetero.energy.devcache import write_cache
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.site import load_site_text
from tests.unit.container_fixtures import ROOT, DevTree, dev_tree, fake_command

ENTRY = ROOT / "slurm_hetero" / "containers" / "oci_run.py"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> DevTree:
    t = dev_tree(tmp_path_factory.mktemp("tree"), bundles=True)
    files = render_site(t.site, t.profile)
    write_files(files, t.profile.conf_dir)
    # A runc that shows what it was given instead of running anything.
    fake_command(t.tmp / "bin" / "runc", 'echo "runc $*"; cat "$5/config.json"\n')
    return t


def slurm_config(tree: DevTree, image_dir: str, extra_env: tuple[str, ...] = ()) -> dict[str, Any]:
    """What slurmstepd writes into the step's spool folder (shape seen on 22.05)."""
    return {"ociVersion": "1.0.2", "root": {"path": f"{image_dir}/rootfs", "readonly": True},
            "process": {"args": ["/tmp/slurm/startup"], "cwd": "/", "terminal": False,
                        "env": ["PATH=/usr/bin", f"SLURM_CONTAINER={image_dir}", "SLURM_JOB_ID=12",
                                *extra_env]},
            "mounts": [{"destination": "/tmp/slurm/startup", "type": "none", "options": ["bind", "ro"],
                        "source": "/spool/job00012/slurm_script"}]}


def image_dir(tree: DevTree, ref: str = "pytorch/24.05") -> str:
    return f"{tree.images}/{ref}"


# ---- which bundle is the job's -------------------------------------------------------------

def test_the_stub_names_the_image(tree: DevTree) -> None:
    img = requested_image(slurm_config(tree, image_dir(tree)), tree.conf)
    assert img.ref == "pytorch:24.05"
    trailing = slurm_config(tree, image_dir(tree) + "/")
    trailing["root"]["path"] = image_dir(tree) + "//rootfs"
    assert requested_image(trailing, tree.conf).ref == "pytorch:24.05"


@pytest.mark.parametrize(("root", "container", "message"), [
    ("/home/u/mine/rootfs", "/home/u/mine", "--container=/home/u/mine is not an image of site demo's catalog"),
    ("{i}/pytorch/24.05/rootfs", "/home/u/mine", "--container=/home/u/mine is not an image"),  # own config.json
    ("{i}/pytorch/24.05/../../../etc/rootfs", "{i}/pytorch/24.05/../../../etc", "is not an image"),
    ("{i}/pytorch/99/rootfs", "{i}/pytorch/99", "pytorch:99 is not in site demo's image catalog "
                                                 "(known: busybox:1.35, pytorch:24.05)"),
    ("{i}/pytorch/24.05/x86_64-cpu/rootfs", "{i}/pytorch/24.05/x86_64-cpu", "pytorch/24.05:x86_64-cpu is not in"),
    ("{i}/rootfs", "{i}", "is not an image"),
])
def test_foreign_bundles_are_refused(tree: DevTree, root: str, container: str, message: str) -> None:
    cfg = slurm_config(tree, "x")
    cfg["root"]["path"] = root.format(i=tree.images)
    cfg["process"]["env"] = [f"SLURM_CONTAINER={container.format(i=tree.images)}"]
    with pytest.raises(NotInCatalog) as e:
        requested_image(cfg, tree.conf)
    assert message.format(i=tree.images) in str(e.value)


def test_prepare_uses_the_variant_bundle(tree: DevTree) -> None:
    launch = prepare(tree.conf, "npu-02", slurm_config(tree, image_dir(tree)), {"npu": [6, 7]})
    assert launch.variant.label == "aarch64/cann8.0.RC1"
    cfg = launch.config
    assert cfg["root"]["path"] == f"{tree.images}/pytorch/24.05/aarch64-cann8.0.RC1/rootfs"
    env = env_dict(cfg["process"]["env"])
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1" and env["HCCL_SOCKET_IFNAME"] == "eth0"
    assert env["HETERO_VARIANT"] == "pytorch:24.05 aarch64/cann8.0.RC1"  # the bundle's own env
    dests = [m["destination"] for m in cfg["mounts"]]
    assert {"/dev/davinci6", "/dev/davinci7", "/dev/davinci_manager", "/usr/local/Ascend/driver",
            "/usr/share/zoneinfo", "/tmp/slurm/startup"} <= set(dests)
    assert "/dev/davinci0" not in dests


def test_user_mounts_never_change_the_image(tree: DevTree, tmp_path: Path) -> None:
    """The demo allows /tmp at /scratch. The busybox image has /scratch: a sub-folder of it
    is made in a tmpfs of the container's own; a destination the image lacks is refused."""
    data = tmp_path / "data"
    data.mkdir()
    rootfs = tree.images / "busybox" / "1.35" / "x86_64-cpu" / "rootfs"
    before = sorted(str(p) for p in rootfs.rglob("*"))

    def prepared(mounts: str) -> list[dict[str, Any]]:
        cfg = slurm_config(tree, image_dir(tree, "busybox/1.35"), (f"SLURM_HETERO_MOUNTS={mounts}",))
        return list(prepare(tree.conf, "cpu-x86-01", cfg, {}).config["mounts"])

    got = prepared(str(data))
    rel = str(data)[len("/tmp"):]
    user = got[[m["destination"] for m in got].index("/scratch"):][:2]
    assert user == [{"destination": "/scratch", "type": "tmpfs", "source": "tmpfs",
                     "options": ["nosuid", "nodev", "noexec", "mode=755", "size=64k"]},
                    {"destination": f"/scratch{rel}", "type": "bind", "source": str(data),
                     "options": ["rbind", "rw", "nosuid", "nodev"]}]
    with pytest.raises(MountRefused, match="SLURM_HETERO_MOUNTS: destination /data does not exist in the image"):
        prepared(f"{data}:/data")
    assert sorted(str(p) for p in rootfs.rglob("*")) == before


def test_an_image_without_a_site_mount_point_is_refused(tmp_path: Path) -> None:
    """The site's always-mounted /usr/share/zoneinfo: runc would create it in the image."""
    t = dev_tree(tmp_path, bundles=True)
    rootfs = t.images / "busybox" / "1.35" / "x86_64-cpu" / "rootfs"
    (rootfs / "usr" / "share" / "zoneinfo").rmdir()
    with pytest.raises(RuntimeFailure) as e:
        prepare(t.conf, "cpu-x86-01", slurm_config(t, f"{t.images}/busybox/1.35"), {})
    assert str(e.value).startswith("image busybox:1.35 x86_64/cpu: mount point /usr/share/zoneinfo is missing "
                                   f"in {rootfs} (it lacks /usr/share/zoneinfo); runc would create it")
    assert not (rootfs / "usr" / "share" / "zoneinfo").exists()


# ---- the real entry point ------------------------------------------------------------------

def run_entry(tree: DevTree, bundle: Path, node: str, scontrol_out: str, extra_env: tuple[str, ...] = (),
              image: str = "pytorch/24.05", scontrol_rc: int = 0) -> subprocess.CompletedProcess[str]:
    """The wrapper as slurmstepd runs it; a fake scontrol prints scontrol_out (on stderr,
    exiting scontrol_rc, when that is not 0) and leaves a mark that it ran."""
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(slurm_config(tree, image_dir(tree, image), extra_env)))
    captured = bundle / "scontrol.txt"
    captured.write_text(scontrol_out)
    body = f'cat "{captured}"\n' if not scontrol_rc else f'cat "{captured}" >&2; exit {scontrol_rc}\n'
    fake_command(bundle / "bin" / "scontrol", f'touch "{bundle}/scontrol-ran"\n{body}')
    env = {**os.environ, "PATH": f"{bundle / 'bin'}:{os.environ['PATH']}"}
    argv = [sys.executable, "-I", "-S", str(ENTRY), "run", "--conf", f"{tree.profile.conf_dir}/hetero-containers.json",
            "--bundle", str(bundle), "--node", node, "--job", "12", "--id", f"{node}.12.0.0",
            "--runc-root", str(bundle / "runc")]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


FALLBACK = "no usable device cache from the Prolog"


def refusal(r: subprocess.CompletedProcess[str]) -> str:
    """The wrapper's stderr less its one line on asking slurmctld (no Prolog ran in these trees)."""
    lines = r.stderr.splitlines(keepends=True)
    assert sum(FALLBACK in line for line in lines) == 1, r.stderr
    return "".join(line for line in lines if FALLBACK not in line)


def test_entry_writes_config_and_execs_runc(tree: DevTree, tmp_path: Path) -> None:
    r = run_entry(tree, tmp_path / "b", "a100-01",
                  "     Nodes=a100-01 CPU_IDs=0-1 Mem=2048 GRES=gpu:a100-80gb:2(IDX:1,3)\n")
    assert r.returncode == 0, r.stderr
    first, rest = r.stdout.split("\n", 1)
    assert first == f"runc --root {tmp_path}/b/runc run --bundle {tmp_path}/b a100-01.12.0.0"
    cfg = json.loads(rest)
    assert cfg["annotations"]["org.slurm-hetero.variant"] == "x86_64/cuda12.4"
    assert [m["destination"] for m in cfg["mounts"] if m["destination"].startswith("/dev/nv")] == [
        "/dev/nvidia1", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert env_dict(cfg["process"]["env"])["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert [p.name for p in (tmp_path / "b").iterdir() if p.name.endswith(".tmp")] == []


def test_entry_refuses_before_runc(tree: DevTree, tmp_path: Path) -> None:
    r = run_entry(tree, tmp_path / "b", "v100-01",
                  "     Nodes=v100-01 CPU_IDs=0-1 Mem=2048 GRES=gpu:v100:1(IDX:0)\n")
    assert r.returncode == 2 and r.stdout == ""
    assert refusal(r) == ("slurm-hetero: container refused: image pytorch:24.05: no variant fits the driver "
                        "of v100-01: x86_64/cuda12.4 needs CUDA 12.4, but the driver of v100-01 "
                        "(535.104.05) supports CUDA <= 12.2\n")
    r = run_entry(tree, tmp_path / "c", "cpu-x86-01", "     Nodes=cpu-x86-01 CPU_IDs=0 Mem=1024 GRES=\n",
                  extra_env=("SLURM_HETERO_MOUNTS=/etc:/x",))
    assert r.returncode == 2 and "SLURM_HETERO_MOUNTS: /etc is not in the site's mount allowlist" in r.stderr
    r = run_entry(tree, tmp_path / "d", "cpu-x86-01", "", image="busybox/1.35")
    assert r.returncode == 0, r.stderr  # busybox on a CPU node: its x86_64/cpu variant
    assert '"org.slurm-hetero.variant": "x86_64/cpu"' in r.stdout


# ---- the devices are slurmctld's, never the job's environment's --------------------------------

HELD = "     Nodes=a100-01 CPU_IDs=0-1 Mem=2048 GRES=gpu:a100-80gb:2(IDX:1,3)\n"


def launched(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The config.json the fake runc was handed."""
    assert r.returncode == 0, r.stderr
    cfg: dict[str, Any] = json.loads(r.stdout.split("\n", 1)[1])
    return cfg


def gpu_mounts(cfg: dict[str, Any]) -> list[str]:
    return [m["destination"] for m in cfg["mounts"] if m["destination"].startswith("/dev/nv")]


@pytest.mark.parametrize("exported", [
    ("SLURM_STEP_GPUS=3",),  # once narrowed the job to its GPU 3
    ("SLURM_STEP_GPUS=5",),  # a GPU the job does not hold: once left it none
    ("SLURM_JOB_GPUS=0,2",),
    ("CUDA_VISIBLE_DEVICES=0,2", "GPU_DEVICE_ORDINAL=0,2", "ROCR_VISIBLE_DEVICES=0"),
])
def test_exported_device_variables_choose_nothing(tree: DevTree, tmp_path: Path, exported: tuple[str, ...]) -> None:
    """`sbatch --export=ALL,SLURM_STEP_GPUS=5`: what a job exports reaches config.json's env
    (a batch step gets no value of Slurm's own over it); the devices stay slurmctld's."""
    cfg = launched(run_entry(tree, tmp_path / "b", "a100-01", HELD, extra_env=exported))
    assert gpu_mounts(cfg) == ["/dev/nvidia1", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    env = env_dict(cfg["process"]["env"])
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "GPU_DEVICE_ORDINAL" not in env and "ROCR_VISIBLE_DEVICES" not in env


HOOKS = ("NVIDIA_VISIBLE_DEVICES=all", "AMD_VISIBLE_DEVICES=all", "ASCEND_VISIBLE_DEVICES=0-7",
         "HIP_VISIBLE_DEVICES=0", "ZE_AFFINITY_MASK=0", "ASCEND_RT_VISIBLE_DEVICES=0-7")


@pytest.mark.parametrize(("node", "image", "held", "ours"), [
    ("a100-01", "pytorch/24.05", {"gpu": [1, 3]}, {"CUDA_VISIBLE_DEVICES": "0,1"}),
    ("npu-02", "pytorch/24.05", {"npu": [6, 7]}, {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}),
    ("cpu-x86-01", "busybox/1.35", {}, {}),
])
def test_device_variables_in_the_container_are_only_the_wrappers(tree: DevTree, node: str, image: str,
                                                                 held: dict[str, list[int]],
                                                                 ours: dict[str, str]) -> None:
    """NVIDIA_VISIBLE_DEVICES=all would make an NVIDIA hook in a variant's config add every
    GPU of the node: it becomes "void", and every other device variable the job set goes."""
    cfg = prepare(tree.conf, node, slurm_config(tree, image_dir(tree, image), HOOKS), held).config
    env = env_dict(cfg["process"]["env"])
    assert {k: v for k, v in env.items() if k in DEVICE_VARS} == {"NVIDIA_VISIBLE_DEVICES": "void", **ours}


def test_an_images_own_device_variables_are_replaced_too() -> None:
    """CUDA images set NVIDIA_VISIBLE_DEVICES=all (and CUDA_VERSION, which makes NVIDIA's
    hook read an unset one as "all" too)."""
    variant = {"process": {"env": ["CUDA_VERSION=12.4", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VISIBLE_DEVICES=0-7"]},
               "root": {"path": "rootfs"}}
    plan = DevicePlan((), {"CUDA_VISIBLE_DEVICES": "0"}, ("cuda",))
    cfg = build_config(variant, "/images/x", {"process": {"env": []}}, devices=plan, fabric_env={}, mounts=[],
                       hostname=None, annotations={})
    env = env_dict(cfg["process"]["env"])
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["CUDA_VISIBLE_DEVICES"]) == ("void", "0")


@pytest.mark.parametrize(("answer", "rc", "why"), [
    ("slurm_load_jobs error: Unable to contact slurm controller (connect failure)", 1,
     "job 12: slurmctld's record of its devices on a100-01 cannot be read (scontrol exited 1: slurm_load_jobs "
     "error: Unable to contact slurm controller (connect failure)); no devices are given to it"),
    (HELD + "   Comment=x\n" + HELD, 0, "job 12: its record is ambiguous (2 detail lines name node a100-01 "
                                         "(user text imitates one)); no devices are given to it"),
])
def test_no_record_of_the_devices_no_container(tree: DevTree, tmp_path: Path, answer: str, rc: int,
                                               why: str) -> None:
    """Without slurmctld's record nothing starts, with one line saying why (exit 1: nothing
    the user wrote is wrong), rather than a job that runs without the devices it waited for."""
    r = run_entry(tree, tmp_path / "b", "a100-01", answer, extra_env=("SLURM_JOB_GPUS=1,3",), scontrol_rc=rc)
    assert (r.returncode, r.stdout) == (1, "")  # runc never ran
    assert refusal(r) == f"slurm-hetero: container refused: {why}, so the container does not start\n"


def test_a_node_without_devices_asks_slurmctld_nothing(tree: DevTree, tmp_path: Path) -> None:
    r = run_entry(tree, tmp_path / "b", "cpu-x86-01", "down", image="busybox/1.35", scontrol_rc=1)
    assert launched(r)["annotations"]["org.slurm-hetero.variant"] == "x86_64/cpu"
    assert not (tmp_path / "b" / "scontrol-ran").exists()


def test_entry_usage_and_broken_conf(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-I", "-S", str(ENTRY)], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "usage: slurm-hetero container run" in r.stderr
    r = subprocess.run([sys.executable, "-I", "-S", str(ENTRY), "run", "--conf", str(tmp_path / "nope.json"),
                        "--bundle", str(tmp_path), "--node", "n", "--job", "1", "--id", "x",
                        "--runc-root", str(tmp_path)], capture_output=True, text=True, check=False)
    assert r.returncode == 1 and "cannot read the container configuration" in r.stderr
    r = subprocess.run([sys.executable, "-I", "-S", str(ENTRY), "run", "--conf", "x", "--bogus", "y"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "container refused: unexpected argument '--bogus'" in r.stderr
    r = subprocess.run([sys.executable, "-I", "-S", str(ENTRY), "run", "--conf", "x"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "missing --bundle, --node, --job, --id, --runc-root" in r.stderr


def test_entry_imports_only_the_standard_library(tree: DevTree) -> None:
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import slurm_hetero.containers.wrapper, "
            "slurm_hetero.containers.taskprolog; print(' '.join(m.split('.')[0] for m in sys.modules))")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    top = set(r.stdout.split())
    assert not top & {"yaml", "jsonschema", "click", "rich", "jinja2", "ClusterShell"}, top


# ---- TaskProlog --------------------------------------------------------------------------------

def test_taskprolog_exports_the_npu_indices(tree: DevTree, tmp_path: Path) -> None:
    fake_command(tmp_path / "bin" / "scontrol",
                 'echo "     Nodes=npu-02 CPU_IDs=0 Mem=1024 GRES=npu:910b:2(IDX:4,6)"\n')
    prolog = Path(tree.profile.conf_dir) / "hetero-taskprolog"  # what slurm.conf's TaskProlog names
    assert os.access(prolog, os.X_OK)

    def on(node: str) -> str:
        env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SLURM_JOB_ID": "3", "SLURMD_NODENAME": node}
        return subprocess.run([str(prolog)], capture_output=True, text=True, env=env, check=True).stdout

    fallback, *exports = on("npu-02").splitlines()  # no Prolog ran: slurmctld, and a line saying so
    assert fallback.startswith("print slurm-hetero taskprolog: job 3: no usable device cache from the Prolog (")
    assert exports == ["export ASCEND_RT_VISIBLE_DEVICES=4,6", "export SLURM_JOB_NPUS=4,6"]
    assert on("a100-01") == ""  # no NPUs there: no query either
    assert on("ghost").startswith("print slurm-hetero taskprolog: node 'ghost' is not in site 'demo'")


@pytest.mark.skipif(os.getuid() != 0, reason="the cache is trusted only as root's file")
def test_taskprolog_reads_the_prologs_cache_and_asks_nothing(tree: DevTree, tmp_path: Path) -> None:
    node_dir = Path(tree.profile.agent_state_dir) / "npu-02"
    node_dir.mkdir(parents=True, exist_ok=True)
    node_dir.chmod(0o755)
    write_cache(node_dir, "4", "npu-02", {"npu": [1, 5]}, {})
    ran = tmp_path / "scontrol-ran"
    fake_command(tmp_path / "bin" / "scontrol", f'touch "{ran}"\n')
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SLURM_JOB_ID": "4", "SLURMD_NODENAME": "npu-02",
           "SLURM_HETERO_VERBOSE": "1"}
    out = subprocess.run([str(Path(tree.profile.conf_dir) / "hetero-taskprolog")], capture_output=True,
                         text=True, env=env, check=True).stdout
    assert out == ("print slurm-hetero taskprolog: job 4: devices on npu-02 from the Prolog's cache\n"
                   "export ASCEND_RT_VISIBLE_DEVICES=1,5\nexport SLURM_JOB_NPUS=1,5\n")
    assert not ran.exists()


# ---- rendering ----------------------------------------------------------------------------------

def test_rendered_oci_conf_and_taskprolog(tree: DevTree) -> None:
    files = render_site(tree.site, tree.profile)
    oci = files["oci.conf"]
    # runc's state per user (/run/user/%U); 22.05 knows no %U: the shell asks for the uid.
    state = tree.profile.runc_root.replace("%U", "$(/usr/bin/id -u)")
    assert "%U" in tree.profile.runc_root and "%U" not in oci
    run = next(ln for ln in oci.splitlines() if ln.startswith("RunTimeRun="))
    assert run == (f'RunTimeRun="{tree.profile.python} -I -S {tree.profile.hetero_lib}/slurm_hetero/containers/'
                   f'oci_run.py run --conf {tree.profile.conf_dir}/hetero-containers.json --bundle %b --node %n '
                   f'--job %j --id %n.%j.%s.%t --runc-root {state}"')
    for key in ("RunTimeQuery", "RunTimeKill", "RunTimeDelete"):
        assert f'{key}="{tree.profile.runc} --root {state} ' in oci
        assert "%n.%j.%s.%t" in next(ln for ln in oci.splitlines() if ln.startswith(key))
    assert f"TaskProlog={tree.profile.conf_dir}/hetero-taskprolog\n" in files["slurm.conf"]
    assert json.loads(files["hetero-containers.json"])["gres_env"] == {
        "npu": ["ASCEND_RT_VISIBLE_DEVICES", "SLURM_JOB_NPUS"]}


GPU_ONLY = """\
name: g
partitions: [{name: main, default: true}]
node_groups:
  - {names: g1, architecture: x86_64, sockets: 1, cores_per_socket: 4, memory: 8GB, partitions: [main],
     accelerators: [{model: h100, count: 2}]}
"""


def test_no_taskprolog_without_plugin_less_gres() -> None:
    files = render_site(load_site_text(GPU_ONLY), Profile())
    assert "TaskProlog=" not in files["slurm.conf"]
    assert json.loads(files["hetero-containers.json"])["gres_env"] == {}
    assert json.loads(files["hetero-containers.json"])["images"] == {}
    # No catalog: Slurm's own containers, as the bridge then leaves --container alone.
    assert 'RunTimeRun="/usr/sbin/runc --root /run/user/$(/usr/bin/id -u)/slurm-hetero-runc run %n.%j.%s.%t -b %b"' \
        in files["oci.conf"]
