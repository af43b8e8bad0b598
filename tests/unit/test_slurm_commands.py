"""Command builders of slurm/commands.py: job ids are checked, nothing from a job becomes
an option, and each builder gives a list the caller may extend without changing the next."""

from __future__ import annotations

import pytest

from slurm_hetero.slurm import commands as c
from slurm_hetero.slurm.parse import SACCT_DELIMITER


def test_job_ids_accept_plain_array_and_het_ids() -> None:
    assert c.job_ids([12, "13", "14_2", "15+1"]) == ["12", "13", "14_2", "15+1"]


@pytest.mark.parametrize("bad", ["--user=root", "12 13", "", "12,13", "1e3", "-1", "12_", "x"])
def test_job_ids_refuse_anything_else(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm job id"):
        c.job_ids(["1", bad])


def test_release_is_one_rpc_for_many_ids() -> None:
    assert c.release_argv(["3", "4", "5"]) == ["scontrol", "release", "3,4,5"]
    with pytest.raises(ValueError):
        c.release_argv(["3", "4,--help"])


def test_cancel_and_lists() -> None:
    assert c.cancel_argv([7, 8]) == ["scancel", "7", "8"]
    assert c.cancel_user_argv("root") == ["scancel", "--full", "--user=root"]
    assert c.sacctmgr_list_argv("qos", "name") == ["sacctmgr", "-i", "-n", "-P", "list", "qos", "format=name"]


def test_builders_return_fresh_lists() -> None:
    a = c.sinfo_nodes_argv()
    a.append("--extra")
    assert "--extra" not in c.sinfo_nodes_argv()


def test_sacct_ended_argv_uses_the_unit_separator() -> None:
    argv = c.sacct_ended_argv("2026-01-01T00:00:00", "2026-01-02T00:00:00", ["JobID", "State"], ["CD", "F"])
    assert f"--delimiter={SACCT_DELIMITER}" in argv
    assert argv[argv.index("-s") + 1] == "CD,F" and argv[argv.index("-o") + 1] == "JobID,State"
