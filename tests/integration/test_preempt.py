"""Preemption by tier on the real cluster: a silver job that checkpoints on SIGTERM runs; a
diamond job needs its node; after silver's minimum run the silver job gets SIGTERM and its
grace, checkpoints, is requeued; the diamond job runs; the silver job resumes from its
checkpoint and finishes with every step done exactly once."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest

from slurm_hetero.checkpoint.fence import CheckpointDir
from slurm_hetero.conf.render import Profile, render_site
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.site import Site, load_site_text
from slurm_hetero.slurm.jobs import sacct_jobs, submit, wait_done
from slurm_hetero.slurm.parse import parse_slurm_time

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NODE = "cpu-x86-01"
STEPS = 400
GRACE_S, MIN_RUN_S = 15, 10

# The job: a running sum over STEPS steps, held in memory and checkpointed only when Slurm
# says so (SIGTERM to the srun step): a step done after the last checkpoint would be done
# again by the next incarnation, so "every step exactly once" shows the signal, the grace
# and the checkpoint all worked. After checkpointing it waits for Slurm to requeue it (a
# step that ended by itself would end the job: COMPLETED, never requeued).
BODY = r"""
import os, signal, sys, time
from pathlib import Path
from slurm_hetero.checkpoint import Checkpointer
folder, total = sys.argv[1], int(sys.argv[2])
ck = Checkpointer(folder)
n, acc = map(int, Path(ck.resume).read_text().split()) if ck.resume else (0, 0)
restart = os.environ.get("SLURM_RESTART_COUNT") or "0"
log = open(os.path.join(folder, "log-" + restart), "a", buffering=1)
log.write("resume %d %d %.3f\n" % (n, acc, time.time()))
terms = []
signal.signal(signal.SIGTERM, lambda *_: terms.append(time.time()))
def save():
    with ck.writing() as tmp:
        Path(tmp).write_text("%d %d" % (n, acc))
while n < total:
    if terms:
        save()
        log.write("checkpoint %d %.3f %.3f\n" % (n, terms[0], time.time()))
        while len(terms) < 2:  # the second SIGTERM comes with the requeue, at the grace's end
            time.sleep(0.1)
        log.write("leaving %.3f\n" % time.time())
        sys.exit(0)
    n += 1
    acc += n
    log.write("step %d\n" % n)
    time.sleep(0.5 if restart == "0" else 0.02)
save()
log.write("done %d %d\n" % (n, acc))
"""


def qos_rows(c: Cluster) -> dict[str, dict[str, str]]:
    fields = ["Name", "GraceTime", "PreemptExemptTime", "PreemptMode", "GrpTRES", "Preempt"]
    out = c.runner.out(["sacctmgr", "-n", "-P", "show", "qos", "format=" + ",".join(fields)])
    return {r.split("|")[0]: dict(zip(fields[1:], r.split("|")[1:], strict=True))
            for r in out.splitlines() if r}


def silver_line(site: Site) -> list[str]:
    text = render_site(site, Profile())["qos.sacctmgr"]
    line = next(ln for ln in text.splitlines() if "modify qos where name=silver " in ln)
    return shlex.split(line)


def test_demo_tiers_applied(cluster: Cluster, demo_site: Site) -> None:
    """cluster up applied the demo's grace, minimum run and limits, GrpTRES included."""
    rows = qos_rows(cluster)
    assert (rows["silver"]["GraceTime"], rows["silver"]["PreemptExemptTime"]) == ("00:01:00", "00:02:00")
    assert (rows["gold"]["GraceTime"], rows["gold"]["PreemptExemptTime"]) == ("00:02:00", "00:10:00")
    diamond = next(q for q in demo_site.qos if q.name == "diamond")
    assert set(rows["diamond"]["GrpTRES"].split(",")) == {f"{k}={v}" for k, v in diamond.grp_tres}
    # ... and slurmctld enforces them: its view of the QoS has the GRES limits too.
    ctld = cluster.runner.out(["scontrol", "show", "assoc_mgr", "flags=qos", "qos=diamond"])
    assert "gres/gpu:h100=4(0)" in ctld and "cpu=636(0)" in ctld, ctld


