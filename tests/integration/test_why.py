"""`slurm-hetero why` on the real cluster: root fills the H100 pool, an unprivileged user's
H100 job waits; `why`, run with that user's Slurm commands and identity, names Slurm's
reason, the job holding the pool and a free model the site's --accel=nvidia allows; the
user may not ask about root's job; the suggestion, submitted as given, starts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hetero.cli import main
from slurm_hetero.devcluster import Cluster
from slurm_hetero.devcluster.procs import wait_until
from slurm_hetero.errors import InputError
from slurm_hetero.reports.why import Caller, QJob, parse_queue, why_job
from slurm_hetero.site import Site
from slurm_hetero.slurm.jobs import submit
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import SQUEUE_JSON_ARGV
from tests.integration.conftest import SlurmUser

pytestmark = pytest.mark.integration


def queued(runner: Runner, job_id: int) -> QJob | None:
    return next((j for j in parse_queue(runner.out(SQUEUE_JSON_ARGV)) if j.job_id == job_id), None)


def state_is(runner: Runner, job_id: int, *states: str) -> bool:
    j = queued(runner, job_id)
    return j is not None and j.state in states


def test_why_names_the_holder_and_a_free_model_that_then_starts(
        cluster: Cluster, slurm_user: SlurmUser, demo_site: Site) -> None:
    root, user = cluster.runner, slurm_user.runner
    me = Caller(slurm_user.uid, slurm_user.name)
    ids: list[int] = []
    try:
        filler = submit(root, ["--gres=gpu:h100:8", "-t", "10", "-J", "why-fill", "-o", "/dev/null"], "sleep 300")
        ids.append(filler)
        assert wait_until(lambda: state_is(root, filler, "RUNNING"), 20, 0.5)
        waiting = submit(user, ["--gres=gpu:h100:2", "-t", "5", "-J", "why-wait", "-o", "/dev/null"], "true")
        ids.append(waiting)

        def reason() -> str:
            j = queued(user, waiting)
            return j.reason if j else ""

        assert wait_until(lambda: reason() == "Resources", 30, 0.5), reason()

        w = why_job(user, str(waiting), demo_site, caller=me)
        assert w.reason is not None and w.reason.code == "Resources", w.as_dict()
        pool = w.pool
        assert pool is not None and pool["key"] == "h100@x86_64" and pool["free"] == 0
        assert [(h["job"], h["devices"]) for h in pool["running"]] == [(filler, 8)]
        assert w.estimates["ours"] is not None  # the filler's 10-minute limit frees the pool
        models = [s for s in w.suggestions if s.kind == "model"]
        assert models, w.as_dict()
        first = models[0]
        assert first.options[0].startswith("--accel=") and "--accel=nvidia:2" in first.what
        model = first.options[0].removeprefix("--accel=").split(":")[0]
        assert model in {"v100", "a100-80gb"}  # the free NVIDIA models with 2 per node

        with pytest.raises(InputError, match="another user's job"):
            why_job(user, str(filler), demo_site, caller=me)

        # Root (the CLI as this process) sees the user's job; --json says the same.
        r: Any = CliRunner().invoke(main, ["why", str(waiting), "--json"],
                                    env={"SLURM_CONF": str(cluster.conf)})
        assert r.exit_code == 0, r.output
        doc = json.loads(r.output)
        assert doc["reason"]["code"] == "Resources" and doc["pool"]["running"][0]["job"] == filler
        assert doc["suggestions"][0]["options"] == list(first.options)

        # Apply it as the user would: cancel the waiting job, submit with the suggested options.
        user.run(["scancel", str(waiting)])
        moved = submit(user, [*first.options, "-t", "5", "-J", "why-moved", "-o", "/dev/null"], "sleep 2")
        ids.append(moved)
        assert wait_until(lambda: not state_is(user, moved, "PENDING"), 30, 0.5), queued(user, moved)
        j = queued(root, moved)  # root: the admin comment holds the bridge's choice
        assert j is not None and j.state in ("RUNNING", "COMPLETING", "COMPLETED"), j
        assert j.comment.get("model") == model
    finally:
        root.run(["scancel", *map(str, ids)], check=False)
