"""What the container wrapper adds to a job's start: start-to-first-line, wrapper vs plain runc.

Both paths run the same busybox bundle (the x86_64/cpu variant of busybox:1.35), in one run,
interleaved so that machine load hits both alike:

1. direct: `python -I -S oci_run.py run ...` (as oci.conf starts it: reads the node
   config, asks slurmctld for a real job's allocation, writes config.json, execs runc)
   against `runc run` on a static config.json written once;
2. through Slurm: `srun --container=<stub>` with the generated oci.conf against
   `srun --container=<variant bundle>` with an oci.conf whose RunTimeRun is plain runc
   (slurmstepd re-reads oci.conf for every step).

Boots its own demo cluster in a temp folder (root, Debian packages). Prints figures only.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from slurm_hetero.containers.bundle import busybox_variants
from slurm_hetero.devcluster import Cluster
from slurm_hetero.site import load_site
from slurm_hetero.slurm.jobs import submit

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "site" / "demo" / "site.yaml"
ENTRY = ROOT / "slurm_hetero" / "containers" / "oci_run.py"
NODE = "cpu-x86-01"
REPEAT = 20


def first_line(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds from start to the first line on stdout (the process then runs to its end)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    line = p.stdout.readline()
    took = time.perf_counter() - t0
    _, err = p.communicate(timeout=60)
    if line.strip() != "first":
        raise SystemExit(f"{argv[0]}: expected 'first', got {line!r}; stderr: {err[-500:]}")
    return took


def slurm_like_config(stub: Path, variant: Path) -> dict[str, Any]:
    """What slurmstepd writes into the step's spool folder before RunTimeRun (22.05 shape)."""
    return {"ociVersion": "1.0.2", "root": {"path": f"{stub}/rootfs", "readonly": True},
            "process": {"args": ["echo", "first"], "cwd": "/", "terminal": False,
                        "env": ["PATH=/bin", f"SLURM_CONTAINER={stub}"]},
            "mounts": []}


def summary(xs: list[float]) -> str:
    xs = sorted(xs)
    p90 = xs[int(0.9 * (len(xs) - 1))]
    return f"median {statistics.median(xs) * 1000:6.1f} ms   p90 {p90 * 1000:6.1f} ms"


def main() -> None:
    site = load_site(DEMO)
    with tempfile.TemporaryDirectory(prefix="bench-oci-") as d:
        c = Cluster(Path(d) / "demo")
        c.up(site, log=lambda *_: None)
        try:
            images = c.workdir / "images"
            busybox_variants(site, str(images))
            stub = images / "busybox" / "1.35"
            variant = stub / "x86_64-cpu"
            runc_root = str(c.run / "runc")
            # A real job on NODE, so the wrapper's scontrol query is the one jobs make.
            held = submit(c.runner, ["-w", NODE, "-o", "/dev/null"], "sleep 600")
            while c.runner.out(["squeue", "-h", "-j", str(held), "-o", "%t"]).strip() != "R":
                time.sleep(0.2)

            static = Path(d) / "static"
            static.mkdir()
            cfg = json.loads((variant / "config.json").read_text())
            cfg["root"]["path"] = str(variant / "rootfs")
            cfg["process"]["args"] = ["echo", "first"]
            (static / "config.json").write_text(json.dumps(cfg))
            wrapper = [sys.executable, "-I", "-S", str(ENTRY), "run", "--conf",
                       str(c.etc / "hetero-containers.json"), "--node", NODE, "--job", str(held),
                       "--runc-root", runc_root]
            direct_wrapper: list[float] = []
            direct_runc: list[float] = []
            for i in range(REPEAT):
                spool = Path(d) / f"spool-{i}"  # slurmstepd's per-step folder (%b)
                spool.mkdir()
                (spool / "config.json").write_text(json.dumps(slurm_like_config(stub, variant)))
                direct_wrapper.append(first_line(
                    [*wrapper, "--bundle", str(spool), "--id", f"bench-w{i}"], env=c.runner.env()))
                direct_runc.append(first_line(["runc", "--root", runc_root, "run", "--bundle", str(static),
                                               f"bench-r{i}"]))

            generated = (c.etc / "oci.conf").read_text()
            plain = "\n".join(ln for ln in generated.splitlines() if not ln.startswith("RunTimeRun="))
            plain += f'\nRunTimeRun="/usr/sbin/runc --root {runc_root} run %n.%j.%s.%t -b %b"\n'
            srun = ["srun", "-w", NODE, "--overlap", f"--jobid={held}"]
            env = c.runner.env()
            slurm_wrapper: list[float] = []
            slurm_runc: list[float] = []
            for _ in range(REPEAT // 2):
                (c.etc / "oci.conf").write_text(generated)
                slurm_wrapper.append(first_line([*srun, f"--container={stub}", "echo", "first"], env))
                (c.etc / "oci.conf").write_text(plain)
                slurm_runc.append(first_line([*srun, f"--container={variant}", "echo", "first"], env))
            (c.etc / "oci.conf").write_text(generated)
        finally:
            c.down(log=lambda *_: None)
            shutil.rmtree(Path(d) / "static", ignore_errors=True)

    print(f"container start to first line, {REPEAT} runs each (busybox:1.35 x86_64/cpu on {NODE}):")
    print(f"  direct   plain runc, static config.json:  {summary(direct_runc)}")
    print(f"  direct   slurm-hetero wrapper + runc:     {summary(direct_wrapper)}")
    added = statistics.median(direct_wrapper) - statistics.median(direct_runc)
    print(f"  direct   added by the wrapper:            {added * 1000:6.1f} ms (median; target <= 150 ms)")
    print(f"  via srun plain runc oci.conf:             {summary(slurm_runc)}")
    print(f"  via srun generated oci.conf (wrapper):    {summary(slurm_wrapper)}")
    added_srun = statistics.median(slurm_wrapper) - statistics.median(slurm_runc)
    print(f"  via srun added by the wrapper:            {added_srun * 1000:6.1f} ms (median)")


if __name__ == "__main__":
    main()