def test_diamond_preempts_silver_which_resumes_from_its_checkpoint(
        cluster: Cluster, demo_site: Site, tmp_path: Path) -> None:
    c = cluster
    # A test variant of the demo: silver's grace and minimum run made short, rendered the
    # way the site file renders, applied to the running cluster and put back afterwards.
    demo_text = (ROOT / "site" / "demo" / "site.yaml").read_text()
    fast_text = demo_text.replace("grace_time: 60s, min_run: 2min",
                                  f"grace_time: {GRACE_S}s, min_run: {MIN_RUN_S}s")
    assert fast_text != demo_text
    folder = tmp_path / "ckpt"
    folder.mkdir()
    script = tmp_path / "job.py"
    script.write_text(BODY)
    ids: list[int] = []
    c.runner.run(silver_line(load_site_text(fast_text, "fast.yaml")))
    try:
        assert qos_rows(c)["silver"]["GraceTime"] == f"00:00:{GRACE_S}"
        time.sleep(1)  # slurmdbd pushes the change to slurmctld
        silver = submit(c.runner, ["--qos=silver", "-p", "cpu", "-w", NODE, "--exclusive", "--requeue",
                                   "-o", str(tmp_path / "silver-%j.txt")],
                        f"exec srun {sys.executable} {script} {folder} {STEPS}")
        ids.append(silver)
        first = folder / "log-0"
        assert wait_until(lambda: first.exists() and first.read_text().count("step") >= 3, 60), \
            c.runner.out(["scontrol", "show", "job", str(silver)])
        diamond = submit(c.runner, ["--qos=diamond", "-p", "cpu", "-w", NODE, "--exclusive",
                                    "-o", str(tmp_path / "diamond-%j.txt")], "sleep 5")
        ids.append(diamond)
        # Silver is requeued (pending again, restart 1) once its minimum run and grace are over.
        assert wait_until(lambda: "Restarts=1" in c.runner.out(["scontrol", "show", "job", str(silver)]),
                          150), (first.read_text()[-300:], c.runner.out(["scontrol", "show", "job",
                                                                         str(diamond)]))
        # A requeued batch job waits out the credential lifetime (120 s) before it may start
        # again; release it once it is back to PENDING (slurmctld sets the begin time when
        # the old incarnation has finished completing): it still pends while diamond runs.
        assert wait_until(lambda: c.runner.out(["squeue", "-h", "-j", str(silver), "-o", "%T"]).strip()
                          == "PENDING", 90), c.runner.out(["scontrol", "show", "job", str(silver)])
        c.runner.run(["scontrol", "update", f"JobId={silver}", "StartTime=now"])
        wait_done(c.runner, [diamond], timeout=120)
        wait_done(c.runner, [silver], timeout=180)
    finally:
        c.runner.run(["scancel", *map(str, ids)], check=False)
        c.runner.run(silver_line(demo_site))
    log0 = (folder / "log-0").read_text().splitlines()
    log1 = (folder / "log-1").read_text().splitlines()
    started = float(log0[0].split()[3])
    ck = next(ln.split() for ln in log0 if ln.startswith("checkpoint"))
    checkpointed_at, term_at, saved_at = int(ck[1]), float(ck[2]), float(ck[3])
    # The minimum run held the preemption back; the checkpoint came at once on SIGTERM.
    assert term_at - started >= MIN_RUN_S - 1, (started, term_at)
    assert saved_at - term_at < 2
    rows = sacct_jobs(c.runner, [silver, diamond], ["JobID", "State", "Start", "End", "QOS"])
    d_start = parse_slurm_time(rows[diamond]["Start"])
    assert d_start is not None
    # The diamond job started only after silver's grace (whole seconds in sacct).
    assert d_start >= term_at + GRACE_S - 2, (term_at, rows[diamond])
    assert rows[diamond]["State"] == "COMPLETED" and rows[silver]["State"] == "COMPLETED", rows
    # Resumed from the checkpoint; every step done exactly once across both incarnations.
    assert log1[0].split()[1] == str(checkpointed_at)
    steps = [int(ln.split()[1]) for ln in log0 + log1 if ln.startswith("step")]
    assert steps == list(range(1, STEPS + 1))
    assert log1[-1] == f"done {STEPS} {STEPS * (STEPS + 1) // 2}"
    latest = CheckpointDir(str(folder)).latest()
    assert latest and Path(latest).read_text() == f"{STEPS} {STEPS * (STEPS + 1) // 2}"
    assert wait_until(lambda: c.nodes()[NODE].state in ("idle", "mixed"), 60), c.nodes()[NODE]
    # Idle is not gone: the next tests and the session's leftover check expect no slurmstepd
    # of these jobs.
    assert wait_until(lambda: not any(c.stepds(j) for j in ids), 30), [c.stepds(j) for j in ids]


def test_sbatch_tells_the_user_what_the_tier_allows(cluster: Cluster) -> None:
    from slurm_hetero.slurm.commands import sbatch_wrap_argv

    r = cluster.runner.run(sbatch_wrap_argv(["--tier=silver", "-o", "/dev/null"], "true"))
    assert "hetero: tier silver: preemptible by diamond, gold after 2m of run time" in r.stderr, r.stderr
    wait_done(cluster.runner, [int(r.stdout.strip().split(";")[0])])
